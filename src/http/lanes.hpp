// A blocking call's own HTTP (issue 14): a libcurl multi on a private loop that the calling thread
// runs for the call (blocking_loop.hpp), so HttpClient::Request and the KubeClient's blocking verbs
// make no thread hand-off. Each thread that makes blocking calls on a client gets a lane and keeps it
// between calls, with its kept-alive connections; a blocking call made inside a callback of another
// on the same thread (a Get in a blocking Watch's handler) gets the thread's next lane, kept as well.
// A client keeps at most kMaxLanes idle: a lane given back past that closes the ones idle longest
// (the lanes of threads that ended go first). Internal to HttpClient and KubeClient.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "blocking_loop.hpp"
#include "http/multi.hpp"

namespace sessionturn::http {

struct Lane {
  blocking::PrivateLoop loop;  // first: outlives the multi and every wait on it
  std::shared_ptr<Multi> multi;
  std::thread::id owner;  // the thread whose calls it serves, at this nesting depth
  int depth = 0;
};

class Lanes;

// Holds a lane for one blocking call. The call says Keep() once its operation reported; a lane given
// back without it (the call threw, or gave up on an operation still in flight) is closed, never
// reused. Empty when the client is being destroyed.
class LaneLease {
 public:
  LaneLease() = default;
  LaneLease(std::shared_ptr<Lanes> owner, std::shared_ptr<Lane> lane)
      : owner_(std::move(owner)), lane_(std::move(lane)) {}
  ~LaneLease();
  LaneLease(LaneLease&& other) noexcept = default;
  LaneLease& operator=(LaneLease&& other) noexcept;
  LaneLease(const LaneLease&) = delete;
  LaneLease& operator=(const LaneLease&) = delete;

  explicit operator bool() const noexcept { return lane_ != nullptr; }
  const std::shared_ptr<Lane>& lane() const noexcept { return lane_; }
  // The operation on it reported: the lane may serve the next call.
  void Keep() noexcept { keep_ = true; }

 private:
  void Release() noexcept;

  std::shared_ptr<Lanes> owner_;
  std::shared_ptr<Lane> lane_;
  bool keep_ = false;
};

class Lanes : public std::enable_shared_from_this<Lanes> {
 public:
  // Lanes kept per client (each an epoll descriptor, an eventfd, a timerfd and its idle connections);
  // more exist while more blocking calls run at once.
  static constexpr std::size_t kMaxLanes = 16;
  // How long Close() waits for the calls it cancelled on other threads to give their lanes back.
  static constexpr std::chrono::seconds kCloseWait{5};

  // `tally` is the client's: its lanes' exchanges and connections count with its own.
  Lanes(Context& context, HttpClientOptions options, std::shared_ptr<Tally> tally);
  ~Lanes();
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  // A lane for a blocking call on this thread (see above); empty once Close() ran.
  LaneLease Acquire();
  // Closes the idle lanes, ends the exchanges on the busy ones (they report Errc::cancelled) and,
  // off a worker of the Context, waits up to kCloseWait until the calls on other threads gave theirs
  // back: after it returns no lane of another thread touches the client's Context any more (unless
  // that wait ran out).
  void Close();

 private:
  friend class LaneLease;
  // A thread's lanes by nesting depth: 0 for its outermost blocking call, 1 for one inside it, ...
  using Key = std::pair<std::thread::id, int>;
  struct Entry {
    std::shared_ptr<Lane> lane;
    bool busy = false;
    std::chrono::steady_clock::time_point last_used;
  };

  std::shared_ptr<Lane> Make(std::thread::id owner, int depth) const;
  // Under mu_: takes out the lanes idle longest while more than kMaxLanes exist (to be shut outside
  // the lock).
  void Trim(std::vector<std::shared_ptr<Lane>>& evicted);
  void Release(const std::shared_ptr<Lane>& lane, bool keep);

  Context& context_;
  const HttpClientOptions options_;
  const std::shared_ptr<Tally> tally_;
  std::mutex mu_;
  std::condition_variable released_;
  bool closed_ = false;
  std::map<Key, Entry> lanes_;
};

// A blocking call on a lane of `lanes` (this thread's): runs `start(lane, done)` there until `done`
// got the operation's report (blocking::RunOnLoop; `cancel(error)` ends it early: its bound, a
// stopped Context), then keeps the lane for the thread's next call only if the operation reported.
// Refused on a worker of `context`; `destroyed()` is the error when the client is being destroyed.
template <typename T, typename Destroyed, typename Start, typename Cancel>
Result<T> RunOnLane(Lanes& lanes, const Context& context, std::chrono::milliseconds bound, std::string_view what,
                    Destroyed&& destroyed, Start&& start, Cancel&& cancel) {
  if (auto refused = blocking::RefuseOnWorker(context, what); !refused) return Fail(refused.error());
  LaneLease lease = lanes.Acquire();
  if (!lease) return Fail(destroyed());
  bool reported = false;
  auto result = blocking::RunOnLoop<T>(
      context, lease.lane()->loop, blocking::AfterReport::ready, bound, what,
      [&](const blocking::PrivateLoop&, auto done) { start(lease.lane(), std::move(done)); },
      std::forward<Cancel>(cancel), {}, &reported);
  if (reported) lease.Keep();
  return result;
}

// Closes a lane that no call runs, from any thread: its connections (an exchange still on it is
// dropped unreported), then the aborted waits queued on its loop (they hold the multi).
void Shut(Lane& lane) noexcept;

// Starts an exchange on `multi` (HttpClient's AsyncRequest/AsyncStream, on any multi); on a stopped
// Context it reports at once (blocking::ReportNow). Defined in http_client.cpp.
HttpCall SubmitTo(const std::shared_ptr<Multi>& multi, HttpRequest request, HttpStreamHandlers handlers,
                  bool streaming);

}  // namespace sessionturn::http
