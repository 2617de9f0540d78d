// RouterStore's work in progress: the inbox and AcceptMessage (dedupe and inbox in one transaction,
// also when the transaction fails half-way), in-flight turns, the outbox and CompleteTurn, open
// questions, and values that must come back exactly (every message field, unicode, long text).
#include <vector>

#include "routing/store_json.hpp"
#include "test_store_support.hpp"

using namespace store_test;

namespace {

InboundMessage FullMessage() {
  InboundMessage m;
  m.platform = "telegram";
  m.workspace = "";
  m.chat = "-1001234";
  m.thread = "77";
  m.message_id = "4242";
  m.reply_to_message_id = "4200";
  m.author_id = "99";
  m.author_name = "Zoë \"Z\" O'Brien";
  m.text = "line one\nline two\t\"quoted\" \\ back";
  m.attachments_text = {"caption", "", "file.txt: hello"};
  m.is_bot = true;
  m.is_self = true;
  m.mentions_bot = true;
  m.is_private_chat = true;
  m.event_id = "123456789";
  m.received = At(1'790'000'123'456);
  m.kind = MessageKind::edited;
  return m;
}

void CheckSameMessage(const InboundMessage& a, const InboundMessage& b) {
  CHECK(a.platform == b.platform);
  CHECK(a.workspace == b.workspace);
  CHECK(a.chat == b.chat);
  CHECK(a.thread == b.thread);
  CHECK(a.message_id == b.message_id);
  CHECK(a.reply_to_message_id == b.reply_to_message_id);
  CHECK(a.author_id == b.author_id);
  CHECK(a.author_name == b.author_name);
  CHECK(a.text == b.text);
  CHECK(a.attachments_text == b.attachments_text);
  CHECK(a.is_bot == b.is_bot);
  CHECK(a.is_self == b.is_self);
  CHECK(a.mentions_bot == b.mentions_bot);
  CHECK(a.is_private_chat == b.is_private_chat);
  CHECK(a.event_id == b.event_id);
  CHECK(a.received == b.received);
  CHECK(a.kind == b.kind);
}

OutboxEntry Reply(const std::string& request_id) {
  OutboxEntry e;
  e.thread = Thread();
  e.session = "sess";
  e.request_id = request_id;
  e.parts = {"(1/2) first", "(2/2) second"};
  e.placeholder_id = "ph-1";
  e.next_attempt = At(5000);
  return e;
}

}  // namespace

TEST_CASE("store: inbox entries keep every message field and come back in id order", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  auto a = s.AddInbox(Thread(), "sess-a", FullMessage(), At(10));
  auto b = s.AddInbox(Thread("other"), "sess-b", Message("second"), At(20));
  auto c = s.AddInbox(Thread(), "sess-a", Message("third"), At(30));
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  REQUIRE(c.has_value());
  CHECK(*a < *b);
  CHECK(*b < *c);

  auto all = s.ListInbox();
  REQUIRE(all.has_value());
  REQUIRE(all->size() == 3);
  const InboxEntry& first = (*all)[0];
  CHECK(first.id == *a);
  CHECK(first.thread == Thread());
  CHECK(first.session == "sess-a");
  CheckSameMessage(first.message, FullMessage());
  CHECK(first.accepted == At(10));
  CHECK_FALSE(first.edited_text.has_value());
  CHECK_FALSE(first.deleted);
  CHECK((*all)[1].id == *b);
  CHECK((*all)[2].message.text == "third");

  auto of_a = s.ListInbox("sess-a");
  REQUIRE(of_a->size() == 2);
  CHECK((*of_a)[0].id == *a);
  CHECK((*of_a)[1].id == *c);
  CHECK(s.ListInbox("nobody")->empty());
}

TEST_CASE("store: a stored message's time past what the clock holds is an error naming the field", "[routing][store]") {
  const auto ok = routing::InboundMessageFromJsonText(routing::InboundMessageToJsonText(FullMessage()));
  REQUIRE(ok);
  CHECK(ok->received == FullMessage().received);
  // The whole message with its received_ms replaced.
  auto with_ms = [](const std::string& ms) {
    std::string text = routing::InboundMessageToJsonText(FullMessage());
    const auto at = text.find("\"received_ms\":");
    REQUIRE(at != std::string::npos);
    const auto end = text.find_first_of(",}", at);
    return text.replace(at, end - at, "\"received_ms\":" + ms);
  };
  for (const char* ms : {"9223372036854775807", "-9223372036854775807", "\"1\""}) {
    INFO(ms);
    const auto bad = routing::InboundMessageFromJsonText(with_ms(ms));
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message, Catch::Contains("\"received_ms\""));
  }
  const auto far = routing::InboundMessageFromJsonText(with_ms("9000000000000"));  // the year 2255
  INFO((far ? std::string() : far.error().message));
  REQUIRE(far);
  CHECK(std::chrono::duration_cast<std::chrono::seconds>(far->received.time_since_epoch()).count() ==
        9'000'000'000);
}

TEST_CASE("store: an inbox entry is edited, marked deleted and removed", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const auto id = *s.AddInbox(Thread(), "sess", Message("before"), At(1));
  REQUIRE(s.UpdateInboxText(id, "after"));
  REQUIRE(s.UpdateInboxText(id, ""));  // edited to nothing is still edited
  auto e = s.ListInbox()->at(0);
  REQUIRE(e.edited_text.has_value());
  CHECK(*e.edited_text == "");
  CHECK(e.message.text == "before");
  REQUIRE(s.MarkInboxDeleted(id));
  CHECK(s.ListInbox()->at(0).deleted);

  CHECK(*s.RemoveInbox(id));
  CHECK_FALSE(*s.RemoveInbox(id));
  auto edit = s.UpdateInboxText(id, "late");
  REQUIRE_FALSE(edit);
  CHECK(edit.error().code == Errc::not_found);
  CHECK_THAT(edit.error().message, Catch::Contains("no inbox entry " + std::to_string(id)));
  CHECK(s.MarkInboxDeleted(id).error().code == Errc::not_found);

  // Ids are never reused, even for the last one removed.
  CHECK(*s.AddInbox(Thread(), "sess", Message("next"), At(2)) > id);
}

// The file's mark (id_blocks) is above every work id it holds and every id its bot-message index names.
void CheckIdMark(const std::string& path) {
  RawDb raw(path);
  const std::int64_t mark = raw.Int("SELECT next FROM id_blocks WHERE name = 'work'");
  CHECK(mark > raw.Int("SELECT COALESCE(max(id), 0) FROM work"));
  CHECK(mark > raw.Int("SELECT COALESCE(max(inbox_id), 0) FROM bot_messages"));
}

TEST_CASE("store: work ids are never given twice: across a restart, a rollback and a block's end", "[routing][store]") {
  Fixture f;
  std::vector<std::int64_t> given;
  for (int i = 0; i < 3; ++i) given.push_back(*f.store->AddInbox(Thread(), "sess", Message("m"), At(i)));
  CHECK(given[1] > given[0]);
  CHECK(given[2] > given[1]);
  // The newest row goes, and the store closes: the next start gives a higher id all the same.
  REQUIRE(*f.store->RemoveInbox(given[2]));
  CheckIdMark(f.path);
  f.store.reset();
  f.store = OpenStore(f.path);
  given.push_back(*f.store->AddInbox(Thread(), "sess", Message("after restart"), At(9)));
  CHECK(given.back() > given[2]);

  // A batch rolled back takes its rows and its reservation with it; what comes after reserves again,
  // and an id given in the rolled-back batch is not given again.
  f.store.reset();
  {
    RawDb raw(f.path);
    // The mark where the next id needs a reservation of its own.
    raw.Exec("UPDATE id_blocks SET next = (SELECT max(id) FROM work) + 1 WHERE name = 'work'");
  }
  f.store = OpenStore(f.path);
  REQUIRE(f.store->BeginBatch("test"));
  auto rolled_back = f.store->AcceptMessage(Thread(), "sess", Message("rolled back"), Keys("Ev-rb", "M-rb"), At(10));
  REQUIRE(rolled_back);
  REQUIRE(rolled_back->has_value());
  f.store->AbortBatch();
  CheckIdMark(f.path);
  auto kept = f.store->AcceptMessage(Thread(), "sess", Message("kept"), Keys("Ev-k", "M-k"), At(11));
  REQUIRE(kept);
  REQUIRE(kept->has_value());
  CHECK(**kept > **rolled_back);
  CheckIdMark(f.path);

  // Past a block of reserved ids (1,024), within one batch: the mark moves with them.
  REQUIRE(f.store->BeginBatch("test"));
  std::int64_t last = **kept;
  for (int i = 0; i < 1100; ++i) {
    auto id = f.store->AddInbox(Thread(), "sess", Message("bulk"), At(20 + i));
    REQUIRE(id);
    REQUIRE(*id > last);
    last = *id;
  }
  REQUIRE(f.store->CommitBatch());
  CheckIdMark(f.path);
  f.store.reset();
  f.store = OpenStore(f.path);
  CHECK(*f.store->AddInbox(Thread(), "sess", Message("last"), At(2000)) > last);
  CheckIdMark(f.path);
}

TEST_CASE("store: a work id's reservation that cannot be written fails the message, naming why", "[routing][store]") {
  Fixture f;
  f.store.reset();
  {
    RawDb raw(f.path);
    raw.Exec("DELETE FROM id_blocks");
  }
  f.store = OpenStore(f.path);
  auto id = f.store->AddInbox(Thread(), "sess", Message("m"), At(1));
  REQUIRE_FALSE(id);
  CHECK(id.error().code == Errc::io_error);
  CHECK_THAT(id.error().message, Catch::Contains("id_blocks has no row for work ids"));
  CHECK(f.store->ListInbox()->empty());
}

TEST_CASE("store: AcceptMessage records the keys and the inbox entry, or nothing for a redelivery",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  auto first = s.AcceptMessage(Thread(), "sess", Message("hi"), Keys("Ev1", "M1"), At(1));
  REQUIRE(first.has_value());
  REQUIRE(first->has_value());
  CHECK(s.ListInbox()->size() == 1);

  // The same delivery again, or the same message in a new delivery, or a new message id with the
  // same delivery id: all duplicates, and none leaves its new key behind.
  for (const auto& keys : {Keys("Ev1", "M1"), Keys("Ev2", "M1"), Keys("Ev1", "M2")}) {
    auto again = s.AcceptMessage(Thread(), "sess", Message("hi"), keys, At(2));
    REQUIRE(again.has_value());
    CHECK_FALSE(again->has_value());
  }
  CHECK(s.ListInbox()->size() == 1);
  CHECK_FALSE(*s.Forget(DedupeKind::event, "Ev2"));
  CHECK_FALSE(*s.Forget(DedupeKind::message, "M2"));

  // A key listed twice is one key; no keys at all always accepts.
  auto twice = s.AcceptMessage(Thread(), "sess", Message("x"),
                               std::vector<DedupeKey>{{DedupeKind::event, "Ev3"}, {DedupeKind::event, "Ev3"}}, At(3));
  REQUIRE(twice.has_value());
  CHECK(twice->has_value());
  CHECK(s.AcceptMessage(Thread(), "sess", Message("y"), {}, At(4))->has_value());
  CHECK(s.AcceptMessage(Thread(), "sess", Message("y"), {}, At(5))->has_value());
  CHECK(s.ListInbox()->size() == 4);
  CHECK(*s.SeenOrRemember(DedupeKind::event, "Ev3"));
}

TEST_CASE("store: AcceptMessage failing after its keys were written leaves neither keys nor entry",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  RawDb raw(f.path);
  // A real SQLite failure half-way through the transaction: the keys are in, the inbox insert aborts.
  raw.Exec("CREATE TRIGGER fail_inbox BEFORE INSERT ON work BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
  auto failed = s.AcceptMessage(Thread(), "sess", Message("hi"), Keys("Ev1", "M1"), At(1));
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == Errc::io_error);
  // Its row waited (Db::Append) until its commit, which wrote it first.
  CHECK_THAT(failed.error().message,
             Catch::Contains("router store " + f.path +
                             ": AcceptMessage: writing the 1 row appended before it: add a message to the inbox: "
                             "injected failure"));
  CHECK(s.ListInbox()->empty());
  CHECK(raw.Int("SELECT (SELECT count(*) FROM dedupe_event) + (SELECT count(*) FROM dedupe_message)") == 0);

  raw.Exec("DROP TRIGGER fail_inbox");
  auto retried = s.AcceptMessage(Thread(), "sess", Message("hi"), Keys("Ev1", "M1"), At(2));
  REQUIRE(retried.has_value());
  CHECK(retried->has_value());
  CHECK(s.ListInbox()->size() == 1);
}

TEST_CASE("store: the dedupe bound counts only what committed, across rollbacks and reopening", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  StoreLimits limits;
  limits.dedupe_per_kind = 2;
  auto store = OpenStore(path, limits);
  auto accept = [&](const std::string& n) {
    auto r = store->AcceptMessage(Thread(), "sess", Message("m" + n, n), Keys("Ev" + n, "M" + n), At(1));
    REQUIRE(r.has_value());
    CHECK(r->has_value());
  };
  accept("1");
  {
    // Keys written, then the transaction rolled back: they must not count against the bound.
    RawDb raw(path);
    raw.Exec("CREATE TRIGGER fail_inbox BEFORE INSERT ON work BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
    REQUIRE_FALSE(store->AcceptMessage(Thread(), "sess", Message("x", "9"), Keys("Ev9", "M9"), At(1)));
    raw.Exec("DROP TRIGGER fail_inbox");
  }
  accept("2");
  // At the bound (2 per kind) and not past it: nothing evicted.
  CHECK(*store->SeenOrRemember(DedupeKind::message, "M1"));
  CHECK(*store->SeenOrRemember(DedupeKind::message, "M2"));
  accept("3");  // past it: the oldest of each kind goes
  CHECK_FALSE(*store->Forget(DedupeKind::message, "M1"));
  CHECK_FALSE(*store->Forget(DedupeKind::event, "Ev1"));
  CHECK(*store->Forget(DedupeKind::event, "Ev2"));  // one below the bound now

  // Inside a batch, the rows a call appended (its keys, then the inbox row) are written before the
  // next statement, the batch's eviction at its commit here: their failure spoils the batch, the
  // commit rolls everything back (the key remembered before them too), and the count is taken again
  // and stays the file's.
  {
    RawDb raw(path);
    raw.Exec("CREATE TRIGGER fail_inbox BEFORE INSERT ON work BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
  }
  REQUIRE(store->BeginBatch("test batch"));
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::message, "M7"));
  REQUIRE(store->AcceptMessage(Thread(), "sess", Message("x", "8"), Keys("Ev8", "M8"), At(1)));
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::message, "M9"));
  auto commit = store->CommitBatch();
  REQUIRE_FALSE(commit);
  CHECK(commit.error().code == Errc::io_error);
  CHECK_THAT(commit.error().message, Catch::Contains("writing the 5 rows appended before it: add a message to the "
                                                     "inbox: injected failure"));
  CHECK_FALSE(store->InBatch());
  {
    RawDb raw(path);
    raw.Exec("DROP TRIGGER fail_inbox");
    CHECK(raw.Int("SELECT count(*) FROM (SELECT key FROM dedupe_event UNION ALL SELECT key FROM dedupe_message) WHERE key IN ('M7', 'M8', 'Ev8', 'M9')") == 0);
  }
  // The next batch is not spoiled, and a call that fails before it writes leaves it as it was.
  REQUIRE(store->BeginBatch("test batch"));
  CHECK(store->BeginTurn(999, "req-none", At(1)).error().code == Errc::not_found);
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::event, "Ev7"));
  REQUIRE(store->CommitBatch());
  CHECK(*store->Forget(DedupeKind::event, "Ev7"));
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::message, "M4"));  // past the bound by one: M2 goes
  CHECK_FALSE(*store->Forget(DedupeKind::message, "M2"));
  CHECK(*store->SeenOrRemember(DedupeKind::message, "M3"));

  // Reopened, the rows are counted again: one more key fits, the next evicts the oldest.
  store.reset();
  store = OpenStore(path, limits);
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::event, "Ev4"));
  CHECK(*store->SeenOrRemember(DedupeKind::event, "Ev3"));
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::event, "Ev5"));
  CHECK_FALSE(*store->Forget(DedupeKind::event, "Ev3"));
  store.reset();
  RawDb raw(path);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_event") == 2);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_message") == 2);
  CHECK(raw.Int("SELECT count(*) FROM (SELECT key FROM dedupe_event UNION ALL SELECT key FROM dedupe_message) WHERE key IN ('M3', 'M4')") == 2);
}

TEST_CASE("store: BeginTurn moves an inbox entry to the turns with its edited text", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const auto id = *s.AddInbox(Thread(), "sess", Message("original"), At(1));
  const auto other = *s.AddInbox(Thread(), "sess", Message("next"), At(2));
  REQUIRE(s.UpdateInboxText(id, "edited"));

  auto turn = s.BeginTurn(id, "req-1", At(100));
  REQUIRE(turn.has_value());
  CHECK(turn->inbox_id == id);
  CHECK(turn->request_id == "req-1");
  CHECK(turn->session == "sess");
  CHECK(turn->thread == Thread());
  CHECK(turn->author_id == "U1");
  CHECK(turn->message.text == "edited");
  CHECK(turn->message.message_id == "1790000001.000200");
  CHECK(turn->placeholder_id.empty());
  CHECK(turn->cursor == TurnCursor{});
  CHECK(turn->started == At(100));

  auto inbox = s.ListInbox();
  REQUIRE(inbox->size() == 1);
  CHECK(inbox->at(0).id == other);
  auto turns = s.ListTurns();
  REQUIRE(turns->size() == 1);
  CHECK(turns->at(0).request_id == "req-1");
  CHECK(turns->at(0).message.text == "edited");
  CHECK(turns->at(0).started == At(100));

  SECTION("a request id in use is refused and the entry stays in the inbox") {
    auto dup = s.BeginTurn(other, "req-1", At(101));
    REQUIRE_FALSE(dup);
    CHECK(dup.error().code == Errc::invalid_argument);
    CHECK_THAT(dup.error().message, Catch::Contains("request id req-1 is in use"));
    CHECK(s.ListInbox()->size() == 1);
    CHECK(s.ListTurns()->size() == 1);
  }
  SECTION("an entry that is gone, or that its author deleted, is refused") {
    auto gone = s.BeginTurn(id, "req-2", At(101));
    REQUIRE_FALSE(gone);
    CHECK(gone.error().code == Errc::not_found);
    CHECK_THAT(gone.error().message, Catch::Contains("no inbox entry " + std::to_string(id)));
    REQUIRE(s.MarkInboxDeleted(other));
    auto deleted = s.BeginTurn(other, "req-2", At(101));
    REQUIRE_FALSE(deleted);
    CHECK(deleted.error().code == Errc::invalid_argument);
    CHECK_THAT(deleted.error().message, Catch::Contains("was deleted by its author"));
    CHECK(s.ListInbox()->size() == 1);
    CHECK(s.BeginTurn(other, "", At(1)).error().code == Errc::invalid_argument);
  }
  SECTION("the receipt a message waited under becomes its turn's placeholder, unless one is named") {
    REQUIRE(s.SetInboxReceipt(other, "r-2"));
    CHECK(s.ListInbox()->at(0).receipt_id == "r-2");
    auto begun = s.BeginTurn(other, "req-2", At(101));
    REQUIRE(begun.has_value());
    CHECK(begun->placeholder_id == "r-2");
    CHECK(s.ListTurns()->at(1).placeholder_id == "r-2");
    const auto third = *s.AddInbox(Thread(), "sess", Message("third"), At(3));
    REQUIRE(s.SetInboxReceipt(third, "r-3"));
    CHECK(s.BeginTurn(third, "req-3", At(102), "ph-3")->placeholder_id == "ph-3");
    CHECK(s.SetInboxReceipt(third, "r-x").error().code == Errc::not_found);
  }
}

TEST_CASE("store: MoveToTurns moves an entry as BeginTurn does, and refuses the same", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const InboundMessage full = FullMessage();
  const auto plain = *s.AddInbox(Thread(), "sess", full, At(1));
  const auto edited = *s.AddInbox(Thread("t2"), "sess-2", Message("before"), At(2));
  const auto deleted = *s.AddInbox(Thread(), "sess", Message("gone"), At(3));
  REQUIRE(s.UpdateInboxText(edited, "after"));
  REQUIRE(s.MarkInboxDeleted(deleted));
  REQUIRE(s.SetInboxReceipt(plain, "r-1"));

  REQUIRE(s.MoveToTurns(plain, "req-1", At(100), {}, TurnCursor{17, "journal-1", "ignored", 9}));
  REQUIRE(s.MoveToTurns(edited, "req-2", At(101), "ph-2", TurnCursor{18, "journal-1", {}, 0}));
  auto turns = s.ListTurns();
  REQUIRE(turns->size() == 2);
  // Moved as stored: every field of the message, its author, the receipt as the placeholder.
  CHECK(turns->at(0).inbox_id == plain);
  CHECK(turns->at(0).session == "sess");
  CHECK(turns->at(0).thread == Thread());
  CHECK(turns->at(0).author_id == full.author_id);
  CheckSameMessage(turns->at(0).message, full);
  CHECK(turns->at(0).placeholder_id == "r-1");
  CHECK(turns->at(0).started == At(100));
  // The cursor starts where the journal stood: no turn id or revision yet.
  CHECK(turns->at(0).cursor == TurnCursor{17, "journal-1", {}, 0});
  // Edited: the edit applied, as BeginTurn does, with the same cursor.
  CHECK(turns->at(1).cursor == TurnCursor{18, "journal-1", {}, 0});
  CHECK(turns->at(1).message.text == "after");
  CHECK(turns->at(1).thread == Thread("t2"));
  CHECK(turns->at(1).placeholder_id == "ph-2");
  REQUIRE(s.ListInbox()->size() == 1);

  const auto next = *s.AddInbox(Thread(), "sess", Message("next"), At(4));
  auto in_use = s.MoveToTurns(next, "req-1", At(102));
  REQUIRE_FALSE(in_use);
  CHECK(in_use.error().code == Errc::invalid_argument);
  CHECK_THAT(in_use.error().message, Catch::Contains("request id req-1 is in use"));
  auto gone = s.MoveToTurns(deleted, "req-3", At(102));
  REQUIRE_FALSE(gone);
  CHECK_THAT(gone.error().message, Catch::Contains("was deleted by its author"));
  CHECK(s.MoveToTurns(plain, "req-4", At(102)).error().code == Errc::not_found);
  CHECK(s.MoveToTurns(next, "", At(102)).error().code == Errc::invalid_argument);
  CHECK(s.ListInbox()->size() == 2);
  CHECK(s.ListTurns()->size() == 2);
  // A damaged row: BeginTurn decodes it and says so, and it stays waiting. MoveToTurns reads nothing
  // (the row takes the turn's columns in place), and the turns' listing, what a restart reads, says so.
  const auto bad = *s.AddInbox(Thread(), "sess", Message("bad"), At(5));
  {
    RawDb raw(f.path);
    raw.Exec("UPDATE work SET message = '{\"platform\": ' WHERE id = " + std::to_string(bad));
  }
  auto damaged = s.BeginTurn(bad, "req-6", At(102));
  REQUIRE_FALSE(damaged);
  CHECK(damaged.error().code == Errc::io_error);
  CHECK_THAT(damaged.error().message, Catch::Contains("inbox entry " + std::to_string(bad)));
  CHECK(s.ListTurns()->size() == 2);
  REQUIRE(s.MoveToTurns(bad, "req-6", At(102)));
  auto listed = s.ListTurns();
  REQUIRE_FALSE(listed);
  CHECK(listed.error().code == Errc::io_error);
  CHECK_THAT(listed.error().message, Catch::Contains("turn req-6"));
  REQUIRE(*s.FinishTurn("req-6"));
  CHECK(s.ListTurns()->size() == 2);
  // Inside a batch, a refusal leaves the batch as it was.
  REQUIRE(s.BeginBatch("test batch"));
  CHECK_FALSE(s.MoveToTurns(next, "req-1", At(103)));
  REQUIRE(s.MoveToTurns(next, "req-5", At(103)));
  REQUIRE(s.CommitBatch());
  CHECK(s.ListTurns()->size() == 3);
}

// The turns in flight are kept in memory by request id (v9): what a rolled-back batch started or
// ended is as it was in the file afterwards, and a store opened again finds them from the file.
TEST_CASE("store: turns started or ended in a rolled-back batch are as the file says afterwards", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const auto a = *s.AddInbox(Thread(), "sess", Message("a"), At(1));
  const auto b = *s.AddInbox(Thread("t2"), "sess", Message("b"), At(2));
  REQUIRE(s.MoveToTurns(a, "req-a", At(10)));

  REQUIRE(s.BeginBatch("test batch"));
  REQUIRE(s.MoveToTurns(b, "req-b", At(11)));
  REQUIRE(*s.FinishTurn("req-a"));
  s.AbortBatch();
  // req-a is still in flight (its end rolled back), req-b never started.
  CHECK_FALSE(s.MoveToTurns(b, "req-a", At(12)));
  CHECK_FALSE(*s.FinishTurn("req-b"));
  REQUIRE(s.UpdateTurnCursor("req-a", TurnCursor{5, "j", "turn-1", 1}));
  REQUIRE(s.ListTurns()->size() == 1);

  // Both again, committed this time; and a store opened again sees the same.
  REQUIRE(s.BeginBatch("test batch"));
  REQUIRE(s.MoveToTurns(b, "req-b", At(13)));
  REQUIRE(*s.FinishTurn("req-a"));
  REQUIRE(s.CommitBatch());
  f.store.reset();
  f.store = OpenStore(f.path);
  auto turns = f.store->ListTurns();
  REQUIRE(turns);
  REQUIRE(turns->size() == 1);
  CHECK(turns->at(0).request_id == "req-b");
  CHECK(turns->at(0).inbox_id == b);
  CHECK_FALSE(*f.store->FinishTurn("req-a"));
  CHECK(f.store->SetTurnPlaceholder("req-a", "p").error().code == Errc::not_found);
  REQUIRE(*f.store->FinishTurn("req-b"));
  CHECK(f.store->ListTurns()->empty());
}

// The Router records a receipt's or placeholder's id in one place, its bot-message index entry, which
// names the work row it was posted for: no second write to that row when the post lands.
TEST_CASE("store: a receipt or placeholder indexed with its work row is what a restart reads", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const auto waiting = *s.AddInbox(Thread(), "sess", Message("w"), At(1));
  const auto started = *s.AddInbox(Thread("t2"), "sess", Message("s"), At(2));
  const auto named = *s.AddInbox(Thread("t3"), "sess", Message("n"), At(3));
  const auto bare = *s.AddInbox(Thread("t4"), "sess", Message("b"), At(4));
  REQUIRE(s.MoveToTurns(started, "req-s", At(10)));  // its placeholder not posted yet
  REQUIRE(s.MoveToTurns(named, "req-n", At(11), "ph-named"));
  const ChatRef chat = ChatRef::Of(Thread());
  REQUIRE(s.IndexBotMessage({chat, "receipt-1", "sess", BotMessageKind::placeholder, waiting}));
  REQUIRE(s.IndexBotMessage({chat, "ph-1", "sess", BotMessageKind::placeholder, started}));
  REQUIRE(s.IndexBotMessage({chat, "ph-2", "sess", BotMessageKind::placeholder, started}));  // posted again
  REQUIRE(s.IndexBotMessage({chat, "other", "sess", BotMessageKind::placeholder, named}));
  REQUIRE(s.IndexBotMessage({chat, "reply-1", "sess", BotMessageKind::reply}));

  auto inbox = s.ListInbox();
  REQUIRE(inbox);
  REQUIRE(inbox->size() == 2);
  CHECK(inbox->at(0).id == waiting);
  CHECK(inbox->at(0).receipt_id == "receipt-1");
  CHECK(inbox->at(1).id == bare);
  CHECK(inbox->at(1).receipt_id.empty());
  CHECK(s.ListInbox("sess")->at(0).receipt_id == "receipt-1");
  auto turns = s.ListTurns();
  REQUIRE(turns);
  REQUIRE(turns->size() == 2);
  CHECK(turns->at(0).request_id == "req-s");
  CHECK(turns->at(0).placeholder_id == "ph-2");  // the latest posted for it
  CHECK(turns->at(1).request_id == "req-n");
  CHECK(turns->at(1).placeholder_id == "ph-named");  // its row's own comes first

  // A turn started from the waiting message keeps that receipt as its placeholder.
  REQUIRE(s.MoveToTurns(waiting, "req-w", At(12)));
  auto later = s.ListTurns();
  REQUIRE(later);
  REQUIRE(later->size() == 3);
  CHECK(later->at(2).placeholder_id == "receipt-1");
  // The index entry keeps its work row when the reply is edited into it.
  REQUIRE(s.IndexBotMessage({chat, "ph-2", "sess", BotMessageKind::reply}));
  auto found = s.FindBotMessage(chat, "ph-2");
  REQUIRE(found);
  REQUIRE(*found);
  CHECK((*found)->inbox_id == started);
  CHECK((*found)->kind == BotMessageKind::reply);
}

TEST_CASE("store: a turn's cursor and placeholder are updated and the turn finished", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  REQUIRE(s.BeginTurn(*s.AddInbox(Thread(), "sess", Message("a"), At(1)), "req-a", At(10), "ph-a"));
  REQUIRE(s.BeginTurn(*s.AddInbox(Thread("t2"), "sess", Message("b"), At(2)), "req-b", At(20)));

  REQUIRE(s.UpdateTurnCursor("req-b", TurnCursor{41, "journal-1", "turn-9", 3}));
  REQUIRE(s.UpdateTurnCursor("req-b", TurnCursor{42, "journal-1", "turn-9", 4}));
  REQUIRE(s.SetTurnPlaceholder("req-b", "ph-b"));
  auto turns = s.ListTurns();
  REQUIRE(turns->size() == 2);
  CHECK(turns->at(0).request_id == "req-a");  // in the order they began
  CHECK(turns->at(0).placeholder_id == "ph-a");
  CHECK(turns->at(0).cursor == TurnCursor{});
  CHECK(turns->at(1).request_id == "req-b");
  CHECK(turns->at(1).thread == Thread("t2"));
  CHECK(turns->at(1).placeholder_id == "ph-b");
  CHECK(turns->at(1).cursor == TurnCursor{42, "journal-1", "turn-9", 4});

  auto missing = s.UpdateTurnCursor("req-x", TurnCursor{1, "j", "t", 1});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);
  CHECK_THAT(missing.error().message, Catch::Contains("no turn in flight with request id req-x"));
  CHECK(s.SetTurnPlaceholder("req-x", "p").error().code == Errc::not_found);

  CHECK(*s.FinishTurn("req-a"));
  CHECK_FALSE(*s.FinishTurn("req-a"));
  REQUIRE(s.ListTurns()->size() == 1);
}

TEST_CASE("store: CompleteTurn queues the reply once and the outbox entry is updated and removed", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  REQUIRE(s.BeginTurn(*s.AddInbox(Thread(), "sess", Message("a"), At(1)), "req-1", At(10)));
  auto id = s.CompleteTurn(Reply("req-1"));
  REQUIRE(id.has_value());
  CHECK(s.ListTurns()->empty());

  // The turn is gone, so a second completion (a retry, a bug) queues nothing.
  auto again = s.CompleteTurn(Reply("req-1"));
  REQUIRE_FALSE(again);
  CHECK(again.error().code == Errc::not_found);
  CHECK_THAT(again.error().message, Catch::Contains("req-1"));

  OutboxEntry note = Reply("");
  note.parts = {"a note"};
  note.placeholder_id.clear();
  auto note_id = s.AddOutbox(note);
  REQUIRE(note_id.has_value());
  CHECK(*note_id > *id);

  auto box = s.ListOutbox();
  REQUIRE(box->size() == 2);
  const OutboxEntry& e = box->at(0);
  CHECK(e.id == *id);
  CHECK(e.thread == Thread());
  CHECK(e.session == "sess");
  CHECK(e.request_id == "req-1");
  CHECK(e.parts == std::vector<std::string>{"(1/2) first", "(2/2) second"});
  CHECK(e.next_part == 0);
  CHECK(e.placeholder_id == "ph-1");
  CHECK(e.attempts == 0);
  CHECK(e.next_attempt == At(5000));
  CHECK(e.last_error.empty());
  CHECK(box->at(1).parts == std::vector<std::string>{"a note"});

  REQUIRE(s.UpdateOutbox(*id, 1, 2, At(9000), "unavailable: 429"));
  const OutboxEntry updated = s.ListOutbox()->at(0);
  CHECK(updated.next_part == 1);
  CHECK(updated.attempts == 2);
  CHECK(updated.next_attempt == At(9000));
  CHECK(updated.last_error == "unavailable: 429");
  CHECK(updated.parts == e.parts);
  // A default string_view (null data) clears the error; SQLite would bind it as NULL.
  REQUIRE(s.UpdateOutbox(*id, 2, 0, At(9500), std::string_view{}));
  CHECK(s.ListOutbox()->at(0).last_error.empty());

  CHECK(*s.RemoveOutbox(*id));
  CHECK_FALSE(*s.RemoveOutbox(*id));
  CHECK(s.UpdateOutbox(*id, 1, 1, At(1), "").error().code == Errc::not_found);
  REQUIRE(s.ListOutbox()->size() == 1);
}

namespace {

// An open question of Thread(), id q7x, asked by U1 in message m-ask.
OpenQuestion Asked(std::vector<InputQuestion> questions) {
  OpenQuestion q;
  q.id = "q7x";
  q.session = "sess";
  q.request_id = "req-1";
  q.input_id = "input-3";
  q.thread = Thread();
  q.message_id = "m-ask";
  q.questions = std::move(questions);
  q.asker_id = "U1";
  q.deadline = At(60'000);
  return q;
}

}  // namespace

TEST_CASE("store: open questions are found by id, by message and by thread", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  OpenQuestion q = Asked({InputQuestion{"color", "Colour", "Which one?", {{"red", "warm"}, {"blue", ""}}, true, false},
                          InputQuestion{"token", "", "Paste it", {}, false, true}});
  REQUIRE(s.AddQuestion(q));
  OpenQuestion q2 = q;
  q2.id = "q8y";
  q2.message_id = "m-ask-2";
  q2.questions = {};
  REQUIRE(s.AddQuestion(q2));
  OpenQuestion elsewhere = q;
  elsewhere.id = "q9z";
  elsewhere.thread = Thread("other");
  elsewhere.message_id = "m-ask-3";
  REQUIRE(s.AddQuestion(elsewhere));

  auto dup = s.AddQuestion(q);
  REQUIRE_FALSE(dup);
  CHECK(dup.error().code == Errc::invalid_argument);
  CHECK_THAT(dup.error().message, Catch::Contains("q7x is in use"));
  OpenQuestion no_id = q;
  no_id.id.clear();
  CHECK(s.AddQuestion(no_id).error().code == Errc::invalid_argument);

  auto found = s.FindQuestion("q7x");
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  const OpenQuestion& g = **found;
  CHECK(g.id == q.id);
  CHECK(g.session == q.session);
  CHECK(g.request_id == q.request_id);
  CHECK(g.input_id == q.input_id);
  CHECK(g.thread == q.thread);
  CHECK(g.message_id == q.message_id);
  CHECK(g.questions == q.questions);
  CHECK(g.asker_id == q.asker_id);
  CHECK(g.deadline == q.deadline);
  CHECK_FALSE(s.FindQuestion("nope")->has_value());

  auto by_message = s.FindQuestionByMessage(ChatRef::Of(Thread()), "m-ask-2");
  REQUIRE(by_message->has_value());
  CHECK((*by_message)->id == "q8y");
  CHECK((*by_message)->questions.empty());
  CHECK_FALSE(s.FindQuestionByMessage(ChatRef{"slack", "T1", "C999"}, "m-ask")->has_value());

  auto here = s.OpenQuestionsIn(Thread());
  REQUIRE(here->size() == 2);
  CHECK(here->at(0).id == "q7x");
  CHECK(here->at(1).id == "q8y");
  CHECK(s.OpenQuestionsIn(Thread("other"))->size() == 1);

  CHECK(*s.RemoveQuestion("q7x"));
  CHECK_FALSE(*s.RemoveQuestion("q7x"));
  auto all = s.ListQuestions();
  REQUIRE(all->size() == 2);
  CHECK(all->at(0).id == "q8y");
  CHECK(all->at(1).id == "q9z");
}

TEST_CASE("store: an open question keeps the answers given so far", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  OpenQuestion q = Asked({InputQuestion{"color", "", "Which one?", {{"red", ""}, {"blue", ""}}, true, false},
                          InputQuestion{"size", "", "How big?", {}, false, false},
                          InputQuestion{"token", "", "Paste it", {}, false, true}});
  // Not stored yet: nothing to update (AddQuestion writes what it has then).
  CHECK(s.SetQuestionProgress(q).error().code == Errc::not_found);
  q.answered = 1;
  q.answers = {{"color", {"red", "blue"}}};
  REQUIRE(s.AddQuestion(q));
  auto found = s.FindQuestion("q7x");
  REQUIRE(found->has_value());
  CHECK((*found)->answered == 1);
  CHECK((*found)->answers == q.answers);
  q.answered = 2;
  q.answers["size"] = {"large, \"quoted\" and 日本語"};
  REQUIRE(s.SetQuestionProgress(q));
  auto all = s.ListQuestions();
  REQUIRE(all->size() == 1);
  CHECK(all->at(0).answered == 2);
  CHECK(all->at(0).answers == q.answers);
  // The rest of the row is as it was.
  CHECK(all->at(0).questions == q.questions);
  CHECK(all->at(0).message_id == "m-ask");
}

TEST_CASE("store: unicode and very long strings round-trip", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  std::string long_text;
  while (long_text.size() < (4u << 20)) long_text += "naïve café 日本語 🎉 ";
  const std::string name = "セッション-🎉-" + std::string(300, 'x');
  const ThreadRef thread{"slack", "Tü", "Cé", "スレッド"};

  InboundMessage m = Message(long_text);
  m.author_name = "Ζωή \u202e bidi \u200b zero-width";
  m.attachments_text = {long_text.substr(0, 100'000), "🎉"};
  std::string nul_text = "before";
  nul_text += '\0';
  nul_text += "after";
  m.reply_to_message_id = nul_text;
  const auto id = *s.AddInbox(thread, name, m, At(1));
  auto e = s.ListInbox(name)->at(0);
  CHECK(e.id == id);
  CHECK(e.thread == thread);
  CHECK(e.session == name);
  CheckSameMessage(e.message, m);

  REQUIRE(s.BindThread(Binding{thread, name, At(1), false}));
  CHECK((*s.FindBinding(thread))->session == name);
  REQUIRE(s.AddChatSession(ChatSession{ChatRef::Of(thread), name, At(1), long_text}));
  CHECK(s.ListChatSessions(ChatRef::Of(thread))->at(0).label == long_text);
  CHECK(!*s.SeenOrRemember(DedupeKind::message, long_text));
  CHECK(*s.SeenOrRemember(DedupeKind::message, long_text));

  OutboxEntry reply = Reply("");
  reply.parts = {long_text, "", "🎉"};
  reply.last_error = "ошибка";
  REQUIRE(s.AddOutbox(reply));
  auto box = s.ListOutbox()->at(0);
  CHECK(box.parts == reply.parts);
  CHECK(box.last_error == "ошибка");
}

TEST_CASE("store: text that is not UTF-8 is kept in plain columns and replaced in a stored message",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const std::string bad = "ok \xff\xfe bad";
  // A message is never refused for an adapter's bad bytes: JSON cannot hold them, so they become U+FFFD.
  REQUIRE(s.AddInbox(Thread(), bad, Message(bad), At(1)));
  auto e = s.ListInbox()->at(0);
  CHECK(e.session == bad);
  CHECK(e.message.text == "ok \xef\xbf\xbd\xef\xbf\xbd bad");
}

TEST_CASE("store: a batch is one transaction, and a call that fails before it writes leaves it as it was",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  REQUIRE(s.BeginBatch("test batch"));
  CHECK(s.InBatch());
  CHECK(s.BeginBatch("again").error().code == Errc::invalid_argument);
  const auto a = *s.AddInbox(Thread(), "sess", Message("a"), At(1));
  // A call that fails inside the batch before it wrote: the batch goes on.
  CHECK(s.BeginTurn(a + 100, "req-x", At(2)).error().code == Errc::not_found);
  const DedupeKey keys[] = {{DedupeKind::message, "slack|C1|m2"}};
  REQUIRE(s.AcceptMessage(Thread(), "sess", Message("b", "m2"), keys, At(3)));
  // The batch's own writes are visible to it before the commit.
  CHECK(s.ListInbox()->size() == 2);
  REQUIRE(s.BeginTurn(a, "req-a", At(4)));
  {
    RawDb other(f.path);  // another connection sees nothing yet
    CHECK(other.Int("SELECT count(*) FROM work WHERE request_id IS NULL") == 0);
  }
  REQUIRE(s.CommitBatch());
  CHECK_FALSE(s.InBatch());
  CHECK(s.CommitBatch().error().code == Errc::invalid_argument);
  CHECK(s.ListInbox()->size() == 1);
  CHECK(s.ListTurns()->size() == 1);
  {
    RawDb other(f.path);
    CHECK(other.Int("SELECT count(*) FROM work WHERE request_id IS NULL") == 1);
  }

  SECTION("an aborted batch leaves nothing") {
    REQUIRE(s.BeginBatch("aborted"));
    REQUIRE(s.AddInbox(Thread(), "sess", Message("c"), At(5)));
    s.AbortBatch();
    CHECK(s.ListInbox()->size() == 1);
  }
  SECTION("a batch still open when the store closes is rolled back") {
    REQUIRE(s.BeginBatch("left open"));
    REQUIRE(s.AddInbox(Thread(), "sess", Message("d"), At(6)));
    f.store.reset();
    auto again = OpenStore(f.path);
    CHECK(again->ListInbox()->size() == 1);
  }
}

// A damaged JSON column (only the store writes them: damage from outside) fails a listing, unless the
// caller asks for the damaged rows: then each is named with where it belongs, and the rest are read.
TEST_CASE("store: a listing reads past a damaged row when asked to, and names the row and its thread",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const auto good = *s.AddInbox(Thread("t-good"), "sess", Message("fine"), At(1));
  const auto bad = *s.AddInbox(Thread("t-bad"), "sess-bad", Message("lost"), At(2));
  REQUIRE(s.BeginTurn(*s.AddInbox(Thread("t-run"), "sess-run", Message("running"), At(3)), "req-ok", At(10)));
  REQUIRE(s.BeginTurn(*s.AddInbox(Thread("t-lost"), "sess-lost", Message("gone"), At(4)), "req-lost", At(11)));
  const auto reply_ok = *s.AddOutbox(Reply(""));
  OutboxEntry broken = Reply("");
  broken.thread = Thread("t-box");
  broken.session = "sess-box";
  const auto reply_bad = *s.AddOutbox(broken);
  REQUIRE(s.AddQuestion(Asked({InputQuestion{"lang", "Language", "Which?", {}, false, false}})));
  OpenQuestion other = Asked({InputQuestion{"lang", "Language", "Which?", {}, false, false}});
  other.id = "q-bad";
  other.thread = Thread("t-q");
  REQUIRE(s.AddQuestion(other));
  {
    RawDb raw(f.path);
    raw.Exec("UPDATE work SET message = '{\"text\": 7}' WHERE id = " + std::to_string(bad));
    raw.Exec("UPDATE work SET message = 'not json' WHERE request_id = 'req-lost'");
    raw.Exec("UPDATE outbox SET parts = '[1, 2]' WHERE id = " + std::to_string(reply_bad));
    raw.Exec("UPDATE questions SET progress = '{\"answered\": -1}' WHERE id = 'q-bad'");
  }
  // Asked for nothing: the first damaged row fails the listing, naming it.
  CHECK_THAT(s.ListInbox().error().message, Catch::Contains("inbox entry " + std::to_string(bad)));
  CHECK_THAT(s.ListTurns().error().message, Catch::Contains("turn req-lost"));
  CHECK_THAT(s.ListOutbox().error().message, Catch::Contains("outbox entry " + std::to_string(reply_bad)));
  CHECK_THAT(s.ListQuestions().error().message, Catch::Contains("question q-bad"));

  std::vector<DamagedRow> damaged;
  auto inbox = s.ListInbox(&damaged);
  REQUIRE(inbox);
  REQUIRE(inbox->size() == 1);
  CHECK(inbox->at(0).id == good);
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].what == "inbox entry " + std::to_string(bad));
  CHECK(damaged[0].id == bad);
  CHECK(damaged[0].thread == Thread("t-bad"));
  CHECK(damaged[0].session == "sess-bad");
  CHECK(damaged[0].error.code == Errc::io_error);
  CHECK_THAT(damaged[0].error.message, Catch::Contains(f.path));

  // A turn whose message is damaged is listed all the same (it runs in its Session), marked, with what
  // its columns give.
  damaged.clear();
  auto turns = s.ListTurns(&damaged);
  REQUIRE(turns);
  REQUIRE(turns->size() == 2);
  CHECK(turns->at(0).request_id == "req-ok");
  CHECK_FALSE(turns->at(0).message_lost);
  CHECK(turns->at(0).message.text == "running");
  const TurnRecord& lost = turns->at(1);
  CHECK(lost.message_lost);
  CHECK(lost.session == "sess-lost");
  CHECK(lost.message.text.empty());
  CHECK(lost.message.thread == "t-lost");
  CHECK(lost.message.chat == "C123");
  CHECK(lost.message.author_id == "U1");
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].what == "turn req-lost");
  CHECK(damaged[0].key == "req-lost");
  CHECK(damaged[0].thread == Thread("t-lost"));

  damaged.clear();
  auto box = s.ListOutbox(&damaged);
  REQUIRE(box);
  REQUIRE(box->size() == 1);
  CHECK(box->at(0).id == reply_ok);
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].id == reply_bad);
  CHECK(damaged[0].thread == Thread("t-box"));
  CHECK(damaged[0].session == "sess-box");

  damaged.clear();
  auto questions = s.ListQuestions(&damaged);
  REQUIRE(questions);
  REQUIRE(questions->size() == 1);
  CHECK(questions->at(0).id == "q7x");
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].key == "q-bad");
  CHECK(damaged[0].thread == Thread("t-q"));
  CHECK_THAT(damaged[0].error.message, Catch::Contains("progress.answered"));
}
