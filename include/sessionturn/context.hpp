// The execution context every sessionturn object runs on: an Asio io_context, its worker threads
// and the log sink. Pass it explicitly; there is no global or "current" Context. Destroy the objects
// that use a Context before the Context itself (its destructor stops and joins the workers).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace asio {
class io_context;
}

namespace sessionturn {

class Context;
namespace detail {
class ContextGate;
std::shared_ptr<ContextGate> GateOf(Context& context);
}  // namespace detail

enum class LogLevel { debug = 0, info = 1, warning = 2, error = 3 };
std::string_view ToString(LogLevel level) noexcept;

// Receives log lines. Called from any thread (often a Context worker), so it must be thread-safe
// and must not block for long. Messages never contain tokens, secrets or Authorization headers.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// The default sink: "sessionturn: warning: ..." lines on stderr.
LogSink StderrLogSink();

struct ContextOptions {
  int threads = 1;                       // worker threads running the io_context (>= 1)
  LogSink log_sink;                      // default: StderrLogSink()
  LogLevel min_level = LogLevel::warning;  // lines below this level are not formatted at all
};

class Context {
 public:
  explicit Context(ContextOptions options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  asio::io_context& io() noexcept;

  // Runs `fn` on a worker thread (never inline).
  void Post(std::function<void()> fn);

  // True when the calling thread is one of this Context's workers. Blocking calls check this and
  // return Errc::would_block instead of deadlocking.
  bool InWorkerThread() const noexcept;

  int threads() const noexcept;

  bool ShouldLog(LogLevel level) const noexcept;
  void Log(LogLevel level, std::string_view message) const;

  // Stops the event loop: handlers running now finish, pending ones are destroyed without running
  // (so operations in flight never report), and the workers are joined. Idempotent; called by the
  // destructor. From a worker thread it only requests the stop (a worker cannot join itself); the
  // owner's Stop() or destructor joins. Once it was called, Stopped() is true and new operations
  // fail at once with Errc::unavailable, and blocking calls waiting on the Context return.
  void Stop();
  // Stop() was called.
  bool Stopped() const noexcept;
  // Stopped, and every worker has exited: nothing of this Context runs any more.
  bool Joined() const noexcept;

 private:
  friend std::shared_ptr<detail::ContextGate> detail::GateOf(Context& context);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sessionturn
