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
  int ack_patches = 0;
  for (const auto& entry : fake.RequestLog()) {
    if (entry.value("method", "") == "PATCH" && entry.value("path", "").find("/sessions/chat") != std::string::npos) {
      ++ack_patches;
    }
  }
  CHECK(ack_patches == 2);  // the resume request and the acknowledgement
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
