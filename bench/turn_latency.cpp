// bench/turn_latency: echo turns over a unix socket, p50/p99 per turn, side by side in one run with
//   - the floor: a minimal C++ client that writes the two requests at once and scans the bytes for
//     history.end and then turn.completed (no JSON decoding, no state machine);
//   - Python: bench/py_turn_client.py doing the same exchange as the driver, standard library only.
// The runtime is a LocalRuntime (echo provider, no artificial delay) in a forked child process, so the
// client's own CPU time per turn can be measured apart from the runtime's: wall latency is mostly the
// runtime's and the kernel's (the same for every client); CPU per turn is what the client costs.
// Rounds interleave the three clients so that machine noise hits them alike.
// Usage: bench_turn_latency [--turns N] [--rounds R] [--no-python]
//        bench_turn_latency --socket PATH [--turns N]   driver only, against a running runtime; prints
//        "driver p50_ms X p99_ms Y cpu_us Z" (bench/py_binding_turn.py uses it as its C++ comparison)
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using bench::Clock;

namespace {

// The floor: one blocking socket, both requests written at once, a substring scan of the replies.
double FloorTurn(const std::string& path, int i) {
  const auto t0 = Clock::now();
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("floor connect");
    std::exit(1);
  }
  const std::string req = EncodeRequest(ClientRequest::Subscribe(0, "", true, 1, 1024)) + "\n" +
                          EncodeRequest(ClientRequest::Message(NewRequestId(), "floor turn " + std::to_string(i))) +
                          "\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) std::exit(1);
  std::string buf;
  char chunk[65536];
  bool history_done = false;
  std::size_t scan_from = 0;
  for (;;) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) {
      std::fprintf(stderr, "floor: stream ended\n");
      std::exit(1);
    }
    buf.append(chunk, static_cast<std::size_t>(n));
    if (!history_done) {
      const auto p = buf.find("\"history.end\"", scan_from > 16 ? scan_from - 16 : 0);
      if (p == std::string::npos) {
        scan_from = buf.size();
        continue;
      }
      history_done = true;
      scan_from = p;
    }
    if (buf.find("\"turn.completed\"", scan_from > 20 ? scan_from - 20 : 0) != std::string::npos) break;
    scan_from = buf.size();
  }
  ::close(fd);
  return bench::Ms(Clock::now() - t0);
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
  double CpuPerTurn() const { return ms.empty() ? 0 : cpu_ms / static_cast<double>(ms.size()); }
  void Print(const char* name) const {
    std::printf("  %-24s p50 %7.3f ms  p99 %7.3f ms  client CPU %7.1f us/turn  (%zu turns)\n", name,
                bench::Percentile(ms, 50), bench::Percentile(ms, 99), CpuPerTurn() * 1e3, ms.size());
  }
};

}  // namespace

int main(int argc, char** argv) {
  int turns = 100;
  int rounds = 3;
  bool python = true;
  std::string socket;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--socket" && i + 1 < argc) {
      socket = argv[++i];
    } else if (a == "--turns" && i + 1 < argc) {
      turns = std::stoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::stoi(argv[++i]);
    } else if (a == "--no-python") {
      python = false;
    } else {
      std::fprintf(stderr, "usage: bench_turn_latency [--turns N] [--rounds R] [--no-python] [--socket PATH]\n");
      return 2;
    }
  }
  if (!socket.empty()) {
    Context ctx;
    Driver driver(ctx, MakeUnixConnector(ctx, socket));
    Stats ours;
    const double c0 = CpuMs();
    for (int i = 0; i < turns; ++i) {
      const auto t0 = Clock::now();
      auto res = driver.SubmitTurn("driver turn " + std::to_string(i));
      if (!res || res->status != TurnStatus::completed) return 1;
      ours.ms.push_back(bench::Ms(Clock::now() - t0));
    }
    ours.cpu_ms = CpuMs() - c0;
    std::printf("driver p50_ms %.4f p99_ms %.4f cpu_us %.2f\n", bench::Percentile(ours.ms, 50),
                bench::Percentile(ours.ms, 99), ours.CpuPerTurn() * 1e3);
    return 0;
  }
  char dir_template[] = "/tmp/st-bench-latency-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  testing::LocalRuntimeOptions ro;
  ro.socket_path = dir + "/runtime.sock";
  ro.echo_delay = std::chrono::milliseconds(0);
  int ready[2];
  if (::pipe(ready) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {  // the runtime's process: serve until killed
    auto runtime = testing::LocalRuntime::Start(ro);
    if (!runtime) {
      std::fprintf(stderr, "runtime: %s\n", runtime.error().ToString().c_str());
      _exit(1);
    }
    char ok = 'k';
    (void)::write(ready[1], &ok, 1);
    for (;;) ::pause();
  }
  char ok = 0;
  if (::read(ready[0], &ok, 1) != 1) return 1;
  Context ctx;
  Driver driver(ctx, MakeUnixConnector(ctx, ro.socket_path));

  Stats ours, floor, py;
  for (int r = 0; r < rounds; ++r) {
    double c0 = CpuMs();
    for (int i = 0; i < turns; ++i) {
      const auto t0 = Clock::now();
      auto res = driver.SubmitTurn("driver turn " + std::to_string(i));
      if (!res || res->status != TurnStatus::completed) {
        std::fprintf(stderr, "driver turn failed: %s\n", res ? res->error_message.c_str() : res.error().ToString().c_str());
        return 1;
      }
      ours.ms.push_back(bench::Ms(Clock::now() - t0));
    }
    ours.cpu_ms += CpuMs() - c0;
    c0 = CpuMs();
    for (int i = 0; i < turns; ++i) floor.ms.push_back(FloorTurn(ro.socket_path, i));
    floor.cpu_ms += CpuMs() - c0;
    if (python) {
      const std::string cmd = std::string(SESSIONTURN_PYTHON) + " " + SESSIONTURN_SOURCE_DIR +
                              "/bench/py_turn_client.py " + ro.socket_path + " " + std::to_string(turns);
      FILE* p = ::popen(cmd.c_str(), "r");
      char line[128];
      while (p != nullptr && std::fgets(line, sizeof line, p) != nullptr) {
        double cpu = 0;
        if (std::sscanf(line, "cpu_ms %lf", &cpu) == 1) {
          py.cpu_ms += cpu;
        } else {
          py.ms.push_back(std::atof(line));
        }
      }
      if (p != nullptr) ::pclose(p);
    }
  }
  std::printf("turn latency: echo turns over a unix socket, %d rounds x %d turns per client\n", rounds, turns);
  ours.Print("sessionturn Driver");
  floor.Print("floor (raw C++ scan)");
  if (python) py.Print("python (stdlib client)");
  const double o50 = bench::Percentile(ours.ms, 50), f50 = bench::Percentile(floor.ms, 50);
  const double o99 = bench::Percentile(ours.ms, 99), f99 = bench::Percentile(floor.ms, 99);
  std::printf("  ratio driver / floor      latency p50 %.2fx  p99 %.2fx  client CPU %.2fx  (target <= 1.3x)\n",
              o50 / f50, o99 / f99, ours.CpuPerTurn() / floor.CpuPerTurn());
  if (python && !py.ms.empty()) {
    std::printf("  ratio python / driver     latency p50 %.2fx  p99 %.2fx  client CPU %.2fx  (target >= 5x)\n",
                bench::Percentile(py.ms, 50) / o50, bench::Percentile(py.ms, 99) / o99,
                py.CpuPerTurn() / ours.CpuPerTurn());
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::unlink(ro.socket_path.c_str());
  ::rmdir(dir.c_str());
  return 0;
}
