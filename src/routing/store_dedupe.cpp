// The store's redelivery dedupe keys (store.hpp): one table per kind, rows appended in order and the
// oldest evicted past the bound, mirrored in memory (KeyRows, key_rows.hpp) so that the intake's
// look-up costs no SQL and its write is one append.
#include <utility>

#include "routing/store.hpp"
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {
namespace {

// Table names are fixed text, never input.
struct KindSql {
  std::string_view load, key_at, evict, forget;
  AppendTable insert;  // a key is appended (Db::Append): a burst's keys go in runs
};

const KindSql& SqlOf(DedupeKind kind) {
  static const KindSql kEvent{"SELECT seq, key FROM dedupe_event ORDER BY seq",
                              "SELECT key FROM dedupe_event WHERE seq = ?1",
                              "DELETE FROM dedupe_event WHERE seq <= ?1",
                              "DELETE FROM dedupe_event WHERE seq = ?1",
                              AppendTable("remember a dedupe key", "INSERT INTO dedupe_event (seq, key)", 2)};
  static const KindSql kMessage{"SELECT seq, key FROM dedupe_message ORDER BY seq",
                                "SELECT key FROM dedupe_message WHERE seq = ?1",
                                "DELETE FROM dedupe_message WHERE seq <= ?1",
                                "DELETE FROM dedupe_message WHERE seq = ?1",
                                AppendTable("remember a dedupe key", "INSERT INTO dedupe_message (seq, key)", 2)};
  return kind == DedupeKind::event ? kEvent : kMessage;
}

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

Status RouterStore::RememberKey(DedupeKind kind, std::string_view key, std::uint64_t hash) {
  auto mirror = Dedupe();
  if (!mirror) return Fail(mirror.error());
  KeyRows& keys = (*mirror)->Of(kind);
  const std::int64_t seq = keys.next_seq;
  // In the caller's transaction, so written with its next statement (its commit, at the latest).
  if (auto st = db_->Append(SqlOf(kind).insert, SqlRow(seq, std::string(key))); !st) return st;
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

Result<bool> RouterStore::SeenOrRemember(DedupeKind kind, std::string_view key) {
  const std::uint64_t hash = KeyRows::Hash(key);
  auto seen = FindKey(kind, key, hash);
  if (!seen) return Fail(seen.error());
  if (*seen) return true;  // nothing written
  auto tx = Transaction::Begin(*db_, "SeenOrRemember");
  if (!tx) return Fail(tx.error());
  if (auto st = RememberKey(kind, key, hash); !st) return Fail(st.error());
  if (auto st = EvictDedupeDue(kind); !st) return Fail(st.error());
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  return false;
}

Result<bool> RouterStore::SeenOrRemember(std::span<const DedupeKey> keys) {
  auto tx = Transaction::Begin(*db_, "SeenOrRemember");
  if (!tx) return Fail(tx.error());
  bool any = false;
  for (const DedupeKey& k : keys) {
    const std::uint64_t hash = KeyRows::Hash(k.key);
    auto seen = FindKey(k.kind, k.key, hash);
    if (!seen) return Fail(seen.error());
    if (*seen) {
      any = true;
      continue;
    }
    if (auto st = RememberKey(k.kind, k.key, hash); !st) return Fail(st.error());
    if (auto st = EvictDedupeDue(k.kind); !st) return Fail(st.error());
  }
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  return any;
}

Result<bool> RouterStore::Seen(DedupeKind kind, std::string_view key) {
  auto seen = FindKey(kind, key, KeyRows::Hash(key));
  if (!seen) return Fail(seen.error());
  return seen->has_value();
}

Result<bool> RouterStore::Forget(DedupeKind kind, std::string_view key) {
  const std::uint64_t hash = KeyRows::Hash(key);
  auto seq = FindKey(kind, key, hash);
  if (!seq) return Fail(seq.error());
  if (!*seq) return false;
  auto q = db_->Query("Forget", SqlOf(kind).forget);
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(**seq); !st) return Fail(st.error());
  if (db_->Changes() != 1) dedupe_.at.reset();
  dedupe_.Of(kind).Erase(hash, **seq);
  return true;
}

}  // namespace sessionturn::routing
