// Messages taken in together, in one burst (a platform redelivering after an outage hands many over
// at once): a message with its edit or deletion, and a command among messages, which is taken in on
// its own so that nothing it did can be rolled back with the burst (and run twice when the platform
// delivers it again), and in its place, so that each message finds the chat as the ones before left it.
#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "router_rig.hpp"
#include "test_store_support.hpp"

using namespace router_test;

namespace {

// A message of chat C9, away from the chat under test: it makes the post the burst is handed over at.
InboundMessage Trigger(const std::string& id) {
  InboundMessage m = Msg(id, "warm-up " + id, "");
  m.chat = "C9";
  return m;
}

// The store refuses to take in any message whose text holds "doomed" (the row is written at the
// burst's commit, or at once outside a batch).
void RefuseDoomed(const TempRoot& root, bool refuse) {
  store_test::RawDb raw(root.path() + "/router.db");
  raw.Exec(refuse ? "CREATE TRIGGER refuse_doomed BEFORE INSERT ON work WHEN NEW.message LIKE '%doomed%' "
                    "BEGIN SELECT RAISE(ABORT, 'injected intake failure'); END"
                  : "DROP TRIGGER refuse_doomed");
}

// A chat without threads whose first message was answered, by its current Session.
struct PrivateChat {
  explicit PrivateChat(bool refuse_doomed) {
    REQUIRE(*rig.Send(Msg("1", "to the first", "")) == Disposition::accepted);
    REQUIRE(rig.WaitDelivered(1));
    if (refuse_doomed) RefuseDoomed(root, true);
  }
  TempRoot root;
  Rig rig{root, PrivateChatCaps()};
  Together together{rig};
};

// The reply the thread shows now for the message whose text holds `needle`.
std::string ReplyTo(RecordingAdapter& adapter, const std::string& needle) {
  return adapter.Text(adapter.FindMessage(needle));
}

}  // namespace

TEST_CASE("router: a message and its edit taken in together run as edited", "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  Together together(rig);
  for (const auto& d : together.Send(Msg("0", "warm-up", "T0"),
                                     {Msg("1", "the first draft", "T1"), Edited("1", "the edited text", "ev-e1")})) {
    CHECK(*d == Disposition::accepted);
  }
  REQUIRE(rig.WaitDelivered(2));
  std::this_thread::sleep_for(300ms);
  INFO(rig.adapter.Dump());
  CHECK(rig.adapter.CountMessagesWith("the edited text") == 1);
  CHECK(rig.adapter.CountMessagesWith("the first draft") == 0);
}

TEST_CASE("router: a message and its deletion taken in together never run", "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  Together together(rig);
  for (const auto& d :
       together.Send(Msg("0", "warm-up", "T0"), {Msg("1", "the doomed job", "T1"), Deleted("1", "ev-d1")})) {
    CHECK(*d == Disposition::accepted);
  }
  REQUIRE(rig.WaitDelivered(1));
  REQUIRE(rig.adapter.WaitForText("Withdrawn: the message was deleted"));
  std::this_thread::sleep_for(300ms);
  INFO(rig.adapter.Dump());
  CHECK(rig.adapter.CountMessagesWith("the doomed job") == 0);
  CHECK(rig.router->Stats().replies_delivered == 1);
  CHECK(rig.router->Stats().turns_in_flight == 0);
}

TEST_CASE("router: a command in a burst takes effect in its place: the messages after it find the chat it left",
          "[routing][router]") {
  PrivateChat chat(/*refuse_doomed=*/false);
  Rig& rig = chat.rig;
  Together& together = chat.together;
  const std::string first = SessionName(rig.options.session_prefix, "slack", rig.options.owner_uid, "C1", "");
  const auto taken = together.Send(Trigger("w1"), {Msg("2", "before the switch", ""), Msg("3", "/new second", ""),
                                                   Msg("4", "after the switch", ""), Msg("5", "/use " + first, ""),
                                                   Msg("6", "back to the first", "")});
  for (const auto& d : taken) CHECK(*d == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(5));  // messages 1, w1, 2, 4 and 6
  INFO(rig.adapter.Dump());
  // Message 1 was the first Session's turn 1.
  CHECK(ReplyTo(rig.adapter, "before the switch").find("echo #2:") != std::string::npos);
  CHECK(ReplyTo(rig.adapter, "after the switch").find("echo #1:") != std::string::npos);  // the new Session
  CHECK(ReplyTo(rig.adapter, "back to the first").find("echo #3:") != std::string::npos);
  CHECK(Posts(rig.adapter.Ops(), "Now talking to") == 2);
}

TEST_CASE("router: a command handed over with a message whose commit fails runs once, not again on redelivery",
          "[routing][router]") {
  PrivateChat chat(/*refuse_doomed=*/true);
  Rig& rig = chat.rig;
  Together& together = chat.together;
  // The command is taken in on its own, before the message: it runs, and its dedupe key is kept. The
  // message is refused with the store's reason, so the platform delivers it again.
  auto taken = together.Send(Trigger("w1"), {Msg("2", "/new", ""), Msg("3", "the doomed message", "")});
  REQUIRE(taken.size() == 2);
  CHECK(*taken[0] == Disposition::accepted);
  REQUIRE_FALSE(taken[1]);
  CHECK_THAT(taken[1].error().message, Catch::Contains("injected intake failure"));
  REQUIRE(rig.adapter.WaitForText("Now talking to"));
  RefuseDoomed(chat.root, false);
  // The platform delivers both again: the command is a duplicate (it does not make a second
  // Session), and the message goes to the Session the command made.
  taken = together.Send(Trigger("w2"), {Msg("2", "/new", ""), Msg("3", "the doomed message", "")});
  CHECK(*taken[0] == Disposition::duplicate);
  CHECK(*taken[1] == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(4));  // messages 1, w1, w2 and 3
  std::this_thread::sleep_for(300ms);
  INFO(rig.adapter.Dump());
  CHECK(Posts(rig.adapter.Ops(), "Now talking to") == 1);
  CHECK(ReplyTo(rig.adapter, "the doomed message").find("echo #1:") != std::string::npos);  // the new Session
  auto listed = rig.backend->List();
  REQUIRE(listed);
  CHECK(listed->size() == 3);  // the chat's first Session, the one `new` made, and C9's
}

TEST_CASE("router: a burst whose commit fails refuses the messages after it unseen, and its redelivery runs in order",
          "[routing][router]") {
  PrivateChat chat(/*refuse_doomed=*/true);
  Rig& rig = chat.rig;
  Together& together = chat.together;
  const std::vector<InboundMessage> burst = {Msg("2", "the doomed message", ""), Msg("3", "/new", ""),
                                             Msg("4", "after the switch", "")};
  // The message's row fails the commit that comes before the command: the command never runs, and the
  // message after it is not taken in either (so the platform delivers all three again, in order).
  auto taken = together.Send(Trigger("w1"), burst);
  REQUIRE(taken.size() == 3);
  for (const auto& d : taken) {
    REQUIRE_FALSE(d);
  }
  CHECK_THAT(taken[0].error().message, Catch::Contains("injected intake failure"));
  CHECK_THAT(taken[1].error().message, Catch::Contains("a message before it failed"));
  CHECK_THAT(taken[2].error().message, Catch::Contains("a message before it failed"));
  RefuseDoomed(chat.root, false);
  taken = together.Send(Trigger("w2"), burst);
  for (const auto& d : taken) CHECK(*d == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("after the switch"));
  REQUIRE(rig.WaitDelivered(5));  // messages 1, w1, w2, 2 and 4
  std::this_thread::sleep_for(300ms);
  INFO(rig.adapter.Dump());
  CHECK(Posts(rig.adapter.Ops(), "Now talking to") == 1);
  CHECK(ReplyTo(rig.adapter, "the doomed message").find("echo #2:") != std::string::npos);  // the first Session
  CHECK(ReplyTo(rig.adapter, "after the switch").find("echo #1:") != std::string::npos);    // the new one
}

TEST_CASE("router: a burst whose batch cannot begin is taken in one by one, a command still in its place",
          "[routing][router]") {
  PrivateChat chat(/*refuse_doomed=*/false);
  Rig& rig = chat.rig;
  Together& together = chat.together;
  // Another connection holds the file's write lock when the burst is handed over, so the burst's
  // BEGIN IMMEDIATE fails once the store's busy timeout (5 s) is up; the lock is let go when the
  // router says so (its log line, on its strand), and each message then has a transaction of its own.
  store_test::RawDb raw(chat.root.path() + "/router.db");
  std::atomic<bool> locked{false}, released{false};
  rig.OnLog([&](std::string_view line) {
    if (line.find("accepting messages one by one") != std::string_view::npos && locked.exchange(false))
      released = raw.TryExec("COMMIT");
  });
  const auto taken = together.Send(Trigger("w1"),
                                   {Msg("2", "before the switch", ""), Msg("3", "/status", ""),
                                    Msg("4", "/new second", ""), Msg("5", "after the switch", "")},
                                   [&] { locked = raw.TryExec("BEGIN IMMEDIATE"); });
  rig.OnLog(nullptr);
  CHECK(released);
  REQUIRE(taken.size() == 4);
  for (const auto& d : taken) CHECK(*d == Disposition::accepted);
  CHECK(rig.LoggedWith("accepting messages one by one") == 1);
  // `status` ran once the message before it was queued, as it would have in a batch.
  REQUIRE(rig.adapter.WaitForText("message(s) queued"));
  CHECK(rig.adapter.CountMessagesWith("1 message(s) queued.") == 1);
  REQUIRE(rig.WaitDelivered(4));  // messages 1, w1, 2 and 4
  std::this_thread::sleep_for(300ms);
  INFO(rig.adapter.Dump());
  CHECK(Posts(rig.adapter.Ops(), "Now talking to") == 1);
  CHECK(ReplyTo(rig.adapter, "before the switch").find("echo #2:") != std::string::npos);  // the first Session
  CHECK(ReplyTo(rig.adapter, "after the switch").find("echo #1:") != std::string::npos);   // the new one
}

TEST_CASE("router: a burst past the queue bound accepts what fits and refuses the rest once, each remembered",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  Together together(rig);
  std::vector<InboundMessage> burst;
  for (int i = 1; i <= 12; ++i) burst.push_back(Msg(std::to_string(i), "job " + std::to_string(i) + ".", "T1"));
  const auto taken = together.Send(Msg("0", "warm-up", "T0"), burst);
  REQUIRE(taken.size() == 12);
  // The first starts, max_queued (8) wait behind it; the rest are refused, each taken in on its own.
  for (std::size_t i = 0; i < taken.size(); ++i) {
    INFO("message " << i + 1);
    CHECK(*taken[i] == (i < 9 ? Disposition::accepted : Disposition::refused));
  }
  REQUIRE(rig.WaitDelivered(10));  // the warm-up and the nine accepted
  INFO(rig.adapter.Dump());
  CHECK(Posts(rig.adapter.Ops(), "Too many messages are queued") == 3);
  // Their ids are remembered: a redelivery does not slip in now that the queue is empty.
  for (int i = 10; i <= 12; ++i)
    CHECK(*rig.Send(Msg(std::to_string(i), "job " + std::to_string(i) + ".", "T1")) == Disposition::duplicate);
  for (int i = 1; i <= 9; ++i) CHECK(rig.adapter.CountMessagesWith("job " + std::to_string(i) + ".") == 1);
  CHECK(rig.adapter.CountMessagesWith("job 10.") == 0);
}

TEST_CASE("router: a command in a burst that cannot be taken in refuses the messages after it, and runs once "
          "redelivered",
          "[routing][router]") {
  PrivateChat chat(/*refuse_doomed=*/false);
  Rig& rig = chat.rig;
  Together& together = chat.together;
  {
    // The store refuses to remember message 3's delivery id (its second key, after its message id), so
    // the command cannot be taken in; neither key may be kept, or its redelivery would be dropped.
    store_test::RawDb raw(chat.root.path() + "/router.db");
    raw.Exec("CREATE TRIGGER refuse_3 BEFORE INSERT ON dedupe_event WHEN NEW.key LIKE '%' || char(31) || 'ev-3' "
             "BEGIN SELECT RAISE(ABORT, 'injected dedupe failure'); END");
  }
  auto taken = together.Send(Trigger("w1"), {Msg("2", "before the switch", ""), Msg("3", "/new", ""),
                                             Msg("4", "after the switch", "")});
  REQUIRE(taken.size() == 3);
  CHECK(*taken[0] == Disposition::accepted);
  REQUIRE_FALSE(taken[1]);
  CHECK_THAT(taken[1].error().message, Catch::Contains("injected dedupe failure"));
  // Message 4 must not go to the old Session ahead of the command's redelivery.
  REQUIRE_FALSE(taken[2]);
  CHECK_THAT(taken[2].error().message, Catch::Contains("a message before it failed"));
  {
    store_test::RawDb raw(chat.root.path() + "/router.db");
    raw.Exec("DROP TRIGGER refuse_3");
  }
  taken = together.Send(Trigger("w2"), {Msg("3", "/new", ""), Msg("4", "after the switch", "")});
  for (const auto& d : taken) CHECK(*d == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(5));  // messages 1, w1, 2, w2 and 4
  std::this_thread::sleep_for(300ms);
  INFO(rig.adapter.Dump());
  CHECK(Posts(rig.adapter.Ops(), "Now talking to") == 1);
  CHECK(ReplyTo(rig.adapter, "before the switch").find("echo #2:") != std::string::npos);  // the first Session
  CHECK(ReplyTo(rig.adapter, "after the switch").find("echo #1:") != std::string::npos);   // the new one
}

TEST_CASE("router: an answer in a burst answers the agent's question, and the message after it waits its turn",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  Rig rig(root, ThreadedCaps(), "script:" + script);
  Together together(rig);
  REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Which language?"));
  const auto taken = together.Send(Msg("0", "warm-up", "T9"), {Msg("2", "2"), Msg("3", "after the answer")});
  for (const auto& d : taken) CHECK(*d == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Answers: lang=Python"));
  CHECK(rig.adapter.WaitForText("Answered by Ada U1: Python"));
  // Message 3 is the thread's next turn: the script asks its question again there.
  auto asked_in_t1 = [](const std::vector<SentOp>& ops) {
    int n = 0;
    for (const auto& op : ops) {
      const bool question = op.text.find("Which language?") != std::string::npos;
      n += op.kind == "post" && op.ok && op.where.thread == "T1" && question;
    }
    return n;
  };
  CHECK(rig.adapter.WaitFor([&](const std::vector<SentOp>& ops) { return asked_in_t1(ops) == 2; }));
}
