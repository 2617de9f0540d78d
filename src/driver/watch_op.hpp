// A watch: follows a Session's events from a cursor across reconnects (EventStream), delivering each
// event once, in order, until Stop() or the stream gives up.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/driver_impl.hpp"
#include "driver/event_stream.hpp"

namespace sessionturn {

struct WatchHandle::Impl {
  std::shared_ptr<driver_detail::WatchOp> op;
};

namespace driver_detail {

class WatchOp : public std::enable_shared_from_this<WatchOp>, public EventStream::Owner {
 public:
  WatchOp(std::shared_ptr<DriverState> driver, WatchOptions options, WatchCallback callback, WatchEndHandler on_end);

  void Start();
  // From any thread; waits for a callback running on another thread (not for one on this thread).
  void Stop();
  bool Active() const { return !ended_.load() && !stopped_.load(); }
  std::int64_t last_event_id() const;
  std::string journal_id() const;
  int reconnects() const { return reconnects_.load(); }
  // Only once the Context's workers are joined (nothing runs concurrently): drops the stream.
  void ReleaseStopped();

  // EventStream::Owner
  std::vector<ClientRequest> OnStreamUp(bool reconnected) override;
  void OnStreamEvent(const Event& event) override;
  void OnStreamDown(const Error& why) override;
  void OnStreamFailed(Error error) override;

 private:
  void End(Status status);

  std::shared_ptr<DriverState> driver_;
  Strand strand_;
  std::shared_ptr<OpTimers> timers_;  // the stream's handshake and backoff
  WatchOptions options_;
  WatchCallback callback_;
  WatchEndHandler on_end_;
  std::shared_ptr<EventStream> stream_;
  bool done_ = false;
  std::atomic<bool> ended_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<int> reconnects_{0};
  std::recursive_mutex callback_mu_;  // recursive: Stop() from inside the callback
  mutable std::mutex cursor_mu_;
  std::int64_t last_event_id_ = 0;
  std::string journal_id_;
};

}  // namespace driver_detail
}  // namespace sessionturn
