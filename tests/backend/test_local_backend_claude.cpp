// The LocalBackend with claude-code Sessions (the scripted fake agent, tests/fakes/fake_claude.py):
// an idle suspension between two turns stops the runtime and its agent, the woken runtime resumes the
// agent's conversation, and a missing agent binary is refused when the backend is made.
#include "backend/local_backend_support.hpp"

using namespace backend_test;

namespace {

const std::string kFakeClaude = std::string(SESSIONTURN_SOURCE_DIR) + "/tests/fakes/fake_claude.py";

}  // namespace

TEST_CASE("local backend: a claude-code Session suspended while idle resumes its agent's conversation",
          "[backend][local][claude]") {
  StateRoot root;
  Context ctx;
  auto o = Options(root);
  o.provider = "claude-code:model=sonnet";
  o.agent_bin = kFakeClaude;
  o.suspend_after = 1s;
  auto backend = MakeBackend(ctx, o);
  REQUIRE(backend->Ensure("agent", SessionSpec{}).has_value());
  ReadyTarget first = Ready(*backend, "agent");
  auto t1 = Turn(ctx, first.connector, "my name is Ada");
  CHECK(t1.status == TurnStatus::completed);
  CHECK(t1.text == "you said: my name is Ada");

  REQUIRE(Eventually([&] { return IdleSuspended(*backend, "agent"); }));
  const std::string fake_home = root.Session("agent") + "/workspace/.fake-claude";
  // The agent went with its runtime: the one process it started has exited.
  const std::string starts = ReadFile(fake_home + "/starts.jsonl");
  REQUIRE(starts.find("\"pid\": ") != std::string::npos);
  const pid_t agent_pid = static_cast<pid_t>(std::stol(starts.substr(starts.find("\"pid\": ") + 7)));
  CHECK(Eventually([&] { return !Alive(agent_pid); }, 5s));

  ReadyTarget second = Ready(*backend, "agent");
  CHECK(second.resumed);
  auto t2 = Turn(ctx, second.connector, "recall");
  CHECK(t2.status == TurnStatus::completed);
  CHECK(t2.text.find("my name is Ada") != std::string::npos);
  const std::string saved = ReadFile(root.Session("agent") + "/claude-session-id");
  REQUIRE(saved.size() > 36);
  CHECK(ReadFile(fake_home + "/starts.jsonl").find("\"--resume\", \"" + saved.substr(0, 36) + "\"") !=
        std::string::npos);
  CHECK(ReadFile(fake_home + "/starts.jsonl").find("\"sonnet\"") != std::string::npos);
}

TEST_CASE("local backend: a claude-code provider without its agent binary is refused naming it",
          "[backend][local][claude]") {
  StateRoot root;
  Context ctx;
  auto o = Options(root);
  o.provider = "claude-code";
  o.agent_bin = root.path() + "/missing/claude";
  auto backend = MakeLocalBackend(ctx, o);
  REQUIRE_FALSE(backend.has_value());
  CHECK(backend.error().code == Errc::invalid_argument);
  CHECK(backend.error().message.find("is not an executable file (--agent-bin)") != std::string::npos);
  // A Session asking for it on a backend whose default is another provider is refused at Ensure.
  o.provider = "echo";
  auto echo = MakeBackend(ctx, o);
  SessionSpec spec;
  spec.parameters["provider"] = "claude-code";
  auto made = echo->Ensure("s", spec);
  REQUIRE_FALSE(made.has_value());
  CHECK(made.error().message.find("--agent-bin") != std::string::npos);
}
