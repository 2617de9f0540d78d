// KubeClient's calls on HttpClient: the cluster's requests, retries with RetryBudget, one
// re-authentication after a 401, and Kubernetes errors mapped to Errc.
#include "kube/kube_rest.hpp"

#include <algorithm>

#include "blocking.hpp"
#include "blocking_loop.hpp"
#include "json_fields.hpp"

namespace sessionturn::kube {

using nlohmann::json;

RestState::RestState(Context& c, KubeConfig cfg, KubeClientOptions o)
    : context(c),
      config(std::move(cfg)),
      options(o),
      http_(std::make_shared<HttpClient>(c)),
      lanes_(std::make_shared<http::Lanes>(c, HttpClientOptions{}, std::make_shared<http::Tally>())) {}

HttpCall RestState::Send(HttpRequest request, HttpHandler handler, const http::Lane* lane) {
  if (lane != nullptr) {
    HttpStreamHandlers handlers;
    handlers.on_done = std::move(handler);
    return http::SubmitTo(lane->multi, std::move(request), std::move(handlers), false);
  }
  std::shared_ptr<HttpClient> http;
  {
    std::lock_guard lock(mu_);
    http = http_;
  }
  if (!http) {
    blocking::ReportNow(context, std::move(handler),
                        Result<HttpResponse>(Fail(Errc::cancelled, request.method + " " + request.url +
                                                                       ": the KubeClient was destroyed")));
    return {};
  }
  return http->AsyncRequest(std::move(request), std::move(handler));
}

HttpCall RestState::Stream(HttpRequest request, HttpStreamHandlers handlers, const http::Lane* lane) {
  if (lane != nullptr) return http::SubmitTo(lane->multi, std::move(request), std::move(handlers), true);
  std::shared_ptr<HttpClient> http;
  {
    std::lock_guard lock(mu_);
    http = http_;
  }
  if (!http) {
    blocking::ReportNow(context, std::move(handlers.on_done),
                        Result<HttpResponse>(Fail(Errc::cancelled, request.method + " " + request.url +
                                                                       ": the KubeClient was destroyed")));
    return {};
  }
  return http->AsyncStream(std::move(request), std::move(handlers));
}

void RestState::Post(const http::Lane* lane, std::function<void()> fn) {
  if (lane != nullptr) {
    asio::post(*lane->loop, std::move(fn));
  } else {
    context.Post(std::move(fn));
  }
}

bool RestState::Track(const std::shared_ptr<Op>& op) {
  std::lock_guard lock(mu_);
  if (closed_) return false;
  ops_.emplace(op.get(), op);
  return true;
}

void RestState::Untrack(const Op* op) {
  std::lock_guard lock(mu_);
  ops_.erase(op);
}

void RestState::Close() {
  std::vector<std::shared_ptr<Op>> ops;
  std::shared_ptr<HttpClient> http;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& [key, weak] : ops_) {
      if (auto op = weak.lock()) ops.push_back(std::move(op));
    }
    ops_.clear();
    http = std::move(http_);
  }
  std::stable_partition(ops.begin(), ops.end(), [](const std::shared_ptr<Op>& op) { return !op->RunsHandlers(); });
  for (auto& op : ops) op->Cancel(Error(Errc::cancelled, "the KubeClient was destroyed while this was in flight"));
  // Destroyed here unless a call is handing it a request right now (then with that call, soon).
  http.reset();
  lanes_->Close();  // a lane in use is closed by its caller when the cancelled operation reported
}

// The configuration's credential cache answers on a worker of our Context and refreshes off the
// loop (KubeConfig::AsyncBearerToken). Its refresher holds the Context until it answered, so the
// answers still owed are counted: the client's Shutdown waits for them before its Context may go.
void RestState::AsyncBearerToken(std::function<void(Result<std::string>)> done, const http::Lane* lane) {
  if (lane != nullptr) {
    // Counted as owed like the async form's: the client's destruction waits for it (an exec plugin
    // may take a while) before its Context may go.
    {
      std::lock_guard lock(mu_);
      ++tokens_owed_;
    }
    Result<std::string> token = Fail(Errc::internal, "reading the bearer token failed");
    try {
      token = config.BearerToken();
    } catch (const std::exception& e) {
      token = Fail(Errc::internal, std::string("reading the bearer token failed: ") + e.what());
    }
    {
      std::lock_guard lock(mu_);
      if (--tokens_owed_ == 0) tokens_paid_.notify_all();
    }
    asio::post(*lane->loop, [done = std::move(done), token = std::move(token)]() mutable { done(std::move(token)); });
    return;
  }
  {
    std::lock_guard lock(mu_);
    ++tokens_owed_;
  }
  config.AsyncBearerToken(context, [self = shared_from_this(), done = std::move(done)](Result<std::string> token) {
    {
      std::lock_guard lock(self->mu_);
      if (--self->tokens_owed_ == 0) self->tokens_paid_.notify_all();
    }
    done(std::move(token));
  });
}

void RestState::AwaitTokens(std::chrono::milliseconds bound) {
  std::unique_lock lock(mu_);
  const auto until = std::chrono::steady_clock::now() + bound;
  while (tokens_owed_ > 0 && !context.Joined() && std::chrono::steady_clock::now() < until) {
    tokens_paid_.wait_for(lock, blocking::kStoppedPoll);
  }
}

HttpRequest RestState::MakeRequest(const std::string& method, std::string_view path, const std::string& token,
                                   std::string body, const std::string& content_type,
                                   std::chrono::milliseconds timeout) const {
  HttpRequest r;
  r.method = method;
  r.url = config.Server() + std::string(path);
  r.headers.reserve(3);
  r.headers.emplace_back("Accept", "application/json");
  if (!content_type.empty()) {
    r.headers.emplace_back("Content-Type", content_type);
    r.body = std::move(body);
  }
  if (!token.empty()) r.headers.emplace_back("Authorization", "Bearer " + token);
  r.timeout = std::max(std::chrono::milliseconds(1), timeout);
  r.connect_timeout = std::max(std::chrono::milliseconds(1), options.connect_timeout);
  const KubeTls& tls = config.Tls();
  r.tls.ca_pem = tls.ca_pem;
  r.tls.client_cert_pem = tls.client_cert_pem;
  r.tls.client_key_pem = tls.client_key_pem;
  r.tls.server_name = tls.server_name;
  r.tls.insecure_skip_verify = tls.insecure_skip_verify;
  // kubectl sends every request of a cluster with a proxy-url through it; $no_proxy does not apply.
  r.proxy = config.ProxyUrl();
  return r;
}

RetryPolicy RestState::Retry() const {
  RetryPolicy p;
  p.max_attempts = options.max_attempts;
  p.initial_backoff = options.initial_backoff;
  p.max_backoff = options.max_backoff;
  return p;
}

std::string StatusText(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (json_fields::String(j, "kind") == "Status") {
    std::string reason = json_fields::String(j, "reason");
    std::string message = json_fields::String(j, "message");
    if (!reason.empty() && !message.empty()) return reason + ": " + message;
    return !message.empty() ? message : reason;
  }
  std::string t = body.substr(0, 200);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

Errc CodeFor(int status) {
  switch (status) {
    case 401: return Errc::unauthorized;
    case 403: return Errc::forbidden;
    case 404: return Errc::not_found;
    case 409: return Errc::conflict;
    case 410: return Errc::not_found;  // a resourceVersion that is gone
    case 400:
    case 422: return Errc::invalid_argument;
    case 429: return Errc::unavailable;
    default: return status >= 500 ? Errc::unavailable : Errc::failed;
  }
}

Error TransportError(const KubeConfig& config, const Error& e) {
  // HttpClient's message names the URL and what went wrong; say where the cluster settings came from.
  Error out = e;
  if (e.code == Errc::connection_failed) {
    out.message += "; check the server, certificate-authority and tls-server-name in " + config.Describe();
  }
  return out;
}

constexpr const char* kCancelledByCaller = "cancelled by the caller";

namespace {

class CallOp : public Op, public std::enable_shared_from_this<CallOp> {
 public:
  CallOp(std::shared_ptr<RestState> state, CallSpec spec, KubeJsonHandler handler, std::shared_ptr<http::Lane> lane)
      : state_(std::move(state)),
        lane_(std::move(lane)),
        spec_(std::move(spec)),
        handler_(std::move(handler)),
        what_(spec_.method + " " + spec_.path),
        idempotent_(spec_.method != "POST"),
        budget_(state_->Retry(), spec_.deadline),
        timer_(state_->Io(lane_.get())) {}

  // On a worker or the lane's loop (posted by StartCall, which registered the call with the client).
  void Start() { Attempt(); }

  void Cancel(Error why) override {
    HttpCall call;
    {
      std::lock_guard lock(mu_);
      if (done_ || cancel_) return;
      cancel_ = std::move(why);
      call = call_;
      timer_.cancel();
    }
    call.Cancel();  // the in-flight request reports cancelled, or a step in between sees cancel_
  }

 private:
  bool Cancelled() {
    std::lock_guard lock(mu_);
    return cancel_.has_value();
  }

  void Attempt() {
    if (Cancelled()) return Finish(Fail(Errc::cancelled, what_));
    state_->AsyncBearerToken([self = shared_from_this()](Result<std::string> token) { self->Send(std::move(token)); },
                             lane_.get());
  }

  void Send(Result<std::string> token) {
    if (Cancelled()) return Finish(Fail(Errc::cancelled, what_));
    if (!token) return Finish(Fail(token.error()));
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(spec_.deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Finish(Fail(Errc::timeout, what_ + ": no answer within the call's timeout (" +
                                            std::to_string(state_->options.request_timeout.count()) + " ms)"));
    }
    HttpRequest request = state_->MakeRequest(spec_.method, spec_.path, *token, spec_.body, spec_.content_type, left);
    HttpCall call = state_->Send(
        std::move(request), [self = shared_from_this()](Result<HttpResponse> r) { self->OnResponse(std::move(r)); },
        lane_.get());
    std::lock_guard lock(mu_);
    call_ = call;
    if (cancel_) call.Cancel();  // cancelled while we were sending: the call reports it
  }

  void OnResponse(Result<HttpResponse> r) {
    {
      std::lock_guard lock(mu_);
      call_ = HttpCall();
    }
    if (Cancelled()) return Finish(Fail(Errc::cancelled, what_));
    if (r && r->status == 401 && !reauthed_ && state_->config.InvalidateToken()) {
      reauthed_ = true;  // a rotated token file or an expired exec credential: one fresh try
      return Attempt();
    }
    if (ShouldRetry(r, idempotent_)) {
      if (auto delay = budget_.NextDelay(r ? RetryAfterOf(*r) : std::nullopt)) return Wait(*delay);
    }
    Finish(Outcome(std::move(r)));
  }

  void Wait(std::chrono::milliseconds delay) {
    std::lock_guard lock(mu_);
    if (cancel_) {
      state_->Post(lane_.get(), [self = shared_from_this()] { self->Finish(Fail(Errc::cancelled, self->what_)); });
      return;
    }
    timer_.expires_after(delay);
    timer_.async_wait([self = shared_from_this()](const asio::error_code&) { self->Attempt(); });
  }

  Result<json> Outcome(Result<HttpResponse> r) const {
    if (!r) return Fail(TransportError(state_->config, r.error()));
    const int s = r->status;
    if (s >= 200 && s < 300) {
      if (r->body.empty()) return json::object();
      json j = json::parse(r->body, nullptr, false);
      if (j.is_discarded()) return Fail(Errc::protocol_error, what_ + ": the response is not JSON");
      return j;
    }
    std::string msg = what_ + ": HTTP " + std::to_string(s) + " " + StatusText(r->body);
    if ((s == 429 || s >= 500) && budget_.attempts() > 1) msg += " (after " + std::to_string(budget_.attempts()) + " attempts)";
    if (s == 401) msg += " (credentials from " + state_->config.Describe() + ")";
    return Fail(CodeFor(s), msg, s);
  }

  void Finish(Result<json> result) {
    KubeJsonHandler handler;
    {
      std::lock_guard lock(mu_);
      if (done_) return;
      done_ = true;
      if (!result && result.error().code == Errc::cancelled && cancel_) {
        result = Fail(Errc::cancelled, what_ + ": " + cancel_->message);
      }
      handler = std::move(handler_);
      timer_.cancel();
    }
    state_->Untrack(this);
    if (handler) handler(std::move(result));
  }

  std::shared_ptr<RestState> state_;
  const std::shared_ptr<http::Lane> lane_;  // null: on the Context
  const CallSpec spec_;
  KubeJsonHandler handler_;
  const std::string what_;
  const bool idempotent_;
  RetryBudget budget_;  // the chain's own: one step at a time
  bool reauthed_ = false;

  std::mutex mu_;
  bool done_ = false;
  std::optional<Error> cancel_;
  HttpCall call_;
  asio::steady_timer timer_;
};

}  // namespace
}  // namespace sessionturn::kube

namespace sessionturn {

struct KubeCall::Impl {
  std::weak_ptr<kube::Op> op;
};

void KubeCall::Cancel() {
  if (!impl_) return;
  if (auto op = impl_->op.lock()) op->Cancel(Error(Errc::cancelled, kube::kCancelledByCaller));
}

}  // namespace sessionturn

namespace sessionturn::kube {

KubeCall StartCall(const std::shared_ptr<RestState>& state, CallSpec spec, KubeJsonHandler handler,
                   std::shared_ptr<http::Lane> lane, std::shared_ptr<Op>* started) {
  if (state->context.Stopped()) {
    blocking::ReportNow(state->context, std::move(handler),
                        Result<json>(Fail(blocking::StoppedContextError(spec.method + " " + spec.path))));
    return {};
  }
  const http::Lane* on = lane.get();
  auto op = std::make_shared<CallOp>(state, std::move(spec), std::move(handler), std::move(lane));
  // Registered now, not when it starts: the client's destruction must find every call it made.
  if (!state->Track(op)) {
    op->Cancel(Error(Errc::cancelled, "the KubeClient was destroyed"));
    state->Post(on, [op] { op->Start(); });  // reports the cancel where it runs
    return {};
  }
  if (started != nullptr) *started = op;
  // Everything, the first token included, happens on a worker (or the lane's loop): the handler
  // never runs before this returns.
  state->Post(on, [op] { op->Start(); });
  return KubeCall(std::make_shared<KubeCall::Impl>(KubeCall::Impl{op}));
}

Result<json> BlockingCall(std::shared_ptr<RestState> state, CallSpec spec, std::string_view what) {
  std::shared_ptr<Op> op;
  auto destroyed = [&spec] {
    return Error(Errc::cancelled, spec.method + " " + spec.path + ": the KubeClient was destroyed");
  };
  return http::RunOnLane<json>(
      state->lanes(), state->context, state->options.request_timeout, what, destroyed,
      [&](const std::shared_ptr<http::Lane>& lane, KubeJsonHandler done) {
        StartCall(state, std::move(spec), std::move(done), lane, &op);
      },
      [&](Error why) {
        if (op) op->Cancel(std::move(why));
      });
}

}  // namespace sessionturn::kube
