// The store's work in progress, first half (store.hpp): the inbox of accepted messages, accepting a
// delivery with its dedupe keys in one transaction, and moving an entry to the in-flight turns.
#include <algorithm>

#include "routing/store.hpp"
#include "routing/store_json.hpp"
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {
namespace {

// A JSON column that fails to decode is damage (only the store writes it): io_error, naming the row.
Error Damaged(const std::string& path, const std::string& row, const Error& why) {
  return Error(Errc::io_error, "router store " + path + ": " + row + ": " + why.message);
}

Result<InboundMessage> DecodeMessage(const std::string& path, const std::string& row, const std::string& text) {
  auto m = InboundMessageFromJsonText(text);
  if (!m) return Fail(Damaged(path, row, m.error()));
  return m;
}

// Columns: id, platform, workspace, chat, thread, session, message, accepted_ms, edited_text, deleted,
// receipt_id.
Result<InboxEntry> ReadInbox(const Stmt& q, const std::string& path) {
  InboxEntry e;
  e.id = q.Int(0);
  e.thread = q.Thread(1);
  e.session = q.Text(5);
  auto m = DecodeMessage(path, "inbox entry " + std::to_string(e.id), q.Text(6));
  if (!m) return Fail(m.error());
  e.message = std::move(*m);
  e.accepted = q.Time(7);
  if (!q.Null(8)) e.edited_text = q.Text(8);
  e.deleted = q.Int(9) != 0;
  e.receipt_id = q.Text(10);
  return e;
}

Result<std::vector<InboxEntry>> ReadAllInbox(Stmt& q, const std::string& path) {
  std::vector<InboxEntry> out;
  for (;;) {
    auto row = q.Step();
    if (!row) return Fail(row.error());
    if (!*row) return out;
    auto e = ReadInbox(q, path);
    if (!e) return Fail(e.error());
    out.push_back(std::move(*e));
  }
}

Status RequireChange(Db& db, const std::string& what) {
  if (db.Changes() == 0) return Fail(Errc::not_found, what);
  return {};
}

}  // namespace

Result<std::int64_t> RouterStore::InsertInbox(std::string_view op, const ThreadRef& thread, std::string_view session,
                                              const InboundMessage& message, StoreTime accepted) {
  auto q = db_->Query(op, R"sql(
    INSERT INTO inbox (platform, workspace, chat, thread, session, message, accepted_ms)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7))sql");
  if (!q) return Fail(q.error());
  if (auto st = q->Bind(thread, session, InboundMessageToJsonText(message), accepted).Run(); !st)
    return Fail(st.error());
  return db_->LastInsertId();
}

Result<std::int64_t> RouterStore::AddInbox(const ThreadRef& thread, std::string_view session,
                                           const InboundMessage& message, StoreTime accepted) {
  return InsertInbox("AddInbox", thread, session, message, accepted);
}

Result<std::optional<std::int64_t>> RouterStore::AcceptMessage(const ThreadRef& thread, std::string_view session,
                                                               const InboundMessage& message,
                                                               std::span<const DedupeKey> keys, StoreTime accepted) {
  using Accepted = std::optional<std::int64_t>;
  auto tx = Transaction::Begin(*db_, "AcceptMessage");
  if (!tx) return Fail(tx.error());
  // Each key is remembered unless it is there already, which makes this a redelivery. The keys that
  // redelivery brought new are forgotten again: it leaves no trace (a later delivery of the same
  // message then still matches the old one), and the commit of nothing costs nothing (a rollback
  // would make the store count its bounded tables again).
  std::vector<std::int64_t> added;
  added.reserve(keys.size());
  bool kinds[2] = {false, false};
  bool redelivery = false;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const DedupeKey& k = keys[i];
    // A key listed twice is one key: its second insert would find this call's first.
    if (std::any_of(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(i),
                    [&k](const DedupeKey& e) { return e.kind == k.kind && e.key == k.key; }))
      continue;
    bool is_new = false;
    if (auto st = RememberKey("AcceptMessage", k.kind, k.key, &is_new); !st) return Fail(st.error());
    if (!is_new) {
      redelivery = true;
      break;
    }
    added.push_back(db_->LastInsertId());
    kinds[k.kind == DedupeKind::event ? 0 : 1] = true;
  }
  if (redelivery) {
    if (auto st = ForgetRows(added); !st) return Fail(st.error());
    if (auto st = tx->Commit(); !st) return Fail(st.error());
    return Accepted();
  }
  if (kinds[0]) {
    if (auto st = EvictDedupe(DedupeKind::event); !st) return Fail(st.error());
  }
  if (kinds[1]) {
    if (auto st = EvictDedupe(DedupeKind::message); !st) return Fail(st.error());
  }
  auto id = InsertInbox("AcceptMessage", thread, session, message, accepted);
  if (!id) return Fail(id.error());
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  return Accepted(*id);
}

Status RouterStore::UpdateInboxText(std::int64_t id, std::string_view text) {
  auto q = db_->Query("UpdateInboxText", "UPDATE inbox SET edited_text = ?2 WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Bind(id, text).Run(); !st) return st;
  return RequireChange(*db_, "no inbox entry " + std::to_string(id) + " to edit");
}

Status RouterStore::MarkInboxDeleted(std::int64_t id) {
  auto q = db_->Query("MarkInboxDeleted", "UPDATE inbox SET deleted = 1 WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Bind(id).Run(); !st) return st;
  return RequireChange(*db_, "no inbox entry " + std::to_string(id) + " to mark deleted");
}

Status RouterStore::SetInboxReceipt(std::int64_t id, std::string_view receipt_id) {
  auto q = db_->Query("SetInboxReceipt", "UPDATE inbox SET receipt_id = ?2 WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Bind(id, receipt_id).Run(); !st) return st;
  return RequireChange(*db_, "no inbox entry " + std::to_string(id) + " to set the receipt of");
}

Result<bool> RouterStore::RemoveInbox(std::int64_t id) {
  auto q = db_->Query("RemoveInbox", "DELETE FROM inbox WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Bind(id).Run(); !st) return Fail(st.error());
  return db_->Changes() > 0;
}

Result<std::vector<InboxEntry>> RouterStore::ListInbox() {
  auto q = db_->Query("ListInbox", R"sql(
    SELECT id, platform, workspace, chat, thread, session, message, accepted_ms, edited_text, deleted, receipt_id
    FROM inbox ORDER BY id)sql");
  if (!q) return Fail(q.error());
  return ReadAllInbox(*q, path_);
}

Result<std::vector<InboxEntry>> RouterStore::ListInbox(std::string_view session) {
  auto q = db_->Query("ListInbox", R"sql(
    SELECT id, platform, workspace, chat, thread, session, message, accepted_ms, edited_text, deleted, receipt_id
    FROM inbox WHERE session = ?1 ORDER BY id)sql");
  if (!q) return Fail(q.error());
  q->Bind(session);
  return ReadAllInbox(*q, path_);
}

Result<TurnRecord> RouterStore::BeginTurn(std::int64_t inbox_id, std::string_view request_id, StoreTime started,
                                          std::string_view placeholder_id) {
  if (request_id.empty()) return Fail(Errc::invalid_argument, "a turn needs a request id");
  auto tx = Transaction::Begin(*db_, "BeginTurn");
  if (!tx) return Fail(tx.error());
  auto find = db_->Query("BeginTurn", R"sql(
    SELECT id, platform, workspace, chat, thread, session, message, accepted_ms, edited_text, deleted, receipt_id
    FROM inbox WHERE id = ?1)sql");
  if (!find) return Fail(find.error());
  auto row = find->Bind(inbox_id).Step();
  if (!row) return Fail(row.error());
  if (!*row) return Fail(Errc::not_found, "no inbox entry " + std::to_string(inbox_id) + " to begin a turn with");
  auto entry = ReadInbox(*find, path_);
  if (!entry) return Fail(entry.error());
  if (entry->deleted)
    return Fail(Errc::invalid_argument, "inbox entry " + std::to_string(inbox_id) + " was deleted by its author");

  auto used = db_->Query("BeginTurn", "SELECT 1 FROM turns WHERE request_id = ?1");
  if (!used) return Fail(used.error());
  auto in_use = used->Bind(request_id).Step();
  if (!in_use) return Fail(in_use.error());
  if (*in_use) return Fail(Errc::invalid_argument, "request id " + std::string(request_id) + " is in use by a turn");

  TurnRecord turn;
  turn.inbox_id = inbox_id;
  turn.request_id = std::string(request_id);
  turn.session = entry->session;
  turn.thread = entry->thread;
  turn.message = std::move(entry->message);
  if (entry->edited_text) turn.message.text = *entry->edited_text;
  turn.author_id = turn.message.author_id;
  // The receipt the message waited under becomes the turn's placeholder, unless the caller names one.
  turn.placeholder_id = placeholder_id.empty() ? entry->receipt_id : std::string(placeholder_id);
  turn.started = FromUnixMs(ToUnixMs(started));  // as it will read back

  auto insert = db_->Query("BeginTurn", R"sql(
    INSERT INTO turns (request_id, inbox_id, session, platform, workspace, chat, thread, author_id, message,
                       placeholder_id, started_ms)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11))sql");
  if (!insert) return Fail(insert.error());
  if (auto st = insert
                    ->Bind(turn.request_id, inbox_id, turn.session, turn.thread, turn.author_id,
                           InboundMessageToJsonText(turn.message), turn.placeholder_id, turn.started)
                    .Run();
      !st)
    return Fail(st.error());
  auto remove = db_->Query("BeginTurn", "DELETE FROM inbox WHERE id = ?1");
  if (!remove) return Fail(remove.error());
  if (auto st = remove->Bind(inbox_id).Run(); !st) return Fail(st.error());
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  return turn;
}

Status RouterStore::SetTurnPlaceholder(std::string_view request_id, std::string_view placeholder_id) {
  auto q = db_->Query("SetTurnPlaceholder", "UPDATE turns SET placeholder_id = ?2 WHERE request_id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Bind(request_id, placeholder_id).Run(); !st) return st;
  return RequireChange(*db_, "no turn in flight with request id " + std::string(request_id));
}

Status RouterStore::UpdateTurnCursor(std::string_view request_id, const TurnCursor& c) {
  auto q = db_->Query("UpdateTurnCursor", R"sql(
    UPDATE turns SET last_event_id = ?2, journal_id = ?3, turn_id = ?4, revision = ?5
    WHERE request_id = ?1)sql");
  if (!q) return Fail(q.error());
  if (auto st = q->Bind(request_id, c.last_event_id, c.journal_id, c.turn_id, c.revision).Run(); !st) return st;
  return RequireChange(*db_, "no turn in flight with request id " + std::string(request_id));
}

Result<bool> RouterStore::FinishTurn(std::string_view request_id) {
  auto q = db_->Query("FinishTurn", "DELETE FROM turns WHERE request_id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Bind(request_id).Run(); !st) return Fail(st.error());
  return db_->Changes() > 0;
}

Result<std::vector<TurnRecord>> RouterStore::ListTurns() {
  auto q = db_->Query("ListTurns", R"sql(
    SELECT request_id, inbox_id, session, platform, workspace, chat, thread, author_id, message, placeholder_id,
           last_event_id, journal_id, turn_id, revision, started_ms
    FROM turns ORDER BY rowid)sql");
  if (!q) return Fail(q.error());
  std::vector<TurnRecord> out;
  for (;;) {
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) return out;
    TurnRecord t;
    t.request_id = q->Text(0);
    t.inbox_id = q->Int(1);
    t.session = q->Text(2);
    t.thread = q->Thread(3);
    t.author_id = q->Text(7);
    auto m = DecodeMessage(path_, "turn " + t.request_id, q->Text(8));
    if (!m) return Fail(m.error());
    t.message = std::move(*m);
    t.placeholder_id = q->Text(9);
    t.cursor = TurnCursor{q->Int(10), q->Text(11), q->Text(12), q->Int(13)};
    t.started = q->Time(14);
    out.push_back(std::move(t));
  }
}

}  // namespace sessionturn::routing
