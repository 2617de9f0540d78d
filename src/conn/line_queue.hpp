// The transport-independent halves of a line connection: LineQueue (bytes in -> framed lines queued
// on our side, one outstanding read served from the queue) and WriteQueue (ordered writes, one in
// flight). The unix, child-process and Kubernetes exec connections all build on them.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn::conn {

// "64 MiB" for whole MiB, else "1234 bytes": for error messages about bounds.
std::string FormatBytes(std::size_t bytes);

// Not thread-safe: the owner calls every method from its strand. Handlers are invoked inline from
// Feed/Finish/Fail/Read/Cancel, so the owner must call those from a job of its own (a posted job or
// an I/O completion), never from the user's call stack, or a handler could run nested in its caller.
class LineQueue {
 public:
  using LineHandler = Connection::LineHandler;

  // `describe` names the connection in errors and log lines ("unix:/tmp/s.sock"); `log` may be null.
  LineQueue(ConnectionLimits limits, std::string describe, const Context* log);

  // Frames `bytes` into lines and queues them (blank lines dropped, oversized lines skipped and
  // logged once). Returns false when the owner should stop reading: the queue already ended, or the
  // queued bytes exceeded the bound (then it dropped its lines and holds an Errc::too_large error
  // for the pending and next reads; the owner should close the transport).
  bool Feed(std::string_view bytes);

  // The stream ended (EOF, reset, process exit): `error` is delivered after the queued lines are
  // drained. Only the first end counts.
  void Finish(Error error);

  // Fails now: queued lines are dropped and `error` goes to the pending read and every later one.
  // Close() uses it with Errc::cancelled. Overrides an earlier Finish.
  void Fail(Error error);

  // Serves one line (or the end) as soon as there is one. At most one read may be outstanding; a
  // second one gets Errc::invalid_argument at once.
  void Read(LineHandler handler);

  // The next queued line, taken now; nothing when none is queued or a read is outstanding.
  std::optional<std::string> TryTake();

  bool Ended() const noexcept { return end_.has_value(); }
  bool ReadPending() const noexcept { return static_cast<bool>(pending_); }
  std::size_t QueuedBytes() const noexcept { return queued_bytes_; }
  std::size_t QueuedLines() const noexcept { return lines_.size(); }
  std::size_t SkippedLines() const noexcept { return skipped_lines_; }

 private:
  // Delivers to the pending read when there is something to deliver.
  void Pump();

  ConnectionLimits limits_;
  std::string describe_;
  const Context* log_;
  LineFramer framer_;
  std::deque<std::string> lines_;
  std::size_t queued_bytes_ = 0;
  std::size_t skipped_lines_ = 0;
  std::optional<Error> end_;
  bool failed_now_ = false;  // true after Fail(): the end is delivered even with lines queued
  LineHandler pending_;
};

// Ordered writes, one in flight. Not thread-safe (owner's strand). The owner takes Front(), writes
// it (possibly in pieces, reporting them with Advance), and calls Complete when it is all written.
class WriteQueue {
 public:
  using WriteHandler = Connection::WriteHandler;

  // Queues `line` + '\n'.
  void Push(std::string line, WriteHandler done);

  bool Empty() const noexcept { return items_.empty(); }
  std::size_t Size() const noexcept { return items_.size(); }
  // Bytes queued and not yet written, over all items.
  std::size_t PendingBytes() const noexcept { return pending_bytes_; }

  // The unwritten rest of the front item. Precondition: !Empty().
  std::string_view Front() const;
  // `n` more bytes of the front item were written. Returns true when it is now fully written.
  bool Advance(std::size_t n);
  // The unwritten rest of the first `max` items, in order, appended to `out` (one writev for several).
  void Gather(std::vector<std::string_view>& out, std::size_t max) const;
  // `n` more bytes were written from the front on: completes (inline, with success) every item they
  // finished and advances into the next.
  void Consume(std::size_t n);
  // Pops the front item and calls its handler with `status` (inline).
  void Complete(Status status);
  // Pops every item and calls their handlers with `error`, in order.
  void FailAll(const Error& error);

 private:
  struct Item {
    std::string data;
    std::size_t offset = 0;
    WriteHandler done;
  };
  std::deque<Item> items_;
  std::size_t pending_bytes_ = 0;
};

}  // namespace sessionturn::conn
