// The unix-socket and child-process connections and their connectors (connection.hpp), on the
// shared engine in conn/stream_connection.hpp.
#include "sessionturn/connection.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <utility>

#include <asio.hpp>

#include "conn/operation_strand.hpp"
#include "conn/stream_connection.hpp"
#include "sigpipe.hpp"

extern char** environ;

namespace sessionturn {
namespace {

using conn::ErrorText;
using conn::StreamConnection;
using Clock = std::chrono::steady_clock;

// After SIGTERM, how long a child gets to exit before SIGKILL. Short: it has nothing to save, and a
// caller closing a connection should not wait for a stuck kubectl.
constexpr auto kKillGrace = std::chrono::milliseconds(1500);
// After the child's stdout ends, how long to wait for it to exit (to report its exit status) before
// killing it: a program that closes stdout and keeps running is no longer a usable stream.
constexpr auto kExitWait = std::chrono::seconds(3);
// After the child exited, how long to keep reading its stderr for the error message (a grandchild
// may hold stderr open forever).
constexpr auto kStderrDrain = std::chrono::milliseconds(300);
// Reaping is polled (a SIGCHLD handler would be process-global); the interval grows to this.
constexpr auto kReapPollMax = std::chrono::milliseconds(50);
// Bytes read from the child's stderr per read.
constexpr std::size_t kStderrChunkBytes = 1024;

// ---------------------------------------------------------------------------------------------
// Unix socket.

class UnixConnection final : public StreamConnection {
 public:
  UnixConnection(Context& context, Strand strand, std::string describe, ConnectionLimits limits)
      : StreamConnection(context, std::move(strand), std::move(describe), limits), socket_(strand_) {}

  // Connects to `path`, then calls `handler` (on the strand) with the error, if any. Called on the
  // strand (an operation connecting on its own strand), it connects and calls `handler` before it
  // returns; else from a job of its own.
  void Connect(const std::string& path, std::function<void(Status)> handler) {
    RunOnStrand([this, path, handler = std::move(handler)] {
      // Made by hand for SOCK_CLOEXEC: a child spawned by another thread meanwhile must not
      // inherit our socket (it would keep the runtime's end open after we close ours).
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        const int err = errno;
        handler(Fail(Errc::connection_failed, "connect " + Describe() + ": cannot create a socket: " + std::strerror(err)));
        return;
      }
      std::error_code ec;
      socket_.assign(asio::local::stream_protocol(), fd, ec);
      if (ec) {
        ::close(fd);
        handler(Fail(Errc::connection_failed, "connect " + Describe() + ": " + ErrorText(ec)));
        return;
      }
      // Reads are synchronous after a readiness wait (StreamConnection::OnReadable).
      if (socket_.non_blocking(true, ec); ec) {
        handler(Fail(Errc::connection_failed, "connect " + Describe() + ": " + ErrorText(ec)));
        return;
      }
      // A unix connect completes or fails at once (a full listen backlog is EAGAIN, not a wait): no
      // timer and no reactor round for it. An abstract name (leading NUL) counts its bytes exactly.
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path.data(), path.size());  // the connector checked it fits
      const bool abstract = !path.empty() && path[0] == '\0';
      const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (abstract ? 0 : 1));
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), length) == 0) {
        handler({});
      } else {
        handler(ConnectFailure(std::error_code(errno, std::system_category())));
      }
    });
  }

 protected:
  void WaitReadable(IoHandler handler) override {
    socket_.async_wait(asio::socket_base::wait_read,
                       [handler = std::move(handler)](const std::error_code& ec) { handler(ec, 0); });
  }
  std::size_t ReadNow(asio::mutable_buffer buffer, std::error_code& ec) override {
    return socket_.read_some(buffer, ec);
  }
  void WriteSome(const std::vector<asio::const_buffer>& buffers, IoHandler handler) override {
    // Asio sends with MSG_NOSIGNAL on Linux: a vanished peer is EPIPE here, not a SIGPIPE.
    socket_.async_write_some(buffers, std::move(handler));
  }
  std::size_t WriteNow(asio::const_buffer buffer, std::error_code& ec) override {
    return socket_.write_some(buffer, ec);  // non-blocking (set at connect)
  }
  void ShutDown() override {
    // close() alone: the descriptor is ours only (SOCK_CLOEXEC), so the runtime sees the end.
    std::error_code ignored;
    socket_.close(ignored);
  }
  // A full listen backlog (EAGAIN on a unix socket) or a kernel short of buffers is the runtime being
  // busy, not absent: said with its own code, so callers can retry it and not an absent runtime.
  Status ConnectFailure(const std::error_code& ec) const {
    const bool busy = ec == std::errc::resource_unavailable_try_again || ec == std::errc::operation_would_block ||
                      ec == std::errc::no_buffer_space;
    return Fail(busy ? Errc::unavailable : Errc::connection_failed, "connect " + Describe() + ": " + ErrorText(ec));
  }

  void OnReadEnded(const std::error_code& ec) override {
    if (ec == asio::error::eof) {
      EndStream(Error(Errc::connection_lost, Describe() + ": the runtime closed the connection"));
    } else {
      StreamConnection::OnReadEnded(ec);
    }
  }

 private:
  asio::local::stream_protocol::socket socket_;
};

class UnixConnector final : public Connector {
 public:
  UnixConnector(Context& context, std::string path, ConnectionLimits limits)
      : context_(context), path_(std::move(path)), limits_(limits) {}

  void AsyncConnect(ConnectHandler handler) override {
    Connect(asio::make_strand(context_.io()), std::move(handler));
  }
  void AsyncConnectOn(const OperationStrand& strand, ConnectHandler handler) override {
    Connect(strand.strand, std::move(handler));
  }
  bool ConnectsOnStrand() const override { return true; }

  std::string Describe() const override { return "unix:" + path_; }

 private:
  void Connect(StreamConnection::Strand strand, ConnectHandler handler) {
    if (path_.empty() || path_.size() >= sizeof(sockaddr_un::sun_path)) {
      std::string message = path_.empty() ? std::string("unix socket path is empty")
                                           : "unix socket path is too long (" + std::to_string(path_.size()) +
                                                 " bytes; the system limit is " +
                                                 std::to_string(sizeof(sockaddr_un::sun_path) - 1) + "): " + path_;
      asio::post(strand, [handler = std::move(handler), message] { handler(Fail(Errc::invalid_argument, message)); });
      return;
    }
    auto connection = std::make_shared<UnixConnection>(context_, std::move(strand), Describe(), limits_);
    connection->Connect(path_, [connection, handler = std::move(handler)](Status status) {
      if (!status) {
        handler(tl::unexpected<Error>(status.error()));
        return;
      }
      connection->Start();
      handler(std::shared_ptr<Connection>(std::make_shared<conn::ConnectionHandle>(connection)));
    });
  }

  Context& context_;
  std::string path_;
  ConnectionLimits limits_;
};

// ---------------------------------------------------------------------------------------------
// Child process.

std::string DescribeArgv(const std::vector<std::string>& argv) {
  std::string out = "exec:";
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (i > 0) out += ' ';
    out += argv[i];
  }
  return out;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + (name != nullptr ? std::string(" (") + name + ")" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

class ProcessConnection final : public StreamConnection {
 public:
  ProcessConnection(Context& context, std::string describe, ConnectionLimits limits, pid_t pid, int stdin_fd,
                    int stdout_fd, int stderr_fd)
      : StreamConnection(context, asio::make_strand(context.io()), std::move(describe), limits),
        pid_(pid),
        stdin_(strand_, stdin_fd),
        stdout_(strand_, stdout_fd),
        stderr_(strand_, stderr_fd),
        reap_timer_(strand_) {
    // Reads are synchronous after a readiness wait (StreamConnection::OnReadable).
    std::error_code ignored;
    stdout_.non_blocking(true, ignored);
  }

  ~ProcessConnection() override {
    // Reached with the child still running only when the Context stopped before the close finished:
    // no handler will run any more, so finish the job here. SIGKILL cannot be ignored; the wait is short.
    if (!reaped_) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }

  void StartAll() {
    Start();
    PostOnStrand([this] {
      stderr_buffer_.resize(kStderrChunkBytes);
      ReadStderr();
    });
  }

  std::string Diagnostics() const override {
    std::lock_guard<std::mutex> lock(diagnostics_mu_);
    return diagnostics_;
  }

 protected:
  void WaitReadable(IoHandler handler) override {
    stdout_.async_wait(asio::posix::stream_descriptor::wait_read,
                       [handler = std::move(handler)](const std::error_code& ec) { handler(ec, 0); });
  }
  std::size_t ReadNow(asio::mutable_buffer buffer, std::error_code& ec) override {
    return stdout_.read_some(buffer, ec);
  }
  void WriteSome(const std::vector<asio::const_buffer>& buffers, IoHandler handler) override {
    stdin_.async_write_some(buffers, std::move(handler));
  }

  void ShutDown() override {
    std::error_code ignored;
    // Closing stdin first is the polite stop: `kubectl exec` and the runtime's client mode end on EOF.
    stdin_.close(ignored);
    stdout_.close(ignored);
    stderr_.close(ignored);
    stopping_ = true;
    if (!reaped_) {
      // The child leads its own process group (SETPGROUP), so helpers it started go too.
      ::kill(-pid_, SIGTERM);
      ::kill(pid_, SIGTERM);
      term_sent_at_ = Clock::now();
      Tick();
    }
  }

  void OnReadEnded(const std::error_code& ec) override {
    stdout_ended_ = true;
    stdout_error_ = ec;
    stdout_ended_at_ = Clock::now();
    Tick();
  }

 private:
  void ReadStderr() {
    if (stderr_done_ || !stderr_.is_open()) return;
    stderr_.async_read_some(asio::buffer(stderr_buffer_),
                            OnStrand([this](const std::error_code& ec, std::size_t bytes) {
                              if (bytes > 0) AppendDiagnostics(std::string_view(stderr_buffer_.data(), bytes));
                              if (ec) {
                                stderr_done_ = true;
                                stderr_buffer_ = {};
                                Tick();
                                return;
                              }
                              ReadStderr();
                            }));
  }

  void AppendDiagnostics(std::string_view text) {
    std::lock_guard<std::mutex> lock(diagnostics_mu_);
    diagnostics_.append(text);
    if (diagnostics_.size() > kDiagnosticsTailBytes) {
      diagnostics_.erase(0, diagnostics_.size() - kDiagnosticsTailBytes);
    }
  }

  void TryReap() {
    if (reaped_) return;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      wait_status_ = status;
      reaped_at_ = Clock::now();
    } else if (r < 0 && errno == ECHILD) {
      // Someone else reaped it (a SIGCHLD handler of the application): nothing left to wait for.
      reaped_ = true;
      wait_status_ = -1;
      reaped_at_ = Clock::now();
    }
  }

  // One step of the child's end game, run after every relevant change and on a polling timer while
  // something is still awaited: reap, report the end of the stream, escalate to SIGKILL.
  void Tick() {
    TryReap();
    const auto now = Clock::now();
    if (stopping_) {
      if (reaped_) return;
      if (!kill_sent_ && now - term_sent_at_ >= kKillGrace) {
        ::kill(-pid_, SIGKILL);
        ::kill(pid_, SIGKILL);
        kill_sent_ = true;
      }
      Schedule();
      return;
    }
    if (!stdout_ended_) return;  // still streaming; reaping waits for the end of stdout
    if (reaped_) {
      if (stderr_done_ || now - reaped_at_ >= kStderrDrain) {
        EndStream(Error(Errc::connection_lost, Describe() + ": the process " + ExitText() + StderrSuffix()));
        return;
      }
    } else if (now - stdout_ended_at_ >= kExitWait) {
      const std::string how = stdout_error_ == asio::error::eof ? "closed its stdout" : "stdout failed (" + ErrorText(stdout_error_) + ")";
      EndStream(Error(Errc::connection_lost, Describe() + ": the process " + how + " but did not exit; stopped it" + StderrSuffix()));
      return;
    }
    Schedule();
  }

  std::string ExitText() const {
    if (wait_status_ < 0) return "exited (status unknown: reaped elsewhere)";
    return DescribeWaitStatus(wait_status_);
  }

  std::string StderrSuffix() const {
    std::string tail = Diagnostics();
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r' || tail.back() == ' ')) tail.pop_back();
    if (tail.empty()) return "";
    return "; stderr: " + tail;
  }

  void Schedule() {
    if (ticking_) return;
    ticking_ = true;
    poll_interval_ = poll_interval_.count() == 0 ? std::chrono::milliseconds(2)
                                                 : std::min(poll_interval_ * 2, std::chrono::milliseconds(kReapPollMax));
    reap_timer_.expires_after(poll_interval_);
    reap_timer_.async_wait([self = shared_from_this(), this](const std::error_code&) {
      ticking_ = false;
      Tick();
    });
  }

  const pid_t pid_;
  asio::posix::stream_descriptor stdin_;
  asio::posix::stream_descriptor stdout_;
  asio::posix::stream_descriptor stderr_;
  asio::steady_timer reap_timer_;
  std::vector<char> stderr_buffer_;
  mutable std::mutex diagnostics_mu_;  // Diagnostics() is called from any thread
  std::string diagnostics_;
  bool stderr_done_ = false;
  bool stdout_ended_ = false;
  std::error_code stdout_error_;
  bool stopping_ = false;
  bool kill_sent_ = false;
  bool reaped_ = false;
  bool ticking_ = false;
  int wait_status_ = 0;
  std::chrono::milliseconds poll_interval_{0};
  Clock::time_point stdout_ended_at_{};
  Clock::time_point reaped_at_{};
  Clock::time_point term_sent_at_{};
};

struct Pipe {
  int read = -1;
  int write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
  int TakeRead() { return std::exchange(read, -1); }
  int TakeWrite() { return std::exchange(write, -1); }
};

// Spawns argv with stdin/stdout/stderr on fresh pipes. Returns the pid; the parent's ends are left
// in the pipes for the caller to take.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& describe, Pipe& in, Pipe& out, Pipe& err) {
  for (Pipe* p : {&in, &out, &err}) {
    int fds[2];
    // O_CLOEXEC: our ends must not leak into this or any other child; dup2 below clears it on the
    // child's copies 0, 1 and 2.
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      const int e = errno;
      return Fail(Errc::connection_failed, describe + ": cannot create a pipe: " + std::strerror(e));
    }
    p->read = fds[0];
    p->write = fds[1];
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, in.read, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write, 1);
  posix_spawn_file_actions_adddup2(&actions, err.write, 2);
  // Like Python's close_fds: descriptors the application (or a library) opened without O_CLOEXEC
  // must not leak into the child, where they would keep sockets and pipes of others open.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &empty_mask);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // Its own process group: a terminal's Ctrl-C goes to us (we abandon the turn cleanly and then stop
  // the child), and closing can signal the whole group.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  // posix_spawnp searches PATH like a shell would, without a shell; glibc reports exec failures
  // (no such program, not executable) as its return value.
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return Fail(Errc::connection_failed,
                describe + ": cannot run \"" + argv[0] + "\": " + std::strerror(rc));
  }
  ::close(in.TakeRead());
  ::close(out.TakeWrite());
  ::close(err.TakeWrite());
  return pid;
}

class ProcessConnector final : public Connector {
 public:
  ProcessConnector(Context& context, std::vector<std::string> argv, ConnectionLimits limits)
      : context_(context), argv_(std::move(argv)), limits_(limits) {}

  void AsyncConnect(ConnectHandler handler) override {
    // Copies, not `this`: the connector may be gone when the job runs.
    context_.Post([&context = context_, argv = argv_, limits = limits_, handler = std::move(handler)] {
      handler(Connect(context, argv, limits));
    });
  }

  std::string Describe() const override { return DescribeArgv(argv_); }

 private:
  static Result<std::shared_ptr<Connection>> Connect(Context& context, const std::vector<std::string>& argv,
                                                     ConnectionLimits limits) {
    if (argv.empty() || argv[0].empty()) {
      return Fail(Errc::invalid_argument, "child-process connection: the command (argv) is empty");
    }
    IgnoreSigpipeOnce();
    const std::string describe = DescribeArgv(argv);
    Pipe in, out, err;
    auto pid = Spawn(argv, describe, in, out, err);
    if (!pid) return Fail(pid.error());
    auto connection = std::make_shared<ProcessConnection>(context, describe, limits, *pid, in.TakeWrite(),
                                                          out.TakeRead(), err.TakeRead());
    connection->StartAll();
    return std::shared_ptr<Connection>(std::make_shared<conn::ConnectionHandle>(connection));
  }

  Context& context_;
  std::vector<std::string> argv_;
  ConnectionLimits limits_;
};

}  // namespace

std::shared_ptr<Connector> MakeUnixConnector(Context& context, std::string path, ConnectionLimits limits) {
  return std::make_shared<UnixConnector>(context, std::move(path), limits);
}

std::shared_ptr<Connector> MakeProcessConnector(Context& context, std::vector<std::string> argv,
                                                ConnectionLimits limits) {
  return std::make_shared<ProcessConnector>(context, std::move(argv), limits);
}

// Writes to a pipe whose reader exited raise SIGPIPE, which kills the process by default. Pipes
// have no MSG_NOSIGNAL, and Asio may write from any worker, so the only reliable guard is to ignore
// the signal process-wide; done only if nobody installed a handler of their own. Children get the
// default back (posix_spawn SETSIGDEF).
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
        (current.sa_flags & SA_SIGINFO) == 0) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      ::sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

}  // namespace sessionturn
