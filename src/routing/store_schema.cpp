// The store's schema (store_schema.hpp) and its steps. docs/router-store.md describes every table.
#include "routing/store_schema.hpp"

#include <iterator>
#include <string>

namespace sessionturn::routing {
namespace {

// v1. Conventions: a ThreadRef is (platform, workspace, chat, thread), never NULL ('' when absent);
// times are Unix milliseconds; JSON columns hold JSON text (store_json.hpp). The bounded tables
// (bot_messages, dedupe) kept their row counts in row_counts through triggers, so eviction took the
// oldest rows by rowid without counting the table at every insert (v4 moved the counts to memory).
constexpr std::string_view kSchemaV1 = R"sql(
CREATE TABLE bindings (
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
  session TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  context_sent INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (platform, workspace, chat, thread)
);
CREATE INDEX bindings_by_session ON bindings (session);

CREATE TABLE chat_sessions (
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL,
  session TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  label TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (platform, workspace, chat, session)
);
CREATE INDEX chat_sessions_by_session ON chat_sessions (session);

-- A chat's current Session is one of its Sessions: removing that one removes this row too.
CREATE TABLE current_sessions (
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL,
  session TEXT NOT NULL,
  PRIMARY KEY (platform, workspace, chat),
  FOREIGN KEY (platform, workspace, chat, session)
    REFERENCES chat_sessions (platform, workspace, chat, session) ON DELETE CASCADE
);
CREATE INDEX current_sessions_by_session ON current_sessions (session);

CREATE TABLE bot_messages (
  seq INTEGER PRIMARY KEY,  -- insertion order: eviction takes the lowest
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL,
  message_id TEXT NOT NULL,
  session TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('reply', 'placeholder', 'question', 'picker', 'receipt', 'note')),
  UNIQUE (platform, workspace, chat, message_id)
);
CREATE INDEX bot_messages_by_session ON bot_messages (session);

CREATE TABLE dedupe (
  seq INTEGER PRIMARY KEY,  -- insertion order: eviction takes the lowest of the kind
  kind TEXT NOT NULL CHECK (kind IN ('event', 'message')),
  key TEXT NOT NULL,
  UNIQUE (kind, key)
);
CREATE INDEX dedupe_by_kind ON dedupe (kind);  -- (kind, seq): the eviction order within a kind

CREATE TABLE row_counts (name TEXT PRIMARY KEY, n INTEGER NOT NULL);
INSERT INTO row_counts (name, n) VALUES ('bot_messages', 0), ('dedupe:event', 0), ('dedupe:message', 0);
CREATE TRIGGER bot_messages_added AFTER INSERT ON bot_messages BEGIN
  UPDATE row_counts SET n = n + 1 WHERE name = 'bot_messages';
END;
CREATE TRIGGER bot_messages_removed AFTER DELETE ON bot_messages BEGIN
  UPDATE row_counts SET n = n - 1 WHERE name = 'bot_messages';
END;
CREATE TRIGGER dedupe_added AFTER INSERT ON dedupe BEGIN
  UPDATE row_counts SET n = n + 1 WHERE name = 'dedupe:' || NEW.kind;
END;
CREATE TRIGGER dedupe_removed AFTER DELETE ON dedupe BEGIN
  UPDATE row_counts SET n = n - 1 WHERE name = 'dedupe:' || OLD.kind;
END;

-- AUTOINCREMENT: an id is never reused, so a turn's inbox_id or a stale outbox id never names a newer row.
CREATE TABLE inbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
  session TEXT NOT NULL,
  message TEXT NOT NULL,  -- the InboundMessage, JSON
  accepted_ms INTEGER NOT NULL,
  edited_text TEXT,       -- NULL: not edited
  deleted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX inbox_by_session ON inbox (session);

CREATE TABLE turns (
  request_id TEXT NOT NULL UNIQUE,
  inbox_id INTEGER NOT NULL,
  session TEXT NOT NULL,
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
  author_id TEXT NOT NULL,
  message TEXT NOT NULL,  -- the InboundMessage as submitted (edited text applied), JSON
  placeholder_id TEXT NOT NULL DEFAULT '',
  last_event_id INTEGER NOT NULL DEFAULT 0,
  journal_id TEXT NOT NULL DEFAULT '',
  turn_id TEXT NOT NULL DEFAULT '',
  revision INTEGER NOT NULL DEFAULT 0,
  started_ms INTEGER NOT NULL
);

CREATE TABLE outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
  session TEXT NOT NULL,
  request_id TEXT NOT NULL,
  parts TEXT NOT NULL,    -- JSON array of strings
  next_part INTEGER NOT NULL DEFAULT 0,
  placeholder_id TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_ms INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT ''
);

CREATE TABLE questions (
  id TEXT NOT NULL UNIQUE,
  session TEXT NOT NULL,
  request_id TEXT NOT NULL,
  input_id TEXT NOT NULL,
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
  message_id TEXT NOT NULL,
  questions TEXT NOT NULL,  -- JSON array of InputQuestion
  asker_id TEXT NOT NULL,
  deadline_ms INTEGER NOT NULL
);
CREATE INDEX questions_by_message ON questions (platform, workspace, chat, message_id);
CREATE INDEX questions_by_thread ON questions (platform, workspace, chat, thread);
)sql";

// v4. Two costs of every write to the bounded tables go. bot_messages is rebuilt with its kind CHECK
// written as comparisons: SQLite evaluates `kind IN (six strings)` by building a temporary b-tree at
// every INSERT and UPDATE. The row_counts triggers go with their table: the store counts those rows
// in memory (counted at open and after any rollback, RouterStore::Counts), which its own inserts and
// deletes keep; a trigger's UPDATE was a third of an insert's cost.
constexpr std::string_view kSchemaV4 = R"sql(
CREATE TABLE bot_messages_v4 (
  seq INTEGER PRIMARY KEY,  -- insertion order: eviction takes the lowest
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL,
  message_id TEXT NOT NULL,
  session TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind = 'reply' OR kind = 'placeholder' OR kind = 'question' OR kind = 'picker' OR
                            kind = 'receipt' OR kind = 'note'),
  UNIQUE (platform, workspace, chat, message_id)
);
INSERT INTO bot_messages_v4 (seq, platform, workspace, chat, message_id, session, kind)
  SELECT seq, platform, workspace, chat, message_id, session, kind FROM bot_messages ORDER BY seq;
DROP TABLE bot_messages;
ALTER TABLE bot_messages_v4 RENAME TO bot_messages;
CREATE INDEX bot_messages_by_session ON bot_messages (session);
DROP TRIGGER dedupe_added;
DROP TRIGGER dedupe_removed;
DROP TABLE row_counts;
)sql";

// v5. A cheaper intake. A dedupe key's write was three b-tree inserts (the table, the (kind, key)
// unique index, the (kind, seq) eviction index) and a look-up: the intake's largest cost. The store
// now keeps the keys in memory (store_dedupe.cpp; the file is locked, it is the only writer) and each
// kind in a table of its own, where a key is one append and eviction a range of the rowid. The inbox
// loses its index by session, written at every intake and every turn's start and read by nothing
// but ListInbox(session), which scans instead (the inbox holds only messages waiting for a turn),
// and gains its message's author, so that a turn's start moves the row in SQL (MoveToTurns).
constexpr std::string_view kSchemaV5 = R"sql(
CREATE TABLE dedupe_event (seq INTEGER PRIMARY KEY, key TEXT NOT NULL);
CREATE TABLE dedupe_message (seq INTEGER PRIMARY KEY, key TEXT NOT NULL);
INSERT INTO dedupe_event (seq, key) SELECT seq, key FROM dedupe WHERE kind = 'event' ORDER BY seq;
INSERT INTO dedupe_message (seq, key) SELECT seq, key FROM dedupe WHERE kind = 'message' ORDER BY seq;
DROP TABLE dedupe;
DROP INDEX inbox_by_session;
ALTER TABLE inbox ADD COLUMN author_id TEXT NOT NULL DEFAULT '';
UPDATE inbox SET author_id = COALESCE(json_extract(message, '$.author_id'), '') WHERE json_valid(message);
)sql";

// v6. bot_messages loses its index by session: every new bot message (a turn's placeholder among them)
// wrote an entry at a random place of it, a page of its own in the commit, and only UnbindSession (the
// `delete` command) read it; that DELETE scans the bounded table instead.
constexpr std::string_view kSchemaV6 = "DROP INDEX bot_messages_by_session;";

// v7. One row for a message from its acceptance to its turn's end: the inbox and the turns become one
// table, `work`. A turn's start was an INSERT ... SELECT of the whole row (its message JSON included,
// checked with json_valid) into `turns` and a DELETE from `inbox`, the largest store cost of a turn;
// it is now one UPDATE of the row in place, which sets its request id (NULL while it waits; unique
// among the turns, through a partial index that waiting rows stay out of) and its cursor. An edit
// stays in edited_text and is applied where a turn is read. A turn carried over keeps its inbox id as
// the row's id (ids are never reused, so it names no other row); having no acceptance time of its own,
// it takes its start's. The id sequence goes on from the inbox's. A placeholder's (or receipt's) id is
// no longer written into its row when its post lands, a second UPDATE of the row: its bot-message
// index entry, written then anyway, names the row (inbox_id), and a restart reads it from there.
constexpr std::string_view kSchemaV7 = R"sql(
CREATE TABLE work (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
  session TEXT NOT NULL,
  author_id TEXT NOT NULL DEFAULT '',
  message TEXT NOT NULL,  -- the InboundMessage as accepted, JSON
  accepted_ms INTEGER NOT NULL,
  edited_text TEXT,       -- NULL: not edited
  deleted INTEGER NOT NULL DEFAULT 0,
  receipt_id TEXT NOT NULL DEFAULT '',
  request_id TEXT,        -- NULL: waiting; set: its turn is in flight
  placeholder_id TEXT NOT NULL DEFAULT '',
  last_event_id INTEGER NOT NULL DEFAULT 0,
  journal_id TEXT NOT NULL DEFAULT '',
  turn_id TEXT NOT NULL DEFAULT '',
  revision INTEGER NOT NULL DEFAULT 0,
  started_ms INTEGER      -- NULL while waiting
);
CREATE UNIQUE INDEX work_by_request ON work (request_id) WHERE request_id IS NOT NULL;
INSERT INTO work (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, edited_text,
                  deleted, receipt_id)
  SELECT id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, edited_text, deleted,
         receipt_id
  FROM inbox ORDER BY id;
INSERT INTO work (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, request_id,
                  placeholder_id, last_event_id, journal_id, turn_id, revision, started_ms)
  SELECT inbox_id, platform, workspace, chat, thread, session, author_id, message, started_ms, request_id,
         placeholder_id, last_event_id, journal_id, turn_id, revision, started_ms
  FROM turns ORDER BY rowid;
INSERT INTO sqlite_sequence (name, seq)
  SELECT 'work', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'work');
UPDATE sqlite_sequence
  SET seq = max(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'inbox'), 0))
  WHERE name = 'work';
DROP TABLE inbox;
DROP TABLE turns;
ALTER TABLE bot_messages ADD COLUMN inbox_id INTEGER NOT NULL DEFAULT 0;
)sql";

// v8. The work table without AUTOINCREMENT, which made every message's INSERT read and rewrite the
// table's row in sqlite_sequence (two fifths of the insert's cost). Ids are still never reused (a
// bot-message index entry names its row by id, and outlives it): the store hands them out itself and
// reserves them ahead in id_blocks, a block at a time (RouterStore::NextWorkId), so the file always
// holds a value above every id ever given. It starts above the old sequence and every row.
constexpr std::string_view kSchemaV8 = R"sql(
CREATE TABLE work_v8 (
  id INTEGER PRIMARY KEY,  -- from id_blocks: never reused
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
  session TEXT NOT NULL,
  author_id TEXT NOT NULL DEFAULT '',
  message TEXT NOT NULL,  -- the InboundMessage as accepted, JSON
  accepted_ms INTEGER NOT NULL,
  edited_text TEXT,       -- NULL: not edited
  deleted INTEGER NOT NULL DEFAULT 0,
  receipt_id TEXT NOT NULL DEFAULT '',
  request_id TEXT,        -- NULL: waiting; set: its turn is in flight
  placeholder_id TEXT NOT NULL DEFAULT '',
  last_event_id INTEGER NOT NULL DEFAULT 0,
  journal_id TEXT NOT NULL DEFAULT '',
  turn_id TEXT NOT NULL DEFAULT '',
  revision INTEGER NOT NULL DEFAULT 0,
  started_ms INTEGER      -- NULL while waiting
);
INSERT INTO work_v8 (id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, edited_text,
                     deleted, receipt_id, request_id, placeholder_id, last_event_id, journal_id, turn_id, revision,
                     started_ms)
  SELECT id, platform, workspace, chat, thread, session, author_id, message, accepted_ms, edited_text, deleted,
         receipt_id, request_id, placeholder_id, last_event_id, journal_id, turn_id, revision, started_ms
  FROM work ORDER BY id;
-- The next id never given: past the old sequence, every row, and every id the bot-message index names.
CREATE TABLE id_blocks (name TEXT PRIMARY KEY, next INTEGER NOT NULL);
INSERT INTO id_blocks (name, next) SELECT 'work', max(
    COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'work'), 0),
    COALESCE((SELECT max(id) FROM work), 0),
    COALESCE((SELECT max(inbox_id) FROM bot_messages), 0)) + 1;
DROP TABLE work;
ALTER TABLE work_v8 RENAME TO work;
CREATE UNIQUE INDEX work_by_request ON work (request_id) WHERE request_id IS NOT NULL;
)sql";

// v9. The work table loses its index by request id. A turn's start wrote an entry at a random place of
// it and a turn's end removed it, a fifth of each statement's cost (issue 11's bench); the store
// keeps the turns in flight in memory instead (RouterStore::Turns: the file is locked, it is the only
// writer), which also keeps a request id to one turn, and addresses a turn's row by its id.
constexpr std::string_view kSchemaV9 = "DROP INDEX work_by_request;";

// v10. The bot-message index loses its UNIQUE index on (platform, workspace, chat, message_id): every
// message the bot posted (a turn's placeholder among them) wrote an entry at a random place of it,
// most of the entry's cost (issue 11's bench). The store keeps the entries' key hashes in memory
// instead (RouterStore::Bots: the file is locked, it is the only writer), which keeps a key to one
// row, and addresses a row by its seq. The table is rebuilt without the constraint, rows and seqs kept.
constexpr std::string_view kSchemaV10 = R"sql(
CREATE TABLE bot_messages_v10 (
  seq INTEGER PRIMARY KEY,  -- insertion order: eviction takes the lowest
  platform TEXT NOT NULL, workspace TEXT NOT NULL, chat TEXT NOT NULL,
  message_id TEXT NOT NULL,
  session TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind = 'reply' OR kind = 'placeholder' OR kind = 'question' OR kind = 'picker' OR
                            kind = 'receipt' OR kind = 'note'),
  inbox_id INTEGER NOT NULL DEFAULT 0
);
INSERT INTO bot_messages_v10 (seq, platform, workspace, chat, message_id, session, kind, inbox_id)
  SELECT seq, platform, workspace, chat, message_id, session, kind, inbox_id FROM bot_messages ORDER BY seq;
DROP TABLE bot_messages;
ALTER TABLE bot_messages_v10 RENAME TO bot_messages;
)sql";

// v11. Writes nothing: from here on a message stored in a work row leaves out the fields its row
// holds in columns of its own (platform, workspace, chat, thread, author id) and those at their
// defaults, about two thirds of its text (store_json.hpp, RowFields). Rows written before keep every
// field, and read the same. The step is there for the version: a build before it, which would read
// the fields left out as empty, refuses the file.
constexpr std::string_view kSchemaV11 = "-- no statement: the message text's form changed";

// v12. An open question keeps how many of its questions are answered, and their answers (a secret
// one's left out): a restart in the middle of a request of several questions goes on with the next,
// where it took the next reply for the first question again.
constexpr std::string_view kSchemaV12 =
    "ALTER TABLE questions ADD COLUMN progress TEXT NOT NULL DEFAULT '{}';  -- {\"answered\": N, \"answers\": {id: [..]}}";

// Append only: a released step never changes, since stores in the field already ran it. A v2 is a
// new entry after v1, e.g.
//   {2, "v2: outbox entries remember their message ids",
//    "ALTER TABLE outbox ADD COLUMN message_ids TEXT NOT NULL DEFAULT '[]';"},
// with its test opening a v1 file (tests/routing/test_store_schema.cpp shows the pattern).
constexpr SchemaStep kSchemaSteps[] = {
    {1, "v1: the first schema", kSchemaV1},
    {2, "v2: a waiting message remembers its receipt",
     "ALTER TABLE inbox ADD COLUMN receipt_id TEXT NOT NULL DEFAULT '';"},
    {3, "v3: adapters keep their delivery cursors (Telegram's update offset)",
     "CREATE TABLE cursors (name TEXT PRIMARY KEY, value TEXT NOT NULL, updated_ms INTEGER NOT NULL);"},
    {4, "v4: cheaper writes to the bounded tables", kSchemaV4},
    {5, "v5: a cheaper intake (dedupe keys appended, no inbox index by session)", kSchemaV5},
    {6, "v6: no bot-message index by session (read by a Session's delete only)", kSchemaV6},
    {7, "v7: a message and its turn in one row (a turn's start is an UPDATE)", kSchemaV7},
    {8, "v8: work ids reserved in blocks (no AUTOINCREMENT)", kSchemaV8},
    {9, "v9: no work index by request id (the turns in flight are kept in memory)", kSchemaV9},
    {10, "v10: no UNIQUE bot-message index (the entries' keys are kept in memory)", kSchemaV10},
    {11, "v11: a stored message leaves out what its row holds", kSchemaV11},
    {12, "v12: an open question keeps the answers given so far", kSchemaV12},
};

}  // namespace

std::span<const SchemaStep> SchemaSteps() {
  return kSchemaSteps;
}

int SchemaVersion() {
  return static_cast<int>(std::size(kSchemaSteps));
}

Result<int> ReadSchemaVersion(Db& db) {
  auto q = db.Query("read the schema version", "PRAGMA user_version");
  if (!q) return Fail(q.error());
  auto row = q->Step();
  if (!row) return Fail(row.error());
  return *row ? static_cast<int>(q->Int(0)) : 0;
}

Status Migrate(Db& db, std::span<const SchemaStep> steps) {
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].version != static_cast<int>(i) + 1)
      return Fail(Errc::internal, "router store schema step " + std::string(steps[i].what) + " is number " +
                                      std::to_string(i + 1) + " but says version " + std::to_string(steps[i].version));
  }
  const int latest = static_cast<int>(steps.size());
  auto version = ReadSchemaVersion(db);
  if (!version) return Fail(version.error());
  if (*version > latest) {
    return Fail(Errc::io_error, "router store " + db.path() + " has schema version " + std::to_string(*version) +
                                    ", newer than this build's " + std::to_string(latest) +
                                    ": run a sessionturn that knows it (an older one must not write to it)");
  }
  for (const SchemaStep& step : steps) {
    if (step.version <= *version) continue;
    // The step and its version number in one transaction: a crash leaves the file before or after it.
    const std::string op = "schema step " + std::string(step.what);
    auto tx = Transaction::Begin(db, "begin a schema step");
    if (!tx) return Fail(tx.error());
    if (auto st = db.Exec(op, std::string(step.sql)); !st) return st;
    if (auto st = db.Exec(op, "PRAGMA user_version = " + std::to_string(step.version)); !st) return st;
    if (auto st = tx->Commit(); !st) return st;
  }
  return {};
}

}  // namespace sessionturn::routing
