// KubeClient's async verbs and AsyncWatch against the fake API server: handlers on the Context's
// worker, many concurrent calls on one thread, cancelling, the client's destruction, watches that
// resume, re-list and stop; and the blocking Watch running its handler on the caller's thread.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "kube_support.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/kube.hpp"

using namespace sessionturn;
using nlohmann::json;
using sessionturn::testing_kube::FakeKube;

namespace {

const std::string kSessions = "/apis/kelos.dev/v1alpha2/namespaces/default/sessions";

json SessionObject(const std::string& name) {
  return {{"apiVersion", "kelos.dev/v1alpha2"}, {"kind", "Session"}, {"metadata", {{"name", name}}}, {"spec", json::object()}};
}

// A Result<T> handed over from a handler, with a bound on the wait.
template <typename T>
struct Outcome {
  std::promise<T> promise;
  std::future<T> future = promise.get_future();
  T Get(std::chrono::seconds bound = std::chrono::seconds(30)) {
    REQUIRE(future.wait_for(bound) == std::future_status::ready);
    return future.get();
  }
};

}  // namespace

TEST_CASE("kube client: async verbs on a caller's Context run their handlers on its worker", "[kube][client][async]") {
  FakeKube fake;
  Context ctx;
  KubeClient client(ctx, fake.Config());
  CHECK(&client.context() == &ctx);

  Outcome<std::pair<Result<json>, bool>> created;
  client.AsyncPost(kSessions, SessionObject("async-a"), [&](Result<json> r) {
    created.promise.set_value({std::move(r), ctx.InWorkerThread()});
  });
  auto [c, on_worker] = created.Get();
  REQUIRE(c);
  CHECK(on_worker);
  CHECK((*c)["metadata"]["name"] == "async-a");

  Outcome<Result<json>> patched;
  client.AsyncPatch(kSessions + "/async-a", json{{"metadata", {{"labels", {{"k", "v"}}}}}}, PatchType::merge,
                    [&](Result<json> r) { patched.promise.set_value(std::move(r)); });
  auto p = patched.Get();
  REQUIRE(p);
  CHECK((*p)["metadata"]["labels"]["k"] == "v");

  Outcome<Result<json>> got;
  client.AsyncGet(kSessions + "/async-a", [&](Result<json> r) { got.promise.set_value(std::move(r)); });
  auto g = got.Get();
  REQUIRE(g);
  CHECK((*g)["metadata"]["labels"]["k"] == "v");

  Outcome<Result<json>> deleted;
  client.AsyncDelete(kSessions + "/async-a", [&](Result<json> r) { deleted.promise.set_value(std::move(r)); });
  REQUIRE(deleted.Get());

  Outcome<Result<json>> missing;
  client.AsyncGet(kSessions + "/async-a", [&](Result<json> r) { missing.promise.set_value(std::move(r)); });
  auto m = missing.Get();
  REQUIRE_FALSE(m);
  CHECK(m.error().code == Errc::not_found);
  CHECK(m.error().http_status == 404);

  // The blocking verbs refuse on this Context's worker; on our thread they work.
  Outcome<Errc> refused;
  ctx.Post([&] {
    auto r = client.Get("/version");
    refused.promise.set_value(r ? Errc::ok : r.error().code);
  });
  CHECK(refused.Get() == Errc::would_block);
  CHECK(client.Get("/version"));
}

TEST_CASE("kube client: a client without a Context runs its own, and refuses blocking calls on it",
          "[kube][client][async]") {
  FakeKube fake;
  KubeClient client(fake.Config());
  Outcome<Errc> inner;
  client.AsyncGet("/version", [&](Result<json> r) {
    REQUIRE(r);
    CHECK(client.context().InWorkerThread());
    auto nested = client.Get("/version");  // would wait for the thread it is blocking
    inner.promise.set_value(nested ? Errc::ok : nested.error().code);
  });
  CHECK(inner.Get() == Errc::would_block);
}

TEST_CASE("kube client: 200 concurrent calls on one Context thread", "[kube][client][async][concurrency]") {
  FakeKube fake;
  Context ctx;  // one worker
  KubeClient client(ctx, fake.Config());
  constexpr int kCalls = 200;
  std::atomic<int> created{0}, read{0}, failed{0};
  std::atomic<int> left{kCalls};
  std::promise<void> all;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    std::string name = "many-" + std::to_string(i);
    client.AsyncPost(kSessions, SessionObject(name), [&, name](Result<json> r) {
      if (!r) {
        ++failed;
        if (--left == 0) all.set_value();
        return;
      }
      ++created;
      // A handler starts the next call: chained on the loop, no thread per call.
      client.AsyncGet(kSessions + "/" + name, [&, name](Result<json> g) {
        if (g && (*g)["metadata"]["name"] == name) {
          ++read;
        } else {
          ++failed;
        }
        if (--left == 0) all.set_value();
      });
    });
  }
  auto f = all.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(120)) == std::future_status::ready);
  INFO("took " << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count()
               << " ms");
  CHECK(failed == 0);
  CHECK(created == kCalls);
  CHECK(read == kCalls);
  auto list = client.Get(kSessions);
  REQUIRE(list);
  CHECK((*list)["items"].size() == static_cast<std::size_t>(kCalls));
}

TEST_CASE("kube client: cancelling a call, and destroying the client, end calls with cancelled",
          "[kube][client][async]") {
  FakeKube fake;
  Context ctx;
  SECTION("KubeCall::Cancel() during a Retry-After wait") {
    fake.Control("faults", {{"status", 503}, {"count", 5}, {"retry_after", 5}});
    KubeClient client(ctx, fake.Config());
    Outcome<Result<json>> out;
    auto start = std::chrono::steady_clock::now();
    KubeCall call = client.AsyncGet(kSessions, [&](Result<json> r) { out.promise.set_value(std::move(r)); });
    while (fake.RequestLog().empty() && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // now waiting out the 5 s
    call.Cancel();
    auto r = out.Get();
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::cancelled);
    CHECK_THAT(r.error().message, Catch::Contains("cancelled by the caller"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
    call.Cancel();  // after the end: nothing
  }
  SECTION("the client destroyed with a call and a watch in flight") {
    fake.Control("faults", {{"status", 503}, {"count", 5}, {"retry_after", 5}, {"path_contains", "/version"}});
    Outcome<Result<json>> call_out;
    Outcome<Status> watch_end;
    {
      KubeClient client(ctx, fake.Config());
      REQUIRE(client.Post(kSessions, SessionObject("held")));
      client.AsyncGet("/version", [&](Result<json> r) { call_out.promise.set_value(std::move(r)); });
      KubeWatchOptions wo;
      wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      Outcome<bool> first;
      std::atomic<bool> seen{false};
      client.AsyncWatch(
          kSessions, wo,
          [&](const WatchEvent&) {
            if (!seen.exchange(true)) first.promise.set_value(true);
            return true;
          },
          [&](Status st) { watch_end.promise.set_value(std::move(st)); });
      CHECK(first.Get());
    }
    auto c = call_out.Get();
    REQUIRE_FALSE(c);
    CHECK(c.error().code == Errc::cancelled);
    CHECK_THAT(c.error().message, Catch::Contains("KubeClient was destroyed"));
    auto w = watch_end.Get();
    REQUIRE_FALSE(w);
    CHECK(w.error().code == Errc::cancelled);
  }
}

TEST_CASE("kube client: AsyncWatch lists, streams, resumes, re-lists and stops", "[kube][client][async][watch]") {
  FakeKube fake(/*ready_delay=*/0.2);
  fake.Control("config", {{"bookmark_interval", 0.2}});
  Context ctx;
  KubeClient client(ctx, fake.Config());
  REQUIRE(client.Post(kSessions, SessionObject("aw1")));

  SECTION("ADDED from the list, the controller's MODIFIED, a BOOKMARK; Stop() silences it at once") {
    std::mutex mu;
    std::vector<std::string> types;
    std::string phase;
    Outcome<bool> ready;
    std::atomic<int> after_stop{0};
    std::atomic<bool> stopped{false};
    Outcome<Status> end;
    KubeWatchOptions wo;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    bool signalled = false;
    KubeWatch watch = client.AsyncWatch(
        kSessions, wo,
        [&](const WatchEvent& ev) {
          if (stopped) ++after_stop;
          std::lock_guard lock(mu);
          types.push_back(ev.type);
          if (ev.type == "MODIFIED") phase = ev.object["status"].value("phase", "");
          bool bookmark = std::find(types.begin(), types.end(), "BOOKMARK") != types.end();
          if (bookmark && phase == "Ready" && !signalled) {
            signalled = true;
            ready.promise.set_value(true);
          }
          return true;
        },
        [&](Status st) { end.promise.set_value(std::move(st)); });
    CHECK(watch.Active());
    CHECK(ready.Get());
    CHECK_FALSE(watch.ResourceVersion().empty());
    watch.Stop();
    stopped = true;
    // Events keep coming from the server (bookmarks every 200 ms): none reaches the handler now.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    CHECK(after_stop == 0);
    auto st = end.Get();
    CHECK(st);  // Stop() ends it with ok
    CHECK_FALSE(watch.Active());
    std::lock_guard lock(mu);
    REQUIRE(!types.empty());
    CHECK(types.front() == "ADDED");
  }
  SECTION("the server ends each watch after 1 s: it resumes from the last resourceVersion") {
    Outcome<bool> seen;
    Outcome<Status> end;
    KubeWatchOptions wo;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    wo.server_timeout = std::chrono::seconds(1);
    std::atomic<bool> creating{false};
    KubeWatch watch = client.AsyncWatch(
        kSessions, wo,
        [&](const WatchEvent& ev) {
          if (ev.type == "ADDED" && ev.object["metadata"].value("name", "") == "late") {
            seen.promise.set_value(true);
            return false;  // ends the watch: ok
          }
          return true;
        },
        [&](Status st) { end.promise.set_value(std::move(st)); });
    // Wait for the second watch request (the first was ended by the server), then create one.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto watches = [&] {
      int n = 0;
      for (const auto& e : fake.RequestLog()) n += std::string(e["query"]).find("watch=true") != std::string::npos;
      return n;
    };
    while (watches() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(watches() >= 2);
    REQUIRE(client.Post(kSessions, SessionObject("late")));
    CHECK(seen.Get());
    CHECK(end.Get());
    for (const auto& e : fake.RequestLog()) {
      std::string q = e["query"];
      if (q.find("watch=true") != std::string::npos) CHECK_THAT(q, Catch::Contains("resourceVersion="));
    }
  }
  SECTION("410 Gone re-lists: RELISTED, then the whole state as ADDED") {
    auto list = client.Get(kSessions);
    REQUIRE(list);
    std::string old_rv = (*list)["metadata"]["resourceVersion"];
    REQUIRE(client.Post(kSessions, SessionObject("aw2")));
    fake.Control("compact");
    std::vector<std::string> seen;
    Outcome<Status> end;
    KubeWatchOptions wo;
    wo.resource_version = old_rv;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    client.AsyncWatch(
        kSessions, wo,
        [&](const WatchEvent& ev) {
          seen.push_back(ev.type + ":" + (ev.object.contains("metadata") ? ev.object["metadata"].value("name", "") : ""));
          return seen.size() < 3;
        },
        [&](Status st) { end.promise.set_value(std::move(st)); });
    CHECK(end.Get());
    REQUIRE(seen.size() == 3);
    CHECK(seen[0] == "RELISTED:");
    CHECK(seen[1] == "ADDED:aw1");
    CHECK(seen[2] == "ADDED:aw2");
  }
  SECTION("the deadline ends it with timeout, and bad paths are refused") {
    Outcome<Status> end;
    KubeWatchOptions wo;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
    auto start = std::chrono::steady_clock::now();
    client.AsyncWatch(kSessions, wo, [](const WatchEvent&) { return true; },
                      [&](Status st) { end.promise.set_value(std::move(st)); });
    auto st = end.Get();
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::timeout);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));

    Outcome<Status> bad;
    client.AsyncWatch("no-slash", wo, [](const WatchEvent&) { return true; },
                      [&](Status s) { bad.promise.set_value(std::move(s)); });
    auto b = bad.Get();
    REQUIRE_FALSE(b);
    CHECK(b.error().code == Errc::invalid_argument);
  }
  SECTION("a refused watch ends with the API's error") {
    fake.Control("faults", {{"status", 403}, {"count", 1}, {"path_contains", "sessions"}, {"method", "GET"}});
    Outcome<Status> end;
    KubeWatchOptions wo;
    wo.resource_version = "1";  // no list: the watch request itself is refused
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    client.AsyncWatch(kSessions, wo, [](const WatchEvent&) { return true; },
                      [&](Status st) { end.promise.set_value(std::move(st)); });
    auto st = end.Get();
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::forbidden);
    CHECK(st.error().http_status == 403);
  }
}

TEST_CASE("kube client: the blocking Watch runs its handler on the calling thread", "[kube][client][watch]") {
  FakeKube fake;
  KubeClient client(fake.Config());
  REQUIRE(client.Post(kSessions, SessionObject("bw")));
  const auto me = std::this_thread::get_id();
  bool same_thread = false;
  bool nested_ok = false;
  KubeWatchOptions wo;
  wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto st = client.Watch(kSessions, wo, [&](const WatchEvent& ev) {
    same_thread = std::this_thread::get_id() == me;
    // As SessionClient::WaitReady does: a blocking call on the same client from the handler.
    auto r = client.Patch(kSessions + "/" + ev.object["metadata"].value("name", ""),
                          json{{"metadata", {{"annotations", {{"seen", "yes"}}}}}}, PatchType::merge);
    nested_ok = r.has_value();
    return false;
  });
  REQUIRE(st);
  CHECK(same_thread);
  CHECK(nested_ok);
}
