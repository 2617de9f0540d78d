// The WebSocket upgrade (RFC 6455 §4): our GET with the key, the offered sub-protocols and the
// caller's headers; the reply parsed by HttpResponseParser. A 101 is checked (Upgrade, Connection,
// Sec-WebSocket-Accept, the agreed sub-protocol, no extensions) and the bytes read after its head,
// already frames, are kept for the reader; any other status is a refusal explained by its body.
#include <algorithm>

#include "sessionturn/version.hpp"
#include "ws/ws_impl.hpp"

namespace sessionturn::ws::ws_detail {

namespace {

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string UpgradeRequest(const WsTarget& target, const std::string& key) {
  bool default_port = target.port == (target.use_tls ? 443 : 80);
  std::string host = target.host.find(':') != std::string::npos ? "[" + target.host + "]" : target.host;
  if (!default_port) host += ":" + std::to_string(target.port);
  std::string request = "GET " + target.path + " HTTP/1.1\r\nHost: " + host +
                        "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                        "Sec-WebSocket-Key: " +
                        key + "\r\nUser-Agent: sessionturn/" SESSIONTURN_VERSION_STRING "\r\n";
  if (!target.subprotocols.empty()) request += "Sec-WebSocket-Protocol: " + Joined(target.subprotocols) + "\r\n";
  for (const auto& [name, value] : target.headers) request += name + ": " + value + "\r\n";
  return request + "\r\n";
}

}  // namespace

void WsImpl::SendUpgrade() {
  ArmTimer(target_.handshake_timeout, "waiting for the WebSocket handshake with " + Where());
  key_ = NewWsKey();
  request_ = UpgradeRequest(target_, key_);
  response_ = std::make_unique<HttpResponseParser>(HttpResponseParser::Mode::upgrade);
  WithStream([&](auto& s) {
    asio::async_write(s, asio::buffer(request_),
                      asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t) {
                        if (ec)
                          return self->FailConnect(Error(Errc::connection_failed, "sending the WebSocket upgrade to " +
                                                                                      self->Where() + ": " +
                                                                                      DescribeCode(ec)));
                        self->ReadUpgradeReply();
                      }));
  });
}

void WsImpl::ReadUpgradeReply() {
  if (!buffer_.empty()) {  // bytes that came with the proxy's reply (ws:// through a proxy)
    std::string pending = std::move(buffer_);
    buffer_.clear();
    return OnUpgradeBytes(pending);
  }
  WithStream([&](auto& s) {
    s.async_read_some(asio::buffer(read_chunk_),
                      asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
                        self->OnUpgradeRead(ec, n);
                      }));
  });
}

void WsImpl::OnUpgradeRead(std::error_code ec, std::size_t n) {
  if (!ec) return OnUpgradeBytes(std::string_view(read_chunk_.data(), n));
  if (response_->HeadComplete()) {
    // A refusal's body ends with the connection (or was cut short by it, or by the deadline).
    response_->FeedEof();
    return FinishRefusal();
  }
  FailConnect(Error(Errc::connection_failed, "no WebSocket handshake reply from " + Where() + ": " + DescribeCode(ec)));
}

void WsImpl::OnUpgradeBytes(std::string_view bytes) {
  const std::size_t used = response_->Feed(bytes);
  switch (response_->state()) {
    case HttpResponseParser::State::need_more: return ReadUpgradeReply();
    case HttpResponseParser::State::failed: {
      Error e = response_->error();
      e.message = "WebSocket handshake with " + Where() + ": " + e.message;
      return FailConnect(std::move(e));
    }
    case HttpResponseParser::State::refused: return FinishRefusal();
    case HttpResponseParser::State::upgraded: break;
  }
  if (auto st = CheckUpgrade(response_->head()); !st) return FailConnect(st.error());
  // The server may send frames right behind its 101, in the same read: they wait for Start().
  buffer_.assign(bytes.substr(used));
  Opened();
}

Status WsImpl::CheckUpgrade(const HttpHead& head) const {
  const std::string where = "WebSocket handshake with " + Where() + ": ";
  if (!HeaderHasToken(head.Get("upgrade"), "websocket") || !HeaderHasToken(head.Get("connection"), "upgrade"))
    return Fail(Errc::protocol_error, where + "the 101 reply lacks Upgrade: websocket / Connection: Upgrade");
  std::string accept = head.Get("sec-websocket-accept");
  if (accept != WsAcceptFor(key_))
    return Fail(Errc::protocol_error, where + "wrong Sec-WebSocket-Accept \"" + accept.substr(0, 64) +
                                          "\" (the server did not answer our key)");
  std::string protocol = head.Get("sec-websocket-protocol");
  const auto& offered = target_.subprotocols;
  if (!offered.empty()) {
    if (protocol.empty())
      return Fail(Errc::protocol_error,
                  where + "the server agreed to no sub-protocol (offered " + Joined(offered) + ")");
    if (std::find(offered.begin(), offered.end(), protocol) == offered.end())
      return Fail(Errc::protocol_error, where + "the server chose sub-protocol \"" + protocol +
                                            "\", which we did not offer (" + Joined(offered) + ")");
  } else if (!protocol.empty()) {
    return Fail(Errc::protocol_error,
                where + "the server chose sub-protocol \"" + protocol + "\" although none was offered");
  }
  if (!head.Get("sec-websocket-extensions").empty())
    return Fail(Errc::protocol_error, where + "the server enabled extensions we did not offer");
  return {};
}

void WsImpl::FinishRefusal() {
  // Past the deadline the refusal, with what arrived of its body, still says more than "timed out".
  timed_out_ = false;
  Error e = RefusedUpgrade(Where(), response_->head(), response_->body());
  FailConnect(std::move(e));
}

void WsImpl::Opened() {
  subprotocol_ = response_->head().Get("sec-websocket-protocol");
  response_.reset();
  DisarmTimer();
  phase_.clear();
  auto h = std::move(connect_handler_);
  connect_handler_ = nullptr;
  h(std::static_pointer_cast<WebSocket>(shared_from_this()));
}

}  // namespace sessionturn::ws::ws_detail
