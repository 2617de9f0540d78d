// How a blocking call does its I/O on the calling thread (issue 14): the same operation the
// asynchronous form starts, on a private io_context that the caller runs until the operation has
// reported. Nothing crosses threads on the way: no post to a Context worker, no wake-up back. Used by
// the Driver's blocking verbs (driver/caller_loop.hpp), HttpClient::Request and the KubeClient's
// blocking verbs (their loops are lanes: http/lanes.hpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <asio.hpp>

#include "blocking.hpp"

namespace sessionturn::blocking {

// An operation's loop when it runs on its caller's thread; shared by what runs on it.
using PrivateLoop = std::shared_ptr<asio::io_context>;

// After the operation reported: how long the loop keeps running the closes and cancellations it
// queued (a closed unix socket's cancelled read, the timers' aborted waits). They take microseconds;
// the bound only matters if something is wrong.
inline constexpr std::chrono::milliseconds kCallerLoopDrain = std::chrono::milliseconds(500);

// What the loop does once the operation reported. `drain`: runs until it is out of work (bounded by
// kCallerLoopDrain): a loop made for the call, or one that must be idle for its next user. `ready`:
// runs only what is ready now and keeps the rest (a lane's loop keeps its idle connections' waits
// for the next call on it).
enum class AfterReport { drain, ready };

// How many caller loops this thread is running now (nested blocking calls count each): a Driver
// destroyed inside one of their callbacks must not wait for turns that only this thread can drive.
inline thread_local int caller_loop_depth = 0;

// Asks `keep_waiting`; an exception from it counts as "stop" (it must not unwind through the loop).
inline bool KeepWaiting(const std::function<bool()>& keep_waiting) {
  try {
    return keep_waiting();
  } catch (...) {
    return false;
  }
}

// This thread's loop for a blocking call: the one it used last, when nothing else holds it any more
// (a loop costs an epoll descriptor, an eventfd and a timerfd to make), else a new one. A loop still
// held (an operation of an earlier call that another thread keeps, a blocking call nested in a
// callback of this one) is left to its holders.
inline PrivateLoop AcquireCallerLoop() {
  thread_local PrivateLoop cached;
  if (cached && cached.use_count() == 1) {
    cached->restart();
    return cached;
  }
  cached = std::make_shared<asio::io_context>(1);
  return cached;
}

// The report of an operation run on a caller loop. Set on the loop's thread, or (an error found
// before any I/O) on a Context worker: hence the lock, and the wake-up post.
template <typename T>
struct CallerLoopReport {
  std::mutex mu;
  std::optional<Result<T>> result;
};

// Runs `start(loop, handler)` on `loop` on this thread until `handler` got the operation's report;
// `cancel(error)` ends the operation early (the Context was stopped under it, or `keep_waiting`,
// asked about every kStoppedPoll, said no). `bound` is the operation's own bound: it always reports
// by then; kWaitMargin on top only catches a bug. Refused (would_block) on a worker of `context`.
// `reported`, when given, says whether the operation reported (false: refused, or given up on while
// still in flight, and then its loop must not serve another call).
template <typename T, typename Start, typename Cancel>
Result<T> RunOnLoop(const Context& context, PrivateLoop loop, AfterReport after, std::chrono::milliseconds bound,
                    std::string_view what, Start&& start, Cancel&& cancel,
                    const std::function<bool()>& keep_waiting = {}, bool* reported_out = nullptr) {
  if (reported_out != nullptr) *reported_out = false;
  if (auto refused = RefuseOnWorker(context, what); !refused) return Fail(refused.error());
  ++caller_loop_depth;
  struct DepthGuard {
    ~DepthGuard() { --caller_loop_depth; }
  } depth_guard;
  auto report = std::make_shared<CallerLoopReport<T>>();
  auto work = asio::make_work_guard(*loop);
  start(loop, [report, weak = std::weak_ptr<asio::io_context>(loop)](Result<T> result) {
    {
      std::lock_guard lock(report->mu);
      report->result = std::move(result);
    }
    // Wakes the caller's wait when the report came from elsewhere; from the loop itself (the usual
    // case) the caller sees it as soon as this job returns.
    if (auto l = weak.lock(); l && !l->get_executor().running_in_this_thread()) asio::post(*l, [] {});
  });
  auto reported = [&report] {
    std::lock_guard lock(report->mu);
    return report->result.has_value();
  };
  const auto deadline = std::chrono::steady_clock::now() + bound + kWaitMargin;
  bool cut = false, given_up = false;
  auto next_poll = std::chrono::steady_clock::now() + kStoppedPoll;
  while (!reported()) {
    loop->run_one_for(kStoppedPoll);
    if (keep_waiting && !given_up && !reported() && std::chrono::steady_clock::now() >= next_poll) {
      next_poll = std::chrono::steady_clock::now() + kStoppedPoll;
      if (!KeepWaiting(keep_waiting)) {
        given_up = true;
        cancel(Error(Errc::cancelled, "the turn was cancelled by the caller"));
      }
    }
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
  if (reported_out != nullptr) *reported_out = true;
  if (after == AfterReport::drain) {
    loop->run_for(kCallerLoopDrain);
  } else {
    loop->poll();
  }
  std::lock_guard lock(report->mu);
  return std::move(*report->result);
}

// RunOnLoop on this thread's caller loop (AcquireCallerLoop), drained after the report.
template <typename T, typename Start, typename Cancel>
Result<T> RunOnCallerLoop(const Context& context, std::chrono::milliseconds bound, std::string_view what,
                          Start&& start, Cancel&& cancel, const std::function<bool()>& keep_waiting = {}) {
  return RunOnLoop<T>(context, AcquireCallerLoop(), AfterReport::drain, bound, what, std::forward<Start>(start),
                      std::forward<Cancel>(cancel), keep_waiting);
}

}  // namespace sessionturn::blocking
