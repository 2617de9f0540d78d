// KubeConfig::AsyncBearerToken: answers from the cache on the loop, refreshes off it (one plugin run
// for concurrent callers, in the background ahead of expiry), and never blocks a Context worker.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "kube_support.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/kube.hpp"

using namespace sessionturn;
using sessionturn::testing_kube::Slurp;
using sessionturn::testing_kube::TempDir;
using namespace std::chrono_literals;

namespace {

// A plugin that waits for `delay` ("go": until the file bin/go exists), counts its runs in bin/runs and prints token "tok-<run>" expiring
// `lifetime` from now (GNU date).
std::string SlowPluginConfig(TempDir& dir, const std::string& delay, const std::string& lifetime) {
  std::string script =
      "#!/bin/sh\n"
      "d=$(dirname \"$0\")\n"
      + (delay == "go" ? std::string("while [ ! -f \"$d/go\" ]; do sleep 0.02; done\n") : "sleep " + delay + "\n") +
      "n=$(cat \"$d/runs\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$d/runs\"\n"
      "exp=$(date -u -d '" + lifetime + "' +%Y-%m-%dT%H:%M:%SZ)\n"
      "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
      "\"status\":{\"token\":\"tok-%s\",\"expirationTimestamp\":\"%s\"}}' $n \"$exp\"\n";
  std::string p = dir.File("bin/plugin.sh", script);
  ::chmod(p.c_str(), 0755);
  return dir.File("config",
                  "apiVersion: v1\nkind: Config\n"
                  "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
                  "users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
                  "      command: ./bin/plugin.sh\n      interactiveMode: Never\n"
                  "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n");
}

KubeConfig Load(const std::string& path) {
  KubeConfigOptions o;
  o.kubeconfig = path;
  o.allow_in_cluster = false;
  auto cfg = KubeConfig::Load(o);
  REQUIRE(cfg);
  return *cfg;
}

int Runs(TempDir& dir) { return std::atoi(Slurp(dir.path() + "/bin/runs").c_str()); }

// Collects AsyncBearerToken results and the thread kind each ran on. The handlers share the state,
// so a handler still unlocking after the last result cannot outlive it.
class Collector {
 public:
  explicit Collector(std::size_t n) : s_(std::make_shared<State>()) { s_->expected = n; }
  std::function<void(Result<std::string>)> Handler(Context& context) {
    return [s = s_, &context](Result<std::string> r) {
      std::lock_guard lock(s->mu);
      s->results.push_back(std::move(r));
      s->on_worker.push_back(context.InWorkerThread());
      s->cv.notify_all();
    };
  }
  // Waits for the expected number of results.
  bool Wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(s_->mu);
    return s_->cv.wait_for(lock, timeout, [&] { return s_->results.size() >= s_->expected; });
  }
  std::vector<Result<std::string>> Results() {
    std::lock_guard lock(s_->mu);
    return s_->results;
  }
  std::vector<bool> OnWorker() {
    std::lock_guard lock(s_->mu);
    return s_->on_worker;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Result<std::string>> results;
    std::vector<bool> on_worker;
    std::size_t expected = 0;
  };
  std::shared_ptr<State> s_;
};

}  // namespace

TEST_CASE("credentials: concurrent callers share one plugin run and the worker keeps running", "[kube][credentials]") {
  TempDir dir;
  KubeConfig cfg = Load(SlowPluginConfig(dir, "go", "+1 hour"));
  Context context;  // one worker
  Collector got(20);
  context.Post([&] {
    for (int i = 0; i < 20; ++i) cfg.AsyncBearerToken(context, got.Handler(context));
  });
  // The plugin is now running (waiting for bin/go); a worker blocked by it would never run this.
  std::promise<void> ran;
  context.Post([&ran] { ran.set_value(); });
  REQUIRE(ran.get_future().wait_for(10s) == std::future_status::ready);
  dir.File("bin/go", "");
  REQUIRE(got.Wait(10s));
  auto results = got.Results();
  auto on_worker = got.OnWorker();
  for (std::size_t i = 0; i < results.size(); ++i) {
    REQUIRE(results[i]);
    CHECK(*results[i] == "tok-1");
    CHECK(on_worker[i]);  // handlers run on the Context
  }
  CHECK(Runs(dir) == 1);

  // Cached now: answered at once, no run.
  Collector again(1);
  cfg.AsyncBearerToken(context, again.Handler(context));
  REQUIRE(again.Wait(2s));
  CHECK(*again.Results()[0] == "tok-1");
  CHECK(Runs(dir) == 1);
}

TEST_CASE("credentials: a credential near expiry is handed out while it is refreshed in the background",
          "[kube][credentials]") {
  TempDir dir;
  // 40 s of life: inside the 60 s refresh-ahead window, outside the 10 s slack.
  KubeConfig cfg = Load(SlowPluginConfig(dir, "0", "+40 seconds"));
  REQUIRE(*cfg.BearerToken() == "tok-1");  // the blocking path: no refresh ahead
  CHECK(*cfg.BearerToken() == "tok-1");
  CHECK(Runs(dir) == 1);
  Context context;
  Collector got(1);
  cfg.AsyncBearerToken(context, got.Handler(context));
  REQUIRE(got.Wait(5s));
  CHECK(*got.Results()[0] == "tok-1");  // still good: handed out at once
  // ... and the background refresh runs the plugin again: its token is handed out once it is in.
  std::string latest;
  auto until = std::chrono::steady_clock::now() + 10s;
  while (latest != "tok-2" && std::chrono::steady_clock::now() < until) {
    Collector after(1);
    cfg.AsyncBearerToken(context, after.Handler(context));
    REQUIRE(after.Wait(5s));
    REQUIRE(after.Results()[0]);
    latest = *after.Results()[0];
    if (latest != "tok-2") std::this_thread::sleep_for(20ms);
  }
  CHECK(latest == "tok-2");
  // At most one background refresh per credential, however many lookups: tok-2 (as short-lived)
  // may start one more, never one per lookup.
  for (int i = 0; i < 20; ++i) {
    Collector more(1);
    cfg.AsyncBearerToken(context, more.Handler(context));
    REQUIRE(more.Wait(5s));
  }
  std::this_thread::sleep_for(300ms);
  CHECK(Runs(dir) >= 2);
  CHECK(Runs(dir) <= 3);
}

TEST_CASE("credentials: failures reach the waiting callers, and invalidation does no I/O", "[kube][credentials]") {
  TempDir dir;
  std::string p = dir.File("bin/plugin.sh", "#!/bin/sh\necho 'error: login required' >&2\nexit 3\n");
  ::chmod(p.c_str(), 0755);
  KubeConfig cfg = Load(dir.File("config",
                                 "apiVersion: v1\nkind: Config\n"
                                 "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
                                 "users:\n- name: u\n  user:\n    exec:\n      apiVersion: "
                                 "client.authentication.k8s.io/v1\n      command: ./bin/plugin.sh\n"
                                 "      interactiveMode: Never\n"
                                 "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"));
  Context context;
  Collector got(3);
  for (int i = 0; i < 3; ++i) cfg.AsyncBearerToken(context, got.Handler(context));
  REQUIRE(got.Wait(10s));
  for (auto& r : got.Results()) {
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("exited with code 3") && Catch::Contains("login required"));
  }
  CHECK(cfg.InvalidateToken());  // a plugin may give another answer next time
}

TEST_CASE("credentials: a token file is re-read after invalidation, and static tokens need no refresh",
          "[kube][credentials]") {
  TempDir dir;
  dir.File("token", "file-tok-1\n");
  KubeConfig cfg = Load(dir.File("config",
                                 "apiVersion: v1\nkind: Config\n"
                                 "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
                                 "users:\n- name: u\n  user:\n    tokenFile: " + dir.path() + "/token\n"
                                 "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"));
  Context context;
  Collector first(1);
  cfg.AsyncBearerToken(context, first.Handler(context));
  REQUIRE(first.Wait(5s));
  CHECK(*first.Results()[0] == "file-tok-1");
  std::this_thread::sleep_for(20ms);
  dir.File("token", "file-tok-2-rotated\n");
  // Within the re-check interval the cached token is handed out; a 401 makes us look again.
  CHECK(cfg.InvalidateToken());
  Collector second(1);
  cfg.AsyncBearerToken(context, second.Handler(context));
  REQUIRE(second.Wait(5s));
  CHECK(*second.Results()[0] == "file-tok-2-rotated");

  KubeConfig fixed = KubeConfig::FromParts("https://127.0.0.1:1", {}, "static-tok");
  Collector third(1);
  fixed.AsyncBearerToken(context, third.Handler(context));
  REQUIRE(third.Wait(5s));
  CHECK(*third.Results()[0] == "static-tok");
  CHECK_FALSE(fixed.InvalidateToken());  // nothing else to try
}

TEST_CASE("credentials: a stopped Context gets its answer on the calling thread", "[kube][credentials]") {
  KubeConfig fixed = KubeConfig::FromParts("https://127.0.0.1:1", {}, "static-tok");
  Context context;
  context.Stop();
  std::optional<Result<std::string>> got;
  fixed.AsyncBearerToken(context, [&](Result<std::string> r) { got = std::move(r); });
  REQUIRE(got);
  CHECK(**got == "static-tok");
}

TEST_CASE("credentials: a caller whose Context is gone while the plugin runs is dropped, never called",
          "[kube][credentials]") {
  TempDir dir;
  KubeConfig cfg = Load(SlowPluginConfig(dir, "go", "+1 hour"));
  auto called = std::make_shared<std::atomic<int>>(0);
  {
    Context context;
    cfg.AsyncBearerToken(context, [called](Result<std::string>) { called->fetch_add(1); });
    // The plugin waits for bin/go: the Context ends with the refresh in flight.
  }
  dir.File("bin/go", "");
  // The refresh finishes and finds nobody to answer; a later caller gets the cached token.
  Context other;
  Collector got(1);
  cfg.AsyncBearerToken(other, got.Handler(other));
  REQUIRE(got.Wait(10s));
  REQUIRE(got.Results()[0]);
  CHECK(*got.Results()[0] == "tok-1");
  CHECK(called->load() == 0);
  CHECK(Runs(dir) == 1);
}
