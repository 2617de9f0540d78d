// HttpServer's bounds: 413 (Content-Length and chunked), 431, malformed → 400, a slowloris cut at
// header_timeout, the body and idle timeouts, max_connections, graceful stop with a request in
// flight, and the destructor. Short timeouts (hundreds of ms) keep it quick; the checks are on what
// happened, with generous upper bounds, never on speed.
#include <catch2/catch.hpp>

#include <future>
#include <mutex>
#include <thread>

#include "sessionturn/context.hpp"
#include "sessionturn/http.hpp"
#include "sessionturn/http_server.hpp"
#include "test_http_server_support.hpp"

using namespace sessionturn;
using sessionturn::testing_http_server::RawClient;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

HttpServerOptions Short() {
  HttpServerOptions o;
  o.header_timeout = milliseconds(300);
  o.body_timeout = milliseconds(300);
  o.idle_timeout = milliseconds(300);
  o.max_header_bytes = 1024;
  o.max_body_bytes = 1024;
  return o;
}

void Echo(HttpServer& server) {
  REQUIRE(server.Handle("", "/echo", [](const ServerRequest& r, HttpRespond respond) {
    ServerResponse out;
    out.body = r.body;
    respond(out);
  }));
}

}  // namespace

TEST_CASE("http server: bodies past max_body_bytes get 413", "[http][server][limits]") {
  Context ctx;
  HttpServer server(ctx, Short());
  Echo(server);
  auto port = server.Start();
  REQUIRE(port);

  // Content-Length known: refused from the headers, though the client sends it all.
  HttpClient client(ctx);
  HttpRequest big;
  big.method = "POST";
  big.url = "http://127.0.0.1:" + std::to_string(*port) + "/echo";
  big.body = std::string(256 << 10, 'x');
  auto r = client.Request(big);
  REQUIRE(r);
  CHECK(r->status == 413);
  CHECK_THAT(r->body, Catch::Contains("larger than 1024 bytes"));

  // Chunked: refused when the bound is crossed.
  RawClient raw(*port);
  REQUIRE(raw.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  for (int i = 0; i < 3; ++i) REQUIRE(raw.Send("200\r\n" + std::string(512, 'y') + "\r\n"));
  auto chunked = raw.Read();
  REQUIRE(chunked);
  CHECK(chunked->status == 413);
  CHECK(chunked->headers["connection"] == "close");
  CHECK(raw.ClosedWithin(std::chrono::seconds(5)));

  // At the bound it is served.
  big.body = std::string(1024, 'z');
  auto fits = client.Request(big);
  REQUIRE(fits);
  CHECK(fits->status == 200);
  CHECK(fits->body.size() == 1024);
  CHECK(server.Stats().rejected_body_too_large == 2);
}

TEST_CASE("http server: headers past max_header_bytes get 431, malformed requests 400", "[http][server][limits]") {
  Context ctx;
  HttpServer server(ctx, Short());
  Echo(server);
  auto port = server.Start();
  REQUIRE(port);
  {
    RawClient raw(*port);
    REQUIRE(raw.Send("GET /echo HTTP/1.1\r\nHost: x\r\nCookie: " + std::string(2000, 'c') + "\r\n\r\n"));
    auto r = raw.Read();
    REQUIRE(r);
    CHECK(r->status == 431);
    CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
  }
  {
    RawClient raw(*port);
    REQUIRE(raw.Send("GET /echo HTTP/2.0\r\nHost: x\r\n\r\n"));
    auto r = raw.Read();
    REQUIRE(r);
    CHECK(r->status == 505);
  }
  for (const char* bad : {"\x01\x02 garbage\r\n\r\n",
                          "GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
                          "GET /echo HTTP/1.1\r\nHost : x\r\n\r\n"}) {
    RawClient raw(*port);
    REQUIRE(raw.Send(bad));
    auto r = raw.Read();
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(r->headers["connection"] == "close");
    CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
  }
  auto stats = server.Stats();
  CHECK(stats.rejected_headers_too_large == 1);
  CHECK(stats.rejected_malformed == 4);  // and the 505
  CHECK(stats.requests_served == 0);
}

TEST_CASE("http server: a slowloris client is cut at header_timeout with 408", "[http][server][limits]") {
  Context ctx;
  HttpServer server(ctx, Short());
  Echo(server);
  auto port = server.Start();
  REQUIRE(port);
  RawClient raw(*port);
  const std::string request = "GET /echo HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(200, 's') + "\r\n\r\n";
  const auto start = Clock::now();
  bool cut = false;
  for (char c : request) {
    if (!raw.Send(std::string(1, c))) {
      cut = true;
      break;
    }
    std::this_thread::sleep_for(milliseconds(20));
    if (Clock::now() - start > std::chrono::seconds(3)) break;
  }
  auto r = raw.Read();
  REQUIRE(r);  // the 408 arrived before the request was complete
  CHECK(r->status == 408);
  CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
  // 300 ms header timeout, nowhere near the 4 s the whole request would have taken.
  CHECK(Clock::now() - start < std::chrono::seconds(3));
  (void)cut;
  CHECK(server.Stats().rejected_timeout == 1);
  CHECK(server.Stats().requests_served == 0);
}

TEST_CASE("http server: body timeout, idle keep-alive timeout, a silent connection", "[http][server][limits]") {
  Context ctx;
  HttpServer server(ctx, Short());
  Echo(server);
  auto port = server.Start();
  REQUIRE(port);
  {
    RawClient raw(*port);
    REQUIRE(raw.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
    auto r = raw.Read();
    REQUIRE(r);
    CHECK(r->status == 408);
    CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
  }
  {
    RawClient raw(*port);
    REQUIRE(raw.Send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = raw.Read();
    REQUIRE(r);
    CHECK(r->status == 200);
    // Nothing more: the idle timeout closes it without a word.
    CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
    CHECK(raw.buffered().empty());
  }
  {
    RawClient raw(*port);  // connects and says nothing: closed at header_timeout, no 408
    CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
    CHECK(raw.buffered().empty());
  }
  CHECK(server.Stats().rejected_timeout == 2);
  // The server closes its side on its own strand, a moment after the client saw the end.
  for (int i = 0; i < 100 && server.Stats().connections_open != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  CHECK(server.Stats().connections_open == 0);
}

TEST_CASE("http server: past max_connections a client gets 503 at once", "[http][server][limits]") {
  Context ctx;
  HttpServerOptions o;
  o.max_connections = 2;
  HttpServer server(ctx, o);
  Echo(server);
  auto port = server.Start();
  REQUIRE(port);
  RawClient a(*port);
  RawClient b(*port);
  // Both are served (and so surely accepted) before the third connects.
  for (RawClient* c : {&a, &b}) {
    REQUIRE(c->Send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = c->Read();
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  RawClient third(*port);
  REQUIRE(third.Send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto refused = third.Read();
  REQUIRE(refused);
  CHECK(refused->status == 503);
  CHECK(refused->headers["connection"] == "close");
  CHECK(third.ClosedWithin(std::chrono::seconds(5)));
  auto stats = server.Stats();
  CHECK(stats.rejected_over_capacity == 1);
  CHECK(stats.connections_open == 2);
  CHECK(stats.connections_accepted == 3);
}

TEST_CASE("http server: graceful stop lets a request in flight finish and refuses new ones", "[http][server][stop]") {
  Context ctx;
  HttpServer server(ctx);
  std::promise<HttpRespond> held;
  REQUIRE(server.Handle("GET", "/slow", [&](const ServerRequest&, HttpRespond respond) {
    held.set_value(std::move(respond));
  }));
  Echo(server);
  auto port = server.Start();
  REQUIRE(port);

  RawClient busy(*port);
  REQUIRE(busy.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto respond_future = held.get_future();
  REQUIRE(respond_future.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  HttpRespond respond = respond_future.get();

  RawClient idle(*port);  // kept alive between requests: closed at once by the stop
  REQUIRE(idle.Send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(idle.Read());

  std::promise<void> stopped;
  server.Stop([&] { stopped.set_value(); });
  CHECK(idle.ClosedWithin(std::chrono::seconds(5)));
  auto stopped_future = stopped.get_future();
  CHECK(stopped_future.wait_for(milliseconds(200)) == std::future_status::timeout);  // still busy

  // New connections are refused (the listener is closed).
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(*port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0);
  ::close(fd);

  ServerResponse done;
  done.body = "finished";
  respond(done);
  auto r = busy.Read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "finished");
  CHECK(r->headers["connection"] == "close");
  CHECK(busy.ClosedWithin(std::chrono::seconds(5)));
  CHECK(stopped_future.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(server.Stats().connections_open == 0);
  CHECK(server.StopAndWait());  // already stopped: returns at once
}

TEST_CASE("http server: stop grace bounds a request that never finishes, and StopAndWait on a worker refuses",
          "[http][server][stop]") {
  Context ctx;
  HttpServerOptions o;
  o.stop_grace = milliseconds(200);
  HttpServer server(ctx, o);
  std::mutex mu;
  HttpRespond kept;
  Status on_worker;
  REQUIRE(server.Handle("GET", "/hang", [&](const ServerRequest&, HttpRespond respond) {
    std::lock_guard lock(mu);
    kept = std::move(respond);
    on_worker = server.StopAndWait();
  }));
  auto port = server.Start();
  REQUIRE(port);
  RawClient raw(*port);
  REQUIRE(raw.Send("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (int i = 0; i < 500; ++i) {
    std::lock_guard lock(mu);
    if (kept) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  {
    std::lock_guard lock(mu);
    REQUIRE_FALSE(on_worker);
    CHECK(on_worker.error().code == Errc::would_block);
  }
  CHECK(server.StopAndWait());
  CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
  std::lock_guard lock(mu);
  kept(ServerResponse{});  // the connection is gone: dropped silently
}

TEST_CASE("http server: the destructor closes connections, and a respond kept past it is harmless",
          "[http][server][stop]") {
  Context ctx;
  HttpRespond kept;
  std::uint16_t port = 0;
  std::promise<void> got;
  auto server = std::make_unique<HttpServer>(ctx);
  REQUIRE(server->Handle("GET", "/keep", [&](const ServerRequest&, HttpRespond respond) {
    kept = std::move(respond);
    got.set_value();
  }));
  auto started = server->Start();
  REQUIRE(started);
  port = *started;
  RawClient raw(port);
  REQUIRE(raw.Send("GET /keep HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(got.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  server.reset();
  CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
  kept(ServerResponse{});
  kept = nullptr;

  // A server never started stops at once.
  HttpServer never(ctx);
  CHECK(never.StopAndWait());
}
