// The signal watcher (signals.hpp).
#include "signals.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "args.hpp"

namespace sessionturn_cli {

namespace {

std::atomic<int> g_signals{0};
std::mutex g_signal_mu;
std::function<void()> g_on_first_signal;

}  // namespace

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A reader that went away (`sessionturn turn ... | head`) is an EPIPE on write, not death.
  signal(SIGPIPE, SIG_IGN);
}

void StartSignalWatcher() {
  std::thread([] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (g_signals.fetch_add(1) == 0) {
        std::function<void()> handler;
        {
          std::lock_guard<std::mutex> lock(g_signal_mu);
          handler = g_on_first_signal;
        }
        if (handler) {
          handler();
          continue;
        }
        if (isatty(STDERR_FILENO) == 1) std::fputs("\r\033[K", stderr);  // a status line would stay
        std::fputs("sessionturn: interrupted\n", stderr);
        std::_Exit(kExitTurnFailed);
      }
      std::_Exit(128 + sig);
    }
  }).detach();
}

void SetSignalHandler(std::function<void()> on_first) {
  std::lock_guard<std::mutex> lock(g_signal_mu);
  g_on_first_signal = std::move(on_first);
}

}  // namespace sessionturn_cli
