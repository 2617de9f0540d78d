// A small HTTP/1.1 server on the Context, for what a bridge serves: webhooks, /healthz, /readyz and
// /metrics. Plain HTTP on TCP (TLS is the ingress's job), bounded sizes and deadlines, exact-path
// routes, and handlers that may answer later (a webhook answers once its message is durably accepted).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sessionturn/error.hpp"
#include "sessionturn/http.hpp"

namespace sessionturn {

class Context;

struct HttpServerOptions {
  // "ADDR:PORT" with an IP address: "127.0.0.1:8080", "0.0.0.0:8080", "[::1]:8080", "[::]:8080".
  // Port 0 picks a free one (Start() returns it).
  std::string listen = "127.0.0.1:0";
  std::size_t max_header_bytes = 16u << 10;  // request line and headers; past it: 431
  std::size_t max_body_bytes = 1u << 20;     // the decoded body; past it: 413
  // From accept, or from a kept-alive connection's first byte of its next request, to the end of the
  // headers; past it: 408 (when something was received) and close.
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};   // end of the headers to end of the body; past it: 408
  std::chrono::milliseconds idle_timeout{60'000};   // a kept-alive connection between requests; past it: close
  std::chrono::milliseconds write_timeout{30'000};  // writing one response; past it: close
  // The handler's time to call respond; past it the client gets 503 and a later respond is dropped.
  std::chrono::milliseconds handler_timeout{30'000};
  // Stop(): how long requests in flight may take to finish before their connections are closed.
  std::chrono::milliseconds stop_grace{10'000};
  // Connections open at once. One more is accepted, answered 503 (Connection: close) and closed, so
  // a client is told rather than left waiting in the kernel's backlog.
  std::size_t max_connections = 256;
};

struct ServerRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // the request-target as sent ("/hook?x=1")
  std::string path;    // the target's path, raw: not percent-decoded (routes match it exactly)
  std::string query;   // the target's query without '?', raw ("" when there is none)
  HttpHeaders headers;  // names as sent, in order (repeated headers stay separate)
  std::string body;     // decoded from Content-Length or chunked framing
  std::string remote;   // the peer, "127.0.0.1:50312" or "[::1]:50312"

  // The first header of that name (case-insensitive), "" when there is none.
  std::string Header(std::string_view name) const;
};

struct ServerResponse {
  int status = 200;  // 200-599 (else the client gets 500)
  // Content-Length, Transfer-Encoding and Connection are the server's: set here, they are replaced
  // (but "Connection: close" is honoured). A value with CR or LF makes the response a 500.
  HttpHeaders headers;
  std::string body;  // not sent for HEAD, 204 or 304
};

// Answers the request, once, from any thread (also inside the handler). A second call is ignored
// with a warning; a call after the connection went away is dropped. Dropping every copy of it
// without calling it answers 500: a request is never left hanging.
using HttpRespond = std::function<void(ServerResponse response)>;
// Runs on a Context worker: it must not block (hand slow work elsewhere and respond from there).
using RouteHandler = std::function<void(const ServerRequest& request, HttpRespond respond)>;

// What the server did so far (tests, diagnostics).
struct ServerStats {
  std::size_t connections_open = 0;
  std::uint64_t connections_accepted = 0;  // over capacity included
  std::uint64_t requests_served = 0;       // responses written to complete requests (any status)
  std::uint64_t rejected_malformed = 0;    // 400 (and 417, 505) and closed
  std::uint64_t rejected_headers_too_large = 0;  // 431
  std::uint64_t rejected_body_too_large = 0;     // 413
  std::uint64_t rejected_timeout = 0;            // header or body deadline passed (408 or closed)
  std::uint64_t rejected_over_capacity = 0;      // 503 past max_connections
  std::uint64_t handler_dropped = 0;             // 500: respond dropped uncalled (or the handler threw)
  std::uint64_t handler_timeouts = 0;            // 503: respond not called within handler_timeout
};

// Thread-safety: Handle() before Start(), from one thread; Start(), Stop(), StopAndWait(), Stats()
// and the destructor from any thread. Everything runs on the Context's event loop (no thread per
// connection or request). Destroy the server before its Context.
class HttpServer {
 public:
  HttpServer(Context& context, HttpServerOptions options = {});
  // Stops at once (no grace): connections are closed. Off a worker it waits (bounded) until no
  // handler of this server runs any more; on a worker it only guarantees that none starts after it.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes `path` (exact match on the raw path, query ignored) for `method` ("" = any method; a
  // specific method wins over ""). Unknown path: 404; known path, other method: 405 with Allow; HEAD
  // is served by the GET route (the body is not sent). Errc::invalid_argument after Start(), for a
  // path not starting with '/' or an empty handler, and for a route already registered.
  Status Handle(std::string method, std::string path, RouteHandler handler);

  // Binds and listens; returns the port. Errc::invalid_argument for a bad listen address (named) or
  // a second Start(); Errc::io_error when it cannot listen (the message names the address and the
  // reason: "address already in use").
  Result<std::uint16_t> Start();

  // Graceful stop: no new connections; idle ones are closed; requests in flight finish (with
  // Connection: close) within stop_grace, after which their connections are closed. `done` runs
  // once, on a worker, when every connection is gone (at once if never started).
  void Stop(std::function<void()> done = {});
  // Stop() and wait for it. On a Context worker: Errc::would_block.
  Status StopAndWait();

  ServerStats Stats() const;
  // The address it listens on ("127.0.0.1:41234"), "" before Start().
  std::string LocalAddress() const;

  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace sessionturn
