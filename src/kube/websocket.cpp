// The WebSocket client's connection: resolve, connect (through a proxy), TLS, the upgrade, then
// frames both ways, the close handshake and the liveness pings, all on one strand. The HTTP
// helpers, the frame codec and the TLS contexts live in websocket_http.cpp, websocket_codec.cpp and
// websocket_tls.cpp.
#include "kube/websocket.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>

#include <asio/ssl.hpp>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "kube/websocket_internal.hpp"
#include "kube/websocket_tls.hpp"
#include "sessionturn/version.hpp"

namespace sessionturn::kube {

using namespace ws_detail;

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

std::string DescribeCode(const std::error_code& ec) {
  if (ec == asio::error::eof) return "the peer closed the connection";
  if (ec == asio::ssl::error::stream_truncated) return "the peer closed the TLS stream without close_notify";
  return ec.message();
}

class WsImpl final : public WebSocket, public std::enable_shared_from_this<WsImpl> {
 public:
  WsImpl(Context& context, WsTarget target, std::shared_ptr<asio::ssl::context> ssl_ctx)
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

  void Begin(ConnectHandler handler) {
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

  void Start(MessageHandler handler) override {
    asio::post(strand_, [self = shared_from_this(), handler = std::move(handler)]() mutable {
      if (self->terminated_ || self->transport_closed_) {
        if (handler && !self->close_requested_)
          handler(Fail(Errc::connection_lost, "the WebSocket to " + self->Where() + " is already closed"));
        return;
      }
      self->handler_ = std::move(handler);
      self->started_ = true;
      if (!self->buffer_.empty()) {
        std::string pending = std::move(self->buffer_);
        self->buffer_.clear();
        if (!self->FeedReader(pending)) return;
      }
      self->StartRead();
      self->ArmPingTimer();
    });
  }

  void Send(std::string payload, bool binary, DoneHandler done) override {
    asio::post(strand_, [self = shared_from_this(), payload = std::move(payload), binary,
                         done = std::move(done)]() mutable {
      if (self->close_requested_ || self->terminated_) {
        // Cancelled only when our side closed; a peer's close or a dropped stream is a lost connection.
        if (done)
          done(Fail(self->closed_by_us_ ? Errc::cancelled : Errc::connection_lost,
                    "the WebSocket to " + self->Where() + (self->closed_by_us_ ? " is closing" : " has ended")));
        return;
      }
      self->Enqueue(EncodeWsFrame(binary ? ws_opcode::kBinary : ws_opcode::kText, payload), std::move(done));
    });
  }

  void AsyncClose(std::uint16_t code, DoneHandler done) override {
    asio::post(strand_, [self = shared_from_this(), code, done = std::move(done)]() mutable {
      self->DoClose(code, std::move(done));
    });
  }

  void Abort() override {
    asio::post(strand_, [self = shared_from_this()] {
      self->closed_by_us_ = true;
      self->handler_ = nullptr;
      self->terminated_ = true;
      self->CloseTransport();
      self->CompleteClose(Fail(Errc::cancelled, "the WebSocket was aborted"));
    });
  }

  const std::string& Subprotocol() const override { return subprotocol_; }
  Strand& executor() override { return strand_; }
  std::string Describe() const override { return target_.Describe(); }

 private:
  // Runs `fn` with the byte stream: the TLS stream, or the bare socket for ws://.
  template <typename Fn>
  void WithStream(Fn&& fn) {
    if (target_.use_tls) fn(stream_);
    else fn(stream_.next_layer());
  }

  std::string Where() const { return target_.Describe(); }

  void ArmTimer(std::chrono::milliseconds timeout, std::string phase) {
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
  void DisarmTimer() {
    ++timer_generation_;
    timer_.cancel();
  }

  Error TimeoutError() const {
    return Error(Errc::timeout, "timed out after " + std::to_string(phase_timeout_.count()) + " ms " + phase_);
  }

  void OnTimeout() {
    if (connect_handler_) {
      resolver_.cancel();
      CloseTransport();  // the pending operation completes with an error; FailConnect reports the timeout
      return;
    }
    // The close handshake deadline: give up waiting for the peer's close frame.
    CloseTransport();
    CompleteClose(Fail(TimeoutError()));
  }

  void FailConnect(Error error) {
    if (timed_out_) error = TimeoutError();
    DisarmTimer();
    CloseTransport();
    if (auto h = std::move(connect_handler_)) {
      connect_handler_ = nullptr;
      h(Fail(std::move(error)));
    }
  }

  void OnResolved(std::error_code ec, asio::ip::tcp::resolver::results_type results) {
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

  void OnConnected(std::error_code ec) {
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

  void SendProxyConnect() {
    std::string authority = HostPort(target_.host, target_.port);
    request_ = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n";
    if (!proxy_->authorization.empty()) request_ += "Proxy-Authorization: " + proxy_->authorization + "\r\n";
    request_ += "\r\n";
    asio::async_write(stream_.next_layer(), asio::buffer(request_),
                      asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t) {
                        if (ec)
                          return self->FailConnect(
                              Error(Errc::connection_failed, "proxy CONNECT for " + self->Where() + ": " + ec.message()));
                        self->ReadProxyReply();
                      }));
  }

  void ReadProxyReply() {
    asio::async_read_until(
        stream_.next_layer(), asio::dynamic_buffer(buffer_, kMaxHttpHeadBytes), "\r\n\r\n",
        asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
          if (ec)
            return self->FailConnect(Error(Errc::connection_failed, "proxy CONNECT for " + self->Where() +
                                                                        ": no reply: " + DescribeCode(ec)));
          auto head = ParseHttpHead(std::string_view(self->buffer_).substr(0, n));
          if (!head) return self->FailConnect(head.error());
          if (head->status != 200)
            return self->FailConnect(Error(Errc::connection_failed, "proxy refused CONNECT to " + self->Where() +
                                                                        ": " + head->status_line,
                                           head->status));
          self->buffer_.erase(0, n);
          self->AfterTunnel();
        }));
  }

  void AfterTunnel() {
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
        return FailConnect(Error(Errc::connection_failed, "cannot set the name to verify (" + name +
                                                              "): " + DrainOpenSslErrors()));
    }
    stream_.async_handshake(asio::ssl::stream_base::client,
                            asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec) {
                              self->OnTlsHandshake(ec);
                            }));
  }

  void OnTlsHandshake(std::error_code ec) {
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

  void SendUpgrade() {
    ArmTimer(target_.handshake_timeout, "waiting for the WebSocket handshake with " + Where());
    key_ = NewWsKey();
    bool default_port = target_.port == (target_.use_tls ? 443 : 80);
    std::string host = target_.host.find(':') != std::string::npos ? "[" + target_.host + "]" : target_.host;
    if (!default_port) host += ":" + std::to_string(target_.port);
    request_ = "GET " + target_.path + " HTTP/1.1\r\nHost: " + host +
               "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " +
               key_ + "\r\nUser-Agent: sessionturn/" SESSIONTURN_VERSION_STRING "\r\n";
    if (!target_.subprotocols.empty()) {
      request_ += "Sec-WebSocket-Protocol: ";
      for (std::size_t i = 0; i < target_.subprotocols.size(); ++i)
        request_ += (i ? ", " : "") + target_.subprotocols[i];
      request_ += "\r\n";
    }
    for (const auto& [name, value] : target_.headers) request_ += name + ": " + value + "\r\n";
    request_ += "\r\n";
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

  void ReadUpgradeReply() {
    WithStream([&](auto& s) {
      asio::async_read_until(
          s, asio::dynamic_buffer(buffer_, kMaxHttpHeadBytes), "\r\n\r\n",
          asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
            self->OnUpgradeReply(ec, n);
          }));
    });
  }

  void OnUpgradeReply(std::error_code ec, std::size_t n) {
    if (ec) {
      std::string why = ec == asio::error::not_found ? "the response head exceeds " +
                                                           std::to_string(kMaxHttpHeadBytes) + " bytes (kMaxHttpHeadBytes)"
                                                     : DescribeCode(ec);
      return FailConnect(Error(Errc::connection_failed, "no WebSocket handshake reply from " + Where() + ": " + why));
    }
    auto head = ParseHttpHead(std::string_view(buffer_).substr(0, n));
    if (!head) {
      Error e = head.error();
      e.message = "WebSocket handshake with " + Where() + ": " + e.message;
      return FailConnect(std::move(e));
    }
    buffer_.erase(0, n);
    if (head->status != 101) {
      head_ = std::move(*head);
      return ReadErrorBody();
    }
    if (!HeaderHasToken(head->Get("upgrade"), "websocket") || !HeaderHasToken(head->Get("connection"), "upgrade"))
      return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                         ": the 101 reply lacks Upgrade: websocket / Connection: Upgrade"));
    std::string accept = head->Get("sec-websocket-accept");
    if (accept != WsAcceptFor(key_))
      return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                         ": wrong Sec-WebSocket-Accept \"" + accept.substr(0, 64) +
                                                         "\" (the server did not answer our key)"));
    std::string protocol = head->Get("sec-websocket-protocol");
    if (!target_.subprotocols.empty()) {
      if (protocol.empty())
        return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                           ": the server agreed to no sub-protocol (offered " +
                                                           JoinedSubprotocols() + ")"));
      if (std::find(target_.subprotocols.begin(), target_.subprotocols.end(), protocol) == target_.subprotocols.end())
        return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                           ": the server chose sub-protocol \"" + protocol +
                                                           "\", which we did not offer (" + JoinedSubprotocols() + ")"));
    } else if (!protocol.empty()) {
      return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                         ": the server chose sub-protocol \"" + protocol +
                                                         "\" although none was offered"));
    }
    if (!head->Get("sec-websocket-extensions").empty())
      return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                         ": the server enabled extensions we did not offer"));
    subprotocol_ = protocol;
    DisarmTimer();
    phase_.clear();
    auto h = std::move(connect_handler_);
    connect_handler_ = nullptr;
    h(std::static_pointer_cast<WebSocket>(shared_from_this()));
  }

  std::string JoinedSubprotocols() const {
    std::string out;
    for (const auto& p : target_.subprotocols) out += (out.empty() ? "" : ", ") + p;
    return out;
  }

  void ReadErrorBody() {
    std::string length = head_.Get("content-length");
    std::size_t want = kMaxErrorBodyBytes;
    bool exact = false;
    if (!length.empty()) {
      want = std::min<std::size_t>(std::strtoull(length.c_str(), nullptr, 10), kMaxErrorBodyBytes);
      exact = true;
    }
    if (buffer_.size() >= want) return FinishErrorBody();
    std::size_t missing = want - buffer_.size();
    WithStream([&](auto& s) {
      asio::async_read(s, asio::dynamic_buffer(buffer_, kMaxErrorBodyBytes), asio::transfer_exactly(missing),
                       asio::bind_executor(strand_, [self = shared_from_this(), exact](std::error_code ec, std::size_t) {
                         // Without a length the body ends at EOF; with one, a short body is still worth showing.
                         (void)exact;
                         (void)ec;
                         self->FinishErrorBody();
                       }));
    });
  }

  void FinishErrorBody() {
    std::string body = buffer_;
    if (HeaderHasToken(head_.Get("transfer-encoding"), "chunked")) body = Dechunk(body);
    FailConnect(RefusedUpgrade(Where(), head_, body));
  }

  // --- open state -------------------------------------------------------------------------------

  void StartRead() {
    if (transport_closed_ || reading_) return;
    reading_ = true;
    WithStream([&](auto& s) {
      s.async_read_some(asio::buffer(read_chunk_),
                        asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
                          self->reading_ = false;
                          self->OnRead(ec, n);
                        }));
    });
  }

  void OnRead(std::error_code ec, std::size_t n) {
    if (ec) {
      if (close_requested_) {
        // We sent our close; the peer hanging up instead of echoing it still ends the connection.
        CloseTransport();
        CompleteClose({});
        return;
      }
      if (transport_closed_) return;
      Terminate(Error(Errc::connection_lost, "the WebSocket to " + Where() + " dropped: " + DescribeCode(ec) +
                                                 (peer_closed_ ? "" : " (no close frame)")));
      return;
    }
    if (n > 0) OnPeerAlive();
    if (!FeedReader(std::string_view(read_chunk_.data(), n))) return;
    StartRead();
  }

  // False when the stream must stop (a protocol violation, the close handshake done).
  bool FeedReader(std::string_view bytes) {
    auto st = reader_.Feed(bytes, [this](WsReader::Event&& e) { OnEvent(std::move(e)); });
    if (!st) {
      // Tell the peer why (1009 too big, 1002 protocol error), then stop.
      std::uint16_t code = st.error().code == Errc::too_large ? 1009 : 1002;
      if (!close_requested_ && !peer_closed_) {
        close_requested_ = true;
        Enqueue(CloseFrame(code), nullptr);
        close_transport_after_flush_ = true;
        ArmTimer(target_.close_timeout, "flushing our close frame to " + Where());
      }
      Error e = st.error();
      e.message = "WebSocket from " + Where() + ": " + e.message;
      Terminate(std::move(e), /*close_now=*/false);
      return false;
    }
    // Keep reading after delivery ended too: our close waits for the peer's close frame, which may
    // come after data frames already in flight.
    return !transport_closed_;
  }

  void OnEvent(WsReader::Event&& e) {
    if (terminated_ && !close_requested_) return;
    switch (e.kind) {
      case WsReader::Event::kMessage:
        if (handler_ && !close_requested_) handler_(Message{e.binary, std::move(e.data)});
        break;
      case WsReader::Event::kPing:
        if (!close_requested_ && !peer_closed_) Enqueue(EncodeWsFrame(ws_opcode::kPong, e.data), nullptr);
        break;
      case WsReader::Event::kPong: break;  // OnRead already took its bytes as a sign of life
      case WsReader::Event::kClose: OnPeerClose(e.close_code, e.data); break;
    }
  }

  std::string CloseFrame(std::uint16_t code) {
    std::string payload;
    payload.push_back(static_cast<char>(code >> 8));
    payload.push_back(static_cast<char>(code & 0xff));
    return EncodeWsFrame(ws_opcode::kClose, payload);
  }

  void OnPeerClose(std::uint16_t code, const std::string& reason) {
    if (peer_closed_) return;
    peer_closed_ = true;
    if (close_requested_) {
      // The reply to our close: the handshake is complete.
      DisarmTimer();
      close_transport_after_flush_ = true;
      if (!writing_) CloseTransport();
      CompleteClose({});
      return;
    }
    // The server closes first: echo its code (RFC 6455 §5.5.1), then hang up once that is written.
    close_requested_ = true;
    Enqueue(CloseFrame(code == 0 ? 1000 : code), nullptr);
    close_transport_after_flush_ = true;
    ArmTimer(target_.close_timeout, "echoing the server's close frame to " + Where());
    std::string text = "the server closed the WebSocket to " + Where() + " (code " +
                       (code == 0 ? std::string("none") : std::to_string(code)) +
                       (reason.empty() ? std::string() : ": " + reason) + ")";
    Terminate(Error(Errc::connection_lost, text), /*close_now=*/false);
  }

  // Ends message delivery with `error` (once).
  void Terminate(Error error, bool close_now = true) {
    if (close_now) CloseTransport();
    if (terminated_) return;
    terminated_ = true;
    StopKeepalive();  // what remains (a close handshake) has its own deadline
    auto h = std::move(handler_);
    handler_ = nullptr;
    if (h) h(Fail(std::move(error)));
  }

  void DoClose(std::uint16_t code, DoneHandler done) {
    closed_by_us_ = true;
    if (done) close_done_.push_back(std::move(done));
    if (transport_closed_) return CompleteClose({});
    handler_ = nullptr;  // the caller is done with messages
    if (close_requested_) return;  // already closing (ours or the echo of the peer's); wait for it
    close_requested_ = true;
    terminated_ = true;
    StopKeepalive();  // the close deadline takes over
    Enqueue(CloseFrame(code), nullptr);
    ArmTimer(target_.close_timeout, "waiting for the server's close frame from " + Where());
    // The peer's close arrives through the reader, which must be running for that.
    if (!started_) {
      started_ = true;
      if (!buffer_.empty()) {
        std::string pending = std::move(buffer_);
        buffer_.clear();
        if (!FeedReader(pending)) return;
      }
    }
    StartRead();
  }

  // --- liveness ---------------------------------------------------------------------------------
  // A ping every ping_interval while messages are delivered, one at a time. Its deadline starts when
  // it has been written, not queued: behind a large message of ours it may wait on a slow link,
  // which is no dead peer (writes that stall for good are TCP_USER_TIMEOUT's to end). Any bytes
  // from the peer after that count as the answer: a pong may queue behind a long message the peer
  // is sending, and those bytes prove it alive just as well. The timers hold the socket weakly so
  // that pinging never keeps an abandoned socket alive.

  bool Live() const { return started_ && !terminated_ && !close_requested_ && !transport_closed_; }

  void ArmPingTimer() {
    if (target_.ping_interval.count() <= 0 || !Live()) return;
    ping_timer_.expires_after(target_.ping_interval);
    ping_timer_.async_wait(asio::bind_executor(strand_, [weak = weak_from_this()](std::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->OnPingTimer();
    }));
  }

  void OnPingTimer() {
    if (!Live()) return;
    if (!ping_outstanding_) {  // else the unanswered ping's deadline decides
      ping_outstanding_ = true;
      std::string payload = "st-ping-" + std::to_string(++pings_sent_);
      Enqueue(EncodeWsFrame(ws_opcode::kPing, payload),
              [weak = weak_from_this(), generation = ping_generation_](Status written) {
                if (!written) return;  // a failed write ends the stream by itself
                if (auto self = weak.lock()) self->OnPingWritten(generation);
              });
    }
    ArmPingTimer();
  }

  void OnPingWritten(std::uint64_t generation) {
    if (generation != ping_generation_ || !ping_outstanding_ || !Live()) return;  // answered already
    pong_timer_.expires_after(target_.pong_timeout);
    pong_timer_.async_wait(asio::bind_executor(strand_, [weak = weak_from_this(), generation](std::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock(); self && generation == self->ping_generation_) self->OnPongTimeout();
    }));
  }

  void OnPeerAlive() {
    if (!ping_outstanding_) return;
    ping_outstanding_ = false;
    ++ping_generation_;
    pong_timer_.cancel();
  }

  void OnPongTimeout() {
    if (!ping_outstanding_ || !Live()) return;
    // Hang up without a close frame: the peer is presumed gone, and a close frame would only wait
    // behind whatever is stuck. connection_lost, like any dropped stream, so callers reconnect.
    Terminate(Error(Errc::connection_lost,
                    "no pong (nor any other data) from " + Where() + " within " +
                        std::to_string(target_.pong_timeout.count()) + " ms of our ping (one every " +
                        std::to_string(target_.ping_interval.count()) +
                        " ms): the connection is presumed dead (half-open)"));
  }

  void StopKeepalive() {
    ping_outstanding_ = false;
    ++ping_generation_;
    ping_timer_.cancel();
    pong_timer_.cancel();
  }

  void CompleteClose(Status status) {
    auto dones = std::move(close_done_);
    close_done_.clear();
    for (auto& d : dones) d(status);
  }

  struct Outgoing {
    std::string bytes;
    DoneHandler done;
  };

  void Enqueue(std::string bytes, DoneHandler done) {
    if (transport_closed_) {
      if (done) done(Fail(Errc::connection_lost, "the WebSocket to " + Where() + " is closed"));
      return;
    }
    out_.push_back(Outgoing{std::move(bytes), std::move(done)});
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (out_.empty() || transport_closed_) {
      writing_ = false;
      if (close_transport_after_flush_) CloseTransport();
      return;
    }
    writing_ = true;
    WithStream([&](auto& s) {
      asio::async_write(s, asio::buffer(out_.front().bytes),
                        asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t) {
                          self->OnWritten(ec);
                        }));
    });
  }

  void OnWritten(std::error_code ec) {
    if (out_.empty()) {  // the queue was failed by CloseTransport meanwhile
      writing_ = false;
      return;
    }
    Outgoing done = std::move(out_.front());
    out_.pop_front();
    if (ec) {
      writing_ = false;
      Error e(transport_closed_ ? Errc::cancelled : Errc::connection_lost,
              "writing to the WebSocket " + Where() + ": " + DescribeCode(ec));
      if (done.done) done.done(Fail(e));
      Terminate(e);
      return;
    }
    if (done.done) done.done({});
    WriteNext();
  }

  void CloseTransport() {
    if (transport_closed_) return;
    transport_closed_ = true;
    DisarmTimer();
    StopKeepalive();
    std::error_code ignored;
    stream_.lowest_layer().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.lowest_layer().close(ignored);
    resolver_.cancel();
    auto pending = std::move(out_);
    out_.clear();
    // The frame being written (front) completes through its own handler with operation_aborted.
    for (std::size_t i = writing_ ? 1 : 0; i < pending.size(); ++i)
      if (pending[i].done) pending[i].done(Fail(Errc::cancelled, "the WebSocket to " + Where() + " closed"));
    if (writing_ && !pending.empty()) out_.push_back(std::move(pending.front()));
  }

  WsTarget target_;
  Strand strand_;
  std::shared_ptr<asio::ssl::context> ssl_ctx_;  // the owner's, shared by its connections with this TLS material
  asio::ssl::stream<asio::ip::tcp::socket> stream_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer timer_;
  std::uint64_t timer_generation_ = 0;
  asio::steady_timer ping_timer_;
  asio::steady_timer pong_timer_;
  bool ping_outstanding_ = false;     // a ping was queued and nothing has come back since
  std::uint64_t ping_generation_ = 0;  // bumped when that ping is answered or pinging stops
  std::uint64_t pings_sent_ = 0;
  std::string phase_;
  std::chrono::milliseconds phase_timeout_{0};
  bool timed_out_ = false;
  std::optional<ProxyUrl> proxy_;
  ConnectHandler connect_handler_;
  std::string request_;
  std::string key_;
  std::string buffer_;  // handshake bytes, then frame bytes read with the head and not yet fed
  HttpHead head_;
  std::string subprotocol_;

  WsReader reader_;
  std::vector<char> read_chunk_;
  MessageHandler handler_;
  bool started_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool terminated_ = false;
  bool close_requested_ = false;  // a close frame was queued (ours, or the echo of the peer's)
  bool closed_by_us_ = false;     // AsyncClose or Abort was called
  bool peer_closed_ = false;
  bool close_transport_after_flush_ = false;
  bool transport_closed_ = false;
  std::deque<Outgoing> out_;
  std::vector<DoneHandler> close_done_;
};

}  // namespace

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
  std::shared_ptr<WsImpl> ws;
  try {
    ws = std::make_shared<WsImpl>(context, std::move(target), std::move(*ssl_ctx));
  } catch (const std::exception& e) {
    // The stream's SSL_new may fail (out of memory); asio throws, we do not.
    context.Post([handler = std::move(handler), what = std::string(e.what())] {
      handler(Fail(Errc::internal, std::string("cannot create a TLS stream: ") + what));
    });
    return;
  }
  asio::post(ws->executor(), [ws, handler = std::move(handler)]() mutable { ws->Begin(std::move(handler)); });
}

}  // namespace sessionturn::kube
