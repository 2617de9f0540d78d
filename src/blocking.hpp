// How a blocking call waits for its asynchronous form, shared by every layer (driver, HTTP,
// Kubernetes, backends): refuse on a Context worker, wait for the handler's report, notice a
// Context stopped under the wait, and report at once without I/O when the Context is stopped.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>

#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"

namespace sessionturn::blocking {

// Margin on top of an operation's own deadline for a blocking wait: the operation always reports by
// its deadline (its timer fires on the Context), so this only matters when something is badly wrong.
inline constexpr std::chrono::milliseconds kWaitMargin = std::chrono::seconds(30);
// A blocking wait checks this often whether the Context was stopped under it (then nothing reports).
inline constexpr std::chrono::milliseconds kStoppedPoll = std::chrono::milliseconds(100);

// "<what> blocks and was called on a Context worker thread; use its Async form" (Errc::would_block),
// or success when the calling thread may block.
inline Status RefuseOnWorker(const Context& context, std::string_view what) {
  if (!context.InWorkerThread()) return {};
  return Fail(Errc::would_block,
              std::string(what) + " blocks and was called on a Context worker thread; use its Async form");
}

// The error of an operation started on a stopped Context.
inline Error StoppedContextError(std::string_view what) {
  return Error(Errc::unavailable, std::string(what) + " cannot run: its Context was stopped");
}

// Waits for an operation's report. It always reports by its deadline unless the Context was stopped
// under it (then nothing runs any more): notice that within kStoppedPoll instead of waiting it out.
// `each_poll`, when given, runs on the waiting thread after every kStoppedPoll without a report.
template <typename T>
Result<T> Wait(const Context& context, std::future<Result<T>>& future, std::chrono::milliseconds bound,
               std::string_view what, const std::function<void()>& each_poll = {}) {
  const auto deadline = std::chrono::steady_clock::now() + bound + kWaitMargin;
  while (future.wait_for(kStoppedPoll) != std::future_status::ready) {
    if (each_poll) each_poll();
    if (context.Stopped()) {
      // A handler may still be finishing on a worker that is being joined: give it one more look.
      if (future.wait_for(kStoppedPoll) == std::future_status::ready) break;
      return Fail(Errc::cancelled, std::string(what) + " was cut off: its Context was stopped while it was in flight");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Fail(Errc::timeout, std::string(what) + " did not report within its deadline; is the Context running (" +
                                     std::to_string(context.threads()) + " threads)?");
    }
  }
  return future.get();
}

// Runs `start(handler)` and waits for the handler's Result<T>. `bound` is the operation's own bound.
template <typename T, typename Start>
Result<T> Call(const Context& context, std::chrono::milliseconds bound, std::string_view what, Start&& start,
               const std::function<void()>& each_poll = {}) {
  if (auto refused = RefuseOnWorker(context, what); !refused) return Fail(refused.error());
  auto promise = std::make_shared<std::promise<Result<T>>>();
  auto future = promise->get_future();
  start([promise](Result<T> result) { promise->set_value(std::move(result)); });
  return Wait(context, future, bound, what, each_poll);
}

// As Call, for operations that report a Status.
template <typename Start>
Status CallStatus(const Context& context, std::chrono::milliseconds bound, std::string_view what, Start&& start) {
  auto result = Call<bool>(context, bound, what, [&](auto done) {
    start([done = std::move(done)](Status status) mutable {
      if (status) {
        done(true);
      } else {
        done(Fail(status.error()));
      }
    });
  });
  if (!result) return Fail(result.error());
  return {};
}

// Reports `value` through `handler` without I/O: on a worker while the Context runs, else here and now
// (a stopped Context runs nothing, and a handler that is never called is a hang).
template <typename Handler, typename Value>
void ReportNow(Context& context, Handler handler, Value value) {
  if (!handler) return;
  if (context.Stopped()) {
    handler(std::move(value));
    return;
  }
  context.Post([handler = std::move(handler), value = std::move(value)]() mutable { handler(std::move(value)); });
}

}  // namespace sessionturn::blocking
