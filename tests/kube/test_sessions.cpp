// SessionClient and WaitReady against the fake API server and its controller.
#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "kube_support.hpp"
#include "sessionturn/sessions.hpp"

using namespace sessionturn;
using nlohmann::json;
using sessionturn::testing_kube::FakeKube;

namespace {

// Generous: the fake's controller ticks every 50 ms, but this machine is shared and loaded.
constexpr auto kWait = std::chrono::seconds(20);

std::chrono::steady_clock::time_point In(std::chrono::steady_clock::duration d) {
  return std::chrono::steady_clock::now() + d;
}

json Named(const std::string& name, json spec = json::object()) {
  return {{"metadata", {{"name", name}}}, {"spec", spec}};
}

WaitReadyOptions FastPoll() {
  WaitReadyOptions o;
  o.poll_interval = std::chrono::milliseconds(100);
  return o;
}

}  // namespace

TEST_CASE("sessions: create, get, list by label, annotate, suspend, resume, delete", "[kube][sessions]") {
  FakeKube fake;
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  auto created = sessions.Create({{"metadata", {{"name", "s1"}, {"labels", {{"team", "blue"}}}}}});
  REQUIRE(created);
  CHECK(created->name == "s1");
  CHECK(created->namespace_name == "default");
  REQUIRE(sessions.Create(Named("s2")));

  auto blue = sessions.List("team=blue");
  REQUIRE(blue);
  REQUIRE(blue->size() == 1);
  CHECK((*blue)[0].name == "s1");
  auto all = sessions.List();
  REQUIRE(all);
  CHECK(all->size() == 2);

  auto annotated = sessions.Annotate("s1", {{"example.com/thread", "C1/1700"}, {"example.com/absent", std::nullopt}});
  REQUIRE(annotated);
  CHECK(annotated->annotations.at("example.com/thread") == "C1/1700");

  // A conflict on the guarded patch is retried with a fresh read.
  fake.Control("faults", {{"status", 409}, {"count", 1}, {"method", "PATCH"}});
  auto again = sessions.Annotate("s1", {{"example.com/thread", std::nullopt}});
  if (!again) FAIL(again.error().ToString());
  REQUIRE(again);
  CHECK(again->annotations.count("example.com/thread") == 0);

  auto suspended = sessions.Suspend("s1");
  REQUIRE(suspended);
  CHECK(suspended->suspend);
  auto resumed = sessions.Resume("s1");
  REQUIRE(resumed);
  CHECK_FALSE(resumed->suspend);
  CHECK_FALSE(resumed->raw["spec"].contains("suspend"));

  REQUIRE(sessions.Delete("s1"));
  auto gone = sessions.Get("s1");
  REQUIRE_FALSE(gone);
  CHECK(gone.error().code == Errc::not_found);
  auto missing = sessions.Delete("s1");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);
}

TEST_CASE("sessions: create from a SessionSpawner's template with its owner label", "[kube][sessions]") {
  FakeKube fake;
  KubeClient client(fake.Config());
  auto spawner = client.Post("/apis/kelos.dev/v1alpha2/namespaces/default/sessionspawners",
                             {{"metadata", {{"name", "slack"}}},
                              {"spec",
                               {{"sessionTemplate",
                                 {{"metadata", {{"labels", {{"app", "bot"}}}, {"annotations", {{"a", "1"}}}}},
                                  {"spec", {{"idlePolicy", {{"suspendAfterSeconds", 600}}}}}}}}}});
  REQUIRE(spawner);
  std::string uid = (*spawner)["metadata"]["uid"];
  SessionClient sessions(client, "default");
  auto s = sessions.CreateFromSpawner("slack", "slack-abc", {{"example.com/channel", "C1"}});
  REQUIRE(s);
  CHECK(s->labels.at(std::string(kSpawnerLabel)) == uid);
  CHECK(s->labels.at("app") == "bot");
  CHECK(s->annotations.at("a") == "1");
  CHECK(s->annotations.at("example.com/channel") == "C1");
  CHECK(s->raw["spec"]["idlePolicy"]["suspendAfterSeconds"] == 600);
  auto by_owner = sessions.List(std::string(kSpawnerLabel) + "=" + uid);
  REQUIRE(by_owner);
  CHECK(by_owner->size() == 1);

  auto none = sessions.CreateFromSpawner("no-such-spawner", "x");
  REQUIRE_FALSE(none);
  CHECK(none.error().code == Errc::not_found);
  CHECK_THAT(none.error().message, Catch::Contains("SessionSpawner default/no-such-spawner"));
}

TEST_CASE("sessions: WaitReady from Pending to Ready", "[kube][sessions][wait]") {
  FakeKube fake(/*ready_delay=*/0.5);
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  REQUIRE(sessions.Create(Named("p1")));
  std::vector<std::string> phases;
  WaitReadyOptions o = FastPoll();
  o.on_update = [&](const Session& s) { phases.push_back(s.phase); };
  auto ready = sessions.WaitReady("p1", In(kWait), o);
  REQUIRE(ready);
  CHECK(ready->pod_name == "p1-pod");
  CHECK(ready->resume_request.empty());
  CHECK(ready->session.IsReady());
  CHECK(phases.back() == "Ready");
  // The watch was used, narrowed to the one Session.
  bool watched = false;
  for (const auto& e : fake.RequestLog()) {
    std::string q = e["query"];
    if (q.find("watch=true") != std::string::npos && q.find("fieldSelector=metadata.name%3Dp1") != std::string::npos) {
      watched = true;
    }
  }
  CHECK(watched);
}

TEST_CASE("sessions: WaitReady keeps waiting through NotFound until the Session appears", "[kube][sessions][wait]") {
  FakeKube fake(/*ready_delay=*/0.2);
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  auto waiter = std::async(std::launch::async, [&] { return sessions.WaitReady("late", In(kWait), FastPoll()); });
  REQUIRE(waiter.wait_for(std::chrono::milliseconds(800)) == std::future_status::timeout);
  KubeClient other(fake.Config());
  SessionClient creator(other, "default");
  REQUIRE(creator.Create(Named("late")));
  REQUIRE(waiter.wait_for(kWait) == std::future_status::ready);
  auto ready = waiter.get();
  REQUIRE(ready);
  CHECK(ready->pod_name == "late-pod");
}

TEST_CASE("sessions: WaitReady ends on Failed and on owner suspension with the status message",
          "[kube][sessions][wait]") {
  FakeKube fake;
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  SECTION("Failed") {
    fake.Control("config", {{"controller", false}});
    REQUIRE(sessions.Create(Named("f1")));
    fake.Control("sessions/status", {{"name", "f1"}, {"status", {{"phase", "Failed"}, {"message", "image pull failed"}}}});
    auto r = sessions.WaitReady("f1", In(kWait), FastPoll());
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::failed);
    CHECK_THAT(r.error().message, Catch::Contains("default/f1") && Catch::Contains("image pull failed"));
  }
  SECTION("Failed while waiting") {
    fake.Control("config", {{"controller", false}});
    REQUIRE(sessions.Create(Named("f2")));
    fake.Control("sessions/status", {{"name", "f2"}, {"status", {{"phase", "Pending"}}}});
    auto waiter = std::async(std::launch::async, [&] { return sessions.WaitReady("f2", In(kWait), FastPoll()); });
    REQUIRE(waiter.wait_for(std::chrono::milliseconds(500)) == std::future_status::timeout);
    fake.Control("sessions/status", {{"name", "f2"}, {"status", {{"phase", "Failed"}, {"message", "OOMKilled"}}}});
    REQUIRE(waiter.wait_for(kWait) == std::future_status::ready);
    auto r = waiter.get();
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::failed);
    CHECK_THAT(r.error().message, Catch::Contains("OOMKilled"));
  }
  SECTION("owner-suspended") {
    REQUIRE(sessions.Create(Named("o1", {{"suspend", true}})));
    auto r = sessions.WaitReady("o1", In(kWait), FastPoll());
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::unavailable);
    CHECK_THAT(r.error().message, Catch::Contains("suspended by its owner"));
    // A client never resumes an owner's suspension.
    auto s = sessions.Get("o1");
    REQUIRE(s);
    CHECK(s->resume_request.empty());
  }
}

TEST_CASE("sessions: WaitReady resumes an idle-suspended Session and the acknowledgement follows",
          "[kube][sessions][wait][resume]") {
  FakeKube fake(/*ready_delay=*/0.3);
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  REQUIRE(sessions.Create(Named("idle")));
  REQUIRE(sessions.WaitReady("idle", In(kWait), FastPoll()));
  REQUIRE(sessions.Annotate("idle", {{std::string(kIdleResumeAckAnnotation), "old-ack"},
                                     {std::string(kIdleResumeAckTimeAnnotation), "2026-01-01T00:00:00Z"}}));
  fake.Control("idle-suspend", {{"name", "idle"}});
  auto before = sessions.Get("idle");
  REQUIRE(before);
  REQUIRE(before->IsIdleSuspended());
  CHECK_FALSE(before->IsOwnerSuspended());

  std::vector<std::string> phases;
  WaitReadyOptions o = FastPoll();
  o.on_update = [&](const Session& s) { phases.push_back(s.phase); };
  auto ready = sessions.WaitReady("idle", In(kWait), o);
  REQUIRE(ready);
  CHECK(ready->pod_name == "idle-pod");
  REQUIRE_FALSE(ready->resume_request.empty());
  CHECK(ready->resume_request.size() == 36);  // a UUID
  CHECK(std::find(phases.begin(), phases.end(), "Suspended") != phases.end());

  auto after = sessions.Get("idle");
  REQUIRE(after);
  CHECK(after->resume_request == ready->resume_request);
  // The request cleared the old acknowledgement in the same patch.
  CHECK(after->annotations.count(std::string(kIdleResumeAckAnnotation)) == 0);
  CHECK(after->annotations.count(std::string(kIdleResumeAckTimeAnnotation)) == 0);
  // The controller stamped the request time; a second request is a no-op that returns the same value.
  CHECK(after->annotations.count(std::string(kIdleResumeRequestTimeAnnotation)) == 1);
  auto same = sessions.RequestIdleResume("idle");
  REQUIRE(same);
  CHECK(*same == ready->resume_request);

  REQUIRE(sessions.Annotate("idle", {{std::string(kIdleResumeAckTimeAnnotation), "2026-01-01T00:00:00Z"}}));
  REQUIRE(sessions.AcknowledgeResume("idle", ready->resume_request));
  auto acked = sessions.Get("idle");
  REQUIRE(acked);
  CHECK(acked->resume_acknowledgement == ready->resume_request);
  CHECK(acked->annotations.count(std::string(kIdleResumeAckTimeAnnotation)) == 0);

  // With resume_idle off, an idle suspension is reported instead.
  fake.Control("idle-suspend", {{"name", "idle"}});
  REQUIRE(sessions.Annotate("idle", {{std::string(kIdleResumeRequestAnnotation), std::nullopt},
                                     {std::string(kIdleResumeRequestTimeAnnotation), std::nullopt}}));
  WaitReadyOptions no_resume = FastPoll();
  no_resume.resume_idle = false;
  auto r = sessions.WaitReady("idle", In(kWait), no_resume);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::unavailable);
  CHECK_THAT(r.error().message, Catch::Contains("idle"));
}

TEST_CASE("sessions: WaitReady polls when watches are refused, and honours its deadline", "[kube][sessions][wait]") {
  FakeKube fake(/*ready_delay=*/0.3);
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  SECTION("refused watch: polling finds Ready") {
    fake.Control("refuse-watches", {{"count", 100}});
    REQUIRE(sessions.Create(Named("polled")));
    auto ready = sessions.WaitReady("polled", In(kWait), FastPoll());
    REQUIRE(ready);
    CHECK(ready->pod_name == "polled-pod");
    int gets = 0;
    for (const auto& e : fake.RequestLog()) {
      if (e["method"] == "GET" && e["path"] == sessions.ObjectPath("polled")) ++gets;
    }
    CHECK(gets >= 1);
  }
  SECTION("deadline") {
    fake.Control("config", {{"controller", false}});
    REQUIRE(sessions.Create(Named("stuck")));
    fake.Control("sessions/status", {{"name", "stuck"}, {"status", {{"phase", "Pending"}, {"message", "no nodes"}}}});
    auto start = std::chrono::steady_clock::now();
    auto r = sessions.WaitReady("stuck", In(std::chrono::milliseconds(1200)), FastPoll());
    auto took = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::timeout);
    CHECK_THAT(r.error().message, Catch::Contains("Pending") && Catch::Contains("no nodes"));
    CHECK(took >= std::chrono::milliseconds(1100));
    CHECK(took < std::chrono::seconds(10));
  }
  SECTION("bad credentials end the wait at once") {
    KubeClient bad(fake.Config("wrong"));
    SessionClient unauth(bad, "default");
    auto r = unauth.WaitReady("anything", In(kWait), FastPoll());
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::unauthorized);
  }
}

TEST_CASE("sessions: Watch delivers typed Sessions", "[kube][sessions]") {
  FakeKube fake(/*ready_delay=*/0.2);
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  REQUIRE(sessions.Create(Named("typed")));
  std::vector<std::string> seen;
  KubeWatchOptions wo;
  wo.deadline = In(kWait);
  auto st = sessions.Watch(wo, [&](const std::string& type, const Session& s) {
    seen.push_back(type + ":" + s.name + ":" + s.phase);
    return !s.IsReady();
  });
  REQUIRE(st);
  REQUIRE(seen.size() >= 2);
  CHECK(seen.front().rfind("ADDED:typed:", 0) == 0);
  CHECK(seen.back() == "MODIFIED:typed:Ready");
}
