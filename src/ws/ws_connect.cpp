// Reaching the WebSocket server: resolve, TCP (with keepalive), an HTTP proxy's CONNECT tunnel, TLS
// (SNI, the verified name), and the deadline of each phase until the socket is open. The upgrade
// itself is ws_handshake.cpp's.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "ws/websocket_tls.hpp"
#include "ws/ws_impl.hpp"

namespace sessionturn::ws {

namespace ws_detail {

namespace {

// SO_KEEPALIVE with our timings and TCP_USER_TIMEOUT to match (see WsTcpKeepalive). The TCP_*
// options are Linux's (and most BSDs'); where they are missing the system's timings apply.
std::error_code SetTcpKeepalive(asio::ip::tcp::socket& socket, const WsTcpKeepalive& keepalive) {
  std::error_code ec;
  socket.set_option(asio::socket_base::keep_alive(true), ec);
  if (ec) return ec;
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL) && defined(TCP_KEEPCNT)
  const int fd = socket.native_handle();
  auto set = [&](int name, long long value) {
    const int v = static_cast<int>(std::clamp<long long>(value, 1, 1 << 30));
    if (::setsockopt(fd, IPPROTO_TCP, name, &v, sizeof v) != 0 && !ec) ec.assign(errno, std::system_category());
  };
  set(TCP_KEEPIDLE, keepalive.idle.count());
  set(TCP_KEEPINTVL, keepalive.interval.count());
  set(TCP_KEEPCNT, keepalive.count);
#ifdef TCP_USER_TIMEOUT
  // Without it, keepalive only runs on an idle socket: unacknowledged data would be retransmitted
  // for ~15 minutes (tcp_retries2) before a write or read failed.
  set(TCP_USER_TIMEOUT, std::chrono::milliseconds(keepalive.idle + keepalive.interval * keepalive.count).count());
#endif
#endif
  return ec;
}

}  // namespace

std::string DescribeCode(const std::error_code& ec) {
  if (ec == asio::error::eof) return "the peer closed the connection";
  if (ec == asio::ssl::error::stream_truncated) return "the peer closed the TLS stream without close_notify";
  return ec.message();
}

WsImpl::WsImpl(Context& context, WsTarget target, std::shared_ptr<asio::ssl::context> ssl_ctx)
    : target_(std::move(target)),
      strand_(asio::make_strand(context.io())),
      ssl_ctx_(std::move(ssl_ctx)),
      stream_(strand_, *ssl_ctx_),
      resolver_(strand_),
      timer_(strand_),
      ping_timer_(strand_),
      pong_timer_(strand_),
      reader_(target_.max_message),
      read_chunk_(kReadChunkBytes) {}

void WsImpl::Begin(ConnectHandler handler) {
  connect_handler_ = std::move(handler);
  if (!target_.proxy.empty()) {
    auto proxy = ParseProxyUrl(target_.proxy);
    if (!proxy) return FailConnect(proxy.error());
    proxy_ = std::move(*proxy);
  }
  ArmTimer(target_.connect_timeout, "connecting to " + Where());
  const std::string& host = proxy_ ? proxy_->host : target_.host;
  std::uint16_t port = proxy_ ? proxy_->port : target_.port;
  resolver_.async_resolve(host, std::to_string(port),
                          asio::bind_executor(strand_, [self = shared_from_this()](
                                                           std::error_code ec, asio::ip::tcp::resolver::results_type r) {
                            self->OnResolved(ec, std::move(r));
                          }));
}

void WsImpl::ArmTimer(std::chrono::milliseconds timeout, std::string phase) {
  phase_ = std::move(phase);
  phase_timeout_ = timeout;
  timer_.expires_after(timeout);
  timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this(), gen = ++timer_generation_](
                                                     std::error_code ec) {
    if (ec || gen != self->timer_generation_) return;
    self->timed_out_ = true;
    self->OnTimeout();
  }));
}

void WsImpl::DisarmTimer() {
  ++timer_generation_;
  timer_.cancel();
}

Error WsImpl::TimeoutError() const {
  return Error(Errc::timeout, "timed out after " + std::to_string(phase_timeout_.count()) + " ms " + phase_);
}

void WsImpl::OnTimeout() {
  if (connect_handler_) {
    resolver_.cancel();
    CloseTransport();  // the pending operation completes with an error; FailConnect reports the timeout
    return;
  }
  // The close handshake deadline: give up waiting for the peer's close frame.
  CloseTransport();
  CompleteClose(Fail(TimeoutError()));
}

void WsImpl::FailConnect(Error error) {
  if (timed_out_) error = TimeoutError();
  DisarmTimer();
  CloseTransport();
  if (auto h = std::move(connect_handler_)) {
    connect_handler_ = nullptr;
    h(Fail(std::move(error)));
  }
}

void WsImpl::OnResolved(std::error_code ec, asio::ip::tcp::resolver::results_type results) {
  const std::string& host = proxy_ ? proxy_->host : target_.host;
  if (ec)
    return FailConnect(Error(Errc::connection_failed,
                             "cannot resolve " + host + (proxy_ ? " (the proxy)" : "") + ": " + ec.message()));
  asio::async_connect(stream_.lowest_layer(), results,
                      asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec2,
                                                                               const asio::ip::tcp::endpoint&) {
                        self->OnConnected(ec2);
                      }));
}

void WsImpl::OnConnected(std::error_code ec) {
  if (ec) {
    std::string what = proxy_ ? "the proxy " + HostPort(proxy_->host, proxy_->port) + " for " + Where() : Where();
    return FailConnect(Error(Errc::connection_failed, "cannot connect to " + what + ": " + ec.message()));
  }
  std::error_code ignored;
  stream_.lowest_layer().set_option(asio::ip::tcp::no_delay(true), ignored);
  // Best effort: where the kernel refuses an option, the pings still notice a dead peer.
  if (target_.tcp_keepalive.enabled) (void)SetTcpKeepalive(stream_.next_layer(), target_.tcp_keepalive);
  if (proxy_) return SendProxyConnect();
  AfterTunnel();
}

void WsImpl::SendProxyConnect() {
  std::string authority = HostPort(target_.host, target_.port);
  request_ = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n";
  if (!proxy_->authorization.empty()) request_ += "Proxy-Authorization: " + proxy_->authorization + "\r\n";
  request_ += "\r\n";
  response_ = std::make_unique<HttpResponseParser>(HttpResponseParser::Mode::connect);
  asio::async_write(stream_.next_layer(), asio::buffer(request_),
                    asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t) {
                      if (ec)
                        return self->FailConnect(
                            Error(Errc::connection_failed, "proxy CONNECT for " + self->Where() + ": " + ec.message()));
                      self->ReadProxyReply();
                    }));
}

void WsImpl::ReadProxyReply() {
  stream_.next_layer().async_read_some(
      asio::buffer(read_chunk_),
      asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
        self->OnProxyRead(ec, n);
      }));
}

void WsImpl::OnProxyRead(std::error_code ec, std::size_t n) {
  if (ec)
    return FailConnect(
        Error(Errc::connection_failed, "proxy CONNECT for " + Where() + ": no reply: " + DescribeCode(ec)));
  const std::string_view bytes(read_chunk_.data(), n);
  const std::size_t used = response_->Feed(bytes);
  switch (response_->state()) {
    case HttpResponseParser::State::need_more: return ReadProxyReply();
    case HttpResponseParser::State::failed: {
      Error e = response_->error();
      e.message = "proxy CONNECT for " + Where() + ": " + e.message;
      return FailConnect(std::move(e));
    }
    case HttpResponseParser::State::refused:
      return FailConnect(Error(Errc::connection_failed,
                               "proxy refused CONNECT to " + Where() + ": " + response_->head().status_line,
                               response_->head().status));
    case HttpResponseParser::State::upgraded: break;
  }
  // The server speaks only after our request, so nothing may follow the proxy's reply yet. For ws://
  // such bytes would be the upgrade's reply and are kept for it; under TLS they cannot be.
  if (used < n && target_.use_tls)
    return FailConnect(Error(Errc::protocol_error, "proxy CONNECT for " + Where() + ": " +
                                                       std::to_string(n - used) +
                                                       " bytes followed the proxy's reply before TLS began"));
  buffer_.assign(bytes.substr(used));
  response_.reset();
  AfterTunnel();
}

void WsImpl::AfterTunnel() {
  if (!target_.use_tls) return SendUpgrade();
  SSL* ssl = stream_.native_handle();
  const std::string& name = target_.tls.server_name.empty() ? target_.host : target_.tls.server_name;
  bool ip = IsIpLiteral(name);
  // SNI must be a DNS name (RFC 6066 §3), never an address.
  if (!ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1)
    return FailConnect(Error(Errc::connection_failed, "cannot set SNI " + name + ": " + DrainOpenSslErrors()));
  if (!target_.tls.insecure) {
    int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) : SSL_set1_host(ssl, name.c_str());
    if (ok != 1)
      return FailConnect(
          Error(Errc::connection_failed, "cannot set the name to verify (" + name + "): " + DrainOpenSslErrors()));
  }
  stream_.async_handshake(asio::ssl::stream_base::client,
                          asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec) {
                            self->OnTlsHandshake(ec);
                          }));
}

void WsImpl::OnTlsHandshake(std::error_code ec) {
  if (!ec) return SendUpgrade();
  std::string why = DescribeCode(ec);
  long verify = SSL_get_verify_result(stream_.native_handle());
  if (verify != X509_V_OK) {
    why = std::string("certificate verification failed: ") + X509_verify_cert_error_string(verify);
    const std::string& name = target_.tls.server_name.empty() ? target_.host : target_.tls.server_name;
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
      why += " (the certificate is not valid for \"" + name + "\")";
  }
  FailConnect(Error(Errc::connection_failed, "TLS handshake with " + Where() + " failed: " + why));
}

}  // namespace ws_detail

void WebSocket::AsyncConnect(Context& context, WsTarget target, ConnectHandler handler) {
  // The TLS material is checked before anything touches the network: a bad PEM is the caller's to
  // fix, not a connection failure.
  auto ssl_ctx = TlsContextFor(target);
  if (!ssl_ctx) {
    Error e = ssl_ctx.error();
    if (e.code != Errc::internal) e.message = "TLS configuration for " + target.Describe() + ": " + e.message;
    context.Post([handler = std::move(handler), e = std::move(e)] { handler(Fail(e)); });
    return;
  }
  std::shared_ptr<ws_detail::WsImpl> ws;
  try {
    ws = std::make_shared<ws_detail::WsImpl>(context, std::move(target), std::move(*ssl_ctx));
  } catch (const std::exception& e) {
    // The stream's SSL_new may fail (out of memory); asio throws, we do not.
    context.Post([handler = std::move(handler), what = std::string(e.what())] {
      handler(Fail(Errc::internal, std::string("cannot create a TLS stream: ") + what));
    });
    return;
  }
  asio::post(ws->executor(), [ws, handler = std::move(handler)]() mutable { ws->Begin(std::move(handler)); });
}

}  // namespace sessionturn::ws
