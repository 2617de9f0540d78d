// The store's redelivery dedupe keys (store.hpp): one table per kind, rows appended in order and the
// oldest evicted past the bound, mirrored in memory (KeyRows, key_rows.hpp) so that the intake's
// look-up costs no SQL and its write is one append. An accepted message's keys are held in its work
// row until the row goes (v11), mirrored by hash too (RowKeys), and appended to the tables then.
#include <utility>

#include "routing/store.hpp"
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {
namespace {

// Table names are fixed text, never input.
struct KindSql {
  std::string_view load, key_at, insert, evict, forget;
  std::string_view unhold;  // a work row's held key forgotten
};

const KindSql& SqlOf(DedupeKind kind) {
  static const KindSql kEvent{"SELECT seq, key FROM dedupe_event ORDER BY seq",
                              "SELECT key FROM dedupe_event WHERE seq = ?1",
                              "INSERT INTO dedupe_event (seq, key) VALUES (?1, ?2)",
                              "DELETE FROM dedupe_event WHERE seq <= ?1",
                              "DELETE FROM dedupe_event WHERE seq = ?1",
                              "UPDATE work SET event_key = NULL WHERE id = ?1"};
  static const KindSql kMessage{"SELECT seq, key FROM dedupe_message ORDER BY seq",
                                "SELECT key FROM dedupe_message WHERE seq = ?1",
                                "INSERT INTO dedupe_message (seq, key) VALUES (?1, ?2)",
                                "DELETE FROM dedupe_message WHERE seq <= ?1",
                                "DELETE FROM dedupe_message WHERE seq = ?1",
                                "UPDATE work SET message_key = NULL WHERE id = ?1"};
  return kind == DedupeKind::event ? kEvent : kMessage;
}

int IndexOf(DedupeKind kind) { return kind == DedupeKind::event ? 0 : 1; }
constexpr DedupeKind kKinds[] = {DedupeKind::event, DedupeKind::message};

}  // namespace

std::string_view ToString(DedupeKind kind) noexcept {
  return kind == DedupeKind::event ? "event" : "message";
}

Result<RouterStore::DedupeMirror*> RouterStore::Dedupe() {
  if (dedupe_.at && *dedupe_.at == db_->rollbacks()) return &dedupe_;
  for (DedupeKind kind : {DedupeKind::event, DedupeKind::message}) {
    KeyRows fresh;
    auto q = db_->Query("load the dedupe keys", SqlOf(kind).load);
    if (!q) return Fail(q.error());
    for (;;) {
      auto row = q->Step();
      if (!row) return Fail(row.error());
      if (!*row) break;
      fresh.Add(KeyRows::Hash(q->Text(1)), q->Int(0));
    }
    dedupe_.Of(kind) = std::move(fresh);
  }
  dedupe_.at = db_->rollbacks();
  return &dedupe_;
}

Result<std::optional<std::int64_t>> RouterStore::FindKey(DedupeKind kind, std::string_view key, std::uint64_t hash) {
  auto mirror = Dedupe();
  if (!mirror) return Fail(mirror.error());
  auto [first, last] = (*mirror)->Of(kind).seq_by_hash.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    // The hash matched: the row says whether the key did (a redelivery, or a rare collision).
    auto q = db_->Query("look up a dedupe key", SqlOf(kind).key_at);
    if (!q) return Fail(q.error());
    auto row = q->Bind(it->second).Step();
    if (!row) return Fail(row.error());
    if (*row && q->Text(0) == key) return std::optional<std::int64_t>(it->second);
  }
  return std::optional<std::int64_t>();
}

Status RouterStore::RememberKey(std::string_view op, DedupeKind kind, std::string_view key, std::uint64_t hash) {
  auto mirror = Dedupe();
  if (!mirror) return Fail(mirror.error());
  KeyRows& keys = (*mirror)->Of(kind);
  const std::int64_t seq = keys.next_seq;
  auto insert = db_->Query(op, SqlOf(kind).insert);
  if (!insert) return Fail(insert.error());
  if (auto st = insert->Exec(seq, key); !st) return st;
  keys.Add(hash, seq);
  return {};
}

Status RouterStore::EvictDedupe(DedupeKind kind) {
  auto mirror = Dedupe();
  if (!mirror) return Fail(mirror.error());
  KeyRows& keys = (*mirror)->Of(kind);
  const std::int64_t excess = keys.live - static_cast<std::int64_t>(limits_.dedupe_per_kind);
  if (excess <= 0) return {};
  // The oldest rows past the bound: a range of the rowid, up to the last of them still remembered.
  std::int64_t evicted = 0;
  const std::int64_t through = keys.EvictOldest(excess, &evicted);
  auto evict = db_->Query("evict dedupe keys", SqlOf(kind).evict);
  if (!evict) return Fail(evict.error());
  if (auto st = evict->Exec(through); !st) return st;
  if (db_->Changes() != evicted) dedupe_.at.reset();  // the mirror was off: loaded again next time
  return {};
}

Status RouterStore::EvictDedupeDue(DedupeKind kind) {
  if (!InBatch()) return EvictDedupe(kind);
  dedupe_.EvictAtCommit(kind) = true;
  return {};
}

Status RouterStore::EvictDedupeAtCommit() {
  for (DedupeKind kind : {DedupeKind::event, DedupeKind::message}) {
    if (!std::exchange(dedupe_.EvictAtCommit(kind), false)) continue;
    if (auto st = EvictDedupe(kind); !st) return st;
  }
  return {};
}

Result<RouterStore::RowKeys*> RouterStore::HeldKeys() {
  if (held_keys_.at && *held_keys_.at == db_->rollbacks()) return &held_keys_;
  RowKeys fresh;
  auto q = db_->Query("load the dedupe keys work rows hold", R"sql(
    SELECT id, event_key, message_key FROM work WHERE event_key IS NOT NULL OR message_key IS NOT NULL)sql");
  if (!q) return Fail(q.error());
  for (;;) {
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) break;
    const std::int64_t id = q->Int(0);
    RowKeys::Row& keys = fresh.rows[id];
    for (DedupeKind kind : kKinds) {
      const int k = IndexOf(kind);
      if (q->Null(1 + k)) continue;
      keys.has[k] = true;
      keys.text += q->Text(1 + k);
      if (k == 0) keys.event_size = static_cast<std::uint32_t>(keys.text.size());
      keys.hash[k] = KeyRows::Hash(keys.Key(k));
      fresh.row_by_hash[k].emplace(keys.hash[k], id);
    }
  }
  fresh.at = db_->rollbacks();
  held_keys_ = std::move(fresh);
  return &held_keys_;
}

Result<std::optional<std::int64_t>> RouterStore::FindHeldKey(DedupeKind kind, std::string_view key,
                                                             std::uint64_t hash) {
  auto held = HeldKeys();
  if (!held) return Fail(held.error());
  const int k = IndexOf(kind);
  auto [first, last] = (*held)->row_by_hash[k].equal_range(hash);
  for (auto it = first; it != last; ++it) {
    auto row = (*held)->rows.find(it->second);
    if (row != (*held)->rows.end() && row->second.has[k] && row->second.Key(k) == key)
      return std::optional<std::int64_t>(it->second);
  }
  return std::optional<std::int64_t>();
}

Result<bool> RouterStore::KeySeen(DedupeKind kind, std::string_view key, std::uint64_t hash) {
  auto seen = FindKey(kind, key, hash);
  if (!seen) return Fail(seen.error());
  if (*seen) return true;
  auto held = FindHeldKey(kind, key, hash);
  if (!held) return Fail(held.error());
  return held->has_value();
}

Status RouterStore::ReleaseKeys(std::string_view op, std::int64_t id) {
  auto held = HeldKeys();
  if (!held) return Fail(held.error());
  auto it = (*held)->rows.find(id);
  if (it == (*held)->rows.end()) return {};
  const RowKeys::Row keys = std::move(it->second);
  (*held)->rows.erase(it);
  for (DedupeKind kind : kKinds) {
    const int k = IndexOf(kind);
    if (!keys.has[k]) continue;
    EraseEntry((*held)->row_by_hash[k], keys.hash[k], id);
    if (auto st = RememberKey(op, kind, keys.Key(k), keys.hash[k]); !st) return st;
    if (auto st = EvictDedupeDue(kind); !st) return st;
  }
  return {};
}

Result<bool> RouterStore::SeenOrRemember(DedupeKind kind, std::string_view key) {
  const std::uint64_t hash = KeyRows::Hash(key);
  auto seen = KeySeen(kind, key, hash);
  if (!seen) return Fail(seen.error());
  if (*seen) return true;  // nothing written
  auto tx = Transaction::Begin(*db_, "SeenOrRemember");
  if (!tx) return Fail(tx.error());
  if (auto st = RememberKey("SeenOrRemember", kind, key, hash); !st) return Fail(st.error());
  if (auto st = EvictDedupeDue(kind); !st) return Fail(st.error());
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  return false;
}

Result<bool> RouterStore::Forget(DedupeKind kind, std::string_view key) {
  const std::uint64_t hash = KeyRows::Hash(key);
  auto seq = FindKey(kind, key, hash);
  if (!seq) return Fail(seq.error());
  if (!*seq) return ForgetHeld(kind, key, hash);
  auto q = db_->Query("Forget", SqlOf(kind).forget);
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(**seq); !st) return Fail(st.error());
  if (db_->Changes() != 1) dedupe_.at.reset();
  dedupe_.Of(kind).Erase(hash, **seq);
  return true;
}

Result<bool> RouterStore::ForgetHeld(DedupeKind kind, std::string_view key, std::uint64_t hash) {
  auto id = FindHeldKey(kind, key, hash);
  if (!id) return Fail(id.error());
  if (!*id) return false;
  auto q = db_->Query("Forget", SqlOf(kind).unhold);
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(**id); !st) return Fail(st.error());
  if (db_->Changes() != 1) held_keys_.at.reset();  // the mirror was off: loaded again next time
  const int k = IndexOf(kind);
  EraseEntry(held_keys_.row_by_hash[k], hash, **id);
  if (auto it = held_keys_.rows.find(**id); it != held_keys_.rows.end()) {
    it->second.has[k] = false;
    if (!it->second.has[0] && !it->second.has[1]) held_keys_.rows.erase(it);
  }
  return true;
}

}  // namespace sessionturn::routing
