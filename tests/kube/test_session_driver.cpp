// ForSession: WaitReady (waking an idle Session) + pods/exec + the resume acknowledgement after the
// first replay, end to end through the fake API server to a local runtime.
#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "kube/kube_support.hpp"
#include "sessionturn/session_driver.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using sessionturn::testing_kube::FakeKube;
using sessionturn::testing_kube::TempDir;
using nlohmann::json;

namespace {

constexpr auto kWait = std::chrono::seconds(20);

SessionDriverOptions Fast() {
  SessionDriverOptions o;
  o.wait.poll_interval = std::chrono::milliseconds(100);
  o.wait_ready_timeout = kWait;
  return o;
}

// Waits until `pred` holds for the Session, or the deadline.
template <typename Pred>
bool Eventually(SessionClient& sessions, const std::string& name, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < until) {
    auto s = sessions.Get(name);
    if (s && pred(*s)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Waits until the fake's request log holds an entry matching `pred`.
template <typename Pred>
bool EventuallyLogged(FakeKube& fake, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < until) {
    for (const auto& e : fake.RequestLog()) {
      if (pred(e)) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

TEST_CASE("ForSession wakes an idle Session, runs a turn over pods/exec and acknowledges after the replay",
          "[kube][session_driver]") {
  FakeKube fake(/*ready_delay=*/0.2);
  TempDir dir;
  testing::LocalRuntimeOptions ro;
  ro.socket_path = dir.path() + "/runtime.sock";
  ro.echo_delay = std::chrono::milliseconds(0);
  auto runtime = testing::LocalRuntime::Start(ro);
  REQUIRE(runtime);

  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  REQUIRE(sessions.Create({{"metadata", {{"name", "chat"}}}, {"spec", json::object()}}));
  fake.Control("pods", {{"name", "chat-pod"}, {"socket", ro.socket_path}});
  REQUIRE(sessions.WaitReady("chat", std::chrono::steady_clock::now() + kWait, Fast().wait));
  fake.Control("idle-suspend", {{"name", "chat"}});

  Context ctx;
  auto sd = ForSession(ctx, fake.Config(), "", "chat", Fast());
  REQUIRE(sd);
  CHECK(sd->pod_name == "chat-pod");
  REQUIRE_FALSE(sd->resume_request.empty());
  // Not acknowledged before a connection has seen the runtime's replay.
  auto before = sessions.Get("chat");
  REQUIRE(before);
  CHECK(before->resume_acknowledgement.empty());

  auto turn = sd->driver->SubmitTurn("hello from the cluster");
  REQUIRE(turn);
  CHECK(turn->status == TurnStatus::completed);
  CHECK_THAT(turn->text, Catch::Contains("hello from the cluster"));
  const std::string request = sd->resume_request;
  CHECK(Eventually(sessions, "chat", [&](const Session& s) { return s.resume_acknowledgement == request; }));
  // Exactly one acknowledgement, even after a second turn.
  auto second = sd->driver->SubmitTurn("again");
  REQUIRE(second);
  CHECK(second->status == TurnStatus::completed);
  auto patches = [&] {
    int n = 0;
    for (const auto& entry : fake.RequestLog()) {
      if (entry.value("method", "") == "PATCH" && entry.value("path", "").find("/sessions/chat") != std::string::npos) {
        ++n;
      }
    }
    return n;
  };
  // The resume request and the acknowledgement (the annotation is set, so both PATCHes were answered;
  // give the log a moment to record them).
  for (int i = 0; i < 100 && patches() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(patches() == 2);
}

TEST_CASE("ForSession reports Failed and owner-suspended Sessions, and refuses to block a worker",
          "[kube][session_driver]") {
  FakeKube fake(/*ready_delay=*/0.2);
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  Context ctx;

  REQUIRE(sessions.Create({{"metadata", {{"name", "broken"}}}, {"spec", json::object()}}));
  fake.Control("sessions/status", {{"name", "broken"}, {"status", {{"phase", "Failed"}, {"message", "image pull failed"}}}});
  auto failed = ForSession(ctx, fake.Config(), "default", "broken", Fast());
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == Errc::failed);
  CHECK_THAT(failed.error().message, Catch::Contains("image pull failed"));

  REQUIRE(sessions.Create({{"metadata", {{"name", "owned"}}}, {"spec", {{"suspend", true}}}}));
  auto owned = ForSession(ctx, fake.Config(), "default", "owned", Fast());
  REQUIRE_FALSE(owned);
  CHECK(owned.error().code == Errc::unavailable);

  std::promise<Errc> code;
  ctx.Post([&] {
    auto r = ForSession(ctx, fake.Config(), "default", "owned", Fast());
    code.set_value(r ? Errc::ok : r.error().code);
  });
  CHECK(code.get_future().get() == Errc::would_block);

  auto empty = ForSession(ctx, fake.Config(), "default", "", Fast());
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == Errc::invalid_argument);
}

namespace {

// A Ready Session "NAME" whose Pod is bridged to a fresh LocalRuntime.
struct ReadySessionFixture {
  FakeKube fake{0.1};
  TempDir dir;
  std::unique_ptr<testing::LocalRuntime> runtime;
  explicit ReadySessionFixture(const std::string& name) {
    testing::LocalRuntimeOptions ro;
    ro.socket_path = dir.path() + "/runtime.sock";
    auto rt = testing::LocalRuntime::Start(ro);
    REQUIRE(rt);
    runtime = std::move(*rt);
    KubeClient client(fake.Config());
    SessionClient sessions(client, "default");
    REQUIRE(sessions.Create({{"metadata", {{"name", name}}}, {"spec", json::object()}}));
    fake.Control("pods", {{"name", name + "-pod"}, {"socket", ro.socket_path}});
  }
};

}  // namespace

TEST_CASE("ForSession: a whole turn over TLS on v4 when the server offers only v4", "[kube][session_driver]") {
  ReadySessionFixture f("v4only");
  f.fake.Control("exec-faults", {{"protocols", json::array({"v4.channel.k8s.io"})}});
  Context ctx;
  auto sd = ForSession(ctx, f.fake.Config(), "default", "v4only", Fast());
  REQUIRE(sd);
  auto turn = sd->driver->SubmitTurn("over v4");
  REQUIRE(turn);
  CHECK(turn->status == TurnStatus::completed);
  CHECK(turn->text == "echo #1: over v4");
  // The exec was upgraded (the server offered v4 only, so it was v4). The fake logs a request when its
  // handler returns, which for an exec is after the stream ended: wait for the entry.
  CHECK(EventuallyLogged(f.fake, [](const json& e) {
    return e.value("path", "").find("/exec") != std::string::npos && e.value("status", 0) == 101;
  }));
}

TEST_CASE("ForSession: exec streams dropped by the server mid-turn are resumed with nothing lost",
          "[kube][session_driver]") {
  ReadySessionFixture f("flaky");
  Context ctx;
  auto sd = ForSession(ctx, f.fake.Config(), "default", "flaky", Fast());
  REQUIRE(sd);
  // The undisturbed reply first, for comparison.
  auto clean = sd->driver->SubmitTurn("the same prompt");
  REQUIRE(clean);
  REQUIRE(clean->status == TurnStatus::completed);
  // Every exec from now on is cut after 900 bytes: the turn needs several streams to finish.
  f.fake.Control("exec-faults", {{"drop_after_bytes", 900}});
  TurnOptions o;
  o.reconnect.max_attempts = 10;
  o.reconnect.initial_backoff = std::chrono::milliseconds(20);
  std::vector<std::int64_t> ids;
  o.on_event = [&](const Event& e) {
    if (e.id > 0) ids.push_back(e.id);
  };
  auto turn = sd->driver->SubmitTurn("the same prompt", o);
  REQUIRE(turn);
  CHECK(turn->status == TurnStatus::completed);
  CHECK(turn->reconnects >= 1);
  CHECK(turn->text == "echo #2: the same prompt");
  // No event delivered twice, in order.
  CHECK(std::is_sorted(ids.begin(), ids.end()));
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
}
