// The Router against a recording adapter and an in-process LocalBackend (echo and script providers):
// the kelos bridge catalogue generalized, and what the Router adds (reply-to routing across Sessions,
// commands, questions in the chat, rate limits, restart).
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "router_rig.hpp"
#include "test_store_support.hpp"
#include "routing/store.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/router.hpp"

using namespace router_test;

TEST_CASE("router: the first message creates the Session, the reply is edited into the placeholder, the next reuses it",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  auto d = rig.Send(Msg("1", "hello there"));
  REQUIRE(d);
  CHECK(*d == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  const std::string reply = rig.adapter.FindMessage("echo #1:");
  CHECK(rig.adapter.Text(reply).find("hello there") != std::string::npos);
  // The reply took the placeholder's place: the first post of the thread.
  auto ops = rig.adapter.Ops();
  REQUIRE_FALSE(ops.empty());
  CHECK(ops[0].kind == "post");
  CHECK(ops[0].message_id == reply);
  // The prompt starts with the envelope, not with what the author wrote.
  CHECK(rig.adapter.Text(reply).find("echo #1: [") != std::string::npos);

  REQUIRE(rig.Send(Msg("2", "again")));
  REQUIRE(rig.WaitDelivered(2));
  auto sessions = rig.backend->List();
  REQUIRE(sessions);
  REQUIRE(sessions->size() == 1);
  CHECK((*sessions)[0].name == SessionName("chat", "slack", "test-owner", "C1", "T1"));
  CHECK(rig.router->Stats().turns_completed == 2);
}

TEST_CASE("router: a redelivered message is a duplicate and runs once", "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  REQUIRE(*rig.Send(Msg("1", "once")) == Disposition::accepted);
  auto again = Msg("1", "once");
  again.event_id = "ev-redelivered";
  CHECK(*rig.Send(again) == Disposition::duplicate);
  auto same_event = Msg("9", "other id, same delivery");
  same_event.event_id = "ev-1";
  CHECK(*rig.Send(same_event) == Disposition::duplicate);
  REQUIRE(rig.adapter.WaitForText("echo #1:"));
  std::this_thread::sleep_for(300ms);
  CHECK(rig.adapter.CountMessagesWith("echo #") == 1);
}

TEST_CASE("router: messages that match no route never reach a Session and get no reply", "[routing][router]") {
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "echo", [](RouterOptions& o) { o.routes[0].users = {"U1"}; });
  auto stranger = Msg("1", "hi", "T1", "U2");
  CHECK(*rig.Send(stranger) == Disposition::ignored);
  auto own = Msg("2", "hi");
  own.is_self = true;
  CHECK(*rig.Send(own) == Disposition::ignored);
  auto bad = Msg("", "no id");
  auto refused = rig.Send(bad);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::invalid_argument);
  std::this_thread::sleep_for(200ms);
  CHECK(rig.adapter.Ops().empty());
  auto listed = rig.backend->List();
  REQUIRE(listed);
  CHECK(listed->empty());
}

TEST_CASE("router: one turn at a time per Session, receipts with positions, and a bounded queue", "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 1500},
      {"type": "message", "text": "done {n}"}]]})");
  Rig rig(root, ThreadedCaps(), "script:" + script, [](RouterOptions& o) { o.max_queued = 2; });
  REQUIRE(*rig.Send(Msg("1", "first")) == Disposition::accepted);
  REQUIRE(*rig.Send(Msg("2", "second")) == Disposition::accepted);
  REQUIRE(*rig.Send(Msg("3", "third")) == Disposition::accepted);
  CHECK(*rig.Send(Msg("4", "fourth")) == Disposition::refused);
  CHECK(rig.adapter.WaitForText("Queued \u2014 position 2"));
  CHECK(rig.adapter.WaitForText("Too many messages are queued"));
  REQUIRE(rig.adapter.WaitForText("done 3", 60s));
  // In order, one after another.
  const std::string one = rig.adapter.FindMessage("done 1");
  const std::string three = rig.adapter.FindMessage("done 3");
  CHECK_FALSE(one.empty());
  CHECK_FALSE(three.empty());
  CHECK(rig.adapter.FindMessage("done 4").empty());
  // The refused message is remembered: its redelivery does not slip in.
  CHECK(*rig.Send(Msg("4", "fourth")) == Disposition::duplicate);
}

TEST_CASE("router: a placeholder that cannot be posted gives exactly one new reply", "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  rig.adapter.fail_posts = 1;
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("echo #1:"));
  std::this_thread::sleep_for(200ms);
  CHECK(Posts(rig.adapter.Ops(), "echo #1:") == 1);
}

TEST_CASE("router: an adapter that completes a post twice has the second completion ignored and logged",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  rig.adapter.complete_posts_twice = true;
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  REQUIRE(*rig.Send(Msg("2", "again")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2));
  std::this_thread::sleep_for(100ms);
  // Each reply edited into its placeholder, once; each placeholder's second completion logged.
  const auto ops = rig.adapter.Ops();
  CHECK(Posts(ops, "echo #1:") == 0);
  CHECK(Posts(ops, "echo #2:") == 0);
  CHECK(rig.router->Stats().replies_delivered == 2);
  CHECK(rig.LoggedWith("was called a second time") == 2);
}

TEST_CASE("router: when every edit fails the reply is posted after two attempts at the placeholder", "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  rig.adapter.fail_edits = true;
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  auto ops = rig.adapter.Ops();
  CHECK(Posts(ops, "echo #1:") == 1);
  std::string final_text;
  for (const auto& op : ops) {
    if (op.kind == "post" && op.ok && op.text.find("echo #1:") != std::string::npos) final_text = op.text;
  }
  // Progress edits fail too (their text is the reply's start); the reply itself is tried twice.
  int final_edits = 0;
  for (const auto& op : ops) final_edits += op.kind == "edit" && op.text == final_text;
  CHECK(final_edits == 2);
}

TEST_CASE("router: a storm of 429s on edits still delivers the final reply", "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  rig.adapter.rate_limited_edits = 40;
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("echo #1:", 60s));
  CHECK(rig.adapter.CountMessagesWith("echo #1:") == 1);
}

TEST_CASE("router: in a chat without threads, new and use switch Sessions and a reply goes to the Session that wrote",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root, PrivateChatCaps());
  REQUIRE(*rig.Send(Msg("1", "to the first", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("echo #1: [slack"));
  const std::string first_reply = rig.adapter.FindMessage("to the first");
  REQUIRE(*rig.Send(Msg("2", "/new second", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Now talking to"));
  REQUIRE(*rig.Send(Msg("3", "to the second", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("to the second"));
  // The second Session's first turn.
  CHECK(rig.adapter.Text(rig.adapter.FindMessage("to the second")).find("echo #1:") != std::string::npos);
  // A reply to the first Session's message goes there, whatever is current.
  auto reply = Msg("4", "back to the first", "");
  reply.reply_to_message_id = first_reply;
  REQUIRE(*rig.Send(reply) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("back to the first"));
  CHECK(rig.adapter.Text(rig.adapter.FindMessage("back to the first")).find("echo #2:") != std::string::npos);
  auto listed = rig.backend->List();
  REQUIRE(listed);
  CHECK(listed->size() == 2);
  // Commands never reach a Session.
  CHECK(rig.adapter.FindMessage("/new").empty());
  REQUIRE(*rig.Send(Msg("5", "/sessions", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Sessions of this chat"));
  CHECK(rig.adapter.Text(rig.adapter.FindMessage("Sessions of this chat")).find("second") != std::string::npos);
  REQUIRE(*rig.Send(Msg("6", "/frobnicate", "")) == Disposition::accepted);
  CHECK(rig.adapter.WaitForText("sessions"));
}

namespace {

// A rig (commands are bare words) whose first message's turn (thread T1, by U1) has asked "Stop or
// continue?", with the options Stop and Continue.
struct AskingStop {
  AskingStop() {
    REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
    REQUIRE(rig.adapter.WaitForText("Stop or continue?"));
  }
  TempRoot root;
  Rig rig{root, ThreadedCaps(), "script:" + root.File("ask.json", R"({"turns": [[
    {"type": "question", "inputId": "go", "questions": [
      {"id": "next", "header": "Next", "question": "Stop or continue?",
       "options": [{"label": "Stop"}, {"label": "Continue"}]}]}]]})")};
};

}  // namespace

// Where commands are bare words (Slack), the asker's "stop" to "Stop or continue?" answers the question
// rather than stopping the turn.
TEST_CASE("router: a bare command word that names an option of the open question answers it", "[routing][router]") {
  AskingStop a;
  Rig& rig = a.rig;
  REQUIRE(*rig.Send(Msg("2", "stop")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Answers: next=Stop"));
  INFO(rig.adapter.Dump());
  CHECK(rig.adapter.CountMessagesWith("Stopping the running turn") == 0);
  CHECK(rig.adapter.CountMessagesWith("interrupted") == 0);
  // With no question open, "stop" is the command again.
  REQUIRE(rig.WaitDelivered(1));
  REQUIRE(*rig.Send(Msg("3", "stop")) == Disposition::accepted);
  CHECK(rig.adapter.WaitForText("Nothing is running."));
}

// Someone who may not answer the question (not its asker, not an admin), replying to it, gets the command.
TEST_CASE("router: a command word replied to the question by someone who may not answer it is the command",
          "[routing][router]") {
  AskingStop a;
  Rig& rig = a.rig;
  auto stop = Msg("2", "stop", "T1", "U2");
  stop.reply_to_message_id = rig.adapter.FindMessage("Stop or continue?");
  REQUIRE(*rig.Send(stop) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Stopping the running turn"));
  INFO(rig.adapter.Dump());
  CHECK(rig.adapter.CountMessagesWith("Only the person") == 0);
  CHECK(rig.adapter.CountMessagesWith("Answers: next=Stop") == 0);
}

namespace {

// Presses a button (its data) in `chat` as `user`: what the press's acknowledgement said.
std::string Press(Rig& rig, const std::string& data, const std::string& chat = "C1", const std::string& user = "U1") {
  auto acked = std::make_shared<std::promise<std::string>>();
  InboundAction press{"slack", "W1", chat, "", "m-list", user, "Ada " + user, data, "ev-" + data + chat,
                      [acked](std::string_view text) { acked->set_value(std::string(text)); }};
  rig.router->HandleAction(press);
  auto f = acked->get_future();
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  return f.get();
}

}  // namespace

// The `sessions` picker's buttons act in their own chat only, never bring back a deleted Session, and
// tell a press they cannot act on why.
TEST_CASE("router: the sessions picker's buttons are refused in another chat and for a deleted Session",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root, PrivateChatCaps());
  REQUIRE(*rig.Send(Msg("1", "first", "")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  REQUIRE(*rig.Send(Msg("2", "/new second", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Now talking to"));
  REQUIRE(*rig.Send(Msg("3", "/sessions", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Sessions of this chat"));
  std::vector<std::vector<Button>> rows;
  for (const auto& op : rig.adapter.Ops()) {
    if (op.text.find("Sessions of this chat") != std::string::npos) rows = op.buttons;
  }
  REQUIRE(rows.size() == 2);
  const std::string use_first = rows[0][0].data;
  const std::string use_second = rows[1][0].data;
  CHECK_THAT(rows[1][0].label, Catch::Contains("second"));
  // Another chat's press of this chat's button.
  CHECK_THAT(Press(rig, use_first, "C2"), Catch::Contains("another chat"));
  // A verb the bot never put on a button.
  std::string forged = use_first;
  forged[forged.rfind(':') + 1] = 'x';
  CHECK_THAT(Press(rig, forged), Catch::Contains("not one this bot made"));
  // Deleted since the list was posted: its button does not bring it back.
  REQUIRE(*rig.Send(Msg("5", "/delete second", "", "admin")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("again within a minute"));
  REQUIRE(*rig.Send(Msg("6", "/delete second", "", "admin")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Deleted "));
  const auto notes_before = rig.adapter.CountMessagesWith("Now talking to");
  CHECK_THAT(Press(rig, use_second), Catch::Contains("is gone"));
  // The first Session's button still works.
  CHECK(Press(rig, use_first).empty());
  REQUIRE(rig.adapter.WaitFor([&](const std::vector<SentOp>& ops) {
    int n = 0;
    for (const auto& op : ops) n += op.kind == "post" && op.text.find("Now talking to") != std::string::npos;
    return n == notes_before + 1;
  }));
  INFO(rig.adapter.Dump());
  CHECK(rig.adapter.CountMessagesWith("Now talking to **second") == 0);
}

// Each admin confirms their own `delete`: a second admin's first ask is not the first admin's confirmation.
TEST_CASE("router: a delete is confirmed by the admin who asked, not by another admin", "[routing][router]") {
  TempRoot root;
  Rig rig(root, PrivateChatCaps(), "echo", [](RouterOptions& o) { o.routes[0].admins = {"admin", "boss"}; });
  REQUIRE(*rig.Send(Msg("1", "/new doomed", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Now talking to"));
  REQUIRE(*rig.Send(Msg("2", "/delete doomed", "", "admin")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("again within a minute"));
  REQUIRE(*rig.Send(Msg("3", "/delete doomed", "", "boss")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitFor([](const std::vector<SentOp>& ops) {
    int n = 0;
    for (const auto& op : ops) n += op.text.find("again within a minute") != std::string::npos;
    return n == 2;
  }));
  CHECK(rig.adapter.CountMessagesWith("Deleted ") == 0);
  REQUIRE(*rig.Send(Msg("4", "/delete doomed", "", "boss")) == Disposition::accepted);
  CHECK(rig.adapter.WaitForText("Deleted "));
}

namespace {

// A rig whose Sessions run the language question's script: its first message's turn (thread T1) has
// asked "Which language?".
struct Asking {
  Asking() {
    REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
    REQUIRE(rig.adapter.WaitForText("Which language?"));
  }
  TempRoot root;
  Rig rig{root, ThreadedCaps(), "script:" + root.File("ask.json", kLanguageQuestion)};
};

}  // namespace

TEST_CASE("router: the agent's question is asked in the thread and answered by the next message, not by others",
          "[routing][router]") {
  Asking asking;
  Rig& rig = asking.rig;
  // Someone else's message is not an answer: it queues for the Session.
  REQUIRE(*rig.Send(Msg("2", "1", "T1", "U9")) == Disposition::accepted);
  // The author's is.
  REQUIRE(*rig.Send(Msg("3", "2")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Answers: lang=Python"));
  CHECK(rig.adapter.WaitForText("Answered by Ada U1: Python"));
}

TEST_CASE("router: a question is answered by the next message in a Slack thread, which replies to the thread's root",
          "[routing][router]") {
  Asking asking;
  TempRoot& root = asking.root;
  Rig& rig = asking.rig;
  // Once the router has the question's message id (it stores the question then): a reply to an
  // unknown message before that is taken for the question anyway.
  store_test::RawDb raw(root.path() + "/router.db");
  REQUIRE(backend_test::Eventually([&] { return raw.Int("SELECT count(*) FROM questions") == 1; }));
  // Slack's events mark every message in a thread as a reply to the thread's first message
  // (thread_ts): the answer is written in the thread, not a reply to another message.
  InboundMessage answer = Msg("2", "2");
  answer.reply_to_message_id = "T1";
  REQUIRE(*rig.Send(answer) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Answers: lang=Python"));
  CHECK(rig.adapter.WaitForText("Answered by Ada U1: Python"));
  CHECK(rig.WaitDelivered(1));  // the turn's reply, once
  CHECK(rig.adapter.CountMessagesWith("Answers: lang=Python") == 1);
}

TEST_CASE("router: with two questions open in a chat without threads, a plain answer is asked to name one",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  Rig rig(root, PrivateChatCaps(), "script:" + script);
  auto questions = [](const std::vector<SentOp>& ops) {
    std::vector<std::string> ids;
    for (const auto& op : ops) {
      if (op.kind == "post" && op.ok && op.text.find("Which language?") != std::string::npos) ids.push_back(op.message_id);
    }
    return ids;
  };
  // U1's turn in the first Session asks; U2's in a second Session asks too (U2 may not answer U1's
  // question, so U2's message is a prompt, not an answer).
  REQUIRE(*rig.Send(Msg("1", "start", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitFor([&](const std::vector<SentOp>& ops) { return questions(ops).size() == 1; }));
  REQUIRE(*rig.Send(Msg("2", "/new second", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Now talking to"));
  REQUIRE(*rig.Send(Msg("3", "start too", "", "U2")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitFor([&](const std::vector<SentOp>& ops) { return questions(ops).size() == 2; }));
  const std::string second = questions(rig.adapter.Ops()).at(1);
  // An admin may answer both: a plain "2" names neither, and answers neither.
  REQUIRE(*rig.Send(Msg("4", "2", "", "admin")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("More than one of the agent's questions is open here"));
  CHECK(rig.adapter.CountMessagesWith("Answers: lang=") == 0);
  // A reply to the second question answers it; then U1's plain answer can only mean the first.
  InboundMessage reply = Msg("5", "1", "", "admin");
  reply.reply_to_message_id = second;
  REQUIRE(*rig.Send(reply) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Answers: lang=C++"));
  REQUIRE(*rig.Send(Msg("6", "2", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Answers: lang=Python"));
  CHECK(rig.adapter.CountMessagesWith("Answers: lang=") == 2);
  CHECK(rig.adapter.CountMessagesWith("More than one of the agent's questions") == 1);
}

TEST_CASE("router: a question answered by a button press, and a stale button is told so", "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  Rig rig(root, ThreadedCaps(), "script:" + script);
  REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitFor([](const std::vector<SentOp>& ops) {
    for (const auto& op : ops) {
      if (!op.buttons.empty()) return true;
    }
    return false;
  }));
  std::string data;
  std::string question_message;
  for (const auto& op : rig.adapter.Ops()) {
    if (!op.buttons.empty()) {
      data = op.buttons.at(0).at(0).data;
      question_message = op.message_id;
    }
  }
  auto acked = std::make_shared<std::promise<std::string>>();
  InboundAction press{"slack", "W1", "C1", "T1", question_message, "U1", "Ada U1", data, "ev-b1",
                      [acked](std::string_view text) { acked->set_value(std::string(text)); }};
  rig.router->HandleAction(press);
  CHECK(acked->get_future().get().empty());
  REQUIRE(rig.adapter.WaitForText("Answers: lang=C++"));
  auto stale = std::make_shared<std::promise<std::string>>();
  press.ack = [stale](std::string_view text) { stale->set_value(std::string(text)); };
  rig.router->HandleAction(press);
  CHECK(stale->get_future().get().find("no longer open") != std::string::npos);
}

TEST_CASE("router: a button pressed before the question's post came back still marks the question's message",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  Rig rig(root, ThreadedCaps(), "script:" + script);
  rig.adapter.hold_button_posts = true;  // the platform shows the question; its message id comes back late
  REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitFor([](const std::vector<SentOp>& ops) {
    for (const auto& op : ops) {
      if (!op.buttons.empty()) return true;
    }
    return false;
  }));
  std::string data, question_message;
  for (const auto& op : rig.adapter.Ops()) {
    if (!op.buttons.empty()) {
      data = op.buttons.at(1).at(0).data;
      question_message = op.message_id;
    }
  }
  auto acked = std::make_shared<std::promise<std::string>>();
  InboundAction press{"slack", "W1", "C1", "T1", question_message, "U1", "Ada U1", data, "ev-b1",
                      [acked](std::string_view text) { acked->set_value(std::string(text)); }};
  rig.router->HandleAction(press);  // matched by the button's data: answered at once
  CHECK(acked->get_future().get().empty());
  REQUIRE(rig.adapter.WaitForText("Answers: lang=Python"));
  REQUIRE(rig.WaitDelivered(1));
  CHECK(rig.adapter.CountMessagesWith("Answered by") == 0);  // no id yet: nothing to edit
  rig.adapter.ReleaseHeld();
  CHECK(rig.adapter.WaitForText("Answered by Ada U1: Python"));
  CHECK(rig.router->Stats().open_questions == 0);
  // Answered before its post came back: never stored as open (a restart must not ask it again).
  rig.router.reset();
  auto store = sessionturn::routing::RouterStore::Open(root.path() + "/router.db");
  REQUIRE(store);
  auto open = (*store)->ListQuestions();
  REQUIRE(open);
  CHECK(open->empty());
}

TEST_CASE("router: a reply to the question made before its post came back answers it", "[routing][router]") {
  // The platform shows the question and the user replies to it before the bot learns the message's id
  // (seen with Telegram's long polling under load): the reply is the answer, not a new prompt.
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  Rig rig(root, ThreadedCaps(), "script:" + script);
  rig.adapter.hold_button_posts = true;
  REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitFor([](const std::vector<SentOp>& ops) {
    for (const auto& op : ops) {
      if (!op.buttons.empty()) return true;
    }
    return false;
  }));
  std::string question_message;
  for (const auto& op : rig.adapter.Ops()) {
    if (!op.buttons.empty()) question_message = op.message_id;
  }
  auto reply = Msg("2", "c++");
  reply.reply_to_message_id = question_message;
  REQUIRE(*rig.Send(reply) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Answers: lang=C++"));  // the answer, not a second prompt queued behind
  rig.adapter.ReleaseHeld();
  CHECK(rig.adapter.WaitForText("Answered by"));
}

TEST_CASE("router: an unanswered question is declined at the answer timeout and the thread is told",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", R"({"turns": [[
      {"type": "question", "questions": [{"id": "q", "question": "Proceed?"}]}]]})");
  Rig rig(root, ThreadedCaps(), "script:" + script, [](RouterOptions& o) { o.answer_timeout = 500ms; });
  REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Proceed?"));
  REQUIRE(rig.adapter.WaitForText("No answer within"));
  CHECK(rig.adapter.WaitForText("The question was declined."));
}

TEST_CASE("router: a Session another owner holds is refused, and the thread is told who holds it", "[routing][router]") {
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "echo", {}, [](LocalBackendOptions& b) { b.owner = "bot-a"; });
  // Another bot made this thread's Session first, in the same state root.
  LocalBackendOptions other;
  other.state_dir = root.path() + "/state";
  other.in_process = true;
  other.owner = "bot-b";
  auto theirs = MakeLocalBackend(rig.context, other);
  REQUIRE(theirs);
  REQUIRE((*theirs)->Ensure(SessionName("chat", "slack", "test-owner", "C1", "T1"), {}));
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  const std::string reply = rig.adapter.FindMessage("could not be created");
  REQUIRE_FALSE(reply.empty());
  CHECK(rig.adapter.Text(reply).find("bot-b") != std::string::npos);
  CHECK(rig.adapter.FindMessage("echo #").empty());
}

TEST_CASE("router: a platform with a typing indicator shows it while the turn runs, and one without gets none",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 6000},
      {"type": "message", "text": "slow reply"}]]})");
  ChatCapabilities caps = ThreadedCaps();
  caps.typing = true;
  Rig rig(root, caps, "script:" + script);
  // Two turns at once, in two threads, started 2 s apart: the router's one ticker renews each one's
  // indicator 5 s after its own start (within its one-second period), not both at the same moment.
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  std::this_thread::sleep_for(2s);
  REQUIRE(*rig.Send(Msg("2", "hello too", "T2")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2));
  for (const char* thread : {"T1", "T2"}) {
    INFO(thread);
    const auto times = rig.adapter.TypingTimesIn(thread);
    REQUIRE(times.size() >= 2);  // at the start, and renewed 5 s later
    CHECK(times[1] - times[0] >= 4500ms);
    CHECK(times[1] - times[0] <= 6500ms);
  }
  const auto t1 = rig.adapter.TypingTimesIn("T1");
  const auto t2 = rig.adapter.TypingTimesIn("T2");
  CHECK(t2[1] - t1[1] >= 1s);  // each on its own phase
  CHECK(rig.adapter.TypingCalls() == t1.size() + t2.size());
  TempRoot other_root;
  Rig plain(other_root);
  REQUIRE(*plain.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(plain.WaitDelivered(1));
  CHECK(plain.adapter.TypingCalls() == 0);
}

TEST_CASE("router: the placeholder is in the thread within a second, long before a slow reply", "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 3000},
      {"type": "message", "text": "slow reply"}]]})");
  Rig rig(root, ThreadedCaps(), "script:" + script);
  const auto sent = std::chrono::steady_clock::now();
  rig.router->HandleMessage(Msg("1", "hello"));
  REQUIRE(rig.adapter.WaitFor([](const std::vector<SentOp>& ops) { return !ops.empty(); }, 1s));
  CHECK(std::chrono::steady_clock::now() - sent < 1s);
  CHECK(rig.adapter.Ops().front().kind == "post");
  CHECK(rig.adapter.FindMessage("slow reply").empty());
  REQUIRE(rig.WaitDelivered(1));
}

TEST_CASE("router: a placeholder's post spends the chat's edit budget: a quick turn gets no progress edit",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "echo", [](RouterOptions& o) { o.progress_interval = 5s; });
  rig.router->HandleMessage(Msg("1", "hello"));
  REQUIRE(rig.WaitDelivered(1));
  std::this_thread::sleep_for(100ms);
  const auto ops = rig.adapter.Ops();
  INFO(rig.adapter.Dump());
  REQUIRE(ops.size() == 2);  // the placeholder, then the reply edited into it: nothing in between
  CHECK(ops[0].kind == "post");
  CHECK(ops[1].kind == "edit");
  CHECK(ops[1].message_id == ops[0].message_id);
  CHECK(ops[1].text.find("echo #1:") != std::string::npos);
  CHECK(rig.router->Stats().edits_sent == 0);

  // A slower turn still shows progress, once the interval after the post has passed.
  TempRoot root2;
  const std::string script = root2.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 1500},
      {"type": "message", "text": "slow reply"}]]})");
  Rig slow(root2, ThreadedCaps(), "script:" + script, [](RouterOptions& o) { o.progress_interval = 300ms; });
  slow.router->HandleMessage(Msg("1", "hello"));
  REQUIRE(slow.WaitDelivered(1));
  const auto slow_ops = slow.adapter.Ops();
  INFO(slow.adapter.Dump());
  REQUIRE(slow_ops.size() >= 3);
  CHECK(slow_ops[1].kind == "edit");
  CHECK(slow_ops[1].text.find("Working") != std::string::npos);
  CHECK(slow.adapter.Text(slow_ops[0].message_id).find("slow reply") != std::string::npos);
}

TEST_CASE("router: progress shows the end of the streamed reply, cut on a whole character", "[routing][router]") {
  // 13 + 400 + 15 bytes streamed in three deltas (each alpha is two bytes), then a pause: the progress
  // edit shows the last 280 bytes at most, from the start of a character (280 would start inside an
  // alpha: 279 do), so "start-marker" is gone.
  TempRoot root;
  const std::string script = root.File("stream.json", R"({"turns": [[{"type": "delta", "text": "start-marker "},
      {"type": "delta", "text": "\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1"}, {"type": "delta", "text": " end of stream."},
      {"type": "sleep", "ms": 1500}, {"type": "message", "text": "streamed reply"}]]})");
  Rig rig(root, ThreadedCaps(), "script:" + script, [](RouterOptions& o) { o.progress_interval = 300ms; });
  rig.router->HandleMessage(Msg("1", "hello"));
  REQUIRE(rig.WaitDelivered(1));
  INFO(rig.adapter.Dump());
  std::string shown;
  for (const auto& op : rig.adapter.Ops()) {
    if (op.kind == "edit" && op.text.find("end of stream") != std::string::npos) shown = op.text;
  }
  REQUIRE(!shown.empty());
  // The tail is a paragraph of its own after an ellipsis (in italics where the dialect has them; this
  // adapter's is plain text).
  const std::string open = "\n\n\xE2\x80\xA6";
  const auto at = shown.find(open);
  REQUIRE(at != std::string::npos);
  const std::string tail = shown.substr(at + open.size());
  CHECK(tail.size() == 279);
  CHECK(tail.find("start-marker") == std::string::npos);
  CHECK(tail.ends_with(" end of stream."));
  CHECK(tail.rfind("\xCE\xB1", 0) == 0);  // starts with a whole alpha, not its second byte
}

TEST_CASE("router: a burst with several messages for one Session runs them one at a time", "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [
      [{"type": "sleep", "ms": 1500}, {"type": "message", "text": "first reply"}],
      [{"type": "message", "text": "second reply"}], [{"type": "message", "text": "third reply"}]]})");
  Rig rig(root, ThreadedCaps(), "script:" + script);
  std::vector<std::shared_ptr<std::promise<Result<Disposition>>>> taken;
  for (int i = 0; i < 3; ++i) {  // one thread, so one Session; handed over together, so drained together
    auto p = std::make_shared<std::promise<Result<Disposition>>>();
    taken.push_back(p);
    rig.router->HandleMessage(Msg(std::to_string(i), "message " + std::to_string(i)),
                              [p](Result<Disposition> d) { p->set_value(std::move(d)); });
  }
  for (auto& p : taken) {
    auto d = p->get_future().get();
    REQUIRE(d);
    REQUIRE(*d == Disposition::accepted);
  }
  std::size_t most_in_flight = 0;
  for (auto until = std::chrono::steady_clock::now() + 600ms; std::chrono::steady_clock::now() < until;) {
    most_in_flight = std::max(most_in_flight, rig.router->Stats().turns_in_flight);
    std::this_thread::sleep_for(5ms);
  }
  CHECK(most_in_flight == 1);
  CHECK(rig.router->Stats().turns_waiting == 2);
  REQUIRE(rig.WaitDelivered(3));
  CHECK(rig.adapter.CountMessagesWith("first reply") == 1);
  CHECK(rig.adapter.CountMessagesWith("third reply") == 1);
}

TEST_CASE("router: a burst is accepted together, and a redelivery inside the burst is still a duplicate",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  std::vector<std::shared_ptr<std::promise<Result<Disposition>>>> taken;
  for (int i = 0; i < 20; ++i) {
    // Message 5 arrives twice in the burst, the second time as a redelivery with its own event id.
    auto m = i == 10 ? Msg("5", "thread 5's message", "B5") : Msg(std::to_string(i), "message " + std::to_string(i),
                                                                    "B" + std::to_string(i));
    if (i == 10) m.event_id = "ev-redelivered";
    auto p = std::make_shared<std::promise<Result<Disposition>>>();
    taken.push_back(p);
    rig.router->HandleMessage(std::move(m), [p](Result<Disposition> d) { p->set_value(std::move(d)); });
  }
  int accepted = 0;
  int duplicates = 0;
  for (auto& p : taken) {
    auto d = p->get_future().get();
    REQUIRE(d);
    accepted += *d == Disposition::accepted;
    duplicates += *d == Disposition::duplicate;
  }
  CHECK(accepted == 19);
  CHECK(duplicates == 1);
  REQUIRE(rig.WaitDelivered(19));
  std::this_thread::sleep_for(200ms);
  CHECK(rig.router->Stats().replies_delivered == 19);
  CHECK(rig.adapter.CountMessagesWith("message 5") == 1);
}

TEST_CASE("router: messages handed over before Start run once, not again as work found in the store",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  rig.router.reset();  // the rig's router started; this one gets its messages first
  auto made = Router::Create(rig.context, *rig.backend, rig.adapter, rig.options);
  REQUIRE(made);
  rig.router = std::move(*made);
  for (int i = 1; i <= 3; ++i) {
    rig.router->HandleMessage(Msg(std::to_string(i), "early " + std::to_string(i), "T" + std::to_string(i)));
  }
  rig.router->Start();
  REQUIRE(rig.WaitDelivered(3));
  std::this_thread::sleep_for(500ms);
  INFO(rig.adapter.Dump());
  const RouterStats stats = rig.router->Stats();
  CHECK(stats.turns_completed == 3);
  CHECK(stats.replies_delivered == 3);
  // Nothing was taken for a turn left by a previous run.
  CHECK(Posts(rig.adapter.Ops(), "Picking this up again") == 0);
  for (int i = 1; i <= 3; ++i) CHECK_FALSE(rig.adapter.FindMessage("early " + std::to_string(i)).empty());
}
