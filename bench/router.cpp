// bench/router: the Router at 1,000 chat threads (issue 11).
// N chat threads (default 1,000), each alone in its Slack-like channel and bound to its own Session of
// one in-process LocalBackend (echo provider), the whole client side on ONE Context worker thread,
// through a bench-local adapter (router_adapter.hpp) that timestamps every post and edit and completes
// it at once, with no delay. A round: every thread sends one message at the same moment (a burst, the
// worst case for the router's one strand; --spread paces them); it ends when every message got its
// final reply.
//   - the first round creates the bindings (Ensure, the runtime's start): reported on its own;
//   - warm rounds, each next to a bare round: the same prompts at the same concurrency through
//     Driver::AsyncSubmitTurn on Sessions of the same backend (WaitReady -> connector -> Driver), so
//     the CPU per turn of both is measured side by side in one run;
//   - a memory round of each (not timed): from a trimmed heap, RSS and heap sampled while in flight;
//   - a few messages one at a time: the latencies without queueing.
// CPU, two measures: the Context worker's own (everything client-side: router, store, driver,
// backend, adapter; the in-process runtimes, and their host's periodic look, run on threads of their
// own) and the whole process's.
// Memory: RSS (after malloc_trim) and the heap in use per idle binding and per active thread, next
// to the bare run's per Session and per turn; the store's file size. The timed rounds run without
// a malloc_trim before them or a memory probe during them: a trim hands the heap back to the kernel,
// and the next burst paid for faulting it in again (a placeholder p99 about 7 ms higher); mallinfo2
// holds the arenas' locks while it walks them.
// Exits 1 when a message did not get exactly one final reply (a correctness check, not a timing one).
// Usage: bench_router [--threads N] [--turns-per-thread K] [--solo M] [--progress-ms MS] [--spread MS]
//                     [--tmp DIR] [--unpaced] [--phases] [--quick]
//   K: warm rounds after the first (default 12); M: messages one at a time (default 20);
//   --spread MS: a warm round's messages (router and bare alike) go out evenly over MS, not at once;
//   --tmp /dev/shm takes the runtimes' fsyncs away; --unpaced: the echo's reply without its pacing;
//   --phases: each round's span on stderr (to cut a `perf record -k CLOCK_MONOTONIC` profile by round);
//     under `valgrind --tool=callgrind` also one profile part per round (the round and its settling).
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define BENCH_CALLGRIND 1
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "router_adapter.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/router.hpp"

using namespace sessionturn;
using bench::Clock;
using bench::Ms;

namespace {

// A wait gives up when nothing moved for this long (a lost reply would otherwise hang the bench).
constexpr auto kStall = std::chrono::seconds(60);
constexpr auto kPoll = std::chrono::milliseconds(5);
constexpr auto kReadyTimeout = std::chrono::minutes(5);
constexpr double kPlaceholderTargetMs = 20;
constexpr double kCpuTarget = 2.0;

// A round's CPU is read this long after its last reply, so that no round leaves work of its own (a
// pass's commit, a due progress edit, a WAL checkpoint) to the next one. The LocalBackend's in-process
// host looks at its runtimes (idle policy, runtime records) every 200 ms on a thread of its own, as each
// runtime program does on its main thread: not on the worker, in either run.
constexpr auto kSettle = std::chrono::milliseconds(450);

std::string g_root;     // the temp dir: removed on every way out
bool g_phases = false;  // --phases: each round's span on stderr, for lining up a profile

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_router: %s\n", what.c_str());
  std::error_code ec;
  if (!g_root.empty()) std::filesystem::remove_all(g_root, ec);
  std::exit(1);
}

template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r) Die(what + ": " + r.error().ToString());
  return std::move(*r);
}

struct Flags {
  std::size_t threads = 1000;
  // Warm rounds. A single round's router/bare CPU ratio spreads from about 1.4x to 2.4x on this 2-core
  // machine; with 2 rounds the run's figure moved by a quarter from run to run, with 6 it still
  // straddled the target (1.67-2.23x over ten runs around a median of 1.89x), with 12 the run's figures
  // stay within about a tenth of their median (bench/README.md, the seventeenth session).
  int rounds = 12;
  std::size_t solo = 20;
  int progress_ms = 1000;
  std::string tmp = "/tmp";
  bool unpaced = false;
  std::chrono::milliseconds spread{0};  // a warm round's messages sent evenly over this; 0: at once
};

// CPU seconds of the Context's worker (read on it: the Context has one) and of the whole process.
// worker_kernel: the worker's seconds in the kernel (getrusage RUSAGE_THREAD: tick-grained, a part of worker).
struct Cpu {
  double worker = 0;
  double worker_kernel = 0;
  double process = 0;
  double worker_faults = 0;  // minor page faults of the worker (kernel time a growing heap costs)
  Cpu operator-(const Cpu& o) const {
    return {worker - o.worker, worker_kernel - o.worker_kernel, process - o.process, worker_faults - o.worker_faults};
  }
  Cpu& operator+=(const Cpu& o) {
    worker += o.worker;
    worker_kernel += o.worker_kernel;
    process += o.process;
    worker_faults += o.worker_faults;
    return *this;
  }
};

double Seconds(const timespec& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
double Seconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
}

// Runs `fn` on the Context's worker and waits for it.
template <typename Fn>
void OnWorker(Context& ctx, Fn&& fn) {
  std::promise<void> ran;
  auto f = ran.get_future();
  ctx.Post([&] {
    fn();
    ran.set_value();
  });
  f.get();
}

Cpu ReadCpu(Context& ctx) {
  Cpu c;
  OnWorker(ctx, [&c] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    c.worker = Seconds(t);
    rusage thread{};
    ::getrusage(RUSAGE_THREAD, &thread);
    c.worker_kernel = Seconds(thread.ru_stime);
    c.worker_faults = static_cast<double>(thread.ru_minflt);
  });
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  c.process = Seconds(ru.ru_utime) + Seconds(ru.ru_stime);
  return c;
}

// The longest a handler posted to the Context waited for the worker while probing for `span`, one
// probe per millisecond: after a round that is the backend's tick writing the runtime records.
double LongestWorkerStall(Context& ctx, std::chrono::milliseconds span) {
  double longest = 0;
  const auto until = Clock::now() + span;
  while (Clock::now() < until) {
    std::promise<void> ran;
    auto f = ran.get_future();
    const auto t = Clock::now();
    ctx.Post([&ran] { ran.set_value(); });
    f.wait();
    longest = std::max(longest, Ms(Clock::now() - t));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return longest;
}

// Memory at a quiet moment: RSS once malloc has handed back what it keeps freed, and the heap in
// use (every arena, mmapped blocks included): RSS also counts thread stacks and whatever a freed
// block's neighbours pin, the heap figure counts only live allocations.
struct Memory {
  long rss_kib = 0;
  long heap_kib = 0;
  Memory operator-(const Memory& o) const { return {rss_kib - o.rss_kib, heap_kib - o.heap_kib}; }
};

Memory QuietMemory() {
  ::malloc_trim(0);
  const struct mallinfo2 mi = ::mallinfo2();
  return {bench::RssKiB(), static_cast<long>((mi.uordblks + mi.hblkhd) / 1024)};
}

// Completions counted from the worker, waited for on the main thread.
struct Tally {
  std::mutex mu;
  std::size_t done = 0;
  std::size_t failed = 0;
  std::string first_error;
  void Add(bool ok, const std::string& error) {
    std::lock_guard lock(mu);
    ++done;
    if (!ok && failed++ == 0) first_error = error;
  }
  std::size_t Done() {
    std::lock_guard lock(mu);
    return done;
  }
};

struct Peak {
  Memory memory;
  std::size_t in_flight = 0;
};

// What a wait samples besides its progress: always the most in flight; with `memory`, also RSS and
// the heap in use (mallinfo2 walks every arena's free lists under its lock, stalling the worker's
// malloc meanwhile: only the memory rounds sample it, never a timed one).
enum class Sample { in_flight, memory };

// Waits until progress() reaches `target`, sampling every kPoll; dies when the count stalls for kStall.
void WaitSampling(const char* what, std::size_t target, const std::function<std::size_t()>& progress,
                  const std::function<std::size_t()>& in_flight, Peak& peak, Sample sample = Sample::in_flight) {
  std::size_t last = 0;
  auto moved = Clock::now();
  for (;;) {
    const std::size_t now = progress();
    if (sample == Sample::memory) {
      const struct mallinfo2 mi = ::mallinfo2();
      peak.memory.rss_kib = std::max(peak.memory.rss_kib, bench::RssKiB());
      peak.memory.heap_kib = std::max(peak.memory.heap_kib, static_cast<long>((mi.uordblks + mi.hblkhd) / 1024));
    }
    peak.in_flight = std::max(peak.in_flight, in_flight());
    if (now >= target) return;
    if (now != last) {
      last = now;
      moved = Clock::now();
    } else if (Clock::now() - moved > kStall) {
      Die(std::string(what) + ": stuck at " + std::to_string(now) + " of " + std::to_string(target) + " for " +
          std::to_string(kStall.count()) + " s");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

// Sends of a round: the i-th of n goes out at t0 + spread * i / n (at once when spread is 0).
void Pace(Clock::time_point t0, std::size_t i, std::size_t n, std::chrono::milliseconds spread) {
  if (spread.count() > 0) std::this_thread::sleep_until(t0 + spread * static_cast<long>(i) / static_cast<long>(n));
}

// ---- the messages -------------------------------------------------------------------------------

std::string Chat(std::size_t i) {
  return "C" + std::to_string(1000000 + i);
}
std::string Token(int round, std::size_t i) {
  return "tok-" + std::to_string(round) + "-" + std::to_string(i) + ".";
}
std::string Text(int round, std::size_t i) {
  return "turn " + std::to_string(round) + " of thread " + std::to_string(i) + ", " + Token(round, i);
}

InboundMessage MessageFor(int round, std::size_t i) {
  InboundMessage m;
  m.platform = "slack";
  m.workspace = "W1";
  m.chat = Chat(i);
  m.thread = "1700000000.000100";
  m.message_id = "1700000001." + std::to_string(round * 1000000 + static_cast<int>(i));
  m.event_id = "Ev" + std::to_string(round) + "-" + std::to_string(i);
  m.author_id = "U1";
  m.author_name = "Ada";
  m.text = Text(round, i);
  m.mentions_bot = true;
  return m;
}

// What the router submits for MessageFor(round, i): the bare run sends the same bytes.
std::string PromptFor(int round, std::size_t i) {
  PromptEnvelope env;
  env.platform = "slack";
  env.author_name = "Ada";
  env.author_id = "U1";
  env.text = Text(round, i);
  return FormatPrompt(env);
}

ChatCapabilities SlackLikeCaps() {
  ChatCapabilities c;
  c.max_length = 40000;
  c.unit = LengthUnit::code_points;
  c.soft_length = 3900;
  c.dialect = MarkupDialect::slack_mrkdwn;
  c.edits_per_interval = 1;
  c.edit_interval = std::chrono::milliseconds(1000);
  c.buttons = true;
  c.threads = true;
  return c;
}

// ---- one round ----------------------------------------------------------------------------------

struct Round {
  Cpu cpu;
  double wall_ms = 0;
  double settle_stall_ms = 0;  // the longest wait of a probe on the worker after the round
  Peak peak;
  std::size_t failed = 0;
};

// After a round: settles (probing the worker), then the round's CPU; with --phases its span (steady
// clock, which is CLOCK_MONOTONIC: `perf record -k CLOCK_MONOTONIC` stamps samples alike).
void EndRound(Context& ctx, const Cpu& cpu0, const std::string& phase, Clock::time_point t0, Round& r) {
  const auto t1 = Clock::now();
  r.wall_ms = Ms(t1 - t0);
  r.settle_stall_ms = LongestWorkerStall(ctx, kSettle);
  r.cpu = ReadCpu(ctx) - cpu0;
  if (g_phases) {
    auto s = [](Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); };
    std::fprintf(stderr, "phase %s %.6f %.6f\n", phase.c_str(), s(t0), s(t1));
#ifdef BENCH_CALLGRIND
    // Under callgrind: one profile part per round, of this thread and of the worker (a dump or a
    // reset is the calling thread's only: with --separate-threads=yes each gets its own file).
    CALLGRIND_DUMP_STATS_AT(phase.c_str());
    OnWorker(ctx, [&phase] { CALLGRIND_DUMP_STATS_AT(phase.c_str()); });
#endif
  }
}

// Under callgrind with --phases, a round's profile starts at its first message.
void StartRound([[maybe_unused]] Context& ctx) {
#ifdef BENCH_CALLGRIND
  if (g_phases) {
    CALLGRIND_ZERO_STATS;
    OnWorker(ctx, [] { CALLGRIND_ZERO_STATS; });
  }
#endif
}

// The bare run: Sessions of the same backend, one Driver each, a first turn each (as the router's
// first round gives its Sessions), then rounds like the router's.
using Drivers = std::vector<std::shared_ptr<Driver>>;

Drivers BareSetup(Context& ctx, SessionBackend& backend, std::size_t n) {
  Drivers drivers(n);
  Tally tally;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string name = "bare-" + std::to_string(i);
    backend.AsyncEnsure(name, {}, [&, name, i](Result<EnsureResult> e) {
      if (!e) return tally.Add(false, e.error().ToString());
      backend.AsyncWaitReady(name, Clock::now() + kReadyTimeout, {}, {}, [&, i](Result<ReadyTarget> t) {
        if (!t) return tally.Add(false, t.error().ToString());
        drivers[i] = std::make_shared<Driver>(ctx, t->connector);
        drivers[i]->AsyncSubmitTurn(PromptFor(0, i), {}, [&](Result<TurnResult> r) {
          tally.Add(r && r->status == TurnStatus::completed, r ? r->error_message : r.error().ToString());
        });
      });
    });
  }
  Peak unused;
  WaitSampling(
      "bare setup", n, [&] { return tally.Done(); }, [] { return std::size_t{0}; }, unused);
  if (tally.failed > 0) Die("bare setup: " + std::to_string(tally.failed) + " failed: " + tally.first_error);
  return drivers;
}

Round BareRound(Context& ctx, const Drivers& drivers, int round, std::chrono::milliseconds spread,
                std::vector<double>& latency_ms, Sample sample = Sample::in_flight) {
  const std::size_t n = drivers.size();
  std::vector<std::string> prompts;
  for (std::size_t i = 0; i < n; ++i) prompts.push_back(PromptFor(round, i));
  std::vector<Clock::time_point> start(n);
  std::vector<double> lat(n);
  Tally tally;
  Round r;
  StartRound(ctx);
  const Cpu cpu0 = ReadCpu(ctx);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    Pace(t0, i, n, spread);
    start[i] = Clock::now();
    drivers[i]->AsyncSubmitTurn(std::move(prompts[i]), {}, [&, i](Result<TurnResult> res) {
      lat[i] = Ms(Clock::now() - start[i]);
      tally.Add(res && res->status == TurnStatus::completed, res ? res->error_message : res.error().ToString());
    });
  }
  WaitSampling(
      "bare round", n, [&] { return tally.Done(); }, [&] { return n - tally.Done(); }, r.peak, sample);
  EndRound(ctx, cpu0, "bare-" + std::to_string(round), t0, r);
  r.failed = tally.failed;
  if (tally.failed > 0)
    std::fprintf(stderr, "bare round %d: %zu failed: %s\n", round, tally.failed, tally.first_error.c_str());
  latency_ms.insert(latency_ms.end(), lat.begin(), lat.end());
  return r;
}

struct Latencies {
  std::vector<double> accepted, placeholder, final_reply;
  // Between one acceptance and the next in a burst (in order): the typical one is the strand's cost
  // per message, a long one a stall of the worker.
  std::vector<double> accept_gaps_ms;
  std::size_t missing = 0;  // messages without a placeholder or a final reply
};

// Every thread in [0, n) sends its message of `round`: at once, or paced over `spread`.
Round RouterRound(Context& ctx, Router& router, bench::BenchAdapter& adapter, std::size_t n, int round,
                  std::chrono::milliseconds spread, Latencies& out, Sample sample = Sample::in_flight) {
  std::vector<InboundMessage> messages;
  for (std::size_t i = 0; i < n; ++i) messages.push_back(MessageFor(round, i));
  std::vector<Clock::time_point> sent(n), acked(n);
  Tally acks;
  const std::uint64_t delivered0 = router.Stats().replies_delivered;
  Round r;
  StartRound(ctx);
  const Cpu cpu0 = ReadCpu(ctx);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    Pace(t0, i, n, spread);
    sent[i] = Clock::now();
    adapter.Arm(i, Token(round, i), sent[i]);
    router.HandleMessage(std::move(messages[i]), [&, i](Result<Disposition> d) {
      acked[i] = Clock::now();
      acks.Add(d && *d == Disposition::accepted, d ? std::string(ToString(*d)) : d.error().ToString());
    });
  }
  auto progress = [&] {
    return std::min<std::size_t>(acks.Done(), static_cast<std::size_t>(router.Stats().replies_delivered - delivered0));
  };
  WaitSampling(
      "router round", n, progress, [&] { return router.Stats().turns_in_flight; }, r.peak, sample);
  EndRound(ctx, cpu0, "router-" + std::to_string(round), t0, r);
  r.failed = acks.failed;
  if (acks.failed > 0)
    std::fprintf(stderr, "router round %d: %zu not accepted: %s\n", round, acks.failed, acks.first_error.c_str());
  for (std::size_t i = 0; i < n; ++i) {
    const bench::ThreadSlot s = adapter.Slot(i);
    out.accepted.push_back(Ms(acked[i] - sent[i]));
    if (!s.placeholder || !s.final_reply || s.finals != 1) {
      ++out.missing;
      continue;
    }
    out.placeholder.push_back(Ms(*s.placeholder - sent[i]));
    out.final_reply.push_back(Ms(*s.final_reply - sent[i]));
  }
  if (spread.count() == 0) {
    std::sort(acked.begin(), acked.end());
    for (std::size_t i = 1; i < n; ++i) out.accept_gaps_ms.push_back(Ms(acked[i] - acked[i - 1]));
  }
  return r;
}

// Messages one at a time (each waits for the last one's reply): the latencies without queueing.
void SoloMessages(Router& router, bench::BenchAdapter& adapter, std::size_t m, int round, Latencies& out) {
  for (std::size_t i = 0; i < m; ++i) {
    const std::uint64_t delivered0 = router.Stats().replies_delivered;
    const auto sent = Clock::now();
    adapter.Arm(i, Token(round, i), sent);
    router.HandleMessage(MessageFor(round, i));
    Peak unused;
    WaitSampling(
        "solo message", 1, [&] { return static_cast<std::size_t>(router.Stats().replies_delivered - delivered0); },
        [] { return std::size_t{0}; }, unused);
    const bench::ThreadSlot s = adapter.Slot(i);
    if (!s.placeholder || !s.final_reply || s.finals != 1) {
      ++out.missing;
      continue;
    }
    out.placeholder.push_back(Ms(*s.placeholder - sent));
    out.final_reply.push_back(Ms(*s.final_reply - sent));
  }
}

// ---- the report ---------------------------------------------------------------------------------

void Line(const char* label, const std::vector<double>& v) {
  std::printf("  %-36s p50 %9.2f ms  p99 %9.2f ms  max %9.2f ms  n=%zu\n", label, bench::Percentile(v, 50),
              bench::Percentile(v, 99), v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()), v.size());
}

// The strand's pace through a burst: the typical gap between acceptances is its cost per message
// (each waits for all before it), the longest one the worst stall of the worker.
void Gaps(const std::vector<double>& gaps) {
  if (gaps.empty()) return;
  std::printf("  %-36s p50 %9.1f us  p99 %9.2f ms  max %9.2f ms\n", "gap between acceptances (burst)",
              bench::Percentile(gaps, 50) * 1000, bench::Percentile(gaps, 99),
              *std::max_element(gaps.begin(), gaps.end()));
}

const char* Met(bool ok) {
  return ok ? "met" : "NOT met";
}

long FileKiB(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<long>(st.st_size / 1024) : 0;
}

// Everything a run measured; memory figures are for all n threads (divided when printed).
struct Report {
  Latencies first, warm, solo, memory_round;
  std::vector<double> bare_latency;
  double first_wall_ms = 0;
  Cpu router_cpu, bare_cpu;
  std::vector<double> round_ratios;  // each warm round's router worker CPU over its bare round's
  std::vector<double> round_p99;     // each warm round's placeholder p99, ms
  double router_wall_ms = 0, bare_wall_ms = 0;
  std::size_t turns = 0;  // per run
  std::size_t router_in_flight = 0, bare_in_flight = 0;
  double router_stall_ms = 0, bare_stall_ms = 0;  // the longest after a round of each
  Memory idle_bare, idle_binding;                 // quiet, after the bare setup / the first router round
  Memory active_router, active_bare;              // the memory rounds' most above the quiet level before them
  std::size_t router_in_flight_memory = 0, bare_in_flight_memory = 0;  // the most in flight in the memory rounds
  long store_kib = 0, wal_kib = 0;
  RouterStats stats;
  std::uint64_t posts = 0, edits = 0, finals = 0, wrong_finals = 0;
};

// Bare and router rounds in turn, so that both see the same machine. Timed: nothing but the round runs
// (no malloc_trim before it, which would have its burst fault the heap back in; no memory probes).
void WarmRounds(Context& ctx, Router& router, bench::BenchAdapter& adapter, const Drivers& drivers, const Flags& f,
                Report& rep) {
  const std::size_t n = drivers.size();
  rep.turns = n * static_cast<std::size_t>(f.rounds);
  for (int round = 1; round <= f.rounds; ++round) {
    const Round b = BareRound(ctx, drivers, round, f.spread, rep.bare_latency);
    rep.bare_cpu += b.cpu;
    rep.bare_wall_ms += b.wall_ms;
    rep.bare_in_flight = std::max(rep.bare_in_flight, b.peak.in_flight);
    rep.bare_stall_ms = std::max(rep.bare_stall_ms, b.settle_stall_ms);
    const std::size_t before = rep.warm.placeholder.size();
    const Round r = RouterRound(ctx, router, adapter, n, round, f.spread, rep.warm);
    rep.round_p99.push_back(bench::Percentile(
        std::vector<double>(rep.warm.placeholder.begin() + static_cast<long>(before), rep.warm.placeholder.end()), 99));
    rep.router_cpu += r.cpu;
    if (b.cpu.worker > 0) rep.round_ratios.push_back(r.cpu.worker / b.cpu.worker);
    rep.router_wall_ms += r.wall_ms;
    rep.router_in_flight = std::max(rep.router_in_flight, r.peak.in_flight);
    rep.router_stall_ms = std::max(rep.router_stall_ms, r.settle_stall_ms);
    if (b.failed + r.failed > 0) Die("round " + std::to_string(round) + " had failures");
  }
}

// One more pair of rounds, for memory only (neither their CPU nor their latencies are reported): each
// starts from a quiet, trimmed heap and samples RSS and the heap while its turns are in flight.
void MemoryRounds(Context& ctx, Router& router, bench::BenchAdapter& adapter, const Drivers& drivers, const Flags& f,
                  Report& rep) {
  const std::size_t n = drivers.size();
  const int round = f.rounds + 1;
  std::vector<double> unused;
  Memory quiet = QuietMemory();
  const Round b = BareRound(ctx, drivers, round, f.spread, unused, Sample::memory);
  rep.active_bare = b.peak.memory - quiet;
  rep.bare_in_flight_memory = b.peak.in_flight;
  quiet = QuietMemory();
  const Round r = RouterRound(ctx, router, adapter, n, round, f.spread, rep.memory_round, Sample::memory);
  rep.active_router = r.peak.memory - quiet;
  rep.router_in_flight_memory = r.peak.in_flight;
  if (b.failed + r.failed > 0) Die("the memory rounds had failures");
}

// The echo provider paces its three deltas 20 ms apart (LocalRuntimeOptions::echo_delay, which
// LocalBackendOptions does not reach); this script sends the same reply the same way, at once.
std::string UnpacedEcho(const std::string& dir) {
  const std::string path = dir + "/unpaced-echo.json";
  std::ofstream(path) << R"({"turns":[[{"type":"delta","text":"echo "},{"type":"delta","text":"#{n}: "},)"
                      << R"({"type":"delta","text":"{prompt}"},{"type":"message","text":"echo #{n}: {prompt}"}]]})";
  return "script:" + path;
}

RouterOptions RouterOptionsFor(const Flags& f, const std::string& store_path) {
  RouterOptions ro;
  ro.owner_uid = "bench";
  ro.routes = {RouteConfig{}};
  ro.routes[0].name = "all";
  ro.store_path = store_path;
  ro.max_in_flight = f.threads;  // every thread in flight at once, none waiting for a slot
  ro.progress_interval = std::chrono::milliseconds(f.progress_ms);
  return ro;
}

void Measure(const Flags& f, Report& rep) {
  const std::size_t n = f.threads;
  const std::string store_path = g_root + "/router.db";
  Context ctx(ContextOptions{1, {}, LogLevel::warning});
  // Named, so that a profile (perf report --comm st-worker) can tell the client side apart.
  ctx.Post([] { ::pthread_setname_np(::pthread_self(), "st-worker"); });
  LocalBackendOptions bo;
  bo.state_dir = g_root + "/state";
  bo.provider = f.unpaced ? UnpacedEcho(g_root) : "echo";
  bo.in_process = true;
  bo.suspend_after = std::chrono::seconds(0);
  auto backend = Must(MakeLocalBackend(ctx, bo), "MakeLocalBackend");
  std::vector<std::string> chats;
  for (std::size_t i = 0; i < n; ++i) chats.push_back(Chat(i));
  bench::BenchAdapter adapter(ctx, SlackLikeCaps(), chats);

  const Memory m0 = QuietMemory();
  Drivers drivers = BareSetup(ctx, *backend, n);
  const Memory m1 = QuietMemory();
  rep.idle_bare = m1 - m0;
  auto router = Must(Router::Create(ctx, *backend, adapter, RouterOptionsFor(f, store_path)), "Router::Create");
  router->Start();
  rep.first_wall_ms = RouterRound(ctx, *router, adapter, n, 0, std::chrono::milliseconds(0), rep.first).wall_ms;
  rep.idle_binding = QuietMemory() - m1;
  WarmRounds(ctx, *router, adapter, drivers, f, rep);
  MemoryRounds(ctx, *router, adapter, drivers, f, rep);
  SoloMessages(*router, adapter, f.solo, f.rounds + 2, rep.solo);

  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a late duplicate would land now
  rep.stats = router->Stats();
  rep.posts = adapter.Posts();
  rep.edits = adapter.Edits();
  rep.finals = adapter.Finals();
  rep.wrong_finals = adapter.WrongFinals();
  rep.store_kib = FileKiB(store_path);
  rep.wal_kib = FileKiB(store_path + "-wal");
  router.reset();
  drivers.clear();
  backend.reset();
}

void PrintCpu(const Report& rep) {
  const double n = static_cast<double>(rep.turns);
  const double rw = rep.router_cpu.worker / n * 1e6, bw = rep.bare_cpu.worker / n * 1e6;
  const double rp = rep.router_cpu.process / n * 1e6, bp = rep.bare_cpu.process / n * 1e6;
  std::printf("[CPU per turn, %zu turns per run, rounds interleaved]\n", rep.turns);
  std::printf("  %-36s %12s %12s %8s\n", "", "router run", "bare Driver", "ratio");
  std::printf("  %-36s %9.1f us %9.1f us %7.2fx\n", "Context worker (the client side)", rw, bw, rw / bw);
  const double rk = rep.router_cpu.worker_kernel / n * 1e6, bk = rep.bare_cpu.worker_kernel / n * 1e6;
  std::printf("  %-36s %9.1f us %9.1f us %7.2fx\n", "  of which in the kernel", rk, bk, bk > 0 ? rk / bk : 0.0);
  const double rf = rep.router_cpu.worker_faults / n, bf = rep.bare_cpu.worker_faults / n;
  std::printf("  %-36s %12.2f %12.2f\n", "  worker's minor page faults", rf, bf);
  std::printf("  %-36s %9.1f us %9.1f us %7.2fx\n", "whole process (runtimes included)", rp, bp, rp / bp);
  std::printf("  %-36s %9.0f ms %9.0f ms\n", "wall time of the rounds", rep.router_wall_ms, rep.bare_wall_ms);
  std::printf("  router's own CPU per turn (worker, router - bare): %.1f us\n", rw - bw);
  if (!rep.round_ratios.empty()) {
    // The spread of one run: each warm round next to its bare round (the figure below is over all).
    std::vector<double> r = rep.round_ratios;
    std::sort(r.begin(), r.end());
    const double median = r.size() % 2 ? r[r.size() / 2] : (r[r.size() / 2 - 1] + r[r.size() / 2]) / 2;
    const auto within = std::count_if(r.begin(), r.end(), [](double v) { return v <= kCpuTarget; });
    std::printf("  ratio of each round to its bare round: min %.2fx, median %.2fx, max %.2fx (%ld of %zu rounds within "
                "the target)\n",
                r.front(), median, r.back(), static_cast<long>(within), r.size());
  }
  std::printf("  ratio router / bare client CPU per turn: %.2fx (target <= %.0fx: %s)\n", rw / bw, kCpuTarget,
              Met(rw / bw <= kCpuTarget));
}

void PrintMemory(const Report& rep, std::size_t n, bool burst) {
  // Idle: over the n bindings (bare: Sessions); active: over the most turns seen in flight at once.
  auto row = [](const char* label, const Memory& router, double router_n, const Memory& bare, double bare_n) {
    std::printf("  %-30s RSS %7.1f KiB heap %7.1f KiB | bare %7.1f / %7.1f KiB | router's own heap %7.1f KiB\n", label,
                router.rss_kib / router_n, router.heap_kib / router_n, bare.rss_kib / bare_n, bare.heap_kib / bare_n,
                router.heap_kib / router_n - bare.heap_kib / bare_n);
  };
  const double dn = static_cast<double>(n);
  std::printf("[memory per thread: RSS after malloc_trim, heap in use (mallinfo2); active: a round of its own]\n");
  row("idle binding (one turn done)", rep.idle_binding, dn, rep.idle_bare, dn);
  // Paced rounds have a few turns in flight: their peak is lost in the noise of the rest.
  if (burst) {
    row("active thread (turn in flight)", rep.active_router,
        static_cast<double>(std::max<std::size_t>(1, rep.router_in_flight_memory)), rep.active_bare,
        static_cast<double>(std::max<std::size_t>(1, rep.bare_in_flight_memory)));
  }
  std::printf("  router store: %ld KiB + %ld KiB WAL = %.2f KiB per binding\n", rep.store_kib, rep.wal_kib,
              static_cast<double>(rep.store_kib + rep.wal_kib) / dn);
}

// The figures; true when every message got exactly one final reply.
bool Print(const Flags& f, const Report& rep) {
  const std::size_t n = f.threads;
  std::printf(
      "router: %zu chat threads on one Context thread, each its own Session of an in-process LocalBackend "
      "(%s), %d warm round(s); state in %s\n",
      n, f.unpaced ? "echo reply, unpaced" : "echo", f.rounds, f.tmp.c_str());
  std::printf("[first message of each thread, all at once: binding, Ensure, runtime start] %.0f ms\n",
              rep.first_wall_ms);
  Line("message -> accepted (done)", rep.first.accepted);
  Gaps(rep.first.accept_gaps_ms);
  Line("message -> placeholder", rep.first.placeholder);
  Line("message -> final reply", rep.first.final_reply);
  if (f.spread.count() == 0) {
    std::printf("[warm rounds: all %zu threads send at once]\n", n);
  } else {
    std::printf("[warm rounds: the %zu threads send one after the other over %ld ms]\n", n,
                static_cast<long>(f.spread.count()));
  }
  Line("message -> accepted (done)", rep.warm.accepted);
  Line("message -> placeholder", rep.warm.placeholder);
  Line("message -> final reply", rep.warm.final_reply);
  Gaps(rep.warm.accept_gaps_ms);
  Line("bare Driver turn (submit -> result)", rep.bare_latency);
  std::printf("  most in flight: router %zu, bare %zu\n", rep.router_in_flight, rep.bare_in_flight);
  std::printf("  longest worker stall in the %ld ms after a round: router %.1f ms, bare %.1f ms\n",
              static_cast<long>(kSettle.count()), rep.router_stall_ms, rep.bare_stall_ms);
  std::printf("[one message at a time]\n");
  Line("message -> placeholder", rep.solo.placeholder);
  Line("message -> final reply", rep.solo.final_reply);
  PrintCpu(rep);
  PrintMemory(rep, n, f.spread.count() == 0);
  std::printf("[traffic] posts %lu, edits %lu (progress edits sent %lu, dropped %lu)\n",
              static_cast<unsigned long>(rep.posts), static_cast<unsigned long>(rep.edits),
              static_cast<unsigned long>(rep.stats.edits_sent), static_cast<unsigned long>(rep.stats.edits_dropped));
  if (!rep.round_p99.empty()) {
    // The spread of one run: a slow round of the machine's makes the run's p99 (of all warm rounds) its own.
    std::vector<double> r = rep.round_p99;
    std::sort(r.begin(), r.end());
    const auto within = std::count_if(r.begin(), r.end(), [](double v) { return v <= kPlaceholderTargetMs; });
    std::printf("placeholder p99 of each warm round: min %.2f ms, median %.2f ms, max %.2f ms (%ld of %zu within "
                "the target)\n",
                r.front(), bench::Percentile(r, 50), r.back(), static_cast<long>(within), r.size());
  }
  const double p99 = bench::Percentile(rep.warm.placeholder, 99);
  std::printf("placeholder p99 at %zu threads: %.2f ms (target <= %.0f ms: %s)\n", n, p99, kPlaceholderTargetMs,
              Met(p99 <= kPlaceholderTargetMs));
  const std::size_t messages = n * static_cast<std::size_t>(f.rounds + 2) + f.solo;  // + first, memory rounds
  const std::size_t missing = rep.first.missing + rep.warm.missing + rep.memory_round.missing + rep.solo.missing;
  const bool ok =
      missing == 0 && rep.wrong_finals == 0 && rep.finals == messages && rep.stats.replies_delivered == messages;
  std::printf("replies: %zu messages, %lu final replies, %lu delivered, %zu missing, %lu wrong or duplicate: %s\n",
              messages, static_cast<unsigned long>(rep.finals), static_cast<unsigned long>(rep.stats.replies_delivered),
              missing, static_cast<unsigned long>(rep.wrong_finals), ok ? "every message got exactly one" : "FAILED");
  return ok;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--quick") {
      f.threads = 50;
      f.rounds = 1;
      f.solo = 5;
    } else if (a == "--unpaced") {
      f.unpaced = true;
    } else if (a == "--phases") {
      g_phases = true;
    } else if (a == "--threads" && has) {
      f.threads = std::stoul(argv[++i]);
    } else if (a == "--turns-per-thread" && has) {
      f.rounds = std::stoi(argv[++i]);
    } else if (a == "--solo" && has) {
      f.solo = std::stoul(argv[++i]);
    } else if (a == "--progress-ms" && has) {
      f.progress_ms = std::stoi(argv[++i]);
    } else if (a == "--spread" && has) {
      f.spread = std::chrono::milliseconds(std::stoi(argv[++i]));
    } else if (a == "--tmp" && has) {
      f.tmp = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_router [--threads N] [--turns-per-thread K] [--solo M] [--progress-ms MS] "
                   "[--spread MS] [--tmp DIR] [--unpaced] [--phases] [--quick]\n");
      std::exit(2);
    }
  }
  if (f.threads == 0 || f.rounds < 1) Die("--threads and --turns-per-thread must be at least 1");
  f.solo = std::min(f.solo, f.threads);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  // Each in-process runtime holds a listening socket, its journal and its I/O thread's fds; each
  // turn in flight a connection at both ends.
  bench::RaiseFdLimit(static_cast<rlim_t>(f.threads * 16 + 1024));
  std::string tmpl = f.tmp + "/st-bench-router-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp in " + f.tmp + ": " + std::strerror(errno));
  g_root = tmpl;
  Report rep;
  Measure(f, rep);
  std::error_code ec;
  std::filesystem::remove_all(g_root, ec);
  return Print(f, rep) ? 0 : 1;
}
