// How the Driver's blocking verbs do their I/O on the calling thread (issue 14): the same operation
// the asynchronous form starts, on a private io_context that the caller runs until the operation has
// reported. The turn, its connection and its timers then share one strand on that loop, and a
// blocking turn has no cross-thread wake-up at all. Used only when the connector runs connections on
// the caller's strand (Connector::ConnectsOnStrand); otherwise the blocking verb waits for the
// operation on the Context as before (blocking.hpp).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <asio.hpp>

#include "blocking.hpp"
#include "driver/driver_impl.hpp"

namespace sessionturn::driver_detail {

// After the operation reported: how long the loop keeps running the closes and cancellations it
// queued (a closed unix socket's cancelled read, the timers' aborted waits). They take microseconds;
// the bound only matters if something is wrong.
inline constexpr std::chrono::milliseconds kCallerLoopDrain = std::chrono::milliseconds(500);

// The report of an operation run on a caller loop. Set on the loop's thread, or (an error found
// before any I/O) on a Context worker: hence the lock, and the wake-up post.
template <typename T>
struct CallerLoopReport {
  std::mutex mu;
  std::optional<Result<T>> result;
};

// Runs `start(loop, handler)` on a private loop on this thread until `handler` got the operation's
// report; `cancel(error)` ends the operation early (the Context was stopped under it). `bound` is the
// operation's own bound: it always reports by then; kWaitMargin on top only catches a bug.
template <typename T, typename Start, typename Cancel>
Result<T> RunOnCallerLoop(const Context& context, std::chrono::milliseconds bound, std::string_view what,
                          Start&& start, Cancel&& cancel) {
  if (auto refused = blocking::RefuseOnWorker(context, what); !refused) return Fail(refused.error());
  auto loop = std::make_shared<asio::io_context>(1);
  auto report = std::make_shared<CallerLoopReport<T>>();
  auto work = asio::make_work_guard(*loop);
  start(loop, [report, weak = std::weak_ptr<asio::io_context>(loop)](Result<T> result) {
    {
      std::lock_guard lock(report->mu);
      report->result = std::move(result);
    }
    if (auto l = weak.lock()) asio::post(*l, [] {});  // wakes the caller's wait if it came from elsewhere
  });
  auto reported = [&report] {
    std::lock_guard lock(report->mu);
    return report->result.has_value();
  };
  const auto deadline = std::chrono::steady_clock::now() + bound + blocking::kWaitMargin;
  bool cut = false;
  while (!reported()) {
    loop->run_one_for(blocking::kStoppedPoll);
    if (!cut && context.Stopped()) {
      // Nothing on the Context runs any more, but this operation runs here: end it as a cancel does
      // (a turn withdraws itself) and carry on until it reported.
      cut = true;
      cancel(Error(Errc::cancelled, std::string(what) + " was cut off: its Context was stopped while it was in flight"));
    }
    if (std::chrono::steady_clock::now() >= deadline && !reported()) {
      cancel(Error(Errc::timeout, std::string(what) + " did not report within its deadline"));
      loop->run_for(kCallerLoopDrain);
      if (reported()) break;
      return Fail(Errc::timeout, std::string(what) + " did not report within its deadline (a bug: please report it)");
    }
  }
  work.reset();
  loop->run_for(kCallerLoopDrain);
  std::lock_guard lock(report->mu);
  return std::move(*report->result);
}

}  // namespace sessionturn::driver_detail
