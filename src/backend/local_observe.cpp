// What a look at a Session's files says (local_backend.hpp, Observe): session.json (the backends'
// record), runtime.json (the runtime's own) and whether its process runs, folded into the phase the
// backend reports. The rules are docs/backends.md's "Phases".
#include <algorithm>

#include "backend/local_backend.hpp"
#include "backend/local_process.hpp"

namespace sessionturn::local {
namespace {

// Whether session.json needs rewriting to show what a look found. The last activity alone does not
// count: runtime.json has it (every runtime carries it over from the run before), and a look folds the
// later of the two in, so rewriting session.json after every turn (a new file each time) bought
// nothing; it is written with the rest when the phase changes.
bool SameView(const SessionRecord& a, const SessionRecord& b) {
  return a.phase == b.phase && a.suspended == b.suspended && a.message == b.message;
}

// The phase, reason and message that follow from the files (the record's own fields are only what
// a backend saw last).
void Derive(const Core& core, const SessionPaths& paths, const Result<RuntimeRecord>& rt, Observation& o) {
  SessionRecord& r = o.record;
  const Liveness& live = o.live;
  const bool ended_cleanly = rt && !rt->exit.empty() && (live.pid == 0 || rt->pid == live.pid);
  if (r.suspended == SuspendReason::owner) {
    r.phase = SessionPhase::suspended;
    r.message = live.alive ? "suspended by its owner (its runtime is stopping); Resume lifts it"
                           : "suspended by its owner; Resume lifts it";
  } else if (live.serving) {
    r.phase = SessionPhase::ready;
    r.suspended = SuspendReason::none;
    r.message.clear();
  } else if (live.alive) {
    r.phase = SessionPhase::pending;
    r.suspended = SuspendReason::none;
    r.message = "its runtime is starting (pid " + std::to_string(live.pid) + ")";
  } else if (ended_cleanly && rt->exit == kExitIdle) {
    r.phase = SessionPhase::suspended;
    r.suspended = SuspendReason::idle;
    r.message = "suspended after " + std::to_string(core.options.suspend_after.count()) + "s idle at " +
                FormatTime(rt->exited) + "; the next WaitReady starts it again";
  } else if (ended_cleanly) {
    r.phase = SessionPhase::pending;
    r.suspended = SuspendReason::none;
    r.message = "its runtime was stopped at " + FormatTime(rt->exited) + "; the next WaitReady starts it";
  } else if (!o.ever_started) {
    r.phase = SessionPhase::pending;
    r.suspended = SuspendReason::none;
    r.message = "not started yet; the next WaitReady starts its runtime";
  } else if (rt && rt->in_process && !core.host->in_process()) {
    r.phase = SessionPhase::pending;
    r.suspended = SuspendReason::none;
    r.message = "its runtime was hosted in process " + std::to_string(rt->pid) +
                " (in-process mode), which has ended; the next WaitReady starts it";
  } else {
    // Its process is gone and it left no record of a clean exit: it crashed or was killed.
    const long pid = rt ? rt->pid : 0;
    std::string tail = LogTail(paths.log);
    r.phase = SessionPhase::failed;
    r.suspended = SuspendReason::none;
    r.message =
        "its runtime" + (pid > 0 ? " (pid " + std::to_string(pid) + ")" : std::string()) +
        " ended unexpectedly; the next WaitReady restarts it" +
        (tail.empty() ? std::string(" (runtime.log is empty)") : "; the last lines of " + paths.log + ":\n" + tail);
  }
  if (rt && rt->last_activity > r.last_activity) r.last_activity = rt->last_activity;
  if (live.last_activity > r.last_activity) r.last_activity = live.last_activity;
}

void FillInfo(const Core& core, const SessionPaths& paths, const Result<RuntimeRecord>& rt, Observation& o) {
  const SessionRecord& r = o.record;
  SessionInfo& info = o.info;
  info.name = r.name;
  info.phase = r.phase;
  info.suspended = r.phase == SessionPhase::suspended ? r.suspended : SuspendReason::none;
  info.message = r.message;
  info.created = r.created;
  info.last_activity = r.last_activity == WallClock::time_point{} ? r.created : r.last_activity;
  info.labels = r.labels;
  info.annotations = r.annotations;
  info.details["dir"] = paths.dir;
  info.details["socket"] = paths.socket;
  info.details["log"] = paths.log;
  info.details["provider"] = r.provider;
  info.details["workdir"] = r.workdir;
  if (o.live.alive) info.details["pid"] = std::to_string(o.live.pid);
  if (info.suspended == SuspendReason::idle && rt) info.details["suspended_at"] = FormatTime(rt->exited);
  (void)core;
}

}  // namespace

Error Core::Cancelled(std::string_view what) const {
  return Error(Errc::cancelled, std::string(what) + " was cancelled: its LocalBackend was destroyed");
}

Result<Observation> Observe(Core& core, const std::string& name, const SessionLock* lock) {
  const SessionPaths paths = core.Paths(name);
  auto record = core.session_records.Read(paths.session_file);
  if (!record) {
    if (record.error().code == Errc::not_found)
      return Fail(Errc::not_found, "there is no Session " + name + " in " + core.options.state_dir);
    return Fail(record.error());
  }
  Observation o;
  o.record = *record;
  const Result<RuntimeRecord> rt = ReadRuntimeRecord(paths.status_file);
  o.live = core.host->Check(paths, rt);
  if (rt) o.runtime = *rt;
  o.ever_started = rt.has_value() || ReadPidFile(paths.pid_file).has_value();
  Derive(core, paths, rt, o);
  FillInfo(core, paths, rt, o);
  if (lock != nullptr && lock->held() && !SameView(o.record, *record)) {
    // Keep session.json's view current for anyone reading it; a failure here changes nothing reported.
    if (auto st = WriteSessionRecord(paths.session_file, o.record, false);
        !st && core.context.ShouldLog(LogLevel::warning))
      core.context.Log(LogLevel::warning, "local backend: " + st.error().message);
  }
  return o;
}

SessionInfo CorruptInfo(const Core& core, const std::string& name, const Error& error) {
  SessionInfo info;
  info.name = name;
  info.phase = SessionPhase::failed;
  info.message = error.message;
  info.details["dir"] = core.Paths(name).dir;
  return info;
}

}  // namespace sessionturn::local
