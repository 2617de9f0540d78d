// The store's work in progress, first half (store.hpp): the inbox of accepted messages, accepting a
// delivery with its dedupe keys in one transaction, and the in-flight turns. Both are rows of one
// table, `work` (v7): a message waits while its request_id is NULL, and its turn's start sets it.
#include <algorithm>
#include <array>

#include "routing/store.hpp"
#include "routing/store_json.hpp"
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {
namespace {

// A JSON column that fails to decode is damage (only the store writes it): io_error, naming the row.
Error Damaged(const std::string& path, const std::string& row, const Error& why) {
  return Error(Errc::io_error, "router store " + path + ": " + row + ": " + why.message);
}

// The message as stored with its row (`thread`, `author_id`: the row's columns, which it leaves out).
Result<InboundMessage> DecodeMessage(const std::string& path, const std::string& row, const std::string& text,
                                     const ThreadRef& thread, std::string_view author_id) {
  const RowFields fields{thread.platform, thread.workspace, thread.chat, thread.thread, author_id};
  auto m = InboundMessageFromJsonText(text, &fields);
  if (!m) return Fail(Damaged(path, row, m.error()));
  return m;
}

// Columns: id, platform, workspace, chat, thread, session, message, accepted_ms, edited_text, deleted,
// receipt_id, author_id.
Result<InboxEntry> ReadInbox(const Stmt& q, const std::string& path) {
  InboxEntry e;
  e.id = q.Int(0);
  e.thread = q.Thread(1);
  e.session = q.Text(5);
  auto m = DecodeMessage(path, "inbox entry " + std::to_string(e.id), q.Text(6), e.thread, q.Text(11));
  if (!m) return Fail(m.error());
  e.message = std::move(*m);
  e.accepted = q.Time(7);
  if (!q.Null(8)) e.edited_text = q.Text(8);
  e.deleted = q.Int(9) != 0;
  e.receipt_id = q.Text(10);
  return e;
}

Result<std::vector<InboxEntry>> ReadAllInbox(Stmt& q, const std::string& path, std::vector<DamagedRow>* damaged) {
  std::vector<InboxEntry> out;
  for (;;) {
    auto row = q.Step();
    if (!row) return Fail(row.error());
    if (!*row) return out;
    auto e = ReadInbox(q, path);
    if (e) {
      out.push_back(std::move(*e));
    } else if (damaged != nullptr) {
      damaged->push_back({"inbox entry " + std::to_string(q.Int(0)), q.Int(0), {}, q.Thread(1), q.Text(5),
                          std::move(e.error())});
    } else {
      return Fail(e.error());
    }
  }
}

std::string NoTurn(std::string_view request_id) {
  return "no turn in flight with request id " + std::string(request_id);
}

Status RequireChange(Db& db, const std::string& what) {
  if (db.Changes() == 0) return Fail(Errc::not_found, what);
  return {};
}

}  // namespace

Result<std::int64_t> RouterStore::NextWorkId() {
  // Read at the first id and again after any rollback, which may have taken a reservation back (the
  // ids given under it are skipped) or not (the file's mark is above this store's next id).
  if (!work_ids_.at || *work_ids_.at != db_->rollbacks()) {
    auto q = db_->Query("NextWorkId", "SELECT next FROM id_blocks WHERE name = 'work'");
    if (!q) return Fail(q.error());
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) return Fail(Errc::io_error, "router store " + path_ + ": id_blocks has no row for work ids");
    work_ids_.next = std::max(work_ids_.next, q->Int(0));
    work_ids_.reserved = work_ids_.next;
    work_ids_.at = db_->rollbacks();
  }
  if (work_ids_.next >= work_ids_.reserved) {
    const std::int64_t until = work_ids_.next + kWorkIdBlock;
    auto q = db_->Query("NextWorkId", "UPDATE id_blocks SET next = ?1 WHERE name = 'work' AND next <= ?1");
    if (!q) return Fail(q.error());
    if (auto st = q->Exec(until); !st) return Fail(st.error());
    if (db_->Changes() != 1)
      return Fail(Errc::io_error, "router store " + path_ + ": cannot reserve work ids up to " + std::to_string(until) +
                                      ": id_blocks holds a higher mark or none (written by another store?)");
    work_ids_.reserved = until;
  }
  return work_ids_.next++;
}

Result<std::int64_t> RouterStore::InsertInbox(const ThreadRef& thread, std::string_view session,
                                              const InboundMessage& message, StoreTime accepted,
                                              const TurnStart* start) {
  static const AppendTable kWork(
      "add a message to the inbox",
      "INSERT INTO work (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms)", 9);
  // A turn that starts with its acceptance: the row BeginTurn's UPDATE would leave (its placeholder
  // and receipt unset: the index names them, ListTurns).
  static const AppendTable kStarted(
      "add a message as a turn in flight",
      "INSERT INTO work (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, "
      "request_id, started_ms, last_event_id, journal_id)",
      13);
  auto id = NextWorkId();
  if (!id) return Fail(id.error());
  const RowFields fields{thread.platform, thread.workspace, thread.chat, thread.thread, message.author_id};
  std::vector<SqlValue> row;
  row.reserve(start ? 13 : 9);
  row.emplace_back(*id);
  row.emplace_back(thread.platform);
  row.emplace_back(thread.workspace);
  row.emplace_back(thread.chat);
  row.emplace_back(thread.thread);
  row.emplace_back(std::string(session));
  row.emplace_back(message.author_id);
  row.emplace_back(InboundMessageToJsonText(message, &fields));
  row.emplace_back(ToUnixMs(accepted));
  if (start != nullptr) {
    row.emplace_back(std::string(start->request_id));
    row.emplace_back(ToUnixMs(accepted));
    row.emplace_back(start->since.last_event_id);
    row.emplace_back(start->since.journal_id);
  }
  if (auto st = db_->Append(start ? kStarted : kWork, std::move(row)); !st) return Fail(st.error());
  return *id;
}

Result<std::int64_t> RouterStore::AddInbox(const ThreadRef& thread, std::string_view session,
                                           const InboundMessage& message, StoreTime accepted) {
  return InsertInbox(thread, session, message, accepted);
}

Result<std::optional<std::int64_t>> RouterStore::AcceptMessage(const ThreadRef& thread, std::string_view session,
                                                               const InboundMessage& message,
                                                               std::span<const DedupeKey> keys, StoreTime accepted,
                                                               const TurnStart* start) {
  using Accepted = std::optional<std::int64_t>;
  // A key seen already makes this a redelivery, and nothing is written: the look-ups are in memory
  // (store_dedupe.cpp), so a redelivery costs no transaction.
  std::array<std::uint64_t, 2> hashes{};
  if (keys.size() > hashes.size())
    return Fail(Errc::invalid_argument, "AcceptMessage takes at most " + std::to_string(hashes.size()) +
                                            " dedupe keys, got " + std::to_string(keys.size()));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    hashes[i] = KeyRows::Hash(keys[i].key);
    auto seen = FindKey(keys[i].kind, keys[i].key, hashes[i]);
    if (!seen) return Fail(seen.error());
    if (*seen) return Accepted();
  }
  TurnRows* turns = nullptr;
  if (start != nullptr) {
    if (start->request_id.empty()) return Fail(Errc::invalid_argument, "a turn needs a request id");
    auto loaded = Turns();
    if (!loaded) return Fail(loaded.error());
    turns = *loaded;
    // Nothing written yet, so the transaction (or the batch it would join) is as it was.
    if (turns->by_request.contains(start->request_id))
      return Fail(Errc::invalid_argument, "request id " + std::string(start->request_id) + " is in use by a turn");
  }
  auto tx = Transaction::Begin(*db_, "AcceptMessage");
  if (!tx) return Fail(tx.error());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const DedupeKey& k = keys[i];
    // A key listed twice is one key.
    if (i == 1 && k.kind == keys[0].kind && k.key == keys[0].key) continue;
    if (auto st = RememberKey(k.kind, k.key, hashes[i]); !st) return Fail(st.error());
  }
  for (DedupeKind kind : {DedupeKind::event, DedupeKind::message}) {
    if (std::none_of(keys.begin(), keys.end(), [kind](const DedupeKey& k) { return k.kind == kind; })) continue;
    if (auto st = EvictDedupeDue(kind); !st) return Fail(st.error());
  }
  auto id = InsertInbox(thread, session, message, accepted, start);
  if (!id) return Fail(id.error());
  // Mirrored before the commit, as a turn's start is: a rollback reloads the mirror from the file.
  if (turns != nullptr) turns->by_request.emplace(std::string(start->request_id), *id);
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  return Accepted(*id);
}

Status RouterStore::UpdateInboxText(std::int64_t id, std::string_view text) {
  auto q = db_->Query("UpdateInboxText", "UPDATE work SET edited_text = ?2 WHERE id = ?1 AND request_id IS NULL");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(id, text); !st) return st;
  return RequireChange(*db_, "no inbox entry " + std::to_string(id) + " to edit");
}

Status RouterStore::UpdateUnsentText(std::string_view request_id, std::string_view text) {
  auto row = TurnRow(request_id);
  if (!row) return Fail(row.error());
  if (!*row) return Fail(Errc::not_found, NoTurn(request_id));
  auto q = db_->Query("UpdateUnsentText", "UPDATE work SET edited_text = ?2 WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(**row, text); !st) return st;
  return RequireChange(*db_, NoTurn(request_id));
}

Status RouterStore::MarkInboxDeleted(std::int64_t id) {
  auto q = db_->Query("MarkInboxDeleted", "UPDATE work SET deleted = 1 WHERE id = ?1 AND request_id IS NULL");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(id); !st) return st;
  return RequireChange(*db_, "no inbox entry " + std::to_string(id) + " to mark deleted");
}

Status RouterStore::SetInboxReceipt(std::int64_t id, std::string_view receipt_id) {
  auto q = db_->Query("SetInboxReceipt", "UPDATE work SET receipt_id = ?2 WHERE id = ?1 AND request_id IS NULL");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(id, receipt_id); !st) return st;
  return RequireChange(*db_, "no inbox entry " + std::to_string(id) + " to set the receipt of");
}

Result<bool> RouterStore::RemoveInbox(std::int64_t id) {
  auto q = db_->Query("RemoveInbox", "DELETE FROM work WHERE id = ?1 AND request_id IS NULL");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(id); !st) return Fail(st.error());
  return db_->Changes() > 0;
}

Result<std::unordered_map<std::int64_t, std::string>> RouterStore::PostedFor() {
  auto q = db_->Query("PostedFor", "SELECT inbox_id, message_id FROM bot_messages WHERE inbox_id <> 0 ORDER BY seq");
  if (!q) return Fail(q.error());
  std::unordered_map<std::int64_t, std::string> out;
  for (;;) {
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) return out;
    out[q->Int(0)] = q->Text(1);  // a later one (a placeholder posted again after a restart) wins
  }
}

Result<std::vector<InboxEntry>> RouterStore::ReceiptsFromIndex(Result<std::vector<InboxEntry>> entries) {
  if (!entries) return entries;
  if (std::none_of(entries->begin(), entries->end(), [](const InboxEntry& e) { return e.receipt_id.empty(); }))
    return entries;
  auto posted = PostedFor();
  if (!posted) return Fail(posted.error());
  for (InboxEntry& e : *entries) {
    auto it = posted->find(e.id);
    if (e.receipt_id.empty() && it != posted->end()) e.receipt_id = it->second;
  }
  return entries;
}

Result<std::vector<InboxEntry>> RouterStore::ListInbox(std::vector<DamagedRow>* damaged) {
  auto q = db_->Query("ListInbox", R"sql(
    SELECT id, platform, workspace, chat, thread, session, message, accepted_ms, edited_text, deleted, receipt_id,
           author_id
    FROM work WHERE request_id IS NULL ORDER BY id)sql");
  if (!q) return Fail(q.error());
  return ReceiptsFromIndex(ReadAllInbox(*q, path_, damaged));
}

Result<std::vector<InboxEntry>> RouterStore::ListInbox(std::string_view session) {
  auto q = db_->Query("ListInbox", R"sql(
    SELECT id, platform, workspace, chat, thread, session, message, accepted_ms, edited_text, deleted, receipt_id,
           author_id
    FROM work WHERE request_id IS NULL AND session = ?1 ORDER BY id)sql");
  if (!q) return Fail(q.error());
  q->Bind(session);
  return ReceiptsFromIndex(ReadAllInbox(*q, path_, nullptr));
}

Result<RouterStore::TurnRows*> RouterStore::Turns() {
  if (turn_rows_.at && *turn_rows_.at == db_->rollbacks()) return &turn_rows_;
  TurnRows fresh;
  auto q = db_->Query("load the turns in flight", "SELECT request_id, id FROM work WHERE request_id IS NOT NULL");
  if (!q) return Fail(q.error());
  for (;;) {
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) break;
    if (!fresh.by_request.emplace(q->Text(0), q->Int(1)).second)
      return Fail(Errc::io_error, "router store " + path_ + ": two turns in flight have request id " + q->Text(0));
  }
  fresh.at = db_->rollbacks();
  turn_rows_ = std::move(fresh);
  return &turn_rows_;
}

Result<std::optional<std::int64_t>> RouterStore::TurnRow(std::string_view request_id) {
  auto turns = Turns();
  if (!turns) return Fail(turns.error());
  auto it = (*turns)->by_request.find(request_id);
  if (it == (*turns)->by_request.end()) return std::optional<std::int64_t>();
  return std::optional<std::int64_t>(it->second);
}

Result<bool> RouterStore::StartTurn(std::string_view op, std::int64_t inbox_id, std::string_view request_id,
                                    StoreTime started, std::string_view placeholder_id, const TurnCursor& since) {
  auto turns = Turns();
  if (!turns) return Fail(turns.error());
  // A request id names one turn in flight (the mirror stands for v8's unique index on it).
  if ((*turns)->by_request.contains(request_id)) return false;
  auto q = db_->Query(op, R"sql(
    UPDATE work
    SET request_id = ?2, placeholder_id = CASE WHEN ?3 = '' THEN receipt_id ELSE ?3 END, started_ms = ?4,
        last_event_id = ?5, journal_id = ?6
    WHERE id = ?1 AND request_id IS NULL AND deleted = 0)sql");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(inbox_id, request_id, placeholder_id, started, since.last_event_id, since.journal_id); !st)
    return Fail(st.error());
  if (db_->Changes() == 0) return false;
  (*turns)->by_request.emplace(std::string(request_id), inbox_id);
  return true;
}

Result<bool> RouterStore::DeleteTurn(std::string_view op, std::string_view request_id) {
  auto turns = Turns();
  if (!turns) return Fail(turns.error());
  auto it = (*turns)->by_request.find(request_id);
  if (it == (*turns)->by_request.end()) return false;
  auto q = db_->Query(op, "DELETE FROM work WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(it->second); !st) return Fail(st.error());
  const bool deleted = db_->Changes() > 0;
  (*turns)->by_request.erase(it);
  if (!deleted) turn_rows_.at.reset();  // the mirror was off: loaded again next time
  return deleted;
}

Result<TurnRecord> RouterStore::BeginTurn(std::int64_t inbox_id, std::string_view request_id, StoreTime started,
                                          std::string_view placeholder_id, const TurnCursor& since) {
  if (request_id.empty()) return Fail(Errc::invalid_argument, "a turn needs a request id");
  auto tx = Transaction::Begin(*db_, "BeginTurn");
  if (!tx) return Fail(tx.error());
  auto find = db_->Query("BeginTurn", R"sql(
    SELECT id, platform, workspace, chat, thread, session, message, accepted_ms, edited_text, deleted, receipt_id,
           author_id
    FROM work WHERE id = ?1 AND request_id IS NULL)sql");
  if (!find) return Fail(find.error());
  auto row = find->Bind(inbox_id).Step();
  if (!row) return Fail(row.error());
  if (!*row) return Fail(Errc::not_found, "no inbox entry " + std::to_string(inbox_id) + " to begin a turn with");
  auto entry = ReadInbox(*find, path_);
  if (!entry) return Fail(entry.error());
  if (entry->deleted)
    return Fail(Errc::invalid_argument, "inbox entry " + std::to_string(inbox_id) + " was deleted by its author");

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
  turn.cursor.last_event_id = since.last_event_id;
  turn.cursor.journal_id = since.journal_id;

  auto begun = StartTurn("BeginTurn", inbox_id, request_id, started, placeholder_id, since);
  if (!begun) return Fail(begun.error());
  // Nothing written, so the transaction (or the batch it joined) is as it was.
  if (!*begun) return Fail(Errc::invalid_argument, "request id " + std::string(request_id) + " is in use by a turn");
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  return turn;
}

Status RouterStore::MoveToTurns(std::int64_t inbox_id, std::string_view request_id, StoreTime started,
                                std::string_view placeholder_id, const TurnCursor& since) {
  if (request_id.empty()) return Fail(Errc::invalid_argument, "a turn needs a request id");
  auto tx = Transaction::Begin(*db_, "MoveToTurns");
  if (!tx) return Fail(tx.error());
  // The row stays where it is, its message unread: the turn's columns are set in place.
  auto begun = StartTurn("MoveToTurns", inbox_id, request_id, started, placeholder_id, since);
  if (!begun) return Fail(begun.error());
  if (!*begun) {
    // Deleted, not there (or started already), or the request id in use: BeginTurn says which.
    auto turn = BeginTurn(inbox_id, request_id, started, placeholder_id, since);
    if (!turn) return Fail(turn.error());
  }
  return tx->Commit();
}

Status RouterStore::SetTurnPlaceholder(std::string_view request_id, std::string_view placeholder_id) {
  auto row = TurnRow(request_id);
  if (!row) return Fail(row.error());
  if (!*row) return Fail(Errc::not_found, NoTurn(request_id));
  auto q = db_->Query("SetTurnPlaceholder", "UPDATE work SET placeholder_id = ?2 WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(**row, placeholder_id); !st) return st;
  if (db_->Changes() == 0) return Fail(Errc::not_found, NoTurn(request_id));
  return {};
}

Status RouterStore::UpdateTurnCursor(std::string_view request_id, const TurnCursor& c) {
  auto row = TurnRow(request_id);
  if (!row) return Fail(row.error());
  if (!*row) return Fail(Errc::not_found, NoTurn(request_id));
  auto q = db_->Query("UpdateTurnCursor", R"sql(
    UPDATE work SET last_event_id = ?2, journal_id = ?3, turn_id = ?4, revision = ?5 WHERE id = ?1)sql");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(**row, c.last_event_id, c.journal_id, c.turn_id, c.revision); !st) return st;
  if (db_->Changes() == 0) return Fail(Errc::not_found, NoTurn(request_id));
  return {};
}

Result<bool> RouterStore::FinishTurn(std::string_view request_id) {
  return DeleteTurn("FinishTurn", request_id);
}

Result<std::vector<TurnRecord>> RouterStore::ListTurns(std::vector<DamagedRow>* damaged) {
  auto q = db_->Query("ListTurns", R"sql(
    SELECT request_id, id, session, platform, workspace, chat, thread, author_id, message, placeholder_id,
           last_event_id, journal_id, turn_id, revision, started_ms, edited_text
    FROM work WHERE request_id IS NOT NULL ORDER BY started_ms, id)sql");
  if (!q) return Fail(q.error());
  std::vector<TurnRecord> out;
  for (;;) {
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) break;
    TurnRecord t;
    t.request_id = q->Text(0);
    t.inbox_id = q->Int(1);
    t.session = q->Text(2);
    t.thread = q->Thread(3);
    t.author_id = q->Text(7);
    auto m = DecodeMessage(path_, "turn " + t.request_id, q->Text(8), t.thread, t.author_id);
    if (m) {
      t.message = std::move(*m);
      if (!q->Null(15)) t.message.text = q->Text(15);  // edited while it waited
    } else if (damaged != nullptr) {
      damaged->push_back({"turn " + t.request_id, t.inbox_id, t.request_id, t.thread, t.session, std::move(m.error())});
      t.message_lost = true;
      t.message.platform = t.thread.platform;
      t.message.workspace = t.thread.workspace;
      t.message.chat = t.thread.chat;
      t.message.thread = t.thread.thread;
      t.message.author_id = t.author_id;
    } else {
      return Fail(m.error());
    }
    t.placeholder_id = q->Text(9);
    t.cursor = TurnCursor{q->Int(10), q->Text(11), q->Text(12), q->Int(13)};
    t.started = q->Time(14);
    out.push_back(std::move(t));
  }
  if (std::none_of(out.begin(), out.end(), [](const TurnRecord& t) { return t.placeholder_id.empty(); })) return out;
  auto posted = PostedFor();
  if (!posted) return Fail(posted.error());
  for (TurnRecord& t : out) {
    auto it = posted->find(t.inbox_id);
    if (t.placeholder_id.empty() && it != posted->end()) t.placeholder_id = it->second;
  }
  return out;
}

}  // namespace sessionturn::routing
