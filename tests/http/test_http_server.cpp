// HttpServer on loopback, with HttpClient and a raw socket as clients: routing (404, 405 with
// Allow, HEAD), keep-alive reuse, answers from another thread, a dropped or doubled respond, a
// throwing handler, invalid responses, pipelining, HTTP/1.0, 100-continue and the listen address.
#include <catch2/catch.hpp>

#include <atomic>
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

namespace {

std::string Url(std::uint16_t port, const std::string& path) {
  return "http://127.0.0.1:" + std::to_string(port) + path;
}

HttpRequest Req(std::string method, std::string url, std::string body = {}) {
  HttpRequest r;
  r.method = std::move(method);
  r.url = std::move(url);
  r.body = std::move(body);
  r.timeout = std::chrono::seconds(20);
  return r;
}

ServerResponse Text(int status, std::string body) {
  ServerResponse r;
  r.status = status;
  r.headers = {{"Content-Type", "text/plain"}};
  r.body = std::move(body);
  return r;
}

// Collects log lines so a test can check what was (and was not) logged.
struct LogProbe {
  std::mutex mu;
  std::vector<std::string> lines;
  ContextOptions Options() {
    ContextOptions o;
    o.min_level = LogLevel::debug;
    o.log_sink = [this](LogLevel level, std::string_view message) {
      std::lock_guard lock(mu);
      lines.push_back(std::string(ToString(level)) + ": " + std::string(message));
    };
    return o;
  }
  bool Contains(const std::string& text) {
    std::lock_guard lock(mu);
    for (const auto& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

}  // namespace

TEST_CASE("http server: GET and POST, request parts, keep-alive reuse", "[http][server]") {
  LogProbe log;
  Context ctx(log.Options());
  HttpServer server(ctx);
  std::mutex mu;
  ServerRequest seen;
  REQUIRE(server.Handle("POST", "/hook", [&](const ServerRequest& r, HttpRespond respond) {
    {
      std::lock_guard lock(mu);
      seen = r;
    }
    respond(Text(202, "got " + r.body));
  }));
  REQUIRE(server.Handle("GET", "/healthz", [](const ServerRequest&, HttpRespond respond) {
    respond(Text(200, "ok"));
  }));
  auto port = server.Start();
  REQUIRE(port);
  CHECK(*port != 0);
  CHECK(server.LocalAddress() == "127.0.0.1:" + std::to_string(*port));

  HttpClient client(ctx);
  auto post = Req("POST", Url(*port, "/hook?token=%41b"), "secret body");
  post.headers = {{"X-Telegram-Bot-Api-Secret-Token", "s3cr3t"}};
  auto r = client.Request(post);
  REQUIRE(r);
  CHECK(r->status == 202);
  CHECK(r->body == "got secret body");
  CHECK(r->Header("content-type") == "text/plain");
  CHECK(r->Header("content-length") == "15");
  CHECK_FALSE(r->Header("date").empty());
  {
    std::lock_guard lock(mu);
    CHECK(seen.method == "POST");
    CHECK(seen.path == "/hook");
    CHECK(seen.query == "token=%41b");
    CHECK(seen.target == "/hook?token=%41b");
    CHECK(seen.Header("x-telegram-bot-api-secret-token") == "s3cr3t");
    CHECK(seen.Header("missing").empty());
    CHECK(seen.remote.rfind("127.0.0.1:", 0) == 0);
  }
  for (int i = 0; i < 5; ++i) {
    auto h = client.Request(Req("GET", Url(*port, "/healthz")));
    REQUIRE(h);
    CHECK(h->status == 200);
    CHECK(h->body == "ok");
  }
  CHECK(client.ConnectionsOpened() == 1);  // six requests, one connection
  auto stats = server.Stats();
  CHECK(stats.requests_served == 6);
  CHECK(stats.connections_accepted == 1);
  CHECK(stats.connections_open == 1);
  // The debug line names method, path and status; never a header value or the body.
  CHECK(log.Contains("POST /hook 202"));
  CHECK_FALSE(log.Contains("s3cr3t"));
  CHECK_FALSE(log.Contains("secret body"));
}

TEST_CASE("http server: 404, 405 with Allow, any-method routes, HEAD", "[http][server]") {
  Context ctx;
  HttpServer server(ctx);
  auto ok = [](const ServerRequest& r, HttpRespond respond) { respond(Text(200, "method " + r.method)); };
  REQUIRE(server.Handle("GET", "/metrics", ok));
  REQUIRE(server.Handle("POST", "/metrics", ok));
  REQUIRE(server.Handle("", "/any", ok));
  // Bad routes are refused, naming them.
  auto dup = server.Handle("GET", "/metrics", ok);
  REQUIRE_FALSE(dup);
  CHECK_THAT(dup.error().message, Catch::Contains("GET /metrics"));
  CHECK_FALSE(server.Handle("GET", "metrics", ok));
  CHECK_FALSE(server.Handle("GET", "/empty", RouteHandler{}));
  auto port = server.Start();
  REQUIRE(port);
  auto late = server.Handle("GET", "/late", ok);
  REQUIRE_FALSE(late);
  CHECK_THAT(late.error().message, Catch::Contains("after Start"));

  HttpClient client(ctx);
  auto missing = client.Request(Req("GET", Url(*port, "/nope")));
  REQUIRE(missing);
  CHECK(missing->status == 404);
  auto wrong = client.Request(Req("DELETE", Url(*port, "/metrics")));
  REQUIRE(wrong);
  CHECK(wrong->status == 405);
  CHECK(wrong->Header("allow") == "GET, HEAD, POST");
  auto any = client.Request(Req("PATCH", Url(*port, "/any"), "x"));
  REQUIRE(any);
  CHECK(any->body == "method PATCH");

  // HEAD goes to the GET route; the length is that of the body not sent.
  RawClient raw(*port);
  REQUIRE(raw.Send("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto head = raw.Read(true);
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(head->headers["content-length"] == "11");  // "method HEAD"
  // The next bytes are the GET's response: the HEAD's had no body.
  auto get = raw.Read();
  REQUIRE(get);
  CHECK(get->body == "method GET");
}

TEST_CASE("http server: respond later from another thread, dropped, twice, or a throwing handler",
          "[http][server]") {
  LogProbe log;
  Context ctx(log.Options());
  HttpServer server(ctx);
  std::vector<std::thread> threads;
  std::mutex mu;
  REQUIRE(server.Handle("POST", "/later", [&](const ServerRequest& r, HttpRespond respond) {
    std::lock_guard lock(mu);
    threads.emplace_back([respond, body = r.body] {
      std::this_thread::sleep_for(milliseconds(100));
      respond(Text(200, "later " + body));
    });
  }));
  REQUIRE(server.Handle("GET", "/dropped", [](const ServerRequest&, HttpRespond) {}));
  REQUIRE(server.Handle("GET", "/dropped-later", [&](const ServerRequest&, HttpRespond respond) {
    std::lock_guard lock(mu);
    threads.emplace_back([respond = std::move(respond)]() mutable {
      std::this_thread::sleep_for(milliseconds(50));
      respond = nullptr;  // the last copy goes without an answer
    });
  }));
  REQUIRE(server.Handle("GET", "/twice", [](const ServerRequest&, HttpRespond respond) {
    respond(Text(200, "first"));
    respond(Text(201, "second"));
  }));
  REQUIRE(server.Handle("GET", "/throws", [](const ServerRequest&, HttpRespond) -> void {
    throw std::runtime_error("boom");
  }));
  REQUIRE(server.Handle("GET", "/bad-header", [](const ServerRequest&, HttpRespond respond) {
    ServerResponse r = Text(200, "x");
    r.headers.emplace_back("X-Injected", "a\r\nSet-Cookie: evil=1");
    respond(r);
  }));
  REQUIRE(server.Handle("GET", "/bad-status", [](const ServerRequest&, HttpRespond respond) {
    respond(Text(99, "x"));
  }));
  auto port = server.Start();
  REQUIRE(port);
  HttpClient client(ctx);

  // Several at once: each answered from its own thread while the Context thread serves the others.
  std::vector<std::future<Result<HttpResponse>>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(std::async(std::launch::async, [&, i] {
      return client.Request(Req("POST", Url(*port, "/later"), std::to_string(i)));
    }));
  }
  for (int i = 0; i < 4; ++i) {
    auto r = calls[static_cast<std::size_t>(i)].get();
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->body == "later " + std::to_string(i));
  }

  for (const char* path : {"/dropped", "/dropped-later", "/throws"}) {
    auto r = client.Request(Req("GET", Url(*port, path)));
    REQUIRE(r);
    CHECK(r->status == 500);
  }
  auto twice = client.Request(Req("GET", Url(*port, "/twice")));
  REQUIRE(twice);
  CHECK(twice->status == 200);
  CHECK(twice->body == "first");
  auto injected = client.Request(Req("GET", Url(*port, "/bad-header")));
  REQUIRE(injected);
  CHECK(injected->status == 500);
  CHECK(injected->Header("set-cookie").empty());
  auto status = client.Request(Req("GET", Url(*port, "/bad-status")));
  REQUIRE(status);
  CHECK(status->status == 500);
  // The connection stayed usable through all of it: one per thread that made blocking requests (each
  // runs on its thread's own loop and connections), the four callers' and this thread's.
  CHECK(client.ConnectionsOpened() <= 5);

  for (auto& t : threads) t.join();
  auto stats = server.Stats();
  CHECK(stats.handler_dropped == 3);
  CHECK(log.Contains("respond was called twice"));
  CHECK(log.Contains("threw: boom"));
  CHECK(log.Contains("X-Injected"));
  CHECK_FALSE(log.Contains("evil"));
}

TEST_CASE("http server: a handler that never answers gets 503 at handler_timeout", "[http][server]") {
  Context ctx;
  HttpServerOptions o;
  o.handler_timeout = milliseconds(200);
  HttpServer server(ctx, o);
  std::mutex mu;
  HttpRespond kept;
  REQUIRE(server.Handle("GET", "/slow", [&](const ServerRequest&, HttpRespond respond) {
    std::lock_guard lock(mu);
    kept = std::move(respond);
  }));
  auto port = server.Start();
  REQUIRE(port);
  RawClient raw(*port);
  REQUIRE(raw.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = raw.Read();
  REQUIRE(r);
  CHECK(r->status == 503);
  {
    std::lock_guard lock(mu);
    kept(Text(200, "too late"));  // dropped: its request was answered
  }
  // Kept alive: the next request on it is served (and answered 503 again).
  REQUIRE(raw.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto again = raw.Read();
  REQUIRE(again);
  CHECK(again->status == 503);
  CHECK(server.Stats().handler_timeouts == 2);
}

TEST_CASE("http server: pipelined requests answered in order, HTTP/1.0, Connection: close", "[http][server]") {
  Context ctx;
  HttpServer server(ctx);
  std::vector<std::thread> threads;
  std::mutex mu;
  // /slow answers after /fast would have: the order on the wire is still the requests' order.
  REQUIRE(server.Handle("GET", "/slow", [&](const ServerRequest&, HttpRespond respond) {
    std::lock_guard lock(mu);
    threads.emplace_back([respond] {
      std::this_thread::sleep_for(milliseconds(100));
      respond(Text(200, "slow"));
    });
  }));
  REQUIRE(server.Handle("", "/fast", [](const ServerRequest& r, HttpRespond respond) {
    respond(Text(200, "fast " + r.body));
  }));
  auto port = server.Start();
  REQUIRE(port);
  {
    RawClient raw(*port);
    REQUIRE(raw.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
                     "POST /fast HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"
                     "GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    auto a = raw.Read();
    auto b = raw.Read();
    auto c = raw.Read();
    REQUIRE(a);
    REQUIRE(b);
    REQUIRE(c);
    CHECK(a->body == "slow");
    CHECK(b->body == "fast ab");
    CHECK(c->body == "fast ");
    CHECK(c->headers["connection"] == "close");
    CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
  }
  {
    // HTTP/1.0: closed after the answer unless it asks for keep-alive; then it is told so.
    RawClient raw(*port);
    REQUIRE(raw.Send("GET /fast HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    auto kept = raw.Read();
    REQUIRE(kept);
    CHECK(kept->headers["connection"] == "keep-alive");
    REQUIRE(raw.Send("GET /fast HTTP/1.0\r\n\r\n"));
    auto last = raw.Read();
    REQUIRE(last);
    CHECK(last->headers["connection"] == "close");
    CHECK(raw.ClosedWithin(std::chrono::seconds(5)));
  }
  std::lock_guard lock(mu);
  for (auto& t : threads) t.join();
}

TEST_CASE("http server: Expect 100-continue is answered before the body is sent", "[http][server]") {
  Context ctx;
  HttpServerOptions o;
  o.max_body_bytes = 100;
  HttpServer server(ctx, o);
  REQUIRE(server.Handle("POST", "/up", [](const ServerRequest& r, HttpRespond respond) {
    respond(Text(200, "got " + std::to_string(r.body.size())));
  }));
  auto port = server.Start();
  REQUIRE(port);
  RawClient raw(*port);
  REQUIRE(raw.Send("POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n"));
  auto interim = raw.Read();
  REQUIRE(interim);
  CHECK(interim->status == 100);
  REQUIRE(raw.Send("0123456789"));
  auto final_response = raw.Read();
  REQUIRE(final_response);
  CHECK(final_response->status == 200);
  CHECK(final_response->body == "got 10");

  // Too large for the server: the final 413 instead of 100, before any body.
  RawClient big(*port);
  REQUIRE(big.Send("POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000\r\n\r\n"));
  auto refused = big.Read();
  REQUIRE(refused);
  CHECK(refused->status == 413);
}

TEST_CASE("http server: listen addresses, and a port in use is a clear error", "[http][server]") {
  Context ctx;
  for (const char* bad : {"127.0.0.1", "localhost:80", "::1:80", "[::1]", "127.0.0.1:99999", ":8080", "1.2.3:80"}) {
    HttpServerOptions o;
    o.listen = bad;
    HttpServer server(ctx, o);
    auto r = server.Start();
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::invalid_argument);
    CHECK_THAT(r.error().message, Catch::Contains(std::string("'") + bad + "'"));
  }
  HttpServer first(ctx);
  auto port = first.Start();
  REQUIRE(port);
  CHECK_FALSE(first.Start());  // twice

  HttpServerOptions o;
  o.listen = "127.0.0.1:" + std::to_string(*port);
  HttpServer second(ctx, o);
  auto used = second.Start();
  REQUIRE_FALSE(used);
  CHECK(used.error().code == Errc::io_error);
  CHECK_THAT(used.error().message, Catch::Contains(o.listen) && Catch::Contains("in use"));

  // IPv6 loopback, where the machine has it.
  HttpServerOptions v6;
  v6.listen = "[::1]:0";
  HttpServer six(ctx, v6);
  auto p6 = six.Start();
  if (p6) {
    CHECK(six.LocalAddress() == "[::1]:" + std::to_string(*p6));
  } else {
    WARN("no IPv6 loopback here: " << p6.error().message);
  }
}
