// The HTTP server's insides: the shared Core (options, routes, the acceptor, the connections and
// the stats) and one ServerConnection per socket, each on its own strand of the Context.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <asio.hpp>

#include "context_gate.hpp"
#include "http/request_parser.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/http_server.hpp"

namespace sessionturn {

namespace http {

class ServerConnection;

// After a response that closes the connection, the rest of what the client sends is read and
// dropped for a while before the socket is closed: closing with unread bytes makes the kernel send
// a reset, which can destroy the response before the client reads it (a 413 while it still sends).
inline constexpr std::chrono::milliseconds kLingerTimeout{2'000};
inline constexpr std::size_t kLingerBytes = 8u << 20;
// accept() failing (out of file descriptors): wait this long before accepting again, not spin.
inline constexpr std::chrono::milliseconds kAcceptRetry{100};
// The destructor waits at most this long for handlers still running on other workers.
inline constexpr std::chrono::milliseconds kDestroyWait{5'000};

// How an answer reached the connection.
enum class Answer { handler, dropped };

// How a response is framed for the request it answers.
struct Framing {
  bool head = false;   // a HEAD request: headers only
  bool close = false;  // the connection ends after it
  bool http10 = false;  // an HTTP/1.0 client kept alive must be told so
};

// The response on the wire, or false and `problem` when the handler's response cannot be sent as it
// is (status out of range, a header name or value that would break the framing).
bool SerializeResponse(const ServerResponse& response, const Framing& framing, std::string& out,
                       std::string& problem);
// The handler asked for the connection to end (Connection: close).
bool WantsClose(const ServerResponse& response);
ServerResponse PlainResponse(int status, std::string text);
std::string EndpointString(const asio::ip::tcp::endpoint& endpoint);
// "ADDR:PORT" with an IP address (IPv6 in brackets).
Result<asio::ip::tcp::endpoint> ParseListenAddress(const std::string& listen);

}  // namespace http

struct HttpServer::Core : std::enable_shared_from_this<HttpServer::Core> {
  struct Route {
    std::string method;  // "" = any
    RouteHandler handler;
  };
  struct Entry {
    std::weak_ptr<http::ServerConnection> connection;
    bool counted;  // within max_connections (not one answered 503)
  };
  // Where a request goes: a handler, or the status that answers it (404, 405 with `allow`, 503).
  struct Target {
    RouteHandler handler;
    int status = 0;
    std::string allow;
  };

  Core(Context& context, HttpServerOptions options);

  // Runs the request's handler (or answers it) with a fresh respond for the connection's request `seq`.
  void Dispatch(const std::shared_ptr<http::ServerConnection>& connection, std::uint64_t seq,
                const ServerRequest& request);
  void Accept();  // on strand
  void OnAccept(const asio::error_code& ec, asio::ip::tcp::socket socket);
  void StopOnStrand(bool graceful);
  void Unregister(std::uint64_t id);
  void Count(std::uint64_t ServerStats::*counter);
  void Log(LogLevel level, const std::string& message) const { context.Log(level, message); }

  Context& context;
  const HttpServerOptions options;
  const std::shared_ptr<detail::ContextGate> gate;
  asio::strand<asio::io_context::executor_type> strand;  // the acceptor, the timers, Stop
  asio::ip::tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  asio::steady_timer grace_timer;
  std::map<std::string, std::vector<Route>> routes;  // by path; fixed once started

  mutable std::mutex mu;  // guards everything below
  bool started = false;
  bool stopping = false;
  bool closed = false;  // destroyed: no handler starts any more
  int running_handlers = 0;
  std::condition_variable handlers_done;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, Entry> connections;
  std::vector<std::function<void()>> stop_waiters;
  ServerStats stats;
  std::string local_address;

 private:
  Target Find(const ServerRequest& request);
  void FireStopWaiters();  // under mu, once no connection is left
};

namespace http {

// One accepted socket: reads a request, hands it to its handler, writes the answer, and then the
// next request (kept alive) or closes. Everything of it runs on its strand; the public methods post.
class ServerConnection : public std::enable_shared_from_this<ServerConnection> {
 public:
  ServerConnection(std::shared_ptr<HttpServer::Core> core, asio::ip::tcp::socket socket, std::uint64_t id,
                   bool over_capacity);

  void Start();
  void BeginStop();   // close when idle, else after the response in progress
  void ForceClose();
  // From a respond (any thread): the answer to request `seq`.
  void Deliver(std::uint64_t seq, ServerResponse response, Answer how);

 private:
  enum class Phase { waiting, headers, body, handler, writing, lingering, closed };
  enum class Wait { header, body, idle, handler, write, linger };
  struct Current {
    std::string method;
    std::string path;
    bool head = false;
    bool keep_alive = false;
    bool http10 = false;
    std::chrono::steady_clock::time_point started;
  };
  struct Outgoing {
    std::string bytes;
    bool final;  // the response (not a 100 Continue)
  };

  void Read();
  void OnRead(const asio::error_code& ec, std::size_t n);
  void Consume(std::string_view bytes);
  void DispatchRequest();
  void OnAnswer(std::uint64_t seq, ServerResponse response, Answer how);
  void Respond(ServerResponse response, bool served);
  void Reject(int status, const std::string& why);
  void Send(std::string bytes, bool final);
  void WriteNext();
  void OnWritten(const asio::error_code& ec);
  void AfterResponse();
  void Arm(std::chrono::milliseconds after, Wait wait);
  void OnTimer(Wait wait);
  void LingerClose();
  void Close();

  std::shared_ptr<HttpServer::Core> core_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  const std::uint64_t id_;
  const bool over_capacity_;
  RequestParser parser_;
  std::string remote_;
  Phase phase_ = Phase::waiting;
  bool fresh_ = true;  // no request answered yet: header_timeout runs from accept
  bool stopping_ = false;
  bool reading_ = false;
  bool write_in_flight_ = false;
  bool close_after_ = false;
  std::uint64_t seq_ = 0;  // of the request being answered
  std::uint64_t timer_generation_ = 0;
  std::size_t lingered_ = 0;
  Current current_;
  std::string pending_;  // bytes after a complete request: the next (pipelined) one
  std::deque<Outgoing> out_;
  std::array<char, 16u << 10> buffer_;
};

}  // namespace http
}  // namespace sessionturn
