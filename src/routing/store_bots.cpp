// The store's bot-message index (store.hpp): every message the bot posted for a Session, so that a
// reply to it routes there. Bounded, the oldest indexed evicted first; mirrored in memory by key hash
// (KeyRows), so that a look-up reads one row by its seq and a new entry is one append.
#include <array>

#include "routing/join_key.hpp"
#include "routing/store.hpp"
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {
namespace {

constexpr std::array<std::pair<BotMessageKind, std::string_view>, 6> kBotKinds{{
    {BotMessageKind::reply, "reply"},
    {BotMessageKind::placeholder, "placeholder"},
    {BotMessageKind::question, "question"},
    {BotMessageKind::picker, "picker"},
    {BotMessageKind::receipt, "receipt"},
    {BotMessageKind::note, "note"},
}};

std::optional<BotMessageKind> BotKindFrom(std::string_view name) {
  for (const auto& [kind, n] : kBotKinds)
    if (n == name) return kind;
  return std::nullopt;
}

}  // namespace

std::string_view ToString(BotMessageKind kind) noexcept {
  for (const auto& [k, name] : kBotKinds)
    if (k == kind) return name;
  return "reply";
}

std::uint64_t RouterStore::BotHash(const ChatRef& chat, std::string_view message_id) {
  return KeyRows::Hash(JoinKey({chat.platform, chat.workspace, chat.chat, message_id}));
}

Result<KeyRows*> RouterStore::Bots() {
  if (bots_.at && *bots_.at == db_->rollbacks()) return &bots_.rows;
  KeyRows fresh;
  auto q = db_->Query("load the bot-message index",
                      "SELECT seq, platform, workspace, chat, message_id FROM bot_messages ORDER BY seq");
  if (!q) return Fail(q.error());
  for (;;) {
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) break;
    fresh.Add(BotHash(ChatRef{q->Text(1), q->Text(2), q->Text(3)}, q->Text(4)), q->Int(0));
  }
  bots_.rows = std::move(fresh);
  bots_.at = db_->rollbacks();
  return &bots_.rows;
}

Result<std::optional<std::pair<std::int64_t, BotMessage>>> RouterStore::FindBotRow(const ChatRef& chat,
                                                                                   std::string_view message_id,
                                                                                   std::uint64_t hash) {
  using Found = std::optional<std::pair<std::int64_t, BotMessage>>;
  auto rows = Bots();
  if (!rows) return Fail(rows.error());
  auto [first, last] = (*rows)->seq_by_hash.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    // The hash matched: the row says whether the key did (the usual case, or a rare collision).
    auto q = db_->Query("look up a bot message", R"sql(
      SELECT platform, workspace, chat, message_id, session, kind, inbox_id FROM bot_messages WHERE seq = ?1)sql");
    if (!q) return Fail(q.error());
    auto row = q->Bind(it->second).Step();
    if (!row) return Fail(row.error());
    if (!*row || q->Text(0) != chat.platform || q->Text(1) != chat.workspace || q->Text(2) != chat.chat ||
        q->Text(3) != message_id) {
      continue;
    }
    const std::string kind = q->Text(5);
    auto k = BotKindFrom(kind);
    if (!k) return Fail(Errc::io_error, "router store " + path_ + ": bot message of unknown kind " + kind);
    return Found(std::in_place, it->second, BotMessage{chat, std::string(message_id), q->Text(4), *k, q->Int(6)});
  }
  return Found();
}

Status RouterStore::IndexBotMessage(BotMessage m) {
  auto tx = Transaction::Begin(*db_, "IndexBotMessage");
  if (!tx) return Fail(tx.error());
  const std::uint64_t hash = BotHash(m.chat, m.message_id);
  auto found = FindBotRow(m.chat, m.message_id, hash);
  if (!found) return Fail(found.error());
  if (*found) {
    // Indexed again (a placeholder that became the reply): updated in place, keeping its position.
    auto q = db_->Query("IndexBotMessage", R"sql(
      UPDATE bot_messages SET session = ?2, kind = ?3, inbox_id = CASE WHEN ?4 = 0 THEN inbox_id ELSE ?4 END
      WHERE seq = ?1)sql");
    if (!q) return Fail(q.error());
    if (auto st = q->Exec((*found)->first, m.session, ToString(m.kind), m.inbox_id); !st) return Fail(st.error());
    return tx->Commit();
  }
  KeyRows& rows = bots_.rows;  // loaded by FindBotRow
  const std::int64_t seq = rows.next_seq;
  // Appended (Db::Append): written with the transaction's next statement, so the placeholders of a
  // burst's turns, indexed in one write-behind pass, go in runs. A look-up reads it (FindBotRow's
  // query writes what waits first); a rollback drops it, and the mirror is loaded again.
  static const AppendTable kInsert(
      "IndexBotMessage", "INSERT INTO bot_messages (seq, platform, workspace, chat, message_id, session, kind, inbox_id)",
      8);
  if (auto st = db_->Append(kInsert, SqlRow(seq, std::move(m.chat.platform), std::move(m.chat.workspace),
                                            std::move(m.chat.chat), std::move(m.message_id), std::move(m.session),
                                            std::string(ToString(m.kind)), m.inbox_id));
      !st)
    return Fail(st.error());
  rows.Add(hash, seq);
  if (rows.live > static_cast<std::int64_t>(limits_.bot_messages)) {
    // In a batch (the router's records written behind), once, just before its commit: a DELETE per
    // batch, not per message; the oldest rows stay found until then. The bound holds at every commit.
    if (batch_) {
      evict_bots_at_commit_ = true;
    } else if (auto st = EvictBotMessages(); !st) {
      return st;
    }
  }
  return tx->Commit();
}

Status RouterStore::EvictBotMessages() {
  auto rows = Bots();
  if (!rows) return Fail(rows.error());
  const std::int64_t excess = (*rows)->live - static_cast<std::int64_t>(limits_.bot_messages);
  if (excess <= 0) return {};
  // The oldest rows past the bound: a range of the rowid, up to the last of them.
  std::int64_t evicted = 0;
  const std::int64_t through = (*rows)->EvictOldest(excess, &evicted);
  auto evict = db_->Query("IndexBotMessage", "DELETE FROM bot_messages WHERE seq <= ?1");
  if (!evict) return Fail(evict.error());
  if (auto st = evict->Exec(through); !st) return st;
  if (db_->Changes() != evicted) bots_.at.reset();  // the mirror was off: loaded again next time
  return {};
}

Result<std::optional<BotMessage>> RouterStore::FindBotMessage(const ChatRef& chat, std::string_view message_id) {
  auto found = FindBotRow(chat, message_id, BotHash(chat, message_id));
  if (!found) return Fail(found.error());
  if (!*found) return std::optional<BotMessage>();
  return std::optional<BotMessage>(std::move((*found)->second));
}

}  // namespace sessionturn::routing
