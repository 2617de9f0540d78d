// bench/concurrent_turns: N concurrent turns (default 10,000) from one process on one Context thread,
// against a runtime that holds them open: peak RSS per in-flight turn and total time.
//
// The holding runtime runs in a forked child so that its memory is not counted: per connection it
// answers `subscribe` with history.end and `message` with user.message + turn.started (each connection
// gets its own turn id, as if every turn ran on its own Session), then holds every turn open until the
// parent has measured, and finally completes them all with one assistant.message + turn.completed.
// Usage: bench_concurrent_turns [--turns N]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <asio.hpp>

#include "bench_util.hpp"
#include "sessionturn/driver.hpp"

using namespace sessionturn;
using bench::Clock;

namespace {

class HoldingServer {
 public:
  HoldingServer(asio::io_context& io, const std::string& path) : io_(io), acceptor_(io), release_(io) {
    ::unlink(path.c_str());
    asio::local::stream_protocol::endpoint ep(path);
    acceptor_.open(ep.protocol());
    acceptor_.bind(ep);
    acceptor_.listen(4096);
    Accept();
    // The parent signals "release" with SIGUSR1.
    release_.add(SIGUSR1);
    release_.async_wait([this](const asio::error_code&, int) { ReleaseAll(); });
  }

 private:
  struct Conn {
    explicit Conn(asio::io_context& io) : sock(io) {}
    asio::local::stream_protocol::socket sock;
    asio::streambuf in;
    std::string turn_id;
    std::string out;
  };

  void Accept() {
    auto c = std::make_shared<Conn>(io_);
    acceptor_.async_accept(c->sock, [this, c](const asio::error_code& ec) {
      if (!ec) {
        conns_.push_back(c);
        Read(c);
      }
      Accept();
    });
  }

  void Read(const std::shared_ptr<Conn>& c) {
    asio::async_read_until(c->sock, c->in, '\n', [this, c](const asio::error_code& ec, std::size_t n) {
      if (ec) return;
      std::string line(asio::buffers_begin(c->in.data()), asio::buffers_begin(c->in.data()) + static_cast<long>(n));
      c->in.consume(n);
      auto req = DecodeRequest(line.substr(0, line.size() - 1));
      if (req && req->type == "subscribe") {
        Write(c, R"({"type":"history.end"})");
      } else if (req && req->type == "message") {
        c->turn_id = "turn-" + std::to_string(++turns_);
        Write(c, R"({"id":1,"type":"user.message","requestId":")" + req->request_id + R"(","turnId":")" +
                     c->turn_id + R"(","text":"x","revision":1})");
        Write(c, R"({"id":2,"type":"turn.started","turnId":")" + c->turn_id + R"(","status":"running"})");
      }
      Read(c);
    });
  }

  void Write(const std::shared_ptr<Conn>& c, std::string line) {
    auto buf = std::make_shared<std::string>(std::move(line) + "\n");
    asio::async_write(c->sock, asio::buffer(*buf), [buf, c](const asio::error_code&, std::size_t) {});
  }

  void ReleaseAll() {
    for (auto& c : conns_) {
      Write(c, R"({"id":3,"type":"assistant.message","turnId":")" + c->turn_id + R"(","text":"done"})");
      Write(c, R"({"id":4,"type":"turn.completed","turnId":")" + c->turn_id + R"(","status":"completed"})");
    }
  }

  asio::io_context& io_;
  asio::local::stream_protocol::acceptor acceptor_;
  asio::signal_set release_;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::size_t turns_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t turns = 10000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--turns" && i + 1 < argc) {
      turns = std::stoul(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_concurrent_turns [--turns N]\n");
      return 2;
    }
  }
  bench::RaiseFdLimit(static_cast<rlim_t>(turns * 2 + 256));
  char dir_template[] = "/tmp/st-bench-concurrent-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string path = dir + "/hold.sock";

  // The child reports ready (its signal handler installed) through a pipe before the parent signals it.
  int ready_pipe[2];
  if (::pipe(ready_pipe) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    asio::io_context io;
    HoldingServer server(io, path);
    char ok = 'k';
    (void)::write(ready_pipe[1], &ok, 1);
    io.run();
    _exit(0);
  }
  char ok = 0;
  if (::read(ready_pipe[0], &ok, 1) != 1) return 1;

  const long rss_before = bench::RssKiB();
  Context ctx;  // one worker thread
  Driver driver(ctx, MakeUnixConnector(ctx, path));
  std::mutex mu;
  std::condition_variable cv;
  std::size_t started = 0, done = 0, failed = 0;
  std::size_t wave_end = 0;  // under mu: the started (or failed) count that ends the wave being submitted
  std::string first_error;
  const auto t0 = Clock::now();
  const double cpu0 = bench::ProcessCpuMs(), child_cpu0 = bench::OtherProcessCpuMs(child);
  // Submit in waves no larger than the listen backlog, waiting for each wave to be started.
  constexpr std::size_t kWave = 1000;
  for (std::size_t i = 0; i < turns; ++i) {
    if (i % kWave == 0) {
      std::lock_guard<std::mutex> l(mu);
      wave_end = std::min(turns, i + kWave);
    }
    TurnOptions o;
    o.on_event = [&](const Event& e) {
      if (e.type == event_type::kTurnStarted) {
        std::lock_guard<std::mutex> l(mu);
        // Wakes the submitting thread once per wave, not per turn (a wake-up per turn was a tenth of
        // the process's CPU: the benchmark's, not the library's).
        if (++started + failed == wave_end) cv.notify_all();
      }
    };
    driver.AsyncSubmitTurn("hold " + std::to_string(i), o, [&](Result<TurnResult> r) {
      std::lock_guard<std::mutex> l(mu);
      ++done;
      if (!r || r->status != TurnStatus::completed) {
        ++failed;
        if (first_error.empty()) first_error = r ? r->error_message : r.error().ToString();
        cv.notify_all();
      } else if (done == turns) {
        cv.notify_all();
      }
    });
    if ((i + 1) % kWave == 0 || i + 1 == turns) {
      std::unique_lock<std::mutex> l(mu);
      if (!cv.wait_for(l, std::chrono::seconds(120), [&] { return started + failed >= i + 1; })) {
        std::fprintf(stderr, "timed out waiting for turns to start (%zu started)\n", started);
        ::kill(child, SIGKILL);
        return 1;
      }
    }
  }
  const auto t_started = Clock::now();
  const double cpu_start = bench::ProcessCpuMs() - cpu0, child_cpu_start = bench::OtherProcessCpuMs(child) - child_cpu0;
  const long rss_peak_inflight = bench::RssKiB();
  ::kill(child, SIGUSR1);
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(300), [&] { return done >= turns; });
  }
  const auto t_done = Clock::now();
  const long hwm = bench::RssKiB("VmHWM:");
  ::kill(child, SIGTERM);
  ::waitpid(child, nullptr, 0);
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());

  const double per_turn_kib = static_cast<double>(rss_peak_inflight - rss_before) / static_cast<double>(turns);
  std::printf("concurrent turns: %zu turns in flight on one Context thread\n", turns);
  std::printf("  all started after            : %8.1f ms\n", bench::Ms(t_started - t0));
  // Where the start's time went: both processes share the machine's cores (the runtime is one thread).
  std::printf("  CPU until all started        : %8.1f ms this process, %.1f ms the holding runtime\n", cpu_start,
              child_cpu_start);
  std::printf("  all completed after          : %8.1f ms (%zu ok, %zu failed%s%s)\n", bench::Ms(t_done - t0),
              done - failed, failed, first_error.empty() ? "" : ": ", first_error.c_str());
  std::printf("  RSS before / in flight / HWM : %ld / %ld / %ld KiB\n", rss_before, rss_peak_inflight, hwm);
  std::printf("  RSS per in-flight turn       : %8.1f KiB (target <= 8 KiB)\n", per_turn_kib);
  return failed == 0 ? 0 : 1;
}
