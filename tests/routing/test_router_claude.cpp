// The Router over LocalBackend Sessions with the claude-code provider (the scripted fake agent,
// tests/fakes/fake_claude.py): the agent's question reaches the chat and the answer given there goes
// back to the agent; a tool permission asked in the chat; and the conversation survives an idle
// suspension (the woken runtime resumes the agent's conversation).
#include <catch2/catch.hpp>

#include "router_rig.hpp"

using namespace router_test;

namespace {

const std::string kFakeClaude = std::string(SESSIONTURN_SOURCE_DIR) + "/tests/fakes/fake_claude.py";

void WithFakeAgent(LocalBackendOptions& b) { b.agent_bin = kFakeClaude; }

// Replies to the bot message that shows `question` with `answer`, as the thread's author.
void AnswerInChat(Rig& rig, const std::string& question, const std::string& id, const std::string& answer) {
  REQUIRE(rig.adapter.WaitForText(question));
  std::this_thread::sleep_for(200ms);  // the router learns the question message's id from the post
  const std::string message = rig.adapter.FindMessage(question);
  REQUIRE_FALSE(message.empty());
  auto reply = Msg(id, answer);
  reply.reply_to_message_id = message;
  REQUIRE(*rig.Send(reply) == Disposition::accepted);
}

}  // namespace

TEST_CASE("router with claude-code: the agent's question is asked in the chat and the answer reaches the agent",
          "[routing][router][claude]") {
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "claude-code", {}, WithFakeAgent);
  REQUIRE(*rig.Send(Msg("1", "ask")) == Disposition::accepted);
  AnswerInChat(rig, "Which color?", "2", "Blue");
  REQUIRE(rig.WaitDelivered(1));
  CHECK(rig.adapter.WaitForText("answers: Which color?=Blue"));
}

TEST_CASE("router with claude-code: a tool permission is a question in the chat", "[routing][router][claude]") {
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "claude-code", {}, WithFakeAgent);
  REQUIRE(*rig.Send(Msg("1", "permission")) == Disposition::accepted);
  AnswerInChat(rig, "Claude Code wants to use Bash: rm -rf build", "2", "Deny");
  REQUIRE(rig.WaitDelivered(1));
  CHECK(rig.adapter.WaitForText("denied: The user denied this tool use"));
}

TEST_CASE("router with claude-code: after an idle suspension the woken Session's agent remembers",
          "[routing][router][claude]") {
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "claude-code", {}, [](LocalBackendOptions& b) {
    WithFakeAgent(b);
    OutOfProcess(b);
    b.suspend_after = std::chrono::seconds(1);
  });
  REQUIRE(*rig.Send(Msg("1", "the answer is 42")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  CHECK(rig.adapter.WaitForText("you said: the answer is 42"));
  const std::string session = SessionName("chat", "slack", "test-owner", "C1", "T1");
  REQUIRE(backend_test::Eventually([&] {
    auto info = rig.backend->Get(session);
    return info && info->suspended == SuspendReason::idle;
  }));
  REQUIRE(*rig.Send(Msg("2", "recall")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2));
  REQUIRE(rig.adapter.WaitForText("earlier prompts: "));
  const std::string recall = rig.adapter.FindMessage("earlier prompts: ");
  REQUIRE_FALSE(recall.empty());
  CHECK(rig.adapter.Text(recall).find("the answer is 42") != std::string::npos);
  // Two starts of the agent: a new conversation, then the same one resumed.
  const std::string starts = backend_test::ReadFile(root.path() + "/state/sessions/" + session +
                                                    "/workspace/.fake-claude/starts.jsonl");
  CHECK(starts.find("--session-id") != std::string::npos);
  CHECK(starts.find("--resume") != std::string::npos);
}
