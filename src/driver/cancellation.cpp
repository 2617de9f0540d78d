// CancellationToken and CancellationSource (driver.hpp).
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "sessionturn/driver.hpp"

namespace sessionturn {

// ---- Cancellation --------------------------------------------------------------------------------

struct CancellationToken::State {
  // Recursive: a callback may Unregister itself (or register another) from inside Cancel().
  std::recursive_mutex mu;
  std::atomic<bool> cancelled{false};
  std::uint64_t next_id = 1;
  std::unordered_map<std::uint64_t, std::function<void()>> callbacks;
};

bool CancellationToken::IsCancelled() const noexcept { return state_ && state_->cancelled.load(); }

std::uint64_t CancellationToken::OnCancel(std::function<void()> fn) const {
  if (!state_ || !fn) return 0;
  std::unique_lock lock(state_->mu);
  if (state_->cancelled.load()) {
    lock.unlock();
    fn();
    return 0;
  }
  const std::uint64_t id = state_->next_id++;
  state_->callbacks.emplace(id, std::move(fn));
  return id;
}

void CancellationToken::Unregister(std::uint64_t id) const {
  if (!state_ || id == 0) return;
  // Taking the lock waits for a Cancel() that is running callbacks on another thread.
  std::lock_guard lock(state_->mu);
  state_->callbacks.erase(id);
}

CancellationSource::CancellationSource() : state_(std::make_shared<CancellationToken::State>()) {}

void CancellationSource::Cancel() {
  std::lock_guard lock(state_->mu);
  if (state_->cancelled.exchange(true)) return;
  auto callbacks = std::move(state_->callbacks);
  state_->callbacks.clear();
  for (auto& [id, fn] : callbacks) fn();
}

bool CancellationSource::IsCancelled() const noexcept { return state_->cancelled.load(); }

CancellationToken CancellationSource::Token() const { return CancellationToken(state_); }

}  // namespace sessionturn
