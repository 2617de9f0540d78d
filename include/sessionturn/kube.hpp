// Kubernetes access: where the cluster is and who we are (KubeConfig: kubeconfig files, in-cluster
// service account, exec credential plugins) and a REST client on HttpClient (KubeClient: async and
// blocking JSON verbs, retries, Status errors, watch with resume). Session objects live in sessions.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sessionturn/error.hpp"

namespace sessionturn {

class Context;
namespace ws {
class TlsContextCache;  // internal: one OpenSSL context per TLS material (src/ws/websocket_tls.hpp)
}  // namespace ws

// The default in-cluster service-account directory (token, ca.crt, namespace).
inline constexpr std::string_view kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

struct KubeConfigOptions {
  // Kubeconfig file(s) to read, colon-separated like KUBECONFIG; empty: $KUBECONFIG, else
  // ~/.kube/config, else the in-cluster configuration.
  std::string kubeconfig;
  std::string context;         // empty: the files' current-context
  std::string namespace_name;  // empty: the context's namespace, else "default"
  // The service-account directory for the in-cluster configuration (tests point it at a temp dir).
  std::string service_account_dir = std::string(kServiceAccountDir);
  // Used instead of $HOME to find ~/.kube/config when set (tests).
  std::string home;
  // Set to false to fail instead of falling back to the in-cluster configuration.
  bool allow_in_cluster = true;
};

// The TLS material of the cluster, resolved into memory (files read, base64 decoded), shared by
// the REST client (libcurl) and the exec WebSocket client (asio::ssl).
struct KubeTls {
  std::string ca_pem;             // empty: the system's trust store
  std::string client_cert_pem;    // empty: no client certificate
  std::string client_key_pem;
  std::string server_name;        // tls-server-name: SNI and the name verified; empty: the URL's host
  bool insecure_skip_verify = false;
};

// How a KubeConfig authenticates (for diagnostics; the token itself comes from BearerToken()).
enum class KubeAuthKind { none, token, token_file, exec_plugin, client_certificate };

// A resolved cluster configuration. Cheap to copy: copies share the credential cache.
// Thread-safety: every method may be called from any thread concurrently.
class KubeConfig {
 public:
  // Reads the configuration as described on KubeConfigOptions. Errors name the file, the context
  // and the field that is wrong (Errc::invalid_argument, Errc::io_error, Errc::not_found).
  static Result<KubeConfig> Load(const KubeConfigOptions& options = {});

  // A configuration built in code: server URL and TLS, an optional static bearer token.
  static KubeConfig FromParts(std::string server, KubeTls tls, std::string token = {},
                              std::string namespace_name = "default");

  const std::string& Server() const noexcept;     // "https://host:port" (no trailing slash)
  const std::string& Namespace() const noexcept;  // the effective namespace
  const std::string& ContextName() const noexcept;  // "" for in-cluster / FromParts
  const std::string& ProxyUrl() const noexcept;   // proxy-url of the cluster, "" when none
  const KubeTls& Tls() const noexcept;
  KubeAuthKind AuthKind() const noexcept;
  // "kubeconfig /home/u/.kube/config, context prod" or "in-cluster service account": for messages.
  std::string Describe() const;

  // The current bearer token, "" when the configuration authenticates without one (client
  // certificate only). May re-read a token file that rotated or run an exec credential plugin
  // (blocking, bounded by kExecPluginTimeout), so do not call it on a Context worker. Never log it.
  Result<std::string> BearerToken() const;

  // The current bearer token without blocking the caller (for code on the Context): `handler` runs
  // on a worker of `context` (on the calling thread when the Context is stopped). A fresh cached
  // token is handed out at once; a refresh (reading a token file, running an exec plugin) runs on
  // this configuration's credential executor, one thread started for the refresh and gone after it
  // (at most one per configuration, so concurrent callers share one plugin run), and ahead of expiry
  // in the background while the cached token is still handed out. A token file is looked at again
  // every 60 s at most on this path. The Context must outlive the call. Never log the token.
  void AsyncBearerToken(Context& context, std::function<void(Result<std::string>)> handler) const;

  // Call after the API server answered 401: forgets the cached exec credential and token file
  // contents, so the next BearerToken()/AsyncBearerToken() runs the plugin or reads the file again.
  // Does no I/O (safe on a Context worker). Returns true when there is a source that may yield a
  // different token (a plugin or a file), i.e. one retry makes sense.
  bool InvalidateToken() const;

  // The OpenSSL contexts of the exec WebSockets made from Tls() (ExecEndpointFromConfig), one per
  // TLS material: shared by the copies of this configuration and the connectors made from it, and
  // released with the last of them. An opaque handle; nothing to call on it.
  std::shared_ptr<ws::TlsContextCache> ExecTlsContexts() const;

  struct Impl;

 private:
  explicit KubeConfig(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// How long an exec credential plugin may run before it is killed.
inline constexpr std::chrono::seconds kExecPluginTimeout{60};

enum class PatchType { merge, json };  // application/merge-patch+json, application/json-patch+json

struct KubeClientOptions {
  // Attempts per call (1 = no retry): 429 and 5xx (honouring Retry-After) and connection failures
  // for reads, patches and deletes; a create (POST) only when the request was never sent.
  int max_attempts = 5;
  std::chrono::milliseconds initial_backoff{200};  // doubled per attempt, with jitter (RetryPolicy)
  std::chrono::milliseconds max_backoff{8000};     // also caps a server's Retry-After
  // A whole non-watch call, its retries and their waits included: it reports by then.
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds connect_timeout{10000};
  // The Context whose event loop does the client's asynchronous I/O and runs its handlers; blocking
  // calls made on its worker threads fail with Errc::would_block. Null: the client owns a private
  // one-thread Context (async handlers run on that thread).
  Context* context = nullptr;
};

// One event of a watch. type: ADDED, MODIFIED, DELETED, BOOKMARK, or RELISTED (a synthetic event
// after a 410 Gone forced a re-list: the objects that follow as ADDED are the whole current state).
struct WatchEvent {
  std::string type;
  nlohmann::json object;
};

struct KubeWatchOptions {
  std::string label_selector;
  std::string field_selector;
  // Where to start. Empty: list first, deliver every item as ADDED, then watch from the list.
  std::string resource_version;
  // The watch ends with Errc::timeout at this point (the handler having seen everything until then).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  // Server-side timeout of each watch request; the client reconnects from the last resourceVersion.
  std::chrono::seconds server_timeout{60};
};

// Return false to end the watch (Watch then returns success; AsyncWatch's end handler gets ok).
using WatchHandler = std::function<bool(const WatchEvent& event)>;
using KubeJsonHandler = std::function<void(Result<nlohmann::json> result)>;
using KubeStatusHandler = std::function<void(Status status)>;

// Cancels one asynchronous call (AsyncGet & co.). Cheap to copy; a default one does nothing.
class KubeCall {
 public:
  struct Impl;
  KubeCall() = default;
  explicit KubeCall(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // The call's handler gets Errc::cancelled (on a worker, soon) unless it already reported. Any thread.
  void Cancel();

 private:
  std::shared_ptr<Impl> impl_;
};

// Stops one AsyncWatch. Cheap to copy; a default one does nothing.
class KubeWatch {
 public:
  struct Impl;
  KubeWatch() = default;
  explicit KubeWatch(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // Stops the watch and closes its stream; the end handler gets ok (on a worker). Once Stop()
  // returned, the event handler is not running and will not run again (called from inside the
  // event handler, it takes effect when that returns). Any thread, idempotent.
  void Stop();
  // The end handler has not been called yet.
  bool Active() const;
  // The last resourceVersion seen (list, event or BOOKMARK): where a later watch could resume.
  std::string ResourceVersion() const;

 private:
  std::shared_ptr<Impl> impl_;
};

// A Kubernetes REST client on HttpClient (http.hpp): asynchronous verbs on a Context, and blocking
// ones that run the same calls on the calling thread. Paths are API paths with their query
// ("/api/v1/namespaces"). Connections are kept alive: the async calls share the client's, and each
// thread's blocking calls share that thread's (up to 16 threads per client keep theirs).
//
// Threading: every method may be called from any thread. Async handlers run on a worker of the
// client's Context and must not block. Blocking calls do their I/O on the calling thread (no worker
// is involved: they complete while every worker is busy) until the call reports (by
// request_timeout; a watch by its deadline); on a worker of the client's Context they return
// Errc::would_block at once. A Context stopped under a blocking call ends it with Errc::cancelled. Destroying the client cancels its calls and watches in flight:
// their handlers get Errc::cancelled (none are called if the Context is stopped).
//
// Errors: 401/403/404/409 map to Errc::unauthorized/forbidden/not_found/conflict, 400/422 to
// invalid_argument, 429/5xx after the retries to Errc::unavailable, connection failures to
// Errc::connection_failed (never sent) or connection_lost, timeouts to Errc::timeout; the message
// carries the API's Status reason and message, and Error::http_status the status code. A 401 makes
// the configuration re-read its credentials (InvalidateToken) and the call is tried once more.
class KubeClient {
 public:
  // I/O on options.context, or on a private one-thread Context when that is null.
  explicit KubeClient(KubeConfig config, KubeClientOptions options = {});
  // I/O on `context` (options.context is ignored). The client must be destroyed before the Context.
  KubeClient(Context& context, KubeConfig config, KubeClientOptions options = {});
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;
  KubeClient(KubeClient&&) noexcept;
  KubeClient& operator=(KubeClient&&) noexcept;

  const KubeConfig& Config() const noexcept;
  Context& context() const noexcept;  // the Context the client runs on (its private one when it owns it)

  KubeCall AsyncGet(std::string path, KubeJsonHandler handler);
  KubeCall AsyncPost(std::string path, nlohmann::json body, KubeJsonHandler handler);
  KubeCall AsyncPatch(std::string path, nlohmann::json patch, PatchType type, KubeJsonHandler handler);
  KubeCall AsyncDelete(std::string path, KubeJsonHandler handler);

  // Lists `collection_path` (unless options.resource_version is set), then watches it: BOOKMARKs are
  // requested, a watch the server ended resumes from the last resourceVersion, a 410 Gone re-lists
  // (a RELISTED event, then the items as ADDED). `on_event` runs on a worker, one event at a time.
  // `on_end` gets ok when on_event returned false or the handle was stopped, Errc::timeout at the
  // deadline, or the error that retries did not cure.
  KubeWatch AsyncWatch(std::string collection_path, KubeWatchOptions options, WatchHandler on_event,
                       KubeStatusHandler on_end = {});

  Result<nlohmann::json> Get(std::string_view path);
  Result<nlohmann::json> Post(std::string_view path, const nlohmann::json& body);
  Result<nlohmann::json> Patch(std::string_view path, const nlohmann::json& patch, PatchType type);
  Result<nlohmann::json> Delete(std::string_view path);

  // AsyncWatch, blocking, on the calling thread: `handler` runs there as each event is read (so it
  // may block, which holds the stream back, and may make blocking calls on this client). Returns
  // when the handler returns false (success), at the deadline (Errc::timeout), when it throws
  // (Errc::internal), or on an error that retries do not cure.
  Status Watch(std::string_view collection_path, const KubeWatchOptions& options, const WatchHandler& handler);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// "a=b,c" -> "a%3Db%2Cc": for selectors and other query values.
std::string UrlEncode(std::string_view value);

}  // namespace sessionturn
