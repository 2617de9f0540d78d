// sessionturn-local-runtime: a Session runtime on this machine (docs/local-runtime.md).
//   serve  --socket PATH [--state-dir DIR] [--provider SPEC] [--agent-bin PATH] [--allow-shell]
//          [--session-name NAME] [--idle-exit SECONDS] [--status-file FILE] [--detach --pid-file FILE]
//   client --socket PATH     (stdin/stdout <-> the socket, byte for byte, like the in-Pod client)
// The LocalBackend (docs/backends.md) runs `serve` detached, one per Session.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "backend/local_process.hpp"
#include "backend/local_store.hpp"
#include "sessionturn/testing/local_runtime.hpp"

namespace {

constexpr int kExitUsage = 2;  // bad flags, unreadable script: the caller must fix the command line

const char kUsage[] =
    "usage: sessionturn-local-runtime serve --socket PATH [--state-dir DIR] [--provider SPEC]\n"
    "                                       [--agent-bin PATH] [--allow-shell] [--session-name NAME]\n"
    "                                       [--idle-exit SECONDS]\n"
    "                                       [--status-file FILE] [--detach --pid-file FILE]\n"
    "       sessionturn-local-runtime client --socket PATH\n"
    "       sessionturn-local-runtime --help\n"
    "\n"
    "serve   runs a Session runtime on a unix socket until SIGTERM or SIGINT, then removes the socket.\n"
    "  --socket PATH        the socket to listen on (created 0600; its directory 0700)\n"
    "  --state-dir DIR      keep the journal in DIR/events.jsonl and reload it on start (default: memory only)\n"
    "  --provider SPEC      what answers turns (default echo):\n"
    "                         echo           replies \"echo #N: <prompt>\" in a few deltas, then a message\n"
    "                         script:FILE    steps from a JSON file (see docs/local-runtime.md)\n"
    "                         command:CMD    runs CMD with /bin/sh -c per turn, prompt on stdin,\n"
    "                                        each stdout line streamed as a delta\n"
    "                         flood:N        N tiny deltas as fast as readers take them (benchmarks)\n"
    "                         claude-code[:model=M,effort=E,permissions=skip|ask]\n"
    "                                        a Claude Code process kept between turns, resumed after a\n"
    "                                        restart; permissions=ask (the default) asks in the chat\n"
    "                                        before each tool use, skip passes\n"
    "                                        --dangerously-skip-permissions (docs/local-runtime.md)\n"
    "  --agent-bin PATH     the agent program of claude-code (default: claude, looked up on PATH)\n"
    "  --allow-shell        run `!` commands from prompts with /bin/sh -lc, as the real runtime does\n"
    "                       (off: such a turn records a failed tool event)\n"
    "  --session-name NAME  the sessionName in runtime.status and SESSIONTURN_SESSION (default local)\n"
    "  --idle-exit SECONDS  the idle policy: with no turn running or queued, no question open and no\n"
    "                       request or connection for SECONDS, record the suspension and exit 0\n"
    "                       (0, the default: never)\n"
    "  --status-file FILE   keep the runtime's own record in FILE (JSON, replaced atomically): pid,\n"
    "                       start, last turn, and how it ended (exit \"idle\" or \"stopped\"); a runtime\n"
    "                       that ended without one crashed (docs/backends.md)\n"
    "  --detach             fork into the background in a session of its own, closing every inherited\n"
    "                       descriptor but 0-2; the parent writes the runtime's pid to --pid-file and\n"
    "                       exits 0 at once, before the runtime has started\n"
    "  --pid-file FILE      where --detach writes the pid (required with it)\n"
    "client  copies stdin to the socket and the socket to stdout; half-closes on stdin EOF and exits\n"
    "        when the runtime closes the connection.\n"
    "  --socket PATH        the socket to connect to\n"
    "\n"
    "exit status: 0 clean (a signal, or the idle policy), 1 runtime or connection failure,\n"
    "             2 bad usage or an unusable provider spec\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "sessionturn-local-runtime: %s (try --help)\n", message.c_str());
  return kExitUsage;
}

struct Flags {
  std::string socket;
  std::string state_dir;
  std::string provider = "echo";
  std::string agent_bin;
  std::string session_name = "local";
  bool allow_shell = false;
  long idle_exit = 0;  // seconds; 0: never
  std::string status_file;
  bool detach = false;
  std::string pid_file;
};

// How often serve looks at the runtime's activity: a tenth of the idle period, within these bounds
// (the suspension comes at most this late; the last-activity record lags by as much).
constexpr auto kMinTick = std::chrono::milliseconds(50);
constexpr auto kMaxTick = std::chrono::milliseconds(500);
// An idle period longer than this is surely a mistake (and would overflow the arithmetic below).
constexpr long kMaxIdleExitSeconds = 10L * 365 * 24 * 3600;

// Parses "--flag VALUE" and "--flag=VALUE". Returns an error message, empty on success.
std::string ParseFlags(const std::vector<std::string>& args, bool serve, Flags& f) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos && name.rfind("--", 0) == 0) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto take = [&](std::string& out) -> std::string {
      if (!has_value) {
        if (i + 1 >= args.size()) return name + " needs a value";
        value = args[++i];
      }
      out = value;
      return {};
    };
    std::string err;
    if (name == "--socket") err = take(f.socket);
    else if (serve && name == "--state-dir") err = take(f.state_dir);
    else if (serve && name == "--provider") err = take(f.provider);
    else if (serve && name == "--agent-bin") err = take(f.agent_bin);
    else if (serve && name == "--session-name") err = take(f.session_name);
    else if (serve && name == "--allow-shell" && !has_value) f.allow_shell = true;
    else if (serve && name == "--status-file") err = take(f.status_file);
    else if (serve && name == "--pid-file") err = take(f.pid_file);
    else if (serve && name == "--detach" && !has_value) f.detach = true;
    else if (serve && name == "--idle-exit") {
      std::string text;
      err = take(text);
      char* end = nullptr;
      errno = 0;
      const long v = err.empty() ? std::strtol(text.c_str(), &end, 10) : 0;
      if (err.empty() && (text.empty() || *end != '\0' || errno != 0 || v < 0 || v > kMaxIdleExitSeconds))
        err = "--idle-exit needs a number of seconds (0 to " + std::to_string(kMaxIdleExitSeconds) + "), not " + text;
      f.idle_exit = v;
    } else return "unknown flag " + args[i];
    if (!err.empty()) return err;
  }
  if (f.socket.empty()) return "--socket PATH is required";
  if (f.detach && f.pid_file.empty()) return "--detach needs --pid-file FILE";
  return {};
}

// --detach: forks; the parent writes the child's pid and returns its exit status, the child returns
// -1 and goes on to serve in a session of its own (no controlling terminal, out of its starter's
// process group), with only stdin, stdout and stderr of what it was given.
int Detach(const Flags& f) {
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "sessionturn-local-runtime: cannot fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (pid > 0) {
    auto st = sessionturn::local::WriteFileAtomic(f.pid_file, std::to_string(pid) + "\n", false);
    if (!st) {
      std::fprintf(stderr, "sessionturn-local-runtime: %s\n", st.error().message.c_str());
      ::kill(pid, SIGKILL);
      return 1;
    }
    return 0;
  }
  ::setsid();
  // Whatever the starter leaked without close-on-exec (a socket, a pipe) must not live as long as us.
  ::close_range(3, ~0U, 0);
  return -1;
}

// The runtime's own record (--status-file), kept up to date as it serves.
class StatusRecord {
 public:
  explicit StatusRecord(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    // A restart keeps the last activity the previous run recorded (a backend may not have read it yet).
    if (auto prev = sessionturn::local::ReadRuntimeRecord(path_)) record_.last_activity = prev->last_activity;
    record_.pid = static_cast<long>(::getpid());
    record_.started = std::chrono::system_clock::now();
  }
  // Not fsynced: after a machine crash no runtime runs anyway, and a start should not wait for the disk.
  sessionturn::Status Started() { return Write(false); }
  void Activity(std::chrono::system_clock::time_point last_turn) {
    if (path_.empty() || last_turn == std::chrono::system_clock::time_point{} || last_turn == record_.last_activity)
      return;
    record_.last_activity = last_turn;
    if (auto st = Write(false); !st)
      std::fprintf(stderr, "sessionturn-local-runtime: warning: %s\n", st.error().message.c_str());
  }
  void Exited(std::string_view how) {
    if (path_.empty()) return;
    record_.exit = std::string(how);
    record_.exited = std::chrono::system_clock::now();
    if (auto st = Write(true); !st)
      std::fprintf(stderr, "sessionturn-local-runtime: warning: %s\n", st.error().message.c_str());
  }

 private:
  sessionturn::Status Write(bool durable) {
    if (path_.empty()) return {};
    return sessionturn::local::WriteRuntimeRecord(path_, record_, durable);
  }
  std::string path_;
  sessionturn::local::RuntimeRecord record_;
};

int Serve(const Flags& f) {
  if (f.detach) {
    if (int rc = Detach(f); rc >= 0) return rc;
  }
  // Signals are taken synchronously by sigtimedwait below; blocking them first means the runtime's
  // threads inherit the mask and never see them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  sessionturn::testing::LocalRuntimeOptions o;
  // A socket path longer than sun_path (a long state root) is bound through its directory's descriptor.
  auto socket = sessionturn::local::SocketPath::For(f.socket);
  if (!socket) {
    std::fprintf(stderr, "sessionturn-local-runtime: %s\n", socket.error().message.c_str());
    return 1;
  }
  o.socket_path = socket->path();
  o.state_dir = f.state_dir;
  o.provider = f.provider;
  o.agent_bin = f.agent_bin;
  o.allow_shell = f.allow_shell;
  // Info and above: what the runtime notices (dropped readers, the agent's stderr) belongs in its log.
  o.log_sink = [](sessionturn::LogLevel level, std::string_view message) {
    if (level >= sessionturn::LogLevel::info)
      std::fprintf(stderr, "sessionturn-local-runtime: %.*s\n", static_cast<int>(message.size()), message.data());
  };
  o.session_name = f.session_name;
  auto rt = sessionturn::testing::LocalRuntime::Start(o);
  if (!rt) {
    std::fprintf(stderr, "sessionturn-local-runtime: %s\n", rt.error().message.c_str());
    return rt.error().code == sessionturn::Errc::invalid_argument ? kExitUsage : 1;
  }
  StatusRecord status(f.status_file);
  if (auto st = status.Started(); !st) {
    std::fprintf(stderr, "sessionturn-local-runtime: %s\n", st.error().message.c_str());
    (*rt)->Stop();
    return 1;
  }
  std::fprintf(stderr, "sessionturn-local-runtime: serving on %s (journal %s, provider %s, pid %ld)\n",
               f.socket.c_str(), (*rt)->journal_id().c_str(), f.provider.c_str(), static_cast<long>(::getpid()));
  const std::chrono::milliseconds idle(f.idle_exit * 1000);
  const auto tick = f.idle_exit > 0 ? std::clamp<std::chrono::milliseconds>(idle / 10, kMinTick, kMaxTick) : kMaxTick;
  timespec wait{};
  wait.tv_sec = static_cast<time_t>(tick.count() / 1000);
  wait.tv_nsec = static_cast<long>((tick.count() % 1000) * 1000000);
  for (;;) {
    if (::sigtimedwait(&set, nullptr, &wait) > 0) break;
    const auto activity = (*rt)->Activity();
    status.Activity(activity.last_turn);
    if (f.idle_exit > 0 && !activity.busy && activity.idle_for >= idle && (*rt)->StopIfIdle(idle)) {
      status.Exited(sessionturn::local::kExitIdle);
      std::fprintf(stderr, "sessionturn-local-runtime: idle for %lds: suspended (the journal is kept)\n", f.idle_exit);
      return 0;
    }
  }
  status.Activity((*rt)->Activity().last_turn);
  (*rt)->Stop();
  status.Exited(sessionturn::local::kExitStopped);
  return 0;
}

bool WriteAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

int Client(const Flags& f) {
  ::signal(SIGPIPE, SIG_IGN);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (f.socket.size() >= sizeof(addr.sun_path)) return UsageError("socket path is too long: " + f.socket);
  std::strncpy(addr.sun_path, f.socket.c_str(), sizeof(addr.sun_path) - 1);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::fprintf(stderr, "sessionturn-local-runtime: cannot connect to %s: %s\n", f.socket.c_str(), std::strerror(errno));
    return 1;
  }
  // stdin -> socket on its own thread; stdin EOF half-closes so the runtime sees end of input.
  std::thread([fd] {
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(0, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !WriteAll(fd, buf, static_cast<std::size_t>(n))) break;
    }
    ::shutdown(fd, SHUT_WR);
  }).detach();
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return 0;  // the runtime closed the connection
    if (n < 0) {
      std::fprintf(stderr, "sessionturn-local-runtime: reading %s: %s\n", f.socket.c_str(), std::strerror(errno));
      return 1;
    }
    if (!WriteAll(1, buf, static_cast<std::size_t>(n))) return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return UsageError("a command is required: serve or client");
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  std::string cmd = args.front();
  args.erase(args.begin());
  if (cmd != "serve" && cmd != "client") return UsageError("unknown command " + cmd + ": use serve or client");
  Flags f;
  if (std::string err = ParseFlags(args, cmd == "serve", f); !err.empty()) return UsageError(err);
  return cmd == "serve" ? Serve(f) : Client(f);
}
