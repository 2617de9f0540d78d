// bench_runtime_fanout: one LocalRuntime, many subscribed clients, a provider emitting deltas as fast as
// it can (flood:N, which waits only while the slowest subscriber is over half its 256-event bound, so
// the sustained fan-out is measured rather than how fast readers get dropped). Prints events delivered
// per second (all clients together), CPU per event, clients disconnected, and peak RSS.
// Usage: bench_runtime_fanout [--clients N] [--deltas N]
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using sessionturn::testing::LocalRuntime;
using sessionturn::testing::LocalRuntimeOptions;

namespace {

struct Client {
  int fd = -1;
  long lines = 0;
  bool done = false;
  bool dropped = false;
};

int Connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("connect");
    std::exit(1);
  }
  return fd;
}

void SendLine(int fd, const std::string& line) {
  std::string s = line + "\n";
  if (::send(fd, s.data(), s.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(s.size())) {
    std::perror("send");
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  long n_clients = 1000;
  long n_deltas = 100000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--clients") n_clients = std::atol(argv[i + 1]);
    else if (a == "--deltas") n_deltas = std::atol(argv[i + 1]);
  }
  bench::RaiseFdLimit(static_cast<rlim_t>(n_clients + 256));

  char tmpl[] = "/tmp/st-fanout-XXXXXX";
  if (!::mkdtemp(tmpl)) return 1;
  const std::string dir = tmpl;
  LocalRuntimeOptions o;
  o.socket_path = dir + "/rt.sock";
  o.provider = "flood:" + std::to_string(n_deltas);
  auto rt = LocalRuntime::Start(o);
  if (!rt) {
    std::fprintf(stderr, "start: %s\n", rt.error().ToString().c_str());
    return 1;
  }

  // Lines each client should see: runtime.status + history.end on subscribe, then user.message,
  // turn.started, the runtime.status re-sent at the turn's start (as the real runtime does), the
  // deltas, assistant.message and turn.completed.
  const long expected = 2 + 2 + 1 + n_deltas + 2;
  std::vector<Client> clients(static_cast<std::size_t>(n_clients));
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  const std::string subscribe = R"({"type":"subscribe"})";
  for (std::size_t i = 0; i < clients.size(); ++i) {
    clients[i].fd = Connect(o.socket_path);
    SendLine(clients[i].fd, subscribe);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, clients[i].fd, &ev);
  }
  // Let every subscription land before the flood starts.
  auto settle_deadline = bench::Clock::now() + std::chrono::seconds(60);
  std::vector<char> buf(256 * 1024);
  std::vector<epoll_event> events(256);
  long subscribed = 0;
  while (subscribed < n_clients && bench::Clock::now() < settle_deadline) {
    int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 100);
    for (int k = 0; k < n; ++k) {
      Client& c = clients[events[k].data.u64];
      ssize_t r = ::recv(c.fd, buf.data(), buf.size(), 0);
      for (ssize_t j = 0; j < r; ++j)
        if (buf[static_cast<std::size_t>(j)] == '\n' && ++c.lines == 2) ++subscribed;
    }
  }

  auto t0 = bench::Clock::now();
  SendLine(clients[0].fd, R"({"type":"message","requestId":"bench","text":"go"})");
  long finished = 0;
  auto deadline = t0 + std::chrono::minutes(10);
  while (finished < n_clients && bench::Clock::now() < deadline) {
    int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
    for (int k = 0; k < n; ++k) {
      Client& c = clients[events[k].data.u64];
      if (c.done) continue;
      ssize_t r = ::recv(c.fd, buf.data(), buf.size(), 0);
      if (r <= 0) {
        c.done = true;
        c.dropped = c.lines < expected;
        ++finished;
        ::epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
        continue;
      }
      const char* p = buf.data();
      const char* end = p + r;
      while ((p = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)))) != nullptr) {
        ++c.lines;
        ++p;
      }
      if (c.lines >= expected) {
        c.done = true;
        ++finished;
        ::epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
      }
    }
  }
  double secs = std::chrono::duration<double>(bench::Clock::now() - t0).count();
  long delivered = 0, dropped = 0;
  for (auto& c : clients) {
    delivered += std::max(0L, c.lines - 2);
    if (c.dropped || !c.done) ++dropped;
    ::close(c.fd);
  }
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  (*rt)->Stop();
  ::rmdir(dir.c_str());

  std::printf("runtime_fanout: %ld clients, %ld deltas per turn\n", n_clients, n_deltas);
  std::printf("  events delivered: %ld in %.2f s = %.0f events/s (all clients together)\n", delivered, secs,
              static_cast<double>(delivered) / secs);
  std::printf("  per client: %.0f events/s; journal rate %.0f events/s\n",
              static_cast<double>(delivered) / secs / static_cast<double>(n_clients),
              static_cast<double>(expected - 2) / secs);
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  std::printf("  CPU (runtime and readers): %.1f s = %.2f us per delivered event; %.0f events per CPU-second\n", cpu,
              cpu * 1e6 / static_cast<double>(delivered), static_cast<double>(delivered) / cpu);
  std::printf("  clients disconnected (fell 256 behind) or unfinished: %ld\n", dropped);
  std::printf("  peak RSS (runtime and clients in one process): %.1f MiB\n", static_cast<double>(ru.ru_maxrss) / 1024.0);
  return dropped == 0 ? 0 : 3;
}
