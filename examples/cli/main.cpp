// `sessionturn`: one turn, a watch or an interrupt against a Session runtime, from a shell, and the
// Kelos Sessions of a cluster (list, get, suspend, resume, delete, wait). A thin layer over driver.hpp,
// sessions.hpp and session_driver.hpp: parse arguments, stream the reply, ask questions on the
// terminal, map the outcome to an exit code a script can branch on.
#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sessionturn/connection.hpp>
#include <sessionturn/context.hpp>
#include <sessionturn/driver.hpp>
#include <sessionturn/error.hpp>
#include <sessionturn/kube.hpp>
#include <sessionturn/protocol.hpp>
#include <sessionturn/session_driver.hpp>
#include <sessionturn/sessions.hpp>

namespace st = sessionturn;
using namespace std::chrono_literals;

namespace {

// Exit codes (the CLI's contract with scripts).
constexpr int kExitCompleted = 0;
constexpr int kExitTurnFailed = 1;   // failed, interrupted, removed (and cancelled by Ctrl-C)
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;  // could not reach or lost the runtime
constexpr int kExitTimeout = 4;
constexpr int kExitRejected = 5;

// How often the live status line is redrawn: often enough for a ticking clock, rarely enough to be
// cheap over a slow terminal link.
constexpr auto kStatusRefresh = 250ms;
// A prompt read from stdin larger than this is almost certainly a mistake (a binary piped in).
constexpr std::size_t kMaxPromptBytes = 4u << 20;

// How long `turn`, `watch` and `interrupt` with --session wait for the Session by default (PROTOCOL.md §6:
// a Session resuming from idle needs its Pod scheduled and its workspace mounted).
constexpr double kDefaultWaitSeconds = 600;

constexpr const char* kUsage = R"(usage:
  sessionturn turn (--socket PATH | --session NAME [KUBE] | --exec CMD [ARG...]) [options] PROMPT
  sessionturn watch (--socket PATH | --session NAME [KUBE] | --exec CMD [ARG...]) [--since ID] [--json]
  sessionturn interrupt (--socket PATH | --session NAME [KUBE] | --exec CMD [ARG...])
  sessionturn sessions list [KUBE] [--json]
  sessionturn sessions (get | suspend | resume | delete) NAME [KUBE] [--json]
  sessionturn wait NAME [KUBE] [--timeout SECONDS]
  sessionturn --help

Connection (one of):
  --socket PATH        the runtime's unix socket
  --session NAME       the Kelos Session NAME in a cluster: wait until it is ready (waking it when its
                       idle policy suspended it), then talk to its Pod over pods/exec
  --exec CMD [ARG...]  run CMD (no shell) and talk over its stdin/stdout, e.g.
                       --exec kubectl exec -i POD -c kelos-agent -- /kelos/bin/kelos-session-runtime client
                       --exec takes every argument after it, so put it last.

KUBE (with --session, sessions and wait):
  -n, --namespace NS   the Session's namespace (default: the context's, else "default")
  --kubeconfig FILE    kubeconfig file(s), colon-separated (default: $KUBECONFIG, else ~/.kube/config,
                       else the in-cluster service account)
  --context NAME       the kubeconfig context (default: its current-context)
  --wait-timeout SECONDS
                       with --session: how long to wait for the Session to be ready (default 600)

turn options:
  --timeout SECONDS    bound for the whole turn (default 3600); then the turn is abandoned
  --questions MODE     decline (default) or ask: show each question with numbered options and read
                       the answer (a number, numbers for multi-select, or free text; an empty line
                       declines) from stdin, or from the terminal when PROMPT is '-'
  --no-reconnect       fail instead of reconnecting when the stream drops
  --allow-commands     let a prompt starting with '!' or '/goal' reach the runtime as a command
  --json               print one JSON object at the end instead of streaming the reply
  PROMPT               the prompt; '-' reads it from stdin

watch options:
  --since ID           start after event ID (default: from the start of the retained journal)
  --json               print each event as its JSON line

sessions:
  list                 a table: NAME PHASE POD AGE-or-MESSAGE (the status message when there is one)
  get NAME             the Session's fields; suspend NAME / resume NAME set / remove spec.suspend
                       (resume does not wake a Session its idle policy suspended: a turn or wait does);
                       delete NAME
  --json               the raw objects as the API server returned them

wait options:
  --timeout SECONDS    how long to wait (default 600); prints the Pod name once the Session is ready,
                       waking it when its idle policy suspended it

Exit codes: 0 completed; 1 the turn failed, was interrupted or removed (sessions: the API refused,
e.g. no such Session); 2 usage error or a bad kubeconfig; 3 could not reach or lost the runtime or
the cluster, or the Session failed or is suspended by its owner; 4 timed out (a turn, or waiting
for the Session); 5 rejected by the runtime.
)";

struct UsageError {
  std::string message;
};

// An outcome decided deep inside a command (a bad kubeconfig, a Session that failed): main prints
// "sessionturn: <message>" and exits with `code`.
struct ExitWith {
  int code;
  std::string message;
};

struct Args {
  std::string command;  // turn | watch | interrupt | sessions | wait | help
  std::string socket;
  std::string session;  // --session NAME
  std::string sessions_action;  // list | get | suspend | resume | delete
  std::string name;     // NAME of `sessions get ...` and `wait`
  std::string namespace_name;
  std::string kubeconfig;
  std::string kube_context;
  double wait_timeout_seconds = kDefaultWaitSeconds;
  bool kube_options_given = false;
  std::vector<std::string> exec;
  double timeout_seconds = 0;  // 0: the driver's default
  bool ask = false;
  bool no_reconnect = false;
  bool allow_commands = false;
  bool json = false;
  std::optional<std::int64_t> since;
  std::optional<std::string> prompt;
};

double ParsePositive(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end == nullptr || *end != '\0' || errno != 0 || !(v > 0) || v > 1e7) {
    throw UsageError{flag + " wants a positive number of seconds, not \"" + value + "\""};
  }
  return v;
}

std::int64_t ParseEventId(const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < 0) {
    throw UsageError{"--since wants an event id (a non-negative integer), not \"" + value + "\""};
  }
  return v;
}

Args ParseArgs(int argc, char** argv) {
  Args args;
  std::vector<std::string> rest(argv + 1, argv + argc);
  if (rest.empty()) throw UsageError{"no command given"};
  if (rest[0] == "--help" || rest[0] == "-h" || rest[0] == "help") {
    args.command = "help";
    return args;
  }
  args.command = rest[0];
  if (args.command != "turn" && args.command != "watch" && args.command != "interrupt" &&
      args.command != "sessions" && args.command != "wait") {
    throw UsageError{"unknown command \"" + args.command +
                     "\" (expected turn, watch, interrupt, sessions or wait)"};
  }
  const bool is_turn = args.command == "turn";
  const bool is_watch = args.command == "watch";
  const bool is_sessions = args.command == "sessions";
  const bool is_wait = args.command == "wait";
  const bool is_runtime = !is_sessions && !is_wait;  // turn, watch, interrupt: talk to a runtime
  std::size_t first = 1;
  if (is_sessions) {
    if (rest.size() < 2) throw UsageError{"`sessionturn sessions` needs list, get, suspend, resume or delete"};
    args.sessions_action = rest[1];
    if (args.sessions_action == "--help" || args.sessions_action == "-h") {
      args.command = "help";
      return args;
    }
    if (args.sessions_action != "list" && args.sessions_action != "get" && args.sessions_action != "suspend" &&
        args.sessions_action != "resume" && args.sessions_action != "delete") {
      throw UsageError{"unknown sessions action \"" + args.sessions_action +
                       "\" (expected list, get, suspend, resume or delete)"};
    }
    first = 2;
  }
  for (std::size_t i = first; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (i + 1 >= rest.size()) throw UsageError{flag + " needs a value"};
      return rest[++i];
    };
    auto only_for = [&](bool allowed, const char* which) {
      if (!allowed) throw UsageError{a + " is only for `sessionturn " + which + "`"};
    };
    if (a == "--help" || a == "-h") {
      args.command = "help";
      return args;
    } else if (a == "--socket") {
      only_for(is_runtime, "turn`, `sessionturn watch` or `sessionturn interrupt");
      args.socket = value(a);
      if (args.socket.empty()) throw UsageError{"--socket needs a path"};
    } else if (a == "--session") {
      only_for(is_runtime, "turn`, `sessionturn watch` or `sessionturn interrupt");
      args.session = value(a);
      if (args.session.empty()) throw UsageError{"--session needs a Session name"};
    } else if (a == "-n" || a == "--namespace") {
      args.namespace_name = value(a);
      if (args.namespace_name.empty()) throw UsageError{a + " needs a namespace"};
      args.kube_options_given = true;
    } else if (a == "--kubeconfig") {
      args.kubeconfig = value(a);
      if (args.kubeconfig.empty()) throw UsageError{"--kubeconfig needs a file"};
      args.kube_options_given = true;
    } else if (a == "--context") {
      args.kube_context = value(a);
      if (args.kube_context.empty()) throw UsageError{"--context needs a context name"};
      args.kube_options_given = true;
    } else if (a == "--wait-timeout") {
      only_for(is_runtime, "turn`, `sessionturn watch` or `sessionturn interrupt` with --session");
      args.wait_timeout_seconds = ParsePositive(a, value(a));
      args.kube_options_given = true;
    } else if (a == "--exec") {
      only_for(is_runtime, "turn`, `sessionturn watch` or `sessionturn interrupt");
      args.exec.assign(rest.begin() + static_cast<std::ptrdiff_t>(i) + 1, rest.end());
      if (args.exec.empty()) throw UsageError{"--exec needs a command"};
      break;
    } else if (a == "--timeout") {
      only_for(is_turn || is_wait, "turn` or `sessionturn wait");
      if (is_wait) args.wait_timeout_seconds = ParsePositive(a, value(a));
      else args.timeout_seconds = ParsePositive(a, value(a));
    } else if (a == "--questions") {
      only_for(is_turn, "turn");
      const std::string mode = value(a);
      if (mode == "ask") args.ask = true;
      else if (mode == "decline") args.ask = false;
      else throw UsageError{"--questions wants decline or ask, not \"" + mode + "\""};
    } else if (a == "--no-reconnect") {
      only_for(is_turn, "turn");
      args.no_reconnect = true;
    } else if (a == "--allow-commands") {
      only_for(is_turn, "turn");
      args.allow_commands = true;
    } else if (a == "--json") {
      only_for(is_turn || is_watch || is_sessions, "turn`, `sessionturn watch` or `sessionturn sessions");
      args.json = true;
    } else if (a == "--since") {
      only_for(is_watch, "watch");
      args.since = ParseEventId(value(a));
    } else if (a == "--" && is_turn) {
      // Everything after `--` is the prompt, so a prompt may start with '-'.
      if (i + 1 < rest.size()) {
        if (args.prompt || i + 2 < rest.size()) throw UsageError{"more than one PROMPT given (quote the prompt as one argument)"};
        args.prompt = rest[i + 1];
      }
      break;
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      throw UsageError{"unknown option " + a};
    } else if ((is_wait || (is_sessions && args.sessions_action != "list")) && args.name.empty()) {
      args.name = a;
    } else {
      if (!is_turn) throw UsageError{"unexpected argument \"" + a + "\""};
      if (args.prompt) throw UsageError{"more than one PROMPT given (quote the prompt as one argument)"};
      args.prompt = a;
    }
  }
  if (!is_runtime) {
    if (args.name.empty() && (is_wait || args.sessions_action != "list")) {
      throw UsageError{std::string("`sessionturn ") + (is_wait ? "wait" : "sessions " + args.sessions_action) +
                       "` needs a Session NAME"};
    }
    return args;
  }
  const int connections = int(!args.socket.empty()) + int(!args.exec.empty()) + int(!args.session.empty());
  if (connections == 0) throw UsageError{"give --socket PATH, --session NAME or --exec CMD"};
  if (connections > 1) throw UsageError{"give one of --socket, --session and --exec, not several"};
  if (args.kube_options_given && args.session.empty()) {
    throw UsageError{"-n, --kubeconfig, --context and --wait-timeout go with --session"};
  }
  if (is_turn && !args.prompt) throw UsageError{"no PROMPT given ('-' reads it from stdin)"};
  return args;
}

// ---- Signals ---------------------------------------------------------------------------------------

// SIGINT/SIGTERM are blocked in every thread and taken by one watcher thread with sigwait, so the
// handling is ordinary code (cancel the turn, stop the watch) rather than async-signal-safe contortions.
std::atomic<int> g_signals{0};

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A reader that went away (`sessionturn turn ... | head`) is an EPIPE on write, not death.
  signal(SIGPIPE, SIG_IGN);
}

// What the first signal does. Empty (while the CLI waits for a Session, which has no cancellation of
// its own): end the process at once with kExitTurnFailed, as a cancelled turn does.
std::mutex g_signal_mu;
std::function<void()> g_on_first_signal;

// The first signal runs the handler set with SetSignalHandler; a second one exits at once (the user
// insists). Started once, from main, after BlockTerminationSignals.
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

// ---- Output helpers ------------------------------------------------------------------------------

std::string ErrorKindName(st::Errc code) { return std::string(st::ToString(code)); }

int ExitCodeFor(const st::Error& error) {
  switch (error.code) {
    case st::Errc::invalid_argument: return kExitUsage;
    case st::Errc::connection_failed:
    case st::Errc::connection_lost: return kExitUnreachable;
    case st::Errc::timeout: return kExitTimeout;
    case st::Errc::rejected: return kExitRejected;
    default: return kExitTurnFailed;
  }
}

// The one-line live status on a terminal's stderr. Drawn only while stdout's cursor is at the start
// of a line (or stdout is not this terminal), so it never tears the streamed reply.
class StatusLine {
 public:
  explicit StatusLine(bool enabled) : enabled_(enabled), start_(std::chrono::steady_clock::now()) {}

  void Set(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = std::move(what);
  }
  // Runs `write` (which prints reply text) with the status line out of the way.
  template <typename F>
  void WriteOutput(F&& write, bool ends_line) {
    std::lock_guard<std::mutex> lock(mu_);
    ClearLocked();
    write();
    at_line_start_ = ends_line;
  }
  void Draw() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!enabled_ || stopped_) return;
    if (stdout_is_tty_ && !at_line_start_) return;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "\r\033[K[%.1fs] %s", elapsed, what_.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    ClearLocked();
    stopped_ = true;
  }
  bool enabled() const { return enabled_; }

 private:
  void ClearLocked() {
    if (!drawn_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }

  const bool enabled_;
  const bool stdout_is_tty_ = isatty(STDOUT_FILENO) == 1;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::string what_ = "connecting";
  bool drawn_ = false;
  bool at_line_start_ = true;
  bool stopped_ = false;
};

std::string ReadAllStdin() {
  std::string text;
  char buffer[65536];
  for (;;) {
    const std::size_t n = std::fread(buffer, 1, sizeof buffer, stdin);
    if (n == 0) break;
    text.append(buffer, n);
    if (text.size() > kMaxPromptBytes) {
      throw UsageError{"the prompt on stdin is larger than " + std::to_string(kMaxPromptBytes >> 20) + " MiB"};
    }
  }
  return text;
}

// ---- Questions on the terminal ----------------------------------------------------------------------

// A question handed from a Context worker (which must not block) to the main thread (which may).
struct PendingQuestion {
  st::Event event;
  st::Responder responder;
};

std::string Trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

// Turns terminal echo off while a secret answer is typed (when `fd` is a terminal at all).
class EchoOff {
 public:
  EchoOff(int fd, bool active) : fd_(fd) {
    if (!active || fd_ < 0 || isatty(fd_) != 1 || tcgetattr(fd_, &saved_) != 0) return;
    termios quiet = saved_;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    on_ = tcsetattr(fd_, TCSANOW, &quiet) == 0;
  }
  ~EchoOff() {
    if (!on_) return;
    tcsetattr(fd_, TCSANOW, &saved_);
    std::fputc('\n', stderr);
  }
  EchoOff(const EchoOff&) = delete;
  EchoOff& operator=(const EchoOff&) = delete;

 private:
  int fd_;
  termios saved_{};
  bool on_ = false;
};

// Asks every question of one input.requested on `in` (the terminal or stdin) and answers or
// declines through the responder. An empty answer (or end of input) declines the whole request:
// the runtime resolves an input only once every question has an answer.
// Reads one line from `fd` (unbuffered, so nothing else's buffering steals input). Gives up (empty
// optional) at end of input or as soon as `abandon()` is true: the turn may end (timeout, Ctrl-C,
// the runtime resolving the question) while the user is still typing.
std::optional<std::string> ReadAnswerLine(int fd, std::string& buffer, const std::function<bool()>& abandon) {
  for (;;) {
    const auto nl = buffer.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    if (abandon()) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(kStatusRefresh.count()));
    if (ready < 0 && errno != EINTR) return std::nullopt;
    if (ready <= 0) continue;
    char chunk[1024];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (buffer.empty()) return std::nullopt;
      std::string line = std::move(buffer);  // a last line without its newline
      buffer.clear();
      return line;
    }
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

void AskQuestions(const PendingQuestion& pending, int in_fd, std::string& in_buffer,
                  const std::function<bool()>& abandon, StatusLine& status) {
  status.WriteOutput([] {}, true);
  std::map<std::string, std::vector<std::string>> answers;
  for (const st::InputQuestion& q : pending.event.questions) {
    std::fprintf(stderr, "\n%s%s%s\n", q.header.empty() ? "" : q.header.c_str(), q.header.empty() ? "" : ": ",
                 q.question.c_str());
    for (std::size_t i = 0; i < q.options.size(); ++i) {
      std::fprintf(stderr, "  %zu) %s%s%s\n", i + 1, q.options[i].label.c_str(),
                   q.options[i].description.empty() ? "" : " - ", q.options[i].description.c_str());
    }
    if (q.options.empty()) {
      std::fprintf(stderr, "Your answer (empty line declines): ");
    } else if (q.multi_select) {
      std::fprintf(stderr, "Numbers separated by commas, or your own answer (empty line declines): ");
    } else {
      std::fprintf(stderr, "A number, or your own answer (empty line declines): ");
    }
    std::fflush(stderr);
    std::optional<std::string> got;
    {
      EchoOff echo_off(in_fd, q.secret);
      got = ReadAnswerLine(in_fd, in_buffer, abandon);
    }
    if (abandon()) {
      std::fprintf(stderr, "\n");
      return;  // the turn is over; nothing to answer any more
    }
    std::string line = got.value_or("");
    if (!got || Trim(line).empty()) {
      std::fprintf(stderr, "(declined)\n");
      pending.responder.Decline();
      return;
    }
    line = Trim(line);
    std::vector<std::string> chosen;
    // Numbers pick options; anything else is free text, taken as it is.
    bool all_numbers = !q.options.empty();
    std::stringstream parts(line);
    std::string part;
    std::vector<std::string> labels;
    while (all_numbers && std::getline(parts, part, ',')) {
      part = Trim(part);
      char* end = nullptr;
      const long n = std::strtol(part.c_str(), &end, 10);
      if (part.empty() || *end != '\0' || n < 1 || static_cast<std::size_t>(n) > q.options.size()) {
        all_numbers = false;
        break;
      }
      labels.push_back(q.options[static_cast<std::size_t>(n) - 1].label);
    }
    if (all_numbers && (q.multi_select || labels.size() == 1)) {
      chosen = labels;
    } else {
      chosen = {line};
    }
    answers[q.id] = chosen;
  }
  pending.responder.Answer(std::move(answers));
}

// ---- Sessions in a cluster ---------------------------------------------------------------------------

// A kubeconfig that cannot be used is the user's to fix, like a usage error: the loader's message
// names the file, the context and the field.
st::KubeConfig LoadKube(const Args& args) {
  st::KubeConfigOptions options;
  options.kubeconfig = args.kubeconfig;
  options.context = args.kube_context;
  options.namespace_name = args.namespace_name;
  auto kube = st::KubeConfig::Load(options);
  if (!kube) throw ExitWith{kExitUsage, kube.error().ToString()};
  return std::move(*kube);
}

// Exit codes for errors from the cluster: a Session that failed or that its owner suspended, and a
// cluster we cannot reach or may not use, are "could not reach the runtime"; a refusal that names a
// thing (no such Session, a conflict) is a failed operation.
int KubeExitCode(const st::Error& error) {
  switch (error.code) {
    case st::Errc::invalid_argument: return kExitUsage;
    case st::Errc::timeout: return kExitTimeout;
    case st::Errc::failed:
    case st::Errc::unavailable:
    case st::Errc::connection_failed:
    case st::Errc::connection_lost:
    case st::Errc::unauthorized:
    case st::Errc::forbidden: return kExitUnreachable;
    default: return kExitTurnFailed;
  }
}

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

struct WaitedSession {
  st::KubeConfig kube;
  std::string namespace_name;
  st::ReadySession ready;
};

// SessionClient::WaitReady with progress: a live status line when stderr is a terminal, else one
// plain line per change of what is awaited (nothing at all when the Session is ready at once).
// Throws ExitWith for every outcome but ready.
WaitedSession WaitForSession(const Args& args, const std::string& name) {
  WaitedSession out{LoadKube(args), {}, {}};
  out.namespace_name = out.kube.Namespace();
  const std::string who = "Session " + out.namespace_name + "/" + name;
  const bool stderr_tty = isatty(STDERR_FILENO) == 1;
  StatusLine status(stderr_tty);
  status.Set("waiting for " + who + "\u2026");

  std::mutex mu;
  std::condition_variable cv;
  std::optional<st::Result<st::ReadySession>> outcome;
  bool resuming = false;       // touched only by the waiting thread
  std::string last_printed;    // likewise
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
  const auto deadline =
      std::chrono::steady_clock::now() +
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
  if (!*outcome) throw ExitWith{KubeExitCode(outcome->error()), outcome->error().ToString()};
  out.ready = std::move(**outcome);
  return out;
}

// ---- Commands ------------------------------------------------------------------------------------

std::shared_ptr<st::Connector> MakeConnector(st::Context& context, const Args& args) {
  if (!args.exec.empty()) return st::MakeProcessConnector(context, args.exec);
  if (!args.session.empty()) {
    WaitedSession waited = WaitForSession(args, args.session);
    // Acknowledges an idle resume after the first history.end (PROTOCOL.md §5).
    return st::MakeSessionConnector(context, waited.kube, waited.namespace_name, args.session, waited.ready);
  }
  return st::MakeUnixConnector(context, args.socket);
}

std::string ConnectionName(const Args& args) {
  if (!args.session.empty()) return "Session " + args.session;
  return args.exec.empty() ? "unix:" + args.socket : args.exec[0];
}

// `ref`: where the turn stood when it ended without a result (timeout, cancel), so a script can
// follow it later (`watch --since`), or find it in the journal.
void PrintJsonResult(const std::optional<st::TurnResult>& result, const std::optional<st::Error>& error,
                     const st::TurnRef& ref) {
  st::Json out = st::Json::object();
  if (result) {
    out["requestId"] = result->request_id;
    out["turnId"] = result->turn_id;
    out["lastEventId"] = result->last_event_id;
    out["journalId"] = result->journal_id;
    out["status"] = std::string(st::ToString(result->status));
    out["text"] = result->text;
    out["message"] = result->error_message;
    out["declinedQuestions"] = result->questions_declined;
    out["answeredQuestions"] = result->questions_answered;
    out["shared"] = result->shared;
    out["reconnects"] = result->reconnects;
  } else {
    // No turn result: the status is the kind of error, so one JSON shape serves every outcome. The
    // turn id stays once the runtime accepted the prompt: the turn may still be in its journal.
    out["requestId"] = ref.request_id;
    out["turnId"] = ref.turn_id;
    out["lastEventId"] = ref.last_event_id;
    out["journalId"] = ref.journal_id;
    out["status"] = error->code == st::Errc::timeout ? "timeout"
                    : error->code == st::Errc::rejected ? "rejected"
                                                        : "error";
    out["error"] = ErrorKindName(error->code);
    out["text"] = "";
    out["message"] = error->message;
    out["declinedQuestions"] = 0;
    out["answeredQuestions"] = 0;
    out["shared"] = false;
    out["reconnects"] = 0;
  }
  // error_handler_t::replace: a provider's invalid UTF-8 must not turn the result into an exception.
  std::cout << out.dump(-1, ' ', false, st::Json::error_handler_t::replace) << std::endl;
}

int RunTurn(const Args& args) {
  std::string prompt = *args.prompt;
  if (prompt == "-") prompt = ReadAllStdin();
  if (Trim(prompt).empty()) throw UsageError{"the prompt is empty"};

  const bool stderr_tty = isatty(STDERR_FILENO) == 1;
  StatusLine status(!args.json && stderr_tty);

  st::ContextOptions context_options;
  context_options.threads = 1;
  st::Context context(context_options);
  st::Driver driver(context, MakeConnector(context, args));

  // Shared with the detached signal watcher, which may outlive this frame.
  auto cancel = std::make_shared<st::CancellationSource>();
  SetSignalHandler([cancel] { cancel->Cancel(); });

  std::mutex mu;
  std::condition_variable cv;
  std::deque<PendingQuestion> questions;
  std::optional<st::Result<st::TurnResult>> outcome;

  bool streamed_any = false;  // touched only by the event callback (one worker, in order)
  bool accepted = false;
  bool started = false;
  st::TurnOptions options;
  if (args.timeout_seconds > 0) {
    options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(args.timeout_seconds * 1000));
  }
  options.cancel = cancel->Token();
  options.reconnect.enabled = !args.no_reconnect;
  options.allow_commands = args.allow_commands;
  options.request_id = st::NewRequestId();
  st::TurnRef ref;  // advanced by the callbacks below (one worker, in order); read after the turn ended
  ref.request_id = options.request_id;
  options.on_accepted = [&](const st::TurnRef& accepted_ref) { ref = accepted_ref; };
  status.Set("connecting to " + ConnectionName(args));
  options.on_event = [&](const st::Event& e) {
    if (e.id > ref.last_event_id) ref.last_event_id = e.id;
    if (e.Is(st::event_type::kUserMessage) || e.Is(st::event_type::kUserMessageUpdated)) {
      if (!accepted) {
        accepted = true;
        if (!started) status.Set("queued behind another turn");
      }
    } else if (e.Is(st::event_type::kTurnStarted)) {
      started = true;
      status.Set("working");
    } else if (e.Is(st::event_type::kToolStarted)) {
      status.Set("running tool " + (e.tool_name.empty() ? e.tool_id : e.tool_name));
    } else if (e.Is(st::event_type::kToolCompleted)) {
      status.Set("working");
    } else if (e.Is(st::event_type::kInputRequested)) {
      status.Set("waiting for an answer");
    } else if (e.Is(st::event_type::kInputResolved)) {
      status.Set("working");
    } else if (e.Is(st::event_type::kAssistantDelta) && !args.json && !e.text.empty()) {
      streamed_any = true;
      status.WriteOutput(
          [&] {
            std::fwrite(e.text.data(), 1, e.text.size(), stdout);
            std::fflush(stdout);
          },
          e.text.back() == '\n');
    }
  };
  if (args.ask) {
    options.questions = st::QuestionPolicy::ask;
    options.on_question = [&](const st::Event& e, st::Responder responder) {
      std::lock_guard<std::mutex> lock(mu);
      questions.push_back(PendingQuestion{e, std::move(responder)});
      cv.notify_all();
    };
  }

  driver.AsyncSubmitTurn(prompt, options, [&](st::Result<st::TurnResult> r) {
    std::lock_guard<std::mutex> lock(mu);
    outcome = std::move(r);
    cv.notify_all();
  });

  // Answers come from the terminal when stdin carried the prompt, else from stdin (so a script can
  // pipe them in).
  int answers_fd = STDIN_FILENO;
  if (args.ask && *args.prompt == "-") answers_fd = ::open("/dev/tty", O_RDONLY | O_CLOEXEC);  // -1: decline all
  std::string answers_buffer;
  auto turn_over = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return outcome.has_value();
  };

  // The main thread waits for the outcome, asks questions and keeps the status line ticking.
  {
    std::unique_lock<std::mutex> lock(mu);
    while (!outcome) {
      if (!questions.empty()) {
        PendingQuestion q = std::move(questions.front());
        questions.pop_front();
        lock.unlock();
        if (answers_fd >= 0) {
          AskQuestions(q, answers_fd, answers_buffer, turn_over, status);
        } else {
          q.responder.Decline();
        }
        lock.lock();
        continue;
      }
      cv.wait_for(lock, kStatusRefresh);
      lock.unlock();
      status.Draw();
      lock.lock();
    }
  }
  status.Stop();
  if (answers_fd > STDIN_FILENO) ::close(answers_fd);

  st::Result<st::TurnResult> result = std::move(*outcome);
  if (args.json) {
    if (result) PrintJsonResult(*result, std::nullopt, ref);
    else PrintJsonResult(std::nullopt, result.error(), ref);
  } else if (result) {
    // Deltas are what the user saw; without any, print the final reply.
    if (!streamed_any && !result->text.empty()) std::fwrite(result->text.data(), 1, result->text.size(), stdout);
    if (streamed_any || !result->text.empty()) std::fputc('\n', stdout);
    std::fflush(stdout);
    if (result->status != st::TurnStatus::completed) {
      std::fprintf(stderr, "sessionturn: turn %s %s%s%s\n", result->turn_id.c_str(),
                   std::string(st::ToString(result->status)).c_str(),
                   result->error_message.empty() ? "" : ": ", result->error_message.c_str());
    }
  } else {
    std::fprintf(stderr, "sessionturn: %s\n", result.error().ToString().c_str());
  }
  if (!result) return ExitCodeFor(result.error());
  return result->status == st::TurnStatus::completed ? kExitCompleted : kExitTurnFailed;
}

std::string HumanEvent(const st::Event& e) {
  std::string out = e.id > 0 ? "[" + std::to_string(e.id) + "] " : "[-] ";
  out += e.type;
  if (!e.turn_id.empty()) out += " " + e.turn_id;
  if (!e.status.empty()) out += " (" + e.status + ")";
  if (!e.tool_name.empty()) out += " tool=" + e.tool_name;
  std::string text = e.text;
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  if (!text.empty()) out += ": " + text;
  return out;
}

int RunWatch(const Args& args) {
  st::Context context;
  st::Driver driver(context, MakeConnector(context, args));
  // Shared with the detached signal watcher and the driver's handlers, which may outlive this frame.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<st::Status> ended;
    bool stop_requested = false;
  };
  auto state = std::make_shared<State>();

  st::WatchOptions options;
  options.since = args.since.value_or(0);
  auto handle = driver.Watch(
      options,
      [&](const st::Event& e) {
        // Without a journal id the runtime answers `since > 0` with a full replay (PROTOCOL.md §4):
        // the cut is ours to make.
        if (args.since && e.id > 0 && e.id <= *args.since) return;
        if (args.json) {
          const std::string line = e.line.empty() ? st::EncodeEvent(e) : e.line;
          std::fwrite(line.data(), 1, line.size(), stdout);
          std::fputc('\n', stdout);
        } else {
          const std::string line = HumanEvent(e);
          std::fprintf(stdout, "%s\n", line.c_str());
        }
        std::fflush(stdout);
      },
      [state](st::Status s) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->ended = std::move(s);
        state->cv.notify_all();
      });
  SetSignalHandler([state] {
    std::lock_guard<std::mutex> lock(state->mu);
    state->stop_requested = true;
    state->cv.notify_all();
  });
  {
    // A watch has no deadline of its own: it runs until Ctrl-C or until the runtime is gone for good.
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return state->ended.has_value() || state->stop_requested; });
  }
  handle.Stop();
  std::unique_lock<std::mutex> lock(state->mu);
  if (!state->ended || *state->ended) return kExitCompleted;
  std::fprintf(stderr, "sessionturn: watch ended: %s\n", state->ended->error().ToString().c_str());
  return ExitCodeFor(state->ended->error());
}

int RunInterrupt(const Args& args) {
  if (!args.session.empty()) {
    // An idle-suspended Session runs no turn: waking it (a Pod scheduled, a workspace mounted) only to
    // interrupt nothing would be waste.
    const st::KubeConfig kube = LoadKube(args);
    st::KubeClient client(kube);
    st::SessionClient sessions(client, kube.Namespace());
    if (auto s = sessions.Get(args.session); s && s->IsIdleSuspended()) {
      std::fprintf(stderr, "sessionturn: Session %s/%s is suspended by its idle policy: no turn is running\n",
                   kube.Namespace().c_str(), args.session.c_str());
      return kExitCompleted;
    }
  }
  st::Context context;
  st::Driver driver(context, MakeConnector(context, args));
  auto status = driver.Interrupt();
  if (status) return kExitCompleted;
  std::fprintf(stderr, "sessionturn: interrupt: %s\n", status.error().ToString().c_str());
  return ExitCodeFor(status.error());
}

// "45s", "12m", "5h", "3d" (kubectl's AGE), "-" when the timestamp is missing or unreadable.
std::string Age(const st::Session& s) {
  std::string stamp;
  const auto pointer = st::Json::json_pointer("/metadata/creationTimestamp");
  if (s.raw.is_object() && s.raw.contains(pointer) && s.raw.at(pointer).is_string()) {
    stamp = s.raw.at(pointer).get<std::string>();
  }
  std::tm tm{};
  const char* end = stamp.empty() ? nullptr : ::strptime(stamp.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return "-";
  const std::time_t created = ::timegm(&tm);
  const long long secs = std::max<long long>(0, static_cast<long long>(std::time(nullptr) - created));
  if (secs < 120) return std::to_string(secs) + "s";
  if (secs < 2 * 3600) return std::to_string(secs / 60) + "m";
  if (secs < 48 * 3600) return std::to_string(secs / 3600) + "h";
  return std::to_string(secs / 86400) + "d";
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    std::fprintf(stdout, "%s\n", line.c_str());
  }
}

void PrintJson(const st::Json& value) {
  std::cout << value.dump(2, ' ', false, st::Json::error_handler_t::replace) << std::endl;
}

void PrintSession(const st::Session& s) {
  std::vector<std::vector<std::string>> rows = {
      {"Name:", s.name},
      {"Namespace:", s.namespace_name},
      {"Phase:", OrDash(s.phase)},
      {"Pod:", OrDash(s.pod_name)},
      {"Message:", OrDash(s.message)},
      {"Suspend:", s.suspend ? "true" : "false"},
      {"Ready reason:", OrDash(s.ready_reason)},
      {"Idle resume request:", OrDash(s.resume_request)},
      {"Idle resume acknowledgement:", OrDash(s.resume_acknowledgement)},
      {"Age:", Age(s)},
  };
  PrintTable(rows);
}

int RunSessions(const Args& args) {
  const st::KubeConfig kube = LoadKube(args);
  st::KubeClient client(kube);
  st::SessionClient sessions(client, kube.Namespace());
  const std::string who = "Session " + kube.Namespace() + "/" + args.name;
  auto fail = [&](const st::Error& e) {
    std::fprintf(stderr, "sessionturn: %s\n", e.ToString().c_str());
    return KubeExitCode(e);
  };
  const std::string& action = args.sessions_action;
  if (action == "list") {
    auto list = sessions.List();
    if (!list) return fail(list.error());
    if (args.json) {
      st::Json items = st::Json::array();
      for (const st::Session& s : *list) items.push_back(s.raw);
      PrintJson(items);
      return kExitCompleted;
    }
    if (list->empty()) {
      std::fprintf(stderr, "sessionturn: no Sessions in namespace %s\n", kube.Namespace().c_str());
      return kExitCompleted;
    }
    std::vector<std::vector<std::string>> rows = {{"NAME", "PHASE", "POD", "AGE/MESSAGE"}};
    for (const st::Session& s : *list) {
      std::string phase = OrDash(s.phase);
      if (s.IsIdleSuspended()) phase += " (idle)";
      else if (s.IsOwnerSuspended()) phase += " (owner)";
      // A message says more than an age when there is one (why it failed, why it is suspended).
      std::string message = s.message;
      for (char& c : message) {
        if (c == '\n' || c == '\t') c = ' ';
      }
      rows.push_back({s.name, phase, OrDash(s.pod_name), message.empty() ? Age(s) : message});
    }
    PrintTable(rows);
    return kExitCompleted;
  }
  if (action == "get" || action == "suspend" || action == "resume") {
    auto s = action == "get" ? sessions.Get(args.name)
             : action == "suspend" ? sessions.Suspend(args.name)
                                   : sessions.Resume(args.name);
    if (!s) return fail(s.error());
    if (args.json) {
      PrintJson(s->raw);
    } else if (action == "get") {
      PrintSession(*s);
    } else {
      std::fprintf(stdout, "%s %s\n", who.c_str(), action == "suspend" ? "suspended" : "resumed");
      if (action == "resume" && s->IsIdleSuspended()) {
        std::fprintf(stderr,
                     "sessionturn: note: %s is also suspended by its idle policy; a turn or "
                     "`sessionturn wait %s` wakes it\n",
                     who.c_str(), args.name.c_str());
      }
    }
    return kExitCompleted;
  }
  // delete
  if (auto st = sessions.Delete(args.name); !st) return fail(st.error());
  if (args.json) {
    PrintJson({{"name", args.name}, {"namespace", kube.Namespace()}, {"deleted", true}});
  } else {
    std::fprintf(stdout, "%s deleted\n", who.c_str());
  }
  return kExitCompleted;
}

// Waits until the Session is ready (waking it when its idle policy suspended it) and prints its Pod.
int RunWait(const Args& args) {
  WaitedSession waited = WaitForSession(args, args.name);
  std::fprintf(stdout, "%s\n", waited.ready.pod_name.c_str());
  return kExitCompleted;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = ParseArgs(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sessionturn: %s\n\n%s", e.message.c_str(), kUsage);
    return kExitUsage;
  }
  if (args.command == "help") {
    std::fputs(kUsage, stdout);
    return kExitCompleted;
  }
  // Before any thread exists, so every thread inherits the mask and only the watcher takes signals.
  BlockTerminationSignals();
  StartSignalWatcher();
  try {
    if (args.command == "turn") return RunTurn(args);
    if (args.command == "watch") return RunWatch(args);
    if (args.command == "sessions") return RunSessions(args);
    if (args.command == "wait") return RunWait(args);
    return RunInterrupt(args);
  } catch (const ExitWith& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "sessionturn: %s\n", e.message.c_str());
    return e.code;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sessionturn: %s\n", e.message.c_str());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sessionturn: internal error: %s\n", e.what());
    return kExitTurnFailed;
  }
}
