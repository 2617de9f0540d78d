// bench_wake_latency: from a Session becoming Ready (the fake API server flips it) to our first line
// on its exec stream. Ours: SessionClient::AsyncWaitReady (a watch) and the exec connect; the peers'
// way, side by side in the same rounds: a GET every 2 s, then the same connect. Prints p50/p99 of
// both and the ratio of the poll's p50 to our p99 (issue 10's target: our p99 <= 100 ms and >= 20x
// better than the poll's p50).
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "kube/kube_support.hpp"
#include "sessionturn/kube_exec.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/sessions.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using bench::Clock;

namespace {

// The peers' readiness poll (PROTOCOL.md §6).
constexpr auto kPeerPoll = std::chrono::seconds(2);

// Connects to the Pod, subscribes, and returns when the first line arrived.
Status FirstLine(Context& context, const KubeConfig& kube, const std::string& pod) {
  KubeExecConnector connector(context, kube, "default", pod);
  std::promise<Result<std::shared_ptr<Connection>>> connected;
  connector.AsyncConnect([&](Result<std::shared_ptr<Connection>> c) { connected.set_value(std::move(c)); });
  auto conn = connected.get_future().get();
  if (!conn) return Fail(conn.error());
  (*conn)->AsyncWrite(EncodeRequest(ClientRequest::Subscribe(0, "", true, 1, 1024)), {});
  std::promise<Result<std::string>> line;
  (*conn)->AsyncReadLine([&](Result<std::string> l) { line.set_value(std::move(l)); });
  auto got = line.get_future().get();
  (*conn)->Close();
  if (!got) return Fail(got.error());
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_wake_latency [--rounds N]\n");
      return 2;
    }
  }
  testing_kube::FakeKube fake(0.05);
  fake.Control("config", {{"controller", false}});  // the benchmark flips the phase itself
  testing::LocalRuntimeOptions ro;
  ro.socket_path = fake.dir().path() + "/rt/runtime.sock";
  auto runtime = testing::LocalRuntime::Start(ro);
  if (!runtime) {
    std::fprintf(stderr, "runtime: %s\n", runtime.error().ToString().c_str());
    return 1;
  }
  Context context;
  const KubeConfig kube = fake.Config();
  KubeClient client(context, kube);
  SessionClient sessions(client, "default");
  std::vector<double> ours, poll;
  for (int i = 0; i < rounds; ++i) {
    const std::string w = "watched-" + std::to_string(i), p = "polled-" + std::to_string(i);
    for (const auto& name : {w, p}) {
      if (!sessions.Create({{"metadata", {{"name", name}}}, {"spec", nlohmann::json::object()}})) return 1;
      fake.Control("pods", {{"name", name + "-pod"}, {"socket", ro.socket_path}});
    }
    // Ours: the watch-based wait, then the exec connect.
    std::promise<Clock::time_point> our_done;
    sessions.AsyncWaitReady(w, Clock::now() + std::chrono::minutes(1), {}, [&](Result<ReadySession> r) {
      if (!r) {
        std::fprintf(stderr, "wait: %s\n", r.error().ToString().c_str());
        std::exit(1);
      }
      std::thread([&, pod = r->pod_name] {
        if (auto st = FirstLine(context, kube, pod); !st) {
          std::fprintf(stderr, "exec: %s\n", st.error().ToString().c_str());
          std::exit(1);
        }
        our_done.set_value(Clock::now());
      }).detach();
    });
    // The peers': a GET every 2 s from a phase that is random relative to the flip, then the connect.
    std::promise<Clock::time_point> poll_done;
    std::thread poller([&] {
      KubeClient pc(kube);
      SessionClient ps(pc, "default");
      for (;;) {
        auto s = ps.Get(p);
        if (s && s->IsReady()) break;
        std::this_thread::sleep_for(kPeerPoll);
      }
      Context pctx;
      if (auto st = FirstLine(pctx, kube, p + "-pod"); !st) std::exit(1);
      poll_done.set_value(Clock::now());
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + (i * 397) % 1800));
    const auto flip_w = Clock::now();
    fake.Control("sessions/status", {{"name", w}, {"status", {{"phase", "Ready"}, {"podName", w + "-pod"}}}});
    const auto flip_p = Clock::now();
    fake.Control("sessions/status", {{"name", p}, {"status", {{"phase", "Ready"}, {"podName", p + "-pod"}}}});
    ours.push_back(bench::Ms(our_done.get_future().get() - flip_w));
    poll.push_back(bench::Ms(poll_done.get_future().get() - flip_p));
    poller.join();
  }
  const double our50 = bench::Percentile(ours, 50), our99 = bench::Percentile(ours, 99);
  const double poll50 = bench::Percentile(poll, 50), poll99 = bench::Percentile(poll, 99);
  std::printf("  %d rounds; Ready flipped by the fake -> first line on the exec stream\n", rounds);
  std::printf("  watch (ours)      p50 %8.1f ms  p99 %8.1f ms\n", our50, our99);
  std::printf("  2 s poll (peers)  p50 %8.1f ms  p99 %8.1f ms\n", poll50, poll99);
  std::printf("  poll p50 / our p99: %.1fx   (target: our p99 <= 100 ms, ratio >= 20x)\n",
              our99 > 0 ? poll50 / our99 : 0.0);
  return 0;
}
