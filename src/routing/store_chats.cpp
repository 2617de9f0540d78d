// The store's routing tables (store.hpp): thread bindings, a chat's Sessions and its current one (the
// bot-message index: store_bots.cpp; the dedupe keys: store_dedupe.cpp).
#include <algorithm>

#include "routing/join_key.hpp"
#include "routing/store.hpp"
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {
namespace {

Error NotFound(std::string what) {
  return Error(Errc::not_found, std::move(what));
}

void KeyInto(std::string& key, const ThreadRef& t) {
  JoinKeyInto(key, {t.platform, t.workspace, t.chat, t.thread});
}

std::string KeyOf(const ThreadRef& t) {
  std::string key;
  KeyInto(key, t);
  return key;
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

Binding* RouterStore::CachedBinding(const ThreadRef& thread) {
  RouteCache& cache = Routes();
  KeyInto(route_key_, thread);
  auto hit = cache.bindings.find(route_key_);
  return hit == cache.bindings.end() ? nullptr : &hit->second;
}

Result<std::optional<Binding>> RouterStore::FindBinding(const ThreadRef& thread) {
  if (const Binding* hit = CachedBinding(thread)) return std::optional<Binding>(*hit);
  auto q = db_->Query("FindBinding", R"sql(
    SELECT session, created_ms, context_sent FROM bindings
    WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND thread = ?4)sql");
  if (!q) return Fail(q.error());
  auto row = q->Bind(thread).Step();
  if (!row) return Fail(row.error());
  if (!*row) return std::optional<Binding>();
  Binding found{thread, q->Text(0), q->Time(1), q->Int(2) != 0};
  Remember(Routes().bindings, route_key_, found, kRouteCacheEntries);  // the key CachedBinding made
  return std::optional<Binding>(std::move(found));
}

Result<std::optional<std::string>> RouterStore::BoundSession(const ThreadRef& thread) {
  if (const Binding* hit = CachedBinding(thread)) return std::optional<std::string>(hit->session);
  auto found = FindBinding(thread);  // read, and cached
  if (!found) return Fail(found.error());
  if (!*found) return std::optional<std::string>();
  return std::optional<std::string>(std::move((*found)->session));
}

Status RouterStore::SetContextSent(const ThreadRef& thread) {
  auto q = db_->Query("SetContextSent", R"sql(
    UPDATE bindings SET context_sent = 1
    WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND thread = ?4)sql");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(thread); !st) return st;
  if (db_->Changes() == 0) return Fail(NotFound(Describe(thread) + " is not bound to a Session"));
  if (Binding* hit = CachedBinding(thread)) hit->context_sent = true;
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
  for (std::string_view sql : {std::string_view("DELETE FROM bindings WHERE session = ?1"),
                               std::string_view("DELETE FROM chat_sessions WHERE session = ?1"),
                               // A scan of the bounded table (no index by session since v6): `delete` is rare.
                               std::string_view("DELETE FROM bot_messages WHERE session = ?1")}) {
    auto q = db_->Query("UnbindSession", sql);
    if (!q) return Fail(q.error());
    if (auto st = q->Exec(session); !st) return Fail(st.error());
    removed += static_cast<std::size_t>(db_->Changes());
  }
  bots_.at.reset();  // its bot messages went: the mirror is loaded again at the next use
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

}  // namespace sessionturn::routing
