// The LocalBackend's parts (backend.hpp, docs/backends.md): the state every operation shares (Core),
// how runtimes are hosted (RuntimeHost: child processes, or in this process), what a look at a
// Session's files says (Observe), the Session lock taken without blocking a worker, WaitReady and the
// connector a ReadyTarget carries.
//   local_backend.cpp   the SessionBackend operations and MakeLocalBackend
//   local_observe.cpp   Observe: session.json + runtime.json + the process -> SessionInfo
//   local_hosts.cpp     the two RuntimeHosts
//   local_wait.cpp      WaitReady (start on demand, poll until it serves) and the connector
//   local_store.cpp     files and records; local_process.cpp  processes and socket paths
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/local_store.hpp"
#include "sessionturn/backend.hpp"

namespace sessionturn::local {

// A Session lock held elsewhere is retried this often, on a timer (never by blocking a worker) ...
inline constexpr std::chrono::milliseconds kLockRetry{2};
// ... for this long: every holder only does file operations and a spawn, so this means a stuck process.
inline constexpr std::chrono::milliseconds kLockWait{10'000};
// After SIGTERM a runtime syncs its journal and exits within milliseconds; past this it gets SIGKILL.
inline constexpr std::chrono::milliseconds kStopGrace{5'000};
// How often a stop looks whether the runtime has gone.
inline constexpr std::chrono::milliseconds kStopPoll{10};
// A starting runtime is looked at after 1 ms, then at doubling intervals up to this: start-up takes
// 5-15 ms (most of it the journal's fdatasync of runtime.recovered), a look is a few file reads
// (~0.1 ms), and a cold start should not wait much past the moment the runtime serves.
inline constexpr std::chrono::milliseconds kStartPollMax{8};
// A Session that does not exist (yet) is looked for this often until the WaitReady deadline.
inline constexpr std::chrono::milliseconds kAbsentPoll{100};
// The in-process host looks at its runtimes' activity this often (idle policy, last activity), on a
// thread of its own.
inline constexpr std::chrono::milliseconds kInProcessTick{200};
// ... and records a runtime's last activity in its runtime.json at most this often (a look from this
// process asks the host, which knows it to the moment; the file is for other processes and the next
// start), ...
inline constexpr std::chrono::milliseconds kActivityRecordEvery{10'000};
// ... writing at most this many records per look, the rest on the next ones: 1,000 Sessions' records
// in one go took tens of milliseconds, and an idle runtime's stop waits behind them.
inline constexpr std::size_t kActivityRecordsPerTick = 32;

// A runtime as its host sees it.
struct Liveness {
  bool alive = false;    // its process (or hosted runtime) runs
  bool serving = false;  // ... and has bound its socket (its runtime.json names this run)
  long pid = 0;          // the pid its host knows of, alive or not (the pid file's; ours for a hosted
                         // one); 0 when there is none
  WallClock::time_point last_activity{};  // a hosted runtime's last turn event, as of now; the epoch
                                          // when its host does not know (a process: runtime.json has it)
};

// Where runtimes run. Start and Check are called with the Session's lock held.
class RuntimeHost {
 public:
  virtual ~RuntimeHost() = default;
  virtual Liveness Check(const SessionPaths& paths, const Result<RuntimeRecord>& record) = 0;
  // Starts the Session's runtime (returns once it is spawned; for a hosted one, once it serves).
  virtual Result<long> Start(const SessionPaths& paths, const SessionRecord& record) = 0;
  // Asks it to stop (SIGTERM, or Stop() for a hosted one). False when it was not running.
  virtual bool RequestStop(const SessionPaths& paths, long pid) = 0;
  // Still running after RequestStop? `dir` is the directory it was started in (it may have moved).
  virtual bool Running(const std::string& dir, long pid) = 0;
  virtual void Kill(const std::string& dir, long pid) = 0;
  // Stops every hosted runtime (the backend is going away); nothing for processes, which outlive it.
  virtual void StopAll() {}
  virtual bool in_process() const = 0;
};

struct HostConfig {
  std::string root;
  std::string program;        // the runtime program (processes); empty when it was not found
  std::string program_error;  // why not, for the first start that needs it
  std::chrono::seconds suspend_after{0};
  bool allow_shell = false;
  std::string agent_bin;  // --agent-bin of the runtimes (claude-code); empty: their default
};
std::unique_ptr<RuntimeHost> MakeProcessHost(HostConfig config);
std::unique_ptr<RuntimeHost> MakeInProcessHost(HostConfig config, LogSink log);

// What every operation of one backend shares; operations hold it, so it outlives the backend
// object while they finish (they then report Errc::cancelled).
struct Core {
  Context& context;
  LocalBackendOptions options;  // state_dir made absolute
  std::unique_ptr<RuntimeHost> host;
  std::atomic<bool> closed{false};
  SessionRecordCache session_records;  // session.json for Observe

  Core(Context& c, LocalBackendOptions o) : context(c), options(std::move(o)) {}
  SessionPaths Paths(const std::string& name) const { return PathsFor(options.state_dir, name); }
  Error Cancelled(std::string_view what) const;
};

// A look at one Session: its record, what its host says and what to report.
struct Observation {
  SessionRecord record;
  SessionInfo info;
  Liveness live;
  std::optional<RuntimeRecord> runtime;  // runtime.json, when there is a readable one
  bool ever_started = false;             // it has a pid file or a runtime record
};
// Reads the Session's files and asks its host. Errc::not_found when there is no such Session,
// Errc::io_error naming session.json when that is corrupt. With `lock` held, it also writes what it
// saw back into session.json when that changed (phase, reason, message).
Result<Observation> Observe(Core& core, const std::string& name, const SessionLock* lock);
// The info of a Session whose session.json cannot be read: Failed, naming the file (List shows it).
SessionInfo CorruptInfo(const Core& core, const std::string& name, const Error& error);

// Runs `then` on a worker with the Session's lock held (or its error: Errc::not_found when the
// Session is gone, Errc::unavailable when it stayed locked for kLockWait, Errc::cancelled when the
// backend went away). Retries a busy lock on a timer.
void WithSessionLock(std::shared_ptr<Core> core, std::string name, std::function<void(Result<SessionLock>)> then);

// Stops a runtime: RequestStop, then polls (on a timer) until it is gone, SIGKILL after kStopGrace.
void StopRuntime(std::shared_ptr<Core> core, SessionPaths paths, long pid, std::function<void()> done);

// WaitReady (local_wait.cpp). `progress` may be empty.
void WaitReady(std::shared_ptr<Core> core, std::string name, std::chrono::steady_clock::time_point deadline,
               ReadyProgress progress, CancellationToken cancel, BackendHandler<ReadyTarget> handler);
// The connector of a ReadyTarget: a unix connector to the Session's socket that, when a connect fails,
// makes sure the runtime runs (starting it again after an idle exit) and connects once more.
std::shared_ptr<Connector> MakeSessionConnector(std::shared_ptr<Core> core, std::string name);

}  // namespace sessionturn::local
