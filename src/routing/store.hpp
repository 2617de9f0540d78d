// The router's durable store (docs/router-store.md): everything the Router must not lose when the bot
// restarts, even when it is killed mid-turn: which thread talks to which Session, the Sessions a chat
// manages, the index of the bot's own messages, redelivery dedupe keys, accepted messages not yet
// submitted, in-flight turns with their event cursors, replies not yet delivered and open questions.
// One SQLite file in WAL mode, a versioned schema, one process at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "routing/key_rows.hpp"
#include "routing/string_map.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn::routing {

using StoreClock = std::chrono::system_clock;
using StoreTime = StoreClock::time_point;  // stored as Unix milliseconds: finer parts are dropped

// Bounds of the tables that grow with traffic rather than with work still to do. The rest (inbox,
// turns, outbox, questions) hold work that must not be dropped, and the Router's queues bound them.
struct StoreLimits {
  // The bot's messages remembered for reply routing: a reply to one older than this many goes to the
  // chat's current Session instead (DESIGN.md §6). 100,000 rows are a few MB.
  std::size_t bot_messages = 100'000;
  // Dedupe keys per kind: Slack redelivers for about an hour, Telegram until acknowledged, so a few
  // thousand of the latest deliveries cover every retry (the same bound as DESIGN.md §3's dedupe memory).
  std::size_t dedupe_per_kind = 4096;
  // How long a statement waits for SQLite's own file lock. Only this process writes (the store lock),
  // so this covers an operator's `sqlite3` shell reading the file while the router runs.
  std::chrono::milliseconds busy_timeout{5000};
};

// A chat: the part of a ThreadRef that owns Sessions and a current Session.
struct ChatRef {
  std::string platform;
  std::string workspace;
  std::string chat;
  static ChatRef Of(const ThreadRef& thread) { return ChatRef{thread.platform, thread.workspace, thread.chat}; }
  bool operator==(const ChatRef&) const = default;
};

// A platform thread bound to its Session.
struct Binding {
  ThreadRef thread;
  std::string session;
  StoreTime created{};
  bool context_sent = false;  // the thread's earlier messages went with a first turn already
  bool operator==(const Binding&) const = default;
};

// A Session a chat manages (the `sessions`, `new`, `use` commands).
struct ChatSession {
  ChatRef chat;
  std::string session;
  StoreTime created{};
  std::string label;  // the name the user gave with `new NAME`; empty: none
  bool operator==(const ChatSession&) const = default;
};

// placeholder: a message's own (its receipt while it waits, its turn's progress, then the first part of
// its reply, edited in); reply: a part of a reply posted as a message of its own.
enum class BotMessageKind { reply, placeholder, question, picker, receipt, note };
std::string_view ToString(BotMessageKind kind) noexcept;  // "reply", "placeholder", ...

// One of the bot's own messages, so that a reply to it reaches the Session that posted it.
struct BotMessage {
  ChatRef chat;
  std::string message_id;
  std::string session;
  BotMessageKind kind = BotMessageKind::reply;
  // A placeholder's (or receipt's) work row: the inbox entry or turn it was posted for, so that a
  // restart finds it (InboxEntry::receipt_id, TurnRecord::placeholder_id) with no write to that row
  // when the post lands. 0: none.
  std::int64_t inbox_id = 0;
  bool operator==(const BotMessage&) const = default;
};

// Redelivery dedupe: `event` keys are the platform's delivery ids, `message` keys its message ids.
// The Router composes the key strings (platform and chat included as it sees fit).
enum class DedupeKind { event, message };
std::string_view ToString(DedupeKind kind) noexcept;  // "event", "message"
struct DedupeKey {
  DedupeKind kind = DedupeKind::event;
  std::string key;
};

// An accepted message not yet submitted to its Session.
struct InboxEntry {
  std::int64_t id = 0;  // assigned by the store, increasing, never reused
  ThreadRef thread;     // where the turn's reply goes
  std::string session;
  InboundMessage message;  // as the adapter delivered it
  StoreTime accepted{};
  std::optional<std::string> edited_text;  // the author edited it while it waited; nullopt: not edited
  bool deleted = false;                    // the author deleted it while it waited
  // The "Queued" message posted for it (SetInboxReceipt, else the latest bot message indexed with its
  // id, BotMessage::inbox_id); empty: none (yet).
  std::string receipt_id;
};

// Where a turn's event stream stands: what the Router needs to re-attach with `since` + `journalId`.
struct TurnCursor {
  std::int64_t last_event_id = 0;
  std::string journal_id;
  std::string turn_id;  // empty until the runtime accepted the message
  std::int64_t revision = 0;
  bool operator==(const TurnCursor&) const = default;
};

// A turn that starts with its message's acceptance (AcceptMessage): its request id, and the cursor it
// starts from (as BeginTurn's `since`).
struct TurnStart {
  std::string_view request_id;
  TurnCursor since;
};

// A turn submitted (or being submitted) to its Session.
struct TurnRecord {
  std::int64_t inbox_id = 0;  // the inbox entry it came from (its row, out of the inbox now)
  std::string request_id;     // the message request's id: the turn's key until it has a turn id
  std::string session;
  ThreadRef thread;
  std::string author_id;
  // The message, its text replaced by the edited text when it was edited in the inbox: a crash before
  // the runtime accepted it leaves the Router nothing else to submit again.
  InboundMessage message;
  // The "working..." message to edit (given at its start or SetTurnPlaceholder, else the latest bot
  // message indexed with its inbox id); empty until posted.
  std::string placeholder_id;
  TurnCursor cursor;
  StoreTime started{};
  // Its stored message could not be read back (ListTurns with `damaged`): `message` holds only what the
  // row's columns give (platform, workspace, chat, thread, author), so it cannot be submitted again.
  bool message_lost = false;
};

// A reply not yet fully delivered.
struct OutboxEntry {
  std::int64_t id = 0;  // assigned by the store, increasing, never reused
  ThreadRef thread;
  std::string session;
  std::string request_id;
  std::vector<std::string> parts;  // rendered, each within the platform's limit
  std::size_t next_part = 0;       // parts before it are delivered
  std::string placeholder_id;      // the message the first part edits; empty: post it
  int attempts = 0;                // failed attempts at parts[next_part]
  StoreTime next_attempt{};        // not before this
  std::string last_error;
};

// A question the agent asked, posted into a thread and waiting for an answer.
struct OpenQuestion {
  std::string id;  // short and opaque: it goes into button data
  std::string session;
  std::string request_id;
  std::string input_id;  // the runtime's input request
  ThreadRef thread;
  std::string message_id;  // the bot's message that asks it
  std::vector<InputQuestion> questions;
  std::string asker_id;  // the author of the turn: the one allowed to answer
  StoreTime deadline{};
  // Its questions are answered in order, one reply each: how many are, and their answers by question
  // id. A secret question's answer is never stored (after a restart a request with one answered
  // already is asked again from its first question).
  std::size_t answered = 0;
  std::map<std::string, std::vector<std::string>> answers;
};

// A row whose JSON column could not be read back. Only the store writes those columns, so this is damage
// from outside (a hand edit, a disk's). Its plain columns still say where it belongs, so the caller can
// tell that thread; the row itself stays in the file until the caller removes it.
struct DamagedRow {
  std::string what;  // "inbox entry 7", "turn r-1", "outbox entry 3", "question q2"
  std::int64_t id = 0;  // an inbox or outbox entry's id
  std::string key;      // a turn's request id, a question's id
  ThreadRef thread;
  std::string session;
  Error error;  // Errc::io_error naming the file, the row and what is wrong
};

class Db;
class Transaction;

// RouterStore: synchronous, and used from one thread at a time (the Router's strand): it has no lock
// of its own and its SQLite connection is opened without one. Each call is one statement or one
// short transaction on a local file (WAL: a commit is an append, no fsync), so calling it on the
// Context's loop is fine. Errors: Errc::io_error naming the file, the operation and SQLite's message;
// Errc::not_found for an update of a row that is not there.
class RouterStore {
 public:
  // Opens (creating, 0600, in a directory created 0700) the store at `path` and brings its schema up
  // to this build's version. Refused: a file of a newer schema (Errc::io_error naming both versions),
  // a file that is not a store or is corrupted (Errc::io_error naming the path), a store another
  // RouterStore holds, in this process or another (Errc::conflict: two routers would double-deliver).
  static Result<std::unique_ptr<RouterStore>> Open(std::string path, StoreLimits limits = {});
  ~RouterStore();
  RouterStore(const RouterStore&) = delete;
  RouterStore& operator=(const RouterStore&) = delete;

  const std::string& path() const noexcept { return path_; }
  const StoreLimits& limits() const noexcept { return limits_; }

  // Bindings. BindThread replaces the thread's binding when it has one.
  Status BindThread(const Binding& binding);
  Result<std::optional<Binding>> FindBinding(const ThreadRef& thread);
  // The bound Session's name alone: what routing a message needs, without a copy of the binding.
  Result<std::optional<std::string>> BoundSession(const ThreadRef& thread);
  Status SetContextSent(const ThreadRef& thread);  // Errc::not_found when the thread is not bound
  // Forgets a Session everywhere a chat could reach it: its thread bindings, the chats managing it
  // (and being their current Session), the bot messages it posted. The inbox, turns, outbox and
  // questions are work in progress: the Router settles those first. Returns the rows removed.
  Result<std::size_t> UnbindSession(std::string_view session);

  // Chat Sessions. Adding one the chat has already changes nothing and returns false.
  Result<bool> AddChatSession(const ChatSession& session);
  Result<std::vector<ChatSession>> ListChatSessions(const ChatRef& chat);  // oldest first
  // Errc::not_found unless `session` is one of the chat's (AddChatSession first).
  Status SetCurrent(const ChatRef& chat, std::string_view session);
  Result<std::optional<std::string>> Current(const ChatRef& chat);

  // The bot-message index, bounded by limits().bot_messages (the oldest indexed evicted first; in a
  // batch, once, at its commit). Indexing a message again updates its session and kind.
  Status IndexBotMessage(BotMessage message);  // by value: its strings move into the row
  Result<std::optional<BotMessage>> FindBotMessage(const ChatRef& chat, std::string_view message_id);

  // Dedupe keys, bounded per kind by limits().dedupe_per_kind (the oldest remembered evicted first).
  // True when the key was there already; otherwise it is remembered and the answer is false.
  Result<bool> SeenOrRemember(DedupeKind kind, std::string_view key);
  // The same for a message's keys at once: true when any was there; the others are remembered, all in
  // one transaction (a failure keeps none of them).
  Result<bool> SeenOrRemember(std::span<const DedupeKey> keys);
  // Whether the key is remembered; writes nothing (to remember it only once what it stands for is in).
  Result<bool> Seen(DedupeKind kind, std::string_view key);
  Result<bool> Forget(DedupeKind kind, std::string_view key);  // true when it was there

  // A batch: the store's calls until CommitBatch are one transaction, so a burst of messages costs
  // one commit, and one eviction of the dedupe keys past their bound, just before it (within the
  // batch the oldest keys still count as seen; the bound holds at every commit). A call that fails
  // before it writes (every expected refusal: not found, a duplicate, a deleted entry) leaves the
  // batch as it was. One that fails after it wrote (SQLite's own errors only) spoils it: later calls
  // in it fail, and CommitBatch rolls all of it back and says why.
  // AbortBatch (or a batch still open when the store closes) rolls all of it back.
  // Errc::invalid_argument when a batch is open already.
  Status BeginBatch(std::string_view op);
  // Checkpoint::later: this commit does not run SQLite's automatic WAL checkpoint (a copy into the
  // database file and two fsyncs, tens of milliseconds on a busy disk) even when the WAL has grown
  // past its threshold; the next commit does. For a commit that something waits for (a burst's
  // placeholders wait for its intake), when the next one is not waited for as closely.
  enum class Checkpoint { as_due, later };
  Status CommitBatch(Checkpoint checkpoint = Checkpoint::as_due);
  void AbortBatch();
  bool InBatch() const noexcept { return batch_ != nullptr; }

  // Named cursors an adapter keeps beside the router's state (Telegram's getUpdates offset), so a
  // restart neither loses nor repeats a delivery. nullopt: never set.
  Result<std::optional<std::string>> Cursor(std::string_view name);
  Status SetCursor(std::string_view name, std::string_view value, StoreTime updated);

  // The inbox.
  Result<std::int64_t> AddInbox(const ThreadRef& thread, std::string_view session, const InboundMessage& message,
                                StoreTime accepted);
  // One transaction: when any of `keys` (at most two: an event and a message key) was seen already,
  // nothing is written and the answer is nullopt (a redelivery); otherwise every key is remembered
  // and the message added to the inbox.
  // An adapter acknowledges a delivery only after this returned, so a crash anywhere loses nothing.
  // With `start`, the message's turn starts with it (BeginTurn in the same write: the Router's way for
  // a message its idle Session runs at once): the entry is a turn in flight from here on, started at
  // `accepted`, and not in the inbox. A request id in use is refused (Errc::invalid_argument) before
  // anything is written.
  Result<std::optional<std::int64_t>> AcceptMessage(const ThreadRef& thread, std::string_view session,
                                                    const InboundMessage& message, std::span<const DedupeKey> keys,
                                                    StoreTime accepted, const TurnStart* start = nullptr);
  Status UpdateInboxText(std::int64_t id, std::string_view text);  // the author edited it
  // The author edited the message of a turn in flight that was not sent yet (accepted with `start`,
  // waiting for its Session's next slot): applied wherever the turn is read, as an inbox entry's edit.
  Status UpdateUnsentText(std::string_view request_id, std::string_view text);
  Status MarkInboxDeleted(std::int64_t id);                        // the author deleted it
  Status SetInboxReceipt(std::int64_t id, std::string_view receipt_id);  // its receipt was posted
  Result<bool> RemoveInbox(std::int64_t id);                       // true when it was there
  // The lists below fail on the first damaged row, unless given `damaged`: then each damaged row is
  // reported there and left out (ListTurns: returned still, see there), and the rest are read.
  Result<std::vector<InboxEntry>> ListInbox(std::vector<DamagedRow>* damaged = nullptr);  // in id order
  Result<std::vector<InboxEntry>> ListInbox(std::string_view session);

  // In-flight turns. BeginTurn moves an inbox entry to the turns (Errc::not_found when there is no
  // such entry, Errc::invalid_argument when its author deleted it or the request id is in use) and
  // returns the turn as stored: the entry's row takes the turn's columns, one UPDATE (v7). Its
  // placeholder is `placeholder_id`, or else the entry's receipt. Its cursor starts at `since` (the
  // Session's journal position before the turn: its last event id and journal id; the turn id and
  // revision stay unset), where a re-attach after a restart looks for the turn by its request id.
  Result<TurnRecord> BeginTurn(std::int64_t inbox_id, std::string_view request_id, StoreTime started,
                               std::string_view placeholder_id = {}, const TurnCursor& since = {});
  // BeginTurn for a caller that holds the message already (the Router): the row's message is neither
  // read nor written (a refusal reads it, to say which). The same refusals.
  Status MoveToTurns(std::int64_t inbox_id, std::string_view request_id, StoreTime started,
                     std::string_view placeholder_id = {}, const TurnCursor& since = {});
  Status SetTurnPlaceholder(std::string_view request_id, std::string_view placeholder_id);
  // The turn's place once the runtime accepted it: one UPDATE by key, a WAL append. (The Router does
  // not call it: the position a turn starts from is enough to find it again.)
  Status UpdateTurnCursor(std::string_view request_id, const TurnCursor& cursor);
  Result<bool> FinishTurn(std::string_view request_id);  // true when it was there
  // In the order they began (by start time, then id). A turn whose message is damaged is reported in
  // `damaged` and returned with `message_lost` set and a message made of its row's columns (no id, no
  // text): it still runs in its Session, and its reply can still be delivered.
  Result<std::vector<TurnRecord>> ListTurns(std::vector<DamagedRow>* damaged = nullptr);

  // The outbox. CompleteTurn finishes the turn named by reply.request_id and queues its reply in one
  // transaction (Errc::not_found when that turn is not in flight: a reply is queued once), returning
  // the outbox id. AddOutbox queues a reply that has no turn (a note, a receipt).
  Result<std::int64_t> CompleteTurn(const OutboxEntry& reply);
  Result<std::int64_t> AddOutbox(const OutboxEntry& entry);
  Status UpdateOutbox(std::int64_t id, std::size_t next_part, int attempts, StoreTime next_attempt,
                      std::string_view last_error);
  Result<bool> RemoveOutbox(std::int64_t id);     // true when it was there
  Result<std::vector<OutboxEntry>> ListOutbox(std::vector<DamagedRow>* damaged = nullptr);  // in id order

  // Open questions. AddQuestion refuses an id in use (Errc::invalid_argument).
  Status AddQuestion(const OpenQuestion& question);
  Result<std::optional<OpenQuestion>> FindQuestion(std::string_view id);
  Result<std::optional<OpenQuestion>> FindQuestionByMessage(const ChatRef& chat, std::string_view message_id);
  Result<std::vector<OpenQuestion>> OpenQuestionsIn(const ThreadRef& thread);  // oldest first
  Result<bool> RemoveQuestion(std::string_view id);                            // true when it was there
  // Stores its `answered` and `answers` (the rest of the row never changes). Errc::not_found when it is
  // not stored (AddQuestion then writes them).
  Status SetQuestionProgress(const OpenQuestion& question);
  Result<std::vector<OpenQuestion>> ListQuestions(std::vector<DamagedRow>* damaged = nullptr);  // oldest first

 private:
  RouterStore(std::string path, StoreLimits limits, std::unique_ptr<Db> db, int lock_fd);
  // `op`: the public call, for errors.
  // The UPDATE that starts a turn on a waiting, undeleted row. false: refused, nothing written (no
  // such row, or the request id names a turn in flight already).
  Result<bool> StartTurn(std::string_view op, std::int64_t inbox_id, std::string_view request_id, StoreTime started,
                         std::string_view placeholder_id, const TurnCursor& since);
  // The turns in flight, request id -> work row id, mirrored in memory (the file is locked: this store
  // is its only writer), so that a turn's start, end and updates address its row by id and the work
  // table needs no index by request id (v9). Loaded at first use and again after any rollback.
  struct TurnRows {
    StringMap<std::int64_t> by_request;
    std::optional<std::uint64_t> at;  // db_->rollbacks() when loaded; none: not loaded
  };
  Result<TurnRows*> Turns();
  // The row of the turn in flight under `request_id`, if any.
  Result<std::optional<std::int64_t>> TurnRow(std::string_view request_id);
  // Deletes the turn's row; false when no turn in flight has that request id.
  Result<bool> DeleteTurn(std::string_view op, std::string_view request_id);
  // Bot messages indexed with a work row's id, the latest for each: receipts and placeholders whose
  // rows do not name them (ListInbox, ListTurns).
  Result<std::unordered_map<std::int64_t, std::string>> PostedFor();
  Result<std::vector<InboxEntry>> ReceiptsFromIndex(Result<std::vector<InboxEntry>> entries);
  // A waiting message's row (with `start`, a started turn's), appended (Db::Append): in a transaction
  // (a burst's batch), written with its next statement, a run of rows at a time; outside one, at once.
  Result<std::int64_t> InsertInbox(const ThreadRef& thread, std::string_view session, const InboundMessage& message,
                                   StoreTime accepted, const TurnStart* start = nullptr);
  // The next work row's id, never given before in the file's life. Ids are reserved in the file
  // (id_blocks) a block at a time, ahead of use, in the transaction that uses the first of them; the
  // mark is read again after a rollback (Db::rollbacks), which may have taken a reservation back.
  Result<std::int64_t> NextWorkId();
  Result<std::int64_t> InsertOutbox(std::string_view op, const OutboxEntry& entry);

  // The dedupe keys of one kind as the file holds them (dedupe_event, dedupe_message), so that a
  // delivery is looked up without SQLite and a key's row is one append to its table (KeyRows).
  // Loaded at the first use and again after any rollback.
  struct DedupeMirror {
    KeyRows kinds[2];  // by DedupeKind: event, message
    std::optional<std::uint64_t> at;  // db_->rollbacks() when loaded; none: not loaded
    bool evict_at_commit[2] = {false, false};  // by DedupeKind: keys remembered in the open batch
    KeyRows& Of(DedupeKind kind) { return kinds[kind == DedupeKind::event ? 0 : 1]; }
    bool& EvictAtCommit(DedupeKind kind) { return evict_at_commit[kind == DedupeKind::event ? 0 : 1]; }
  };
  Result<DedupeMirror*> Dedupe();
  // The key's row (its seq), when remembered.
  Result<std::optional<std::int64_t>> FindKey(DedupeKind kind, std::string_view key, std::uint64_t hash);
  // Appended (Db::Append): called in a transaction, whose next statement writes it.
  Status RememberKey(DedupeKind kind, std::string_view key, std::uint64_t hash);
  Status EvictDedupe(DedupeKind kind);
  // Eviction after a key was remembered: at once, or in a batch once, just before its commit (a
  // burst's keys cost one DELETE per kind, not one per message; the bound holds at every commit).
  Status EvictDedupeDue(DedupeKind kind);
  Status EvictDedupeAtCommit();  // what the open batch deferred
  void DropDeferredEvictions() noexcept;  // the batch rolled back: the mirrors reload, the counts are taken again

  // The bot-message index as the file holds it, by the hash of its (platform, workspace, chat,
  // message id) (KeyRows): a look-up reads one row by its seq, and a new entry is one append, with no
  // index (v10; until v9 a UNIQUE index on those four columns, an entry at a random place of it for
  // every message the bot posted). Loaded at the first use and again after any rollback or a
  // Session's delete (UnbindSession).
  struct BotRows {
    KeyRows rows;
    std::optional<std::uint64_t> at;  // db_->rollbacks() when loaded; none: not loaded
  };
  Result<KeyRows*> Bots();
  static std::uint64_t BotHash(const ChatRef& chat, std::string_view message_id);
  // The entry for (chat, message id), with its seq, when indexed. `hash`: BotHash(chat, message_id).
  Result<std::optional<std::pair<std::int64_t, BotMessage>>> FindBotRow(const ChatRef& chat,
                                                                         std::string_view message_id,
                                                                         std::uint64_t hash);
  // The oldest bot messages past limits().bot_messages deleted (IndexBotMessage; in a batch, at its commit).
  Status EvictBotMessages();

  // Thread bindings and current Sessions as last read or written here, by key (KeyOf): the router
  // looks one up for every message. Only this store writes them (the file is locked), so an entry is
  // the file's until a rollback, which drops them all (Db::rollbacks), as does reaching the bound.
  struct RouteCache {
    std::unordered_map<std::string, Binding> bindings;
    std::unordered_map<std::string, std::string> current;
    std::uint64_t at = 0;  // db_->rollbacks() when it was last known right
  };
  static constexpr std::size_t kRouteCacheEntries = 8192;
  RouteCache& Routes();
  // The thread's binding as known in memory (the file's: Routes), or none; valid until the cache changes.
  Binding* CachedBinding(const ThreadRef& thread);

  std::string path_;
  StoreLimits limits_;
  std::unique_ptr<Db> db_;
  std::unique_ptr<Transaction> batch_;  // the open batch, if any (ended before db_ closes)
  int lock_fd_ = -1;  // flock(LOCK_EX) on <path>.lock, held while open
  BotRows bots_;
  bool evict_bots_at_commit_ = false;        // the open batch took the bot-message index past its bound
  RouteCache routes_;
  std::string route_key_;  // CachedBinding's look-up key, its buffer reused
  DedupeMirror dedupe_;
  TurnRows turn_rows_;
  struct IdBlock {
    std::int64_t next = 0;      // the next id to give
    std::int64_t reserved = 0;  // ids below it are reserved in the file
    std::optional<std::uint64_t> at;  // db_->rollbacks() when `reserved` was last known right; none: not read
  };
  static constexpr std::int64_t kWorkIdBlock = 1024;
  IdBlock work_ids_;
};

}  // namespace sessionturn::routing
