// The WebSocket client's HTTP response parser (src/ws/response_parser.hpp, Node's http_parser in
// HTTP_RESPONSE mode): the upgrade's reply and a proxy's reply to CONNECT, whole and split, with
// refusals and their bodies; then the client against a raw server that answers in one write.
#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "http/ws_client_support.hpp"
#include "ws/response_parser.hpp"

using namespace wsclient;
using State = HttpResponseParser::State;
using Mode = HttpResponseParser::Mode;

namespace {

const std::string kHead101 =
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";

// Feeds `bytes` in parts of `step` bytes (0: whole) the way the connection does: stop feeding once
// the parser has decided; returns how many bytes it consumed in all.
std::size_t FeedInParts(HttpResponseParser& parser, std::string_view bytes, std::size_t step) {
  std::size_t consumed = 0;
  while (!bytes.empty() && parser.state() == State::need_more) {
    std::string_view part = step == 0 ? bytes : bytes.substr(0, step);
    const std::size_t used = parser.Feed(part);
    consumed += used;
    if (used < part.size()) break;
    bytes.remove_prefix(part.size());
  }
  return consumed;
}

// One chunk of a chunked body (RFC 9112 §7.1), with an optional extension.
std::string Chunk(const std::string& data, const std::string& extension = "") {
  char size[20];
  std::snprintf(size, sizeof size, "%zx", data.size());
  return size + extension + "\r\n" + data + "\r\n";
}

}  // namespace

TEST_CASE("response parser: a 101 head followed by frames in the same read leaves the frames", "[websocket][response]") {
  const std::string bytes = kHead101 + Frame(0x81, "early") + Frame(0x82, "two");
  for (std::size_t step : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
    INFO("step " << step);
    HttpResponseParser parser(Mode::upgrade);
    const std::size_t used = FeedInParts(parser, bytes, step);
    REQUIRE(parser.state() == State::upgraded);
    CHECK(used == kHead101.size());
    CHECK(parser.head().status == 101);
    CHECK(parser.head().status_line == "HTTP/1.1 101 Switching Protocols");
    CHECK(parser.head().Get("upgrade") == "websocket");
    CHECK(parser.head().Get("sec-websocket-accept") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    // What was not consumed is exactly the frames, and they read back.
    WsReader reader;
    std::vector<std::string> messages;
    REQUIRE(reader.Feed(std::string_view(bytes).substr(used),
                        [&](WsReader::Event&& e) { messages.push_back(e.data); }));
    CHECK(messages == std::vector<std::string>{"early", "two"});
    CHECK(parser.Feed("more") == 0);  // decided: nothing more is consumed
  }
}

TEST_CASE("response parser: a head split byte by byte gives the same head", "[websocket][response]") {
  const std::string bytes =
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nCONNECTION: Upgrade\r\nX-Multi: a\r\n"
      "x-multi:  b \r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n";
  HttpResponseParser whole(Mode::upgrade), split(Mode::upgrade);
  REQUIRE(whole.Feed(bytes) == bytes.size());
  REQUIRE(FeedInParts(split, bytes, 1) == bytes.size());
  REQUIRE(split.state() == State::upgraded);
  CHECK(split.head().headers == whole.head().headers);
  CHECK(split.head().status_line == whole.head().status_line);
  CHECK(split.head().Get("connection") == "Upgrade");
  CHECK(split.head().Get("x-multi") == "a, b");  // lower-cased names, repeated headers joined, trimmed
}

TEST_CASE("response parser: interim 1xx responses are skipped", "[websocket][response]") {
  HttpResponseParser parser(Mode::upgrade);
  const std::string bytes = "HTTP/1.1 100 Continue\r\nX-A: 1\r\n\r\n" + kHead101;
  CHECK(parser.Feed(bytes) == bytes.size());
  REQUIRE(parser.state() == State::upgraded);
  CHECK(parser.head().status == 101);
  CHECK(parser.head().Get("x-a").empty());
}

TEST_CASE("response parser: a refused upgrade with a chunked body", "[websocket][response]") {
  const std::string bytes = "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n" +
                            Chunk("{\"kin") + Chunk("d\":\"Status\",\"message\":\"no", ";ext=1") + Chunk("\"}\n") +
                            "0\r\n\r\n";
  for (std::size_t step : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
    INFO("step " << step);
    HttpResponseParser parser(Mode::upgrade);
    FeedInParts(parser, bytes, step);
    REQUIRE(parser.state() == State::refused);
    CHECK(parser.head().status == 403);
    CHECK(parser.body() == "{\"kind\":\"Status\",\"message\":\"no\"}\n");
    CHECK(!parser.BodyTruncated());
  }
}

TEST_CASE("response parser: a refused upgrade with a Content-Length body", "[websocket][response]") {
  const std::string head = "HTTP/1.1 401 Unauthorized\r\nContent-Length: 12\r\n\r\n";
  SECTION("complete") {
    HttpResponseParser parser(Mode::upgrade);
    FeedInParts(parser, head + "Unauthorized" + "ignored", 3);
    REQUIRE(parser.state() == State::refused);
    CHECK(parser.body() == "Unauthorized");
    CHECK(!parser.BodyTruncated());
  }
  SECTION("cut short by the close: what came is still shown") {
    HttpResponseParser parser(Mode::upgrade);
    parser.Feed(head + "Unauth");
    REQUIRE(parser.state() == State::need_more);
    REQUIRE(parser.HeadComplete());
    parser.FeedEof();
    REQUIRE(parser.state() == State::refused);
    CHECK(parser.body() == "Unauth");
    CHECK(parser.BodyTruncated());
  }
  SECTION("longer than the bound: cut there, without waiting for the rest") {
    HttpResponseParser parser(Mode::upgrade, kMaxHttpHeadBytes, 5);
    parser.Feed("HTTP/1.1 500 Oops\r\nContent-Length: 100000\r\n\r\n0123456789");
    REQUIRE(parser.state() == State::refused);
    CHECK(parser.body() == "01234");
    CHECK(parser.BodyTruncated());
  }
  SECTION("no body at all") {
    HttpResponseParser parser(Mode::upgrade);
    parser.Feed("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    REQUIRE(parser.state() == State::refused);
    CHECK(parser.body().empty());
  }
}

TEST_CASE("response parser: a refused upgrade with a body until the close", "[websocket][response]") {
  HttpResponseParser parser(Mode::upgrade);
  const std::string bytes = "HTTP/1.0 503 Service Unavailable\r\nConnection: close\r\n\r\nbusy, ";
  FeedInParts(parser, bytes, 2);
  parser.Feed("try later");
  CHECK(parser.state() == State::need_more);
  parser.FeedEof();
  REQUIRE(parser.state() == State::refused);
  CHECK(parser.head().status_line == "HTTP/1.0 503 Service Unavailable");
  CHECK(parser.body() == "busy, try later");
  CHECK(!parser.BodyTruncated());
}

TEST_CASE("response parser: a head over the limit fails at the limit, however it is split", "[websocket][response]") {
  const std::string big = "HTTP/1.1 101 Switching Protocols\r\nX-Pad: " + std::string(kMaxHttpHeadBytes, 'a') + "\r\n\r\n";
  for (std::size_t step : {std::size_t{0}, std::size_t{1000}, std::size_t{4096}}) {
    INFO("step " << step);
    HttpResponseParser parser(Mode::upgrade);
    const std::size_t used = FeedInParts(parser, big, step);
    REQUIRE(parser.state() == State::failed);
    CHECK(used <= kMaxHttpHeadBytes);
    CHECK(parser.error().code == Errc::protocol_error);
    CHECK(parser.error().message.find("kMaxHttpHeadBytes") != std::string::npos);
  }
  // A small bound: a head of exactly that many bytes passes, one more byte does not.
  HttpResponseParser exact(Mode::upgrade, kHead101.size());
  exact.Feed(kHead101);
  CHECK(exact.state() == State::upgraded);
  HttpResponseParser over(Mode::upgrade, kHead101.size() - 1);
  over.Feed(kHead101);
  CHECK(over.state() == State::failed);
}

TEST_CASE("response parser: garbage and truncated replies", "[websocket][response]") {
  auto verdict = [](std::string bytes) {
    HttpResponseParser parser(Mode::upgrade);
    parser.Feed(bytes);
    if (parser.state() == State::need_more) parser.FeedEof();
    return parser.state() == State::failed ? parser.error() : Error(Errc::internal, "not failed");
  };
  CHECK(verdict("SSH-2.0-OpenSSH_9.2\r\n").code == Errc::protocol_error);
  CHECK(verdict("GET / HTTP/1.1\r\n\r\n").code == Errc::protocol_error);  // a request is no response
  CHECK(verdict("HTTP/1.1 abc Nope\r\n\r\n").code == Errc::protocol_error);
  CHECK(verdict("HTTP/1.1 2 OK\r\n\r\n").code == Errc::protocol_error);  // http_parser alone would take it
  CHECK(verdict("HTTP/1.1 101 OK\r\nBad Header\r\n\r\n").code == Errc::protocol_error);
  CHECK(verdict(std::string("\x16\x03\x01\x00\x05hello", 10)).code == Errc::protocol_error);  // TLS to a ws:// port
  auto cut = verdict("HTTP/1.1 101 Switching");
  CHECK(cut.code == Errc::connection_failed);
  CHECK(cut.message.find("middle of the response head") != std::string::npos);
  CHECK(verdict("").code == Errc::connection_failed);
  auto message = verdict("nonsense");
  CHECK(message.message.find("malformed HTTP response") != std::string::npos);
}

TEST_CASE("response parser: a proxy's reply to CONNECT", "[websocket][response]") {
  SECTION("200 opens the tunnel; what follows is not consumed") {
    HttpResponseParser parser(Mode::connect);
    const std::string head = "HTTP/1.1 200 Connection established\r\nContent-Length: 5\r\n\r\n";
    CHECK(parser.Feed(head + "\x16\x03\x01") == head.size());  // a CONNECT reply has no body
    CHECK(parser.state() == State::upgraded);
  }
  SECTION("407 is a refusal at its head") {
    HttpResponseParser parser(Mode::connect);
    FeedInParts(parser, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 1000\r\n\r\n<html>", 3);
    REQUIRE(parser.state() == State::refused);
    CHECK(parser.head().status == 407);
    CHECK(parser.body().empty());
  }
}

// --- the client against a raw server that answers in one write --------------------------------------

namespace {

// Accepts one connection on loopback, reads the upgrade request and writes reply(key) in one write;
// then closes (close_after) or reads until the client hangs up.
class RawServer {
 public:
  using Reply = std::function<std::string(const std::string& key)>;

  RawServer(Reply reply, bool close_after)
      : acceptor_(io_, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this, reply = std::move(reply), close_after] { Serve(reply, close_after); });
  }
  ~RawServer() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // unblocks an accept that never got a client
    thread_.join();
  }
  int Port() const { return acceptor_.local_endpoint().port(); }

 private:
  void Serve(const Reply& reply, bool close_after) {
    std::error_code ec;
    asio::ip::tcp::socket socket(io_);
    acceptor_.accept(socket, ec);
    if (ec) return;
    std::string head;
    asio::read_until(socket, asio::dynamic_buffer(head), "\r\n\r\n", ec);
    if (ec) return;
    std::string key;
    if (std::size_t at = head.find("Sec-WebSocket-Key: "); at != std::string::npos)
      key = head.substr(at + 19, head.find("\r\n", at) - at - 19);
    asio::write(socket, asio::buffer(reply(key)), ec);
    if (close_after) {
      socket.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
      return;
    }
    char buf[4096];
    while (!ec) socket.read_some(asio::buffer(buf), ec);
  }

  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
};

WsTarget RawTarget(const RawServer& server) {
  WsTarget t = LocalTarget(server.Port());
  t.subprotocols.clear();
  t.close_timeout = std::chrono::milliseconds(300);  // the raw server never answers a close frame
  return t;
}

}  // namespace

TEST_CASE("client: frames sent in the same write as the 101 are delivered", "[websocket][response]") {
  Context context;
  RawServer server(
      [](const std::string& key) {
        return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Accept: " +
               WsAcceptFor(key) + "\r\n\r\n" + Frame(0x81, "early") + Frame(0x82, "bird");
      },
      false);
  auto ws = ConnectSync(context, RawTarget(server));
  REQUIRE(ws);
  auto inbox = StartCollecting(**ws);
  for (const char* want : {"early", "bird"}) {
    auto m = inbox->Pop();
    REQUIRE(m);
    INFO(Why(m));
    REQUIRE(*m);
    CHECK((*m)->data == want);
  }
  (*ws)->Abort();
}

TEST_CASE("client: refused upgrades are explained by their bodies", "[websocket][response]") {
  Context context;
  SECTION("403, chunked Kubernetes Status") {
    RawServer server(
        [](const std::string&) {
          return "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n" + Chunk(R"({"kind":"Status",)") +
                 Chunk(R"("message":"pods \"p\" is forbidden"})") + "0\r\n\r\n";
        },
        false);
    auto ws = ConnectSync(context, RawTarget(server));
    REQUIRE(!ws);
    CHECK(ws.error().code == Errc::forbidden);
    CHECK(ws.error().http_status == 403);
    CHECK(ws.error().message.find("pods \"p\" is forbidden") != std::string::npos);
  }
  SECTION("503, Content-Length") {
    RawServer server([](const std::string&) { return std::string("HTTP/1.1 503 Busy\r\nContent-Length: 9\r\n\r\nslow down"); },
                     false);
    auto ws = ConnectSync(context, RawTarget(server));
    REQUIRE(!ws);
    CHECK(ws.error().code == Errc::unavailable);
    CHECK(ws.error().message.find("HTTP/1.1 503 Busy: slow down") != std::string::npos);
  }
  SECTION("401, a body until the close") {
    RawServer server(
        [](const std::string&) { return std::string("HTTP/1.1 401 Unauthorized\r\nConnection: close\r\n\r\ninvalid_auth"); },
        true);
    auto ws = ConnectSync(context, RawTarget(server));
    REQUIRE(!ws);
    CHECK(ws.error().code == Errc::unauthorized);
    CHECK(ws.error().message.find("invalid_auth") != std::string::npos);
  }
  SECTION("a body until a close that never comes: the deadline ends it, the refusal is reported") {
    RawServer server([](const std::string&) { return std::string("HTTP/1.1 404 Not Found\r\n\r\nno such link"); },
                     false);
    WsTarget t = RawTarget(server);
    t.handshake_timeout = std::chrono::milliseconds(300);
    auto ws = ConnectSync(context, t);
    REQUIRE(!ws);
    CHECK(ws.error().code == Errc::not_found);
    CHECK(ws.error().message.find("no such link") != std::string::npos);
  }
  SECTION("a head over the limit") {
    RawServer server(
        [](const std::string&) {
          return "HTTP/1.1 101 Switching Protocols\r\nX-Pad: " + std::string(kMaxHttpHeadBytes, 'p') + "\r\n\r\n";
        },
        false);
    auto ws = ConnectSync(context, RawTarget(server));
    REQUIRE(!ws);
    CHECK(ws.error().code == Errc::protocol_error);
    CHECK(ws.error().message.find("kMaxHttpHeadBytes") != std::string::npos);
  }
}
