// The WebSocket client's connection object, shared by the files that implement its phases:
// ws_connect.cpp (resolve, TCP, proxy CONNECT, TLS, the phase deadline), ws_handshake.cpp (the
// upgrade request and its reply) and ws_connection.cpp (the open socket: reads, writes, pings, the
// close handshake). Everything runs on the strand. Internal to src/ws.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <asio.hpp>
#include <asio/ssl.hpp>

#include "ws/response_parser.hpp"
#include "ws/websocket.hpp"
#include "ws/websocket_internal.hpp"

namespace sessionturn::ws::ws_detail {

// A transport error in words (EOF and a TLS stream cut without close_notify named as such).
std::string DescribeCode(const std::error_code& ec);

class WsImpl final : public WebSocket, public std::enable_shared_from_this<WsImpl> {
 public:
  WsImpl(Context& context, WsTarget target, std::shared_ptr<asio::ssl::context> ssl_ctx);

  // ws_connect.cpp: the first step of AsyncConnect, on the strand.
  void Begin(ConnectHandler handler);

  // ws_connection.cpp: the WebSocket interface.
  void Start(MessageHandler handler) override;
  void Send(std::string payload, bool binary, DoneHandler done) override;
  void AsyncClose(std::uint16_t code, DoneHandler done) override;
  void Abort() override;
  const std::string& Subprotocol() const override { return subprotocol_; }
  Strand& executor() override { return strand_; }
  std::string Describe() const override { return target_.Describe(); }

 private:
  struct Outgoing {
    std::string bytes;
    DoneHandler done;
  };

  // Runs `fn` with the byte stream: the TLS stream, or the bare socket for ws://.
  template <typename Fn>
  void WithStream(Fn&& fn) {
    if (target_.use_tls) fn(stream_);
    else fn(stream_.next_layer());
  }
  std::string Where() const { return target_.Describe(); }

  // --- ws_connect.cpp: reaching the server, and the deadline of each phase before the open state.
  void ArmTimer(std::chrono::milliseconds timeout, std::string phase);
  void DisarmTimer();
  Error TimeoutError() const;
  void OnTimeout();
  void FailConnect(Error error);
  void OnResolved(std::error_code ec, asio::ip::tcp::resolver::results_type results);
  void OnConnected(std::error_code ec);
  void SendProxyConnect();
  void ReadProxyReply();
  void OnProxyRead(std::error_code ec, std::size_t n);
  void AfterTunnel();
  void OnTlsHandshake(std::error_code ec);

  // --- ws_handshake.cpp: the upgrade.
  void SendUpgrade();
  void ReadUpgradeReply();
  void OnUpgradeRead(std::error_code ec, std::size_t n);
  void OnUpgradeBytes(std::string_view bytes);
  Status CheckUpgrade(const HttpHead& head) const;
  void FinishRefusal();
  void Opened();

  // --- ws_connection.cpp: the open state.
  void StartRead();
  void OnRead(std::error_code ec, std::size_t n);
  bool FeedPending();
  bool FeedReader(std::string_view bytes);
  void OnEvent(WsReader::Event&& e);
  void OnPeerClose(std::uint16_t code, const std::string& reason);
  void Terminate(Error error, bool close_now = true);
  void DoClose(std::uint16_t code, DoneHandler done);
  bool Live() const;
  void ArmPingTimer();
  void OnPingTimer();
  void OnPingWritten(std::uint64_t generation);
  void OnPeerAlive();
  void OnPongTimeout();
  void StopKeepalive();
  void CompleteClose(Status status);
  void Enqueue(std::string bytes, DoneHandler done);
  void WriteNext();
  void OnWritten(std::error_code ec);
  void CloseTransport();

  WsTarget target_;
  Strand strand_;
  std::shared_ptr<asio::ssl::context> ssl_ctx_;  // the owner's, shared by its connections with this TLS material
  asio::ssl::stream<asio::ip::tcp::socket> stream_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer timer_;
  std::uint64_t timer_generation_ = 0;
  asio::steady_timer ping_timer_;
  asio::steady_timer pong_timer_;
  bool ping_outstanding_ = false;      // a ping was queued and nothing has come back since
  std::uint64_t ping_generation_ = 0;  // bumped when that ping is answered or pinging stops
  std::uint64_t pings_sent_ = 0;
  std::string phase_;
  std::chrono::milliseconds phase_timeout_{0};
  bool timed_out_ = false;
  std::optional<ProxyUrl> proxy_;
  ConnectHandler connect_handler_;
  std::string request_;
  std::string key_;
  std::unique_ptr<HttpResponseParser> response_;  // the proxy's reply, then the upgrade's
  std::string buffer_;  // bytes read with a response head and not yet parsed: frames sent with the 101
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

}  // namespace sessionturn::ws::ws_detail
