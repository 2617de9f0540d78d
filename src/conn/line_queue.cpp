#include "conn/line_queue.hpp"

#include <utility>

namespace sessionturn::conn {

std::string FormatBytes(std::size_t bytes) {
  constexpr std::size_t kMiB = 1u << 20;
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

LineQueue::LineQueue(ConnectionLimits limits, std::string describe, const Context* log)
    : limits_(limits), describe_(std::move(describe)), log_(log), framer_(limits.max_line) {}

bool LineQueue::Feed(std::string_view bytes) {
  if (end_) return false;
  bool overflow = false;
  framer_.Feed(
      bytes,
      [&](std::string_view line) {
        if (overflow) return;
        // The bound counts what the consumer has not taken yet, so a reader that keeps up never
        // hits it however long the connection lives.
        queued_bytes_ += line.size();
        if (queued_bytes_ > limits_.max_queued_bytes) {
          overflow = true;
          return;
        }
        lines_.emplace_back(line);
      },
      [&](std::size_t skipped) {
        ++skipped_lines_;
        // Logged once per connection: a peer that sends many oversized lines must not flood the log.
        if (skipped_lines_ == 1 && log_ != nullptr && log_->ShouldLog(LogLevel::warning)) {
          log_->Log(LogLevel::warning, describe_ + ": skipped a line of " + FormatBytes(skipped) +
                                           " (longer than the " + FormatBytes(limits_.max_line) +
                                           " line limit); later oversized lines are skipped silently");
        }
      });
  if (overflow) {
    Fail(Error(Errc::too_large, describe_ + ": queued bytes exceed the " + FormatBytes(limits_.max_queued_bytes) +
                                    " bound: the consumer reads lines more slowly than the peer sends them"));
    return false;
  }
  Pump();
  return true;
}

void LineQueue::Finish(Error error) {
  if (end_) return;
  end_ = std::move(error);
  framer_.Reset();
  Pump();
}

void LineQueue::Fail(Error error) {
  end_ = std::move(error);
  failed_now_ = true;
  lines_.clear();
  lines_.shrink_to_fit();
  queued_bytes_ = 0;
  framer_.Reset();
  Pump();
}

void LineQueue::Read(LineHandler handler) {
  if (!handler) return;
  if (pending_) {
    handler(sessionturn::Fail(Errc::invalid_argument, describe_ + ": AsyncReadLine called while another read is outstanding"));
    return;
  }
  pending_ = std::move(handler);
  Pump();
}

std::optional<std::string> LineQueue::TryTake() {
  if (pending_ || lines_.empty() || failed_now_) return std::nullopt;
  std::string line = std::move(lines_.front());
  lines_.pop_front();
  queued_bytes_ -= line.size();
  return line;
}

void LineQueue::Pump() {
  if (!pending_) return;
  if (!lines_.empty()) {
    std::string line = std::move(lines_.front());
    lines_.pop_front();
    queued_bytes_ -= line.size();
    // Moved out before the call: the handler may start the next read or close the connection.
    LineHandler handler = std::move(pending_);
    pending_ = nullptr;
    handler(std::move(line));
    return;
  }
  if (end_) {
    LineHandler handler = std::move(pending_);
    pending_ = nullptr;
    handler(tl::unexpected<Error>(*end_));
  }
}

void WriteQueue::Push(std::string line, WriteHandler done) {
  line.push_back('\n');
  pending_bytes_ += line.size();
  items_.push_back(Item{std::move(line), 0, std::move(done)});
}

std::string_view WriteQueue::Front() const {
  const Item& item = items_.front();
  return std::string_view(item.data).substr(item.offset);
}

bool WriteQueue::Advance(std::size_t n) {
  Item& item = items_.front();
  item.offset += n;
  pending_bytes_ -= n;
  return item.offset >= item.data.size();
}

void WriteQueue::Gather(std::vector<std::string_view>& out, std::size_t max) const {
  for (std::size_t i = 0; i < items_.size() && i < max; ++i) {
    out.push_back(std::string_view(items_[i].data).substr(items_[i].offset));
  }
}

void WriteQueue::Consume(std::size_t n) {
  while (n > 0 && !items_.empty()) {
    Item& item = items_.front();
    const std::size_t rest = item.data.size() - item.offset;
    const std::size_t take = std::min(n, rest);
    Advance(take);
    n -= take;
    if (take == rest) Complete({});
  }
}

void WriteQueue::Complete(Status status) {
  Item item = std::move(items_.front());
  items_.pop_front();
  pending_bytes_ -= item.data.size() - item.offset;
  if (item.done) item.done(std::move(status));
}

void WriteQueue::FailAll(const Error& error) {
  // Taken out first: a handler may push new writes, which must not be failed by this call.
  std::deque<Item> items = std::move(items_);
  items_.clear();
  pending_bytes_ = 0;
  for (Item& item : items) {
    if (item.done) item.done(tl::unexpected<Error>(error));
  }
}

}  // namespace sessionturn::conn
