// The open WebSocket: frames read and delivered, frames written one at a time, pings answered, our
// liveness pings, and the close handshake from either side, all on the strand.
#include "ws/ws_impl.hpp"

namespace sessionturn::ws::ws_detail {

namespace {

std::string CloseFrame(std::uint16_t code) {
  std::string payload;
  payload.push_back(static_cast<char>(code >> 8));
  payload.push_back(static_cast<char>(code & 0xff));
  return EncodeWsFrame(ws_opcode::kClose, payload);
}

}  // namespace

void WsImpl::Start(MessageHandler handler) {
  asio::post(strand_, [self = shared_from_this(), handler = std::move(handler)]() mutable {
    if (self->terminated_ || self->transport_closed_) {
      if (handler && !self->close_requested_)
        handler(Fail(Errc::connection_lost, "the WebSocket to " + self->Where() + " is already closed"));
      return;
    }
    self->handler_ = std::move(handler);
    self->started_ = true;
    if (!self->FeedPending()) return;
    self->StartRead();
    self->ArmPingTimer();
  });
}

void WsImpl::Send(std::string payload, bool binary, DoneHandler done) {
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

void WsImpl::AsyncClose(std::uint16_t code, DoneHandler done) {
  asio::post(strand_, [self = shared_from_this(), code, done = std::move(done)]() mutable {
    self->DoClose(code, std::move(done));
  });
}

void WsImpl::Abort() {
  asio::post(strand_, [self = shared_from_this()] {
    self->closed_by_us_ = true;
    self->handler_ = nullptr;
    self->terminated_ = true;
    self->CloseTransport();
    self->CompleteClose(Fail(Errc::cancelled, "the WebSocket was aborted"));
  });
}

// --- reading ------------------------------------------------------------------------------------

void WsImpl::StartRead() {
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

void WsImpl::OnRead(std::error_code ec, std::size_t n) {
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

// The frames that arrived with the handshake's reply, fed once reading starts. False as FeedReader.
bool WsImpl::FeedPending() {
  if (buffer_.empty()) return true;
  std::string pending = std::move(buffer_);
  buffer_.clear();
  return FeedReader(pending);
}

// False when the stream must stop (a protocol violation, the close handshake done).
bool WsImpl::FeedReader(std::string_view bytes) {
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

void WsImpl::OnEvent(WsReader::Event&& e) {
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

// --- closing ------------------------------------------------------------------------------------

void WsImpl::OnPeerClose(std::uint16_t code, const std::string& reason) {
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
void WsImpl::Terminate(Error error, bool close_now) {
  if (close_now) CloseTransport();
  if (terminated_) return;
  terminated_ = true;
  StopKeepalive();  // what remains (a close handshake) has its own deadline
  auto h = std::move(handler_);
  handler_ = nullptr;
  if (h) h(Fail(std::move(error)));
}

void WsImpl::DoClose(std::uint16_t code, DoneHandler done) {
  closed_by_us_ = true;
  if (done) close_done_.push_back(std::move(done));
  if (transport_closed_) return CompleteClose({});
  handler_ = nullptr;            // the caller is done with messages
  if (close_requested_) return;  // already closing (ours or the echo of the peer's); wait for it
  close_requested_ = true;
  terminated_ = true;
  StopKeepalive();  // the close deadline takes over
  Enqueue(CloseFrame(code), nullptr);
  ArmTimer(target_.close_timeout, "waiting for the server's close frame from " + Where());
  // The peer's close arrives through the reader, which must be running for that.
  if (!started_) {
    started_ = true;
    if (!FeedPending()) return;
  }
  StartRead();
}

void WsImpl::CompleteClose(Status status) {
  auto dones = std::move(close_done_);
  close_done_.clear();
  for (auto& d : dones) d(status);
}

// --- liveness -----------------------------------------------------------------------------------
// A ping every ping_interval while messages are delivered, one at a time. Its deadline starts when
// it has been written, not queued: behind a large message of ours it may wait on a slow link,
// which is no dead peer (writes that stall for good are TCP_USER_TIMEOUT's to end). Any bytes
// from the peer after that count as the answer: a pong may queue behind a long message the peer
// is sending, and those bytes prove it alive just as well. The timers hold the socket weakly so
// that pinging never keeps an abandoned socket alive.

bool WsImpl::Live() const { return started_ && !terminated_ && !close_requested_ && !transport_closed_; }

void WsImpl::ArmPingTimer() {
  if (target_.ping_interval.count() <= 0 || !Live()) return;
  ping_timer_.expires_after(target_.ping_interval);
  ping_timer_.async_wait(asio::bind_executor(strand_, [weak = weak_from_this()](std::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->OnPingTimer();
  }));
}

void WsImpl::OnPingTimer() {
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

void WsImpl::OnPingWritten(std::uint64_t generation) {
  if (generation != ping_generation_ || !ping_outstanding_ || !Live()) return;  // answered already
  pong_timer_.expires_after(target_.pong_timeout);
  pong_timer_.async_wait(asio::bind_executor(strand_, [weak = weak_from_this(), generation](std::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock(); self && generation == self->ping_generation_) self->OnPongTimeout();
  }));
}

void WsImpl::OnPeerAlive() {
  if (!ping_outstanding_) return;
  ping_outstanding_ = false;
  ++ping_generation_;
  pong_timer_.cancel();
}

void WsImpl::OnPongTimeout() {
  if (!ping_outstanding_ || !Live()) return;
  // Hang up without a close frame: the peer is presumed gone, and a close frame would only wait
  // behind whatever is stuck. connection_lost, like any dropped stream, so callers reconnect.
  Terminate(Error(Errc::connection_lost, "no pong (nor any other data) from " + Where() + " within " +
                                             std::to_string(target_.pong_timeout.count()) +
                                             " ms of our ping (one every " +
                                             std::to_string(target_.ping_interval.count()) +
                                             " ms): the connection is presumed dead (half-open)"));
}

void WsImpl::StopKeepalive() {
  ping_outstanding_ = false;
  ++ping_generation_;
  ping_timer_.cancel();
  pong_timer_.cancel();
}

// --- writing ------------------------------------------------------------------------------------

void WsImpl::Enqueue(std::string bytes, DoneHandler done) {
  if (transport_closed_) {
    if (done) done(Fail(Errc::connection_lost, "the WebSocket to " + Where() + " is closed"));
    return;
  }
  out_.push_back(Outgoing{std::move(bytes), std::move(done)});
  if (!writing_) WriteNext();
}

void WsImpl::WriteNext() {
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

void WsImpl::OnWritten(std::error_code ec) {
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

void WsImpl::CloseTransport() {
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

}  // namespace sessionturn::ws::ws_detail
