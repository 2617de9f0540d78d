// The fake API server proven against the real kubectl: kubectl and KubeClient/SessionClient see
// and make the same changes.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <thread>

#include "kube_support.hpp"
#include "sessionturn/sessions.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using nlohmann::json;
using sessionturn::testing_kube::FakeKube;
using sessionturn::testing_kube::Shell;
using sessionturn::testing_kube::Slurp;

namespace {

bool HaveKubectl() { return Shell("command -v kubectl").first == 0; }

// Catch2 v2 has no SKIP. Without kubectl a test says so with the marker that tests/CMakeLists.txt
// gives ctest as SKIP_REGULAR_EXPRESSION, so ctest reports it as skipped rather than passed.
#define SKIP_WITHOUT_KUBECTL()                                                  \
  do {                                                                          \
    if (!HaveKubectl()) {                                                       \
      WARN("SESSIONTURN_TEST_SKIPPED: kubectl is not installed (not on PATH)"); \
      return;                                                                   \
    }                                                                           \
  } while (false)

// kubectl with its own kubeconfig and discovery cache (so nothing leaks between runs or into $HOME).
class Kubectl {
 public:
  explicit Kubectl(const FakeKube& fake, const std::string& token = FakeKube::kToken)
      : base_("kubectl --kubeconfig " + fake.WriteKubeconfig("kubeconfig-" + token, token) + " --cache-dir " +
              fake.dir().path() + "/kubectl-cache --request-timeout=30s ") {}
  std::pair<int, std::string> Run(const std::string& args) const { return Shell(base_ + args); }
  const std::string& base() const { return base_; }

 private:
  std::string base_;
};

}  // namespace

TEST_CASE("kubectl against the fake: get, patch, annotate, delete agree with our client", "[kube][kubectl]") {
  SKIP_WITHOUT_KUBECTL();
  FakeKube fake(/*ready_delay=*/0.2);
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  REQUIRE(sessions.Create({{"metadata", {{"name", "shared"}, {"labels", {{"team", "blue"}}}}}}));
  REQUIRE(sessions.WaitReady("shared", std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  Kubectl kubectl(fake);

  auto [rc_raw, raw] = kubectl.Run("get --raw /apis/kelos.dev/v1alpha2");
  REQUIRE(rc_raw == 0);
  CHECK(json::parse(raw)["resources"][0]["name"] == "sessions");

  auto [rc_get, table] = kubectl.Run("get sessions.kelos.dev");
  INFO(table);
  REQUIRE(rc_get == 0);
  CHECK_THAT(table, Catch::Contains("shared") && Catch::Contains("Ready") && Catch::Contains("shared-pod"));

  auto [rc_sel, selected] = kubectl.Run("get sessions -l team=blue -o name");
  REQUIRE(rc_sel == 0);
  CHECK(selected == "session.kelos.dev/shared\n");
  auto [rc_none, none] = kubectl.Run("get sessions -l team=red -o name");
  REQUIRE(rc_none == 0);
  CHECK(none.find("shared") == std::string::npos);

  auto [rc_json, text] = kubectl.Run("get session shared -o json");
  REQUIRE(rc_json == 0);
  json from_kubectl = json::parse(text);
  auto ours = sessions.Get("shared");
  REQUIRE(ours);
  CHECK(from_kubectl == ours->raw);  // byte-for-byte the same object, resourceVersion included

  auto [rc_patch, patched] = kubectl.Run("patch session shared --type merge -p '{\"spec\":{\"suspend\":true}}'");
  INFO(patched);
  REQUIRE(rc_patch == 0);
  auto after_patch = sessions.Get("shared");
  REQUIRE(after_patch);
  CHECK(after_patch->suspend);
  auto wait = sessions.WaitReady("shared", std::chrono::steady_clock::now() + std::chrono::seconds(20));
  REQUIRE_FALSE(wait);
  CHECK(wait.error().code == Errc::unavailable);

  auto [rc_ann, annotated] = kubectl.Run("annotate session shared example.com/thread=C1-1700");
  INFO(annotated);
  REQUIRE(rc_ann == 0);
  auto after_ann = sessions.Get("shared");
  REQUIRE(after_ann);
  CHECK(after_ann->annotations.at("example.com/thread") == "C1-1700");

  // Our guarded write is visible to kubectl.
  REQUIRE(sessions.Resume("shared"));
  auto req = sessions.RequestIdleResume("shared");
  REQUIRE(req);
  auto [rc_jp, value] =
      kubectl.Run("get session shared -o jsonpath='{.metadata.annotations.kelos\\.dev/session-idle-resume-request}'");
  REQUIRE(rc_jp == 0);
  CHECK(value == *req);

  auto [rc_del, deleted] = kubectl.Run("delete session shared --wait=true");
  INFO(deleted);
  REQUIRE(rc_del == 0);
  auto gone = sessions.Get("shared");
  REQUIRE_FALSE(gone);
  CHECK(gone.error().code == Errc::not_found);
  auto [rc_missing, missing] = kubectl.Run("get session shared");
  CHECK(rc_missing != 0);
  CHECK_THAT(missing, Catch::Contains("NotFound") || Catch::Contains("not found"));
}

TEST_CASE("kubectl against the fake: --watch sees a change made by our client", "[kube][kubectl]") {
  SKIP_WITHOUT_KUBECTL();
  FakeKube fake(/*ready_delay=*/0.2);
  KubeClient client(fake.Config());
  SessionClient sessions(client, "default");
  REQUIRE(sessions.Create({{"metadata", {{"name", "watched"}}}}));
  REQUIRE(sessions.WaitReady("watched", std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  Kubectl kubectl(fake);
  std::string out = fake.dir().path() + "/watch.out";
  std::string cmd = "exec " + kubectl.base() +
                    "get session watched --watch -o jsonpath='{.metadata.name} {.spec.suspend} {.status.phase}{\"\\n\"}' >" +
                    out + " 2>&1";
  pid_t pid = -1;
  std::vector<std::string> args = {"/bin/sh", "-c", cmd};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv.data(), environ) == 0);
  auto wait_for = [&](const std::string& needle) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Slurp(out).find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  bool first = wait_for("watched  Ready");
  bool changed = false;
  if (first) {
    REQUIRE(sessions.Suspend("watched"));
    changed = wait_for("watched true Suspended");
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  INFO(Slurp(out));
  CHECK(first);
  CHECK(changed);
}

TEST_CASE("kubectl against the fake: a bad token is refused like a real API server", "[kube][kubectl]") {
  SKIP_WITHOUT_KUBECTL();
  FakeKube fake;
  Kubectl kubectl(fake, "wrong-token");
  auto [rc, out] = kubectl.Run("get sessions.kelos.dev");
  CHECK(rc != 0);
  CHECK_THAT(out, Catch::Contains("Unauthorized") || Catch::Contains("must be logged in"));
}

TEST_CASE("kubectl against the fake: exec -i reaches a local runtime through the pods/exec bridge",
          "[kube][kubectl][exec]") {
  SKIP_WITHOUT_KUBECTL();
  FakeKube fake;
  testing::LocalRuntimeOptions ro;
  ro.socket_path = fake.dir().path() + "/rt/runtime.sock";
  ro.record_requests = true;
  auto runtime = testing::LocalRuntime::Start(ro);
  REQUIRE(runtime);
  fake.Control("pods", {{"name", "agent-pod"}, {"socket", ro.socket_path}});
  Kubectl kubectl(fake);
  std::string out = fake.dir().path() + "/exec.out";
  // stdin stays open until the turn completed: the runtime ends the stream when stdin ends.
  std::string cmd = "(printf '%s\\n%s\\n' '{\"type\":\"subscribe\"}' "
                    "'{\"type\":\"message\",\"requestId\":\"r-kubectl\",\"text\":\"hello through kubectl\"}'; "
                    "for i in $(seq 600); do grep -q turn.completed " + out + " 2>/dev/null && break; sleep 0.05; done) | " +
                    kubectl.base() + "exec -i agent-pod -c kelos-agent -- /kelos/bin/kelos-session-runtime client > " +
                    out;
  auto [rc, text] = Shell(cmd);
  std::string got = Slurp(out);
  INFO(text << got);
  CHECK(rc == 0);
  CHECK_THAT(got, Catch::Contains("\"requestId\":\"r-kubectl\"") && Catch::Contains("turn.completed"));
  auto requests = (*runtime)->ReceivedRequests();
  bool seen = false;
  for (const auto& r : requests) seen = seen || r.text == "hello through kubectl";
  CHECK(seen);
  // The fake logs a request when its handler returns, which for an exec is after the stream ended
  // (possibly after kubectl exited): wait for the entry instead of reading the log once.
  bool upgraded = false;
  for (int i = 0; i < 200 && !upgraded; ++i) {
    for (const auto& e : fake.RequestLog()) {
      if (std::string(e["path"]).find("/pods/agent-pod/exec") != std::string::npos && e["status"] == 101) upgraded = true;
    }
    if (!upgraded) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(upgraded);
}
