// Runs the built `sessionturn` CLI as a user would: a child process with pipes for stdin, stdout and
// stderr, a hang limit, and an optional SIGINT once the output shows something. Shared by the CLI's
// integration tests (local runtime) and its Kubernetes tests (fake API server).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

extern char** environ;

namespace sessionturn::testing_support {

inline const std::string kCli = std::string(SESSIONTURN_BINARY_DIR) + "/examples/cli/sessionturn";
// A CLI run that takes longer is a hang (the machine is shared and slow under sanitizers).
inline constexpr std::chrono::seconds kCliRunLimit{90};

struct Run {
  std::string setup_error;
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs the CLI with `args`, feeding `input` on stdin. `until` (optional) is polled with the output
// so far; when it returns true the CLI gets SIGINT (for watch).
// No Catch assertions inside (it may run on another thread): problems go to Run::setup_error.
inline Run RunCliRaw(const std::vector<std::string>& args, const std::string& input = "",
              const std::function<bool(const std::string&)>& interrupt_when = {}, bool hold_stdin = false) {
  Run run;
  if (::access(kCli.c_str(), X_OK) != 0) {
    run.setup_error = "the CLI is not built: " + kCli + " (build target sessionturn_cli)";
    return run;
  }
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    run.setup_error = "pipe2 failed";
    return run;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  // The in-process runtime's sockets may lack O_CLOEXEC: a CLI holding the listening socket would
  // "connect" to it forever after the test process died.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  std::vector<std::string> argv_s = {kCli};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, kCli.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    run.setup_error = std::string("posix_spawn failed: ") + std::strerror(rc);
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    return run;
  }
  // Small inputs only: written at once, then EOF.
  if (!input.empty() && ::write(in[1], input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
    run.setup_error = "writing stdin failed";
  }
  if (!hold_stdin) ::close(in[1]);

  const auto deadline = std::chrono::steady_clock::now() + kCliRunLimit;
  bool out_open = true, err_open = true, interrupted = false;
  while ((out_open || err_open) && std::chrono::steady_clock::now() < deadline) {
    pollfd fds[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
    ::poll(fds, 2, 100);
    char buffer[8192];
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP))) {
      const ssize_t n = ::read(out[0], buffer, sizeof buffer);
      if (n <= 0) out_open = false;
      else run.out.append(buffer, static_cast<std::size_t>(n));
    }
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP))) {
      const ssize_t n = ::read(err[0], buffer, sizeof buffer);
      if (n <= 0) err_open = false;
      else run.err.append(buffer, static_cast<std::size_t>(n));
    }
    if (interrupt_when && !interrupted && interrupt_when(run.out)) {
      ::kill(pid, SIGINT);
      interrupted = true;
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  if (hold_stdin) ::close(in[1]);
  if (out_open || err_open) ::kill(pid, SIGKILL);  // a hang: the test fails below on the exit code
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (out_open || err_open) run.exit_code = -1;
  return run;
}

}  // namespace sessionturn::testing_support
