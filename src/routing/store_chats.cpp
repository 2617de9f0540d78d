// The store's routing tables (store.hpp): thread bindings, a chat's Sessions and its current one, the
// bot-message index, bounded with the oldest rows evicted (the dedupe keys: store_dedupe.cpp).
#include <algorithm>
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

Error NotFound(std::string what) {
  return Error(Errc::not_found, std::move(what));
}

Result<std::int64_t> CountRows(Db& db, std::string_view sql) {
  auto q = db.Query("count the bounded tables", sql);
  if (!q) return Fail(q.error());
  auto row = q->Step();
  if (!row) return Fail(row.error());
  return *row ? q->Int(0) : 0;
}

std::string KeyOf(const ThreadRef& t) {
  return JoinKey({t.platform, t.workspace, t.chat, t.thread});
}

std::string KeyOf(const ChatRef& c) {
  return JoinKey({c.platform, c.workspace, c.chat});
}

template <typename Map, typename Value>
void Remember(Map& map, std::string key, Value value, std::size_t bound) {
  if (map.size() >= bound && !map.count(key)) map.clear();  // a working set refills it
  map.insert_or_assign(std::move(key), std::move(value));
}

std::string Describe(const ThreadRef& t) {
  return t.platform + " " + (t.workspace.empty() ? "" : t.workspace + "/") + t.chat +
         (t.thread.empty() ? "" : " thread " + t.thread);
}

std::string Describe(const ChatRef& c) {
  return c.platform + " chat " + (c.workspace.empty() ? "" : c.workspace + "/") + c.chat;
}

}  // namespace

std::string_view ToString(BotMessageKind kind) noexcept {
  for (const auto& [k, name] : kBotKinds)
    if (k == kind) return name;
  return "reply";
}

std::string_view ToString(DedupeKind kind) noexcept {
  return kind == DedupeKind::event ? "event" : "message";
}

RouterStore::RouteCache& RouterStore::Routes() {
  if (routes_.at != db_->rollbacks()) {
    routes_.bindings.clear();
    routes_.current.clear();
    routes_.at = db_->rollbacks();
  }
  return routes_;
}

Status RouterStore::BindThread(const Binding& b) {
  auto q = db_->Query("BindThread", R"sql(
    INSERT INTO bindings (platform, workspace, chat, thread, session, created_ms, context_sent)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
    ON CONFLICT (platform, workspace, chat, thread)
    DO UPDATE SET session = excluded.session, created_ms = excluded.created_ms,
                  context_sent = excluded.context_sent)sql");
  if (!q) return Fail(q.error());
  RouteCache& cache = Routes();
  if (auto st = q->Exec(b.thread, b.session, b.created, b.context_sent); !st) return st;
  Binding stored = b;
  stored.created = FromUnixMs(ToUnixMs(b.created));  // as it reads back
  Remember(cache.bindings, KeyOf(b.thread), std::move(stored), kRouteCacheEntries);
  return {};
}

Result<std::optional<Binding>> RouterStore::FindBinding(const ThreadRef& thread) {
  RouteCache& cache = Routes();
  std::string key = KeyOf(thread);
  if (auto hit = cache.bindings.find(key); hit != cache.bindings.end()) return std::optional<Binding>(hit->second);
  auto q = db_->Query("FindBinding", R"sql(
    SELECT session, created_ms, context_sent FROM bindings
    WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND thread = ?4)sql");
  if (!q) return Fail(q.error());
  auto row = q->Bind(thread).Step();
  if (!row) return Fail(row.error());
  if (!*row) return std::optional<Binding>();
  Binding found{thread, q->Text(0), q->Time(1), q->Int(2) != 0};
  Remember(cache.bindings, std::move(key), found, kRouteCacheEntries);
  return std::optional<Binding>(std::move(found));
}

Status RouterStore::SetContextSent(const ThreadRef& thread) {
  auto q = db_->Query("SetContextSent", R"sql(
    UPDATE bindings SET context_sent = 1
    WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND thread = ?4)sql");
  if (!q) return Fail(q.error());
  RouteCache& cache = Routes();
  if (auto st = q->Exec(thread); !st) return st;
  if (db_->Changes() == 0) return Fail(NotFound(Describe(thread) + " is not bound to a Session"));
  if (auto hit = cache.bindings.find(KeyOf(thread)); hit != cache.bindings.end()) hit->second.context_sent = true;
  return {};
}

Result<std::size_t> RouterStore::UnbindSession(std::string_view session) {
  auto tx = Transaction::Begin(*db_, "UnbindSession");
  if (!tx) return Fail(tx.error());
  // current_sessions rows go with their chat_sessions rows (ON DELETE CASCADE), counted apart.
  auto current = db_->Query("UnbindSession", "DELETE FROM current_sessions WHERE session = ?1");
  if (!current) return Fail(current.error());
  if (auto st = current->Exec(session); !st) return Fail(st.error());
  std::size_t removed = static_cast<std::size_t>(db_->Changes());
  auto counts = Counts();
  if (!counts) return Fail(counts.error());
  for (std::string_view sql : {std::string_view("DELETE FROM bindings WHERE session = ?1"),
                               std::string_view("DELETE FROM chat_sessions WHERE session = ?1"),
                               // A scan of the bounded table (no index by session since v6): `delete` is rare.
                               std::string_view("DELETE FROM bot_messages WHERE session = ?1")}) {
    auto q = db_->Query("UnbindSession", sql);
    if (!q) return Fail(q.error());
    if (auto st = q->Exec(session); !st) return Fail(st.error());
    removed += static_cast<std::size_t>(db_->Changes());
  }
  (*counts)->bot_messages -= db_->Changes();  // the last DELETE's
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  RouteCache& cache = Routes();
  std::erase_if(cache.bindings, [&](const auto& e) { return e.second.session == session; });
  std::erase_if(cache.current, [&](const auto& e) { return e.second == session; });
  return removed;
}

Result<bool> RouterStore::AddChatSession(const ChatSession& s) {
  auto q = db_->Query("AddChatSession", R"sql(
    INSERT INTO chat_sessions (platform, workspace, chat, session, created_ms, label)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING)sql");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(s.chat, s.session, s.created, s.label); !st) return Fail(st.error());
  return db_->Changes() > 0;
}

Result<std::vector<ChatSession>> RouterStore::ListChatSessions(const ChatRef& chat) {
  auto q = db_->Query("ListChatSessions", R"sql(
    SELECT session, created_ms, label FROM chat_sessions
    WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 ORDER BY created_ms, session)sql");
  if (!q) return Fail(q.error());
  q->Bind(chat);
  std::vector<ChatSession> out;
  for (;;) {
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) return out;
    out.push_back(ChatSession{chat, q->Text(0), q->Time(1), q->Text(2)});
  }
}

Status RouterStore::SetCurrent(const ChatRef& chat, std::string_view session) {
  auto q = db_->Query("SetCurrent", R"sql(
    INSERT INTO current_sessions (platform, workspace, chat, session)
    SELECT platform, workspace, chat, session FROM chat_sessions
    WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND session = ?4
    ON CONFLICT (platform, workspace, chat) DO UPDATE SET session = excluded.session)sql");
  if (!q) return Fail(q.error());
  RouteCache& cache = Routes();
  if (auto st = q->Exec(chat, session); !st) return st;
  if (db_->Changes() == 0)
    return Fail(NotFound("Session " + std::string(session) + " is not one of " + Describe(chat) + "'s Sessions"));
  Remember(cache.current, KeyOf(chat), std::string(session), kRouteCacheEntries);
  return {};
}

Result<std::optional<std::string>> RouterStore::Current(const ChatRef& chat) {
  RouteCache& cache = Routes();
  std::string key = KeyOf(chat);
  if (auto hit = cache.current.find(key); hit != cache.current.end()) return std::optional<std::string>(hit->second);
  auto q = db_->Query("Current", R"sql(
    SELECT session FROM current_sessions WHERE platform = ?1 AND workspace = ?2 AND chat = ?3)sql");
  if (!q) return Fail(q.error());
  auto row = q->Bind(chat).Step();
  if (!row) return Fail(row.error());
  if (!*row) return std::optional<std::string>();
  std::string session = q->Text(0);
  Remember(cache.current, std::move(key), session, kRouteCacheEntries);
  return std::optional<std::string>(std::move(session));
}

Result<std::optional<std::string>> RouterStore::Cursor(std::string_view name) {
  auto q = db_->Query("Cursor", "SELECT value FROM cursors WHERE name = ?1");
  if (!q) return Fail(q.error());
  auto row = q->Bind(name).Step();
  if (!row) return Fail(row.error());
  if (!*row) return std::optional<std::string>();
  return std::optional<std::string>(q->Text(0));
}

Status RouterStore::SetCursor(std::string_view name, std::string_view value, StoreTime updated) {
  if (name.empty()) return Fail(Errc::invalid_argument, "SetCursor: the cursor name is empty");
  auto q = db_->Query("SetCursor", R"sql(
    INSERT INTO cursors (name, value, updated_ms) VALUES (?1, ?2, ?3)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms)sql");
  if (!q) return Fail(q.error());
  return q->Exec(name, value, updated);
}

Result<RouterStore::RowCounts*> RouterStore::Counts() {
  if (counted_at_ && *counted_at_ == db_->rollbacks()) return &counts_;
  RowCounts fresh;
  auto bots = CountRows(*db_, "SELECT count(*) FROM bot_messages");
  if (!bots) return Fail(bots.error());
  fresh.bot_messages = *bots;
  counts_ = fresh;
  counted_at_ = db_->rollbacks();
  return &counts_;
}

Status RouterStore::IndexBotMessage(const BotMessage& m) {
  auto tx = Transaction::Begin(*db_, "IndexBotMessage");
  if (!tx) return Fail(tx.error());
  auto counts = Counts();
  if (!counts) return Fail(counts.error());
  // Indexed again (a placeholder that became the reply): updated in place, keeping its position.
  // One statement in the usual case: a reply is most often the placeholder edited (updated first),
  // anything else a new message (inserted first).
  auto insert = [&]() -> Result<bool> {
    auto q = db_->Query("IndexBotMessage", R"sql(
      INSERT INTO bot_messages (platform, workspace, chat, message_id, session, kind, inbox_id)
      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (platform, workspace, chat, message_id) DO NOTHING)sql");
    if (!q) return Fail(q.error());
    if (auto st = q->Exec(m.chat, m.message_id, m.session, ToString(m.kind), m.inbox_id); !st)
      return Fail(st.error());
    if (db_->Changes() == 0) return false;
    ++(*counts)->bot_messages;
    return true;
  };
  auto update = [&]() -> Result<bool> {
    auto q = db_->Query("IndexBotMessage", R"sql(
      UPDATE bot_messages SET session = ?5, kind = ?6, inbox_id = CASE WHEN ?7 = 0 THEN inbox_id ELSE ?7 END
      WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND message_id = ?4)sql");
    if (!q) return Fail(q.error());
    if (auto st = q->Exec(m.chat, m.message_id, m.session, ToString(m.kind), m.inbox_id); !st)
      return Fail(st.error());
    return db_->Changes() > 0;
  };
  const bool reply = m.kind == BotMessageKind::reply;
  auto done = reply ? update() : insert();
  if (!done) return Fail(done.error());
  if (!*done) {
    auto second = reply ? insert() : update();
    if (!second) return Fail(second.error());
  }
  if ((*counts)->bot_messages > static_cast<std::int64_t>(limits_.bot_messages)) {
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
  auto counts = Counts();
  if (!counts) return Fail(counts.error());
  const auto excess = (*counts)->bot_messages - static_cast<std::int64_t>(limits_.bot_messages);
  if (excess <= 0) return {};
  // The oldest rows past the bound: a range of the rowid up to the excess-th lowest.
  auto evict = db_->Query("IndexBotMessage", R"sql(
    DELETE FROM bot_messages WHERE seq <= (SELECT seq FROM bot_messages ORDER BY seq LIMIT 1 OFFSET ?1 - 1))sql");
  if (!evict) return Fail(evict.error());
  if (auto st = evict->Exec(excess); !st) return st;
  (*counts)->bot_messages -= db_->Changes();
  if (db_->Changes() != excess) counted_at_.reset();  // the count was off: taken again next time
  return {};
}

Result<std::optional<BotMessage>> RouterStore::FindBotMessage(const ChatRef& chat, std::string_view message_id) {
  auto q = db_->Query("FindBotMessage", R"sql(
    SELECT session, kind, inbox_id FROM bot_messages
    WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND message_id = ?4)sql");
  if (!q) return Fail(q.error());
  auto row = q->Bind(chat, message_id).Step();
  if (!row) return Fail(row.error());
  if (!*row) return std::optional<BotMessage>();
  const std::string kind = q->Text(1);
  auto k = BotKindFrom(kind);
  if (!k) return Fail(Errc::io_error, "router store " + path_ + ": bot message of unknown kind " + kind);
  return BotMessage{chat, std::string(message_id), q->Text(0), *k, q->Int(2)};
}

}  // namespace sessionturn::routing
