// The WebSocket client (src/ws/websocket.hpp) against an independent implementation (Debian's
// python3-websockets, tests/fakes/ws_peer.py): handshakes, messages, closes, TLS, proxies, deadlines,
// keepalive and the shared TLS contexts. The sans-I/O parts: test_websocket_codec.cpp and
// test_websocket_response.cpp.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <asio.hpp>
#include <asio/ssl.hpp>

#include "http/ws_client_support.hpp"
#include "sessionturn/context.hpp"
#include "ws/websocket.hpp"
#include "ws/websocket_tls.hpp"

using namespace wsclient;

TEST_CASE("handshake, v5 agreed, text and binary echo, clean close", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  REQUIRE(peer.Port() > 0);
  auto ws = ConnectSync(context, LocalTarget(peer.Port()));
  REQUIRE(ws);
  CHECK((*ws)->Subprotocol() == "v5.channel.k8s.io");
  auto inbox = StartCollecting(**ws);
  REQUIRE(SendSync(**ws, "proto"));
  auto m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  CHECK((*m)->data == "proto:v5.channel.k8s.io");
  std::string binary("\x00\x01\xff\xfe payload", 12);
  REQUIRE(SendSync(**ws, binary, true));
  m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  CHECK((*m)->binary);
  CHECK((*m)->data == binary);
  // A 200 KB message from us (masked, 64-bit length) comes back whole.
  std::string big(200'000, 'q');
  REQUIRE(SendSync(**ws, big, true));
  m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  CHECK((*m)->data == big);
  CHECK(CloseSync(**ws));
}

TEST_CASE("our close completes although data frames are still in flight", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  WsTarget t = LocalTarget(peer.Port());
  t.close_timeout = std::chrono::seconds(15);  // a timeout would show as an error status, not as slowness
  auto ws = ConnectSync(context, t);
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  REQUIRE(SendSync(**ws, "stream 2000"));
  auto m = inbox->Pop();
  REQUIRE(m);
  REQUIRE(*m);
  auto closed = CloseSync(**ws);
  INFO((closed ? std::string() : closed.error().ToString()));
  CHECK(closed);
}

TEST_CASE("v4 fallback when the server only speaks v4", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({"--subprotocols", "v4.channel.k8s.io"}));
  auto ws = ConnectSync(context, LocalTarget(peer.Port()));
  REQUIRE(ws);
  CHECK((*ws)->Subprotocol() == "v4.channel.k8s.io");
}

TEST_CASE("a 101 without an agreed sub-protocol is an error", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({"--subprotocols", ""}));
  auto ws = ConnectSync(context, LocalTarget(peer.Port()));
  REQUIRE(!ws);
  CHECK(ws.error().code == Errc::protocol_error);
  CHECK(ws.error().message.find("no sub-protocol") != std::string::npos);
}

TEST_CASE("a wrong Sec-WebSocket-Accept is rejected", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({"--bad-accept"}));
  auto ws = ConnectSync(context, LocalTarget(peer.Port()));
  REQUIRE(!ws);
  CHECK(ws.error().code == Errc::protocol_error);
  CHECK(ws.error().message.find("Sec-WebSocket-Accept") != std::string::npos);
}

TEST_CASE("a large message fragmented by the server, with pings between fragments", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  auto ws = ConnectSync(context, LocalTarget(peer.Port()));
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  REQUIRE(SendSync(**ws, "frag 300000 1000"));
  auto m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  REQUIRE((*m)->data.size() == 300000);
  CHECK((*m)->data.substr(0, 1000) == std::string(1000, 'A'));
  CHECK((*m)->data.substr(1000, 1000) == std::string(1000, 'B'));
  CHECK((*m)->data.substr(299000) == std::string(1000, static_cast<char>('A' + 299 % 26)));
  // Still usable afterwards.
  REQUIRE(SendSync(**ws, "after"));
  m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  CHECK((*m)->data == "after");
}

TEST_CASE("a server ping is answered with a pong", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  auto ws = ConnectSync(context, LocalTarget(peer.Port()));
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  REQUIRE(SendSync(**ws, "ping"));
  auto m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  CHECK((*m)->data == "pong-ok");
}

TEST_CASE("a server-initiated close ends the stream with its code and reason", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  auto ws = ConnectSync(context, LocalTarget(peer.Port()));
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  REQUIRE(SendSync(**ws, "close"));
  auto m = inbox->Pop();
  REQUIRE(m);
  REQUIRE(!*m);
  CHECK(m->error().code == Errc::connection_lost);
  CHECK(m->error().message.find("4000") != std::string::npos);
  CHECK(m->error().message.find("bye") != std::string::npos);
  // Nothing follows the final error; a later send fails rather than hangs.
  CHECK(!inbox->Pop(std::chrono::milliseconds(200)));
  auto late = SendSync(**ws, "late");
  REQUIRE(!late);
  CHECK(late.error().code == Errc::connection_lost);
}

TEST_CASE("an oversized message is rejected naming the bound", "[websocket]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  SECTION("the default 16 MiB bound, one frame") {
    auto ws = ConnectSync(context, LocalTarget(peer.Port()));
    REQUIRE(ws);
    auto inbox = StartCollecting(**ws);
    REQUIRE(SendSync(**ws, "big " + std::to_string(kMaxWsMessageBytes + 1)));
    auto m = inbox->Pop();
    REQUIRE(m);
    REQUIRE(!*m);
    CHECK(m->error().code == Errc::too_large);
    CHECK(m->error().message.find("kMaxWsMessageBytes") != std::string::npos);
  }
  SECTION("a smaller bound, across fragments") {
    WsTarget target = LocalTarget(peer.Port());
    target.max_message = 4000;
    auto ws = ConnectSync(context, target);
    REQUIRE(ws);
    auto inbox = StartCollecting(**ws);
    REQUIRE(SendSync(**ws, "frag 3000 1000"));  // within the bound
    auto m = inbox->Pop();
    REQUIRE(m);
    INFO(Why(m));
    REQUIRE(*m);
    CHECK((*m)->data.size() == 3000);
    REQUIRE(SendSync(**ws, "frag 5000 1000"));
    m = inbox->Pop();
    REQUIRE(m);
    REQUIRE(!*m);
    CHECK(m->error().code == Errc::too_large);
  }
}

TEST_CASE("401 and 403 answers carry the Kubernetes Status message", "[websocket]") {
  Context context;
  SECTION("401 without the token, accepted with it") {
    wstest::PeerProcess peer(PeerArgs({"--token", "s3cret"}));
    auto ws = ConnectSync(context, LocalTarget(peer.Port()));
    REQUIRE(!ws);
    CHECK(ws.error().code == Errc::unauthorized);
    CHECK(ws.error().http_status == 401);
    CHECK(ws.error().message.find("401") != std::string::npos);
    CHECK(ws.error().message.find("Unauthorized") != std::string::npos);
    WsTarget target = LocalTarget(peer.Port());
    target.headers.emplace_back("Authorization", "Bearer s3cret");
    auto ok = ConnectSync(context, target);
    REQUIRE(ok);
    auto inbox = StartCollecting(**ok);
    REQUIRE(SendSync(**ok, "headers"));
    auto m = inbox->Pop();
    REQUIRE(m);
    INFO(Why(m));
    REQUIRE(*m);
    CHECK((*m)->data == "auth:Bearer s3cret");
  }
  SECTION("403") {
    wstest::PeerProcess peer(PeerArgs({"--forbid"}));
    auto ws = ConnectSync(context, LocalTarget(peer.Port()));
    REQUIRE(!ws);
    CHECK(ws.error().code == Errc::forbidden);
    CHECK(ws.error().message.find("cannot create resource \"pods/exec\"") != std::string::npos);
  }
}

TEST_CASE("TLS: verified against a per-test CA, wrong CA, hostname mismatch, client certificates", "[websocket]") {
  wstest::TempDir dir;
  auto pki = wstest::MakePki(dir);
  Context context;
  auto tls_target = [&](int port) {
    WsTarget t = LocalTarget(port, true);
    t.tls.ca_pem = pki.Pem(pki.ca_crt);
    return t;
  };
  SECTION("server auth") {
    wstest::PeerProcess peer(PeerArgs({"--cert", pki.server_crt, "--key", pki.server_key}));
    REQUIRE(peer.Port() > 0);
    {
      auto ws = ConnectSync(context, tls_target(peer.Port()));
      REQUIRE(ws);
      auto inbox = StartCollecting(**ws);
      REQUIRE(SendSync(**ws, "over tls"));
      auto m = inbox->Pop();
      REQUIRE(m);
      REQUIRE(*m);
      CHECK((*m)->data == "over tls");
    }
    {
      WsTarget t = tls_target(peer.Port());
      t.host = "localhost";  // verified as a DNS name, sent as SNI
      auto ws = ConnectSync(context, t);
      CHECK(ws);
    }
    {
      WsTarget t = tls_target(peer.Port());
      t.tls.ca_pem = pki.Pem(pki.other_ca_crt);
      auto ws = ConnectSync(context, t);
      REQUIRE(!ws);
      CHECK(ws.error().code == Errc::connection_failed);
      CHECK(ws.error().message.find("certificate verification failed") != std::string::npos);
    }
    {
      WsTarget t = tls_target(peer.Port());
      t.tls.server_name = "kubernetes.example";  // not in the certificate
      auto ws = ConnectSync(context, t);
      REQUIRE(!ws);
      CHECK(ws.error().code == Errc::connection_failed);
      CHECK(ws.error().message.find("kubernetes.example") != std::string::npos);
    }
    {
      // insecure-skip-tls-verify accepts the unknown CA, and only because the config says so.
      WsTarget t = tls_target(peer.Port());
      t.tls.ca_pem = pki.Pem(pki.other_ca_crt);
      t.tls.insecure = true;
      CHECK(ConnectSync(context, t));
    }
  }
  SECTION("client certificate required by the server") {
    wstest::PeerProcess peer(
        PeerArgs({"--cert", pki.server_crt, "--key", pki.server_key, "--client-ca", pki.ca_crt}));
    REQUIRE(peer.Port() > 0);
    {
      auto ws = ConnectSync(context, tls_target(peer.Port()));
      CHECK(!ws);  // TLS 1.3: the refusal may surface during the upgrade rather than the handshake
    }
    WsTarget t = tls_target(peer.Port());
    t.tls.cert_pem = pki.Pem(pki.client_crt);
    t.tls.key_pem = pki.Pem(pki.client_key);
    auto ws = ConnectSync(context, t);
    REQUIRE(ws);
    auto inbox = StartCollecting(**ws);
    REQUIRE(SendSync(**ws, "mtls"));
    auto m = inbox->Pop();
    REQUIRE(m);
    INFO(Why(m));
    REQUIRE(*m);
    CHECK((*m)->data == "mtls");
  }
  SECTION("a key that does not match the certificate is a configuration error") {
    WsTarget t = tls_target(1);
    t.tls.cert_pem = pki.Pem(pki.client_crt);
    t.tls.key_pem = pki.Pem(pki.server_key);
    auto ws = ConnectSync(context, t);
    REQUIRE(!ws);
    CHECK(ws.error().code == Errc::invalid_argument);
  }
}

TEST_CASE("through an HTTP CONNECT proxy", "[websocket]") {
  Context context;
  wstest::PeerProcess server(PeerArgs({}));
  wstest::PeerProcess proxy(PeerArgs({"--proxy"}));
  REQUIRE(proxy.Port() > 0);
  WsTarget t = LocalTarget(server.Port());
  t.host = "apiserver.invalid";  // resolvable only by the proxy
  t.proxy = "http://127.0.0.1:" + std::to_string(proxy.Port());
  auto ws = ConnectSync(context, t);
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  REQUIRE(SendSync(**ws, "tunnelled"));
  auto m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  CHECK((*m)->data == "tunnelled");
  // Without the proxy the name does not resolve: the tunnel was really used.
  t.proxy.clear();
  CHECK(!ConnectSync(context, t));
}

TEST_CASE("every wait has a deadline: a server that never answers the upgrade", "[websocket]") {
  Context context;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::ip::tcp::socket silent(io);
  std::thread accept_thread([&] {
    std::error_code ec;
    acceptor.accept(silent, ec);
  });
  WsTarget t = LocalTarget(acceptor.local_endpoint().port());
  t.handshake_timeout = std::chrono::milliseconds(300);
  auto ws = ConnectSync(context, t);
  accept_thread.join();
  REQUIRE(!ws);
  CHECK(ws.error().code == Errc::timeout);
  CHECK(ws.error().message.find("handshake") != std::string::npos);
}

TEST_CASE("connection refused is a connection error naming the target", "[websocket]") {
  Context context;
  asio::io_context io;
  // Bind and close a socket to find a port nobody listens on.
  asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  int port = acceptor.local_endpoint().port();
  acceptor.close();
  auto ws = ConnectSync(context, LocalTarget(port));
  REQUIRE(!ws);
  CHECK(ws.error().code == Errc::connection_failed);
  CHECK(ws.error().message.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
}

TEST_CASE("keepalive: pings go out on the interval, and a peer that answers keeps the stream alive", "[websocket][keepalive]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  REQUIRE(peer.Port() > 0);
  WsTarget t = LocalTarget(peer.Port());
  t.ping_interval = std::chrono::milliseconds(100);
  t.pong_timeout = std::chrono::milliseconds(400);
  auto ws = ConnectSync(context, t);
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  // Twelve intervals, three pong deadlines: nothing may end the stream meanwhile.
  auto early = inbox->Pop(std::chrono::milliseconds(1200));
  INFO((early ? Why(early) : std::string()));
  REQUIRE(!early);
  REQUIRE(SendSync(**ws, "pings"));
  auto m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  // "pings:<count>:<last payload>", counted by the peer.
  const std::string& report = (*m)->data;
  REQUIRE(report.rfind("pings:", 0) == 0);
  const int count = std::atoi(report.c_str() + 6);
  INFO(report);
  CHECK(count >= 3);  // about 12 on an idle machine; the bound leaves room for a loaded one
  CHECK(report.find(":st-ping-") != std::string::npos);
  REQUIRE(SendSync(**ws, "still there"));
  m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  CHECK((*m)->data == "still there");
  CHECK(CloseSync(**ws));
}

TEST_CASE("keepalive: a peer that stops answering pings ends the stream within the pong deadline", "[websocket][keepalive]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  REQUIRE(peer.Port() > 0);
  WsTarget t = LocalTarget(peer.Port());
  t.ping_interval = std::chrono::milliseconds(200);
  t.pong_timeout = std::chrono::milliseconds(500);
  auto ws = ConnectSync(context, t);
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  REQUIRE(SendSync(**ws, "mute-pongs"));
  auto m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  REQUIRE((*m)->data == "muted");
  // The peer keeps the TCP connection open and reads on; only the pongs are missing.
  const auto muted_at = std::chrono::steady_clock::now();
  m = inbox->Pop();
  const auto elapsed = std::chrono::steady_clock::now() - muted_at;
  REQUIRE(m);
  REQUIRE(!*m);
  CHECK(m->error().code == Errc::connection_lost);
  CHECK(m->error().message.find("no pong") != std::string::npos);
  CHECK(m->error().message.find("500 ms") != std::string::npos);
  CHECK(m->error().message.find("every 200 ms") != std::string::npos);
  // At most one interval until the next ping, then its deadline; the rest is slack for a loaded box.
  CHECK(elapsed < std::chrono::milliseconds(200 + 500 + 3000));
  // Nothing follows the final error, and the socket refuses more work instead of hanging.
  CHECK(!inbox->Pop(std::chrono::milliseconds(200)));
  auto late = SendSync(**ws, "late");
  REQUIRE(!late);
}

TEST_CASE("keepalive: a zero interval sends no pings", "[websocket][keepalive]") {
  Context context;
  wstest::PeerProcess peer(PeerArgs({}));
  REQUIRE(peer.Port() > 0);
  WsTarget t = LocalTarget(peer.Port());
  t.ping_interval = std::chrono::milliseconds(0);
  auto ws = ConnectSync(context, t);
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  REQUIRE(!inbox->Pop(std::chrono::milliseconds(500)));
  REQUIRE(SendSync(**ws, "pings"));
  auto m = inbox->Pop();
  REQUIRE(m);
  INFO(Why(m));
  REQUIRE(*m);
  CHECK((*m)->data == "pings:0:");
}

namespace {

// The TCP socket of this process whose local port is `port` (found through /proc/self/fd, so that
// the test sees the client's real socket without an accessor for it), or -1.
int FindSocketByLocalPort(std::uint16_t port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.ss_family != AF_INET) continue;
    if (ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port) == port) return fd;
  }
  return -1;
}

int IntOption(int fd, int level, int name) {
  int value = -1;
  socklen_t len = sizeof value;
  if (::getsockopt(fd, level, name, &value, &len) != 0) return -1;
  return value;
}

}  // namespace

TEST_CASE("keepalive: TCP keepalive is on, with our timings and a matching user timeout", "[websocket][keepalive]") {
  Context context;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  WsTarget t = LocalTarget(acceptor.local_endpoint().port());
  // Not the system's defaults (7200 s, 75 s, 9), so that only our setting can produce them.
  t.tcp_keepalive.idle = std::chrono::seconds(7);
  t.tcp_keepalive.interval = std::chrono::seconds(3);
  t.tcp_keepalive.count = 4;
  t.handshake_timeout = std::chrono::seconds(30);
  auto promise = std::make_shared<std::promise<ConnectResult>>();
  WebSocket::AsyncConnect(context, t, [promise](ConnectResult r) { promise->set_value(std::move(r)); });
  // The options are set once TCP connected, before the upgrade: look while the client waits for the reply.
  asio::ip::tcp::socket server(io);
  acceptor.accept(server);
  const std::uint16_t client_port = server.remote_endpoint().port();
  int fd = -1, keepalive = -1, idle = -1, interval = -1, count = -1, user_timeout = -1;
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < deadline) {
    fd = FindSocketByLocalPort(client_port);
    if (fd >= 0 && IntOption(fd, IPPROTO_TCP, TCP_KEEPCNT) == 4) break;  // the client set them
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(fd >= 0);
  keepalive = IntOption(fd, SOL_SOCKET, SO_KEEPALIVE);
  idle = IntOption(fd, IPPROTO_TCP, TCP_KEEPIDLE);
  interval = IntOption(fd, IPPROTO_TCP, TCP_KEEPINTVL);
  count = IntOption(fd, IPPROTO_TCP, TCP_KEEPCNT);
  user_timeout = IntOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT);
  server.close();  // the client sees no reply and fails its connect
  auto future = promise->get_future();
  REQUIRE(future.wait_for(kWait) == std::future_status::ready);
  CHECK(!future.get());
  CHECK(keepalive == 1);
  CHECK(idle == 7);
  CHECK(interval == 3);
  CHECK(count == 4);
  CHECK(user_timeout == (7 + 3 * 4) * 1000);
}

TEST_CASE("TLS material digest: every field counts, boundaries do not blur", "[websocket][tls-cache]") {
  WsTls a;
  a.ca_pem = "ca";
  a.cert_pem = "cert";
  a.key_pem = "key";
  CHECK(TlsMaterialDigest(a) == TlsMaterialDigest(a));
  WsTls b = a;
  b.server_name = "other.example";  // per connection, not part of the context
  CHECK(TlsMaterialDigest(a) == TlsMaterialDigest(b));
  for (int field = 0; field < 4; ++field) {
    WsTls c = a;
    if (field == 0) c.ca_pem += "!";
    if (field == 1) c.cert_pem += "!";
    if (field == 2) c.key_pem += "!";
    if (field == 3) c.insecure = true;
    INFO("field " << field);
    CHECK(TlsMaterialDigest(a) != TlsMaterialDigest(c));
  }
  WsTls d = a, e = a;
  d.ca_pem = "cac";
  d.cert_pem = "ert";
  e.ca_pem = "ca";
  e.cert_pem = "cert";
  CHECK(TlsMaterialDigest(d) != TlsMaterialDigest(e));
}

TEST_CASE("TLS contexts: one per material per owner, shared by its connections, released with them", "[websocket][tls-cache]") {
  wstest::TempDir dir;
  auto pki = wstest::MakePki(dir);
  Context context;
  wstest::PeerProcess peer(PeerArgs({"--cert", pki.server_crt, "--key", pki.server_key}));
  REQUIRE(peer.Port() > 0);
  auto cache = std::make_shared<TlsContextCache>();
  WsTarget t = LocalTarget(peer.Port(), true);
  t.tls.ca_pem = pki.Pem(pki.ca_crt);
  t.tls_contexts = cache;
  WsTarget insecure = t;  // other material (verification off), same owner
  insecure.tls.insecure = true;

  std::weak_ptr<asio::ssl::context> weak_shared, weak_other;
  {
    auto ws1 = ConnectSync(context, t);
    REQUIRE(ws1);
    auto ws2 = ConnectSync(context, t);
    REQUIRE(ws2);
    CHECK(cache->Size() == 1);
    auto shared = cache->Get(t.tls);
    REQUIRE(shared);
    // The cache, both connections and this reference: the connections use the cached context.
    CHECK(shared->use_count() == 4);

    auto ws3 = ConnectSync(context, insecure);
    REQUIRE(ws3);
    CHECK(cache->Size() == 2);
    auto other = cache->Get(insecure.tls);
    REQUIRE(other);
    CHECK(other->get() != shared->get());
    CHECK(other->use_count() == 3);

    // Bad material is an error, reported before any network I/O, and is not kept.
    WsTarget bad = t;
    bad.tls.ca_pem = "not a certificate";
    auto refused = ConnectSync(context, bad);
    REQUIRE(!refused);
    CHECK(refused.error().code == Errc::invalid_argument);
    CHECK(refused.error().message.find("TLS configuration") != std::string::npos);
    CHECK(cache->Size() == 2);

    weak_shared = *shared;
    weak_other = *other;
    for (auto* ws : {&ws1, &ws2, &ws3}) CHECK(CloseSync(***ws));
  }
  // The owner still holds them for the next connection ...
  CHECK(!weak_shared.expired());
  // ... and they go with it (once the closed sockets' last handlers ran).
  cache.reset();
  t.tls_contexts.reset();
  insecure.tls_contexts.reset();
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while ((!weak_shared.expired() || !weak_other.expired()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(weak_shared.expired());
  CHECK(weak_other.expired());
}
