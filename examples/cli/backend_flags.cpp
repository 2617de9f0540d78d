// The SessionBackend from the flags, and waiting for one of its Sessions (backend_flags.hpp).
#include "backend_flags.hpp"

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>

#include "kube_flags.hpp"
#include "output.hpp"
#include "signals.hpp"
#include "terminal.hpp"

namespace sessionturn_cli {

namespace {

// The wait's state, shared with the backend's progress callback and handler (a Context worker) and
// the signal watcher, which may outlive the waiting frame.
struct WaitState {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<st::Result<st::ReadyTarget>> outcome;
  std::string last_printed;
};

// "Session default/chat" on a cluster, "Session chat" on this machine.
std::string Who(const Args& args, const std::string& name) {
  if (args.local) return "Session " + name;
  return "Session " + (args.namespace_name.empty() ? LoadKube(args).Namespace() : args.namespace_name) + "/" + name;
}

// The line for a stage of the wait; empty when there is nothing to say (ready).
std::string StageText(const std::string& who, const st::SessionInfo& info, std::string_view stage) {
  if (stage == "resuming") return "resuming " + who + " (suspended by its idle policy)\u2026";
  if (stage == "starting") return "starting " + who + "\u2026";
  if (stage == "pending") return "waiting for " + who + " (phase " + std::string(st::ToString(info.phase)) + ")\u2026";
  return "";
}

std::unique_ptr<st::SessionBackend> MakeLocal(st::Context& context, const Args& args) {
  st::LocalBackendOptions options;
  options.state_dir = args.state_dir.empty() ? st::DefaultStateDir() : args.state_dir;
  options.runtime_program = args.runtime_program;
  options.agent_bin = args.agent_bin;
  if (args.idle_suspend_seconds) options.suspend_after = std::chrono::seconds(*args.idle_suspend_seconds);
  auto backend = st::MakeLocalBackend(context, std::move(options));
  if (!backend) {
    throw ExitWith{backend.error().code == st::Errc::invalid_argument ? kExitUsage : kExitUnreachable,
                   backend.error().ToString()};
  }
  return std::move(*backend);
}

std::unique_ptr<st::SessionBackend> MakeCluster(st::Context& context, const Args& args) {
  st::KubeConfig kube = LoadKube(args);
  st::KubernetesBackendOptions options;
  options.namespace_name = kube.Namespace();
  auto backend = st::MakeKubernetesBackend(context, std::move(kube), std::move(options));
  if (!backend) throw ExitWith{kExitUsage, backend.error().ToString()};
  return std::move(*backend);
}

}  // namespace

std::unique_ptr<st::SessionBackend> MakeBackend(st::Context& context, const Args& args) {
  return args.local ? MakeLocal(context, args) : MakeCluster(context, args);
}

st::SessionInfo GetSession(st::SessionBackend& backend, const Args& args, const std::string& name) {
  auto info = backend.Get(name);
  if (info) return std::move(*info);
  std::string message = info.error().ToString();
  if (info.error().code == st::Errc::not_found && args.local) {
    message += "; `sessionturn sessions create " + name + " --local" +
               (args.state_dir.empty() ? "" : " --state-dir " + args.state_dir) + "` creates it";
  }
  throw ExitWith{SessionExitCode(info.error()), message};
}

st::ReadyTarget WaitForBackendSession(st::SessionBackend& backend, const Args& args, const std::string& name) {
  const bool stderr_tty = isatty(STDERR_FILENO) == 1;
  auto status = std::make_shared<StatusLine>(stderr_tty);
  status->Set("waiting for " + Who(args, name) + "\u2026");
  auto state = std::make_shared<WaitState>();
  auto cancel = std::make_shared<st::CancellationSource>();
  SetSignalHandler([cancel] { cancel->Cancel(); });

  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<std::int64_t>(args.wait_timeout_seconds * 1000));
  auto progress = [state, status, stderr_tty, who = Who(args, name)](const st::SessionInfo& info,
                                                                     std::string_view stage) {
    const std::string text = StageText(who, info, stage);
    if (text.empty()) return;
    if (stderr_tty) {
      status->Set(text);
      return;
    }
    // Starting a runtime is the ordinary first step of a local turn: not worth a line in a log.
    if (stage == "starting") return;
    std::lock_guard<std::mutex> lock(state->mu);
    if (text == state->last_printed) return;
    state->last_printed = text;
    std::fprintf(stderr, "sessionturn: %s\n", text.c_str());
    std::fflush(stderr);
  };
  backend.AsyncWaitReady(name, deadline, progress, cancel->Token(), [state](st::Result<st::ReadyTarget> r) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->outcome = std::move(r);
    state->cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(state->mu);
    while (!state->outcome) {
      state->cv.wait_for(lock, kStatusRefresh);
      if (state->outcome) break;
      lock.unlock();
      status->Draw();
      lock.lock();
    }
  }
  status->Stop();
  SetSignalHandler({});
  std::lock_guard<std::mutex> lock(state->mu);
  if (!*state->outcome) {
    const st::Error& error = state->outcome->error();
    std::string message = error.ToString();
    // The backend names its option; the CLI's is a flag.
    if (error.code == st::Errc::not_found && message.find("sessionturn-local-runtime was not found") != std::string::npos) {
      message += " (sessionturn: --runtime PROGRAM)";
    }
    // On a cluster a missing Session is awaited (a controller may be creating it): one that did not
    // appear in time is a wait that timed out.
    if (error.code == st::Errc::not_found && !args.local) throw ExitWith{kExitTimeout, message};
    throw ExitWith{SessionExitCode(error), message};
  }
  return std::move(**state->outcome);
}

}  // namespace sessionturn_cli
