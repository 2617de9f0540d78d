// Rows appended within a transaction (Db::Append): they wait, are written in runs of one multi-row
// INSERT just before the next statement (a read of their table, another write, the COMMIT), go with a
// rollback, and a failure to write them spoils the transaction. Then the store's use of it: a burst's
// message rows and dedupe keys, and a message stored without what its row holds (v11).
#include <string>
#include <vector>

#include "routing/store_json.hpp"
#include "routing/store_sqlite.hpp"
#include "test_store_support.hpp"

using namespace store_test;

namespace {

const AppendTable kNotes("append a note", "INSERT INTO notes (id, text)", 2);

std::unique_ptr<Db> NotesDb(const std::string& path) {
  auto db = Db::Open(path);
  REQUIRE(db.has_value());
  REQUIRE((*db)->Exec("create notes", "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"));
  return std::move(*db);
}

std::vector<SqlValue> Note(std::int64_t id) {
  return {id, "note " + std::to_string(id)};
}

}  // namespace

TEST_CASE("store append: rows wait in the transaction, are written in runs before the next statement, in order",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("notes.db");
  auto db = NotesDb(path);
  auto tx = Transaction::Begin(*db, "test");
  REQUIRE(tx);
  // 45 rows: a run of 32 written as soon as it is complete, then 13 wait (runs of 8 and 1, five of them).
  for (std::int64_t id = 1; id <= 31; ++id) REQUIRE(db->Append(kNotes, Note(id)));
  CHECK(db->appended() == 31);
  REQUIRE(db->Append(kNotes, Note(32)));
  CHECK(db->appended() == 0);
  for (std::int64_t id = 33; id <= 45; ++id) REQUIRE(db->Append(kNotes, Note(id)));
  CHECK(db->appended() == 13);
  {
    // The next statement, a read, writes them first and sees them.
    auto q = db->Query("count notes", "SELECT count(*), min(id), max(id), sum(length(text)) FROM notes");
    REQUIRE(q);
    REQUIRE(*q->Step());
    CHECK(q->Int(0) == 45);
    CHECK(q->Int(1) == 1);
    CHECK(q->Int(2) == 45);
    CHECK(q->Int(3) == 9 * 6 + 36 * 7);  // "note 1".."note 9", "note 10".."note 45"
  }
  CHECK(db->appended() == 0);
  REQUIRE(db->Append(kNotes, Note(46)));
  {
    RawDb other(path);  // another connection sees none of it before the commit
    CHECK(other.Int("SELECT count(*) FROM notes") == 0);
  }
  REQUIRE(tx->Commit());  // writes the 46th first
  RawDb other(path);
  CHECK(other.Int("SELECT count(*) FROM notes") == 46);
  CHECK(other.Text("SELECT text FROM notes WHERE id = 46") == "note 46");
  CHECK(other.Text("SELECT group_concat(id) FROM (SELECT id FROM notes WHERE id > 40 ORDER BY rowid)") ==
        "41,42,43,44,45,46");
}

TEST_CASE("store append: outside a transaction a row is written at once, and a wrong row is refused",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("notes.db");
  auto db = NotesDb(path);
  REQUIRE(db->Append(kNotes, Note(7)));
  CHECK(db->appended() == 0);
  RawDb other(path);
  CHECK(other.Int("SELECT count(*) FROM notes WHERE id = 7") == 1);
  auto wrong = db->Append(kNotes, {std::int64_t{8}});
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().code == Errc::internal);
  CHECK_THAT(wrong.error().message, Catch::Contains("append a note: a row of 1 values for 2 columns"));
}

TEST_CASE("store append: a rollback drops the rows waiting, and the next transaction has none of them",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("notes.db");
  auto db = NotesDb(path);
  {
    auto tx = Transaction::Begin(*db, "rolled back");
    REQUIRE(tx);
    REQUIRE(db->Append(kNotes, Note(1)));
    REQUIRE(db->Append(kNotes, Note(2)));
  }  // never committed
  CHECK(db->appended() == 0);
  auto tx = Transaction::Begin(*db, "next");
  REQUIRE(tx);
  REQUIRE(db->Append(kNotes, Note(3)));
  REQUIRE(tx->Commit());
  RawDb other(path);
  CHECK(other.Int("SELECT count(*) FROM notes") == 1);
  CHECK(other.Int("SELECT id FROM notes") == 3);
}

TEST_CASE("store append: failing to write them fails the statement, spoils the transaction, and names why",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("notes.db");
  auto db = NotesDb(path);
  REQUIRE(db->Exec("a failing note",
                   "CREATE TRIGGER no_13 BEFORE INSERT ON notes WHEN NEW.id = 13 BEGIN "
                   "SELECT RAISE(ABORT, 'injected failure'); END"));
  {
    auto tx = Transaction::Begin(*db, "test");
    REQUIRE(tx);
    SECTION("before the next statement") {
      for (std::int64_t id = 1; id <= 20; ++id) REQUIRE(db->Append(kNotes, Note(id)));
      auto q = db->Query("count notes", "SELECT count(*) FROM notes");
      REQUIRE_FALSE(q);
      CHECK(q.error().code == Errc::io_error);
      CHECK(q.error().message == "router store " + path +
                                     ": count notes: writing the 20 rows appended before it: append a note: "
                                     "injected failure");
      REQUIRE(db->spoiled());
      CHECK(*db->spoiled() ==
            "writing the 20 rows appended before count notes failed: append a note: injected failure");
    }
    SECTION("a full run, as it is appended") {
      for (std::int64_t id = 1; id <= 31; ++id) REQUIRE(db->Append(kNotes, Note(id)));
      auto full = db->Append(kNotes, Note(32));
      REQUIRE_FALSE(full);
      CHECK(full.error().message == "router store " + path +
                                        ": append a note: writing the 32 rows appended before it: append a note: "
                                        "injected failure");
      REQUIRE(db->spoiled());
    }
    CHECK(db->appended() == 0);
    auto commit = tx->Commit();
    REQUIRE_FALSE(commit);
    CHECK_THAT(commit.error().message, Catch::Contains("rolled back, not committed: writing the "));
  }  // rolled back
  CHECK_FALSE(db->spoiled());
  REQUIRE(db->Append(kNotes, Note(13 + 100)));
  RawDb other(path);
  CHECK(other.Int("SELECT count(*) FROM notes") == 1);  // only the one written after, at once
}

TEST_CASE(
    "store append: a joined call that appended and failed spoils the transaction, and one that only wrote "
    "others' rows does not",
    "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("notes.db");
  auto db = NotesDb(path);
  SECTION("appended, then failed") {
    auto outer = Transaction::Begin(*db, "outer");
    REQUIRE(outer);
    {
      auto joined = Transaction::Begin(*db, "joined call");
      REQUIRE(joined);
      REQUIRE(db->Append(kNotes, Note(1)));
    }  // failed: not committed
    REQUIRE(db->spoiled());
    CHECK(*db->spoiled() == "joined call failed after it had written part of its change");
    CHECK_FALSE(outer->Commit());
  }
  SECTION("wrote the rows appended before it, then failed") {
    auto outer = Transaction::Begin(*db, "outer");
    REQUIRE(outer);
    REQUIRE(db->Append(kNotes, Note(1)));
    {
      auto joined = Transaction::Begin(*db, "joined call");
      REQUIRE(joined);
      auto q = db->Query("count notes", "SELECT count(*) FROM notes");  // writes note 1 first
      REQUIRE(q);
      REQUIRE(*q->Step());
      CHECK(q->Int(0) == 1);
    }  // failed: not committed, but it wrote nothing of its own
    CHECK_FALSE(db->spoiled());
    REQUIRE(outer->Commit());
    RawDb other(path);
    CHECK(other.Int("SELECT count(*) FROM notes") == 1);
  }
}

TEST_CASE("store append: a burst's messages and keys wait in its batch, and a redelivery in it is still caught",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  REQUIRE(s.BeginBatch("burst"));
  for (int i = 0; i < 45; ++i) {
    const std::string n = std::to_string(i);
    auto id = s.AcceptMessage(Thread(), "sess", Message("text " + n, "m" + n), Keys("Ev" + n, "M" + n), At(i));
    REQUIRE(id);
    REQUIRE(id->has_value());
  }
  // The same delivery again in the same burst: its key is looked up in its row, written first.
  auto again = s.AcceptMessage(Thread(), "sess", Message("text 7", "m7"), Keys("Ev7", "M7"), At(50));
  REQUIRE(again);
  CHECK_FALSE(again->has_value());
  // So is the message id under a new event id.
  auto other_event = s.AcceptMessage(Thread(), "sess", Message("text 9", "m9"), Keys("Ev-new", "M9"), At(51));
  REQUIRE(other_event);
  CHECK_FALSE(other_event->has_value());
  {
    RawDb raw(f.path);
    CHECK(raw.Int("SELECT count(*) FROM work") == 0);
  }
  REQUIRE(s.CommitBatch());
  RawDb raw(f.path);
  CHECK(raw.Int("SELECT count(*) FROM work") == 45);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_event") == 45);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_message") == 45);
  auto inbox = s.ListInbox();
  REQUIRE(inbox);
  REQUIRE(inbox->size() == 45);
  for (int i = 0; i < 45; ++i) {
    INFO(i);
    CHECK(inbox->at(i).message.text == "text " + std::to_string(i));
    CHECK(inbox->at(i).message.message_id == "m" + std::to_string(i));
  }
}

TEST_CASE(
    "store json: a message stored with its row leaves out what the row holds and its defaults, and reads "
    "back whole",
    "[routing][store]") {
  InboundMessage m = Message("hello");
  const RowFields row{"slack", "T1", "C123", "1790000000.000100", "U1"};
  const std::string text = InboundMessageToJsonText(m, &row);
  CHECK(text == R"({"message_id":"1790000001.000200","author_name":"Ada","text":"hello","event_id":"Ev1",)"
                R"("received_ms":1790000001000})");
  auto back = InboundMessageFromJsonText(text, &row);
  REQUIRE(back);
  CHECK(back->platform == "slack");
  CHECK(back->workspace == "T1");
  CHECK(back->chat == "C123");
  CHECK(back->thread == "1790000000.000100");
  CHECK(back->author_id == "U1");
  CHECK(back->text == "hello");
  CHECK(back->received == m.received);
  CHECK(back->kind == MessageKind::new_message);

  // A field unlike its column (or empty where the column is not) is written, and wins.
  m.thread.clear();
  m.author_id = "U2";
  m.is_private_chat = true;
  m.kind = MessageKind::edited;
  m.attachments_text = {"a.txt: hi"};
  const std::string differs = InboundMessageToJsonText(m, &row);
  CHECK_THAT(differs, Catch::Contains(R"("thread":"")"));
  CHECK_THAT(differs, Catch::Contains(R"("author_id":"U2")"));
  CHECK_THAT(differs, Catch::Contains(R"("is_private_chat":true)"));
  CHECK_THAT(differs, Catch::Contains(R"("kind":"edited")"));
  back = InboundMessageFromJsonText(differs, &row);
  REQUIRE(back);
  CHECK(back->thread.empty());
  CHECK(back->author_id == "U2");
  CHECK(back->is_private_chat);
  CHECK(back->kind == MessageKind::edited);
  CHECK(back->attachments_text == std::vector<std::string>{"a.txt: hi"});

  // Without a row: every field that is not at its default, and absent ones read as defaults.
  const std::string whole = InboundMessageToJsonText(Message("x"));
  CHECK_THAT(whole, Catch::Contains(R"("platform":"slack")"));
  CHECK_THAT(whole, !Catch::Contains("is_bot"));
  back = InboundMessageFromJsonText(whole);
  REQUIRE(back);
  CHECK(back->workspace == "T1");
  CHECK_FALSE(back->is_bot);
}

TEST_CASE("store append: a pass's bot messages wait in its batch, are found in it, bounded at its commit, and go with "
          "an abort",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  StoreLimits limits;
  limits.bot_messages = 40;
  auto store = OpenStore(path, limits);
  const ChatRef chat{"slack", "W1", "C123"};
  const auto bot = [&](int i) {
    return BotMessage{chat, "1790000000." + std::to_string(100000 + i), "sess-" + std::to_string(i % 3),
                      BotMessageKind::placeholder, i + 1};
  };
  // An aborted pass: nothing of it stays, and none of it is found.
  REQUIRE(store->BeginBatch("aborted pass"));
  for (int i = 0; i < 10; ++i) REQUIRE(store->IndexBotMessage(bot(i)));
  store->AbortBatch();
  CHECK(RawDb(path).Int("SELECT count(*) FROM bot_messages") == 0);
  for (int i = 0; i < 10; ++i) CHECK_FALSE(store->FindBotMessage(chat, bot(i).message_id).value());

  REQUIRE(store->BeginBatch("pass"));
  for (int i = 0; i < 45; ++i) REQUIRE(store->IndexBotMessage(bot(i)));
  CHECK(RawDb(path).Int("SELECT count(*) FROM bot_messages") == 0);  // nothing committed yet
  // Found in the batch, those waiting too (the look-up writes them first).
  for (int i : {0, 31, 44}) {
    INFO(i);
    auto found = store->FindBotMessage(chat, bot(i).message_id);
    REQUIRE(found);
    REQUIRE(found->has_value());
    CHECK((*found)->session == bot(i).session);
    CHECK((*found)->inbox_id == i + 1);
  }
  // Indexed again in the batch (a placeholder that became the reply): the row is updated, not doubled.
  auto reply = bot(44);
  reply.kind = BotMessageKind::reply;
  REQUIRE(store->IndexBotMessage(reply));
  REQUIRE(store->CommitBatch());
  // The bound holds at the commit: the five oldest went.
  RawDb raw(path);
  CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 40);
  CHECK(raw.Int("SELECT count(*) FROM bot_messages WHERE kind = 'reply'") == 1);
  CHECK_FALSE(store->FindBotMessage(chat, bot(4).message_id).value());
  store.reset();
  auto reopened = OpenStore(path, limits);
  auto last = reopened->FindBotMessage(chat, bot(44).message_id);
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->kind == BotMessageKind::reply);
  CHECK(reopened->FindBotMessage(chat, bot(5).message_id).value().has_value());
}
