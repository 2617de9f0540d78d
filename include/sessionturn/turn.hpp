// One turn's state machine (DESIGN.md §4), sans-I/O: feed it decoded events, it tells you which
// requests to send, which events belong to the turn, which questions to surface and when the turn is
// over. It also decides how an abandoned turn is wound down. It never touches a socket, a thread or a
// clock; the driver (driver.hpp) binds it to a connection, timers and the caller's callbacks.
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

// Where a turn is in the runtime's journal: enough to follow it again from another process
// (TurnTrackerOptions::attach, Driver::AsyncAttachTurn) after this one stopped.
struct TurnRef {
  std::string request_id;          // the message's requestId
  std::string turn_id;             // "turn-N"; empty until the runtime accepted the message
  std::int64_t last_event_id = 0;  // the last journaled event seen
  std::string journal_id;          // the journal last_event_id belongs to
  std::int64_t revision = 0;       // the queued turn's last seen revision (to withdraw it); 0: unknown
};

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
  std::vector<std::string> resolved;    // input ids the runtime resolved (elsewhere, or cancelled): close their prompts
  bool accepted = false;                // the turn was accepted by this event (record the time)
  bool started = false;                 // the turn started with this event
  bool finished = false;                // the turn is over: read Outcome()
};

// How an abandoned turn (deadline, cancel, caller gone) is wound down (DESIGN.md §4.5).
enum class AbandonAction {
  finish,      // nothing of ours can be running: report now
  withdraw,    // write `requests`, then wait (within the grace) until a later OnEvent() says finished
  await_echo,  // the message was written and may still become a turn: wait (within the grace) for its
               // echo or rejection; OnEvent() then asks for the withdrawal or says finished
  reconnect,   // a turn of ours runs and we are disconnected: reconnect at once; after the replay
               // OnEvent(history.end) asks for the withdrawal of what is still ours
};
struct AbandonPlan {
  AbandonAction action = AbandonAction::finish;
  std::vector<ClientRequest> requests;
};

struct TurnTrackerOptions {
  QuestionPolicy questions = QuestionPolicy::decline;
  // The message's requestId; empty means a fresh random one (NewRequestId()). Tests pin it.
  std::string request_id;
  // Follow a turn submitted earlier (by another process) instead of submitting: the prompt is never
  // sent; the tracker resumes at {last_event_id, journal_id} and finds the turn by turn_id, or by
  // request_id when turn_id is empty. request_id above is ignored.
  std::optional<TurnRef> attach;
};

class TurnTracker {
 public:
  explicit TurnTracker(std::string prompt, TurnTrackerOptions options = {});

  // A (re)connected stream: returns the subscribe to send first. The first time it asks for the
  // bounded history only (1 item / 1 KiB); after a drop it resumes with {since, journalId,
  // historyBounds} and no page size, so the raw replay contains exactly what we missed (a condensed
  // page would drop the ids we follow). Call it once per connection.
  ClientRequest OnConnected();

  // Pipelining: call right after OnConnected() and write what it returns right after the subscribe.
  // On a new turn's first connection the prompt need not wait for the replay: the runtime handles one
  // connection's requests in order, so the echo still follows history.end, and the turn saves a round
  // trip. Nothing on a resume (a reconnect, an attach): there history.end comes first, because the
  // replay up to the cursor decides whether the message was already accepted. A message written
  // before the runtime named its journal makes the next connection replay the whole retained journal
  // (raw), so that an echo the dropped connection never delivered is still found and not sent twice.
  std::optional<ClientRequest> PipelinedMessage();

  // The stream dropped. Events not yet seen will come from the replay after the next OnConnected(),
  // and decisions on questions not yet confirmed are written again after it.
  void OnDisconnected();

  // Feeds one decoded event. Events already seen (id <= the cursor) are dropped, so a replay never
  // delivers an event twice. Ignores everything after the turn is done.
  TurnStep OnEvent(const Event& event);

  // Policy ask: answer or decline a surfaced question (once per input id). Returns the `input`
  // request; send it when connected (while disconnected the tracker writes it after the next replay,
  // as it does for every decision the runtime has not resolved yet). invalid_argument when `input_id`
  // is not an open question of our turn (never asked, already decided, or resolved by the runtime).
  Result<ClientRequest> Answer(const std::string& input_id, std::map<std::string, std::vector<std::string>> answers);
  Result<ClientRequest> Decline(const std::string& input_id);
  // True while `input_id` is a surfaced question of ours awaiting the caller's decision.
  bool QuestionOpen(const std::string& input_id) const;

  // `request_id` is a message.edit of our queued turn that this client sent itself: its
  // user.message.updated keeps the turn ours instead of making it shared (so abandoning it still
  // withdraws it). Call it before feeding that event; the driver knows its own edits.
  void AdoptEdit(std::string request_id);

  // Starts winding the turn down (DESIGN.md §4.5): interrupt if started and not shared;
  // message.remove with the last seen revision if queued and not shared; nothing if shared or done.
  // `connected`: a stream is up now. `echo_expected`: the message was written recently enough that its
  // echo may still come (the driver decides by its clock and the grace). After a plan other than
  // finish, OnEvent() reports finished once the withdrawal is confirmed or the turn ended anyway;
  // Outcome() is then `reason`. Calling it again, or after the end, returns finish.
  AbandonPlan Abandon(Error reason, bool connected, bool echo_expected);
  bool Abandoning() const noexcept { return abandon_reason_.has_value(); }
  // The reason given to Abandon() (valid while Abandoning()).
  const Error& abandon_reason() const { return *abandon_reason_; }
  bool attached() const noexcept { return attached_; }

  TurnPhase phase() const noexcept { return phase_; }
  bool Done() const noexcept { return phase_ == TurnPhase::done; }
  bool Accepted() const noexcept { return !turn_id_.empty(); }

  // Valid once Done(): the outcome, or the error that ended it (Errc::rejected with the runtime's
  // reason, Errc::too_large for a reply above kMaxReplyBytes, Errc::not_found for an attached turn
  // the journal does not show, or the Abandon() reason).
  Result<TurnOutcome> Outcome() const;

  const std::string& request_id() const noexcept { return request_id_; }
  const std::string& turn_id() const noexcept { return turn_id_; }
  std::int64_t last_event_id() const noexcept { return last_event_id_; }
  const std::string& journal_id() const noexcept { return journal_id_; }
  TurnRef Ref() const { return TurnRef{request_id_, turn_id_, last_event_id_, journal_id_, revision_}; }
  std::int64_t revision() const noexcept { return revision_; }
  bool shared() const noexcept { return shared_; }
  bool started() const noexcept { return started_; }
  // Input ids surfaced to the caller and not yet answered, declined or resolved.
  std::set<std::string> open_questions() const;

 private:
  // Why the last history.start said our cursor no longer holds.
  enum class ResetKind { none, outside_window, new_journal };

  // One input.requested of our turn, until the runtime resolves it.
  struct Input {
    bool surfaced = false;                 // handed to the caller (policy ask)
    std::optional<ClientRequest> decision;  // our answer or decline, once taken
    int sent_on = 0;                       // the connection it was written on (0: not yet)
  };

  void HandleHistoryStart(const Event& event);
  void HandleHistoryEnd(const Event& event, TurnStep& step);
  void HandleOurEvent(const Event& event, bool replayed, TurnStep& step);
  void HandleInputRequested(const Event& event, bool replayed, TurnStep& step);
  void HandleSubmittedEvent(const Event& event, bool replayed, TurnStep& step);
  void ResolveInput(const std::string& input_id, TurnStep& step);
  void ResendDecisions(TurnStep& step);
  void AfterAbandonedEvent(const Event& event, TurnStep& step);
  Result<ClientRequest> Decide(const std::string& input_id, ClientRequest request);
  std::vector<ClientRequest> Withdrawal() const;
  void Withdraw(std::vector<ClientRequest> requests, TurnStep& step);
  // False when the text would pass kMaxReplyBytes.
  bool AppendReply(std::string& into, std::string_view text, bool as_message);
  void FailTooLarge(TurnStep& step);
  void Finish(TurnStatus status, TurnStep& step);
  void FailWith(Error error, TurnStep& step);

  std::string prompt_;
  TurnTrackerOptions options_;
  std::string request_id_;
  TurnPhase phase_ = TurnPhase::subscribing;
  bool attached_ = false;  // following a turn submitted by someone else: never send the prompt

  // Resumption.
  std::int64_t last_event_id_ = 0;
  std::string journal_id_;
  int connections_ = 0;
  bool connected_ = false;
  bool resuming_ = false;    // this connection's subscribe carried a cursor
  int message_sent_on_ = 0;  // the connection (number) the message was last written on, 0: never
  ResetKind reset_ = ResetKind::none;  // history.start reported a reset: decide at history.end
  std::string reset_reason_;
  // After a reset of the same journal the cursor is rewound so the replay can show our turn; events at
  // or below this id were already handled once: they update the turn's state but are not delivered
  // or added to the reply again.
  std::int64_t replay_floor_ = 0;
  bool saw_recovered_ = false;        // runtime.recovered seen since acceptance
  bool turn_seen_in_replay_ = false;  // an event of our turn arrived since the last history.start

  // The turn.
  std::string turn_id_;
  std::int64_t revision_ = 0;
  bool shared_ = false;
  std::set<std::string> own_edits_;  // AdoptEdit(): edits by this client, which do not share the turn
  bool started_ = false;
  std::string messages_;  // joined assistant.message texts
  std::string deltas_;    // accumulated assistant.delta texts (fallback)
  bool have_message_ = false;
  std::string error_text_;
  std::map<std::string, Input> inputs_;  // unresolved input requests of our turn, by input id
  int declined_ = 0;
  int answered_ = 0;
  TurnStatus status_ = TurnStatus::interrupted;
  std::optional<Error> failure_;

  // Abandoning.
  std::optional<Error> abandon_reason_;
  bool awaiting_replay_ = false;  // AbandonAction::reconnect: withdraw after the next history.end
  bool awaiting_echo_ = false;    // AbandonAction::await_echo
  std::set<std::string> withdrawal_ids_;
  bool withdrew_queued_ = false;  // a message.remove is among the withdrawal requests
};

}  // namespace sessionturn
