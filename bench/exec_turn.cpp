// bench/exec_turn: echo turns through a Kubernetes API server's pods/exec (the fake API server of the
// tests, over TLS, bridging to a LocalRuntime), side by side in one run with
//   - `kubectl exec -i` carrying the same two requests (one kubectl process per turn, as a bot that
//     shells out to kubectl would run it), and
//   - Debian's python3-kubernetes client, kubernetes.stream.stream() exec (bench/py_kube_exec.py).
// Usage: bench_exec_turn [--turns N] [--no-kubectl] [--no-python]
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "kube/kube_support.hpp"
#include "sessionturn/session_driver.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using bench::Clock;

namespace {

struct Stats {
  std::vector<double> ms;
  void Print(const char* name) const {
    std::printf("  %-26s p50 %8.2f ms   p99 %8.2f ms   (%zu turns)\n", name, bench::Percentile(ms, 50),
                bench::Percentile(ms, 99), ms.size());
  }
};

// One turn through `kubectl exec -i`: stdin stays open until turn.completed arrived (the runtime ends
// the stream at stdin's end), then it is closed and kubectl exits.
double KubectlTurn(const std::string& kubeconfig, const std::string& pod, int i) {
  const auto t0 = Clock::now();
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) std::exit(1);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 2);
    ::execlp("kubectl", "kubectl", "--kubeconfig", kubeconfig.c_str(), "exec", "-i", pod.c_str(), "-c",
             "kelos-agent", "--", "/kelos/bin/kelos-session-runtime", "client", static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  const std::string req = EncodeRequest(ClientRequest::Subscribe(0, "", true, 1, 1024)) + "\n" +
                          EncodeRequest(ClientRequest::Message(NewRequestId(), "kubectl turn " + std::to_string(i))) +
                          "\n";
  if (::write(in[1], req.data(), req.size()) != static_cast<ssize_t>(req.size())) std::exit(1);
  std::string buf;
  char chunk[65536];
  bool done = false;
  while (!done) {
    const ssize_t n = ::read(out[0], chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    const auto he = buf.find("\"history.end\"");
    done = he != std::string::npos && buf.find("\"turn.completed\"", he) != std::string::npos;
  }
  ::close(in[1]);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!done) {
    std::fprintf(stderr, "kubectl turn did not complete\n");
    std::exit(1);
  }
  return bench::Ms(Clock::now() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  int turns = 30;
  bool kubectl = true, python = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--turns" && i + 1 < argc) {
      turns = std::stoi(argv[++i]);
    } else if (a == "--no-kubectl") {
      kubectl = false;
    } else if (a == "--no-python") {
      python = false;
    } else {
      std::fprintf(stderr, "usage: bench_exec_turn [--turns N] [--no-kubectl] [--no-python]\n");
      return 2;
    }
  }
  if (kubectl && std::system("kubectl version --client >/dev/null 2>&1") != 0) kubectl = false;
  if (python && std::system((std::string(SESSIONTURN_PYTHON) + " -c 'import kubernetes' 2>/dev/null").c_str()) != 0) {
    std::printf("  (python3-kubernetes is not installed: its comparison is skipped)\n");
    python = false;
  }
  testing_kube::FakeKube fake(0.05);
  testing::LocalRuntimeOptions ro;
  ro.socket_path = fake.dir().path() + "/rt/runtime.sock";
  ro.echo_delay = std::chrono::milliseconds(0);
  auto runtime = testing::LocalRuntime::Start(ro);
  if (!runtime) {
    std::fprintf(stderr, "runtime: %s\n", runtime.error().ToString().c_str());
    return 1;
  }
  KubeClient kc(fake.Config());
  SessionClient sessions(kc, "default");
  if (!sessions.Create({{"metadata", {{"name", "bench"}}}, {"spec", Json::object()}})) return 1;
  fake.Control("pods", {{"name", "bench-pod"}, {"socket", ro.socket_path}});
  const std::string kubeconfig = fake.WriteKubeconfig();

  Context ctx;
  SessionDriverOptions so;
  so.wait.poll_interval = std::chrono::milliseconds(100);
  auto sd = ForSession(ctx, fake.Config(), "default", "bench", so);
  if (!sd) {
    std::fprintf(stderr, "ForSession: %s\n", sd.error().ToString().c_str());
    return 1;
  }
  Stats ours, kc_stats, py;
  for (int i = 0; i < turns; ++i) {
    const auto t0 = Clock::now();
    auto r = sd->driver->SubmitTurn("driver turn " + std::to_string(i));
    if (!r || r->status != TurnStatus::completed) {
      std::fprintf(stderr, "driver turn failed: %s\n", r ? r->error_message.c_str() : r.error().ToString().c_str());
      return 1;
    }
    ours.ms.push_back(bench::Ms(Clock::now() - t0));
  }
  if (kubectl) {
    for (int i = 0; i < turns; ++i) kc_stats.ms.push_back(KubectlTurn(kubeconfig, "bench-pod", i));
  }
  if (python) {
    const std::string cmd = std::string(SESSIONTURN_PYTHON) + " " + SESSIONTURN_SOURCE_DIR + "/bench/py_kube_exec.py " +
                            kubeconfig + " default bench-pod " + std::to_string(turns);
    FILE* p = ::popen(cmd.c_str(), "r");
    char line[128];
    while (p != nullptr && std::fgets(line, sizeof line, p) != nullptr) py.ms.push_back(std::atof(line));
    if (p != nullptr) ::pclose(p);
  }
  std::printf("exec turn latency: echo turns through pods/exec of the fake API server (TLS), %d turns per client\n",
              turns);
  ours.Print("sessionturn (ForSession)");
  if (kubectl) kc_stats.Print("kubectl exec -i");
  if (!py.ms.empty()) py.Print("python3-kubernetes stream");
  const double o50 = bench::Percentile(ours.ms, 50), o99 = bench::Percentile(ours.ms, 99);
  if (kubectl) {
    std::printf("  ratio kubectl / ours      p50 %.1fx  p99 %.1fx  (target >= 10x)\n",
                bench::Percentile(kc_stats.ms, 50) / o50, bench::Percentile(kc_stats.ms, 99) / o99);
  }
  if (!py.ms.empty()) {
    std::printf("  ratio python / ours       p50 %.1fx  p99 %.1fx  (target >= 3x)\n", bench::Percentile(py.ms, 50) / o50,
                bench::Percentile(py.ms, 99) / o99);
  }
  return 0;
}
