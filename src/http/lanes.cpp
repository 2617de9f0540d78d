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
  }
  return *this;
}

void LaneLease::Release() noexcept {
  if (owner_ && lane_) {
    try {
      owner_->Release(lane_);
    } catch (...) {
      Shut(*lane_);  // bookkeeping failed (allocation): the lane is not kept, and nothing leaks
    }
  }
  owner_.reset();
  lane_.reset();
}

Lanes::Lanes(Context& context, HttpClientOptions options, std::shared_ptr<Tally> tally)
    : context_(context), options_(std::move(options)), tally_(std::move(tally)) {}

Lanes::~Lanes() {
  // Every lease holds us: nothing is in use any more.
  for (auto& [id, entry] : lanes_) Shut(*entry.lane);
}

std::shared_ptr<Lane> Lanes::Make() const {
  auto lane = std::make_shared<Lane>();
  lane->loop = std::make_shared<asio::io_context>(1);
  lane->multi = std::make_shared<Multi>(context_, *lane->loop, options_, tally_);
  return lane;
}

LaneLease Lanes::Acquire() {
  const auto me = std::this_thread::get_id();
  std::lock_guard lock(mu_);
  if (closed_) return {};
  auto it = lanes_.find(me);
  if (it != lanes_.end() && !it->second.busy) {
    it->second.busy = true;
    it->second.lane->loop->restart();  // it ran out of work at the end of the last call
    return LaneLease(shared_from_this(), it->second.lane);
  }
  auto lane = Make();
  if (it == lanes_.end() && lanes_.size() < kMaxLanes) lanes_.emplace(me, Entry{lane, true});
  return LaneLease(shared_from_this(), std::move(lane));
}

void Lanes::Release(const std::shared_ptr<Lane>& lane) {
  bool keep = false;
  {
    std::lock_guard lock(mu_);
    auto it = lanes_.find(std::this_thread::get_id());
    if (it != lanes_.end() && it->second.lane == lane) {
      if (closed_) {
        lanes_.erase(it);
      } else {
        it->second.busy = false;
        keep = true;
      }
    }
  }
  if (!keep) Shut(*lane);  // a lane for one call, or the client closed while it was in use
}

void Lanes::Close() {
  std::vector<std::shared_ptr<Lane>> idle;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (auto it = lanes_.begin(); it != lanes_.end();) {
      if (it->second.busy) {
        ++it;
      } else {
        idle.push_back(std::move(it->second.lane));
        it = lanes_.erase(it);
      }
    }
  }
  for (auto& lane : idle) Shut(*lane);
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
