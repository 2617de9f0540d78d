// Where Sessions live: a cluster (KubernetesBackend, over sessions.hpp) or this machine
// (LocalBackend: one local runtime process per Session, state on disk). The router and the CLI talk
// to a SessionBackend and never know which; moving a bot from one machine to a cluster is a flag.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/session_driver.hpp"

namespace sessionturn {

// The phases a backend reports, the cluster's (Kelos Session status.phase) for both backends.
enum class SessionPhase { pending, ready, suspended, failed };
std::string_view ToString(SessionPhase phase) noexcept;  // "Pending", "Ready", "Suspended", "Failed"

// Why a Session is suspended. Only an idle suspension is lifted by WaitReady; the owner's is the
// owner's to lift (Resume), as in a cluster.
enum class SuspendReason { none, idle, owner };
std::string_view ToString(SuspendReason reason) noexcept;  // "", "idle", "owner"

// What to create. Labels and annotations go on the Session as they are. `parameters` are the
// backend's template parameters:
//   LocalBackend:      "provider" (a provider spec: echo, script:FILE, command:CMD, claude-code[:...]; default the
//                      backend's), "workdir" (the Session's working directory; default
//                      <root>/sessions/<name>/workspace)
//   KubernetesBackend: none yet (the template is the backend's); unknown keys are refused.
// An unknown parameter is refused with Errc::invalid_argument naming it.
struct SessionSpec {
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> parameters;
};

struct SessionInfo {
  std::string name;
  SessionPhase phase = SessionPhase::pending;
  SuspendReason suspended = SuspendReason::none;  // set when phase is suspended
  std::string message;                             // why: a failure's text, the last log lines, ...
  std::chrono::system_clock::time_point created{};
  std::chrono::system_clock::time_point last_activity{};  // the last turn; created when none yet
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  // Backend-specific: "pod" (Kubernetes, when Ready), "pid", "socket", "dir", "log", "provider", "workdir",
  // "suspended_at" (local; docs/backends.md).
  std::map<std::string, std::string> details;
};

struct EnsureResult {
  SessionInfo info;
  bool created = false;  // false: it was already there (and ours)
};

// Progress of a WaitReady, for a UI ("waking the Session..."). `stage` is one of "pending" (not
// there or not scheduled yet), "resuming" (an idle suspension is being lifted), "starting" (its
// runtime is starting), "ready".
using ReadyProgress = std::function<void(const SessionInfo& info, std::string_view stage)>;

// A Session that can take turns now.
struct ReadyTarget {
  // Connects to the Session's runtime. It resolves the Session again on every connect (a reconnect
  // after an idle suspension or a Pod restart reaches the new runtime) and, after a resume, the first
  // connection that saw the replay acknowledges it. Safe to keep for later turns.
  std::shared_ptr<Connector> connector;
  SessionInfo info;
  bool resumed = false;  // this wait lifted an idle suspension
};

template <typename T>
using BackendHandler = std::function<void(Result<T> result)>;
using BackendStatusHandler = std::function<void(Status status)>;

// Thread-safety: every method may be called from any thread. Handlers run on a worker of the
// backend's Context, never inline in the call (a stopped Context: at once, on the calling thread,
// with Errc::unavailable), and must not block. The blocking forms wait on the calling thread and
// return Errc::would_block on a Context worker. Destroy a backend before its Context; operations in
// flight then end with Errc::cancelled.
class SessionBackend {
 public:
  virtual ~SessionBackend() = default;

  virtual Context& GetContext() const noexcept = 0;
  // "local (/home/u/.local/state/sessionturn)", "kubernetes (namespace agents, spawner chat)".
  virtual std::string Describe() const = 0;

  // Creates the Session unless it exists. An existing Session owned by another owner (the
  // backend's owner label differs) is refused with Errc::forbidden naming that owner; an existing
  // one of ours is returned as it is (created=false; the spec is not re-applied).
  virtual void AsyncEnsure(std::string name, SessionSpec spec, BackendHandler<EnsureResult> handler) = 0;

  // Completes when the Session can take turns: resumes an idle-suspended one (reporting
  // "resuming"), starts its runtime when that is the backend's job, and hands back a connector.
  // Errors: Errc::not_found (no such Session and it did not appear before the deadline),
  // Errc::unavailable (suspended by its owner; the message says so), Errc::failed (phase Failed
  // that a restart did not cure, with its message), Errc::timeout, Errc::cancelled.
  virtual void AsyncWaitReady(std::string name, std::chrono::steady_clock::time_point deadline,
                              ReadyProgress progress, CancellationToken cancel,
                              BackendHandler<ReadyTarget> handler) = 0;

  virtual void AsyncGet(std::string name, BackendHandler<SessionInfo> handler) = 0;
  // `selector`: label equality terms "a=b,c=d" (the subset of Kubernetes selectors both backends
  // honour); empty: every Session the backend holds, whoever owns it (ownership is not a filter).
  virtual void AsyncList(std::string selector, BackendHandler<std::vector<SessionInfo>> handler) = 0;
  // The owner's suspension (phase Suspended, reason owner): its runtime is stopped, its state kept.
  virtual void AsyncSuspend(std::string name, BackendHandler<SessionInfo> handler) = 0;
  // Lifts the owner's suspension (the runtime starts again on the next WaitReady).
  virtual void AsyncResume(std::string name, BackendHandler<SessionInfo> handler) = 0;
  // Stops the runtime and removes the Session with its state. Errc::not_found when there is none.
  virtual void AsyncDelete(std::string name, BackendStatusHandler handler) = 0;
  // Sets (a value) or removes (nullopt) annotations.
  virtual void AsyncAnnotate(std::string name, std::map<std::string, std::optional<std::string>> annotations,
                             BackendHandler<SessionInfo> handler) = 0;

  // How long after a Session's last activity (a turn's end) it surely still serves, whatever its idle
  // policy: a caller that sent a turn this recently may send the next one to the same connector
  // without a WaitReady (the Router does; a connect that fails then falls back to WaitReady). Zero
  // (the default): the backend promises nothing, every turn waits for its Session.
  virtual std::chrono::milliseconds IdleGrace() const noexcept { return std::chrono::milliseconds{0}; }

  // Blocking forms (scripts, the CLI).
  Result<EnsureResult> Ensure(const std::string& name, const SessionSpec& spec);
  Result<ReadyTarget> WaitReady(const std::string& name, std::chrono::steady_clock::time_point deadline,
                                ReadyProgress progress = {}, CancellationToken cancel = {});
  Result<SessionInfo> Get(const std::string& name);
  Result<std::vector<SessionInfo>> List(const std::string& selector = {});
  Result<SessionInfo> Suspend(const std::string& name);
  Result<SessionInfo> Resume(const std::string& name);
  Status Delete(const std::string& name);
  Result<SessionInfo> Annotate(const std::string& name,
                               const std::map<std::string, std::optional<std::string>>& annotations);
};

// Session names are DNS labels on both backends: 1 to 63 of [a-z0-9-], starting and ending with
// a letter or digit. Errc::invalid_argument naming the name and the rule it breaks.
Status ValidateSessionName(std::string_view name);

// "a=b,c=d" -> {{a,b},{c,d}}; Errc::invalid_argument naming the term that is not key=value.
Result<std::map<std::string, std::string>> ParseLabelSelector(std::string_view selector);
bool MatchesSelector(const std::map<std::string, std::string>& labels,
                     const std::map<std::string, std::string>& selector);

// ---- LocalBackend ---------------------------------------------------------------------------------

// The label naming a Session's owner on the local backend (the cluster uses kelos.dev/sessionspawner).
inline constexpr std::string_view kLocalOwnerLabel = "sessionturn.dev/owner";
// Kelos's default idle policy: suspend after 30 minutes without a turn.
inline constexpr std::chrono::seconds kDefaultSuspendAfter{1800};

struct LocalBackendOptions {
  // The state root: <root>/sessions/<name>/ per Session (docs/backends.md). Created 0700 if missing.
  std::string state_dir;
  // The provider of Sessions whose SessionSpec names none: echo, script:FILE, command:CMD,
  // claude-code[:model=M,effort=E,permissions=skip|ask] (docs/local-runtime.md).
  std::string provider = "echo";
  // The agent program of claude-code Sessions: a path, or a name looked up on PATH. Empty: "claude"
  // on PATH. Construction fails naming it when a claude-code provider is asked for and it is missing.
  std::string agent_bin;
  // Idle policy: a runtime with no turn running or queued and no question open for this long stops
  // itself (phase Suspended, reason idle; the next WaitReady starts it again). 0: never.
  std::chrono::seconds suspend_after = kDefaultSuspendAfter;
  // A Session suspended (idle) for this long is deleted with its state by the backend's next pass
  // (at construction and on each List/Ensure). 0: never.
  std::chrono::seconds delete_after{0};
  // The owner label value put on created Sessions and checked by Ensure. Empty: no ownership check.
  std::string owner;
  // The runtime program. Empty: sessionturn-local-runtime next to the running executable, else on PATH.
  std::string runtime_program;
  // Host the runtimes in this process instead of child processes (tests, benchmarks with thousands
  // of Sessions): same behaviour, except that they end with the process.
  bool in_process = false;
  // Pass --allow-shell to the runtimes (`!` prompts run a shell in the workspace). Off by default.
  bool allow_shell = false;
  // How long a starting runtime may take to accept connections before WaitReady fails.
  std::chrono::milliseconds start_timeout{10'000};
};

// Errc::invalid_argument for unusable options (no state_dir, a bad provider spec), Errc::io_error
// when the root cannot be created.
Result<std::unique_ptr<SessionBackend>> MakeLocalBackend(Context& context, LocalBackendOptions options);

// The default state root: $XDG_STATE_HOME/sessionturn, else ~/.local/state/sessionturn.
std::string DefaultStateDir();

// ---- KubernetesBackend ----------------------------------------------------------------------------

struct KubernetesBackendOptions {
  std::string namespace_name;  // empty: the configuration's namespace
  // Where new Sessions come from, exactly one of:
  //   spawner:       a SessionSpawner in the namespace; its spec.sessionTemplate is the template and its
  //                  UID owns the Sessions (label kelos.dev/sessionspawner and an ownerReference);
  //   template_file: a Session template (JSON or YAML: metadata.labels/annotations and spec); the
  //                  Sessions are owned by `owner` (label kLocalOwnerLabel) when it is set.
  // Neither: Ensure refuses to create (existing Sessions can still be used).
  std::string spawner;
  std::string template_file;
  std::string owner;
  // The wait (timeout, idle resume, progress), REST retries, the exec container and command.
  SessionDriverOptions session;
};

// Sessions of a cluster over SessionClient, with one KubeClient (one connection pool) for all of
// them. Destroying it off a Context worker waits (up to 5 s) for the resume acknowledgements its
// connectors have in flight, so a program that exits after one turn leaves no resume unacknowledged. Errc::invalid_argument for unusable options (both or an unreadable template file, naming it).
Result<std::unique_ptr<SessionBackend>> MakeKubernetesBackend(Context& context, KubeConfig kube,
                                                              KubernetesBackendOptions options);

}  // namespace sessionturn
