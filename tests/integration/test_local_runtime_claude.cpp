// The claude-code provider through the driver, against the scripted fake agent
// (tests/fakes/fake_claude.py): streamed replies, tools, AskUserQuestion with one and two questions,
// permission requests (ask and skip), failures, incomplete runs, interrupts (answered, and hung past
// the interrupt timeout), a crash, garbage on stdout, restarts that resume the conversation, and the
// errors a bad spec or a missing binary give at start.
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "integration/driver_support.hpp"
#include "integration/runtime_support.hpp"
#include "sessionturn/driver.hpp"

using namespace driver_test;
using sessionturn::testing::LocalRuntime;
using sessionturn::testing::LocalRuntimeOptions;

namespace {

const std::string kFakeClaude = std::string(SESSIONTURN_SOURCE_DIR) + "/tests/fakes/fake_claude.py";

// A runtime with the claude-code provider (`options` after "claude-code:") whose agent is the fake,
// working in <dir>/work (where the fake keeps its conversations, under .fake-claude).
struct ClaudeFixture : Fixture {
  explicit ClaudeFixture(const std::string& options = {}, std::function<void(LocalRuntimeOptions&)> tweak = {})
      : Fixture(options.empty() ? "claude-code" : "claude-code:" + options, {},
                [tweak](LocalRuntimeOptions& o) {
                  o.agent_bin = kFakeClaude;
                  o.working_dir = std::filesystem::path(o.socket_path).parent_path().string() + "/work";
                  std::filesystem::create_directories(o.working_dir);
                  o.log_sink = [](LogLevel, std::string_view) {};
                  if (tweak) tweak(o);
                }) {}

  std::string home() const { return dir.path + "/work/.fake-claude"; }

  // Each start of the agent: {"pid", "argv", "cwd"}.
  std::vector<Json> Starts() const {
    std::vector<Json> out;
    std::ifstream in(home() + "/starts.jsonl");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(Json::parse(line));
    return out;
  }

  std::string SavedSessionId() const {
    std::ifstream in(dir.path + "/state/claude-session-id");
    std::string id;
    std::getline(in, id);
    return id;
  }

  TurnResult Run(const std::string& prompt, TurnOptions o = {}) {
    o.timeout = kWait;
    auto r = driver->SubmitTurn(prompt, std::move(o));
    INFO((r ? std::string() : r.error().ToString()));
    REQUIRE(r.has_value());
    return std::move(*r);
  }
};

// Sets an environment variable for a scope (before the runtime and its threads start).
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) { ::setenv(name.c_str(), value, 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

bool HasArg(const Json& start, const std::string& arg) {
  for (const auto& a : start.at("argv"))
    if (a == arg) return true;
  return false;
}

std::string ArgAfter(const Json& start, const std::string& flag) {
  const auto& argv = start.at("argv");
  for (std::size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) return argv[i + 1].get<std::string>();
  return {};
}

std::vector<Event> OfType(Recorder& rec, std::string_view type) {
  std::lock_guard lock(rec.mu);
  std::vector<Event> out;
  for (const auto& e : rec.events)
    if (e.type == type) out.push_back(e);
  return out;
}

// Answers every question of the turn with `answers` (or declines when empty), recording what was asked.
struct Answerer {
  std::mutex mu;
  std::vector<Event> asked;
  std::map<std::string, std::vector<std::string>> answers;
  void Into(TurnOptions& o) {
    o.questions = QuestionPolicy::ask;
    o.on_question = [this](const Event& e, Responder responder) {
      std::lock_guard lock(mu);
      asked.push_back(e);
      if (answers.empty()) responder.Decline();
      else responder.Answer(answers);
    };
  }
};

}  // namespace

TEST_CASE("claude-code: a streamed reply, the agent's flags, its model and the conversation id saved",
          "[runtime][claude]") {
  // The bridges' chat secrets stay out of the agent's environment; the rest of it gets through.
  ScopedEnv token("SLACK_BOT_TOKEN", "xoxb-not-for-the-agent");
  ScopedEnv probe("FAKE_CLAUDE_PROBE", "1");
  ClaudeFixture f("model=opus,effort=high");
  Recorder rec;
  TurnOptions o;
  o.on_event = rec.Callback();
  auto r = f.Run("hello agent", o);
  CHECK(r.status == TurnStatus::completed);
  CHECK(r.text == "you said: hello agent");
  CHECK(OfType(rec, event_type::kAssistantDelta).size() >= 2);
  REQUIRE(OfType(rec, event_type::kAssistantMessage).size() == 1);

  auto starts = f.Starts();
  REQUIRE(starts.size() == 1);
  const Json& s = starts[0];
  for (const char* a : {"--input-format", "--output-format", "--include-partial-messages", "--replay-user-messages",
                        "--permission-prompt-tool", "--verbose", "-p"})
    CHECK(HasArg(s, a));
  CHECK_FALSE(HasArg(s, "--dangerously-skip-permissions"));  // permissions=ask unless skip is asked for
  CHECK(ArgAfter(s, "--model") == "opus");
  CHECK(ArgAfter(s, "--effort") == "high");
  CHECK(s.at("cwd") == f.dir.path + "/work");
  CHECK(s.at("env") == Json::array({"FAKE_CLAUDE_PROBE"}));
  const std::string id = ArgAfter(s, "--session-id");
  REQUIRE(id.size() == 36);
  CHECK(f.SavedSessionId() == id);

  auto r2 = f.Run("second turn", o);
  CHECK(r2.text == "you said: second turn");
  CHECK(f.Starts().size() == 1);  // one long-lived process
}

TEST_CASE("claude-code: runtime.status carries the agent's model and the turns' usage", "[runtime][claude]") {
  ClaudeFixture f;
  f.Run("usage");
  f.Run("usage");
  // A subscriber gets the runtime's status as it is now.
  sessionturn::test::TestClient client(f.socket());
  REQUIRE(client.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
  auto status = client.WaitType(event_type::kRuntimeStatus);
  REQUIRE(status.has_value());
  REQUIRE(status->runtime);
  const RuntimeStatus& rs = *status->runtime;
  CHECK(rs.model == "claude-fake-1");
  CHECK(rs.agent_type == "sessionturn-local-claude-code");
  REQUIRE(rs.usage);
  // Two results of 10 + 5 + 100 input and 20 output tokens each; a 200,000-token window.
  CHECK(rs.usage->input_tokens == 230);
  CHECK(rs.usage->output_tokens == 40);
  CHECK(rs.usage->total_tokens == 270);
  CHECK(rs.usage->context_window == 200000);
}

TEST_CASE("claude-code: tool use shows the tool and its input, its result completes it", "[runtime][claude]") {
  ClaudeFixture f;
  Recorder rec;
  TurnOptions o;
  o.on_event = rec.Callback();
  auto r = f.Run("tool", o);
  CHECK(r.status == TurnStatus::completed);
  CHECK(r.text == "Running a command.\n\nDone: 2 files.");
  auto started = OfType(rec, event_type::kToolStarted);
  REQUIRE(started.size() == 1);
  CHECK(started[0].tool_name == "Bash");
  CHECK(started[0].text == "ls -la");
  CHECK(started[0].status == "running");
  auto done = OfType(rec, event_type::kToolCompleted);
  REQUIRE(done.size() == 1);
  CHECK(done[0].tool_id == started[0].tool_id);
  CHECK(done[0].tool_name == "Bash");
  CHECK(done[0].output == "a.txt\nb.txt");
  CHECK(done[0].status == "completed");

  Recorder rec2;
  o.on_event = rec2.Callback();
  f.Run("tool-error", o);
  auto failed = OfType(rec2, event_type::kToolCompleted);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].status == "failed");
  CHECK(failed[0].output == "command failed\nexit 1");
}

TEST_CASE("claude-code: AskUserQuestion is asked, and the answers or a decline go back to the agent",
          "[runtime][claude]") {
  ClaudeFixture f;
  Answerer one;
  one.answers = {{"question-1", {"Blue"}}};
  TurnOptions o;
  one.Into(o);
  auto r = f.Run("ask", o);
  CHECK(r.status == TurnStatus::completed);
  CHECK(r.text.find("answers: Which color?=Blue") != std::string::npos);
  CHECK(r.questions_answered == 1);
  REQUIRE(one.asked.size() == 1);
  const Event& q = one.asked[0];
  CHECK(q.input_id.rfind("claude-", 0) == 0);
  REQUIRE(q.questions.size() == 1);
  CHECK(q.questions[0].id == "question-1");
  CHECK(q.questions[0].header == "Color");
  CHECK(q.questions[0].question == "Which color?");
  REQUIRE(q.questions[0].options.size() == 2);
  CHECK(q.questions[0].options[1].label == "Blue");
  CHECK(q.questions[0].options[1].description == "cool");

  Answerer two;
  two.answers = {{"question-1", {"Red"}}, {"question-2", {"S", "L"}}};
  TurnOptions o2;
  two.Into(o2);
  auto r2 = f.Run("ask2", o2);
  CHECK(r2.text.find("answers: Which color?=Red; Which sizes?=S, L") != std::string::npos);
  REQUIRE(two.asked.size() == 1);
  REQUIRE(two.asked[0].questions.size() == 2);
  CHECK(two.asked[0].questions[1].multi_select);

  Answerer none;  // declines
  TurnOptions o3;
  none.Into(o3);
  auto r3 = f.Run("ask", o3);
  CHECK(r3.status == TurnStatus::completed);
  CHECK(r3.text.find("declined: User cancelled the question") != std::string::npos);
  CHECK(r3.questions_declined == 1);
}

TEST_CASE("claude-code: with permissions=ask a tool use is a question, allowed once, denied, or for the Session",
          "[runtime][claude]") {
  ClaudeFixture f;
  Answerer allow;
  allow.answers = {{"question-1", {"Allow"}}};
  TurnOptions o;
  allow.Into(o);
  auto r = f.Run("permission", o);
  CHECK(r.text.find("allowed: rm -rf build") != std::string::npos);
  REQUIRE(allow.asked.size() == 1);
  const InputQuestion& q = allow.asked[0].questions.at(0);
  CHECK(q.header == "Permission");
  CHECK(q.question == "Claude Code wants to use Bash: rm -rf build. Allow it?");
  REQUIRE(q.options.size() == 3);
  CHECK(q.options[2].label == "Allow for this Session");

  Answerer deny;
  deny.answers = {{"question-1", {"Deny"}}};
  TurnOptions o2;
  deny.Into(o2);
  auto r2 = f.Run("permission", o2);
  CHECK(r2.text.find("denied: The user denied this tool use") != std::string::npos);

  Answerer words;  // free text denies, and the agent reads why
  words.answers = {{"question-1", {"not on main, please"}}};
  TurnOptions o3;
  words.Into(o3);
  auto r3 = f.Run("permission", o3);
  CHECK(r3.text.find("denied: The user denied this tool use: not on main, please") != std::string::npos);

  // For this Session: the second request of the turn, and every later one, is allowed without asking.
  Answerer session;
  session.answers = {{"question-1", {"Allow for this Session"}}};
  TurnOptions o4;
  session.Into(o4);
  auto r4 = f.Run("permission2", o4);
  CHECK(r4.status == TurnStatus::completed);
  CHECK(session.asked.size() == 1);
  auto r5 = f.Run("permission", o4);
  CHECK(r5.text.find("allowed: rm -rf build") != std::string::npos);
  CHECK(session.asked.size() == 1);
  // Not written next to the workspace, where the agent could grant itself more.
  CHECK_FALSE(std::filesystem::exists(f.dir.path + "/state/claude-allowed-tools"));
  // A new runtime asks again.
  REQUIRE(f.runtime->Restart().has_value());
  Answerer again;
  again.answers = {{"question-1", {"Allow"}}};
  TurnOptions o6;
  again.Into(o6);
  f.Run("permission", o6);
  CHECK(again.asked.size() == 1);
}

TEST_CASE("claude-code: permissions=skip passes the agent's flag and asks nothing", "[runtime][claude]") {
  ClaudeFixture f("permissions=skip");
  Answerer a;
  TurnOptions o;
  a.Into(o);
  auto r = f.Run("permission", o);
  CHECK(r.text.find("allowed: rm -rf build") != std::string::npos);
  CHECK(a.asked.empty());
  REQUIRE(f.Starts().size() == 1);
  CHECK(HasArg(f.Starts()[0], "--dangerously-skip-permissions"));
}

TEST_CASE("claude-code: an error result and an incomplete run fail the turn with the agent's reason",
          "[runtime][claude]") {
  ClaudeFixture f;
  auto r = f.Run("fail");
  CHECK(r.status == TurnStatus::failed);
  CHECK(r.error_message == "API Error: 500 overloaded");
  auto r2 = f.Run("incomplete");
  CHECK(r2.status == TurnStatus::failed);
  CHECK(r2.error_message == "Claude Code run incomplete (terminal_reason=max_turns, stop_reason=max_tokens)");
  auto r3 = f.Run("still here");
  CHECK(r3.status == TurnStatus::completed);
  CHECK(f.Starts().size() == 1);  // failures of a turn are not failures of the process
}

TEST_CASE("claude-code: an interrupt is a control request, and the agent ends the turn interrupted",
          "[runtime][claude]") {
  ClaudeFixture f;
  auto turn = f.Async("slow 30", WithTimeout(kWait));
  f.WaitEvent([](const Event& e) { return e.type == event_type::kAssistantDelta; });
  REQUIRE(f.driver->Interrupt().has_value());
  auto r = Get(turn);
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::interrupted);
  auto next = f.Run("after the interrupt");
  CHECK(next.text == "you said: after the interrupt");
  CHECK(f.Starts().size() == 1);  // the agent stopped the turn itself: same process
}

TEST_CASE("claude-code: an interrupt while the agent waits for an answer declines it and cancels it in the journal",
          "[runtime][claude]") {
  ClaudeFixture f;
  TurnOptions o;
  o.questions = QuestionPolicy::ask;
  o.timeout = kWait;
  std::atomic<bool> asked{false};
  o.on_question = [&](const Event&, Responder) { asked = true; };  // never answered
  auto turn = f.Async("ask", o);
  const Event q = f.WaitEvent([](const Event& e) { return e.type == event_type::kInputRequested; });
  REQUIRE(f.driver->Interrupt().has_value());
  auto r = Get(turn);
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::interrupted);
  CHECK(asked);
  // Cancelled before the turn ended, and never answered.
  std::int64_t cancelled = 0, completed = 0;
  for (const auto& e : f.runtime->JournalEvents()) {
    if (e.type == event_type::kInputResolved && e.input_id == q.input_id) {
      CHECK(e.status == "cancelled");
      cancelled = e.id;
    }
    if (e.type == event_type::kTurnCompleted && e.turn_id == q.turn_id) completed = e.id;
  }
  CHECK(cancelled > 0);
  CHECK(cancelled < completed);
  CHECK_FALSE(f.driver->Answer(q.input_id, {{"question-1", {"Red"}}}).has_value());  // nothing to answer
  auto next = f.Run("still talking");
  CHECK(next.text == "you said: still talking");
  CHECK(f.Starts().size() == 1);
}

TEST_CASE("claude-code: an agent that ignores the interrupt is killed at the timeout and resumed next turn",
          "[runtime][claude]") {
  ClaudeFixture f({}, [](LocalRuntimeOptions& o) {
    o.interrupt_timeout = 500ms;
    o.provider_restart_delay = 50ms;
  });
  f.Run("remember the lighthouse");
  auto turn = f.Async("hang", WithTimeout(kWait));
  f.WaitEvent([](const Event& e) { return e.type == event_type::kAssistantDelta && e.text == "Thinking"; });
  const pid_t hung = f.Starts().at(0).at("pid").get<pid_t>();
  REQUIRE(f.driver->Interrupt().has_value());
  auto r = Get(turn);
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::interrupted);
  CHECK(::kill(hung, 0) != 0);  // killed and reaped
  // The runtime refuses prompts while its provider restarts (provider_restart_delay), as the real one does.
  Result<TurnResult> recalled = Fail(Errc::rejected, "not tried");
  for (int i = 0; i < 50 && !recalled; ++i) {
    recalled = f.driver->SubmitTurn("recall", WithTimeout(kWait));
    if (!recalled) std::this_thread::sleep_for(50ms);
  }
  REQUIRE(recalled.has_value());
  auto recall = *recalled;
  CHECK(recall.text.find("remember the lighthouse") != std::string::npos);
  auto starts = f.Starts();
  REQUIRE(starts.size() == 2);
  CHECK(ArgAfter(starts[1], "--resume") == ArgAfter(starts[0], "--session-id"));
}

TEST_CASE("claude-code: a crash fails the turn with the agent's last stderr lines, the next turn resumes",
          "[runtime][claude]") {
  ClaudeFixture f;
  f.Run("first words");
  auto r = f.Run("crash");
  CHECK(r.status == TurnStatus::failed);
  CHECK(r.error_message.find("Claude Code exited with status 3") != std::string::npos);
  CHECK(r.error_message.find("fatal: something broke\n  at step 3") != std::string::npos);
  auto recall = f.Run("recall");
  CHECK(recall.status == TurnStatus::completed);
  CHECK(recall.text.find("first words") != std::string::npos);
  CHECK(recall.text.find("crash") != std::string::npos);
  REQUIRE(f.Starts().size() == 2);
  CHECK(HasArg(f.Starts()[1], "--resume"));
}

TEST_CASE("claude-code: a line that is not its protocol fails the turn and the agent is restarted",
          "[runtime][claude]") {
  ClaudeFixture f;
  auto r = f.Run("garbage");
  CHECK(r.status == TurnStatus::failed);
  CHECK(r.error_message.find("Claude Code wrote a line that is not JSON: this is not json") != std::string::npos);
  auto next = f.Run("recall");
  CHECK(next.status == TurnStatus::completed);
  CHECK(next.text.find("garbage") != std::string::npos);  // the conversation went on
  CHECK(f.Starts().size() == 2);
}

TEST_CASE("claude-code: a runtime restart, and a stop and start on the same state, resume the conversation",
          "[runtime][claude]") {
  ClaudeFixture f;
  f.Run("the password is swordfish");
  const std::string id = f.SavedSessionId();
  REQUIRE_FALSE(id.empty());
  REQUIRE(f.runtime->Restart().has_value());
  auto r = f.Run("recall");
  CHECK(r.text.find("swordfish") != std::string::npos);
  REQUIRE(f.Starts().size() == 2);
  CHECK(ArgAfter(f.Starts()[1], "--resume") == id);

  // A new runtime on the same state directory (what an idle suspension and a wake do).
  LocalRuntimeOptions o;
  o.socket_path = f.dir.path + "/rt2.sock";
  o.state_dir = f.dir.path + "/state";
  o.provider = "claude-code";
  o.agent_bin = kFakeClaude;
  o.working_dir = f.dir.path + "/work";
  o.log_sink = [](LogLevel, std::string_view) {};
  f.runtime->Stop();
  auto rt = LocalRuntime::Start(o);
  REQUIRE(rt.has_value());
  Driver d(f.ctx, MakeUnixConnector(f.ctx, o.socket_path));
  auto r2 = d.SubmitTurn("recall");
  REQUIRE(r2.has_value());
  CHECK(r2->text.find("swordfish") != std::string::npos);
  CHECK(ArgAfter(f.Starts().back(), "--resume") == id);
}

TEST_CASE("claude-code: a saved conversation the agent does not know fails one turn, then a new one starts",
          "[runtime][claude]") {
  TempDir dir;
  std::filesystem::create_directories(dir.path + "/state");
  std::filesystem::create_directories(dir.path + "/work");
  std::ofstream(dir.path + "/state/claude-session-id") << "0b0e7e5c-3c55-4b1a-9d0e-1f3a1f00dead\n";
  LocalRuntimeOptions o;
  o.socket_path = dir.path + "/rt.sock";
  o.state_dir = dir.path + "/state";
  o.provider = "claude-code";
  o.agent_bin = kFakeClaude;
  o.working_dir = dir.path + "/work";
  o.log_sink = [](LogLevel, std::string_view) {};
  auto rt = LocalRuntime::Start(o);
  REQUIRE(rt.has_value());
  Context ctx;
  Driver d(ctx, MakeUnixConnector(ctx, o.socket_path));
  auto r = d.SubmitTurn("hello");
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::failed);
  CHECK(r->error_message.find("No conversation found") != std::string::npos);
  CHECK(r->error_message.find("the next turn starts a new one") != std::string::npos);
  auto r2 = d.SubmitTurn("hello again");
  REQUIRE(r2.has_value());
  CHECK(r2->text == "you said: hello again");
}

TEST_CASE("claude-code: a bad spec or a missing agent binary is an error at start naming it", "[runtime][claude]") {
  TempDir dir;
  auto start = [&](const std::string& provider, const std::string& bin) {
    LocalRuntimeOptions o;
    o.socket_path = dir.path + "/rt.sock";
    o.provider = provider;
    o.agent_bin = bin;
    auto rt = LocalRuntime::Start(o);
    REQUIRE_FALSE(rt.has_value());
    CHECK(rt.error().code == Errc::invalid_argument);
    return rt.error().message;
  };
  CHECK(start("claude-code", dir.path + "/no-such-claude").find("is not an executable file (--agent-bin)") !=
        std::string::npos);
  CHECK(start("claude-code", "no-such-claude-binary-here").find(
            "\"no-such-claude-binary-here\" was not found on PATH") != std::string::npos);
  CHECK(start("claude-code:permissions=maybe", kFakeClaude).find("permissions must be skip or ask") !=
        std::string::npos);
  CHECK(start("claude-code:colour=red", kFakeClaude).find("unknown option \"colour\"") != std::string::npos);
  CHECK(start("claude-code:model=", kFakeClaude).find("option \"model\" has an empty value") != std::string::npos);
}
