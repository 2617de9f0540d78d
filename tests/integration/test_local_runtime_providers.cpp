// LocalRuntime providers: script steps of every kind, bad scripts, and the command provider
// (environment, streaming, failure with stderr's tail, interrupt killing the process group).
#include <signal.h>

#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "integration/runtime_support.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using namespace sessionturn::test;
using sessionturn::testing::LocalRuntime;
using sessionturn::testing::LocalRuntimeOptions;

namespace {

struct Started {
  TempDir dir;
  std::unique_ptr<LocalRuntime> rt;
  TestClient client;
};

// Starts a runtime with `provider` (a script body is written to a file first) and a subscribed client.
std::unique_ptr<Started> Start(std::string provider, LocalRuntimeOptions o = {}) {
  auto s = std::make_unique<Started>();
  if (provider.rfind("script-body:", 0) == 0) {
    WriteFile(s->dir / "script.json", provider.substr(12));
    provider = "script:" + (s->dir / "script.json");
  }
  o.provider = provider;
  o.socket_path = s->dir / "rt.sock";
  if (!o.log_sink) o.log_sink = [](LogLevel, std::string_view) {};  // expected warnings stay out of the output
  auto r = LocalRuntime::Start(o);
  if (!r) FAIL("Start: " << r.error().ToString());
  s->rt = std::move(*r);
  REQUIRE(s->client.Connect(s->rt->socket_path()));
  REQUIRE(s->client.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
  REQUIRE(s->client.WaitType(event_type::kHistoryEnd));
  return s;
}

std::vector<Event> RunTurn(Started& s, const std::string& text) {
  std::vector<Event> seen;
  REQUIRE(s.client.Send(ClientRequest::Message(NewRequestId(), text)));
  auto done = s.client.WaitType(event_type::kTurnCompleted, kTestDeadline, &seen);
  if (!done) FAIL("turn did not complete: " << done.error().ToString());
  return seen;
}

std::vector<Event> OfType(const std::vector<Event>& evs, std::string_view type) {
  std::vector<Event> out;
  for (const auto& e : evs)
    if (e.type == type) out.push_back(e);
  return out;
}

bool ProcessGone(pid_t pid) {
  // Gone, or a zombie nobody reaped yet (it no longer runs).
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

}  // namespace

TEST_CASE("script provider: every step kind, templating, per-turn selection", "[runtime]") {
  const char* script = R"JSON({"turns":[
    [ {"type":"delta","text":"Hel"}, {"type":"delta","text":"lo {prompt}"},
      {"type":"tool.start","id":"t1","name":"bash","text":"ls"},
      {"type":"tool.delta","id":"t1","output":"a\n"},
      {"type":"tool.complete","id":"t1","name":"bash","output":"a\nb\n"},
      {"type":"status","runtime":{"model":"test-model","branch":"main"}},
      {"type":"usage","usage":{"inputTokens":10,"outputTokens":5,"totalTokens":15}},
      {"type":"diff","diff":{"files":[{"path":"x.txt"}]}},
      {"type":"error","text":"a recoverable error"},
      {"type":"sleep","ms":10},
      {"type":"message","text":"Hello {prompt} (turn {turn}, #{n})"} ],
    { "steps": [ {"type":"message","text":"partial"}, {"type":"fail","text":"it broke"} ] }
  ]})JSON";
  auto s = Start(std::string("script-body:") + script);
  auto seen = RunTurn(*s, "world");
  CHECK(seen.back().status == "completed");
  auto deltas = OfType(seen, event_type::kAssistantDelta);
  REQUIRE(deltas.size() == 2);
  CHECK(deltas[1].text == "lo world");
  auto ts = OfType(seen, event_type::kToolStarted);
  REQUIRE(ts.size() == 1);
  CHECK(ts[0].tool_name == "bash");
  CHECK(OfType(seen, event_type::kToolDelta).at(0).output == "a\n");
  auto tc = OfType(seen, event_type::kToolCompleted).at(0);
  CHECK(tc.output == "a\nb\n");
  CHECK(tc.status == "completed");
  // One as the turn starts, one per status/usage step; never journaled.
  auto statuses = OfType(seen, event_type::kRuntimeStatus);
  REQUIRE(statuses.size() == 3);
  for (const auto& st : statuses) CHECK(st.id == 0);
  REQUIRE(statuses[1].runtime);
  CHECK(statuses[1].runtime->model == "test-model");
  REQUIRE(statuses[2].runtime);
  REQUIRE(statuses[2].runtime->usage);
  CHECK(statuses[2].runtime->usage->total_tokens == 15);
  CHECK(OfType(seen, event_type::kFileDiff).at(0).diff["files"][0]["path"] == "x.txt");
  auto errs = OfType(seen, event_type::kError);
  REQUIRE(errs.size() == 1);
  CHECK(errs[0].status == "failed");
  CHECK(errs[0].turn_id == "turn-1");
  CHECK(OfType(seen, event_type::kAssistantMessage).at(0).text == "Hello world (turn turn-1, #1)");
  for (const auto& e : s->rt->JournalEvents()) CHECK(e.type != event_type::kRuntimeStatus);

  // The status sticks: a new subscriber sees the model.
  TestClient late(s->rt->socket_path());
  REQUIRE(late.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
  auto st = late.WaitType(event_type::kRuntimeStatus);
  REQUIRE(st);
  CHECK(st->runtime->model == "test-model");

  auto second = RunTurn(*s, "again");
  CHECK(second.back().status == "failed");
  auto err2 = OfType(second, event_type::kError);
  REQUIRE(err2.size() == 1);
  CHECK(err2[0].text == "it broke");
  // Beyond the list, the last turn repeats.
  CHECK(RunTurn(*s, "third").back().status == "failed");
}

TEST_CASE("script provider: unusable scripts are refused at start with a clear message", "[runtime]") {
  TempDir dir;
  auto start = [&](const std::string& body) {
    WriteFile(dir / "s.json", body);
    LocalRuntimeOptions o;
    o.socket_path = dir / "rt.sock";
    o.provider = "script:" + (dir / "s.json");
    return LocalRuntime::Start(o);
  };
  auto bad_type = start(R"({"turns":[[{"type":"dance"}]]})");
  REQUIRE_FALSE(bad_type);
  CHECK(bad_type.error().code == Errc::invalid_argument);
  CHECK(bad_type.error().message.find("turn 1 step 1: unknown step type \"dance\"") != std::string::npos);
  auto bad_json = start("{nope");
  REQUIRE_FALSE(bad_json);
  CHECK(bad_json.error().message.find("not valid JSON") != std::string::npos);
  auto no_turns = start(R"({"turns":[]})");
  REQUIRE_FALSE(no_turns);
  auto bad_sleep = start(R"({"turns":[[{"type":"sleep"}]]})");
  REQUIRE_FALSE(bad_sleep);
  CHECK(bad_sleep.error().message.find("\"ms\"") != std::string::npos);
  LocalRuntimeOptions o;
  o.socket_path = dir / "rt.sock";
  o.provider = "script:" + (dir / "missing.json");
  auto missing = LocalRuntime::Start(o);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("cannot read script") != std::string::npos);
  o.provider = "telepathy";
  auto unknown = LocalRuntime::Start(o);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.find("unknown provider") != std::string::npos);
}

TEST_CASE("command provider: environment, prompt on stdin, streamed lines, exit status", "[runtime]") {
  TempDir state;
  LocalRuntimeOptions o;
  o.state_dir = state.path();
  o.session_name = "cmd-session";
  auto s = Start(
      "command:echo \"session=$SESSIONTURN_SESSION turn=$SESSIONTURN_TURN dir=$SESSIONTURN_STATE_DIR\"; "
      "cat; printf 'no newline'",
      o);
  auto seen = RunTurn(*s, "line one\nline two\n");
  CHECK(seen.back().status == "completed");
  auto deltas = OfType(seen, event_type::kAssistantDelta);
  REQUIRE(deltas.size() == 4);
  CHECK(deltas[0].text == "session=cmd-session turn=turn-1 dir=" + state.path() + "\n");
  CHECK(deltas[1].text == "line one\n");
  CHECK(deltas[3].text == "no newline\n");
  auto msg = OfType(seen, event_type::kAssistantMessage);
  REQUIRE(msg.size() == 1);
  CHECK(msg[0].text == "session=cmd-session turn=turn-1 dir=" + state.path() + "\nline one\nline two\nno newline");

  auto fail = Start("command:echo partial; echo 'first problem' >&2; echo 'the real problem' >&2; exit 3");
  auto failed = RunTurn(*fail, "x");
  CHECK(failed.back().status == "failed");
  auto errs = OfType(failed, event_type::kError);
  REQUIRE(errs.size() == 1);
  CHECK(errs[0].text == "first problem\nthe real problem");

  auto silent = Start("command:exit 4");
  auto quiet = RunTurn(*silent, "x");
  CHECK(OfType(quiet, event_type::kError).at(0).text == "command exited with status 4");
}

TEST_CASE("command provider: interrupt kills the process group", "[runtime]") {
  TempDir dir;
  const std::string pidfile = dir / "child.pid";
  auto s = Start("command:sleep 60 & echo $! > " + pidfile + "; echo started; wait");
  REQUIRE(s->client.Send(ClientRequest::Message("m", "go")));
  auto started = s->client.WaitType(event_type::kAssistantDelta);
  REQUIRE(started);
  CHECK(started->text == "started\n");
  std::ifstream in(pidfile);
  pid_t child = 0;
  in >> child;
  REQUIRE(child > 0);
  CHECK_FALSE(ProcessGone(child));
  REQUIRE(s->client.Send(ClientRequest::Interrupt("i")));
  auto done = s->client.WaitType(event_type::kTurnCompleted);
  REQUIRE(done);
  CHECK(done->status == "interrupted");
  auto deadline = std::chrono::steady_clock::now() + kTestDeadline;
  while (!ProcessGone(child) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  CHECK(ProcessGone(child));
}

TEST_CASE("command provider: a command ignoring SIGTERM is killed after the interrupt timeout", "[runtime]") {
  LocalRuntimeOptions o;
  o.interrupt_timeout = std::chrono::milliseconds(300);
  o.provider_restart_delay = std::chrono::milliseconds(50);
  auto s = Start(
      "command:read p || true; if [ \"$p\" = hang ]; then trap '' TERM; echo started; sleep 60; echo never; "
      "else echo \"ran $p\"; fi",
      o);
  REQUIRE(s->client.Send(ClientRequest::Message("m", "hang")));
  REQUIRE(s->client.WaitType(event_type::kAssistantDelta));
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(s->client.Send(ClientRequest::Interrupt("i")));
  auto done = s->client.WaitType(event_type::kTurnCompleted);
  REQUIRE(done);
  CHECK(done->status == "interrupted");
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(300));
  // The provider comes back after its restart delay (messages are rejected until then); the next turn runs.
  std::vector<Event> next;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string id = "again-" + std::to_string(attempt);
    REQUIRE(s->client.Send(ClientRequest::Message(id, "again")));
    auto first = s->client.WaitFor(ForRequest(id));
    REQUIRE(first);
    if (first->type == event_type::kError) {
      CHECK(first->text == sessionturn::testing::reject_reason::kProviderRestarting);
      std::this_thread::sleep_for(20ms);
      continue;
    }
    REQUIRE(s->client.WaitType(event_type::kTurnCompleted, kTestDeadline, &next));
    break;
  }
  CHECK(OfType(next, event_type::kAssistantDelta).at(0).text == "ran again\n");
}
