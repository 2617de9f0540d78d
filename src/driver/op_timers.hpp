// An operation's deadlines on one timer: a turn's deadline, its stream's handshake and backoff, the
// abandon grace and each question's answer timeout all wait on the same asio timer, armed for the
// earliest. A deadline cancelled before it is due leaves the timer alone (the wait wakes, finds
// nothing due and waits for the next), and ExpectBy arms the timer for a deadline the operation is
// about to add, so that a turn that ends within its handshake bound (the usual echo or short turn)
// arms and cancels its timer once; a longer one wakes once more at that bound and waits for its
// deadline. Each re-arm of an asio timer costs a timerfd update and a cancelled wait's completion.
// Not thread-safe: every call runs on the operation's strand, and so do the due functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <asio.hpp>

namespace sessionturn::driver_detail {

class OpTimers : public std::enable_shared_from_this<OpTimers> {
 public:
  using Clock = std::chrono::steady_clock;
  using Strand = asio::strand<asio::io_context::executor_type>;
  // Names one scheduled function; 0 names none.
  using Key = std::uint64_t;

  explicit OpTimers(Strand strand);

  // Runs `fn` on the strand once `when` has come, unless cancelled first. Returns its key.
  Key At(Clock::time_point when, std::function<void()> fn);
  Key After(Clock::duration delay, std::function<void()> fn) { return At(Clock::now() + delay, std::move(fn)); }
  // Cancels `key` (no effect when it already ran or was cancelled) and sets it to 0. Leaves the
  // timer's wait as it is, unless nothing else is scheduled.
  void Cancel(Key& key);
  // A deadline at or after `when` will be added soon: the timer waits no longer than `when`, so that
  // adding it does not re-arm the timer. Waking early costs one empty wake-up.
  void ExpectBy(Clock::time_point when);
  // Cancels everything and the timer's wait, and releases the functions (and what they hold). The
  // owner is finishing; At() still works after it.
  void CancelAll();

  std::size_t Pending() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    Clock::time_point when;
    Key key;
    std::function<void()> fn;
  };

  // The pending wait's handler. It holds the OpTimers, whose functions hold their operation: when the
  // loop shuts down and destroys it unrun, it releases them, or operation and timers would hold each
  // other for ever.
  class Waiter {
   public:
    Waiter(std::shared_ptr<OpTimers> timers, std::uint64_t generation) noexcept
        : timers_(std::move(timers)), generation_(generation) {}
    Waiter(Waiter&& other) noexcept : timers_(std::move(other.timers_)), generation_(other.generation_) {}
    Waiter& operator=(Waiter&&) = delete;
    ~Waiter();
    void operator()(const asio::error_code& ec);

   private:
    std::shared_ptr<OpTimers> timers_;
    std::uint64_t generation_;
  };

  // Makes the timer wait for `when` unless it already waits for that or earlier.
  void WaitFor(Clock::time_point when);
  void OnWake(std::uint64_t generation, const asio::error_code& ec);
  void OnAbandoned(std::uint64_t generation) noexcept;
  std::vector<Entry>::iterator Earliest();

  asio::steady_timer timer_;
  std::vector<Entry> entries_;  // a few at most: unsorted
  Key next_key_ = 1;
  bool waiting_ = false;
  Clock::time_point waiting_for_{};
  std::uint64_t generation_ = 0;  // a wait superseded by an earlier one is ignored when it completes
};

}  // namespace sessionturn::driver_detail
