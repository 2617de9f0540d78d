// bench/http_client: GETs against the fake API server of the tests (TLS, bearer token, keep-alive),
// side by side in one run:
//   - libcurl easy with one reused handle, options set anew for each request (the KubeClient before
//     HttpClient: curl_easy_reset + setopt + curl_easy_perform on the calling thread);
//   - HttpClient, each completion starting the next GET on the Context's one worker (the router's way);
//   - HttpClient::Request, blocking, from this thread (a script's way; since issue 14 it runs on this
//     thread's own loop, before it was a hand-off to the worker and back);
//   - KubeClient::AsyncGet chained the same way (HttpClient plus the token, retries and JSON parsing);
//   - KubeClient::Get, blocking, from this thread (on this thread's loop, as HttpClient::Request).
// The figure is CPU time of this process (getrusage: the server is another process) per request,
// taken over interleaved rounds (the median round per client), and its ratio to libcurl easy.
// Usage: bench_http_client [--requests N] [--rounds R] [--only easy|async|blocking|kube|kube-blocking]
// (--only: for profiling)
#include <curl/curl.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "kube/kube_support.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/http.hpp"
#include "sessionturn/kube.hpp"

using namespace sessionturn;
using bench::Clock;

namespace {

const char* kPath = "/version";

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

struct Round {
  double cpu_us_per_request = 0;
  double wall_us_per_request = 0;
};

template <typename Run>
Round Measure(int n, Run&& run) {
  const double cpu0 = CpuSeconds();
  const auto t0 = Clock::now();
  if (!run(n)) {
    std::fprintf(stderr, "bench_http_client: a request failed\n");
    std::exit(1);
  }
  Round r;
  r.wall_us_per_request = bench::Ms(Clock::now() - t0) * 1000.0 / n;
  r.cpu_us_per_request = (CpuSeconds() - cpu0) * 1e6 / n;
  return r;
}

size_t Append(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// libcurl easy, the way KubeClient did it before: one pooled handle, reset and set up per request.
bool EasyGets(CURL* h, const testing_kube::FakeKube& fake, int n) {
  const std::string url = fake.Server() + kPath;
  const std::string auth = std::string("Authorization: Bearer ") + testing_kube::FakeKube::kToken;
  const std::string& ca = fake.CaPem();
  for (int i = 0; i < n; ++i) {
    std::string body;
    curl_easy_reset(h);
    curl_slist* headers = curl_slist_append(nullptr, "Accept: application/json");
    headers = curl_slist_append(headers, auth.c_str());
    curl_blob blob{const_cast<char*>(ca.data()), ca.size(), CURL_BLOB_COPY};
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "sessionturn-bench");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Append);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK || status != 200 || body.empty()) return false;
  }
  return true;
}

HttpRequest VersionRequest(const testing_kube::FakeKube& fake) {
  HttpRequest r;
  r.url = fake.Server() + kPath;
  r.headers = {{"Accept", "application/json"},
               {"Authorization", std::string("Bearer ") + testing_kube::FakeKube::kToken}};
  r.tls.ca_pem = fake.CaPem();
  return r;
}

// Each completion starts the next request from the worker: no thread hand-off per request.
bool AsyncChain(HttpClient& client, const HttpRequest& request, int n) {
  std::promise<bool> done;
  std::function<void(int)> next;
  next = [&](int left) {
    client.AsyncRequest(request, [&, left](Result<HttpResponse> r) {
      if (!r || r->status != 200) return done.set_value(false);
      if (left == 1) return done.set_value(true);
      next(left - 1);
    });
  };
  next(n);
  return done.get_future().get();
}

bool BlockingGets(HttpClient& client, const HttpRequest& request, int n) {
  for (int i = 0; i < n; ++i) {
    auto r = client.Request(request);
    if (!r || r->status != 200) return false;
  }
  return true;
}

bool KubeChain(KubeClient& client, int n) {
  std::promise<bool> done;
  std::function<void(int)> next;
  next = [&](int left) {
    client.AsyncGet(kPath, [&, left](Result<nlohmann::json> r) {
      if (!r) return done.set_value(false);
      if (left == 1) return done.set_value(true);
      next(left - 1);
    });
  };
  next(n);
  return done.get_future().get();
}

// What the blocking verbs did before issue 14 (blocking::Call): the async call on the worker, this
// thread waiting for its future. Kept as the "before" of the blocking rows, in the same run.
bool HandOffGets(HttpClient& client, const HttpRequest& request, int n) {
  for (int i = 0; i < n; ++i) {
    std::promise<Result<HttpResponse>> done;
    client.AsyncRequest(request, [&](Result<HttpResponse> r) { done.set_value(std::move(r)); });
    auto r = done.get_future().get();
    if (!r || r->status != 200) return false;
  }
  return true;
}

bool KubeHandOffGets(KubeClient& client, int n) {
  for (int i = 0; i < n; ++i) {
    std::promise<Result<nlohmann::json>> done;
    client.AsyncGet(kPath, [&](Result<nlohmann::json> r) { done.set_value(std::move(r)); });
    if (!done.get_future().get()) return false;
  }
  return true;
}

bool KubeBlockingGets(KubeClient& client, int n) {
  for (int i = 0; i < n; ++i) {
    if (!client.Get(kPath)) return false;
  }
  return true;
}

double Median(std::vector<double> v) { return bench::Percentile(std::move(v), 50); }

}  // namespace

int main(int argc, char** argv) {
  int requests = 1000;
  int rounds = 5;  // this machine kind is noisy: the median of several interleaved rounds
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--requests") == 0) requests = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  testing_kube::FakeKube fake;
  Context ctx;  // one worker
  HttpClient http(ctx);
  KubeClient kube(ctx, fake.Config());
  CURL* easy = curl_easy_init();
  const HttpRequest request = VersionRequest(fake);

  // Warm up every client once: TLS handshakes and the first allocations are not what is measured.
  if (!EasyGets(easy, fake, 5) || !AsyncChain(http, request, 5) || !BlockingGets(http, request, 5) ||
      !KubeChain(kube, 5) || !KubeBlockingGets(kube, 5)) {
    std::fprintf(stderr, "bench_http_client: warm-up failed: %s\n", fake.Log().c_str());
    return 1;
  }

  if (!only.empty()) {
    auto r = only == "easy"       ? Measure(requests, [&](int n) { return EasyGets(easy, fake, n); })
             : only == "async"    ? Measure(requests, [&](int n) { return AsyncChain(http, request, n); })
             : only == "blocking" ? Measure(requests, [&](int n) { return BlockingGets(http, request, n); })
             : only == "kube"     ? Measure(requests, [&](int n) { return KubeChain(kube, n); })
                                  : Measure(requests, [&](int n) { return KubeBlockingGets(kube, n); });
    std::printf("%s: %.1f us CPU, %.1f us wall per request\n", only.c_str(), r.cpu_us_per_request,
                r.wall_us_per_request);
    curl_easy_cleanup(easy);
    return 0;
  }
  std::vector<double> easy_cpu, async_cpu, blocking_cpu, handoff_cpu, kube_cpu, kube_blocking_cpu, kube_handoff_cpu;
  std::vector<double> easy_wall, async_wall, blocking_wall, handoff_wall, kube_wall, kube_blocking_wall,
      kube_handoff_wall;
  for (int r = 0; r < rounds; ++r) {
    auto e = Measure(requests, [&](int n) { return EasyGets(easy, fake, n); });
    auto a = Measure(requests, [&](int n) { return AsyncChain(http, request, n); });
    auto b = Measure(requests, [&](int n) { return BlockingGets(http, request, n); });
    auto k = Measure(requests, [&](int n) { return KubeChain(kube, n); });
    auto kb = Measure(requests, [&](int n) { return KubeBlockingGets(kube, n); });
    auto h = Measure(requests, [&](int n) { return HandOffGets(http, request, n); });
    auto kh = Measure(requests, [&](int n) { return KubeHandOffGets(kube, n); });
    handoff_cpu.push_back(h.cpu_us_per_request), handoff_wall.push_back(h.wall_us_per_request);
    kube_handoff_cpu.push_back(kh.cpu_us_per_request), kube_handoff_wall.push_back(kh.wall_us_per_request);
    easy_cpu.push_back(e.cpu_us_per_request), easy_wall.push_back(e.wall_us_per_request);
    async_cpu.push_back(a.cpu_us_per_request), async_wall.push_back(a.wall_us_per_request);
    blocking_cpu.push_back(b.cpu_us_per_request), blocking_wall.push_back(b.wall_us_per_request);
    kube_cpu.push_back(k.cpu_us_per_request), kube_wall.push_back(k.wall_us_per_request);
    kube_blocking_cpu.push_back(kb.cpu_us_per_request), kube_blocking_wall.push_back(kb.wall_us_per_request);
  }
  curl_easy_cleanup(easy);

  const double base = Median(easy_cpu);
  std::printf("%d GETs %s over TLS with keep-alive, %d interleaved rounds (median round)\n", requests, kPath, rounds);
  std::printf("  %-40s %10s %10s %8s\n", "client", "CPU/req", "wall/req", "CPU vs easy");
  auto row = [&](const char* name, const std::vector<double>& cpu, const std::vector<double>& wall) {
    std::printf("  %-40s %7.1f us %7.1f us %7.2fx\n", name, Median(cpu), Median(wall), Median(cpu) / base);
  };
  row("libcurl easy, one reused handle", easy_cpu, easy_wall);
  row("HttpClient, async chain on the worker", async_cpu, async_wall);
  row("HttpClient::Request, blocking", blocking_cpu, blocking_wall);
  row("  the same as a hand-off (before issue 14)", handoff_cpu, handoff_wall);
  row("KubeClient::AsyncGet chain", kube_cpu, kube_wall);
  row("KubeClient::Get, blocking", kube_blocking_cpu, kube_blocking_wall);
  row("  the same as a hand-off (before issue 14)", kube_handoff_cpu, kube_handoff_wall);
  std::printf("  connections opened by HttpClient: %llu\n", static_cast<unsigned long long>(http.ConnectionsOpened()));
  return 0;
}
