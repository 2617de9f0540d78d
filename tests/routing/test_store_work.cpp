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

std::vector<DedupeKey> Keys(const std::string& event, const std::string& message) {
  return {DedupeKey{DedupeKind::event, event}, DedupeKey{DedupeKind::message, message}};
}

// Message n, with keys "Ev<n>" and "M<n>", accepted as new; its work id.
std::int64_t AcceptNumbered(RouterStore& store, const std::string& n) {
  auto r = store.AcceptMessage(Thread(), "sess", Message("m" + n, n), Keys("Ev" + n, "M" + n), At(1));
  REQUIRE(r.has_value());
  REQUIRE(r->has_value());
  return **r;
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

TEST_CASE("store: AcceptMessage failing leaves neither keys nor entry", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  RawDb raw(f.path);
  // A real SQLite failure: the row that holds the keys is not inserted.
  raw.Exec("CREATE TRIGGER fail_inbox BEFORE INSERT ON work BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
  auto failed = s.AcceptMessage(Thread(), "sess", Message("hi"), Keys("Ev1", "M1"), At(1));
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == Errc::io_error);
  CHECK_THAT(failed.error().message, Catch::Contains("router store " + f.path + ": AcceptMessage: injected failure"));
  CHECK(s.ListInbox()->empty());
  CHECK(raw.Int("SELECT (SELECT count(*) FROM dedupe_event) + (SELECT count(*) FROM dedupe_message)") == 0);
  CHECK_FALSE(*s.SeenOrRemember(DedupeKind::message, "M2"));
  CHECK_FALSE(*s.Forget(DedupeKind::event, "Ev1"));

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
  auto accept = [&](const std::string& n) { return AcceptNumbered(*store, n); };
  // A message's keys join the bounded tables when its row goes: here, its withdrawal.
  auto withdraw = [&](std::int64_t id) { REQUIRE(*store->RemoveInbox(id)); };
  withdraw(accept("1"));
  {
    // The transaction rolled back: nothing it wrote counts against the bound.
    RawDb raw(path);
    raw.Exec("CREATE TRIGGER fail_inbox BEFORE INSERT ON work BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
    REQUIRE_FALSE(store->AcceptMessage(Thread(), "sess", Message("x", "9"), Keys("Ev9", "M9"), At(1)));
    raw.Exec("DROP TRIGGER fail_inbox");
  }
  withdraw(accept("2"));
  // At the bound (2 per kind) and not past it: nothing evicted.
  CHECK(*store->SeenOrRemember(DedupeKind::message, "M1"));
  CHECK(*store->SeenOrRemember(DedupeKind::message, "M2"));
  withdraw(accept("3"));  // past it: the oldest of each kind goes
  CHECK_FALSE(*store->Forget(DedupeKind::message, "M1"));
  CHECK_FALSE(*store->Forget(DedupeKind::event, "Ev1"));
  CHECK(*store->Forget(DedupeKind::event, "Ev2"));  // one below the bound now

  // Inside a batch, a call that fails after it wrote (a turn's end: its keys into the tables, its row
  // deleted, then the reply's insert fails) spoils the batch: later calls fail with the reason, the
  // commit rolls everything back (the key remembered before it too), and the count is taken again and
  // stays the file's.
  const std::int64_t running = accept("8");
  REQUIRE(store->MoveToTurns(running, "req-8", At(2)));
  {
    RawDb raw(path);
    raw.Exec("CREATE TRIGGER fail_outbox BEFORE INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
  }
  REQUIRE(store->BeginBatch("test batch"));
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::message, "M7"));
  auto failed = store->CompleteTurn(Reply("req-8"));
  REQUIRE_FALSE(failed);
  CHECK_THAT(failed.error().message, Catch::Contains("injected failure"));
  auto after = store->SeenOrRemember(DedupeKind::message, "M9");
  REQUIRE_FALSE(after);
  CHECK_THAT(after.error().message, Catch::Contains("CompleteTurn failed after it had written part of its change"));
  auto commit = store->CommitBatch();
  REQUIRE_FALSE(commit);
  CHECK(commit.error().code == Errc::io_error);
  CHECK_THAT(commit.error().message, Catch::Contains("rolled back, not committed: CompleteTurn failed after"));
  CHECK_FALSE(store->InBatch());
  {
    RawDb raw(path);
    raw.Exec("DROP TRIGGER fail_outbox");
    CHECK(raw.Int("SELECT count(*) FROM (SELECT key FROM dedupe_event UNION ALL SELECT key FROM dedupe_message) "
                  "WHERE key IN ('M7', 'M8', 'Ev8', 'M9')") == 0);
    CHECK(raw.Int("SELECT count(*) FROM work WHERE id = " + std::to_string(running) +
                  " AND event_key = 'Ev8' AND message_key = 'M8'") == 1);
  }
  // The turn's keys are its row's again, and still seen; its end puts them in the tables at last.
  CHECK(*store->SeenOrRemember(DedupeKind::event, "Ev8"));
  REQUIRE(store->CompleteTurn(Reply("req-8")));
  RawDb raw(path);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_message WHERE key = 'M8'") == 1);
}

TEST_CASE("store: an accepted message's keys stay with its row, seen, and join the tables when it goes",
          "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  StoreLimits limits;
  limits.dedupe_per_kind = 2;
  auto store = OpenStore(path, limits);
  auto accept = [&](const std::string& n) { return AcceptNumbered(*store, n); };
  auto redelivered = [&](const std::string& event, const std::string& message) {
    auto r = store->AcceptMessage(Thread(), "sess", Message("again"), Keys(event, message), At(2));
    REQUIRE(r.has_value());
    return !r->has_value();
  };
  auto in_tables = [&](const std::string& key) {
    RawDb raw(path);
    return raw.Int("SELECT count(*) FROM (SELECT key FROM dedupe_event UNION ALL SELECT key FROM dedupe_message) "
                   "WHERE key = '" + key + "'");
  };
  // Waiting, and past the bound (three messages, two per kind): every key is seen, none is written to
  // the tables, none is evicted.
  const std::int64_t one = accept("1"), two = accept("2"), three = accept("3");
  CHECK(in_tables("Ev1") + in_tables("M2") + in_tables("M3") == 0);
  for (const std::string n : {"1", "2", "3"}) {
    CHECK(redelivered("Ev" + n, "M-new"));
    CHECK(redelivered("Ev-new", "M" + n));
    CHECK(*store->SeenOrRemember(DedupeKind::message, "M" + n));
  }
  // Across a reopening: loaded from the rows.
  store.reset();
  store = OpenStore(path, limits);
  CHECK(redelivered("Ev2", "M-new"));
  CHECK(redelivered("Ev-new", "M3"));

  // A turn's end (CompleteTurn, FinishTurn) and a withdrawal (RemoveInbox) put them in the tables.
  REQUIRE(store->MoveToTurns(one, "req-1", At(3)));
  CHECK_FALSE(*store->RemoveInbox(one));  // a turn's row is not withdrawn, nor are its keys released
  CHECK(in_tables("M1") == 0);
  REQUIRE(store->CompleteTurn(Reply("req-1")));
  CHECK(in_tables("Ev1") == 1);
  CHECK(in_tables("M1") == 1);
  REQUIRE(*store->RemoveInbox(two));
  CHECK(in_tables("M2") == 1);
  REQUIRE(store->MoveToTurns(three, "req-3", At(4)));
  REQUIRE(*store->FinishTurn("req-3"));
  CHECK(in_tables("Ev3") == 1);
  // Past the bound now: the oldest released (message 1's) went; the others are still seen.
  CHECK(in_tables("M1") == 0);
  CHECK_FALSE(redelivered("Ev1", "M1"));
  CHECK(redelivered("Ev2", "M-x"));
  CHECK(redelivered("Ev-x", "M3"));

  // A batch rolled back: an accepted message is gone with its keys; an ended turn holds its keys again.
  const std::int64_t four = accept("4");
  REQUIRE(store->MoveToTurns(four, "req-4", At(5)));
  REQUIRE(store->BeginBatch("test batch"));
  accept("5");
  REQUIRE(store->CompleteTurn(Reply("req-4")));
  CHECK(in_tables("M4") == 0);  // not committed: another connection does not see it
  store->AbortBatch();
  CHECK(redelivered("Ev4", "M-y"));
  CHECK(in_tables("M4") == 0);
  CHECK_FALSE(redelivered("Ev5", "M5"));  // not seen after the rollback: accepted now, for good

  // Forget a key a row holds: the row keeps the other, and the forgotten one is free.
  const std::int64_t six = accept("6");
  CHECK(*store->Forget(DedupeKind::message, "M6"));
  CHECK_FALSE(*store->Forget(DedupeKind::message, "M6"));
  CHECK(redelivered("Ev6", "M-z"));
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::message, "M6"));
  {
    RawDb raw(path);
    CHECK(raw.Int("SELECT count(*) FROM work WHERE id = " + std::to_string(six) +
                  " AND event_key = 'Ev6' AND message_key IS NULL") == 1);
  }

  // At most one key of each kind, none empty.
  const std::vector<DedupeKey> two_events{{DedupeKind::event, "a"}, {DedupeKind::event, "b"}};
  auto refused = store->AcceptMessage(Thread(), "sess", Message("x"), two_events, At(6));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::invalid_argument);
  CHECK_THAT(refused.error().message, Catch::Contains("one dedupe key of each kind"));
  auto empty = store->AcceptMessage(Thread(), "sess", Message("x"), Keys("", "M-e"), At(6));
  REQUIRE_FALSE(empty);
  CHECK_THAT(empty.error().message, Catch::Contains("event key is empty"));
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
