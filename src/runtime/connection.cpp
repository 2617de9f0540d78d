#include "runtime/connection.hpp"

#include <algorithm>

namespace sessionturn::runtime {
namespace {

// Buffers gathered into one writev: amortises the syscall over a burst without one huge write.
constexpr std::size_t kMaxGather = 64;

}  // namespace

void Conn::Read() {
  sock_.async_read_some(asio::buffer(rbuf_), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
    if (self->closed_) return;
    if (n > 0) {
      self->framer_.Feed(
          std::string_view(self->rbuf_.data(), n),
          [&](std::string_view line) {
            if (!self->closed_) self->owner_.OnRequestLine(*self, line);
          },
          [&](std::size_t skipped) {
            self->owner_.Log(LogLevel::warning, "skipped a request line of " + std::to_string(skipped) +
                                                    " bytes (over the 4 MiB bound)");
          });
    }
    if (ec) {
      // End of the client's input ends the connection at once, as the real runtime does.
      self->Close();
      return;
    }
    if (!self->closed_) self->Read();
  });
}

void Conn::Send(std::shared_ptr<const std::string> bytes, bool live) {
  if (closed_ || close_after_flush_) return;
  if (live) {
    if (live_queued_ >= owner_.SubscriberBound()) {
      owner_.Log(LogLevel::info, "a subscriber fell " + std::to_string(live_queued_) + " events behind: disconnected");
      Close();
      return;
    }
    ++live_queued_;
  }
  out_.push_back(OutItem{std::move(bytes), live});
  if (drop_budget > 0 && --drop_budget == 0) close_after_flush_ = true;
  // Flush from a later handler, not now: everything emitted in this handler (a burst, a replay) then
  // leaves in one writev instead of one syscall per event.
  if (!writing_ && !flush_posted_) {
    flush_posted_ = true;
    asio::post(sock_.get_executor(), [self = shared_from_this()] {
      self->flush_posted_ = false;
      if (!self->closed_ && !self->writing_) self->Write();
    });
  }
}

void Conn::Write() {
  if (out_.empty()) {
    if (close_after_flush_) Close();
    return;
  }
  writing_ = true;
  wbufs_.clear();
  in_flight_ = std::min(out_.size(), kMaxGather);
  for (std::size_t i = 0; i < in_flight_; ++i) wbufs_.push_back(asio::buffer(*out_[i].bytes));
  asio::async_write(sock_, wbufs_, [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
    if (self->closed_) return;
    if (ec) {
      self->Close();
      return;
    }
    for (std::size_t i = 0; i < self->in_flight_; ++i) {
      if (self->out_.front().live) --self->live_queued_;
      self->out_.pop_front();
    }
    self->in_flight_ = 0;
    self->writing_ = false;
    self->Write();
  });
}

void Conn::Close() {
  if (closed_) return;
  closed_ = true;
  asio::error_code ec;
  sock_.shutdown(Socket::shutdown_both, ec);
  sock_.close(ec);
  owner_.OnClosed(shared_from_this());
}

}  // namespace sessionturn::runtime
