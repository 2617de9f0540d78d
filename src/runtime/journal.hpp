// The local runtime's journal: numbered events, the retained window used for replay, the optional
// events.jsonl on disk, and the Session state that follows from folding the journal (which is how a
// restart recovers). Not thread-safe: the runtime's I/O thread owns it; readers on other threads hold
// the runtime's mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unordered_map>

#include "runtime/text.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn::runtime {

struct TurnRecord {
  std::string id;
  std::string text;
  std::int64_t revision = 0;
  SessionCommand::Kind kind = SessionCommand::Kind::message;  // what the text is to the runtime
  bool command() const { return kind != SessionCommand::Kind::message; }
};

struct OpenInput {
  std::string input_id;
  std::string turn_id;
  std::vector<InputQuestion> questions;
  std::int64_t event_id = 0;  // its input.requested
};

// What the journal says about the Session. Apply() is the only mutator, so the live runtime and a
// reload from disk can never disagree.
struct SessionState {
  std::int64_t next_turn_number = 1;
  std::int64_t next_input_number = 1;  // for input ids the runtime picks ("input-N")
  std::int64_t turns_started = 0;  // counts every turn.started ever journaled (echo's "#N")
  std::optional<TurnRecord> active;  // started, not completed
  std::string active_started;        // the active turn's turn.started timestamp
  std::int64_t active_started_id = 0;  // and that event's id
  bool interrupting = false;
  std::deque<TurnRecord> queued;  // accepted, not started, in order (one, but for a journal being recovered)
  std::vector<OpenInput> open_inputs;
  std::int64_t last_file_diff_id = 0;  // the newest file.diff (history.end's fileDiff, while retained)

  void Apply(const Event& event);
  TurnRecord* FindQueued(const std::string& turn_id);
  OpenInput* FindInput(const std::string& input_id);
};

struct JournalEntry {
  Event event;
  std::shared_ptr<const std::string> bytes;  // the encoded line with its '\n', shared by every subscriber
};

// Where the condensed history finds a turn's prompt without walking the journal: the ids of its
// user.message / user.message.updated events in the retained window, and whether the turn is hidden
// from history (removed, or merged into another at recovery).
struct TurnIndex {
  std::deque<std::pair<std::int64_t, bool>> prompts;  // (event id, is a user.message), ascending
  bool hidden = false;
  std::size_t events = 0;  // retained events of this turn
  // The event a prompt item takes its id from (the runtime's userEventID): the last user.message in
  // the window, else the first update; 0 when none is retained.
  std::int64_t anchor() const;
  std::int64_t latest() const { return prompts.empty() ? 0 : prompts.back().first; }
};

// Now as the runtime stamps journaled events: RFC 3339 UTC with nanoseconds, trailing zeros of the
// fraction trimmed (Go's RFC3339Nano), e.g. 2026-08-08T12:00:00.1234Z.
std::string NowTimestamp();
// The same format for a given time since the epoch, in nanoseconds.
std::string FormatTimestamp(std::int64_t unix_nanos);

// Encodes an event once, newline included.
std::shared_ptr<const std::string> EncodeShared(const Event& event);

class Journal {
 public:
  // `state_dir` empty: in memory only. Otherwise creates the directory (0700), reads journal.json
  // (the journal id) and events.jsonl, or starts a new journal there.
  static Result<std::unique_ptr<Journal>> Open(const std::string& state_dir, std::size_t retained,
                                               std::vector<std::string>* warnings);
  ~Journal();

  const std::string& id() const { return id_; }
  std::int64_t last_id() const { return last_id_; }
  // First retained id; last_id()+1 when nothing is retained.
  std::int64_t first_id() const { return retained_.empty() ? last_id_ + 1 : retained_.front().event.id; }
  bool empty() const { return last_id_ == 0; }
  const std::deque<JournalEntry>& retained() const { return retained_; }
  // The retained entry with this id, or null.
  const JournalEntry* Find(std::int64_t id) const;
  const TurnIndex* Turn(const std::string& turn_id) const;
  const SessionState& state() const { return state_; }
  bool on_disk() const { return fd_ >= 0; }

  // Numbers, stamps, encodes, writes (write(2) per event) and folds the event. A failed write leaves
  // the journal unchanged and says why.
  Result<const JournalEntry*> Append(Event event);
  // fdatasync of events.jsonl (no-op in memory). Called at turn boundaries and on shutdown.
  void Sync();
  // Simulated restart: with a state dir, forget everything and read it back from disk; in memory, keep it.
  Status Reload(std::vector<std::string>* warnings);
  void Close();

 private:
  Journal() = default;
  Status Load(std::vector<std::string>* warnings);
  void Retain(JournalEntry entry);
  void IndexAdd(const Event& e);
  void IndexRemove(const Event& e);

  std::string dir_;
  std::size_t max_retained_ = 4096;
  int fd_ = -1;
  int lock_fd_ = -1;  // flock on DIR/lock: one runtime per state directory
  std::string id_;
  std::int64_t last_id_ = 0;
  std::deque<JournalEntry> retained_;
  std::unordered_map<std::string, TurnIndex> turns_;  // turns with retained events
  SessionState state_;
};

}  // namespace sessionturn::runtime
