// One call into a chat adapter written in another language (a Python coroutine, a C callback): the
// foreign side completes it from any thread, at most once, now or much later; the router's handler
// runs on the Context (through its gate, so never into a Context that stopped); and a call the
// foreign side never completes fails with Errc::timeout instead of holding the router. Used by the
// Python binding and the C ABI (bindings/python/src/router.cpp, capi/sessionturn_router.cpp).
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include "context_gate.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"

namespace sessionturn::detail {

template <typename T>
class ForeignCall {
 public:
  using Handler = std::function<void(Result<T>)>;

  // Arms the watchdog and returns the call; hand it (shared) to whatever completes it. `what` names the
  // call in the timeout's message ("the adapter's post"), `hint` ends it ("is its asyncio loop running?").
  static std::shared_ptr<ForeignCall> Start(Context& ctx, const std::string& what, std::chrono::milliseconds timeout,
                                            Handler handler, const std::string& hint) {
    auto call = std::shared_ptr<ForeignCall>(new ForeignCall());
    call->handler_ = std::move(handler);
    call->gate_ = GateOf(ctx);
    auto watchdog = std::make_shared<Watchdog>(ctx.io());
    call->watchdog_ = watchdog;
    watchdog->timer.expires_after(timeout);
    std::string message = what + " did not complete within " + Seconds(timeout);
    if (!hint.empty()) message += " (" + hint + ")";
    // The wait holds the call: one the foreign side never completes (its loop stopped, the completion
    // dropped) still ends.
    watchdog->timer.async_wait([watchdog, call, message = std::move(message)](const asio::error_code& ec) {
      if (!ec) call->Complete(Fail(Errc::timeout, message));
    });
    return call;
  }

  ForeignCall(const ForeignCall&) = delete;
  ForeignCall& operator=(const ForeignCall&) = delete;

  ~ForeignCall() {
    // Never completed and the Context is gone: the handler holds the router's objects, whose destruction
    // needs the event loop. Leaked on purpose.
    if (handler_ && !gate_->Post([] {})) new Handler(std::move(handler_));
  }

  // Completes the call: true when this was the first completion (the handler will run on the Context),
  // false when it was already completed (or timed out) and `result` is dropped. Any thread.
  bool Complete(Result<T> result) {
    if (completed_.exchange(true)) return false;
    auto run = [w = watchdog_, h = std::move(handler_), r = std::move(result)]() mutable {
      if (auto d = w.lock()) asio::post(d->strand, [d] { d->timer.cancel(); });
      h(std::move(r));
    };
    // The handler (and what it holds: the router's state) is destroyed where it ran, on the worker, never
    // on the completing thread, which may hold the last reference after the post.
    auto boxed = std::make_shared<std::optional<decltype(run)>>(std::move(run));
    if (!gate_->Post([boxed] {
          (**boxed)();
          boxed->reset();
        }))
      new std::shared_ptr<std::optional<decltype(run)>>(boxed);  // see ~ForeignCall
    return true;
  }

  bool completed() const noexcept { return completed_.load(); }

 private:
  // The watchdog's asio objects belong to its own wait handler only (so to the Context's event loop):
  // the foreign side, which may keep the call after the Context is gone, never owns one.
  struct Watchdog {
    asio::strand<asio::io_context::executor_type> strand;
    asio::steady_timer timer;
    explicit Watchdog(asio::io_context& io) : strand(asio::make_strand(io)), timer(strand) {}
  };

  ForeignCall() = default;

  static std::string Seconds(std::chrono::milliseconds d) {
    if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
    return std::to_string(d.count()) + " ms";
  }

  std::atomic<bool> completed_{false};
  Handler handler_;
  std::shared_ptr<ContextGate> gate_;  // outlives the Context
  std::weak_ptr<Watchdog> watchdog_;
};

}  // namespace sessionturn::detail
