// The WebSocket client's sans-I/O parts (src/ws/): the handshake's accept value, the frame codec,
// ws:// URLs, NO_PROXY and the proxy from the environment.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/ws_client_support.hpp"

using namespace wsclient;

TEST_CASE("Sec-WebSocket-Accept follows RFC 6455's example", "[websocket]") {
  CHECK(WsAcceptFor("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  std::string a = NewWsKey(), b = NewWsKey();
  CHECK(a.size() == 24);
  CHECK(a != b);
}

TEST_CASE("client frames are masked with a fresh key per frame", "[websocket]") {
  std::string payload(300, 'x');
  std::string f1 = EncodeWsFrame(ws_opcode::kBinary, payload);
  std::string f2 = EncodeWsFrame(ws_opcode::kBinary, payload);
  REQUIRE(f1.size() == 2 + 2 + 4 + 300);
  CHECK(static_cast<unsigned char>(f1[0]) == 0x82);
  CHECK(static_cast<unsigned char>(f1[1]) == (0x80 | 126));
  CHECK(((static_cast<unsigned char>(f1[2]) << 8) | static_cast<unsigned char>(f1[3])) == 300);
  CHECK(f1.substr(4, 4) != f2.substr(4, 4));  // 2^-32 chance of a false failure
  std::string unmasked;
  for (std::size_t i = 0; i < payload.size(); ++i) unmasked.push_back(static_cast<char>(f1[8 + i] ^ f1[4 + (i & 3)]));
  CHECK(unmasked == payload);
  // 64-bit length form.
  std::string big(70000, 'y');
  std::string f3 = EncodeWsFrame(ws_opcode::kBinary, big, true, false);
  CHECK(static_cast<unsigned char>(f3[1]) == 127);
  CHECK(f3.size() == 10 + big.size());
}

TEST_CASE("WsReader reassembles fragments around control frames, byte by byte", "[websocket]") {
  std::string stream = Frame(0x02, "ab") + Frame(0x00, "cd") + Frame(0x89, "p!") + Frame(0x80, "ef") +
                       Frame(0x81, "text") + EncodeWsFrame(ws_opcode::kBinary, std::string(1000, 'z'), true, false) +
                       Frame(0x88, std::string("\x03\xe8" "done", 6));
  WsReader reader;
  std::vector<WsReader::Event> events;
  for (char c : stream) {
    REQUIRE(reader.Feed(std::string_view(&c, 1), [&](WsReader::Event&& e) { events.push_back(std::move(e)); }));
  }
  REQUIRE(events.size() == 5);
  CHECK(events[0].kind == WsReader::Event::kPing);
  CHECK(events[0].data == "p!");
  CHECK(events[1].kind == WsReader::Event::kMessage);
  CHECK(events[1].binary);
  CHECK(events[1].data == "abcdef");
  CHECK(!events[2].binary);
  CHECK(events[2].data == "text");
  CHECK(events[3].data == std::string(1000, 'z'));
  CHECK(events[4].kind == WsReader::Event::kClose);
  CHECK(events[4].close_code == 1000);
  CHECK(events[4].data == "done");
}

TEST_CASE("WsReader rejects what RFC 6455 forbids", "[websocket]") {
  auto feed = [](std::string bytes, std::size_t max = kMaxWsMessageBytes) {
    WsReader reader(max);
    return reader.Feed(bytes, [](WsReader::Event&&) {});
  };
  auto masked = feed(EncodeWsFrame(ws_opcode::kBinary, "x", true, true));
  REQUIRE(!masked);
  CHECK(masked.error().message.find("masked") != std::string::npos);
  CHECK(feed(Frame(0xC2, "x")).error().code == Errc::protocol_error);            // RSV1
  CHECK(feed(Frame(0x83, "x")).error().code == Errc::protocol_error);            // opcode 3
  CHECK(feed(Frame(0x00, "x")).error().code == Errc::protocol_error);            // continuation first
  CHECK(feed(Frame(0x02, "a") + Frame(0x82, "b")).error().code == Errc::protocol_error);  // new message mid-way
  CHECK(feed(Frame(0x09, "p")).error().code == Errc::protocol_error);            // fragmented ping
  CHECK(feed(Frame(0x88, "x")).error().code == Errc::protocol_error);            // 1-byte close payload
  // The bound is checked on the declared length, before the payload arrives.
  std::string header("\x82\x7f\x00\x00\x00\x00\x01\x00\x00\x01", 10);  // 16 MiB + 1
  auto big = feed(header);
  REQUIRE(!big);
  CHECK(big.error().code == Errc::too_large);
  CHECK(big.error().message.find("kMaxWsMessageBytes") != std::string::npos);
  // Across fragments.
  auto frag = feed(Frame(0x02, std::string(60, 'a')) + Frame(0x80, std::string(60, 'b')), 100);
  REQUIRE(!frag);
  CHECK(frag.error().code == Errc::too_large);
  // Poisoned after an error.
  WsReader reader;
  CHECK(!reader.Feed(Frame(0x83, "x"), [](WsReader::Event&&) {}));
  CHECK(!reader.Feed(Frame(0x82, "x"), [](WsReader::Event&&) {}));
}

TEST_CASE("NO_PROXY matching", "[websocket]") {
  CHECK(NoProxyMatches("*", "anything"));
  CHECK(NoProxyMatches("example.com", "api.example.com"));
  CHECK(NoProxyMatches(".example.com", "api.example.com"));
  CHECK(NoProxyMatches("a.b, example.com:443", "example.com"));
  CHECK_FALSE(NoProxyMatches("example.com", "badexample.com"));
  CHECK(NoProxyMatches("10.0.0.0/8", "10.1.2.3"));
  CHECK_FALSE(NoProxyMatches("10.0.0.0/8", "11.1.2.3"));
  CHECK_FALSE(NoProxyMatches("", "example.com"));
}

TEST_CASE("the proxy comes from HTTPS_PROXY / HTTP_PROXY unless NO_PROXY exempts the host", "[websocket]") {
  // Saved and restored: other tests must not see these. No Context runs here (setenv is not thread-safe).
  const char* names[] = {"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  for (const char* n : names) {
    const char* v = std::getenv(n);
    saved.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
    unsetenv(n);
  }
  CHECK(ProxyFromEnvironment("api.example.com", true).empty());
  setenv("HTTPS_PROXY", "http://proxy.corp:3128", 1);
  CHECK(ProxyFromEnvironment("api.example.com", true) == "http://proxy.corp:3128");
  CHECK(ProxyFromEnvironment("api.example.com", false).empty());  // ws:// uses HTTP_PROXY
  setenv("no_proxy", "localhost,.example.com", 1);
  CHECK(ProxyFromEnvironment("api.example.com", true).empty());
  CHECK(ProxyFromEnvironment("api.other.org", true) == "http://proxy.corp:3128");
  for (auto& [n, v] : saved) {
    if (v) setenv(n.c_str(), v->c_str(), 1);
    else unsetenv(n.c_str());
  }
}

TEST_CASE("ParseWsUrl: ws:// and wss:// targets", "[websocket][url]") {
  auto slack = ParseWsUrl("wss://wss-primary.slack.com/link/?ticket=abc-123&app_id=A1%2FB");
  REQUIRE(slack);
  CHECK(slack->use_tls);
  CHECK(slack->host == "wss-primary.slack.com");
  CHECK(slack->port == 443);
  CHECK(slack->path == "/link/?ticket=abc-123&app_id=A1%2FB");  // kept as sent, still URL-encoded
  CHECK(slack->Describe() == "wss://wss-primary.slack.com:443/link/");
  CHECK(slack->subprotocols.empty());
  CHECK(slack->ping_interval == kDefaultWsPingInterval);

  auto local = ParseWsUrl("ws://127.0.0.1:8765/link/?ticket=t");
  REQUIRE(local);
  CHECK(!local->use_tls);
  CHECK(local->host == "127.0.0.1");
  CHECK(local->port == 8765);
  CHECK(local->path == "/link/?ticket=t");

  auto bare = ParseWsUrl("ws://example.com");
  REQUIRE(bare);
  CHECK(bare->port == 80);
  CHECK(bare->path == "/");
  auto query_only = ParseWsUrl("WSS://Example.com?x=1");
  REQUIRE(query_only);
  CHECK(query_only->use_tls);
  CHECK(query_only->path == "/?x=1");

  auto v6 = ParseWsUrl("ws://[::1]:9000/p");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 9000);
  CHECK(v6->Describe() == "ws://[::1]:9000/p");
  auto v6_default = ParseWsUrl("wss://[2001:db8::7]");
  REQUIRE(v6_default);
  CHECK(v6_default->host == "2001:db8::7");
  CHECK(v6_default->port == 443);
}

TEST_CASE("ParseWsUrl: errors name what is wrong", "[websocket][url]") {
  auto error = [](std::string_view url) {
    auto t = ParseWsUrl(url);
    REQUIRE(!t);
    CHECK(t.error().code == Errc::invalid_argument);
    return t.error().message;
  };
  auto has = [](const std::string& message, const char* what) {
    INFO(message);
    return message.find(what) != std::string::npos;
  };
  CHECK(has(error("https://example.com/"), "scheme"));
  CHECK(has(error("example.com/socket"), "scheme"));
  CHECK(has(error("ws:/example.com"), "scheme"));
  CHECK(has(error("ws://"), "host is empty"));
  CHECK(has(error("ws:///path"), "host is empty"));
  CHECK(has(error("ws://:80/"), "host is empty"));
  CHECK(has(error("ws://host:0/"), "bad port"));
  CHECK(has(error("ws://host:65536/"), "bad port"));
  CHECK(has(error("ws://host:http/"), "bad port"));
  CHECK(has(error("ws://host:/"), "bad port"));
  CHECK(has(error("ws://host:-1/"), "bad port"));
  CHECK(has(error("wss://user:secret@host/"), "userinfo"));
  CHECK(has(error("wss://host/path#frag"), "fragment"));
  CHECK(has(error("ws://::1/"), "brackets"));
  CHECK(has(error("ws://[::1/"), "closing ']'"));
  CHECK(has(error("ws://[nothost]/"), "not an IPv6 address"));
  CHECK(has(error("ws://[::1]x/"), "after the IPv6 host"));
  CHECK(has(error("ws://ho st/"), "invalid characters"));
  CHECK(has(error("ws://host/a b"), "percent-encode"));
  CHECK(has(error("ws://host/a\r\nX-Injected: 1"), "percent-encode"));
  // The message quotes the URL, so the caller sees which one, but never a secret in it.
  CHECK(has(error("ftp://files.example/"), "ftp://files.example/"));
  CHECK(!has(error("wss://user:secret@host/"), "secret"));
  CHECK(!has(error("wss://host/link/?ticket=s3cret#x"), "s3cret"));
}
