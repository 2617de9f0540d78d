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

#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn::runtime {

struct TurnRecord {
  std::string id;
  std::string text;
  std::int64_t revision = 0;
  bool shell = false;  // a `!` command turn
};

struct OpenInput {
  std::string input_id;
  std::string turn_id;
  std::vector<InputQuestion> questions;
  std::map<std::string, std::vector<std::string>> answers;  // collected so far (partial answers)
};

// What the journal says about the Session. Apply() is the only mutator, so the live runtime and a
// reload from disk can never disagree.
struct SessionState {
  std::int64_t next_turn_number = 1;
  std::int64_t turns_started = 0;  // counts every turn.started ever journaled (echo's "#N")
  std::optional<TurnRecord> active;  // started, not completed
  std::string active_started;        // the active turn's turn.started timestamp
  bool interrupting = false;
  std::deque<TurnRecord> queued;  // accepted, not started, in order
  std::vector<OpenInput> open_inputs;

  void Apply(const Event& event);
  TurnRecord* FindQueued(const std::string& turn_id);
  OpenInput* FindInput(const std::string& input_id);
};

struct JournalEntry {
  Event event;
  std::shared_ptr<const std::string> bytes;  // the encoded line with its '\n', shared by every subscriber
};

// RFC 3339 UTC with microseconds, as the runtime stamps events.
std::string NowTimestamp();

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

  std::string dir_;
  std::size_t max_retained_ = 4096;
  int fd_ = -1;
  int lock_fd_ = -1;  // flock on DIR/lock: one runtime per state directory
  std::string id_;
  std::int64_t last_id_ = 0;
  std::deque<JournalEntry> retained_;
  SessionState state_;
};

}  // namespace sessionturn::runtime
