// RouterStore::AcceptMessage with a TurnStart: a message whose turn starts with its acceptance is one
// row written as a turn in flight (no inbox entry, no UPDATE at its start), read back as BeginTurn
// would have left it, edited and withdrawn as a turn not sent yet, and refused or rolled back as a
// turn's start is.
#include "test_store_support.hpp"

using namespace store_test;

TEST_CASE("store: a message accepted with its turn's start is a turn in flight, as BeginTurn leaves one",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const TurnStart start{"req-1", TurnCursor{17, "journal-1", "ignored", 9}};
  auto id = s.AcceptMessage(Thread(), "sess", Message("hello"), Keys("Ev1", "M1"), At(100), &start);
  REQUIRE(id);
  REQUIRE(*id);
  // Not in the inbox: a restart re-attaches to it (and submits it when the Session never got it).
  CHECK(s.ListInbox()->empty());
  CHECK(s.ListInbox("sess")->empty());
  // Its placeholder, once posted, is indexed with its row.
  REQUIRE(s.IndexBotMessage({ChatRef::Of(Thread()), "ph-1", "sess", BotMessageKind::placeholder, **id}));
  auto turns = s.ListTurns();
  REQUIRE(turns);
  REQUIRE(turns->size() == 1);
  const TurnRecord& t = turns->at(0);
  CHECK(t.inbox_id == **id);
  CHECK(t.request_id == "req-1");
  CHECK(t.session == "sess");
  CHECK(t.thread == Thread());
  CHECK(t.message.text == "hello");
  CHECK(t.author_id == Message("x").author_id);
  CHECK(t.started == At(100));
  CHECK(t.placeholder_id == "ph-1");
  // The cursor starts where the journal stood, as BeginTurn's: no turn id or revision yet.
  CHECK(t.cursor == TurnCursor{17, "journal-1", {}, 0});

  // Its keys are remembered as any accepted message's.
  auto again = s.AcceptMessage(Thread(), "sess", Message("hello"), Keys("Ev1", "M1"), At(101));
  REQUIRE(again);
  CHECK_FALSE(*again);

  // Edited before it was sent: read with the new text; the inbox's edit does not reach it.
  REQUIRE(s.UpdateUnsentText("req-1", "hello, edited"));
  CHECK(s.UpdateInboxText(**id, "no").error().code == Errc::not_found);
  CHECK(s.ListTurns()->at(0).message.text == "hello, edited");
  CHECK(s.UpdateUnsentText("req-none", "x").error().code == Errc::not_found);
  // A store opened again reads the same.
  f.store.reset();
  f.store = OpenStore(f.path);
  auto reopened = f.store->ListTurns();
  REQUIRE(reopened);
  REQUIRE(reopened->size() == 1);
  CHECK(reopened->at(0).request_id == "req-1");
  CHECK(reopened->at(0).message.text == "hello, edited");
  CHECK(reopened->at(0).cursor == TurnCursor{17, "journal-1", {}, 0});
  // Withdrawn (its author deleted it before it was sent) as a turn ends: the row goes.
  REQUIRE(*f.store->FinishTurn("req-1"));
  CHECK(f.store->ListTurns()->empty());
  CHECK(f.store->ListInbox()->empty());
  RawDb raw(f.path);
  CHECK(raw.Int("SELECT count(*) FROM work") == 0);
}

TEST_CASE("store: a message accepted with a request id in use, or none, is refused and writes nothing",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const auto waiting = *s.AddInbox(Thread(), "sess", Message("a"), At(1));
  REQUIRE(s.MoveToTurns(waiting, "req-1", At(2)));
  const TurnStart taken{"req-1", {}};
  auto in_use = s.AcceptMessage(Thread("t2"), "sess-2", Message("b"), Keys("Ev2", "M2"), At(3), &taken);
  REQUIRE_FALSE(in_use);
  CHECK(in_use.error().code == Errc::invalid_argument);
  CHECK_THAT(in_use.error().message, Catch::Contains("request id req-1 is in use"));
  const TurnStart none{"", {}};
  auto unnamed = s.AcceptMessage(Thread("t2"), "sess-2", Message("b"), Keys("Ev2", "M2"), At(3), &none);
  REQUIRE_FALSE(unnamed);
  CHECK(unnamed.error().code == Errc::invalid_argument);
  // Neither remembered its keys: the platform's redelivery is accepted.
  CHECK(s.ListTurns()->size() == 1);
  const TurnStart free{"req-2", {}};
  auto accepted = s.AcceptMessage(Thread("t2"), "sess-2", Message("b"), Keys("Ev2", "M2"), At(3), &free);
  REQUIRE(accepted);
  REQUIRE(*accepted);
  // A turn's start by BeginTurn or MoveToTurns refuses its request id now, as any turn's in flight.
  const auto next = *s.AddInbox(Thread("t3"), "sess-3", Message("c"), At(4));
  CHECK(s.MoveToTurns(next, "req-2", At(5)).error().code == Errc::invalid_argument);
  CHECK(s.ListTurns()->size() == 2);
}

TEST_CASE("store: messages accepted with their turns' starts in a rolled-back batch leave nothing",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  REQUIRE(s.BeginBatch("test batch"));
  for (int i = 0; i < 40; ++i) {  // past a run of appended rows (32): some written, some waiting
    const std::string n = std::to_string(i);
    const std::string request = "req-" + n;
    const TurnStart start{request, TurnCursor{i, "j", {}, 0}};
    auto id = s.AcceptMessage(Thread("t" + n), "sess-" + n, Message("m" + n), Keys("E" + n, "M" + n), At(i), &start);
    REQUIRE(id);
    REQUIRE(*id);
  }
  // Inside the batch, what is read (the rows appended are written first) counts every one.
  CHECK(s.ListTurns()->size() == 40);
  s.AbortBatch();
  CHECK(s.ListTurns()->empty());
  // The request ids are free again, and the keys were never remembered.
  const TurnStart again{"req-3", TurnCursor{3, "j", {}, 0}};
  auto id = s.AcceptMessage(Thread("t3"), "sess-3", Message("m3"), Keys("E3", "M3"), At(50), &again);
  REQUIRE(id);
  REQUIRE(*id);
  CHECK(*f.store->FinishTurn("req-3"));
  CHECK_FALSE(*f.store->FinishTurn("req-4"));
}
