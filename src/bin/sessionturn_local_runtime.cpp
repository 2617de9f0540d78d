// sessionturn-local-runtime: a Session runtime on this machine (docs/local-runtime.md).
//   serve  --socket PATH [--state-dir DIR] [--provider SPEC] [--allow-shell] [--session-name NAME]
//   client --socket PATH     (stdin/stdout <-> the socket, byte for byte, like the in-Pod client)
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sessionturn/testing/local_runtime.hpp"

namespace {

constexpr int kExitUsage = 2;  // bad flags, unreadable script: the caller must fix the command line

const char kUsage[] =
    "usage: sessionturn-local-runtime serve --socket PATH [--state-dir DIR] [--provider SPEC]\n"
    "                                       [--allow-shell] [--session-name NAME]\n"
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
    "  --allow-shell        run `!` commands from prompts with /bin/sh -lc, as the real runtime does\n"
    "                       (off: such a turn records a failed tool event)\n"
    "  --session-name NAME  the sessionName in runtime.status and SESSIONTURN_SESSION (default local)\n"
    "client  copies stdin to the socket and the socket to stdout; half-closes on stdin EOF and exits\n"
    "        when the runtime closes the connection.\n"
    "  --socket PATH        the socket to connect to\n"
    "\n"
    "exit status: 0 clean, 1 runtime or connection failure, 2 bad usage or an unusable provider spec\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "sessionturn-local-runtime: %s (try --help)\n", message.c_str());
  return kExitUsage;
}

struct Flags {
  std::string socket;
  std::string state_dir;
  std::string provider = "echo";
  std::string session_name = "local";
  bool allow_shell = false;
};

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
    else if (serve && name == "--session-name") err = take(f.session_name);
    else if (serve && name == "--allow-shell" && !has_value) f.allow_shell = true;
    else return "unknown flag " + args[i];
    if (!err.empty()) return err;
  }
  if (f.socket.empty()) return "--socket PATH is required";
  return {};
}

int Serve(const Flags& f) {
  // Signals are taken synchronously by sigwait below; blocking them first means the runtime's
  // threads inherit the mask and never see them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  sessionturn::testing::LocalRuntimeOptions o;
  o.socket_path = f.socket;
  o.state_dir = f.state_dir;
  o.provider = f.provider;
  o.allow_shell = f.allow_shell;
  o.session_name = f.session_name;
  auto rt = sessionturn::testing::LocalRuntime::Start(o);
  if (!rt) {
    std::fprintf(stderr, "sessionturn-local-runtime: %s\n", rt.error().message.c_str());
    return rt.error().code == sessionturn::Errc::invalid_argument ? kExitUsage : 1;
  }
  std::fprintf(stderr, "sessionturn-local-runtime: serving on %s (journal %s, provider %s)\n", f.socket.c_str(),
               (*rt)->journal_id().c_str(), f.provider.c_str());
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  (*rt)->Stop();
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
