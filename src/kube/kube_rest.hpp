// The shared state of a KubeClient and its operations: the HTTP client, the cluster's requests
// (URL, TLS, proxy, token), the calls with their retries, and the errors they report. Internal.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <asio.hpp>
#include <nlohmann/json.hpp>

#include "sessionturn/context.hpp"
#include "sessionturn/http.hpp"
#include "sessionturn/kube.hpp"

namespace sessionturn::kube {

// An operation in flight (a call, a watch) that Close() must cancel.
class Op {
 public:
  virtual ~Op() = default;
  // Ends the operation with `why` (Errc::cancelled). Any thread, idempotent.
  virtual void Cancel(Error why) = 0;
};

class RestState : public std::enable_shared_from_this<RestState> {
 public:
  RestState(Context& context, KubeConfig config, KubeClientOptions options);
  RestState(const RestState&) = delete;
  RestState& operator=(const RestState&) = delete;

  Context& context;
  const KubeConfig config;
  const KubeClientOptions options;

  // Sends through the HTTP client; after Close() the handler gets Errc::cancelled instead. On a
  // stopped Context the handler runs before these return: do not call them holding a lock it takes.
  HttpCall Send(HttpRequest request, HttpHandler handler);
  HttpCall Stream(HttpRequest request, HttpStreamHandlers handlers);

  // Registers an operation for Close(); false when the client is already closed (then end it).
  bool Track(const std::shared_ptr<Op>& op);
  void Untrack(const Op* op);
  // Cancels every operation and destroys the HTTP client (see ~HttpClient for the wait).
  void Close();

  // The bearer token for the next request ("" when the configuration needs none), from the
  // configuration's credential cache: `done` runs on a worker, never before this returns.
  void AsyncBearerToken(std::function<void(Result<std::string>)> done);
  // Waits (bounded) until every token asked for was handed over: a credential refresh in flight
  // posts its answer to our Context, which must therefore not be destroyed before. Off a worker.
  void AwaitTokens(std::chrono::milliseconds bound);

  // A request to `path` with this cluster's URL, TLS, proxy and credentials.
  HttpRequest MakeRequest(const std::string& method, std::string_view path, const std::string& token,
                          std::string body, const std::string& content_type, std::chrono::milliseconds timeout) const;

  RetryPolicy Retry() const;

 private:
  std::mutex mu_;
  std::condition_variable tokens_paid_;
  int tokens_owed_ = 0;
  bool closed_ = false;
  std::shared_ptr<HttpClient> http_;
  std::unordered_map<const Op*, std::weak_ptr<Op>> ops_;
};

// "Reason: message" of a Kubernetes Status body, else the body's first 200 bytes.
std::string StatusText(const std::string& body);
// The Errc of an HTTP status from the API server.
Errc CodeFor(int status);
// HttpClient's transport failure, with a hint where the cluster settings came from.
Error TransportError(const KubeConfig& config, const Error& http_error);

struct CallSpec {
  std::string method;  // GET, POST, PATCH, DELETE
  std::string path;
  std::string body;  // sent when content_type is set
  std::string content_type;
  std::chrono::steady_clock::time_point deadline;
};

// Starts one call: token, request, one re-authentication after a 401, retries through RetryBudget
// (429/5xx and lost connections for idempotent verbs; a POST only when it was never sent), and the
// JSON of a 2xx or the mapped error. The handler runs once, on a worker.
KubeCall StartCall(const std::shared_ptr<RestState>& state, CallSpec spec, KubeJsonHandler handler);

// Starts a watch (kube_watch.cpp).
KubeWatch StartWatch(const std::shared_ptr<RestState>& state, std::string collection_path, KubeWatchOptions options,
                     WatchHandler on_event, KubeStatusHandler on_end);
// KubeClient::Watch: AsyncWatch with the handler run on the calling thread.
Status BlockingWatch(KubeClient& client, std::string_view collection_path, const KubeWatchOptions& options,
                     const WatchHandler& handler);

}  // namespace sessionturn::kube
