// HttpServer: routes, the acceptor, graceful stop, and the respond handed to each handler.
#include <algorithm>

#include "blocking.hpp"
#include "http/server_impl.hpp"

namespace sessionturn {

namespace {

// Behind every copy of one request's HttpRespond: answers once; answers 500 when the last copy is
// dropped unanswered, so the client is never left waiting.
class ResponseSlot {
 public:
  ResponseSlot(std::shared_ptr<HttpServer::Core> core, std::weak_ptr<http::ServerConnection> connection,
               std::uint64_t seq)
      : core_(std::move(core)), connection_(std::move(connection)), seq_(seq) {}
  ResponseSlot(const ResponseSlot&) = delete;
  ResponseSlot& operator=(const ResponseSlot&) = delete;

  ~ResponseSlot() {
    if (used_.exchange(true)) return;
    Deliver(http::PlainResponse(500, "the request's handler did not answer"), http::Answer::dropped);
  }

  void Respond(ServerResponse response, http::Answer how = http::Answer::handler) {
    if (used_.exchange(true)) {
      core_->Log(LogLevel::warning, "http server: a request's respond was called twice; the second answer (" +
                                        std::to_string(response.status) + ") is ignored");
      return;
    }
    Deliver(std::move(response), how);
  }

  bool used() const noexcept { return used_.load(); }

 private:
  void Deliver(ServerResponse response, http::Answer how) {
    if (auto connection = connection_.lock()) connection->Deliver(seq_, std::move(response), how);
  }

  std::shared_ptr<HttpServer::Core> core_;
  std::weak_ptr<http::ServerConnection> connection_;
  const std::uint64_t seq_;
  std::atomic<bool> used_{false};
};

}  // namespace

HttpServer::Core::Core(Context& ctx, HttpServerOptions o)
    : context(ctx), options(std::move(o)), gate(detail::GateOf(ctx)), strand(asio::make_strand(ctx.io())),
      acceptor(strand), accept_retry(strand), grace_timer(strand) {}

HttpServer::Core::Target HttpServer::Core::Find(const ServerRequest& request) {
  Target target;
  auto it = routes.find(request.path);
  if (it == routes.end()) {
    target.status = 404;
    return target;
  }
  const Route* any = nullptr;
  const Route* get = nullptr;
  for (const auto& route : it->second) {
    if (route.method == request.method) {
      target.handler = route.handler;
      return target;
    }
    if (route.method.empty()) any = &route;
    if (route.method == "GET") get = &route;
  }
  if (request.method == "HEAD" && get != nullptr) {
    target.handler = get->handler;
  } else if (any != nullptr) {
    target.handler = any->handler;
  } else {
    target.status = 405;
    for (const auto& route : it->second) {
      target.allow += (target.allow.empty() ? "" : ", ") + route.method;
      if (route.method == "GET") target.allow += ", HEAD";
    }
  }
  return target;
}

void HttpServer::Core::Dispatch(const std::shared_ptr<http::ServerConnection>& connection, std::uint64_t seq,
                                const ServerRequest& request) {
  auto slot = std::make_shared<ResponseSlot>(shared_from_this(), connection, seq);
  Target target;
  {
    std::lock_guard lock(mu);
    if (closed) {
      target.status = 503;
    } else {
      target = Find(request);
      if (target.handler) ++running_handlers;
    }
  }
  if (!target.handler) {
    ServerResponse r = http::PlainResponse(target.status, target.status == 404   ? "no such path"
                                                          : target.status == 405 ? "method not allowed here"
                                                                                 : "the server is shutting down");
    if (!target.allow.empty()) r.headers.emplace_back("Allow", target.allow);
    slot->Respond(std::move(r));
    return;
  }
  try {
    target.handler(request, [slot](ServerResponse response) { slot->Respond(std::move(response)); });
  } catch (const std::exception& e) {
    Log(LogLevel::error, "http server: the handler of " + request.method + " " + request.path + " threw: " + e.what());
    if (!slot->used()) slot->Respond(http::PlainResponse(500, "the request's handler failed"), http::Answer::dropped);
  } catch (...) {
    Log(LogLevel::error, "http server: the handler of " + request.method + " " + request.path + " threw");
    if (!slot->used()) slot->Respond(http::PlainResponse(500, "the request's handler failed"), http::Answer::dropped);
  }
  target.handler = nullptr;  // its captures go before the destructor can think no handler runs
  std::lock_guard lock(mu);
  --running_handlers;
  handlers_done.notify_all();
}

void HttpServer::Core::Accept() {
  acceptor.async_accept(asio::make_strand(context.io()),
                        [self = shared_from_this()](const asio::error_code& ec, asio::ip::tcp::socket socket) {
                          self->OnAccept(ec, std::move(socket));
                        });
}

void HttpServer::Core::OnAccept(const asio::error_code& ec, asio::ip::tcp::socket socket) {
  if (!acceptor.is_open()) return;  // stopped
  if (ec) {
    if (ec == asio::error::operation_aborted) return;
    Log(LogLevel::warning, "http server: accept on " + local_address + " failed: " + ec.message() + "; retrying");
    accept_retry.expires_after(http::kAcceptRetry);
    accept_retry.async_wait([self = shared_from_this()](const asio::error_code& e) {
      if (!e && self->acceptor.is_open()) self->Accept();
    });
    return;
  }
  std::shared_ptr<http::ServerConnection> connection;
  {
    std::lock_guard lock(mu);
    std::size_t open = 0;
    for (const auto& [id, entry] : connections) open += entry.counted ? 1 : 0;
    const bool over = open >= options.max_connections;
    const std::uint64_t id = next_id++;
    connection = std::make_shared<http::ServerConnection>(shared_from_this(), std::move(socket), id, over);
    connections.emplace(id, Entry{connection, !over});
    ++stats.connections_accepted;
    if (over) {
      ++stats.rejected_over_capacity;
    } else {
      ++stats.connections_open;
    }
  }
  connection->Start();
  Accept();
}

void HttpServer::Core::StopOnStrand(bool graceful) {
  asio::error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  std::vector<std::shared_ptr<http::ServerConnection>> open;
  {
    std::lock_guard lock(mu);
    stopping = true;
    for (const auto& [id, entry] : connections) {
      if (auto c = entry.connection.lock()) open.push_back(std::move(c));
    }
    FireStopWaiters();
  }
  for (const auto& c : open) {
    if (graceful) {
      c->BeginStop();
    } else {
      c->ForceClose();
    }
  }
  if (!graceful || open.empty()) return;
  grace_timer.expires_after(options.stop_grace);
  grace_timer.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (ec) return;
    std::vector<std::shared_ptr<http::ServerConnection>> left;
    {
      std::lock_guard lock(self->mu);
      for (const auto& [id, entry] : self->connections) {
        if (auto c = entry.connection.lock()) left.push_back(std::move(c));
      }
    }
    if (!left.empty()) {
      self->Log(LogLevel::warning, "http server: " + std::to_string(left.size()) +
                                       " connections still busy after the stop grace period; closing them");
    }
    for (const auto& c : left) c->ForceClose();
  });
}

void HttpServer::Core::Unregister(std::uint64_t id) {
  std::lock_guard lock(mu);
  auto it = connections.find(id);
  if (it == connections.end()) return;
  if (it->second.counted) --stats.connections_open;
  connections.erase(it);
  FireStopWaiters();
}

void HttpServer::Core::FireStopWaiters() {
  if (!stopping || !connections.empty() || stop_waiters.empty()) return;
  auto waiters = std::move(stop_waiters);
  stop_waiters.clear();
  // Not inline: the caller holds our lock, and a waiter may call back into the server.
  asio::post(strand, [self = shared_from_this(), waiters = std::move(waiters)] {
    self->grace_timer.cancel();
    for (const auto& w : waiters) w();
  });
}

void HttpServer::Core::Count(std::uint64_t ServerStats::*counter) {
  std::lock_guard lock(mu);
  ++(stats.*counter);
}

// ---- HttpServer ---------------------------------------------------------------------------------

HttpServer::HttpServer(Context& context, HttpServerOptions options)
    : core_(std::make_shared<Core>(context, std::move(options))) {}

HttpServer::~HttpServer() {
  {
    std::lock_guard lock(core_->mu);
    core_->closed = true;
    core_->started = true;  // no Start() after this
  }
  if (!core_->context.Stopped()) {
    asio::post(core_->strand, [core = core_] { core->StopOnStrand(false); });
  }
  std::unique_lock lock(core_->mu);
  if (!core_->context.InWorkerThread()) {
    core_->handlers_done.wait_for(lock, http::kDestroyWait, [&] { return core_->running_handlers == 0; });
  }
  // The routes' captures go now, not whenever the last connection does.
  if (core_->running_handlers == 0) core_->routes.clear();
}

Status HttpServer::Handle(std::string method, std::string path, RouteHandler handler) {
  std::lock_guard lock(core_->mu);
  if (core_->started) return Fail(Errc::invalid_argument, "HttpServer::Handle(" + path + ") after Start()");
  if (path.empty() || path[0] != '/') {
    return Fail(Errc::invalid_argument, "HttpServer::Handle: path '" + path + "' does not start with '/'");
  }
  if (!handler) return Fail(Errc::invalid_argument, "HttpServer::Handle(" + path + "): the handler is empty");
  auto& routes = core_->routes[path];
  for (const auto& route : routes) {
    if (route.method == method) {
      return Fail(Errc::invalid_argument, "HttpServer::Handle: " + (method.empty() ? "any method" : method) + " " +
                                              path + " is already routed");
    }
  }
  routes.push_back(Core::Route{std::move(method), std::move(handler)});
  return {};
}

Result<std::uint16_t> HttpServer::Start() {
  auto endpoint = http::ParseListenAddress(core_->options.listen);
  if (!endpoint) return Fail(endpoint.error());
  {
    std::lock_guard lock(core_->mu);
    if (core_->started) return Fail(Errc::invalid_argument, "HttpServer::Start was called twice (or after Stop)");
    if (core_->context.Stopped()) return Fail(blocking::StoppedContextError("HttpServer::Start"));
    core_->started = true;
  }
  auto& acceptor = core_->acceptor;
  asio::error_code ec;
  auto fail = [&](std::string_view step) {
    asio::error_code ignored;
    acceptor.close(ignored);
    return Fail(Errc::io_error, "cannot listen on " + core_->options.listen + ": " + std::string(step) + ": " +
                                    ec.message());
  };
  acceptor.open(endpoint->protocol(), ec);
  if (ec) return fail("socket");
  // A restarted bridge binds again at once although its old connections linger in TIME_WAIT (Linux
  // still refuses a second listener on the port).
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (ec) return fail("SO_REUSEADDR");
  acceptor.bind(*endpoint, ec);
  if (ec) return fail("bind");
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen");
  const auto local = acceptor.local_endpoint(ec);
  if (ec) return fail("getsockname");
  {
    std::lock_guard lock(core_->mu);
    core_->local_address = http::EndpointString(local);
  }
  asio::post(core_->strand, [core = core_] { core->Accept(); });
  return local.port();
}

void HttpServer::Stop(std::function<void()> done) {
  {
    std::lock_guard lock(core_->mu);
    core_->started = true;  // a stopped server does not start again
    if (done) core_->stop_waiters.push_back(std::move(done));
  }
  if (core_->context.Stopped()) {
    // Nothing runs on a stopped Context: report here rather than never.
    std::vector<std::function<void()>> waiters;
    {
      std::lock_guard lock(core_->mu);
      waiters = std::move(core_->stop_waiters);
      core_->stop_waiters.clear();
    }
    for (const auto& w : waiters) w();
    return;
  }
  asio::post(core_->strand, [core = core_] { core->StopOnStrand(true); });
}

Status HttpServer::StopAndWait() {
  const auto bound = core_->options.stop_grace + http::kLingerTimeout;
  auto stopped = blocking::Call<bool>(core_->context, bound, "HttpServer::StopAndWait", [&](auto done) {
    Stop([done = std::move(done)]() mutable { done(true); });
  });
  if (!stopped) return Fail(stopped.error());
  return {};
}

ServerStats HttpServer::Stats() const {
  std::lock_guard lock(core_->mu);
  return core_->stats;
}

std::string HttpServer::LocalAddress() const {
  std::lock_guard lock(core_->mu);
  return core_->local_address;
}

}  // namespace sessionturn
