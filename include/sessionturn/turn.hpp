// One turn's state machine (DESIGN.md §4), sans-I/O: feed it decoded events, it tells you which
// requests to send, which events belong to the turn, which questions to surface and when the turn is
// over. It never touches a socket, a thread or a clock; the driver (driver.hpp) binds it to a connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn {

// Replay is noise to a turn: one condensed item (1 KiB) is enough to learn the journal id and cursor.
inline constexpr std::int64_t kTurnHistoryItems = 1;
inline constexpr std::int64_t kTurnHistoryBytes = 1024;
// A reply larger than this is almost certainly a runaway provider; holding more would let one turn
// take unbounded memory. The turn fails with Errc::too_large instead (DESIGN.md §3).
inline constexpr std::size_t kMaxReplyBytes = 16u << 20;

// How a finished turn ended.
enum class TurnStatus { completed, failed, interrupted, removed };
// "completed", "failed", "interrupted", "removed".
std::string_view ToString(TurnStatus status) noexcept;

// What to do with questions (`input.requested`) of our turn.
enum class QuestionPolicy {
  decline,  // answer every question with `input {cancel: true}` at once (a bot cannot ask anyone)
  ask,      // surface it (TurnStep::question); the caller answers or declines later
};

// Where the turn is.
enum class TurnPhase {
  subscribing,  // subscribe sent (or about to be), waiting for history.end
  submitted,    // message sent, waiting for its echo / merge / rejection
  queued,       // accepted, waiting behind another turn
  running,      // turn.started seen
  done,         // finished (see Outcome())
};
std::string_view ToString(TurnPhase phase) noexcept;

// The outcome of a finished turn (the driver adds reconnects and timings to make a TurnResult).
struct TurnOutcome {
  std::string turn_id;
  TurnStatus status = TurnStatus::interrupted;
  std::string text;           // assistant messages trimmed and joined by a blank line, else the deltas
  std::string error_message;  // the last error text of the turn (or why it ended, for resets/recovery)
  int questions_declined = 0; // input requests declined (by policy, by the caller, or cancelled by the runtime)
  int questions_answered = 0; // input requests answered through Answer()
  bool shared = false;        // another client's prompt is part of this turn
};

// What the caller must do after feeding one event (or calling a method).
struct TurnStep {
  std::vector<ClientRequest> requests;  // send these, in order
  bool deliver = false;                 // the event belongs to our turn and is new: hand it to the caller
  std::optional<Event> question;        // policy ask: an `input.requested` of ours to surface (questions inside)
  bool accepted = false;                // the turn was accepted by this event (record the time)
  bool started = false;                 // the turn started with this event
  bool finished = false;                // the turn is over: read Outcome()
};

struct TurnTrackerOptions {
  QuestionPolicy questions = QuestionPolicy::decline;
  // The message's requestId; empty means a fresh random one (NewRequestId()). Tests pin it.
  std::string request_id;
};

class TurnTracker {
 public:
  explicit TurnTracker(std::string prompt, TurnTrackerOptions options = {});

  // A (re)connected stream: returns the subscribe to send first. The first time it asks for the
  // bounded history only (1 item / 1 KiB); after a drop it resumes with {since, journalId,
  // historyBounds} and no page size, so the raw replay contains exactly what we missed (a condensed
  // page would drop the ids we follow). Call it once per connection.
  ClientRequest OnConnected();

  // The stream dropped. Events not yet seen will come from the replay after the next OnConnected().
  void OnDisconnected();

  // Feeds one decoded event. Events already seen (id <= the cursor) are dropped, so a replay never
  // delivers an event twice. Ignores everything after the turn is done.
  TurnStep OnEvent(const Event& event);

  // Policy ask: answer or decline a surfaced question (exactly once per input id). Returns the
  // `input` request to send; invalid_argument when `input_id` is not an open question of our turn.
  Result<ClientRequest> Answer(const std::string& input_id, std::map<std::string, std::vector<std::string>> answers);
  Result<ClientRequest> Decline(const std::string& input_id);

  // The withdrawal for an abandoned turn (DESIGN.md §4.5): interrupt if started and not shared;
  // message.remove with the last seen revision if queued and not shared; nothing if shared, never
  // accepted, or already done. The tracker does not change state: the caller ends the turn.
  std::vector<ClientRequest> Abandon() const;

  TurnPhase phase() const noexcept { return phase_; }
  bool Done() const noexcept { return phase_ == TurnPhase::done; }
  bool Accepted() const noexcept { return phase_ == TurnPhase::queued || phase_ == TurnPhase::running || (phase_ == TurnPhase::done && !turn_id_.empty()); }

  // Valid once Done(): the outcome, or the error that ended it (Errc::rejected with the runtime's
  // reason, Errc::too_large for a reply above kMaxReplyBytes).
  Result<TurnOutcome> Outcome() const;

  const std::string& request_id() const noexcept { return request_id_; }
  const std::string& turn_id() const noexcept { return turn_id_; }
  std::int64_t last_event_id() const noexcept { return last_event_id_; }
  const std::string& journal_id() const noexcept { return journal_id_; }
  std::int64_t revision() const noexcept { return revision_; }
  bool shared() const noexcept { return shared_; }
  bool started() const noexcept { return started_; }
  // Input ids surfaced to the caller and not yet answered, declined or resolved.
  const std::set<std::string>& open_questions() const noexcept { return open_inputs_; }

 private:
  void HandleHistoryEnd(const Event& event, TurnStep& step);
  void HandleOurEvent(const Event& event, TurnStep& step);
  // False when the text would pass kMaxReplyBytes.
  bool AppendReply(std::string& into, std::string_view text, bool as_message);
  void FailTooLarge(TurnStep& step);
  void Finish(TurnStatus status, TurnStep& step);
  void FailWith(Error error, TurnStep& step);

  std::string prompt_;
  TurnTrackerOptions options_;
  std::string request_id_;
  TurnPhase phase_ = TurnPhase::subscribing;

  // Resumption.
  std::int64_t last_event_id_ = 0;
  std::string journal_id_;
  int connections_ = 0;
  bool resuming_ = false;       // this connection's subscribe carried a cursor
  bool reset_pending_ = false;  // history.start said reset: decide at history.end
  std::string reset_reason_;
  bool message_sent_ = false;
  bool saw_recovered_ = false;  // runtime.recovered seen since acceptance
  bool turn_seen_in_replay_ = false;  // an event of our turn arrived since the last history.start

  // The turn.
  std::string turn_id_;
  std::int64_t revision_ = 0;
  bool shared_ = false;
  bool started_ = false;
  std::string messages_;  // joined assistant.message texts
  std::string deltas_;    // accumulated assistant.delta texts (fallback)
  bool have_message_ = false;
  std::string error_text_;
  std::set<std::string> open_inputs_;
  int declined_ = 0;
  int answered_ = 0;
  TurnStatus status_ = TurnStatus::interrupted;
  std::optional<Error> failure_;
};

}  // namespace sessionturn
