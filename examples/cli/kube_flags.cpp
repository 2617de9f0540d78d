// Kubeconfig from the flags and the Session wait with progress (kube_flags.hpp).
#include "kube_flags.hpp"

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "output.hpp"
#include "terminal.hpp"

namespace sessionturn_cli {

namespace {

// What the user is waiting for, as a status line; empty when there is nothing to wait for (ready) or
// the wait is about to end with an error that says it all (failed, suspended by its owner).
std::string WaitStatusText(const st::Session& s, const std::string& who, bool& resuming) {
  if (s.IsReady() || s.IsFailed() || s.IsOwnerSuspended()) return "";
  if (s.IsIdleSuspended() || (!s.resume_request.empty() && s.resume_request != s.resume_acknowledgement)) {
    resuming = true;
  }
  if (resuming) return "resuming " + who + " (suspended by its idle policy)\u2026";
  return "waiting for " + who + " (phase " + (s.phase.empty() ? std::string("not yet set") : s.phase) + ")\u2026";
}

}  // namespace

st::KubeConfig LoadKube(const Args& args) {
  st::KubeConfigOptions options;
  options.kubeconfig = args.kubeconfig;
  options.context = args.kube_context;
  options.namespace_name = args.namespace_name;
  auto kube = st::KubeConfig::Load(options);
  if (!kube) throw ExitWith{kExitUsage, kube.error().ToString()};
  return std::move(*kube);
}

WaitedSession WaitForKubeSession(const Args& args, const std::string& name) {
  WaitedSession out{LoadKube(args), {}, {}};
  out.namespace_name = out.kube.Namespace();
  const std::string who = "Session " + out.namespace_name + "/" + name;
  const bool stderr_tty = isatty(STDERR_FILENO) == 1;
  StatusLine status(stderr_tty);
  status.Set("waiting for " + who + "\u2026");

  std::mutex mu;
  std::condition_variable cv;
  std::optional<st::Result<st::ReadySession>> outcome;
  bool resuming = false;     // touched only by the waiting thread
  std::string last_printed;  // likewise
  st::WaitReadyOptions options;
  options.resume_idle = true;
  options.on_update = [&](const st::Session& s) {
    const std::string text = WaitStatusText(s, who, resuming);
    if (text.empty()) return;
    if (stderr_tty) {
      status.Set(text);
    } else if (text != last_printed) {
      last_printed = text;
      std::fprintf(stderr, "sessionturn: %s\n", text.c_str());
      std::fflush(stderr);
    }
  };
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<std::int64_t>(args.wait_timeout_seconds * 1000));
  // The wait blocks; the main thread keeps the status line ticking meanwhile.
  std::thread waiter([&] {
    st::KubeClient client(out.kube);
    st::SessionClient sessions(client, out.namespace_name);
    auto r = sessions.WaitReady(name, deadline, options);
    std::lock_guard<std::mutex> lock(mu);
    outcome = std::move(r);
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    while (!outcome) {
      cv.wait_for(lock, kStatusRefresh);
      if (outcome) break;
      lock.unlock();
      status.Draw();
      lock.lock();
    }
  }
  waiter.join();
  status.Stop();
  if (!*outcome) throw ExitWith{SessionExitCode(outcome->error()), outcome->error().ToString()};
  out.ready = std::move(**outcome);
  return out;
}

}  // namespace sessionturn_cli
