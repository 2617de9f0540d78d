// bench/turn_latency: echo turns over a unix socket, p50/p99 and client CPU per turn, side by side in
// one run with
//   - the floor, pipelined: a minimal C++ client that writes subscribe and message at once and scans the
//     bytes for history.end and then turn.completed (no JSON decoding, no state machine);
//   - the floor, sequential: the same, but the message waits for history.end (what the driver did before
//     it pipelined; what it still does on a resume);
//   - the floor, decoding: the pipelined floor decoding every line into one reused Event (what a client
//     that reads the events cannot avoid), without the driver's loop and state machine;
//   - Python: bench/py_turn_client.py, the driver's exchange in the standard library.
// The method (issue 14): every client runs against a runtime in the same state: a fresh runtime (a
// LocalRuntime in a forked child, so the client's CPU time is its own) per client and round, its journal
// pre-filled to the steady state (4096 retained events) before the client starts; the order of the clients
// is shuffled per round; the journal size is printed. Against one shared runtime the journal grows as the
// run goes on and the first subscribe's condensed page costs more each turn, which biased the published
// ratios towards whichever client ran first.
// Usage: bench_turn_latency [--turns N] [--rounds R] [--prefill EVENTS] [--seed S] [--no-python]
//        bench_turn_latency --socket PATH [--turns N] [--client driver|floor|floor-seq|floor-decode]
//            one client against a running runtime; prints "<client> p50_ms X p99_ms Y cpu_us Z"
//            (bench/py_binding_turn.py uses it as its C++ comparison; callgrind runs it)
//        bench_turn_latency --serve PATH [--prefill EVENTS]   a runtime at PATH until killed
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using bench::Clock;

namespace {

int Connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("floor connect");
    std::exit(1);
  }
  return fd;
}

void SendAll(int fd, const std::string& bytes) {
  if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) std::exit(1);
}

// Reads into `buf` until `needle` appears at or after `from`; returns where it ends.
std::size_t ReadUntil(int fd, std::string& buf, std::size_t from, const char* needle) {
  const std::size_t len = std::strlen(needle);
  for (;;) {
    const auto p = buf.find(needle, from > len ? from - len : 0);
    if (p != std::string::npos) return p + len;
    from = buf.size();
    char chunk[65536];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) {
      std::fprintf(stderr, "floor: stream ended\n");
      std::exit(1);
    }
    buf.append(chunk, static_cast<std::size_t>(n));
  }
}

// The floor: one blocking socket, a substring scan of the replies. `pipelined`: subscribe and message in
// one write; else the message after history.end.
double FloorTurn(const std::string& path, int i, bool pipelined) {
  const auto t0 = Clock::now();
  const int fd = Connect(path);
  const std::string sub = EncodeRequest(ClientRequest::Subscribe(0, "", true, 1, 1024)) + "\n";
  const std::string msg =
      EncodeRequest(ClientRequest::Message(NewRequestId(), "floor turn " + std::to_string(i))) + "\n";
  std::string buf;
  if (pipelined) {
    SendAll(fd, sub + msg);
  } else {
    SendAll(fd, sub);
  }
  std::size_t at = ReadUntil(fd, buf, 0, "\"history.end\"");
  if (!pipelined) SendAll(fd, msg);
  ReadUntil(fd, buf, at, "\"turn.completed\"");
  ::close(fd);
  return bench::Ms(Clock::now() - t0);
}

// The decoding floor: the pipelined floor, but every line is decoded (DecodeEventInto, one reused Event,
// as the driver's streams do) and the turn ends on the decoded turn.completed: what a client that reads
// the events costs, without the driver's event loop, state machine and plumbing.
double FloorDecodeTurn(const std::string& path, int i) {
  const auto t0 = Clock::now();
  const int fd = Connect(path);
  SendAll(fd, EncodeRequest(ClientRequest::Subscribe(0, "", true, 1, 1024)) + "\n" +
                  EncodeRequest(ClientRequest::Message(NewRequestId(), "floor turn " + std::to_string(i))) + "\n");
  static Event event;
  std::string buf;
  std::size_t begin = 0;
  for (bool done = false; !done;) {
    char chunk[65536];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) {
      std::fprintf(stderr, "floor-decode: stream ended\n");
      std::exit(1);
    }
    buf.append(chunk, static_cast<std::size_t>(n));
    for (std::size_t nl; !done && (nl = buf.find('\n', begin)) != std::string::npos; begin = nl + 1) {
      if (!DecodeEventInto(std::string_view(buf).substr(begin, nl - begin), event)) std::exit(1);
      done = event.Is(event_type::kTurnCompleted);
    }
  }
  ::close(fd);
  return bench::Ms(Clock::now() - t0);
}

// The runtime's journal: its last event id (history.start of a bounded subscribe).
long JournalEvents(const std::string& path) {
  const int fd = Connect(path);
  SendAll(fd, EncodeRequest(ClientRequest::Subscribe(0, "", true, 1, 1024)) + "\n");
  std::string buf;
  const std::size_t end = ReadUntil(fd, buf, 0, "\n");
  ::close(fd);
  auto event = DecodeEvent(std::string_view(buf).substr(0, end - 1));
  return event ? static_cast<long>(event->last_event_id) : -1;
}

double CpuMs() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

struct Stats {
  std::vector<double> ms;
  double cpu_ms = 0;  // client CPU time spent over all turns
  long journal_before = 0, journal_after = 0;
  double CpuPerTurn() const { return ms.empty() ? 0 : cpu_ms / static_cast<double>(ms.size()); }
  void Print(const char* name) const {
    std::printf("  %-26s p50 %7.3f ms  p99 %7.3f ms  client CPU %7.1f us/turn  (%zu turns; journal %ld -> %ld)\n",
                name, bench::Percentile(ms, 50), bench::Percentile(ms, 99), CpuPerTurn() * 1e3, ms.size(),
                journal_before, journal_after);
  }
};

// Runs a runtime at `socket` in this process, fills its journal to `prefill` events, calls `ready`,
// and serves until the process is killed.
[[noreturn]] void Serve(const std::string& socket, long prefill, const std::function<void()>& ready) {
  testing::LocalRuntimeOptions ro;
  ro.socket_path = socket;
  ro.echo_delay = std::chrono::milliseconds(0);
  auto runtime = testing::LocalRuntime::Start(ro);
  if (!runtime) {
    std::fprintf(stderr, "runtime: %s\n", runtime.error().ToString().c_str());
    _exit(1);
  }
  for (int i = 0; JournalEvents(socket) < prefill; ++i) {
    for (int k = 0; k < 50; ++k) FloorTurn(socket, i * 50 + k, true);
  }
  ready();
  for (;;) ::pause();
}

// A runtime in a forked child, its journal pre-filled to `prefill` events; killed by Stop.
struct ChildRuntime {
  pid_t pid = -1;
  std::string socket;

  static ChildRuntime Start(const std::string& socket, long prefill) {
    ::unlink(socket.c_str());
    int ready[2];
    if (::pipe(ready) != 0) std::exit(1);
    const pid_t child = ::fork();
    if (child == 0) {  // the runtime's process: prefill, then serve until killed
      ::close(ready[0]);
      Serve(socket, prefill, [&] {
        char ok = 'k';
        (void)::write(ready[1], &ok, 1);
      });
    }
    ::close(ready[1]);
    char ok = 0;
    if (::read(ready[0], &ok, 1) != 1) std::exit(1);
    ::close(ready[0]);
    return ChildRuntime{child, socket};
  }
  void Stop() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::unlink(socket.c_str());
  }
};

Result<TurnResult> DriverTurn(Driver& driver, int i) {
  return driver.SubmitTurn("driver turn " + std::to_string(i));
}

// `turns` turns of one client against the runtime at `path`, into `stats`.
void RunClient(const std::string& client, const std::string& path, int turns, Stats& stats) {
  if (client == "python") {
    const std::string cmd = std::string(SESSIONTURN_PYTHON) + " " + SESSIONTURN_SOURCE_DIR +
                            "/bench/py_turn_client.py " + path + " " + std::to_string(turns);
    FILE* p = ::popen(cmd.c_str(), "r");
    char line[128];
    while (p != nullptr && std::fgets(line, sizeof line, p) != nullptr) {
      double cpu = 0;
      if (std::sscanf(line, "cpu_ms %lf", &cpu) == 1) {
        stats.cpu_ms += cpu;
      } else {
        stats.ms.push_back(std::atof(line));
      }
    }
    if (p != nullptr) ::pclose(p);
    return;
  }
  if (client == "driver") {
    // The Context is made outside the measured part, as a bot makes it once.
    Context ctx;
    Driver driver(ctx, MakeUnixConnector(ctx, path));
    const double c0 = CpuMs();
    for (int i = 0; i < turns; ++i) {
      const auto t0 = Clock::now();
      auto res = DriverTurn(driver, i);
      if (!res || res->status != TurnStatus::completed) {
        std::fprintf(stderr, "driver turn failed: %s\n",
                     res ? res->error_message.c_str() : res.error().ToString().c_str());
        std::exit(1);
      }
      stats.ms.push_back(bench::Ms(Clock::now() - t0));
    }
    stats.cpu_ms += CpuMs() - c0;
    return;
  }
  const bool pipelined = client == "floor";
  const bool decoding = client == "floor-decode";
  const double c0 = CpuMs();
  for (int i = 0; i < turns; ++i) stats.ms.push_back(decoding ? FloorDecodeTurn(path, i) : FloorTurn(path, i, pipelined));
  stats.cpu_ms += CpuMs() - c0;
}

}  // namespace

int main(int argc, char** argv) {
  int turns = 100;
  int rounds = 3;
  long prefill = 4096;
  bool python = true;
  unsigned seed = std::random_device{}();
  std::string socket, serve, client = "driver";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--socket") {
      socket = next();
    } else if (a == "--serve") {
      serve = next();
    } else if (a == "--client") {
      client = next();
    } else if (a == "--turns") {
      turns = std::stoi(next());
    } else if (a == "--rounds") {
      rounds = std::stoi(next());
    } else if (a == "--prefill") {
      prefill = std::stol(next());
    } else if (a == "--seed") {
      seed = static_cast<unsigned>(std::stoul(next()));
    } else if (a == "--no-python") {
      python = false;
    } else {
      std::fprintf(stderr,
                   "usage: bench_turn_latency [--turns N] [--rounds R] [--prefill EVENTS] [--seed S] [--no-python]\n"
                   "       bench_turn_latency --socket PATH [--turns N] [--client driver|floor|floor-seq|floor-decode]\n"
                   "       bench_turn_latency --serve PATH [--prefill EVENTS]\n");
      return 2;
    }
  }
  if (!serve.empty()) {  // the runtime in this process: killing it stops the runtime
    ::unlink(serve.c_str());
    Serve(serve, prefill, [&] {
      std::printf("serving %s (journal %ld events)\n", serve.c_str(), JournalEvents(serve));
      std::fflush(stdout);
    });
  }
  if (!socket.empty()) {
    Stats one;
    RunClient(client, socket, turns, one);
    std::printf("%s p50_ms %.4f p99_ms %.4f cpu_us %.2f\n", client.c_str(), bench::Percentile(one.ms, 50),
                bench::Percentile(one.ms, 99), one.CpuPerTurn() * 1e3);
    return 0;
  }
  char dir_template[] = "/tmp/st-bench-latency-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string path = dir + "/runtime.sock";

  std::vector<std::string> clients = {"driver", "floor", "floor-seq", "floor-decode"};
  if (python) clients.push_back("python");
  std::map<std::string, Stats> stats;
  std::mt19937 rng(seed);
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(clients.begin(), clients.end(), rng);
    for (const auto& c : clients) {
      auto rt = ChildRuntime::Start(path, prefill);
      Stats& s = stats[c];
      s.journal_before = JournalEvents(path);
      RunClient(c, path, turns, s);
      s.journal_after = JournalEvents(path);
      rt.Stop();
    }
  }
  std::printf("turn latency: echo turns over a unix socket, %d rounds x %d turns per client, a fresh runtime per "
              "client and round (journal pre-filled to %ld events), client order shuffled per round (seed %u)\n",
              rounds, turns, prefill, seed);
  stats["driver"].Print("sessionturn Driver");
  stats["floor"].Print("floor, pipelined");
  stats["floor-seq"].Print("floor, sequential");
  stats["floor-decode"].Print("floor, decoding");
  if (python) stats["python"].Print("python (stdlib client)");
  const Stats& ours = stats["driver"];
  const double o50 = bench::Percentile(ours.ms, 50), o99 = bench::Percentile(ours.ms, 99);
  for (const char* f : {"floor", "floor-seq", "floor-decode"}) {
    const Stats& fl = stats[f];
    std::printf("  ratio driver / %-10s latency p50 %.2fx  p99 %.2fx  client CPU %.2fx  (targets: p50 <= 1.1x "
                "the pipelined floor, CPU <= 1.25x)\n",
                f, o50 / bench::Percentile(fl.ms, 50), o99 / bench::Percentile(fl.ms, 99),
                ours.CpuPerTurn() / fl.CpuPerTurn());
  }
  if (python && !stats["python"].ms.empty()) {
    const Stats& py = stats["python"];
    std::printf("  ratio python / driver     latency p50 %.2fx  p99 %.2fx  client CPU %.2fx  (target: CPU >= 2x)\n",
                bench::Percentile(py.ms, 50) / o50, bench::Percentile(py.ms, 99) / o99,
                py.CpuPerTurn() / ours.CpuPerTurn());
  }
  ::rmdir(dir.c_str());
  return 0;
}
