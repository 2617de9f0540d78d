#include "driver/op_timers.hpp"

#include <algorithm>
#include <utility>

namespace sessionturn::driver_detail {

OpTimers::OpTimers(Strand strand) : timer_(std::move(strand)) {}

OpTimers::Key OpTimers::At(Clock::time_point when, std::function<void()> fn) {
  const Key key = next_key_++;
  entries_.push_back(Entry{when, key, std::move(fn)});
  WaitFor(when);
  return key;
}

void OpTimers::Cancel(Key& key) {
  if (key == 0) return;
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  key = 0;
  if (it == entries_.end()) return;
  entries_.erase(it);
  if (entries_.empty() && waiting_) {  // nothing left to wait for
    waiting_ = false;
    ++generation_;
    timer_.cancel();
  }
}

void OpTimers::ExpectBy(Clock::time_point when) { WaitFor(when); }

void OpTimers::CancelAll() {
  // Moved out first: destroying a function may release the last reference to its owner.
  std::vector<Entry> entries = std::move(entries_);
  entries_.clear();
  if (waiting_) {
    waiting_ = false;
    ++generation_;
    timer_.cancel();
  }
}

void OpTimers::WaitFor(Clock::time_point when) {
  if (waiting_ && waiting_for_ <= when) return;
  // Re-arming cancels the earlier wait, whose completion the generation marks as stale.
  waiting_ = true;
  waiting_for_ = when;
  const std::uint64_t generation = ++generation_;
  timer_.expires_at(when);
  timer_.async_wait(Waiter(shared_from_this(), generation));
}

OpTimers::Waiter::~Waiter() {
  if (timers_) timers_->OnAbandoned(generation_);
}

void OpTimers::Waiter::operator()(const asio::error_code& ec) {
  std::shared_ptr<OpTimers> timers = std::move(timers_);
  timers->OnWake(generation_, ec);
}

void OpTimers::OnAbandoned(std::uint64_t generation) noexcept {
  if (generation != generation_) return;
  waiting_ = false;
  std::vector<Entry> entries = std::move(entries_);
  entries_.clear();
}

void OpTimers::OnWake(std::uint64_t generation, const asio::error_code& ec) {
  if (generation != generation_) return;  // superseded by a wait for an earlier time, or cancelled
  waiting_ = false;
  if (ec) return;
  // One due function at a time, earliest first, each taken out before it runs: it may cancel or add
  // others (a deadline that withdraws the turn starts the grace; a finish cancels everything).
  // A function that throws (out of memory) leaves the others scheduled.
  try {
    for (;;) {
      auto due = Earliest();
      if (due == entries_.end() || due->when > Clock::now()) break;
      std::function<void()> fn = std::move(due->fn);
      entries_.erase(due);
      fn();
    }
  } catch (...) {
    if (auto next = Earliest(); next != entries_.end()) WaitFor(next->when);
    throw;
  }
  if (auto next = Earliest(); next != entries_.end()) WaitFor(next->when);
}

std::vector<OpTimers::Entry>::iterator OpTimers::Earliest() {
  return std::min_element(entries_.begin(), entries_.end(),
                          [](const Entry& a, const Entry& b) { return a.when < b.when; });
}

}  // namespace sessionturn::driver_detail
