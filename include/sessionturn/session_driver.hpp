// A Driver for a Kelos Session in a cluster, in one call: wait until the Session is ready (waking it
// when its idle policy suspended it), connect through the Pod's exec subresource, and acknowledge the
// resume once a connection has seen the runtime's replay (PROTOCOL.md §5), which protects the Session
// from being suspended again at once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/kube_exec.hpp"
#include "sessionturn/sessions.hpp"

namespace sessionturn {

// The peers' readiness bound (PROTOCOL.md §6): a Session resuming from idle needs its Pod scheduled
// and its workspace mounted.
inline constexpr std::chrono::milliseconds kDefaultWaitReadyTimeout = std::chrono::minutes(10);

struct SessionDriverOptions {
  std::chrono::milliseconds wait_ready_timeout = kDefaultWaitReadyTimeout;
  WaitReadyOptions wait;  // resume_idle (default on), progress callback
  KubeClientOptions client;  // REST retries and timeouts for the wait and the acknowledgement
  std::string container = kKelosAgentContainer;
  std::vector<std::string> command = DefaultExecCommand();
  ConnectionLimits limits;
};

struct SessionDriver {
  std::unique_ptr<Driver> driver;  // over pods/exec to the Session's Pod, resolved again on every connect
  Session session;                 // as it was when it became ready
  std::string pod_name;
  // Non-empty when the wait asked for (or found) an idle resume: the driver's connector acknowledges
  // it after its first connection's history.end, with an asynchronous PATCH. Failures of the
  // acknowledgement are logged and retried on the next connection, never fatal to the turn.
  std::string resume_request;
};

// Blocks (not on a Context worker: Errc::would_block) until the Session `name` in `namespace_name`
// (empty: the configuration's namespace) is Ready, then returns a Driver for it. Errors are
// WaitReady's: Errc::failed (phase Failed), Errc::unavailable (suspended by its owner), Errc::timeout,
// not_found/unauthorized/forbidden from the API. The Context must outlive the returned Driver.
Result<SessionDriver> ForSession(Context& context, const KubeConfig& kube, std::string namespace_name,
                                 std::string name, SessionDriverOptions options = {});

// The connector of a Session: every AsyncConnect waits until the Session is ready (one list when it
// is; a watch and an idle resume request when it is not, bounded by options.wait_ready_timeout),
// then connects through pods/exec to its current Pod, so a turn after an idle suspension or a Pod
// restart reaches the new Pod. A resume the wait requested or found unacknowledged (and
// `resume_request`, from a wait the caller ran) is acknowledged after the first history.end of a
// connection made after it. For callers that run WaitReady themselves (progress UIs, the C ABI,
// Python); `ready.resume_request` is the one to acknowledge. Builds its own KubeClient on `context`.
std::shared_ptr<Connector> MakeSessionConnector(Context& context, const KubeConfig& kube,
                                                const std::string& namespace_name, const std::string& name,
                                                const ReadySession& ready, const SessionDriverOptions& options = {});
// The same over a KubeClient the caller shares between many Sessions (a backend): one connection
// pool for all of them. The connector keeps the client alive.
std::shared_ptr<Connector> MakeSessionConnector(Context& context, const KubeConfig& kube,
                                                std::shared_ptr<KubeClient> client, const std::string& namespace_name,
                                                const std::string& name, const std::string& resume_request,
                                                const SessionDriverOptions& options = {});

// The connector decorator the Session connector uses, for callers who build their own: `on_replayed`
// runs once, on the Context worker that read it, after the first connection made through `inner`
// delivered history.end. It must not block (start an asynchronous call instead).
std::shared_ptr<Connector> NotifyOnFirstReplay(Context& context, std::shared_ptr<Connector> inner,
                                               std::function<void()> on_replayed);

}  // namespace sessionturn
