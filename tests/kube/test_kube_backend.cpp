// The Kubernetes side on one event loop: AsyncWaitReady (many at once on one thread, cancelled, a
// watch cut by a compaction), the Session connector resolving the Pod on every connect, and the
// KubernetesBackend (spawner and template ownership, WaitReady to a turn, suspend/resume, list).
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "kube_support.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/sessions.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using nlohmann::json;
using sessionturn::testing_kube::FakeKube;
using sessionturn::testing_kube::TempDir;

namespace {

constexpr auto kWait = std::chrono::seconds(30);

std::chrono::steady_clock::time_point In(std::chrono::steady_clock::duration d) {
  return std::chrono::steady_clock::now() + d;
}

json Named(const std::string& name) { return {{"metadata", {{"name", name}}}, {"spec", json::object()}}; }

std::unique_ptr<testing::LocalRuntime> Runtime(const TempDir& dir, const std::string& name) {
  testing::LocalRuntimeOptions ro;
  ro.socket_path = dir.path() + "/" + name + ".sock";
  ro.echo_delay = std::chrono::milliseconds(0);
  ro.session_name = name;
  auto rt = testing::LocalRuntime::Start(ro);
  REQUIRE(rt);
  return std::move(*rt);
}

SessionDriverOptions Fast() {
  SessionDriverOptions o;
  o.wait.poll_interval = std::chrono::milliseconds(100);
  o.wait_ready_timeout = kWait;
  return o;
}

}  // namespace

TEST_CASE("kube async: 200 concurrent AsyncWaitReady on one Context thread", "[kube][wait][async]") {
  FakeKube fake(/*ready_delay=*/0.5);
  Context context;  // one worker does all of it
  KubeClient client(context, fake.Config());
  SessionClient sessions(client, "default");
  constexpr int kSessions = 200;
  std::mutex mu;
  std::vector<Result<ReadySession>> results;
  std::promise<void> all;
  for (int i = 0; i < kSessions; ++i) {
    REQUIRE(sessions.Create(Named("many-" + std::to_string(i))));
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kSessions; ++i) {
    WaitReadyOptions o;
    o.poll_interval = std::chrono::milliseconds(200);
    sessions.AsyncWaitReady("many-" + std::to_string(i), In(kWait), o, [&](Result<ReadySession> r) {
      std::lock_guard lock(mu);
      results.push_back(std::move(r));
      if (results.size() == kSessions) all.set_value();
    });
  }
  REQUIRE(all.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  const auto took = std::chrono::steady_clock::now() - start;
  std::lock_guard lock(mu);
  int ready = 0;
  for (auto& r : results) {
    if (r) {
      ++ready;
    } else {
      FAIL_CHECK(r.error().ToString());
    }
  }
  CHECK(ready == kSessions);
  CHECK(context.threads() == 1);
  INFO("200 waits took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  CHECK(took < std::chrono::seconds(30));
}

TEST_CASE("kube async: AsyncWaitReady is cancelled, and survives a compaction (410) mid-wait", "[kube][wait][async]") {
  FakeKube fake(/*ready_delay=*/0.3);
  Context context;
  KubeClient client(context, fake.Config());
  SessionClient sessions(client, "default");
  SECTION("cancel") {
    fake.Control("config", {{"controller", false}});
    REQUIRE(sessions.Create(Named("never")));
    CancellationSource source;
    WaitReadyOptions o;
    o.cancel = source.Token();
    std::promise<Result<ReadySession>> done;
    sessions.AsyncWaitReady("never", In(kWait), o, [&](Result<ReadySession> r) { done.set_value(std::move(r)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    source.Cancel();
    auto f = done.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    auto r = f.get();
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::cancelled);
    CHECK_THAT(r.error().message, Catch::Contains("default/never"));
  }
  SECTION("compaction, then NotFound, then created and Ready") {
    std::promise<Result<ReadySession>> done;
    std::atomic<int> updates{0};
    WaitReadyOptions o;
    o.on_update = [&](const Session&) { ++updates; };
    sessions.AsyncWaitReady("later", In(kWait), o, [&](Result<ReadySession> r) { done.set_value(std::move(r)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    REQUIRE(sessions.Create(Named("unrelated")));  // moves the resourceVersion on
    fake.Control("compact");                      // the open watch's position is gone: 410 on resume
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    REQUIRE(sessions.Create(Named("later")));
    auto f = done.get_future();
    REQUIRE(f.wait_for(kWait) == std::future_status::ready);
    auto r = f.get();
    REQUIRE(r);
    CHECK(r->pod_name == "later-pod");
    CHECK(updates >= 1);
  }
}

TEST_CASE("kube async: the Session connector finds the new Pod after a restart and acknowledges a resume once",
          "[kube][session_driver][async]") {
  FakeKube fake(/*ready_delay=*/0.2);
  TempDir dir;
  auto first = Runtime(dir, "first");
  auto second = Runtime(dir, "second");
  Context context;
  KubeClient client(context, fake.Config());
  SessionClient sessions(client, "default");
  REQUIRE(sessions.Create(Named("moving")));
  fake.Control("pods", {{"name", "moving-pod"}, {"socket", first->socket_path()}});
  auto ready = sessions.WaitReady("moving", In(kWait));
  REQUIRE(ready);
  Driver driver(context, MakeSessionConnector(context, fake.Config(), "default", "moving", *ready, Fast()));
  auto one = driver.SubmitTurn("to the first pod");
  REQUIRE(one);
  CHECK(one->status == TurnStatus::completed);
  CHECK(first->JournalEvents().size() > 0);
  const auto first_events = first->JournalEvents().size();

  // The Pod is replaced (same Session, new Pod with its own runtime).
  fake.Control("pods", {{"name", "moving-pod-2"}, {"socket", second->socket_path()}});
  fake.Control("sessions/status", {{"name", "moving"}, {"status", {{"podName", "moving-pod-2"}}}});
  auto two = driver.SubmitTurn("to the second pod");
  REQUIRE(two);
  CHECK(two->status == TurnStatus::completed);
  CHECK_THAT(two->text, Catch::Contains("to the second pod"));
  CHECK(first->JournalEvents().size() == first_events);  // nothing more went to the old Pod

  // Idle suspension between turns: the next connect requests the resume, and the acknowledgement
  // follows that connection's replay.
  fake.Control("pods", {{"name", "moving-pod"}, {"socket", first->socket_path()}});
  fake.Control("idle-suspend", {{"name", "moving"}});
  auto three = driver.SubmitTurn("after the idle suspension");
  REQUIRE(three);
  CHECK(three->status == TurnStatus::completed);
  bool acked = false;
  for (int i = 0; i < 200 && !acked; ++i) {
    auto s = sessions.Get("moving");
    acked = s && !s->resume_request.empty() && s->resume_acknowledgement == s->resume_request;
    if (!acked) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(acked);
}

TEST_CASE("kube backend: a spawner's Sessions, ownership, WaitReady to a turn, suspend and resume, list",
          "[kube][backend]") {
  FakeKube fake(/*ready_delay=*/0.2);
  TempDir dir;
  auto runtime = Runtime(dir, "chat-1");
  Context context;
  KubeClient admin(context, fake.Config());
  auto spawner = admin.Post("/apis/kelos.dev/v1alpha2/namespaces/default/sessionspawners",
                            {{"metadata", {{"name", "bot"}}},
                             {"spec",
                              {{"sessionTemplate",
                                {{"metadata", {{"labels", {{"app", "bot"}}}}}, {"spec", {{"x", 1}}}}}}}});
  REQUIRE(spawner);
  const std::string uid = (*spawner)["metadata"]["uid"];
  KubernetesBackendOptions options;
  options.spawner = "bot";
  options.session = Fast();
  auto backend = MakeKubernetesBackend(context, fake.Config(), options);
  REQUIRE(backend);
  CHECK_THAT((*backend)->Describe(), Catch::Contains("spawner bot"));

  SessionSpec spec;
  spec.labels["thread"] = "t1";
  spec.annotations["example.com/chat"] = "C1";
  auto made = (*backend)->Ensure("chat-1", spec);
  REQUIRE(made);
  CHECK(made->created);
  CHECK(made->info.labels.at(std::string(kSpawnerLabel)) == uid);
  CHECK(made->info.labels.at("app") == "bot");
  CHECK(made->info.labels.at("thread") == "t1");
  CHECK(made->info.annotations.at("example.com/chat") == "C1");
  auto raw = admin.Get("/apis/kelos.dev/v1alpha2/namespaces/default/sessions/chat-1");
  REQUIRE(raw);
  REQUIRE((*raw)["metadata"]["ownerReferences"].size() == 1);
  CHECK((*raw)["metadata"]["ownerReferences"][0]["uid"] == uid);
  CHECK((*raw)["metadata"]["ownerReferences"][0]["kind"] == "SessionSpawner");
  CHECK((*raw)["spec"]["x"] == 1);
  auto again = (*backend)->Ensure("chat-1", spec);
  REQUIRE(again);
  CHECK_FALSE(again->created);

  // Someone else's Session of the same name is refused, naming its owner.
  SessionClient raw_sessions(admin, "default");
  REQUIRE(raw_sessions.Create({{"metadata", {{"name", "theirs"}, {"labels", {{std::string(kSpawnerLabel), "other-uid"}}}}},
                               {"spec", json::object()}}));
  auto refused = (*backend)->Ensure("theirs", spec);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::forbidden);
  CHECK_THAT(refused.error().message, Catch::Contains("other-uid"));
  SessionSpec bad;
  bad.parameters["provider"] = "echo";
  auto bad_param = (*backend)->Ensure("chat-2", bad);
  REQUIRE_FALSE(bad_param);
  CHECK(bad_param.error().code == Errc::invalid_argument);
  CHECK_THAT(bad_param.error().message, Catch::Contains("provider"));

  fake.Control("pods", {{"name", "chat-1-pod"}, {"socket", runtime->socket_path()}});
  std::vector<std::string> stages;
  std::mutex mu;
  auto target = (*backend)->WaitReady("chat-1", In(kWait), [&](const SessionInfo&, std::string_view stage) {
    std::lock_guard lock(mu);
    stages.emplace_back(stage);
  });
  REQUIRE(target);
  CHECK(target->info.phase == SessionPhase::ready);
  CHECK(target->info.details.at("pod") == "chat-1-pod");
  Driver driver(context, target->connector);
  auto turn = driver.SubmitTurn("hello backend");
  REQUIRE(turn);
  CHECK(turn->status == TurnStatus::completed);

  auto listed = (*backend)->List("thread=t1");
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK(listed->front().name == "chat-1");
  auto bad_selector = (*backend)->List("thread!=t1");
  REQUIRE_FALSE(bad_selector);
  CHECK(bad_selector.error().code == Errc::invalid_argument);

  auto suspended = (*backend)->Suspend("chat-1");
  REQUIRE(suspended);
  CHECK(suspended->suspended == SuspendReason::owner);
  auto refused_wait = (*backend)->WaitReady("chat-1", In(kWait));
  REQUIRE_FALSE(refused_wait);
  CHECK(refused_wait.error().code == Errc::unavailable);
  CHECK_THAT(refused_wait.error().message, Catch::Contains("owner"));
  REQUIRE((*backend)->Resume("chat-1"));
  auto back = (*backend)->WaitReady("chat-1", In(kWait));
  REQUIRE(back);

  auto annotated = (*backend)->Annotate("chat-1", {{"example.com/chat", std::nullopt}, {"k", "v"}});
  REQUIRE(annotated);
  CHECK(annotated->annotations.count("example.com/chat") == 0);
  CHECK(annotated->annotations.at("k") == "v");
  REQUIRE((*backend)->Delete("chat-1"));
  auto gone = (*backend)->Get("chat-1");
  REQUIRE_FALSE(gone);
  CHECK(gone.error().code == Errc::not_found);
  auto bad_name = (*backend)->Get("Not_A_Name");
  REQUIRE_FALSE(bad_name);
  CHECK(bad_name.error().code == Errc::invalid_argument);
}

TEST_CASE("kube backend: Sessions from a YAML template file keep their types and their owner", "[kube][backend]") {
  FakeKube fake(/*ready_delay=*/0.2);
  TempDir dir;
  std::string path = dir.File("template.yaml",
                              "metadata:\n  labels:\n    team: core\nspec:\n  worker:\n    type: claude-code\n"
                              "  idlePolicy:\n    suspendAfterSeconds: 600\n    enabled: true\n  note: \"600\"\n");
  Context context;
  KubernetesBackendOptions options;
  options.template_file = path;
  options.owner = "bot-a";
  options.session = Fast();
  auto backend = MakeKubernetesBackend(context, fake.Config(), options);
  REQUIRE(backend);
  auto made = (*backend)->Ensure("from-file", {});
  REQUIRE(made);
  CHECK(made->created);
  CHECK(made->info.labels.at("team") == "core");
  CHECK(made->info.labels.at(std::string(kLocalOwnerLabel)) == "bot-a");
  KubeClient admin(context, fake.Config());
  auto raw = admin.Get("/apis/kelos.dev/v1alpha2/namespaces/default/sessions/from-file");
  REQUIRE(raw);
  CHECK((*raw)["spec"]["idlePolicy"]["suspendAfterSeconds"] == 600);  // a number, not "600"
  CHECK((*raw)["spec"]["idlePolicy"]["enabled"] == true);
  CHECK((*raw)["spec"]["note"] == "600");  // quoted: a string

  options.owner = "bot-b";
  auto other = MakeKubernetesBackend(context, fake.Config(), options);
  REQUIRE(other);
  auto refused = (*other)->Ensure("from-file", {});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::forbidden);
  CHECK_THAT(refused.error().message, Catch::Contains("bot-a") && Catch::Contains("bot-b"));

  options.template_file = dir.path() + "/missing.yaml";
  auto missing = MakeKubernetesBackend(context, fake.Config(), options);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::invalid_argument);
  CHECK_THAT(missing.error().message, Catch::Contains("missing.yaml"));

  // Labels or annotations that are not a map are refused when the backend is made, not on first use.
  for (const char* bad : {"metadata:\n  labels: core\nspec: {}\n", "metadata:\n  annotations: [a, b]\nspec: {}\n"}) {
    options.template_file = dir.File("bad.yaml", bad);
    auto refused_template = MakeKubernetesBackend(context, fake.Config(), options);
    REQUIRE_FALSE(refused_template);
    CHECK(refused_template.error().code == Errc::invalid_argument);
    CHECK_THAT(refused_template.error().message, Catch::Contains("bad.yaml") && Catch::Contains("is not a map"));
  }
}
