// The engine shared by the unix-socket and child-process connections: a continuous reader feeding
// a LineQueue, a WriteQueue with one write in flight, all on one strand, over any Asio byte stream
// the subclass provides. Internal; the public surface is connection.hpp.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <asio.hpp>

#include "conn/line_queue.hpp"
#include "sessionturn/connection.hpp"

namespace sessionturn::conn {

// Bytes read per read(2). A connection holds no read buffer of its own: it waits until its transport
// is readable and then reads into its thread's scratch buffer of this size, so ten thousand idle (or
// waiting) connections cost no buffer memory, and a burst costs few syscalls.
inline constexpr std::size_t kReadChunkBytes = 64u << 10;
// Reads per wake-up before the connection waits again (and lets other connections run).
inline constexpr int kReadsPerWake = 4;

// Lifetime: always owned by a shared_ptr; every pending handler holds one, so the object outlives
// its operations. Users see it through ConnectionHandle, whose destructor closes it: dropping the
// last user reference stops the continuous reader instead of leaking it.
class StreamConnection : public std::enable_shared_from_this<StreamConnection> {
 public:
  using Strand = asio::strand<asio::io_context::executor_type>;
  using IoHandler = std::function<void(const std::error_code& ec, std::size_t bytes)>;

  // Every handler runs on `strand`: the connecting operation's own (Connector::AsyncConnectOn), or a
  // new one on the Context.
  StreamConnection(Context& context, Strand strand, std::string describe, ConnectionLimits limits);
  virtual ~StreamConnection() = default;
  StreamConnection(const StreamConnection&) = delete;
  StreamConnection& operator=(const StreamConnection&) = delete;

  // Starts the continuous reader. Call once, after construction, from any thread (on the strand it
  // starts at once).
  void Start();

  void AsyncReadLine(Connection::LineHandler handler);
  std::optional<std::string> TryReadLine();
  void AsyncWrite(std::string line, Connection::WriteHandler done);
  void AsyncWriteLines(std::vector<std::string> lines);
  void Close();
  virtual std::string Diagnostics() const { return {}; }
  const std::string& Describe() const noexcept { return describe_; }

 protected:
  // Transport hooks, called on the strand. Completion handlers may be called on any thread; the
  // base binds them to the strand.
  // Waits until the read side is readable (bytes, its end, or an error); `bytes` is unused.
  virtual void WaitReadable(IoHandler handler) = 0;
  // Reads what is there without blocking: the byte count, with `ec` would_block when there was
  // nothing, eof at the end.
  virtual std::size_t ReadNow(asio::mutable_buffer buffer, std::error_code& ec) = 0;
  // Writes from `buffers` (several queued lines: one writev), in order.
  virtual void WriteSome(const std::vector<asio::const_buffer>& buffers, IoHandler handler) = 0;
  // Writes what the transport takes now without blocking: the byte count, with `ec` would_block when
  // it took nothing. The default takes nothing (every write goes through WriteSome).
  virtual std::size_t WriteNow(asio::const_buffer buffer, std::error_code& ec) {
    ec = asio::error::would_block;
    (void)buffer;
    return 0;
  }
  // Closes the descriptors (and, for a child, starts stopping it). Called once, on the strand.
  virtual void ShutDown() = 0;
  // The read side ended with `ec` (EOF or an error). The default ends the stream with
  // Errc::connection_lost naming the cause; a child process first waits for its exit status.
  virtual void OnReadEnded(const std::error_code& ec);

  // Ends the stream: `error` goes to the reader after the queued lines, and to the writers now.
  // Shuts the transport down. On the strand.
  void EndStream(Error error);
  // Posts `fn` to run on the strand, keeping this object alive.
  void PostOnStrand(std::function<void()> fn);
  // Runs `fn` now when called on the strand, else posts it. Only for work that calls nothing of the
  // user's (or calls a handler that expects it: the connectors' reports to an operation's strand).
  template <typename Fn>
  void RunOnStrand(Fn&& fn) {
    if (strand_.running_in_this_thread()) {
      fn();
    } else {
      PostOnStrand(std::forward<Fn>(fn));
    }
  }
  // Wraps `fn` so it runs on the strand and keeps this object alive until it ran.
  IoHandler OnStrand(IoHandler fn);

  Context& context_;
  Strand strand_;
  const std::string describe_;

 private:
  void ReadLoop();
  void OnReadable(const std::error_code& ec);
  // Reads what is there (up to kReadsPerWake chunks) into the line queue, which hands the lines to
  // the reader; ends the stream on EOF or an error. On the strand.
  void ReadAvailable();
  // What Close() does, on the strand from a job of its own: fails the reader, shuts the transport.
  void CloseNow();
  // Queues a write (on the strand) and makes sure a flush follows.
  void QueueWrite(std::string line, Connection::WriteHandler done);
  // A write nobody waits for, on the strand with nothing queued or in flight: written now (no job,
  // no completion to run). False when it could not start now (the caller queues it).
  bool TryWriteNow(std::string& line, const Connection::WriteHandler& done);
  void OnWriteFailed(const std::error_code& ec);
  // Fails every queued write with `error`, saying at debug level how many nobody waited for.
  void FailQueuedWrites(const Error& error);
  void WriteLoop();
  void OnWritten(const std::error_code& ec, std::size_t bytes);
  void TearDown(const Error& write_error);

  LineQueue in_;
  WriteQueue out_;
  std::vector<std::string_view> gather_;           // reused by WriteLoop
  std::vector<asio::const_buffer> write_buffers_;  // what the write in flight writes
  bool started_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool flush_posted_ = false;          // a WriteLoop job is queued
  // OnReadable is running (the lines it read are being handed over): a Close() from the reader's
  // handler is done when it returns, not posted, and no further read is waited for.
  bool in_readable_ = false;
  bool close_deferred_ = false;
  std::atomic<bool> close_called_{false};  // Close() was called: its job may not have run yet
  std::atomic<int> posted_writes_{0};  // AsyncWrite jobs posted and not run yet
  bool down_ = false;              // the transport is shut down; nothing more is read or written
  std::optional<Error> write_error_;  // once set (write failed, closed, ended): what writes complete with
};

// The object users hold. Forwards to the engine; closes it when the last user reference goes.
class ConnectionHandle final : public Connection {
 public:
  explicit ConnectionHandle(std::shared_ptr<StreamConnection> impl) : impl_(std::move(impl)) {}
  ~ConnectionHandle() override { impl_->Close(); }

  void AsyncReadLine(LineHandler handler) override { impl_->AsyncReadLine(std::move(handler)); }
  std::optional<std::string> TryReadLine() override { return impl_->TryReadLine(); }
  void AsyncWrite(std::string line, WriteHandler done) override { impl_->AsyncWrite(std::move(line), std::move(done)); }
  void AsyncWriteLines(std::vector<std::string> lines) override { impl_->AsyncWriteLines(std::move(lines)); }
  void Close() override { impl_->Close(); }
  std::string Diagnostics() const override { return impl_->Diagnostics(); }
  std::string Describe() const override { return impl_->Describe(); }

 private:
  std::shared_ptr<StreamConnection> impl_;
};

// "No such file or directory": the text of an Asio/system error, for messages.
std::string ErrorText(const std::error_code& ec);

}  // namespace sessionturn::conn
