// LocalBackend across processes: the embedding process killed mid-turn (its runtime lives on and a new
// process finds the turn's result), a runtime killed (Failed with its log, restarted by the next
// WaitReady, the turn recovered as interrupted), and processes racing Ensure/WaitReady on one root
// (exactly one runtime). "The embedding process" is this test binary re-run on a hidden test case.
#include <signal.h>

#include <cstdio>

#include "backend/local_backend_support.hpp"

using namespace backend_test;

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string RefLine(const TurnRef& ref) {
  return ref.request_id + " " + ref.turn_id + " " + std::to_string(ref.last_event_id) + " " + ref.journal_id;
}

TurnRef ParseRef(const std::string& line) {
  std::istringstream in(line);
  TurnRef ref;
  in >> ref.request_id >> ref.turn_id >> ref.last_event_id >> ref.journal_id;
  return ref;
}

long PidFile(const StateRoot& root, const std::string& name) {
  std::string text = ReadFile(root.Session(name) + "/runtime.pid");
  return text.empty() ? 0 : std::stol(text);
}

std::size_t Count(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) ++n;
  return n;
}

}  // namespace

// Not run by itself (hidden): the helper child's body, driven by the environment.
TEST_CASE("local backend: helper process", "[.][helper]") {
  const std::string mode = Env(kHelperModeEnv);
  REQUIRE((mode == "turn" || mode == "race"));
  Context ctx;
  LocalBackendOptions o;
  o.state_dir = Env(kHelperRootEnv);
  o.runtime_program = kRuntimeProgram;
  if (!Env(kHelperProviderEnv).empty()) o.provider = Env(kHelperProviderEnv);
  auto backend = MakeBackend(ctx, o);
  const std::string name = Env(kHelperNameEnv);
  if (mode == "race") {
    // Everyone starts at once: when the parent creates the go file.
    REQUIRE(Eventually([] { return std::filesystem::exists(Env(kHelperGoEnv)); }));
  }
  auto ensured = backend->Ensure(name, {});
  REQUIRE(ensured.has_value());
  std::printf("ENSURED %d\n", ensured->created ? 1 : 0);
  ReadyTarget target = Ready(*backend, name);
  TurnOptions options;
  options.on_accepted = [](const TurnRef& ref) {
    std::printf("ACCEPTED %s\n", RefLine(ref).c_str());
    std::fflush(stdout);
  };
  auto result = Turn(ctx, target.connector, "from " + std::to_string(::getpid()), options);
  std::printf("RESULT %s\n", result.text.c_str());
  std::fflush(stdout);
}

TEST_CASE("local backend: the embedding process killed mid-turn leaves its runtime and a new process finds the result",
          "[backend][local]") {
  StateRoot root;
  const std::string script = root.path() + "/slow.json";
  WriteFile(script, kSlowScript);
  HelperChild child({{kHelperModeEnv, "turn"},
                     {kHelperRootEnv, root.path()},
                     {kHelperNameEnv, "survivor"},
                     {kHelperProviderEnv, "script:" + script}});
  const std::string accepted = child.LineStartingWith("ACCEPTED ");
  REQUIRE_FALSE(accepted.empty());
  const TurnRef ref = ParseRef(accepted);
  REQUIRE_FALSE(ref.turn_id.empty());
  const long pid = PidFile(root, "survivor");
  REQUIRE(pid > 0);
  child.KillNow();  // SIGKILL, mid-turn (the script sleeps 2.5 s before it replies)

  // The runtime was detached: it lives on without the process that started it.
  CHECK(Alive(static_cast<pid_t>(pid)));
  Context ctx;
  auto o = Options(root);
  o.provider = "script:" + script;
  auto backend = MakeBackend(ctx, o);
  Stages stages;
  ReadyTarget target = Ready(*backend, "survivor", &stages);
  CHECK(stages.Joined() == "ready");  // reused: nothing was started
  CHECK(target.info.details.at("pid") == std::to_string(pid));
  CHECK(root.Runtimes().size() == 1);

  Driver driver(ctx, target.connector);
  TurnOptions options;
  options.timeout = kWait;
  auto attached = driver.AttachTurn(ref, options);
  REQUIRE(attached.has_value());
  CHECK(attached->status == TurnStatus::completed);
  CHECK(attached->turn_id == ref.turn_id);
  CHECK_THAT(attached->text, Catch::StartsWith("finished from "));
  // And it is in the journal on disk.
  const std::string journal = ReadFile(root.Session("survivor") + "/events.jsonl");
  CHECK(journal.find("\"turnId\":\"" + ref.turn_id + "\",\"status\":\"completed\"") != std::string::npos);
}

TEST_CASE(
    "local backend: a killed runtime is Failed with its log and the next WaitReady restarts it with the turn "
    "interrupted",
    "[backend][local]") {
  StateRoot root;
  Context ctx;
  const std::string script = root.path() + "/slow.json";
  WriteFile(script, kSlowScript);
  auto o = Options(root);
  o.provider = "script:" + script;
  auto backend = MakeBackend(ctx, o);
  REQUIRE(backend->Ensure("crashy", {}).has_value());
  ReadyTarget target = Ready(*backend, "crashy");
  const long pid = std::stol(target.info.details.at("pid"));

  Driver driver(ctx, target.connector);
  std::promise<TurnRef> accepted;
  std::promise<Result<TurnResult>> done;
  TurnOptions options;
  options.timeout = kWait;
  options.reconnect.enabled = false;  // so nothing restarts it before we have looked
  options.on_accepted = [&](const TurnRef& ref) { accepted.set_value(ref); };
  driver.AsyncSubmitTurn("doomed", options, [&](Result<TurnResult> r) { done.set_value(std::move(r)); });
  auto accepted_f = accepted.get_future();
  REQUIRE(accepted_f.wait_for(kWait) == std::future_status::ready);
  const TurnRef ref = accepted_f.get();
  REQUIRE(::kill(static_cast<pid_t>(pid), SIGKILL) == 0);
  auto done_f = done.get_future();
  REQUIRE(done_f.wait_for(kWait) == std::future_status::ready);
  auto lost = done_f.get();
  REQUIRE_FALSE(lost.has_value());
  CHECK(lost.error().code == Errc::connection_lost);

  REQUIRE(Eventually([&] { return !Alive(static_cast<pid_t>(pid)); }));
  auto failed = GetInfo(*backend, "crashy");
  CHECK(failed.phase == SessionPhase::failed);
  CHECK_THAT(failed.message, Catch::Contains("ended unexpectedly"));
  CHECK_THAT(failed.message, Catch::Contains("runtime.log"));
  CHECK_THAT(failed.message, Catch::Contains("serving on"));  // a line of the log itself

  Stages stages;
  ReadyTarget again = Ready(*backend, "crashy", &stages);
  CHECK(stages.Joined() == "starting,ready");
  CHECK(again.info.details.at("pid") != std::to_string(pid));
  TurnOptions attach;
  attach.timeout = kWait;
  auto recovered = Driver(ctx, again.connector).AttachTurn(ref, attach);
  REQUIRE(recovered.has_value());
  CHECK(recovered->status == TurnStatus::interrupted);
  CHECK(recovered->turn_id == ref.turn_id);
  // The next turn runs normally (the script's turn count goes on: #2).
  CHECK(Turn(ctx, again.connector, "after").text == "finished after (#2)");
}

TEST_CASE("local backend: a runtime that cannot start is Failed and WaitReady says why", "[backend][local]") {
  StateRoot root;
  Context ctx;
  const std::string script = root.path() + "/script.json";
  WriteFile(script, R"({"turns":[[{"type":"message","text":"ok"}]]})");
  auto o = Options(root);
  o.provider = "script:" + script;
  auto backend = MakeBackend(ctx, o);
  REQUIRE(backend->Ensure("doomed", {}).has_value());
  WriteFile(script, "not json");  // valid when the Session was made, broken when its runtime starts
  auto r = backend->WaitReady("doomed", std::chrono::steady_clock::now() + kWait);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::failed);
  CHECK_THAT(r.error().message, Catch::Contains("is not valid JSON"));
  CHECK(GetInfo(*backend, "doomed").phase == SessionPhase::failed);
}

TEST_CASE("local backend: processes racing Ensure and WaitReady on one root start exactly one runtime",
          "[backend][local]") {
  StateRoot root;
  const std::string go = root.path() + "/go";
  std::vector<std::unique_ptr<HelperChild>> children;
  for (int i = 0; i < 3; ++i) {
    children.push_back(std::make_unique<HelperChild>(std::vector<std::pair<std::string, std::string>>{
        {kHelperModeEnv, "race"}, {kHelperRootEnv, root.path()}, {kHelperNameEnv, "shared"}, {kHelperGoEnv, go}}));
  }
  std::this_thread::sleep_for(300ms);  // let them all reach the starting line
  WriteFile(go, "");
  int created = 0;
  std::vector<pid_t> pids;
  for (auto& child : children) {
    pids.push_back(child->pid);
    const std::string ensured = child->LineStartingWith("ENSURED ");
    REQUIRE_FALSE(ensured.empty());
    created += std::stoi(ensured);
    const std::string result = child->LineStartingWith("RESULT ");
    CHECK_THAT(result, Catch::StartsWith("echo #"));
    CHECK(child->Wait() == 0);
  }
  CHECK(created == 1);
  const std::string log = ReadFile(root.Session("shared") + "/runtime.log");
  INFO(log);
  CHECK(Count(log, "serving on") == 1);
  CHECK(root.Runtimes().size() == 1);
  // The three turns went to the one journal (two may have merged into one queued turn).
  const std::string journal = ReadFile(root.Session("shared") + "/events.jsonl");
  for (pid_t pid : pids) CHECK(journal.find("from " + std::to_string(pid)) != std::string::npos);
}
