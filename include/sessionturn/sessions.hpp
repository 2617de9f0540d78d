// Kelos Session objects (kelos.dev/v1alpha2) in a cluster: a typed view of a Session, a client for
// the operations a chat bot or operator needs (create, suspend, resume after an idle suspension,
// acknowledge, delete, watch), and WaitReady, which waits until a Session's Pod can be reached.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/kube.hpp"

namespace sessionturn {

inline constexpr std::string_view kSessionApiVersion = "kelos.dev/v1alpha2";
inline constexpr std::string_view kIdleResumeRequestAnnotation = "kelos.dev/session-idle-resume-request";
inline constexpr std::string_view kIdleResumeRequestTimeAnnotation = "kelos.dev/session-idle-resume-request-time";
inline constexpr std::string_view kIdleResumeAckAnnotation = "kelos.dev/session-idle-resume-acknowledgement";
inline constexpr std::string_view kIdleResumeAckTimeAnnotation = "kelos.dev/session-idle-resume-acknowledgement-time";
inline constexpr std::string_view kSpawnerLabel = "kelos.dev/sessionspawner";

// Readiness is polled this often when a watch is refused or drops (the peers' value, PROTOCOL.md §6).
inline constexpr std::chrono::seconds kReadyPollInterval{2};
// Optimistic-lock patches re-read and re-apply this many times on 409 Conflict before giving up.
inline constexpr int kConflictRetries = 5;

// A read-only view of one Session object.
struct Session {
  std::string name;
  std::string namespace_name;
  std::string uid;
  std::string resource_version;
  std::string phase;     // Pending, Ready, Suspended, Failed ("" before the controller saw it)
  std::string pod_name;  // set when Ready
  std::string message;   // status.message
  bool suspend = false;  // spec.suspend (owner's decision)
  std::string ready_reason;  // reason of condition Ready ("IdlePolicyTriggered", ...)
  std::string resume_request;      // annotation kelos.dev/session-idle-resume-request
  std::string resume_acknowledgement;  // annotation kelos.dev/session-idle-resume-acknowledgement
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  nlohmann::json raw;  // the whole object as the API server returned it

  static Result<Session> FromJson(const nlohmann::json& object);

  // phase Ready and a Pod name: a driver can connect.
  bool IsReady() const;
  // Suspended by its idle policy (a client may wake it): phase Suspended, spec.suspend not true,
  // condition Ready False with reason IdlePolicyTriggered.
  bool IsIdleSuspended() const;
  // Suspended through spec.suspend: only the owner may resume it.
  bool IsOwnerSuspended() const;
  bool IsFailed() const;
  // status.lastActivityTime, else metadata.creationTimestamp, as seconds since the epoch (0: neither).
  long long LastActivity() const;
  long long Created() const;  // metadata.creationTimestamp (0: none)
};

struct WaitReadyOptions {
  // Request a resume when the Session was suspended by its idle policy (else fail with Errc::unavailable).
  bool resume_idle = true;
  std::chrono::milliseconds poll_interval = kReadyPollInterval;
  // Called on a worker of the client's Context each time the observed Session changes: progress for
  // a UI ("resuming..."). May be empty. Must not block.
  std::function<void(const Session&)> on_update;
  // Cancelling ends the wait with Errc::cancelled.
  CancellationToken cancel;
};

struct ReadySession {
  std::string pod_name;
  Session session;
  // Non-empty when this wait asked for an idle resume (or found one pending): after the driver saw
  // history.end on the resumed Session, call AcknowledgeResume(name, resume_request).
  std::string resume_request;
};

template <typename T>
using SessionHandler = std::function<void(Result<T> result)>;
using SessionStatusHandler = std::function<void(Status status)>;

// Operations on the Sessions of one namespace, asynchronous on the KubeClient's Context with
// blocking forms built on them. Async handlers run on a worker of that Context and must not block;
// blocking forms refuse on one (Errc::would_block). Thread-safe. The KubeClient must outlive this
// object and every operation started through it (destroying the client cancels them).
class SessionClient {
 public:
  SessionClient(KubeClient& client, std::string namespace_name);

  const std::string& Namespace() const noexcept { return namespace_; }
  KubeClient& Client() const noexcept { return *client_; }

  void AsyncGet(const std::string& name, SessionHandler<Session> handler);
  void AsyncList(const std::string& label_selector, SessionHandler<std::vector<Session>> handler);
  void AsyncCreate(nlohmann::json object, SessionHandler<Session> handler);
  // The Session CreateFromSpawner creates, without creating it: the spawner's template, its UID
  // label and an ownerReference to the spawner (so the Session goes with it).
  void AsyncSpawnerSession(const std::string& spawner, const std::string& name,
                           std::map<std::string, std::string> extra_annotations, SessionHandler<nlohmann::json> handler);
  void AsyncCreateFromSpawner(const std::string& spawner, const std::string& name,
                              std::map<std::string, std::string> extra_annotations, SessionHandler<Session> handler);
  void AsyncDelete(const std::string& name, SessionStatusHandler handler);
  void AsyncSuspend(const std::string& name, SessionHandler<Session> handler);
  void AsyncResume(const std::string& name, SessionHandler<Session> handler);
  void AsyncRequestIdleResume(const std::string& name, SessionHandler<std::string> handler);
  void AsyncAcknowledgeResume(const std::string& name, const std::string& request, SessionStatusHandler handler);
  void AsyncAnnotate(const std::string& name, std::map<std::string, std::optional<std::string>> annotations,
                     SessionHandler<Session> handler);
  // DESIGN.md §5: completes once the Session is Ready with a Pod. Watches it (fieldSelector on its
  // name) and polls every poll_interval when a watch is refused or fails for good. NotFound keeps
  // waiting; Failed ends with Errc::failed, owner-suspended with Errc::unavailable (both carrying
  // status.message); idle-suspended requests a resume (options.resume_idle). Errc::timeout at the
  // deadline, Errc::cancelled through options.cancel.
  void AsyncWaitReady(const std::string& name, std::chrono::steady_clock::time_point deadline,
                      WaitReadyOptions options, SessionHandler<ReadySession> handler);

  // Blocking forms.
  Result<Session> Get(const std::string& name);
  Result<std::vector<Session>> List(const std::string& label_selector = {});
  // `object` is a Session (kind/apiVersion/namespace are filled in when missing).
  Result<Session> Create(nlohmann::json object);
  // A Session named `name` from SessionSpawner `spawner`'s spec.sessionTemplate (metadata labels
  // and annotations and spec), labelled kelos.dev/sessionspawner=<spawner UID> and owned by the
  // spawner (ownerReference). `extra_annotations` are added to the template's.
  Result<Session> CreateFromSpawner(const std::string& spawner, const std::string& name,
                                    const std::map<std::string, std::string>& extra_annotations = {});
  Status Delete(const std::string& name);
  Result<Session> Suspend(const std::string& name);  // spec.suspend: true
  Result<Session> Resume(const std::string& name);   // spec.suspend removed
  // PROTOCOL.md §5: sets a new UUID request (clearing request-time and the acknowledgement) unless
  // one is already present. Returns the request value in effect.
  Result<std::string> RequestIdleResume(const std::string& name);
  // Sets the acknowledgement to `request` and clears its time (after history.end was seen).
  Status AcknowledgeResume(const std::string& name, const std::string& request);
  // Sets (value) or removes (nullopt) annotations, guarded by resourceVersion, retried on 409.
  Result<Session> Annotate(const std::string& name,
                           const std::map<std::string, std::optional<std::string>>& annotations);
  // Watches this namespace's Sessions (see KubeClient::Watch); `handler` runs on the calling thread.
  Status Watch(const KubeWatchOptions& options, const std::function<bool(const std::string& type, const Session&)>& handler);
  Result<ReadySession> WaitReady(const std::string& name, std::chrono::steady_clock::time_point deadline,
                                 const WaitReadyOptions& options = {});

  std::string CollectionPath() const;
  std::string ObjectPath(const std::string& name) const;

  // Applies `make_patch(current)` as a merge patch guarded by the current resourceVersion,
  // re-reading and retrying on 409. make_patch returns nullopt when nothing needs changing (the
  // handler then gets the current Session).
  void AsyncGuardedPatch(const std::string& name, std::function<std::optional<nlohmann::json>(const Session&)> make_patch,
                         SessionHandler<Session> handler);

 private:
  KubeClient* client_;
  std::string namespace_;
};

}  // namespace sessionturn
