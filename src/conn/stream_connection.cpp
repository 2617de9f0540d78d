#include "conn/stream_connection.hpp"

#include <memory>
#include <utility>

namespace sessionturn::conn {

std::string ErrorText(const std::error_code& ec) {
  if (ec == asio::error::eof) return "end of stream";
  return ec.message();
}

StreamConnection::StreamConnection(Context& context, Strand strand, std::string describe, ConnectionLimits limits)
    : context_(context),
      strand_(std::move(strand)),
      describe_(std::move(describe)),
      in_(limits, describe_, &context) {}

void StreamConnection::PostOnStrand(std::function<void()> fn) {
  asio::post(strand_, [self = shared_from_this(), fn = std::move(fn)] { fn(); });
}

StreamConnection::IoHandler StreamConnection::OnStrand(IoHandler fn) {
  // The completion may arrive on any worker; bouncing it through the strand keeps every handler of
  // this connection serial even when the Context has several threads.
  return [self = shared_from_this(), fn = std::move(fn)](const std::error_code& ec, std::size_t bytes) {
    asio::dispatch(self->strand_, [self, fn, ec, bytes] { fn(ec, bytes); });
  };
}

void StreamConnection::Start() {
  RunOnStrand([this] {
    if (started_ || down_) return;
    started_ = true;
    ReadLoop();
  });
}

void StreamConnection::AsyncReadLine(Connection::LineHandler handler) {
  // The handler never runs nested inside the caller's own frame: a read from our strand with nothing
  // to deliver yet waits at once; anything else is posted.
  if (strand_.running_in_this_thread() && !in_.ReadPending() && in_.QueuedLines() == 0 && !in_.Ended()) {
    in_.Read(std::move(handler));
    return;
  }
  PostOnStrand([this, handler = std::move(handler)]() mutable { in_.Read(std::move(handler)); });
}

std::optional<std::string> StreamConnection::TryReadLine() {
  if (!strand_.running_in_this_thread()) return std::nullopt;  // the queue is the strand's alone
  return in_.TryTake();
}

void StreamConnection::AsyncWrite(std::string line, Connection::WriteHandler done) {
  // From our own strand, with no write from another thread still on its way: written now when
  // nobody waits for it and nothing is queued before it (TryWriteNow), else queued now, so that the
  // lines a job queues go out together in one write. From elsewhere posted, which keeps the call
  // order across threads.
  if (strand_.running_in_this_thread() && posted_writes_.load() == 0) {
    if (TryWriteNow(line, done)) return;
    QueueWrite(std::move(line), std::move(done));
    return;
  }
  ++posted_writes_;
  PostOnStrand([this, line = std::move(line), done = std::move(done)]() mutable {
    --posted_writes_;
    QueueWrite(std::move(line), std::move(done));
  });
}

void StreamConnection::AsyncWriteLines(std::vector<std::string> lines) {
  if (lines.empty()) return;
  // Joined into one line-separated write when it can go out now (TryWriteNow adds the last newline),
  // so that the peer reads them together: a turn's start is one send(2), not one per request.
  if (lines.size() > 1 && strand_.running_in_this_thread() && posted_writes_.load() == 0) {
    std::string joined = std::move(lines.front());
    for (std::size_t i = 1; i < lines.size(); ++i) {
      joined.push_back('\n');
      joined.append(lines[i]);
    }
    AsyncWrite(std::move(joined), {});
    return;
  }
  for (auto& line : lines) AsyncWrite(std::move(line), {});
}

bool StreamConnection::TryWriteNow(std::string& line, const Connection::WriteHandler& done) {
  // Only a write whose completion nobody waits for (it would run inside the writer's call), and only
  // in order: nothing queued, flushing or failed before it.
  if (done || down_ || write_error_ || writing_ || flush_posted_ || !out_.Empty() || close_called_.load()) {
    return false;
  }
  line.push_back('\n');
  std::error_code ec;
  const std::size_t written = WriteNow(asio::buffer(line), ec);
  if (written == line.size()) return true;
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
    OnWriteFailed(ec);
    return true;
  }
  // The transport took part of it (or nothing): the rest goes through the queue, which adds the
  // newline back (a rest of just the newline is queued as an empty line).
  line.erase(0, written);
  line.pop_back();
  return false;
}

void StreamConnection::OnWriteFailed(const std::error_code& ec) {
  // Only the writers learn it here. The transport stays up: the read side sees the same failure
  // (EOF, reset, the child's exit) and ends the stream with its cause, after the lines the peer
  // sent before it went.
  write_error_ = Error(Errc::connection_lost, describe_ + ": write failed: " + ErrorText(ec));
  if (context_.ShouldLog(LogLevel::debug)) context_.Log(LogLevel::debug, write_error_->message);
  FailQueuedWrites(*write_error_);
}

void StreamConnection::FailQueuedWrites(const Error& error) {
  if (!out_.Empty() && context_.ShouldLog(LogLevel::debug)) {
    context_.Log(LogLevel::debug, describe_ + ": " + std::to_string(out_.Size()) +
                                      " queued line(s) not written: " + error.message);
  }
  out_.FailAll(error);
}

void StreamConnection::QueueWrite(std::string line, Connection::WriteHandler done) {
  // After Close() (whose job may not have run yet) a write is cancelled, not queued: it would go out
  // with the writes queued before the close.
  if (write_error_ || close_called_.load()) {
    Error error = write_error_ ? *write_error_ : Error(Errc::cancelled, describe_ + ": connection closed");
    // Reported from a job of its own: never inside the writer's call.
    if (done) {
      PostOnStrand([done = std::move(done), error = std::move(error)] { done(tl::unexpected<Error>(error)); });
    } else if (context_.ShouldLog(LogLevel::debug)) {
      context_.Log(LogLevel::debug, describe_ + ": a line was not written: " + error.message);
    }
    return;
  }
  out_.Push(std::move(line), std::move(done));
  if (writing_ || flush_posted_) return;
  flush_posted_ = true;
  PostOnStrand([this] {
    flush_posted_ = false;
    WriteLoop();
  });
}

void StreamConnection::Close() {
  close_called_.store(true);  // a write on the strand before the close runs is not written now
  // From the reader's handler (a turn that finished on the lines just read): closed when the read's
  // job returns, which saves a posted job, a re-armed wait and its cancellation per connection. Not
  // with a write queued or in flight: that one goes out first, from its own job, as from anywhere.
  if (strand_.running_in_this_thread() && in_readable_ && !writing_ && !flush_posted_ && out_.Empty()) {
    // (in that order: the members after the first test are the strand's)
    close_deferred_ = true;
    return;
  }
  PostOnStrand([this] { CloseNow(); });
}

void StreamConnection::CloseNow() {
  Error cancelled(Errc::cancelled, describe_ + ": connection closed");
  in_.Fail(cancelled);
  TearDown(cancelled);
  // Later writes after an explicit Close are cancelled, whatever ended the stream before.
  write_error_ = cancelled;
}

void StreamConnection::EndStream(Error error) {
  TearDown(error);
  in_.Finish(std::move(error));
}

void StreamConnection::TearDown(const Error& write_error) {
  if (!write_error_) write_error_ = write_error;
  if (!down_) {
    down_ = true;
    ShutDown();
  }
  FailQueuedWrites(*write_error_);
}

void StreamConnection::ReadLoop() {
  if (down_ || reading_ || close_called_.load()) return;  // a closed connection waits for nothing more
  reading_ = true;
  WaitReadable(OnStrand([this](const std::error_code& ec, std::size_t) { OnReadable(ec); }));
}

namespace {
// The scratch buffer reads land in: one per thread, lent to whichever connection that thread is
// reading for (LineQueue::Feed copies what it keeps).
char* Scratch() {
  thread_local std::unique_ptr<char[]> buffer(new char[kReadChunkBytes]);
  return buffer.get();
}
}  // namespace

void StreamConnection::OnReadable(const std::error_code& wait_error) {
  reading_ = false;
  if (down_) return;
  if (wait_error) {
    OnReadEnded(wait_error);
    return;
  }
  in_readable_ = true;
  try {
    ReadAvailable();
  } catch (...) {
    // A handler threw out of the read: a close it asked for still happens, from a job of its own.
    in_readable_ = false;
    if (close_deferred_) {
      close_deferred_ = false;
      PostOnStrand([this] { CloseNow(); });
    }
    throw;
  }
  in_readable_ = false;
  if (close_deferred_) {
    close_deferred_ = false;
    CloseNow();
    return;
  }
  ReadLoop();
}

void StreamConnection::ReadAvailable() {
  char* scratch = Scratch();
  for (int i = 0; i < kReadsPerWake; ++i) {
    std::error_code ec;
    const std::size_t bytes = ReadNow(asio::buffer(scratch, kReadChunkBytes), ec);
    if (bytes > 0 && !in_.Feed(std::string_view(scratch, bytes))) {
      // The queue bound was exceeded: the queue holds the too_large error for the reader.
      TearDown(Error(Errc::too_large, describe_ + ": connection failed: too many unread lines queued"));
      return;
    }
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec) {
      OnReadEnded(ec);
      return;
    }
    if (bytes < kReadChunkBytes || down_ || close_deferred_) break;  // drained for now, or closed
  }
}

void StreamConnection::OnReadEnded(const std::error_code& ec) {
  if (ec == asio::error::eof) {
    EndStream(Error(Errc::connection_lost, describe_ + ": the peer closed the connection"));
  } else {
    EndStream(Error(Errc::connection_lost, describe_ + ": read failed: " + ErrorText(ec)));
  }
}

void StreamConnection::WriteLoop() {
  if (down_ || write_error_ || writing_ || out_.Empty()) return;
  writing_ = true;
  // Every queued line (up to a bound) in one write: a turn's subscribe and message go out together.
  constexpr std::size_t kLinesPerWrite = 16;
  gather_.clear();
  out_.Gather(gather_, kLinesPerWrite);
  write_buffers_.clear();
  for (std::string_view piece : gather_) write_buffers_.push_back(asio::buffer(piece.data(), piece.size()));
  WriteSome(write_buffers_,
            OnStrand([this](const std::error_code& ec, std::size_t bytes) { OnWritten(ec, bytes); }));
}

void StreamConnection::OnWritten(const std::error_code& ec, std::size_t bytes) {
  writing_ = false;
  if (down_) return;  // TearDown already failed the queued writes
  if (ec) {
    OnWriteFailed(ec);
    return;
  }
  out_.Consume(bytes);
  WriteLoop();
}

}  // namespace sessionturn::conn
