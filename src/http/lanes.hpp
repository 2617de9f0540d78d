// A blocking call's own HTTP (issue 14): a libcurl multi on a private loop that the calling thread
// runs for the call (blocking_loop.hpp), so HttpClient::Request and the KubeClient's blocking verbs make
// no thread hand-off. Each thread that makes blocking calls on a client gets a lane and keeps it
// between calls, with its kept-alive connections; a client has at most kMaxLanes. A call on a thread
// whose lane is busy (a blocking call nested in a callback of another) or past that bound gets a lane
// made for the one call. Internal to HttpClient and KubeClient.
#pragma once

#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "blocking_loop.hpp"
#include "http/multi.hpp"

namespace sessionturn::http {

struct Lane {
  blocking::PrivateLoop loop;  // first: outlives the multi and every wait on it
  std::shared_ptr<Multi> multi;
};

class Lanes;

// Holds a lane for one blocking call and gives it back when destroyed. Empty when the client is
// being destroyed.
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

 private:
  void Release() noexcept;

  std::shared_ptr<Lanes> owner_;
  std::shared_ptr<Lane> lane_;
};

class Lanes : public std::enable_shared_from_this<Lanes> {
 public:
  // Lanes kept per client (each an epoll descriptor, an eventfd, a timerfd and its idle connections).
  static constexpr std::size_t kMaxLanes = 16;

  // `tally` is the client's: its lanes' exchanges and connections count with its own.
  Lanes(Context& context, HttpClientOptions options, std::shared_ptr<Tally> tally);
  ~Lanes();
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  // This thread's lane (see above); empty once Close() ran. Any thread but a worker of the Context.
  LaneLease Acquire();
  // Closes every lane not in use now; one in use is closed when its call gives it back.
  void Close();

 private:
  friend class LaneLease;
  struct Entry {
    std::shared_ptr<Lane> lane;
    bool busy = false;
  };

  std::shared_ptr<Lane> Make() const;
  void Release(const std::shared_ptr<Lane>& lane);

  Context& context_;
  const HttpClientOptions options_;
  const std::shared_ptr<Tally> tally_;
  std::mutex mu_;
  bool closed_ = false;
  std::unordered_map<std::thread::id, Entry> lanes_;
};

// Closes a lane that no call uses, from any thread: its connections, then the aborted waits queued
// on its loop (they hold the multi).
void Shut(Lane& lane) noexcept;

// Starts an exchange on `multi` (HttpClient's AsyncRequest/AsyncStream, on any multi); on a stopped
// Context it reports at once (blocking::ReportNow). Defined in http_client.cpp.
HttpCall SubmitTo(const std::shared_ptr<Multi>& multi, HttpRequest request, HttpStreamHandlers handlers,
                  bool streaming);

}  // namespace sessionturn::http
