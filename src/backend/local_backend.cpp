// LocalBackend: Sessions on this machine, one runtime each, state under a root directory
// (backend.hpp, docs/backends.md). This file holds the SessionBackend operations; what they share is in
// local_backend.hpp. File operations run on a Context worker (small files); the Session lock is taken
// without blocking (retried on a timer), and every wait for a runtime is a timer, never a sleep.
#include "backend/local_backend.hpp"

#include <sys/stat.h>

#include <filesystem>

#include <asio.hpp>

#include "backend/local_process.hpp"
#include "blocking.hpp"
#include "runtime/provider.hpp"

namespace sessionturn {
namespace local {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kProviderParameter = "provider";
constexpr std::string_view kWorkdirParameter = "workdir";
// Leftovers of a create or delete that a crash interrupted are removed by the first pass after this.
constexpr auto kLeftoverAge = std::chrono::minutes(1);

// A script path is resolved here: the runtime runs in the Session's working directory, not ours.
Result<std::string> ResolveProvider(const std::string& spec, const std::string& agent_bin) {
  std::string resolved = spec;
  if (spec.rfind("script:", 0) == 0 && spec.size() > 7 && spec[7] != '/') {
    std::error_code ec;
    resolved = "script:" + fs::absolute(spec.substr(7), ec).string();
  }
  runtime::ProviderOptions po;
  po.agent_bin = agent_bin;
  auto parsed = runtime::Provider::Parse(resolved, po);
  if (!parsed) return Fail(Errc::invalid_argument, parsed.error().message);
  return resolved;
}

Status CheckOwner(const Core& core, const SessionRecord& record) {
  const std::string& owner = core.options.owner;
  if (owner.empty()) return {};
  auto it = record.labels.find(std::string(kLocalOwnerLabel));
  if (it == record.labels.end() || it->second == owner) return {};
  return Fail(Errc::forbidden, "Session " + record.name + " belongs to owner \"" + it->second + "\" (label " +
                                   std::string(kLocalOwnerLabel) + "), not \"" + owner + "\"");
}

// Observe, folding what it sees into session.json when the lock is free at once (never waits for it).
Result<Observation> Look(Core& core, const std::string& name) {
  auto lock = SessionLock::TryAcquire(core.Paths(name).lock_file);
  return Observe(core, name, lock && lock->held() ? &*lock : nullptr);
}

// The delete_after pass: removes Sessions idle-suspended for that long (docs/backends.md says when it runs).
void DeleteExpired(Core& core, bool leftovers) {
  const std::string sessions = SessionsDir(core.options.state_dir);
  if (leftovers) {
    std::error_code ec;
    for (fs::directory_iterator it(sessions, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string base = it->path().filename().string();
      if (base.rfind(".creating-", 0) != 0 && base.rfind(".deleted-", 0) != 0) continue;
      std::error_code tec;
      const auto age = fs::file_time_type::clock::now() - fs::last_write_time(it->path(), tec);
      if (!tec && age > kLeftoverAge) RemoveTree(it->path().string());
    }
  }
  if (core.options.delete_after.count() <= 0) return;
  auto names = ListSessionNames(core.options.state_dir);
  if (!names) return;
  const auto cutoff = WallClock::now() - core.options.delete_after;
  for (const auto& name : *names) {
    auto lock = SessionLock::TryAcquire(core.Paths(name).lock_file);
    if (!lock || !lock->held()) continue;  // busy: someone is using it, so it is not idle
    auto seen = Observe(core, name, &*lock);
    if (!seen || seen->info.phase != SessionPhase::suspended || seen->info.suspended != SuspendReason::idle ||
        seen->live.alive || !seen->runtime || seen->runtime->exited > cutoff)
      continue;
    auto retired = RetireSessionDir(core.options.state_dir, name);
    lock->Release();
    if (!retired) continue;
    core.session_records.Forget(core.Paths(name).session_file);
    RemoveTree(*retired);
    if (core.context.ShouldLog(LogLevel::info))
      core.context.Log(LogLevel::info, "local backend: deleted Session " + name + ", idle-suspended since " +
                                           FormatTime(seen->runtime->exited) + " (delete_after " +
                                           std::to_string(core.options.delete_after.count()) + "s)");
  }
}

class LocalBackend final : public SessionBackend {
 public:
  explicit LocalBackend(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  ~LocalBackend() override {
    core_->closed.store(true);
    core_->host->StopAll();  // hosted runtimes end with the backend; processes live on
  }

  Context& GetContext() const noexcept override { return core_->context; }

  std::string Describe() const override {
    return std::string(core_->host->in_process() ? "local in-process (" : "local (") + core_->options.state_dir + ")";
  }

  // A runtime stops itself only after suspend_after without a turn (0: never).
  std::chrono::milliseconds IdleGrace() const noexcept override {
    const auto after = core_->options.suspend_after;
    return after.count() == 0 ? std::chrono::milliseconds(std::chrono::hours(24)) : std::chrono::milliseconds(after);
  }

  void AsyncEnsure(std::string name, SessionSpec spec, BackendHandler<EnsureResult> handler) override {
    Job<EnsureResult>("Ensure", std::move(handler), [core = core_, name = std::move(name), spec = std::move(spec)]() {
      return Ensure(*core, name, spec);
    });
  }

  void AsyncWaitReady(std::string name, std::chrono::steady_clock::time_point deadline, ReadyProgress progress,
                      CancellationToken cancel, BackendHandler<ReadyTarget> handler) override {
    if (auto st = ValidateSessionName(name); !st)
      return Report(std::move(handler), Result<ReadyTarget>(Fail(st.error())));
    local::WaitReady(core_, std::move(name), deadline, std::move(progress), std::move(cancel), std::move(handler));
  }

  void AsyncGet(std::string name, BackendHandler<SessionInfo> handler) override {
    Job<SessionInfo>("Get", std::move(handler), [core = core_, name = std::move(name)]() -> Result<SessionInfo> {
      if (auto st = ValidateSessionName(name); !st) return Fail(st.error());
      auto seen = Look(*core, name);
      if (!seen) return Fail(seen.error());
      return seen->info;
    });
  }

  void AsyncList(std::string selector, BackendHandler<std::vector<SessionInfo>> handler) override {
    Job<std::vector<SessionInfo>>("List", std::move(handler),
                                  [core = core_, selector = std::move(selector)]() { return List(*core, selector); });
  }

  void AsyncSuspend(std::string name, BackendHandler<SessionInfo> handler) override {
    Locked<SessionInfo>(
        std::move(name), std::move(handler),
        [](std::shared_ptr<Core> core, std::string name, SessionLock lock, BackendHandler<SessionInfo> done) {
          auto seen = Observe(*core, name, &lock);
          if (!seen) return done(Fail(seen.error()));
          SessionRecord record = seen->record;
          record.suspended = SuspendReason::owner;
          record.phase = SessionPhase::suspended;
          record.message = "suspended by its owner; Resume lifts it";
          if (auto st = WriteSessionRecord(core->Paths(name).session_file, record); !st) return done(Fail(st.error()));
          lock.Release();
          const long pid = seen->live.alive ? seen->live.pid : 0;
          StopRuntime(core, core->Paths(name), pid, [core, name, done = std::move(done)] {
            auto after = Look(*core, name);
            done(after ? Result<SessionInfo>(after->info) : Result<SessionInfo>(Fail(after.error())));
          });
        });
  }

  void AsyncResume(std::string name, BackendHandler<SessionInfo> handler) override {
    Locked<SessionInfo>(
        std::move(name), std::move(handler),
        [](std::shared_ptr<Core> core, std::string name, SessionLock lock, BackendHandler<SessionInfo> done) {
          auto seen = Observe(*core, name, &lock);
          if (!seen) return done(Fail(seen.error()));
          if (seen->record.suspended == SuspendReason::owner) {
            SessionRecord record = seen->record;
            record.suspended = SuspendReason::none;
            record.phase = SessionPhase::pending;
            record.message = "resumed by its owner; the next WaitReady starts its runtime";
            if (auto st = WriteSessionRecord(core->Paths(name).session_file, record); !st)
              return done(Fail(st.error()));
            seen = Observe(*core, name, &lock);
            if (!seen) return done(Fail(seen.error()));
          }
          done(seen->info);
        });
  }

  void AsyncDelete(std::string name, BackendStatusHandler handler) override {
    BackendHandler<bool> as_bool = [handler = std::move(handler)](Result<bool> r) {
      handler(r ? Status{} : Status(Fail(r.error())));
    };
    Locked<bool>(std::move(name), std::move(as_bool),
                 [](std::shared_ptr<Core> core, std::string name, SessionLock lock, BackendHandler<bool> done) {
                   const SessionPaths paths = core->Paths(name);
                   // A corrupt session.json does not stop a delete (it is one way out of it); the pid file says
                   // what runs. Otherwise mark it suspended first, so no one starts it while it stops.
                   if (auto record = ReadSessionRecord(paths.session_file)) {
                     record->suspended = SuspendReason::owner;
                     record->phase = SessionPhase::suspended;
                     record->message = "being deleted";
                     (void)WriteSessionRecord(paths.session_file, *record);
                   }
                   const Liveness live = core->host->Check(paths, ReadRuntimeRecord(paths.status_file));
                   lock.Release();
                   StopRuntime(core, paths, live.alive ? live.pid : 0, [core, name, done = std::move(done)]() mutable {
                     WithSessionLock(core, name, [core, name, done = std::move(done)](Result<SessionLock> again) {
                       if (!again)
                         return done(again.error().code == Errc::not_found ? Result<bool>(true)
                                                                           : Result<bool>(Fail(again.error())));
                       auto retired = RetireSessionDir(core->options.state_dir, name);
                       again->Release();
                       core->session_records.Forget(core->Paths(name).session_file);
                       if (!retired) {
                         return done(retired.error().code == Errc::not_found ? Result<bool>(true)
                                                                             : Result<bool>(Fail(retired.error())));
                       }
                       RemoveTree(*retired);
                       done(true);
                     });
                   });
                 });
  }

  void AsyncAnnotate(std::string name, std::map<std::string, std::optional<std::string>> annotations,
                     BackendHandler<SessionInfo> handler) override {
    Locked<SessionInfo>(std::move(name), std::move(handler),
                        [annotations = std::move(annotations)](std::shared_ptr<Core> core, std::string name,
                                                               SessionLock lock, BackendHandler<SessionInfo> done) {
                          auto seen = Observe(*core, name, &lock);
                          if (!seen) return done(Fail(seen.error()));
                          SessionRecord record = seen->record;
                          for (const auto& [key, value] : annotations) {
                            if (key.empty()) return done(Fail(Errc::invalid_argument, "an annotation key is empty"));
                            if (value)
                              record.annotations[key] = *value;
                            else
                              record.annotations.erase(key);
                          }
                          auto st = WriteSessionRecord(core->Paths(name).session_file, record);
                          if (!st) return done(Fail(st.error()));
                          seen = Observe(*core, name, &lock);
                          done(seen ? Result<SessionInfo>(seen->info) : Result<SessionInfo>(Fail(seen.error())));
                        });
  }

 private:
  template <typename T>
  void Report(BackendHandler<T> handler, Result<T> value) {
    blocking::ReportNow(core_->context, std::move(handler), std::move(value));
  }

  // Runs `fn` on a worker and reports its result.
  template <typename T>
  void Job(std::string what, BackendHandler<T> handler, std::function<Result<T>()> fn) {
    if (core_->context.Stopped()) {
      return handler(Fail(blocking::StoppedContextError("LocalBackend::" + what)));
    }
    core_->context.Post([core = core_, what = std::move(what), handler = std::move(handler), fn = std::move(fn)] {
      if (core->closed.load()) return handler(Fail(core->Cancelled("LocalBackend::" + what)));
      handler(fn());
    });
  }

  // Runs `fn(core, name, lock, handler)` on a worker once the Session's lock is held.
  template <typename T, typename Fn>
  void Locked(std::string name, BackendHandler<T> handler, Fn fn) {
    if (auto st = ValidateSessionName(name); !st) return Report(std::move(handler), Result<T>(Fail(st.error())));
    auto core = core_;
    WithSessionLock(core, name,
                    [core, name, handler = std::move(handler), fn = std::move(fn)](Result<SessionLock> lock) mutable {
                      if (!lock) return handler(Fail(lock.error()));
                      fn(core, name, std::move(*lock), std::move(handler));
                    });
  }

  static Result<EnsureResult> Ensure(Core& core, const std::string& name, const SessionSpec& spec) {
    if (auto st = ValidateSessionName(name); !st) return Fail(st.error());
    SessionRecord record;
    record.name = name;
    record.labels = spec.labels;
    record.annotations = spec.annotations;
    record.parameters = spec.parameters;
    record.provider = core.options.provider;
    const SessionPaths paths = core.Paths(name);
    record.workdir = paths.workspace;
    for (const auto& [key, value] : spec.parameters) {
      if (key == kProviderParameter) {
        auto provider = ResolveProvider(value, core.options.agent_bin);
        if (!provider) return Fail(Errc::invalid_argument, "Session " + name + ": " + provider.error().message);
        record.provider = *provider;
      } else if (key == kWorkdirParameter) {
        std::error_code ec;
        if (value.empty() || value.front() != '/' || !fs::is_directory(value, ec))
          return Fail(Errc::invalid_argument, "Session " + name + ": parameter workdir \"" + value +
                                                  "\" is not an absolute path of an existing directory");
        record.workdir = value;
      } else {
        return Fail(Errc::invalid_argument, "Session " + name + ": unknown parameter \"" + key +
                                                "\" (the local backend knows provider and workdir)");
      }
    }
    if (!core.options.owner.empty()) record.labels[std::string(kLocalOwnerLabel)] = core.options.owner;
    record.created = record.last_activity = WallClock::now();
    record.message = "not started yet; the next WaitReady starts its runtime";
    DeleteExpired(core, false);
    auto created = CreateSessionDir(core.options.state_dir, record, record.workdir == paths.workspace);
    if (!created) return Fail(created.error());
    auto seen = Look(core, name);
    if (!seen) return Fail(seen.error());
    if (!*created) {
      if (auto st = CheckOwner(core, seen->record); !st) return Fail(st.error());
    }
    return EnsureResult{seen->info, *created};
  }

  static Result<std::vector<SessionInfo>> List(Core& core, const std::string& selector) {
    auto wanted = ParseLabelSelector(selector);
    if (!wanted) return Fail(wanted.error());
    DeleteExpired(core, false);
    auto names = ListSessionNames(core.options.state_dir);
    if (!names) return Fail(names.error());
    std::vector<SessionInfo> out;
    out.reserve(names->size());
    for (const auto& name : *names) {
      auto seen = Look(core, name);
      if (!seen) {
        if (seen.error().code == Errc::not_found) continue;  // deleted meanwhile
        if (wanted->empty()) out.push_back(CorruptInfo(core, name, seen.error()));
        continue;
      }
      if (MatchesSelector(seen->info.labels, *wanted)) out.push_back(std::move(seen->info));
    }
    return out;
  }

  std::shared_ptr<Core> core_;
};

}  // namespace
}  // namespace local

Result<std::unique_ptr<SessionBackend>> MakeLocalBackend(Context& context, LocalBackendOptions options) {
  namespace fs = std::filesystem;
  if (options.state_dir.empty()) return Fail(Errc::invalid_argument, "LocalBackendOptions.state_dir is empty");
  if (options.suspend_after.count() < 0 || options.delete_after.count() < 0)
    return Fail(Errc::invalid_argument, "LocalBackendOptions.suspend_after and delete_after must not be negative");
  if (options.start_timeout.count() <= 0)
    return Fail(Errc::invalid_argument, "LocalBackendOptions.start_timeout must be positive");
  if (options.agent_bin.find('/') != std::string::npos) {
    std::error_code ec;
    options.agent_bin = fs::absolute(options.agent_bin, ec).string();  // runtimes start in their workspaces
  }
  auto provider = local::ResolveProvider(options.provider, options.agent_bin);
  if (!provider) return Fail(Errc::invalid_argument, "LocalBackendOptions.provider: " + provider.error().message);
  options.provider = *provider;
  std::error_code ec;
  options.state_dir = fs::absolute(options.state_dir, ec).lexically_normal().string();
  while (options.state_dir.size() > 1 && options.state_dir.back() == '/') options.state_dir.pop_back();
  if (!fs::exists(options.state_dir, ec)) {
    fs::create_directories(options.state_dir, ec);
    if (ec) return Fail(Errc::io_error, "cannot create the state root " + options.state_dir + ": " + ec.message());
    ::chmod(options.state_dir.c_str(), 0700);
  }
  fs::create_directories(local::SessionsDir(options.state_dir), ec);
  if (ec) return Fail(Errc::io_error, "cannot create " + local::SessionsDir(options.state_dir) + ": " + ec.message());

  local::HostConfig config;
  config.root = options.state_dir;
  config.suspend_after = options.suspend_after;
  config.allow_shell = options.allow_shell;
  config.agent_bin = options.agent_bin;
  auto core = std::make_shared<local::Core>(context, options);
  if (options.in_process) {
    core->host = local::MakeInProcessHost(config, [&context](LogLevel level, std::string_view message) {
      if (context.ShouldLog(level)) context.Log(level, "local runtime: " + std::string(message));
    });
  } else {
    auto program = local::FindRuntimeProgram(options.runtime_program);
    if (!program && program.error().code == Errc::invalid_argument) return Fail(program.error());
    // A program that is nowhere to be found matters only to the first start (a `list` needs none).
    if (program)
      config.program = *program;
    else
      config.program_error = program.error().message;
    core->host = local::MakeProcessHost(config);
  }
  std::unique_ptr<SessionBackend> backend = std::make_unique<local::LocalBackend>(core);
  if (!context.Stopped()) {
    context.Post([core] {
      if (!core->closed.load()) local::DeleteExpired(*core, true);
    });
  }
  return backend;
}

}  // namespace sessionturn
