// HttpClient against a local HTTP(S) server (tests/fakes/http_server.py): bodies of every kind,
// keep-alive reuse counted by the server, timeouts naming their phase, TLS verification, streams and
// their cancellation, many concurrent exchanges on one Context thread, and the client's lifetime.
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <future>
#include <mutex>
#include <thread>

#include "http_test_server.hpp"
#include "support/busy_worker.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/http.hpp"

using namespace sessionturn;
using nlohmann::json;
using sessionturn::testing_http::TestServer;
using std::chrono::milliseconds;

namespace {

HttpRequest Get(std::string url) {
  HttpRequest r;
  r.url = std::move(url);
  return r;
}

// Waits for a future with a generous bound; a test that hangs fails instead.
template <typename T>
T Await(std::future<T>& f, std::chrono::seconds bound = std::chrono::seconds(30)) {
  REQUIRE(f.wait_for(bound) == std::future_status::ready);
  return f.get();
}

// Collects a stream's pieces and its end.
struct StreamProbe {
  std::mutex mu;
  std::string body;
  int chunks = 0;
  int headers_calls = 0;
  int status_at_headers = 0;
  bool chunk_before_headers = false;
  std::promise<Result<HttpResponse>> done;
  std::atomic<int> chunk_count{0};

  HttpStreamHandlers Handlers(std::function<bool(int chunks)> keep_going = {}) {
    HttpStreamHandlers h;
    h.on_headers = [this](const HttpResponse& head) {
      std::lock_guard lock(mu);
      ++headers_calls;
      status_at_headers = head.status;
      return true;
    };
    h.on_chunk = [this, keep_going](std::string_view chunk) {
      int n;
      {
        std::lock_guard lock(mu);
        if (headers_calls == 0) chunk_before_headers = true;
        body.append(chunk);
        n = ++chunks;
      }
      chunk_count.store(n);
      return keep_going ? keep_going(n) : true;
    };
    h.on_done = [this](Result<HttpResponse> r) { done.set_value(std::move(r)); };
    return h;
  }
};

}  // namespace

TEST_CASE("http client: GET, headers, status is not an error, and keep-alive reuse", "[http][client]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  auto r = client.Request(Get(server.Http("/hello")));
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "hello");
  CHECK(r->Header("content-type") == "text/plain");
  CHECK(r->Header("CONTENT-LENGTH") == "5");
  CHECK(r->Header("X-Absent").empty());
  CHECK(r->new_connections == 1);
  for (int i = 0; i < 9; ++i) {
    auto again = client.Request(Get(server.Http("/hello")));
    REQUIRE(again);
    CHECK(again->new_connections == 0);  // the kept-alive connection
  }
  CHECK(client.ConnectionsOpened() == 1);

  auto unavailable = client.Request(Get(server.Http("/status?code=503&retry_after=2")));
  REQUIRE(unavailable);  // an HTTP status is the caller's to judge
  CHECK(unavailable->status == 503);
  CHECK(unavailable->body == "status 503");
  CHECK(RetryAfterOf(*unavailable) == milliseconds(2000));
  auto missing = client.Request(Get(server.Http("/nowhere")));
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(client.ConnectionsOpened() == 1);  // error statuses keep the connection too
}

TEST_CASE("http client: HTTPS keep-alive, counted by the server", "[http][client][tls]") {
  TestServer server;
  Context ctx;
  auto before = server.Stats(ctx)["connections"]["https"].get<int>();
  {
    HttpClient client(ctx);
    for (int i = 0; i < 20; ++i) {
      HttpRequest r = Get(server.Https("/hello"));
      r.tls = server.Tls();
      auto response = client.Request(r);
      REQUIRE(response);
      CHECK(response->status == 200);
    }
    CHECK(client.ConnectionsOpened() == 1);
  }
  CHECK(server.Stats(ctx)["connections"]["https"].get<int>() - before == 1);
}

TEST_CASE("http client: methods, request bodies and headers", "[http][client]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  HttpRequest post = Get(server.Http("/echo?x=1"));
  post.method = "POST";
  post.body = R"({"a":1})";
  post.headers = {{"Content-Type", "application/json"}, {"X-Test", "yes"}};
  auto r = client.Request(post);
  REQUIRE(r);
  auto echo = json::parse(r->body);
  CHECK(echo["method"] == "POST");
  CHECK(echo["query"] == "x=1");
  CHECK(echo["body"] == R"({"a":1})");
  CHECK(echo["headers"]["content-type"] == "application/json");
  CHECK(echo["headers"]["x-test"] == "yes");
  CHECK(echo["headers"]["user-agent"].get<std::string>().rfind("sessionturn/", 0) == 0);
  CHECK_FALSE(echo["headers"].contains("expect"));

  HttpRequest patch = Get(server.Http("/echo"));
  patch.method = "PATCH";
  patch.body = "[]";
  r = client.Request(patch);
  REQUIRE(r);
  echo = json::parse(r->body);
  CHECK(echo["method"] == "PATCH");
  CHECK(echo["body"] == "[]");
  CHECK_FALSE(echo["headers"].contains("content-type"));  // no form-encoding claim we did not make

  HttpRequest put = Get(server.Http("/echo"));
  put.method = "PUT";  // an empty body is still sent, with its length
  r = client.Request(put);
  REQUIRE(r);
  echo = json::parse(r->body);
  CHECK(echo["method"] == "PUT");
  CHECK(echo["headers"]["content-length"] == "0");

  HttpRequest del = Get(server.Http("/echo"));
  del.method = "DELETE";
  r = client.Request(del);
  REQUIRE(r);
  CHECK(json::parse(r->body)["method"] == "DELETE");

  HttpRequest head = Get(server.Http("/hello"));
  head.method = "HEAD";
  r = client.Request(head);
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body.empty());

  HttpRequest agent = Get(server.Http("/echo"));
  agent.headers = {{"User-Agent", "custom/1"}};
  r = client.Request(agent);
  REQUIRE(r);
  CHECK(json::parse(r->body)["headers"]["user-agent"] == "custom/1");

  HttpRequest bad_header = Get(server.Http("/echo"));
  bad_header.headers = {{"X-Bad", "a\r\nInjected: 1"}};
  r = client.Request(bad_header);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::invalid_argument);
  HttpRequest bad_method = Get(server.Http("/echo"));
  bad_method.method = "GE T";
  r = client.Request(bad_method);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::invalid_argument);
  r = client.Request(Get("ftp://127.0.0.1/x"));
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::invalid_argument);
}

TEST_CASE("http client: chunked bodies, whole and streamed", "[http][client][stream]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  auto whole = client.Request(Get(server.Http("/chunked?n=50&size=1000")));
  REQUIRE(whole);
  CHECK(whole->status == 200);
  CHECK(whole->Header("Transfer-Encoding") == "chunked");
  REQUIRE(whole->body.size() == 50'000);
  CHECK(whole->body.substr(0, 12) == "012345678901");

  StreamProbe probe;
  HttpRequest slow = Get(server.Https("/chunked?n=5&size=100&delay=0.05"));
  slow.tls = server.Tls();
  client.AsyncStream(slow, probe.Handlers());
  auto f = probe.done.get_future();
  auto done = Await(f);
  REQUIRE(done);
  CHECK(done->status == 200);
  CHECK(done->body.empty());  // streamed, not buffered
  std::lock_guard lock(probe.mu);
  CHECK(probe.body.size() == 500);
  CHECK(probe.chunks >= 5);  // the server's delays keep its chunks apart
  CHECK(probe.headers_calls == 1);
  CHECK(probe.status_at_headers == 200);
  CHECK_FALSE(probe.chunk_before_headers);
}

TEST_CASE("http client: a stream's non-2xx body is collected, not streamed", "[http][client][stream]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  StreamProbe probe;
  client.AsyncStream(Get(server.Http("/status?code=410")), probe.Handlers());
  auto f = probe.done.get_future();
  auto done = Await(f);
  REQUIRE(done);
  CHECK(done->status == 410);
  CHECK(done->body == "status 410");
  CHECK(probe.chunk_count == 0);
}

TEST_CASE("http client: cancelling a stream mid-way ends it promptly and silences it", "[http][client][stream]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  SECTION("Cancel() from another thread") {
    StreamProbe probe;
    auto call = client.AsyncStream(Get(server.Http("/stream?interval=0.01")), probe.Handlers());
    CHECK(call.Active());
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (probe.chunk_count < 5 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    REQUIRE(probe.chunk_count >= 5);
    auto cancelled_at = std::chrono::steady_clock::now();
    call.Cancel();
    const int at_cancel = probe.chunk_count.load();
    auto f = probe.done.get_future();
    auto done = Await(f);
    auto took = std::chrono::steady_clock::now() - cancelled_at;
    REQUIRE_FALSE(done);
    CHECK(done.error().code == Errc::cancelled);
    CHECK(took < milliseconds(1000));
    std::this_thread::sleep_for(milliseconds(200));  // the server keeps writing every 10 ms
    CHECK(probe.chunk_count == at_cancel);           // not one chunk handler after Cancel() returned
    CHECK_FALSE(call.Active());
    call.Cancel();  // idempotent
    // The connection was closed, not left streaming: the server noticed.
    auto stats_until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (server.Stats(ctx)["streams_ended"].get<int>() < 1 && std::chrono::steady_clock::now() < stats_until) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    CHECK(server.Stats(ctx)["streams_ended"].get<int>() == 1);
  }
  SECTION("the chunk handler returns false") {
    StreamProbe probe;
    client.AsyncStream(Get(server.Http("/stream?interval=0.01")), probe.Handlers([](int n) { return n < 3; }));
    auto f = probe.done.get_future();
    auto done = Await(f);
    REQUIRE_FALSE(done);
    CHECK(done.error().code == Errc::cancelled);
    CHECK_THAT(done.error().message, Catch::Contains("ended by its stream handler"));
    std::this_thread::sleep_for(milliseconds(100));
    CHECK(probe.chunk_count == 3);
  }
}

TEST_CASE("http client: Cancel() from inside the stream's own handler", "[http][client][stream]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  StreamProbe probe;
  std::mutex mu;
  HttpCall call;
  auto handlers = probe.Handlers([&](int n) {
    if (n == 2) {
      std::lock_guard lock(mu);
      call.Cancel();  // on the delivering thread: takes effect when the handler returns
    }
    return true;
  });
  {
    std::lock_guard lock(mu);
    call = client.AsyncStream(Get(server.Http("/stream?interval=0.01")), std::move(handlers));
  }
  auto f = probe.done.get_future();
  auto done = Await(f);
  REQUIRE_FALSE(done);
  CHECK(done.error().code == Errc::cancelled);
  CHECK(probe.chunk_count == 2);
}

TEST_CASE("http client: timeouts name the phase", "[http][client][timeout]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  SECTION("waiting for the response") {
    HttpRequest r = Get(server.Http("/delay?seconds=5"));
    r.timeout = milliseconds(400);
    auto start = std::chrono::steady_clock::now();
    auto out = client.Request(r);
    REQUIRE_FALSE(out);
    CHECK(out.error().code == Errc::timeout);
    CHECK_THAT(out.error().message, Catch::Contains("waiting for the response") && Catch::Contains("timeout 400 ms") &&
                                        Catch::Contains("GET http://127.0.0.1:"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  }
  SECTION("reading the body") {
    HttpRequest r = Get(server.Http("/slow-body?seconds=5"));
    r.timeout = milliseconds(400);
    auto out = client.Request(r);
    REQUIRE_FALSE(out);
    CHECK(out.error().code == Errc::timeout);
    CHECK_THAT(out.error().message, Catch::Contains("reading the response body (5 bytes received)"));
  }
  SECTION("the TLS handshake (nothing sent: a connection failure, safe to retry)") {
    HttpRequest r = Get(server.Silent("/"));
    r.connect_timeout = milliseconds(300);
    auto out = client.Request(r);
    REQUIRE_FALSE(out);
    CHECK(out.error().code == Errc::connection_failed);
    CHECK_THAT(out.error().message, Catch::Contains("in the TLS handshake") && Catch::Contains("connect timeout 300 ms"));
    CHECK(ShouldRetry(Result<HttpResponse>(Fail(out.error())), /*idempotent=*/false));
  }
  SECTION("a zero timeout is refused") {
    HttpRequest r = Get(server.Http("/hello"));
    r.timeout = milliseconds(0);
    auto out = client.Request(r);
    REQUIRE_FALSE(out);
    CHECK(out.error().code == Errc::invalid_argument);
  }
}

TEST_CASE("http client: TLS verification is on by default and its failures say why", "[http][client][tls]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  SECTION("the system store does not know the test CA") {
    auto out = client.Request(Get(server.Https("/hello")));
    REQUIRE_FALSE(out);
    CHECK(out.error().code == Errc::connection_failed);
    CHECK_THAT(out.error().message, Catch::Contains("TLS certificate was not accepted") &&
                                        Catch::Contains("SSL certificate problem"));
  }
  SECTION("the right CA, by IP and by server name") {
    HttpRequest r = Get(server.Https("/hello"));
    r.tls = server.Tls();
    auto out = client.Request(r);
    REQUIRE(out);
    CHECK(out->body == "hello");
    r.tls.server_name = "kube.test";  // in the certificate; the connection still goes to 127.0.0.1
    out = client.Request(r);
    REQUIRE(out);
    CHECK(out->body == "hello");
  }
  SECTION("a server name the certificate does not carry") {
    HttpRequest r = Get(server.Https("/hello"));
    r.tls = server.Tls();
    r.tls.server_name = "not-in-cert.test";
    auto out = client.Request(r);
    REQUIRE_FALSE(out);
    CHECK(out.error().code == Errc::connection_failed);
    CHECK_THAT(out.error().message, Catch::Contains("not accepted") && Catch::Contains("not-in-cert.test"));
  }
  SECTION("verification off") {
    HttpRequest r = Get(server.Https("/hello"));
    r.tls.insecure_skip_verify = true;
    CHECK(client.Request(r));
  }
  SECTION("a CA that is not PEM") {
    HttpRequest r = Get(server.Https("/hello"));
    r.tls.ca_pem = "not a certificate";
    auto out = client.Request(r);
    REQUIRE_FALSE(out);
    CHECK(out.error().code == Errc::connection_failed);
  }
}

TEST_CASE("http client: connection failures, size bounds, refusals", "[http][client]") {
  TestServer server;
  Context ctx;
  HttpClient client(ctx);
  auto refused = client.Request(Get("http://127.0.0.1:1/x"));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::connection_failed);
  CHECK_THAT(refused.error().message, Catch::Contains("cannot connect") && Catch::Contains("127.0.0.1:1"));

  HttpRequest big = Get(server.Http("/big?bytes=5000"));
  big.max_response_bytes = 4000;
  auto too_large = client.Request(big);
  REQUIRE_FALSE(too_large);
  CHECK(too_large.error().code == Errc::too_large);
  big.max_response_bytes = 5000;
  auto fits = client.Request(big);
  REQUIRE(fits);
  CHECK(fits->body.size() == 5000);

  // A blocking call on a worker would wait for itself.
  std::promise<Errc> code;
  ctx.Post([&] {
    auto r = client.Request(Get(server.Http("/hello")));
    code.set_value(r ? Errc::ok : r.error().code);
  });
  auto f = code.get_future();
  CHECK(Await(f) == Errc::would_block);
}

TEST_CASE("http client: 200 concurrent exchanges on one Context thread", "[http][client][concurrency]") {
  TestServer server;
  Context ctx;  // one worker
  HttpClient client(ctx);
  constexpr int kRequests = 200;
  std::atomic<int> ok{0}, failed{0};
  std::promise<void> all;
  std::atomic<int> left{kRequests};
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRequests; ++i) {
    HttpRequest r = Get(server.Http(i % 2 == 0 ? "/delay?seconds=0.5" : "/chunked?n=3&size=100&delay=0.1"));
    client.AsyncRequest(r, [&](Result<HttpResponse> out) {
      (out && out->status == 200 ? ok : failed)++;
      if (--left == 0) all.set_value();
    });
  }
  auto f = all.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(ok == kRequests);
  CHECK(failed == 0);
  // Serialized they would take 200 × 0.4 s on average = 80 s; concurrently well under 10 s.
  CHECK(took < std::chrono::seconds(15));
  // The count drops once each handler has returned, just after the last one set the promise.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (client.InFlight() != 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(milliseconds(1));
  CHECK(client.InFlight() == 0);
}

TEST_CASE("http client: several workers share one client", "[http][client][concurrency]") {
  TestServer server;
  ContextOptions o;
  o.threads = 4;
  Context ctx(o);
  HttpClient client(ctx);
  constexpr int kThreads = 4, kEach = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        HttpRequest r = Get(server.Https("/hello"));
        r.tls = server.Tls();
        auto out = client.Request(r);
        if (out && out->body == "hello") ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == kThreads * kEach);
  CHECK(client.ConnectionsOpened() <= static_cast<std::uint64_t>(kThreads) + 1);
}

TEST_CASE("http client: destroying the client cancels what is in flight", "[http][client][lifetime]") {
  TestServer server;
  Context ctx;
  std::promise<Result<HttpResponse>> slow_done;
  StreamProbe stream;
  {
    HttpClient client(ctx);
    client.AsyncRequest(Get(server.Http("/delay?seconds=10")),
                        [&](Result<HttpResponse> r) { slow_done.set_value(std::move(r)); });
    client.AsyncStream(Get(server.Http("/stream?interval=0.01")), stream.Handlers());
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (stream.chunk_count < 3 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(milliseconds(5));
    REQUIRE(stream.chunk_count >= 3);
    CHECK(client.InFlight() == 2);
  }  // off a worker: the destructor waits until both handlers have run
  auto slow = slow_done.get_future();
  REQUIRE(slow.wait_for(milliseconds(0)) == std::future_status::ready);
  auto r = slow.get();
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::cancelled);
  CHECK_THAT(r.error().message, Catch::Contains("HttpClient was destroyed"));
  auto s = stream.done.get_future();
  REQUIRE(s.wait_for(milliseconds(0)) == std::future_status::ready);
  CHECK(s.get().error().code == Errc::cancelled);
  const int chunks = stream.chunk_count;
  std::this_thread::sleep_for(milliseconds(100));
  CHECK(stream.chunk_count == chunks);
}

TEST_CASE("http client: destroyed from its own handler", "[http][client][lifetime]") {
  TestServer server;
  Context ctx;
  auto client = std::make_unique<HttpClient>(ctx);
  std::promise<Result<HttpResponse>> other_done;
  std::promise<void> destroyed;
  client->AsyncRequest(Get(server.Http("/delay?seconds=10")),
                       [&](Result<HttpResponse> r) { other_done.set_value(std::move(r)); });
  client->AsyncRequest(Get(server.Http("/hello")), [&](Result<HttpResponse>) {
    client.reset();  // on a worker: no wait, no deadlock
    destroyed.set_value();
  });
  auto d = destroyed.get_future();
  Await(d);
  auto o = other_done.get_future();
  auto r = Await(o);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::cancelled);
}

TEST_CASE("http client: on a stopped Context nothing starts", "[http][client][lifetime]") {
  Context ctx;
  HttpClient client(ctx);
  ctx.Stop();
  bool called = false;
  client.AsyncRequest(Get("http://127.0.0.1:1/"), [&](Result<HttpResponse> r) {
    called = true;
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::unavailable);
  });
  CHECK(called);  // reported here and now: no worker will run again
  auto r = client.Request(Get("http://127.0.0.1:1/"));
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::unavailable);
}

TEST_CASE("http client: a host name through libcurl's resolver", "[http][client][dns]") {
  // libcurl resolves names other than localhost on a thread and has us watch its wakeup socket (a
  // socket it made itself, not through our open-socket callback). The machine's own name is the one
  // name that resolves without reaching beyond loopback, when /etc/hosts maps it there.
  char name[256] = {0};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  bool loopback = false;
  if (::getaddrinfo(name, nullptr, &hints, &found) == 0) {
    loopback = true;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) loopback = false;
    }
    ::freeaddrinfo(found);
  }
  if (!loopback) {
    std::puts("SESSIONTURN_TEST_SKIPPED: this machine's host name does not resolve to loopback only");
    return;
  }
  TestServer server;
  const std::string port = server.Http("").substr(std::string("http://127.0.0.1:").size());
  Context ctx;
  for (int i = 0; i < 5; ++i) {  // a client each: each has its own DNS cache, so each resolves
    HttpClient client(ctx);
    std::vector<std::promise<Result<HttpResponse>>> done(4);
    for (auto& d : done) {
      client.AsyncRequest(Get("http://" + std::string(name) + ":" + port + "/hello"),
                          [&d](Result<HttpResponse> r) { d.set_value(std::move(r)); });
    }
    for (auto& d : done) {
      auto f = d.get_future();
      auto r = Await(f);
      REQUIRE(r);
      CHECK(r->body == "hello");
    }
  }
}

TEST_CASE("http client: a blocking request runs on the calling thread, with its own kept-alive connection",
          "[http][client][caller]") {
  TestServer server;
  Context ctx;  // one worker, held busy below
  HttpClient client(ctx);
  {
    sessionturn::testing_support::BusyWorker busy(ctx);
    for (int i = 0; i < 3; ++i) {
      auto r = client.Request(Get(server.Http("/hello")));
      REQUIRE(r);
      CHECK(r->body == "hello");
      CHECK(r->new_connections == (i == 0 ? 1 : 0));  // this thread's lane keeps its connection
    }
    CHECK(client.InFlight() == 0);
  }
  // The asynchronous form runs on the Context, on a connection of its own.
  std::promise<Result<HttpResponse>> async_done;
  client.AsyncRequest(Get(server.Http("/hello")), [&](Result<HttpResponse> r) { async_done.set_value(std::move(r)); });
  auto async = async_done.get_future().get();
  REQUIRE(async);
  CHECK(async->body == "hello");
  CHECK(client.ConnectionsOpened() == 2);  // the lane's and the Context's, counted together

  // A second thread gets a lane (and a connection) of its own.
  std::thread other([&] { CHECK(client.Request(Get(server.Http("/hello")))); });
  other.join();
  CHECK(client.ConnectionsOpened() == 3);
}

TEST_CASE("http client: destroying the client ends the blocking requests on other threads",
          "[http][client][caller][lifetime]") {
  TestServer server;
  Context ctx;
  auto client = std::make_unique<HttpClient>(ctx);
  HttpClient* raw = client.get();
  // More callers than a client keeps lanes for (16): every one must be found and ended.
  constexpr int kCallers = 20;
  std::vector<std::promise<Result<HttpResponse>>> done(kCallers);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] { done[static_cast<std::size_t>(i)].set_value(raw->Request(Get(server.Http("/delay?seconds=10")))); });
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (client->InFlight() < static_cast<std::size_t>(kCallers) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  REQUIRE(client->InFlight() == static_cast<std::size_t>(kCallers));
  std::this_thread::sleep_for(milliseconds(100));  // on the wire, waiting for the server
  const auto t0 = std::chrono::steady_clock::now();
  client.reset();  // cancels them on their threads' lanes, and waits until those calls gave their lanes back
  const auto took = std::chrono::steady_clock::now() - t0;
  for (auto& t : callers) t.join();
  for (auto& d : done) {
    auto f = d.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(2)) == std::future_status::ready);
    auto r = f.get();
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::cancelled);
  }
  CHECK(took < std::chrono::seconds(3));  // not the server's 10 s, nor the 5 s bound of the wait
}
