// The lanes of a client's blocking calls (http/lanes.hpp).
#include "http/lanes.hpp"

#include <vector>

namespace sessionturn::http {

LaneLease::~LaneLease() { Release(); }

LaneLease& LaneLease::operator=(LaneLease&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::move(other.owner_);
    lane_ = std::move(other.lane_);
    keep_ = other.keep_;
  }
  return *this;
}

void LaneLease::Release() noexcept {
  if (owner_ && lane_) owner_->Release(lane_, keep_);
  owner_.reset();
  lane_.reset();
  keep_ = false;
}

Lanes::Lanes(Context& context, HttpClientOptions options, std::shared_ptr<Tally> tally)
    : context_(context), options_(std::move(options)), tally_(std::move(tally)) {}

Lanes::~Lanes() {
  // Every lease holds us: nothing is in use any more.
  for (auto& [key, entry] : lanes_) Shut(*entry.lane);
}

std::shared_ptr<Lane> Lanes::Make(std::thread::id owner, int depth) const {
  auto lane = std::make_shared<Lane>();
  lane->loop = std::make_shared<asio::io_context>(1);
  lane->multi = std::make_shared<Multi>(context_, *lane->loop, options_, tally_);
  lane->owner = owner;
  lane->depth = depth;
  return lane;
}

void Lanes::Trim(std::vector<std::shared_ptr<Lane>>& evicted) {
  while (lanes_.size() > kMaxLanes) {
    auto oldest = lanes_.end();
    for (auto it = lanes_.begin(); it != lanes_.end(); ++it) {
      if (!it->second.busy && (oldest == lanes_.end() || it->second.last_used < oldest->second.last_used)) oldest = it;
    }
    if (oldest == lanes_.end()) return;  // every one is in use
    evicted.push_back(std::move(oldest->second.lane));
    lanes_.erase(oldest);
  }
}

LaneLease Lanes::Acquire() {
  const auto me = std::this_thread::get_id();
  std::lock_guard lock(mu_);
  if (closed_) return {};
  // This thread's first lane not in use: its outermost call's, or the next depth for a nested one.
  int depth = 0;
  for (auto it = lanes_.find(Key{me, 0}); it != lanes_.end() && it->first.first == me; ++it, ++depth) {
    if (it->first.second != depth) break;  // a gap (that depth was evicted): make it again
    if (!it->second.busy) {
      it->second.busy = true;
      it->second.lane->loop->restart();  // it ran out of work at the end of the last call
      return LaneLease(shared_from_this(), it->second.lane);
    }
  }
  // Every lane in use is in the map, so that Close() finds it; Release() trims the idle ones.
  auto lane = Make(me, depth);
  lanes_.emplace(Key{me, depth}, Entry{lane, true, {}});
  return LaneLease(shared_from_this(), std::move(lane));
}

void Lanes::Release(const std::shared_ptr<Lane>& lane, bool keep) {
  std::vector<std::shared_ptr<Lane>> shut;
  {
    std::lock_guard lock(mu_);
    auto it = lanes_.find(Key{lane->owner, lane->depth});
    if (it != lanes_.end() && it->second.lane == lane) {
      if (closed_ || !keep) {
        shut.push_back(std::move(it->second.lane));
        lanes_.erase(it);
      } else {
        it->second.busy = false;
        it->second.last_used = std::chrono::steady_clock::now();
        Trim(shut);
      }
    }
  }
  // Shut before telling Close(): what the shutdown runs (aborted waits) is done when Close returns.
  for (auto& l : shut) Shut(*l);
  std::lock_guard lock(mu_);
  released_.notify_all();
}

void Lanes::Close() {
  std::vector<std::shared_ptr<Lane>> idle;
  const auto me = std::this_thread::get_id();
  std::unique_lock lock(mu_);
  closed_ = true;
  for (auto it = lanes_.begin(); it != lanes_.end();) {
    if (it->second.busy) {
      // Its call runs on its thread's loop: end its exchanges there (they report cancelled).
      it->second.lane->multi->CancelAll();
      ++it;
    } else {
      idle.push_back(std::move(it->second.lane));
      it = lanes_.erase(it);
    }
  }
  lock.unlock();
  for (auto& lane : idle) Shut(*lane);
  idle.clear();
  // A worker must not wait (the Context's own shutdown runs there); a call on this thread (Close from
  // inside one of its callbacks) gives its lane back after we return.
  if (context_.InWorkerThread()) return;
  auto others_busy = [&] {
    for (const auto& [key, entry] : lanes_) {
      if (entry.busy && key.first != me) return true;
    }
    return false;
  };
  lock.lock();
  released_.wait_for(lock, kCloseWait, [&] { return !others_busy(); });
}

void Shut(Lane& lane) noexcept {
  if (!lane.multi) return;
  lane.multi->CloseIdle();
  try {
    lane.loop->restart();
    lane.loop->poll();
  } catch (...) {
    // An aborted wait's handler does not throw; if one did, the loop's destruction drops the rest.
  }
  lane.multi.reset();
}

}  // namespace sessionturn::http
