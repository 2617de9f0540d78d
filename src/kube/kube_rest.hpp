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

#include "http/lanes.hpp"
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
  // A watch on the Context: its Cancel waits for an event handler running on a worker. RestState::Close
  // cancels these last (calls and lane watches, whose Cancel waits for nothing, first).
  virtual bool RunsHandlers() const { return false; }
};

class RestState : public std::enable_shared_from_this<RestState> {
 public:
  RestState(Context& context, KubeConfig config, KubeClientOptions options);
  RestState(const RestState&) = delete;
  RestState& operator=(const RestState&) = delete;

  Context& context;
  const KubeConfig config;
  const KubeClientOptions options;

  // An operation runs on the Context (the asynchronous verbs: `lane` null) or on a lane, a loop its
  // caller runs (the blocking verbs: http/lanes.hpp, no thread hand-off). The functions below that
  // take a lane do their work there.

  // Sends through the HTTP client; after Close() the handler gets Errc::cancelled instead. On a
  // stopped Context the handler runs before these return: do not call them holding a lock it takes.
  HttpCall Send(HttpRequest request, HttpHandler handler, const http::Lane* lane = nullptr);
  HttpCall Stream(HttpRequest request, HttpStreamHandlers handlers, const http::Lane* lane = nullptr);
  // The lanes of the blocking verbs (http::RunOnLane). Close() closes them last: an operation
  // started on one after Close() began finds the client closed when it registers (Track).
  http::Lanes& lanes() { return *lanes_; }
  // Where an operation's timers and posted steps run.
  asio::io_context& Io(const http::Lane* lane) { return lane != nullptr ? *lane->loop : context.io(); }
  // Runs `fn` later on the operation's loop (a worker of the Context, or the lane's).
  void Post(const http::Lane* lane, std::function<void()> fn);

  // Registers an operation for Close(); false when the client is already closed (then end it).
  bool Track(const std::shared_ptr<Op>& op);
  void Untrack(const Op* op);
  // Cancels every operation and destroys the HTTP client (see ~HttpClient for the wait).
  void Close();

  // The bearer token for the next request ("" when the configuration needs none), from the
  // configuration's credential cache: `done` runs on a worker, never before this returns. On a lane
  // the token is taken on the caller's thread (a blocking verb may read the token file or run the
  // exec plugin there) and `done` runs on the lane's loop.
  void AsyncBearerToken(std::function<void(Result<std::string>)> done, const http::Lane* lane = nullptr);
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
  const std::shared_ptr<http::Lanes> lanes_;
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
// JSON of a 2xx or the mapped error. The handler runs once, on a worker (on a lane: on its loop).
// `started`, when given, gets the operation (to cancel it with a reason); null when it reported at once.
KubeCall StartCall(const std::shared_ptr<RestState>& state, CallSpec spec, KubeJsonHandler handler,
                   std::shared_ptr<http::Lane> lane = nullptr, std::shared_ptr<Op>* started = nullptr);
// A blocking verb: StartCall on this thread's lane, run here until it reported (`what` names it).
Result<nlohmann::json> BlockingCall(std::shared_ptr<RestState> state, CallSpec spec, std::string_view what);

// Starts a watch (kube_watch.cpp); on a lane, everything runs on its loop, `on_event` included.
KubeWatch StartWatch(const std::shared_ptr<RestState>& state, std::string collection_path, KubeWatchOptions options,
                     WatchHandler on_event, KubeStatusHandler on_end, std::shared_ptr<http::Lane> lane = nullptr);
// KubeClient::Watch: the watch on this thread's lane, `handler` called as each event is read.
Status BlockingWatch(std::shared_ptr<RestState> state, std::string_view collection_path,
                     const KubeWatchOptions& options, const WatchHandler& handler);

}  // namespace sessionturn::kube
