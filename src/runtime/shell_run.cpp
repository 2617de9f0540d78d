// `!` command turns, run as the real runtime's runShellCommand does, and the process spawning the
// command provider shares with them.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <asio.hpp>

#include "runtime/provider.hpp"
#include "runtime/text.hpp"

extern char** environ;

namespace sessionturn::runtime {
namespace {

constexpr std::size_t kChunkBytes = 32 * 1024;             // one tool.delta at most
constexpr std::size_t kMaxToolOutputBytes = 512 * 1024;    // streamed, and kept for tool.completed
// After the shell exits, how long output may still arrive from children holding the pipe (Go's
// exec.Cmd.WaitDelay in the runtime); then the pipe is closed and the tool completes.
constexpr std::chrono::milliseconds kWaitDelay{250};
constexpr std::chrono::milliseconds kReapPoll{5};

// Go's names for the signals a shell is commonly ended by (syscall.Signal.String()).
std::string SignalName(int sig) {
  switch (sig) {
    case SIGHUP: return "hangup";
    case SIGINT: return "interrupt";
    case SIGQUIT: return "quit";
    case SIGILL: return "illegal instruction";
    case SIGTRAP: return "trace/breakpoint trap";
    case SIGABRT: return "aborted";
    case SIGBUS: return "bus error";
    case SIGFPE: return "floating point exception";
    case SIGKILL: return "killed";
    case SIGUSR1: return "user defined signal 1";
    case SIGSEGV: return "segmentation fault";
    case SIGUSR2: return "user defined signal 2";
    case SIGPIPE: return "broken pipe";
    case SIGALRM: return "alarm clock";
    case SIGTERM: return "terminated";
    default: return "signal " + std::to_string(sig);
  }
}

class ShellRun : public TurnRun, public std::enable_shared_from_this<ShellRun> {
 public:
  ShellRun(std::shared_ptr<TurnHost> host, TurnInput input, std::string command)
      : host_(std::move(host)),
        input_(std::move(input)),
        command_(std::move(command)),
        tool_id_(input_.turn_id + "-shell"),
        out_(host_->io()),
        timer_(host_->io()),
        output_(kMaxToolOutputBytes, kToolOutputMarker) {}

  ~ShellRun() override { KillProcess(); }

  void Start() override {
    Event started = ToolEvent(event_type::kToolStarted);
    started.status = std::string(status_value::kRunning);
    host_->Emit(std::move(started));
    if (auto st = Spawn(); !st) {
      // The runtime reports a shell that could not start as a failed tool; the turn still completes.
      Event done = ToolEvent(event_type::kToolCompleted);
      done.output = st.error().message;
      done.status = std::string(status_value::kFailed);
      host_->Emit(std::move(done));
      host_->Done(std::string(status_value::kCompleted), {});
      return;
    }
    Read();
    Reap();
  }

  void Interrupt() override {
    interrupted_ = true;
    if (pid_ > 0) ::kill(-pid_, SIGKILL);  // the runtime cancels the command's context: SIGKILL to the group
  }

  void Kill() override {
    killed_ = true;
    KillProcess();
  }

  void InputResolved(const std::string&, bool, const std::map<std::string, std::vector<std::string>>&) override {}

 private:
  Event ToolEvent(std::string_view type) const {
    Event e;
    e.type = std::string(type);
    e.tool_id = tool_id_;
    e.tool_name = command_;
    return e;
  }

  Status Spawn() {
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int pipe_fds[2];
    if (devnull < 0 || ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      const std::string why = std::strerror(errno);
      if (devnull >= 0) ::close(devnull);
      return Fail(Errc::io_error, "fork/exec /bin/sh: " + why);
    }
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
    // stdout and stderr share one pipe, so their output interleaves as it was written.
    auto pid = SpawnInGroup({"/bin/sh", "-lc", command_}, devnull, pipe_fds[1], pipe_fds[1], env, input_.working_dir);
    ::close(devnull);
    ::close(pipe_fds[1]);
    if (!pid) {
      ::close(pipe_fds[0]);
      // Worded as Go's exec reports it ("fork/exec /bin/sh: no such file or directory").
      const std::string& m = pid.error().message;
      std::string why = m.substr(m.rfind(": ") == std::string::npos ? 0 : m.rfind(": ") + 2);
      if (!why.empty() && why[0] >= 'A' && why[0] <= 'Z') why[0] = static_cast<char>(why[0] - 'A' + 'a');
      return Fail(Errc::io_error, "fork/exec /bin/sh: " + why);
    }
    pid_ = *pid;
    out_.assign(pipe_fds[0]);
    return {};
  }

  void Read() {
    if (killed_ || eof_) return;
    if (host_->Paused()) {
      host_->WhenResumed([self = shared_from_this()] { self->Read(); });
      return;
    }
    out_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
      if (self->killed_) return;
      if (n > 0) self->Chunk(std::string_view(self->buf_.data(), n));
      if (ec) {
        self->eof_ = true;
        self->MaybeFinish();
        return;
      }
      self->Read();
    });
  }

  void Chunk(std::string_view chunk) {
    output_.Write(chunk);
    if (streamed_ >= kMaxToolOutputBytes) return;  // still collected, no longer streamed
    chunk = chunk.substr(0, kMaxToolOutputBytes - streamed_);
    streamed_ += chunk.size();
    Event delta = ToolEvent(event_type::kToolDelta);
    delta.output = std::string(chunk);
    delta.status = std::string(status_value::kRunning);
    host_->Emit(std::move(delta));
  }

  // Polls for the shell's exit (its output may end before or after it).
  void Reap() {
    if (killed_ || exited_) return;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0) {
      timer_.expires_after(kReapPoll);
      timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
        if (!ec) self->Reap();
      });
      return;
    }
    exited_ = true;
    pid_ = 0;
    status_ = r > 0 ? status : -1;
    if (eof_) return MaybeFinish();
    // Children may still hold the pipe: give them the wait delay, then stop reading.
    timer_.expires_after(kWaitDelay);
    timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (ec || self->killed_ || self->finished_) return;
      asio::error_code ignored;
      self->out_.cancel(ignored);
      self->eof_ = true;
      self->MaybeFinish();
    });
  }

  void MaybeFinish() {
    if (!eof_ || !exited_ || finished_ || killed_) return;
    finished_ = true;
    timer_.cancel();
    asio::error_code ignored;
    out_.close(ignored);
    std::string status(status_value::kCompleted);
    if (interrupted_) {
      status = std::string(status_value::kInterrupted);
    } else if (status_ < 0 || !WIFEXITED(status_) || WEXITSTATUS(status_) != 0) {
      status = std::string(status_value::kFailed);
      if (output_.empty()) {
        // What Go's exec reports for the exit, when the command said nothing itself.
        if (status_ < 0) output_.Write("wait: no child processes");
        else if (WIFEXITED(status_)) output_.Write("exit status " + std::to_string(WEXITSTATUS(status_)));
        else if (WIFSIGNALED(status_)) output_.Write("signal: " + SignalName(WTERMSIG(status_)));
      }
    }
    Event done = ToolEvent(event_type::kToolCompleted);
    done.output = output_.String();
    done.status = status;
    host_->Emit(std::move(done));
    // The turn completes even when the command failed; only an interrupt changes that.
    host_->Done(interrupted_ ? std::string(status_value::kInterrupted) : std::string(status_value::kCompleted), {});
  }

  void KillProcess() {
    timer_.cancel();
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = 0;
    }
    asio::error_code ignored;
    out_.close(ignored);
  }

  std::shared_ptr<TurnHost> host_;
  TurnInput input_;
  std::string command_;
  std::string tool_id_;
  asio::posix::stream_descriptor out_;
  asio::steady_timer timer_;
  std::array<char, kChunkBytes> buf_{};
  BoundedText output_;
  std::size_t streamed_ = 0;
  pid_t pid_ = 0;
  int status_ = 0;
  bool eof_ = false;
  bool exited_ = false;
  bool finished_ = false;
  bool interrupted_ = false;
  bool killed_ = false;
};

// A shell turn when shell commands are disabled: one failed tool event, then the turn fails.
class DisabledShellRun : public TurnRun {
 public:
  DisabledShellRun(std::shared_ptr<TurnHost> host, TurnInput input, std::string command)
      : host_(std::move(host)), input_(std::move(input)), command_(std::move(command)) {}
  void Start() override {
    asio::post(host_->io(), [host = host_, tool_id = input_.turn_id + "-shell", cmd = command_] {
      Event started;
      started.type = std::string(event_type::kToolStarted);
      started.tool_id = tool_id;
      started.tool_name = cmd;
      started.status = std::string(status_value::kRunning);
      host->Emit(std::move(started));
      Event done;
      done.type = std::string(event_type::kToolCompleted);
      done.tool_id = tool_id;
      done.tool_name = cmd;
      done.output = std::string(kShellDisabledText);
      done.status = std::string(status_value::kFailed);
      host->Emit(std::move(done));
      host->Done(std::string(status_value::kFailed), std::string(kShellDisabledText));
    });
  }
  void Interrupt() override {}
  void Kill() override {}
  void InputResolved(const std::string&, bool, const std::map<std::string, std::vector<std::string>>&) override {}

 private:
  std::shared_ptr<TurnHost> host_;
  TurnInput input_;
  std::string command_;
};

}  // namespace

Result<int> SpawnInGroup(const std::vector<std::string>& argv, int in, int out, int err,
                         const std::vector<std::string>& env, const std::string& cwd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in, 0);
  posix_spawn_file_actions_adddup2(&fa, out, 1);
  posix_spawn_file_actions_adddup2(&fa, err, 2);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  // Nothing else of ours: the runtime's sockets (Asio opens them without close-on-exec) must not reach
  // a command or an agent, whose tools could write into a client's connection or keep the listener alive.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  // The child starts with default dispositions and nothing blocked, whatever the host process did.
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> envs = env;
  std::vector<char*> cenv;
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    return Fail(Errc::io_error, "cannot start " + cmd + ": " + std::strerror(rc));
  }
  return static_cast<int>(pid);
}

std::shared_ptr<TurnRun> NewShellRun(std::shared_ptr<TurnHost> host, TurnInput input, std::string command) {
  return std::make_shared<ShellRun>(std::move(host), std::move(input), std::move(command));
}

std::shared_ptr<TurnRun> NewDisabledShellRun(std::shared_ptr<TurnHost> host, TurnInput input, std::string command) {
  return std::make_shared<DisabledShellRun>(std::move(host), std::move(input), std::move(command));
}

}  // namespace sessionturn::runtime
