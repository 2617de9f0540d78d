// The KubeClient's blocking verbs run on the calling thread (issue 14): with the Context's only worker
// held busy, Get/Post/Patch/Delete and a Watch still complete, the watch's handler runs on the caller,
// a handler may make blocking calls on the same client, and a Context stopped under a blocking watch
// ends it.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "kube_support.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/kube.hpp"
#include "support/busy_worker.hpp"

using namespace sessionturn;
using nlohmann::json;
using sessionturn::testing_kube::FakeKube;
using sessionturn::testing_support::BusyWorker;

namespace {

const std::string kSessions = "/apis/kelos.dev/v1alpha2/namespaces/default/sessions";

json SessionObject(const std::string& name) {
  return {{"apiVersion", "kelos.dev/v1alpha2"}, {"kind", "Session"}, {"metadata", {{"name", name}}}, {"spec", json::object()}};
}

}  // namespace

TEST_CASE("kube client: blocking verbs complete while the Context's only worker is busy", "[kube][client][caller]") {
  FakeKube fake;
  Context ctx;  // one worker
  KubeClient client(ctx, fake.Config());
  BusyWorker busy(ctx);

  auto v = client.Get("/version");
  REQUIRE(v);
  CHECK((*v)["gitVersion"] == "v1.32.0-fake");
  REQUIRE(client.Post(kSessions, SessionObject("caller-a")));
  auto patched = client.Patch(kSessions + "/caller-a", json{{"metadata", {{"labels", {{"k", "v"}}}}}}, PatchType::merge);
  REQUIRE(patched);
  CHECK((*patched)["metadata"]["labels"]["k"] == "v");
  auto missing = client.Get(kSessions + "/absent");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);

  // The watch's handler runs on this thread, as each event is read.
  const auto me = std::this_thread::get_id();
  bool on_caller = true;
  int events = 0;
  KubeWatchOptions wo;
  wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto st = client.Watch(kSessions, wo, [&](const WatchEvent& ev) {
    on_caller = on_caller && std::this_thread::get_id() == me;
    ++events;
    return ev.object["metadata"].value("name", "") != "caller-a";
  });
  REQUIRE(st);
  CHECK(events >= 1);
  CHECK(on_caller);
  REQUIRE(client.Delete(kSessions + "/caller-a"));

  // Nothing of the above went through the worker: it is still held.
  std::atomic<bool> ran{false};
  ctx.Post([&] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(ran);
  busy.Release();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ran && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(ran);
}

TEST_CASE("kube client: a blocking watch's handler makes blocking calls on the same client",
          "[kube][client][caller][watch]") {
  FakeKube fake;
  KubeClient client(fake.Config());
  for (const char* name : {"nest-a", "nest-b"}) REQUIRE(client.Post(kSessions, SessionObject(name)));
  std::vector<std::string> seen;
  KubeWatchOptions wo;
  wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto st = client.Watch(kSessions, wo, [&](const WatchEvent& ev) {
    std::string name = ev.object["metadata"].value("name", "");
    auto again = client.Get(kSessions + "/" + name);  // nested: a lane of its own on this thread
    REQUIRE(again);
    seen.push_back((*again)["metadata"].value("name", ""));
    return seen.size() < 2;
  });
  REQUIRE(st);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == "nest-a");
  CHECK(seen[1] == "nest-b");
  // And the thread's lane still works after the nested ones were made and dropped.
  CHECK(client.Get(kSessions + "/nest-a"));
}

TEST_CASE("kube client: a Context stopped under a blocking watch ends it", "[kube][client][caller][watch]") {
  FakeKube fake;
  Context ctx;
  KubeClient client(ctx, fake.Config());
  KubeWatchOptions wo;
  wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::atomic<bool> listed{false};
  std::thread stopper([&] {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!listed && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ctx.Stop();
  });
  REQUIRE(client.Post(kSessions, SessionObject("stop-a")));
  const auto started = std::chrono::steady_clock::now();
  auto st = client.Watch(kSessions, wo, [&](const WatchEvent&) {
    listed = true;
    return true;
  });
  stopper.join();
  REQUIRE_FALSE(st);
  CHECK(st.error().code == Errc::cancelled);
  CHECK_THAT(st.error().message, Catch::Contains("Context was stopped"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
}

TEST_CASE("kube client: blocking calls from many threads, more than a client keeps lanes for",
          "[kube][client][caller][concurrency]") {
  FakeKube fake;
  Context ctx;
  KubeClient client(ctx, fake.Config());
  constexpr int kThreads = 20, kEach = 5;  // past http::Lanes::kMaxLanes (16): some calls get a lane of their own
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        if (client.Get("/version")) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == kThreads * kEach);
}

TEST_CASE("kube client: destroying the client ends a blocking watch, and a watch inside its handler, on another thread",
          "[kube][client][caller][watch][lifetime]") {
  FakeKube fake;
  Context ctx;
  auto client = std::make_unique<KubeClient>(ctx, fake.Config());
  KubeClient* raw = client.get();  // the watcher's calls are made before the client goes
  REQUIRE(client->Post(kSessions, SessionObject("gone-a")));
  std::promise<Status> ended;
  std::atomic<bool> inner_streaming{false};
  Result<json> nested = json();
  std::thread watcher([&] {
    KubeWatchOptions wo;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    ended.set_value(raw->Watch(kSessions, wo, [&](const WatchEvent&) {
      // A blocking watch inside the handler, on the thread's next lane: it runs until the client goes.
      KubeWatchOptions inner;
      inner.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      auto st = raw->Watch(kSessions, inner, [&](const WatchEvent&) {
        inner_streaming = true;
        return true;
      });
      nested = st ? Result<json>(json()) : Result<json>(Fail(st.error()));
      return true;
    }));
  });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!inner_streaming && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(inner_streaming);
  const auto t0 = std::chrono::steady_clock::now();
  client.reset();
  const auto took = std::chrono::steady_clock::now() - t0;
  auto f = ended.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  watcher.join();
  auto st = f.get();
  REQUIRE_FALSE(st);
  CHECK(st.error().code == Errc::cancelled);
  REQUIRE_FALSE(nested);
  CHECK(nested.error().code == Errc::cancelled);
  CHECK(took < std::chrono::seconds(4));
}
