// bench/local_backend: the LocalBackend's costs (issue 10).
//   - cold start: a Session whose runtime is not running (stopped by its owner and resumed, the same
//     path as an idle resume; a few real idle suspensions too) -> WaitReady -> first turn completed;
//   - warm turn: WaitReady on a Ready Session + one turn;
//   - both again in in-process mode (LocalBackendOptions::in_process);
//   - 1,000 Sessions created and listed.
// The provider is a script with one message and no pauses, so the figures are the backend's and the
// runtime's own (the target: cold start <= 50 ms plus the provider's time, which is ~0 here).
// Usage: bench_local_backend [--cold N] [--warm N] [--sessions N] [--idle N] [--tmp DIR]
//   --tmp DIR: where the state root is made (default /tmp); on a tmpfs (/dev/shm) the fsyncs cost nothing,
//   which shows how much of each figure is the disk's.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/driver.hpp"

using namespace sessionturn;
using bench::Clock;
using bench::Ms;

namespace {

const std::string kProgram = std::string(SESSIONTURN_BINARY_DIR) + "/sessionturn-local-runtime";
constexpr auto kDeadline = std::chrono::seconds(30);

void Die(const std::string& what, const Error& e) {
  std::fprintf(stderr, "bench_local_backend: %s: %s\n", what.c_str(), e.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r) Die(what, r.error());
  return std::move(*r);
}

struct Figures {
  std::vector<double> total, ready;
  void Print(const char* label) const {
    std::printf("%-34s p50 %8.2f ms  p99 %8.2f ms  (WaitReady p50 %7.2f ms)  n=%zu\n", label,
                bench::Percentile(total, 50), bench::Percentile(total, 99), bench::Percentile(ready, 50), total.size());
  }
};

// WaitReady, then one turn on the ReadyTarget's connector; both timed from the call.
void ReadyAndTurn(Context& ctx, SessionBackend& backend, const std::string& name, Figures& f) {
  const auto t0 = Clock::now();
  auto ready = Must(backend.WaitReady(name, std::chrono::steady_clock::now() + kDeadline), "WaitReady " + name);
  const auto t1 = Clock::now();
  Driver driver(ctx, ready.connector);
  TurnOptions o;
  o.timeout = kDeadline;
  auto turn = Must(driver.SubmitTurn("bench", o), "turn on " + name);
  const auto t2 = Clock::now();
  if (turn.status != TurnStatus::completed) Die("turn on " + name, Error(Errc::failed, "turn did not complete"));
  f.ready.push_back(Ms(t1 - t0));
  f.total.push_back(Ms(t2 - t0));
}

std::unique_ptr<SessionBackend> Backend(Context& ctx, const std::string& root, const std::string& provider,
                                        bool in_process, std::chrono::seconds suspend_after) {
  LocalBackendOptions o;
  o.state_dir = root;
  o.runtime_program = in_process ? std::string() : kProgram;
  o.provider = provider;
  o.in_process = in_process;
  o.suspend_after = suspend_after;
  return Must(MakeLocalBackend(ctx, o), "MakeLocalBackend");
}

void ColdAndWarm(Context& ctx, const std::string& root, const std::string& provider, bool in_process, int cold_n,
                 int warm_n) {
  // The idle policy is only a safety net here: a runtime left behind by a benchmark that died goes away.
  auto backend = Backend(ctx, root, provider, in_process, std::chrono::seconds(60));
  const std::string name = in_process ? "cold-inproc" : "cold";
  Must(backend->Ensure(name, {}), "Ensure");
  Figures first, cold, warm;
  ReadyAndTurn(ctx, *backend, name, first);  // never started: a fresh journal
  for (int i = 0; i < cold_n; ++i) {
    Must(backend->Suspend(name), "Suspend");  // returns once the runtime has gone
    Must(backend->Resume(name), "Resume");
    ReadyAndTurn(ctx, *backend, name, cold);
  }
  for (int i = 0; i < warm_n; ++i) ReadyAndTurn(ctx, *backend, name, warm);
  const char* mode = in_process ? "in-process" : "process";
  std::printf("[%s]\n", mode);
  first.Print("first start -> first turn");
  cold.Print("cold start (stopped -> turn)");
  warm.Print("warm turn (Ready -> turn)");
  std::printf("cold - warm (start-up cost)        p50 %8.2f ms  (target <= 50 ms)\n",
              bench::Percentile(cold.total, 50) - bench::Percentile(warm.total, 50));
  (void)backend->Delete(name);
}

void IdleResume(Context& ctx, const std::string& root, const std::string& provider, int n) {
  auto backend = Backend(ctx, root, provider, false, std::chrono::seconds(1));
  Must(backend->Ensure("idle", {}), "Ensure");
  Figures f, warm;
  ReadyAndTurn(ctx, *backend, "idle", warm);
  for (int i = 0; i < n; ++i) {
    for (;;) {
      auto info = Must(backend->Get("idle"), "Get");
      if (info.phase == SessionPhase::suspended && info.suspended == SuspendReason::idle) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ReadyAndTurn(ctx, *backend, "idle", f);
  }
  std::printf("[process, real idle suspensions]\n");
  f.Print("idle resume (Suspended -> turn)");
  (void)backend->Delete("idle");
}

void ListMany(Context& ctx, const std::string& root, int n) {
  auto backend = Backend(ctx, root, "echo", false, std::chrono::seconds(0));
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    SessionSpec spec;
    spec.labels["bench"] = i % 2 == 0 ? "even" : "odd";
    Must(backend->Ensure("s-" + std::to_string(i), spec), "Ensure");
  }
  const double create_ms = Ms(Clock::now() - t0);
  std::vector<double> all, half;
  for (int r = 0; r < 5; ++r) {
    auto t = Clock::now();
    auto list = Must(backend->List(), "List");
    all.push_back(Ms(Clock::now() - t));
    if (static_cast<int>(list.size()) != n) Die("List", Error(Errc::internal, "wrong count"));
    t = Clock::now();
    auto even = Must(backend->List("bench=even"), "List bench=even");
    half.push_back(Ms(Clock::now() - t));
    if (static_cast<int>(even.size()) != (n + 1) / 2) Die("List bench=even", Error(Errc::internal, "wrong count"));
  }
  std::printf("[%d Sessions]\n", n);
  std::printf("Ensure (create) each                 %8.3f ms per Session (%.0f ms in all)\n", create_ms / n, create_ms);
  std::printf("List all                         p50 %8.2f ms  (%.1f us per Session)\n", bench::Percentile(all, 50),
              bench::Percentile(all, 50) * 1000 / n);
  std::printf("List bench=even (selector)       p50 %8.2f ms\n", bench::Percentile(half, 50));
}

}  // namespace

int main(int argc, char** argv) {
  int cold_n = 30, warm_n = 100, sessions = 1000, idle_n = 3;
  std::string tmp = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--tmp") tmp = argv[i + 1];
    if (flag == "--cold")
      cold_n = v;
    else if (flag == "--warm")
      warm_n = v;
    else if (flag == "--sessions")
      sessions = v;
    else if (flag == "--idle")
      idle_n = v;
  }
  ::signal(SIGPIPE, SIG_IGN);
  std::string tmpl = tmp + "/st-bench-lb-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror(("bench_local_backend: mkdtemp in " + tmp).c_str());
    return 1;
  }
  const std::string root = tmpl;
  const std::string script = root + "/one-message.json";
  std::ofstream(script) << R"({"turns":[[{"type":"message","text":"ok {n}"}]]})";
  const std::string provider = "script:" + script;
  {
    Context ctx;
    ColdAndWarm(ctx, root + "/p", provider, false, cold_n, warm_n);
    ColdAndWarm(ctx, root + "/i", provider, true, cold_n, warm_n);
    if (idle_n > 0) IdleResume(ctx, root + "/idle", provider, idle_n);
    ListMany(ctx, root + "/list", sessions);
  }
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return 0;
}
