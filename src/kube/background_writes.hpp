// Writes a Session connector starts in the background (the resume acknowledgement's PATCH), counted so
// that whoever ends a short-lived program's Sessions can give them the time to land. The owner that
// is destroyed deterministically on the caller's thread waits: the connector itself when it was
// made alone, else the KubernetesBackend that made it (a connector's last reference may drop on a
// worker, which must not block, and the program may exit right after).
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "sessionturn/kube.hpp"
#include "sessionturn/session_driver.hpp"

namespace sessionturn::kube {

class BackgroundWrites {
 public:
  void Begin() {
    std::lock_guard lock(mu_);
    ++pending_;
  }
  void End() {
    std::lock_guard lock(mu_);
    if (--pending_ == 0) idle_.notify_all();
  }
  // Until none is in flight, at most `bound`.
  void WaitIdle(std::chrono::milliseconds bound) {
    std::unique_lock lock(mu_);
    idle_.wait_for(lock, bound, [this] { return pending_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable idle_;
  int pending_ = 0;
};

// One PATCH (a read and a write, retried by the client) normally takes milliseconds.
inline constexpr std::chrono::milliseconds kBackgroundWriteGrace{5000};

// MakeSessionConnector with the tally of its owner, which waits for it (the connector then does not).
std::shared_ptr<Connector> MakeOwnedSessionConnector(Context& context, const KubeConfig& kube,
                                                     std::shared_ptr<KubeClient> client,
                                                     const std::string& namespace_name, const std::string& name,
                                                     const std::string& resume_request,
                                                     const SessionDriverOptions& options,
                                                     std::shared_ptr<BackgroundWrites> writes);

}  // namespace sessionturn::kube
