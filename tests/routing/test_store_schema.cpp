// The store's schema versions: a new store is at this build's version with every table; steps apply in
// order, each whole or not at all, only past the file's version (a synthetic v1 -> v2 shows how a
// release adds one); a file newer than the steps is refused.
#include <fstream>

#include "routing/store_schema.hpp"
#include "test_store_support.hpp"

using namespace store_test;

namespace {

std::unique_ptr<Db> OpenDb(const std::string& path) {
  auto db = Db::Open(path);
  REQUIRE(db.has_value());
  return std::move(*db);
}

std::int64_t Version(Db& db) {
  auto v = ReadSchemaVersion(db);
  REQUIRE(v.has_value());
  return *v;
}

// A store file written by the build whose schema was `version`, holding `rows` (SQL, may be empty):
// what an upgrade finds on disk.
void WriteAtVersion(const std::string& path, std::size_t version, const char* rows = "") {
  auto db = OpenDb(path);
  REQUIRE(Migrate(*db, SchemaSteps().first(version)));
  if (*rows != '\0') REQUIRE(db->Exec("rows of an older version", rows));
}

constexpr SchemaStep kV1{1, "v1: notes", "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);"};
constexpr SchemaStep kV2{2, "v2: notes have an author",
                         "ALTER TABLE notes ADD COLUMN author TEXT NOT NULL DEFAULT 'unknown';"
                         "CREATE INDEX notes_by_author ON notes (author);"};

}  // namespace

TEST_CASE("store schema: a new store is at this build's version with every table", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  OpenStore(path).reset();
  REQUIRE(SchemaVersion() == 12);
  REQUIRE(SchemaSteps().size() == 12);
  RawDb raw(path);
  CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
  for (const char* table : {"bindings", "chat_sessions", "current_sessions", "bot_messages", "dedupe_event", "dedupe_message", "work",
                            "outbox", "questions", "cursors"}) {
    INFO(table);
    CHECK(raw.Int(std::string("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '") + table + "'") ==
          1);
  }
}

TEST_CASE("store schema: steps apply past the file's version and keep its rows", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("notes.db");
  {
    auto db = OpenDb(path);
    CHECK(Version(*db) == 0);
    const SchemaStep v1_only[] = {kV1};
    REQUIRE(Migrate(*db, v1_only));
    CHECK(Version(*db) == 1);
    REQUIRE(db->Exec("insert a note", "INSERT INTO notes (text) VALUES ('written by v1')"));
  }
  // A later release: the same v1, then v2. Only v2 runs, and the v1 row gets v2's default.
  auto db = OpenDb(path);
  const SchemaStep both[] = {kV1, kV2};
  REQUIRE(Migrate(*db, both));
  CHECK(Version(*db) == 2);
  RawDb raw(path);
  CHECK(raw.Int("SELECT count(*) FROM notes WHERE text = 'written by v1' AND author = 'unknown'") == 1);
  // Opening again applies nothing (v1's CREATE TABLE would fail if it ran twice).
  REQUIRE(Migrate(*db, both));
  CHECK(Version(*db) == 2);

  // The v1 build meets the v2 file: refused, naming both.
  const SchemaStep v1_only[] = {kV1};
  auto refused = Migrate(*db, v1_only);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::io_error);
  CHECK_THAT(refused.error().message, Catch::Contains("has schema version 2, newer than this build's 1"));
}

TEST_CASE("store schema: a v1 store keeps its waiting messages at v2, with no receipt", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  WriteAtVersion(path, 1, R"sql(
    INSERT INTO inbox (platform, workspace, chat, thread, session, message, accepted_ms)
    VALUES ('slack', 'W1', 'C1', 'T1', 'sess', '{"platform":"slack","chat":"C1","message_id":"m1","text":"hi"}', 5))sql");
  auto store = OpenStore(path);
  RawDb raw(path);
  CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
  auto inbox = store->ListInbox();
  REQUIRE(inbox.has_value());
  REQUIRE(inbox->size() == 1);
  CHECK(inbox->at(0).receipt_id.empty());
  CHECK(inbox->at(0).message.text == "hi");
  REQUIRE(store->SetInboxReceipt(inbox->at(0).id, "r-1"));
  CHECK(store->ListInbox()->at(0).receipt_id == "r-1");
}

TEST_CASE("store schema: a v2 store gains the cursors table at v3, empty", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  WriteAtVersion(path, 2);
  auto store = OpenStore(path);
  CHECK(RawDb(path).Int("PRAGMA user_version") == SchemaVersion());
  auto none = store->Cursor("telegram.offset");
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());
  REQUIRE(store->SetCursor("telegram.offset", "41", StoreTime{}));
  REQUIRE(store->SetCursor("telegram.offset", "42", StoreTime{}));
  CHECK(store->Cursor("telegram.offset")->value_or("") == "42");
  auto unnamed = store->SetCursor("", "1", StoreTime{});
  REQUIRE_FALSE(unnamed);
  CHECK(unnamed.error().code == Errc::invalid_argument);
}

TEST_CASE("store schema: a v3 store keeps its bounded rows, their order and their bounds at v4", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  // Rows of the v3 schema, the trigger-kept counts included; "b" was indexed first.
  WriteAtVersion(path, 3, R"sql(
    INSERT INTO bot_messages (seq, platform, workspace, chat, message_id, session, kind) VALUES
      (7, 'slack', 'T1', 'C1', 'b', 'sess-b', 'placeholder'),
      (9, 'slack', 'T1', 'C1', 'a', 'sess-a', 'reply'),
      (12, 'slack', 'T1', 'C1', 'c', 'sess-c', 'question');
    INSERT INTO dedupe (kind, key) VALUES ('event', 'E1'), ('message', 'M1'), ('event', 'E2');)sql");
  REQUIRE(RawDb(path).Int("SELECT n FROM row_counts WHERE name = 'bot_messages'") == 3);
  StoreLimits limits;
  limits.bot_messages = 3;
  limits.dedupe_per_kind = 2;
  auto store = OpenStore(path, limits);
  {
    RawDb raw(path);
    CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
    CHECK(raw.Int("SELECT count(*) FROM sqlite_schema WHERE name = 'row_counts' OR type = 'trigger'") == 0);
    // v4 rebuilt the table with its index by session; v6 dropped that index.
    CHECK(raw.Int("SELECT count(*) FROM sqlite_schema WHERE name = 'bot_messages_by_session'") == 0);
    CHECK(raw.Int("SELECT seq FROM bot_messages WHERE message_id = 'c'") == 12);
    // The kind is still checked. (chat, message_id) is kept unique by the store since v10, which
    // dropped the UNIQUE index (the v10 test below).
    CHECK_FALSE(raw.TryExec("INSERT INTO bot_messages (platform, workspace, chat, message_id, session, kind) "
                            "VALUES ('slack', 'T1', 'C1', 'x', 's', 'bogus')"));
  }
  const ChatRef chat{"slack", "T1", "C1"};
  CHECK((*store->FindBotMessage(chat, "b"))->kind == BotMessageKind::placeholder);
  // At the bound: one more evicts the oldest by insertion, "b".
  REQUIRE(store->IndexBotMessage(BotMessage{chat, "d", "sess-d", BotMessageKind::reply}));
  CHECK_FALSE(store->FindBotMessage(chat, "b")->has_value());
  CHECK(store->FindBotMessage(chat, "a")->has_value());
  CHECK(store->FindBotMessage(chat, "d")->has_value());
  // Two event keys already: a third evicts E1.
  CHECK(*store->SeenOrRemember(DedupeKind::event, "E2"));
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::event, "E3"));
  CHECK_FALSE(*store->Forget(DedupeKind::event, "E1"));
  CHECK(*store->SeenOrRemember(DedupeKind::message, "M1"));
}

TEST_CASE("store schema: a v4 store's dedupe keys move to a table per kind at v5, in their order", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  WriteAtVersion(path, 4, R"sql(
    INSERT INTO dedupe (seq, kind, key) VALUES
      (3, 'event', 'E1'), (4, 'message', 'M1'), (8, 'event', 'E2'), (9, 'message', 'M2'), (11, 'event', 'E3');
    INSERT INTO inbox (platform, workspace, chat, thread, session, message, accepted_ms) VALUES
      ('slack', 'T1', 'C1', '', 'sess', '{"platform":"slack","chat":"C1","message_id":"5","author_id":"U7","text":"hi"}', 1);)sql");
  StoreLimits limits;
  limits.dedupe_per_kind = 3;
  auto store = OpenStore(path, limits);
  {
    RawDb raw(path);
    CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
    CHECK(raw.Int("SELECT count(*) FROM sqlite_schema WHERE name = 'dedupe'") == 0);
    CHECK(raw.Int("SELECT seq FROM dedupe_event WHERE key = 'E3'") == 11);
    CHECK(raw.Int("SELECT count(*) FROM dedupe_message") == 2);
    CHECK(raw.Int("SELECT count(*) FROM work WHERE author_id = 'U7'") == 1);  // a waiting message keeps its author
  }
  for (const char* k : {"E1", "E2", "E3"}) CHECK(*store->SeenOrRemember(DedupeKind::event, k));
  CHECK(*store->SeenOrRemember(DedupeKind::message, "M1"));
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::message, "E1"));  // kinds stay apart
  // At the bound: a fourth event key evicts the oldest, E1, and is written after E3.
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::event, "E4"));
  CHECK_FALSE(*store->Forget(DedupeKind::event, "E1"));
  CHECK(*store->SeenOrRemember(DedupeKind::event, "E2"));
  store.reset();
  CHECK(RawDb(path).Int("SELECT seq FROM dedupe_event WHERE key = 'E4'") > 11);
}

TEST_CASE("store schema: a v5 store's bot messages lose their index by session at v6, and a delete still finds them",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  WriteAtVersion(path, 5, R"sql(
    INSERT INTO bot_messages (seq, platform, workspace, chat, message_id, session, kind) VALUES
      (1, 'slack', 'T1', 'C1', 'm1', 'one', 'reply'), (2, 'slack', 'T1', 'C1', 'm2', 'two', 'placeholder'),
      (3, 'slack', 'T1', 'C1', 'm3', 'one', 'question');)sql");
  auto store = OpenStore(path);
  {
    RawDb raw(path);
    CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
    CHECK(raw.Int("SELECT count(*) FROM sqlite_schema WHERE name = 'bot_messages_by_session'") == 0);
    CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 3);
  }
  const ChatRef chat{"slack", "T1", "C1"};
  auto two = store->FindBotMessage(chat, "m2");
  REQUIRE(two);
  REQUIRE(*two);
  CHECK((*two)->session == "two");
  CHECK((*two)->kind == BotMessageKind::placeholder);
  // Deleting Session "one" takes both of its messages, by a scan, and leaves the other Session's.
  REQUIRE(store->UnbindSession("one"));
  for (const char* id : {"m1", "m3"}) {
    auto gone = store->FindBotMessage(chat, id);
    REQUIRE(gone);
    CHECK_FALSE(*gone);
  }
  auto kept = store->FindBotMessage(chat, "m2");
  REQUIRE(kept);
  CHECK(*kept);
}

TEST_CASE("store schema: a v6 store's inbox and turns become one table at v7, ids and cursors kept",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  // The inbox's id sequence stands at 10 (entry 10 was removed), past every row left.
  WriteAtVersion(path, 6, R"sql(
    INSERT INTO inbox (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, edited_text,
                       deleted, receipt_id) VALUES
      (8, 'slack', 'W1', 'C1', 'T1', 'one', 'U1', '{"platform":"slack","chat":"C1","message_id":"m8","author_id":"U1","text":"eight"}', 80, 'eight, edited', 0, 'r-8'),
      (9, 'slack', 'W1', 'C1', 'T2', 'two', 'U2', '{"platform":"slack","chat":"C1","message_id":"m9","author_id":"U2","text":"nine"}', 90, NULL, 1, ''),
      (10, 'slack', 'W1', 'C1', 'T3', 'two', 'U2', '{"platform":"slack","chat":"C1","message_id":"m10","text":"ten"}', 100, NULL, 0, '');
    DELETE FROM inbox WHERE id = 10;
    INSERT INTO turns (request_id, inbox_id, session, platform, workspace, chat, thread, author_id, message,
                       placeholder_id, last_event_id, journal_id, turn_id, revision, started_ms) VALUES
      ('req-7', 7, 'two', 'slack', 'W1', 'C1', 'T2', 'U2', '{"platform":"slack","chat":"C1","message_id":"m7","author_id":"U2","text":"seven"}', 'ph-7', 41, 'j-1', 'turn-3', 2, 700),
      ('req-5', 5, 'one', 'slack', 'W1', 'C1', 'T1', 'U1', '{"platform":"slack","chat":"C1","message_id":"m5","author_id":"U1","text":"five, edited"}', '', 0, '', '', 0, 500);)sql");
  auto store = OpenStore(path);
  {
    RawDb raw(path);
    CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
    CHECK(raw.Int("SELECT count(*) FROM sqlite_schema WHERE name IN ('inbox', 'turns')") == 0);
    CHECK(raw.Int("SELECT count(*) FROM work") == 4);
    CHECK(raw.Int("SELECT count(*) FROM pragma_table_info('bot_messages') WHERE name = 'inbox_id'") == 1);
  }
  auto inbox = store->ListInbox();
  REQUIRE(inbox);
  REQUIRE(inbox->size() == 2);
  CHECK(inbox->at(0).id == 8);
  CHECK(inbox->at(0).thread == ThreadRef{"slack", "W1", "C1", "T1"});
  CHECK(inbox->at(0).message.text == "eight");
  CHECK(inbox->at(0).edited_text == std::optional<std::string>("eight, edited"));
  CHECK(inbox->at(0).receipt_id == "r-8");
  CHECK(inbox->at(0).accepted == FromUnixMs(80));
  CHECK(inbox->at(1).id == 9);
  CHECK(inbox->at(1).deleted);
  auto turns = store->ListTurns();
  REQUIRE(turns);
  REQUIRE(turns->size() == 2);  // in the order they began
  CHECK(turns->at(0).request_id == "req-5");
  CHECK(turns->at(0).inbox_id == 5);
  CHECK(turns->at(0).message.text == "five, edited");
  CHECK(turns->at(0).started == FromUnixMs(500));
  CHECK(turns->at(1).request_id == "req-7");
  CHECK(turns->at(1).inbox_id == 7);
  CHECK(turns->at(1).session == "two");
  CHECK(turns->at(1).author_id == "U2");
  CHECK(turns->at(1).placeholder_id == "ph-7");
  CHECK(turns->at(1).cursor == TurnCursor{41, "j-1", "turn-3", 2});
  // The id sequence goes on from the inbox's, and a request id in use stays refused.
  auto next = store->AddInbox(ThreadRef{"slack", "W1", "C1", "T9"}, "one", inbox->at(0).message, FromUnixMs(900));
  REQUIRE(next);
  CHECK(*next == 11);
  auto in_use = store->MoveToTurns(*next, "req-7", FromUnixMs(1000));
  REQUIRE_FALSE(in_use);
  CHECK_THAT(in_use.error().message, Catch::Contains("request id req-7 is in use"));
  REQUIRE(store->MoveToTurns(8, "req-8", FromUnixMs(1100)));
  auto started = store->ListTurns();
  REQUIRE(started);
  REQUIRE(started->size() == 3);
  CHECK(started->at(2).message.text == "eight, edited");
  CHECK(started->at(2).placeholder_id == "r-8");
  OutboxEntry reply;
  reply.thread = turns->at(1).thread;
  reply.session = "two";
  reply.request_id = "req-7";
  reply.parts = {"done"};
  REQUIRE(store->CompleteTurn(reply));
  CHECK(store->ListTurns()->size() == 2);
}

TEST_CASE("store schema: a v7 store's work rows keep their ids at v8, and new ids start past every id used",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  // The sequence stands at 9 (rows 6 to 9 were removed), and the bot-message index names row 12,
  // which a store that lost its sequence row could otherwise hand out again.
  WriteAtVersion(path, 7, R"sql(
    INSERT INTO work (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, request_id,
                      placeholder_id, started_ms) VALUES
      (3, 'slack', 'W1', 'C1', 'T1', 'one', 'U1', '{"platform":"slack","chat":"C1","message_id":"m3","text":"three"}', 30, NULL, '', NULL),
      (5, 'slack', 'W1', 'C1', 'T2', 'two', 'U2', '{"platform":"slack","chat":"C1","message_id":"m5","text":"five"}', 50, 'req-5', 'ph-5', 55),
      (9, 'slack', 'W1', 'C1', 'T3', 'two', 'U2', '{"platform":"slack","chat":"C1","message_id":"m9","text":"nine"}', 90, NULL, '', NULL);
    DELETE FROM work WHERE id = 9;
    INSERT INTO bot_messages (platform, workspace, chat, message_id, session, kind, inbox_id)
      VALUES ('slack', 'W1', 'C1', 'p12', 'two', 'placeholder', 12);)sql");
  {
    RawDb raw(path);
    REQUIRE(raw.Int("SELECT seq FROM sqlite_sequence WHERE name = 'work'") == 9);
  }
  auto store = OpenStore(path);
  {
    RawDb raw(path);
    CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
    CHECK(raw.Int("SELECT count(*) FROM sqlite_schema WHERE name = 'work' AND sql LIKE '%AUTOINCREMENT%'") == 0);
    CHECK(raw.Int("SELECT count(*) FROM sqlite_sequence WHERE name = 'work'") == 0);
    CHECK(raw.Int("SELECT next FROM id_blocks WHERE name = 'work'") == 13);
  }
  auto inbox = store->ListInbox();
  REQUIRE(inbox);
  REQUIRE(inbox->size() == 1);
  CHECK(inbox->at(0).id == 3);
  CHECK(inbox->at(0).message.text == "three");
  auto turns = store->ListTurns();
  REQUIRE(turns);
  REQUIRE(turns->size() == 1);
  CHECK(turns->at(0).inbox_id == 5);
  CHECK(turns->at(0).request_id == "req-5");
  auto next = store->AddInbox(ThreadRef{"slack", "W1", "C1", "T9"}, "one", inbox->at(0).message, FromUnixMs(900));
  REQUIRE(next);
  CHECK(*next == 13);
  // A request id in use is refused (v8's partial unique index, v9's turns in memory).
  auto in_use = store->MoveToTurns(*next, "req-5", FromUnixMs(1000));
  REQUIRE_FALSE(in_use);
  CHECK_THAT(in_use.error().message, Catch::Contains("request id req-5 is in use"));
}

TEST_CASE("store schema: a v8 store's turns in flight are found by request id at v9, without the index",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  WriteAtVersion(path, 8, R"sql(
    INSERT INTO work (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, request_id,
                      placeholder_id, started_ms) VALUES
      (3, 'slack', 'W1', 'C1', 'T1', 'one', 'U1', '{"platform":"slack","chat":"C1","message_id":"m3","text":"three"}', 30, NULL, '', NULL),
      (5, 'slack', 'W1', 'C1', 'T2', 'two', 'U2', '{"platform":"slack","chat":"C1","message_id":"m5","text":"five"}', 50, 'req-5', 'ph-5', 55),
      (7, 'slack', 'W1', 'C1', 'T3', 'two', 'U2', '{"platform":"slack","chat":"C1","message_id":"m7","text":"seven"}', 70, 'req-7', 'ph-7', 75);)sql");
  {
    RawDb raw(path);
    REQUIRE(raw.Int("SELECT count(*) FROM sqlite_schema WHERE name = 'work_by_request'") == 1);
  }
  auto store = OpenStore(path);
  {
    RawDb raw(path);
    CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
    CHECK(raw.Int("SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'work'") == 0);
  }
  REQUIRE(store->ListTurns()->size() == 2);
  // Each turn found by its request id: its cursor and placeholder updated, then it ends.
  REQUIRE(store->UpdateTurnCursor("req-7", TurnCursor{12, "j1", "turn-3", 2}));
  REQUIRE(store->SetTurnPlaceholder("req-7", "ph-7b"));
  auto turns = store->ListTurns();
  REQUIRE(turns);
  REQUIRE(turns->size() == 2);
  CHECK(turns->at(1).request_id == "req-7");
  CHECK(turns->at(1).cursor.last_event_id == 12);
  CHECK(turns->at(1).placeholder_id == "ph-7b");
  CHECK(turns->at(0).placeholder_id == "ph-5");
  CHECK(store->UpdateTurnCursor("req-9", TurnCursor{}).error().code == Errc::not_found);
  CHECK(store->SetTurnPlaceholder("req-9", "x").error().code == Errc::not_found);
  // A request id in flight is refused to another message; once its turn ended, it is free.
  CHECK_FALSE(store->MoveToTurns(3, "req-5", FromUnixMs(100)));
  REQUIRE(*store->FinishTurn("req-5"));
  CHECK_FALSE(*store->FinishTurn("req-5"));
  REQUIRE(store->MoveToTurns(3, "req-5", FromUnixMs(100)));
  turns = store->ListTurns();
  REQUIRE(turns);
  REQUIRE(turns->size() == 2);
  CHECK(turns->at(1).inbox_id == 3);
}

TEST_CASE("store schema: a v9 store's bot messages keep their rows and order at v10, one row per message",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  WriteAtVersion(path, 9, R"sql(
    INSERT INTO bot_messages (seq, platform, workspace, chat, message_id, session, kind, inbox_id) VALUES
      (4, 'slack', 'T1', 'C1', 'p1', 'one', 'placeholder', 40),
      (6, 'slack', 'T1', 'C2', 'p1', 'two', 'reply', 0),
      (9, 'telegram', '', 'C1', 'p1', 'three', 'question', 0);)sql");
  {
    RawDb raw(path);
    REQUIRE(raw.Int("SELECT count(*) FROM pragma_index_list('bot_messages') WHERE \"unique\" = 1") == 1);
  }
  StoreLimits limits;
  limits.bot_messages = 4;
  auto store = OpenStore(path, limits);
  {
    RawDb raw(path);
    CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
    CHECK(raw.Int("SELECT count(*) FROM pragma_index_list('bot_messages')") == 0);
    CHECK(raw.Int("SELECT count(*) FROM bot_messages WHERE seq IN (4, 6, 9)") == 3);
    CHECK(raw.Int("SELECT inbox_id FROM bot_messages WHERE seq = 4") == 40);
  }
  // The same message id in three chats: three entries, each found as written.
  const ChatRef c1{"slack", "T1", "C1"}, c2{"slack", "T1", "C2"}, t1{"telegram", "", "C1"};
  CHECK((*store->FindBotMessage(c1, "p1"))->session == "one");
  CHECK((*store->FindBotMessage(c1, "p1"))->inbox_id == 40);
  CHECK((*store->FindBotMessage(c2, "p1"))->kind == BotMessageKind::reply);
  CHECK((*store->FindBotMessage(t1, "p1"))->session == "three");
  CHECK_FALSE(store->FindBotMessage(ChatRef{"slack", "T2", "C1"}, "p1")->has_value());
  // Indexed again: updated in its row, its place kept (its inbox id too, given none).
  REQUIRE(store->IndexBotMessage(BotMessage{c1, "p1", "one", BotMessageKind::reply}));
  CHECK((*store->FindBotMessage(c1, "p1"))->kind == BotMessageKind::reply);
  CHECK((*store->FindBotMessage(c1, "p1"))->inbox_id == 40);
  {
    RawDb raw(path);
    CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 3);
    CHECK(raw.Int("SELECT seq FROM bot_messages WHERE chat = 'C1' AND platform = 'slack'") == 4);
  }
  // New ones go after every old seq; past the bound (4) the oldest goes, not the one indexed again.
  REQUIRE(store->IndexBotMessage(BotMessage{c2, "p2", "two", BotMessageKind::note}));
  REQUIRE(store->IndexBotMessage(BotMessage{c2, "p3", "two", BotMessageKind::note}));
  CHECK_FALSE(store->FindBotMessage(c1, "p1")->has_value());
  CHECK(store->FindBotMessage(c2, "p1")->has_value());
  RawDb raw(path);
  CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 4);
  CHECK(raw.Int("SELECT min(seq) FROM bot_messages") == 6);
  CHECK(raw.Int("SELECT max(seq) FROM bot_messages") == 11);
}

TEST_CASE("store schema: a v10 store's messages read the same at v11, and new ones leave out what their row holds",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  // Written by v10: the whole message in its text, a waiting one and one whose turn is in flight.
  WriteAtVersion(path, 10, R"sql(
    INSERT INTO work (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, request_id,
                      placeholder_id, started_ms) VALUES
      (3, 'slack', 'W1', 'C1', 'T1', 'one', 'U1', '{"platform":"slack","workspace":"W1","chat":"C1","thread":"T1","message_id":"m3","reply_to_message_id":"","author_id":"U1","author_name":"Ada","text":"three","attachments_text":[],"is_bot":false,"is_self":false,"mentions_bot":true,"is_private_chat":false,"event_id":"E3","received_ms":30,"kind":"new"}', 30, NULL, '', NULL),
      (5, 'slack', 'W1', 'C1', 'T2', 'two', 'U2', '{"platform":"slack","workspace":"W1","chat":"C1","thread":"T2","message_id":"m5","reply_to_message_id":"m3","author_id":"U2","author_name":"Bo","text":"five","attachments_text":[],"is_bot":false,"is_self":false,"mentions_bot":false,"is_private_chat":false,"event_id":"","received_ms":50,"kind":"new"}', 50, 'req-5', 'ph-5', 55);)sql");
  auto store = OpenStore(path);
  {
    RawDb raw(path);
    CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
  }
  auto inbox = store->ListInbox();
  REQUIRE(inbox);
  REQUIRE(inbox->size() == 1);
  const InboundMessage& waiting = inbox->at(0).message;
  CHECK(waiting.thread == "T1");
  CHECK(waiting.author_id == "U1");
  CHECK(waiting.mentions_bot);
  CHECK(waiting.event_id == "E3");
  auto turns = store->ListTurns();
  REQUIRE(turns);
  REQUIRE(turns->size() == 1);
  CHECK(turns->at(0).message.reply_to_message_id == "m3");
  CHECK(turns->at(0).message.thread == "T2");
  CHECK(turns->at(0).message.author_name == "Bo");

  // A message accepted now: its text holds none of the row's columns, and it reads back whole.
  InboundMessage m = waiting;
  m.message_id = "m7";
  m.text = "seven";
  const ThreadRef where{"slack", "W1", "C1", "T1"};
  auto id = store->AddInbox(where, "one", m, FromUnixMs(70));
  REQUIRE(id);
  RawDb raw(path);
  const std::string text = raw.Text("SELECT message FROM work WHERE id = " + std::to_string(*id));
  CHECK_THAT(text, !Catch::Contains("platform") && !Catch::Contains("thread") && !Catch::Contains("author_id") &&
                       !Catch::Contains("is_bot") && Catch::Contains(R"("mentions_bot":true)"));
  auto turn = store->BeginTurn(*id, "req-7", FromUnixMs(71));
  REQUIRE(turn);
  CHECK(turn->message.platform == "slack");
  CHECK(turn->message.workspace == "W1");
  CHECK(turn->message.chat == "C1");
  CHECK(turn->message.thread == "T1");
  CHECK(turn->message.author_id == "U1");
  CHECK(turn->message.text == "seven");
}

TEST_CASE("store schema: a v11 store's open questions read at v12 with no answers given yet", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  WriteAtVersion(path, 11, R"sql(
    INSERT INTO questions (id, session, request_id, input_id, platform, workspace, chat, thread, message_id,
                           questions, asker_id, deadline_ms)
    VALUES ('q1', 'one', 'req-1', 'in-1', 'slack', 'W1', 'C1', 'T1', 'm9',
            '[{"id":"lang","question":"Which?","options":[{"label":"C++"}]},{"id":"db","question":"And?"}]', 'U1', 70);)sql");
  auto store = OpenStore(path);
  auto all = store->ListQuestions();
  REQUIRE(all.has_value());
  REQUIRE(all->size() == 1);
  const OpenQuestion& q = all->at(0);
  CHECK(q.questions.size() == 2);
  CHECK(q.answered == 0);
  CHECK(q.answers.empty());
  // A progress column that is not what the store writes is damage, named with its row.
  store.reset();
  {
    RawDb raw(path);
    raw.Exec("UPDATE questions SET progress = '{\"answered\": -1}'");
  }
  store = OpenStore(path);
  auto damaged = store->ListQuestions();
  REQUIRE_FALSE(damaged);
  CHECK(damaged.error().code == Errc::io_error);
  CHECK_THAT(damaged.error().message, Catch::Contains("question q1") && Catch::Contains("progress.answered"));
}

TEST_CASE("store schema: a failing step changes nothing, its version included", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("notes.db");
  auto db = OpenDb(path);
  const SchemaStep broken[] = {kV1, {2, "v2: broken", "CREATE TABLE half (x); CREATE TABLE notes (y);"}};
  auto failed = Migrate(*db, broken);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == Errc::io_error);
  CHECK_THAT(failed.error().message, Catch::Contains("schema step v2: broken"));
  CHECK_THAT(failed.error().message, Catch::Contains("table notes already exists"));
  CHECK(Version(*db) == 1);  // v1 committed on its own
  RawDb raw(path);
  CHECK(raw.Int("SELECT count(*) FROM sqlite_schema WHERE name = 'half'") == 0);
}

TEST_CASE("store schema: steps out of order are refused", "[routing][store]") {
  TempDir dir;
  auto db = OpenDb(dir.File("notes.db"));
  const SchemaStep skipped[] = {kV1, {3, "v3: skips v2", "SELECT 1;"}};
  auto refused = Migrate(*db, skipped);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::internal);
  CHECK_THAT(refused.error().message, Catch::Contains("v3: skips v2 is number 2"));
  CHECK(Version(*db) == 0);
}

TEST_CASE("store schema: an empty file is a version 0 store and becomes this build's", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  { std::ofstream touch(path); }
  auto s = OpenStore(path);
  REQUIRE(s->SeenOrRemember(DedupeKind::event, "works"));
  s.reset();
  RawDb raw(path);
  CHECK(raw.Int("PRAGMA user_version") == SchemaVersion());
}
