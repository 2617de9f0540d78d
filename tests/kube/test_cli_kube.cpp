// The `sessionturn` CLI against a cluster: the built binary, spawned with a kubeconfig for the fake API
// server (HTTPS), whose pods/exec bridges to an in-process local runtime. turn/watch/interrupt with
// --session, `sessions ...`, `wait`, and the exit codes of failed, suspended and missing Sessions.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/kube_support.hpp"
#include "sessionturn/sessions.hpp"
#include "sessionturn/testing/local_runtime.hpp"
#include "support/cli_runner.hpp"

using namespace sessionturn;
using namespace std::chrono_literals;
using sessionturn::testing_kube::FakeKube;
using sessionturn::testing_kube::TempDir;
using nlohmann::json;

namespace {

constexpr auto kWait = 20s;

using sessionturn::testing_support::Run;

// Runs the CLI with `args` (stdin empty); `interrupt_when` (optional) is polled with the output so
// far, and the CLI gets SIGINT once it returns true.
Run RunCli(const std::vector<std::string>& args, const std::function<bool(const std::string&)>& interrupt_when = {}) {
  Run run = sessionturn::testing_support::RunCliRaw(args, "", interrupt_when);
  if (!run.setup_error.empty()) FAIL(run.setup_error);
  return run;
}

// A fake cluster with a kubeconfig for it and a local runtime behind the Pod "chat-pod" of Session "chat".
struct Cluster {
  FakeKube fake{0.2};
  TempDir dir;
  std::string kubeconfig = fake.WriteKubeconfig();
  std::unique_ptr<testing::LocalRuntime> runtime;
  KubeClient client{fake.Config()};
  SessionClient sessions{client, "default"};

  void StartChat() {
    testing::LocalRuntimeOptions ro;
    ro.socket_path = dir.path() + "/runtime.sock";
    ro.echo_delay = 0ms;
    ro.log_sink = [](LogLevel, std::string_view) {};
    auto started = testing::LocalRuntime::Start(ro);
    REQUIRE(started);
    runtime = std::move(*started);
    REQUIRE(sessions.Create({{"metadata", {{"name", "chat"}}}, {"spec", json::object()}}));
    fake.Control("pods", {{"name", "chat-pod"}, {"socket", ro.socket_path}});
    WaitReadyOptions o;
    o.poll_interval = 100ms;
    REQUIRE(sessions.WaitReady("chat", std::chrono::steady_clock::now() + kWait, o));
  }
  std::vector<std::string> Kube(std::vector<std::string> args) const {
    args.insert(args.end(), {"--kubeconfig", kubeconfig});
    return args;
  }
};

template <typename Pred>
bool Eventually(SessionClient& sessions, const std::string& name, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < until) {
    auto s = sessions.Get(name);
    if (s && pred(*s)) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

}  // namespace

TEST_CASE("cli --session: a whole turn through the fake API server over TLS to a local runtime",
          "[kube][cli]") {
  Cluster c;
  c.StartChat();
  auto run = RunCli(c.Kube({"turn", "--session", "chat", "-n", "default", "hello cluster"}));
  INFO("stderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(run.out == "echo #1: hello cluster\n");
  CHECK(run.err.find("resuming") == std::string::npos);  // ready at once: nothing to report

  auto json_run = RunCli(c.Kube({"turn", "--session", "chat", "--json", "second"}));
  INFO("stderr: " << json_run.err);
  REQUIRE(json_run.exit_code == 0);
  auto result = json::parse(json_run.out);
  CHECK(result["status"] == "completed");
  CHECK(result["text"] == "echo #2: second");

  // watch and interrupt go the same way.
  auto watch = RunCli(c.Kube({"watch", "--session", "chat"}),
                      [](const std::string& out) { return out.find("echo #2: second") != std::string::npos; });
  INFO("watch stderr: " << watch.err);
  CHECK(watch.exit_code == 0);
  CHECK(watch.out.find("hello cluster") != std::string::npos);
  auto interrupt = RunCli(c.Kube({"interrupt", "--session", "chat"}));
  INFO("interrupt stderr: " << interrupt.err);
  // As over --socket: with no turn running, the runtime rejects the interrupt.
  CHECK(interrupt.exit_code == 5);
  CHECK(interrupt.err.find("no active turn") != std::string::npos);
}

TEST_CASE("cli --session: an idle-suspended Session is resumed, and the resume acknowledged after the turn",
          "[kube][cli]") {
  Cluster c;
  c.StartChat();
  c.fake.Control("idle-suspend", {{"name", "chat"}});
  REQUIRE(Eventually(c.sessions, "chat", [](const Session& s) { return s.IsIdleSuspended(); }));
  // Interrupting an idle Session has nothing to interrupt and does not wake it.
  auto idle_interrupt = RunCli(c.Kube({"interrupt", "--session", "chat"}));
  CHECK(idle_interrupt.exit_code == 0);
  CHECK(idle_interrupt.err.find("no turn is running") != std::string::npos);
  auto still = c.sessions.Get("chat");
  REQUIRE(still);
  CHECK(still->IsIdleSuspended());
  CHECK(still->resume_request.empty());

  auto run = RunCli(c.Kube({"turn", "--session", "chat", "wake up"}));
  INFO("stderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(run.out == "echo #1: wake up\n");
  // stderr is a pipe: plain lines, no terminal control sequences.
  CHECK(run.err.find("resuming Session default/chat") != std::string::npos);
  CHECK(run.err.find('\r') == std::string::npos);
  CHECK(run.err.find("\033[") == std::string::npos);

  auto s = c.sessions.Get("chat");
  REQUIRE(s);
  CHECK(s->IsReady());
  REQUIRE_FALSE(s->resume_request.empty());
  CHECK(Eventually(c.sessions, "chat",
                   [&](const Session& now) { return now.resume_acknowledgement == s->resume_request; }));
}

TEST_CASE("cli --session: Failed and owner-suspended Sessions exit 3, a wait that times out exits 4",
          "[kube][cli]") {
  Cluster c;
  REQUIRE(c.sessions.Create({{"metadata", {{"name", "broken"}}}, {"spec", json::object()}}));
  c.fake.Control("sessions/status",
                 {{"name", "broken"}, {"status", {{"phase", "Failed"}, {"message", "image pull failed"}}}});
  auto failed = RunCli(c.Kube({"turn", "--session", "broken", "hi"}));
  CHECK(failed.exit_code == 3);
  CHECK(failed.err.find("image pull failed") != std::string::npos);

  REQUIRE(c.sessions.Create({{"metadata", {{"name", "owned"}}}, {"spec", {{"suspend", true}}}}));
  auto owned = RunCli(c.Kube({"turn", "--session", "owned", "hi"}));
  CHECK(owned.exit_code == 3);
  CHECK(owned.err.find("suspended by its owner") != std::string::npos);
  auto owned_wait = RunCli(c.Kube({"wait", "owned"}));
  CHECK(owned_wait.exit_code == 3);

  // Never created: WaitReady keeps waiting, until the deadline.
  auto missing = RunCli(c.Kube({"turn", "--session", "nowhere", "--wait-timeout", "1", "hi"}));
  INFO("stderr: " << missing.err);
  CHECK(missing.exit_code == 4);
  auto missing_wait = RunCli(c.Kube({"wait", "nowhere", "--timeout", "1"}));
  CHECK(missing_wait.exit_code == 4);
  CHECK(missing_wait.out.empty());

  // A Session that stays Pending: the plain status line names the phase.
  c.fake.Control("config", {{"controller", false}});
  REQUIRE(c.sessions.Create({{"metadata", {{"name", "slow"}}}, {"spec", json::object()}}));
  c.fake.Control("sessions/status", {{"name", "slow"}, {"status", {{"phase", "Pending"}}}});
  auto slow = RunCli(c.Kube({"wait", "slow", "--timeout", "1"}));
  CHECK(slow.exit_code == 4);
  CHECK(slow.err.find("phase Pending") != std::string::npos);
}

TEST_CASE("cli: sessions list/get/suspend/resume/delete and wait", "[kube][cli]") {
  Cluster c;
  c.StartChat();
  REQUIRE(c.sessions.Create({{"metadata", {{"name", "broken"}}}, {"spec", json::object()}}));
  c.fake.Control("sessions/status",
                 {{"name", "broken"}, {"status", {{"phase", "Failed"}, {"message", "image pull failed"}}}});

  auto list = RunCli(c.Kube({"sessions", "list"}));
  INFO("stderr: " << list.err);
  REQUIRE(list.exit_code == 0);
  CHECK(list.out.rfind("NAME", 0) == 0);
  CHECK(list.out.find("PHASE") != std::string::npos);
  CHECK(list.out.find("chat") != std::string::npos);
  CHECK(list.out.find("chat-pod") != std::string::npos);
  CHECK(list.out.find("Ready") != std::string::npos);
  CHECK(list.out.find("image pull failed") != std::string::npos);

  auto list_json = RunCli(c.Kube({"sessions", "list", "--json"}));
  REQUIRE(list_json.exit_code == 0);
  auto items = json::parse(list_json.out);
  REQUIRE(items.is_array());
  CHECK(items.size() == 2);
  CHECK(items[0]["kind"] == "Session");

  auto get = RunCli(c.Kube({"sessions", "get", "chat"}));
  REQUIRE(get.exit_code == 0);
  CHECK(get.out.find("chat-pod") != std::string::npos);
  auto get_json = RunCli(c.Kube({"sessions", "get", "chat", "--json", "-n", "default"}));
  REQUIRE(get_json.exit_code == 0);
  CHECK(json::parse(get_json.out)["metadata"]["name"] == "chat");
  auto get_missing = RunCli(c.Kube({"sessions", "get", "nowhere"}));
  CHECK(get_missing.exit_code == 1);
  CHECK(get_missing.err.find("not_found") != std::string::npos);

  auto suspend = RunCli(c.Kube({"sessions", "suspend", "chat"}));
  INFO("suspend stderr: " << suspend.err);
  REQUIRE(suspend.exit_code == 0);
  CHECK(Eventually(c.sessions, "chat", [](const Session& s) { return s.IsOwnerSuspended(); }));
  auto blocked = RunCli(c.Kube({"wait", "chat", "--timeout", "10"}));
  CHECK(blocked.exit_code == 3);

  auto resume = RunCli(c.Kube({"sessions", "resume", "chat", "--json"}));
  REQUIRE(resume.exit_code == 0);
  CHECK_FALSE(json::parse(resume.out)["spec"].value("suspend", false));
  auto wait = RunCli(c.Kube({"wait", "chat", "--timeout", "20"}));
  INFO("wait stderr: " << wait.err);
  REQUIRE(wait.exit_code == 0);
  CHECK(wait.out == "chat-pod\n");

  auto del = RunCli(c.Kube({"sessions", "delete", "broken"}));
  REQUIRE(del.exit_code == 0);
  CHECK_FALSE(c.sessions.Get("broken"));
  auto del_again = RunCli(c.Kube({"sessions", "delete", "broken"}));
  CHECK(del_again.exit_code == 1);
}

TEST_CASE("cli: sessions create from a template file and from a SessionSpawner", "[kube][cli]") {
  Cluster c;
  const std::string spec_only = c.dir.File("spec.json", R"({"agent": {"type": "claude-code"}})");
  auto from_spec = RunCli(c.Kube({"sessions", "create", "made", "--template", spec_only, "--label", "team=a",
                                  "--annotation", "note=by-cli"}));
  INFO("stderr: " << from_spec.err);
  REQUIRE(from_spec.exit_code == 0);
  CHECK(from_spec.out == "Session default/made created\n");
  auto made = c.sessions.Get("made");
  REQUIRE(made);
  CHECK(made->labels["team"] == "a");
  CHECK(made->annotations["note"] == "by-cli");
  CHECK(made->raw["spec"]["agent"]["type"] == "claude-code");

  // A whole Session object works too; its own name is replaced by NAME.
  const std::string whole = c.dir.File("session.json", R"({"metadata": {"name": "other", "labels": {"x": "y"}},
      "spec": {"agent": {"type": "codex"}}})");
  auto from_object = RunCli(c.Kube({"sessions", "create", "made2", "--template", whole, "--json"}));
  REQUIRE(from_object.exit_code == 0);
  auto object = json::parse(from_object.out);
  CHECK(object["metadata"]["name"] == "made2");
  CHECK(object["metadata"]["labels"]["x"] == "y");
  CHECK_FALSE(c.sessions.Get("other"));
  auto selected = RunCli(c.Kube({"sessions", "list", "-l", "team=a", "--json"}));
  REQUIRE(selected.exit_code == 0);
  auto items = json::parse(selected.out);
  REQUIRE(items.size() == 1);
  CHECK(items[0]["metadata"]["name"] == "made");

  auto exists = RunCli(c.Kube({"sessions", "create", "made", "--template", spec_only}));
  CHECK(exists.exit_code == 1);  // the API's 409, as for every refusal that names a thing
  CHECK(exists.err.find("already exists") != std::string::npos);
  auto not_json = RunCli(c.Kube({"sessions", "create", "x", "--template", c.dir.File("bad.json", "agent: yaml")}));
  CHECK(not_json.exit_code == 2);
  CHECK(not_json.err.find("bad.json") != std::string::npos);

  auto spawner = c.client.Post("/apis/kelos.dev/v1alpha2/namespaces/default/sessionspawners",
                               {{"metadata", {{"name", "chat-bot"}}},
                                {"spec", {{"sessionTemplate", {{"metadata", {{"labels", {{"app", "bot"}}}}},
                                                                {"spec", {{"agent", {{"type", "opencode"}}}}}}}}}});
  REQUIRE(spawner);
  auto spawned = RunCli(c.Kube({"sessions", "create", "spawned", "--spawner", "chat-bot"}));
  INFO("stderr: " << spawned.err);
  REQUIRE(spawned.exit_code == 0);
  auto s = c.sessions.Get("spawned");
  REQUIRE(s);
  CHECK(s->labels["app"] == "bot");
  CHECK(s->labels[std::string(kSpawnerLabel)] == (*spawner)["metadata"]["uid"]);
  auto no_spawner = RunCli(c.Kube({"sessions", "create", "orphan", "--spawner", "nobody"}));
  CHECK(no_spawner.exit_code == 1);
  CHECK(no_spawner.err.find("nobody") != std::string::npos);
}

TEST_CASE("cli: a bad kubeconfig exits 2 naming the file, and kube options need --session", "[kube][cli]") {
  TempDir dir;
  const std::string missing = dir.path() + "/no-such-kubeconfig";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"turn", "--session", "chat", "--kubeconfig", missing, "hi"},
           {"sessions", "list", "--kubeconfig", missing},
           {"wait", "chat", "--kubeconfig", missing},
       }) {
    auto run = RunCli(args);
    INFO("args: " << json(args).dump() << " stderr: " << run.err);
    CHECK(run.exit_code == 2);
    CHECK(run.err.find(missing) != std::string::npos);
  }
  const std::string broken = dir.File("broken.yaml", "apiVersion: v1\nkind: Config\ncurrent-context: nope\n");
  auto bad_context = RunCli({"sessions", "list", "--kubeconfig", broken});
  INFO("stderr: " << bad_context.err);
  CHECK(bad_context.exit_code == 2);
  CHECK(bad_context.err.find("broken.yaml") != std::string::npos);

  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"turn", "--socket", "/tmp/x.sock", "-n", "default", "hi"},
           {"turn", "--socket", "/tmp/x.sock", "--session", "chat", "hi"},
           {"sessions"},
           {"sessions", "frob"},
           {"sessions", "get"},
           {"sessions", "list", "extra"},
           {"wait"},
           {"wait", "chat", "--since", "3"},
       }) {
    auto run = RunCli(bad);
    INFO("args: " << json(bad).dump() << " stderr: " << run.err);
    CHECK(run.exit_code == 2);
    CHECK(run.err.find("usage:") != std::string::npos);
  }
  auto help = RunCli({"--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("--session NAME") != std::string::npos);
  CHECK(help.out.find("sessionturn sessions list") != std::string::npos);
  CHECK(help.out.find("sessionturn wait NAME") != std::string::npos);
}
