// The driver binds the turn logic (turn.hpp) to a connection (connection.hpp): submit one turn and
// get its reply (blocking or async), follow a Session's events (Watch), interrupt, answer or decline
// questions. It owns deadlines, cancellation, reconnects with resumption, and the abandon grace.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/turn.hpp"

namespace sessionturn {

// The bound peers use for one turn (PROTOCOL.md §6).
inline constexpr std::chrono::milliseconds kDefaultTurnTimeout = std::chrono::minutes(60);
// How long an abandoned turn may take to write its withdrawal before the connection is closed anyway:
// long enough for a loaded link, short enough that a cancel feels immediate.
inline constexpr std::chrono::milliseconds kAbandonGrace = std::chrono::seconds(5);
// How long a surfaced question waits for the caller before it is declined. A person at a terminal or
// in a chat needs minutes; the turn bound still applies on top.
inline constexpr std::chrono::milliseconds kDefaultAnswerTimeout = std::chrono::minutes(10);
// Deadline of the one-shot requests (Interrupt, Answer, Decline): connect, write, see the runtime's reply.
inline constexpr std::chrono::milliseconds kOneShotTimeout = std::chrono::seconds(30);

// ---- Cancellation --------------------------------------------------------------------------------

// A cancellation flag shared between a source (the caller) and tokens (the operations). Thread-safe.
class CancellationToken {
 public:
  struct State;
  CancellationToken() = default;  // a token that is never cancelled
  bool IsCancelled() const noexcept;
  // Runs `fn` once when the source is cancelled (at once, on this thread, if it already is). `fn`
  // runs on the thread that calls Cancel(), so it must be short and must not block. Returns an id
  // for Unregister (0 when `fn` already ran or the token can never be cancelled).
  std::uint64_t OnCancel(std::function<void()> fn) const;
  // Forgets a registration; after it returns, `fn` is not running and will not run.
  void Unregister(std::uint64_t id) const;
  bool CanBeCancelled() const noexcept { return state_ != nullptr; }

 private:
  friend class CancellationSource;
  explicit CancellationToken(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

class CancellationSource {
 public:
  CancellationSource();
  // Cancels every token of this source (idempotent) and runs their callbacks.
  void Cancel();
  bool IsCancelled() const noexcept;
  CancellationToken Token() const;

 private:
  std::shared_ptr<CancellationToken::State> state_;
};

// ---- Questions -----------------------------------------------------------------------------------

// Answers or declines one surfaced question (an `input.requested` of our turn). Copyable; the first
// Answer()/Decline() on any copy wins, later calls return false. Callable from any thread, any time;
// after the turn ended, the answer deadline declined it, or the runtime resolved it otherwise (another
// client answered, a restart cancelled it), the calls return false and send nothing. True means the
// decision was taken and will reach the runtime (again after a dropped stream, until it is resolved);
// a resolution racing the call is possible, and the runtime then rejects the duplicate harmlessly.
class Responder {
 public:
  struct Impl;
  Responder() = default;
  explicit Responder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // Answers: question id -> chosen labels or free text. Returns true when this call was the one.
  bool Answer(std::map<std::string, std::vector<std::string>> answers) const;
  bool Decline() const;
  std::string input_id() const;

 private:
  std::shared_ptr<Impl> impl_;
};

// Receives the `input.requested` event (its questions in event.questions) and a responder. Runs where
// on_event runs (a Context worker, or the calling thread of a blocking call): must not block; answer
// later through the responder from any thread.
using QuestionHandler = std::function<void(const Event& input_requested, Responder responder)>;

// ---- Options and results -------------------------------------------------------------------------

struct ReconnectPolicy {
  bool enabled = true;
  int max_attempts = 5;  // consecutive failed attempts before giving up with Errc::connection_lost
  std::chrono::milliseconds initial_backoff{100};  // doubled after each failed attempt
  std::chrono::milliseconds max_backoff{5000};
  // A (re)connected stream must finish its replay (history.end) within this, else it counts as dropped
  // (and is retried under this policy): a runtime or proxy that accepts but never answers must not
  // hold a turn until its deadline.
  std::chrono::milliseconds handshake_timeout{30000};
};

struct TurnOptions {
  std::chrono::milliseconds timeout = kDefaultTurnTimeout;  // for the whole turn, from the call; > 0
  CancellationToken cancel;                                 // cancelling abandons the turn: Errc::cancelled
  // Every event of our turn, in order, never twice (echo, deltas, tools, questions, status...).
  // Runs on a Context worker, or for a blocking call over a unix socket or the local backend on the
  // calling thread (docs/threading.md): must not block for long.
  std::function<void(const Event& event)> on_event;
  QuestionPolicy questions = QuestionPolicy::decline;
  QuestionHandler on_question;  // required with QuestionPolicy::ask
  std::chrono::milliseconds answer_timeout = kDefaultAnswerTimeout;  // then the question is declined; > 0
  ReconnectPolicy reconnect;
  // The runtime runs `!cmd` prompts as shell commands and `/goal` prompts as goals. Off by default:
  // such a prompt is refused with Errc::invalid_argument before any I/O.
  bool allow_commands = false;
  // How long an abandoned turn may take to withdraw. Added to the timeout only when something of ours
  // may still run: an accepted turn, or a message written less than this ago (its echo may still come).
  std::chrono::milliseconds abandon_grace = kAbandonGrace;
  // The message's requestId; empty means a fresh random one. For tests and idempotent retries.
  std::string request_id;
  // Called once when the runtime accepted the prompt (its echo, or the merge into a queued turn),
  // with the turn's place in the journal. Runs where on_event runs: must not block.
  std::function<void(const TurnRef& ref)> on_accepted;
  // Called once when the turn becomes shared (TurnResult::shared): the prompt was merged into another
  // client's queued turn, another client's prompt was merged into it, or it was edited from elsewhere.
  // From then on an edit or a removal changes another client's prompt too. Called before on_accepted
  // when the merge is how the runtime accepted it; also for an attached turn. Runs where on_event runs.
  std::function<void()> on_shared;
  // Blocking SubmitTurn / AttachTurn only: called on the calling thread about every 100 ms while it
  // waits; returning false abandons the turn as a cancel does (Errc::cancelled, withdrawn). How a
  // language binding notices an interrupt (Python's Ctrl-C) without a thread of its own.
  std::function<bool()> keep_waiting;
};

struct TurnResult {
  std::string request_id;  // the message's requestId (or the attached turn's)
  std::string turn_id;
  TurnStatus status = TurnStatus::interrupted;
  std::string text;
  std::string error_message;
  int questions_declined = 0;
  int questions_answered = 0;
  bool shared = false;
  int reconnects = 0;  // successful reconnects during the turn
  std::int64_t last_event_id = 0;  // the journal cursor when the turn ended
  std::string journal_id;          // the journal it belongs to
  // From the call to the event; absent when it never happened.
  std::optional<std::chrono::milliseconds> time_to_accepted;
  std::optional<std::chrono::milliseconds> time_to_started;
  std::optional<std::chrono::milliseconds> time_to_completed;
};

// Called exactly once with the result of an async turn, on a Context worker (on the calling thread
// when the Context is already stopped: Errc::unavailable).
using TurnHandler = std::function<void(Result<TurnResult> result)>;

struct WatchOptions {
  std::int64_t since = 0;   // deliver events with id > since (0: from the start of the retained journal)
  std::string journal_id;   // the journal `since` belongs to; empty when since == 0
  // Bounded history (a condensed page instead of the raw replay) when watching from now on.
  bool history_bounds = false;
  std::int64_t history_items = 0;
  std::int64_t history_bytes = 0;
  ReconnectPolicy reconnect;
};

using WatchCallback = std::function<void(const Event& event)>;
// Called once when a watch ends: ok after Stop(), else why (connection_failed/connection_lost...).
using WatchEndHandler = std::function<void(Status status)>;

// Stops a watch. Destroying the handle does NOT stop it (so a fire-and-forget logger is possible);
// call Stop(). Thread-safe.
class WatchHandle {
 public:
  struct Impl;
  WatchHandle() = default;
  explicit WatchHandle(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // Stops delivering events and closes the connection; the end handler gets ok. Idempotent.
  // After Stop() returns from a non-worker thread, the callback is not running and will not run.
  void Stop();
  bool Active() const;
  // The cursor: the id of the last event delivered, and its journal (for a later Watch{since}).
  std::int64_t last_event_id() const;
  std::string journal_id() const;
  int reconnects() const;

 private:
  std::shared_ptr<Impl> impl_;
};

// How EditQueued sends the new text.
struct EditOptions {
  // Connect, write, and see the runtime's word on the edit; > 0.
  std::chrono::milliseconds timeout = kOneShotTimeout;
  // The new text is a prompt: the runtime runs a `!cmd` text as a shell command and a `/goal` text as
  // a goal when the turn starts. Off by default: such a text is refused with Errc::invalid_argument
  // before any I/O, as TurnOptions::allow_commands does for SubmitTurn.
  bool allow_commands = false;
};

// ---- The driver ----------------------------------------------------------------------------------

// One runtime (through its connector). Cheap to construct; each turn or watch has its own connection,
// so many turns may be in flight at once (no thread per turn). All methods are thread-safe.
// Destroying the Driver abandons the turns in flight (their handlers get Errc::cancelled), stops the
// watches, and (off the Context's workers) waits up to kAbandonGrace for them to write their
// withdrawals and close; call DetachTurns() first to leave the turns running instead. The Context
// must outlive the Driver.
class Driver {
 public:
  Driver(Context& context, std::shared_ptr<Connector> connector);
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Submits `prompt` and waits for the turn to end. Errors: invalid_argument (empty prompt, a command
  // without allow_commands, ask without on_question), rejected (the runtime's reason), connection_failed,
  // connection_lost (beyond the reconnect budget), timeout and cancelled (after abandoning the turn),
  // too_large (reply above kMaxReplyBytes), would_block (called on a Context worker).
  // A finished turn is a TurnResult even when it failed or was interrupted: look at its status.
  // With a connector that runs connections on the caller's strand (unix, the local backend) the turn
  // runs on this thread, on a private event loop, callbacks included (docs/threading.md).
  Result<TurnResult> SubmitTurn(std::string prompt, TurnOptions options = {});

  // The same, asynchronously: `handler` is called exactly once, on a Context worker (also for
  // argument errors, which are reported without I/O; on the calling thread when the Context is stopped).
  void AsyncSubmitTurn(std::string prompt, TurnOptions options, TurnHandler handler);

  // Follows a turn that an earlier process submitted (after a restart, from a persisted TurnRef):
  // resumes at {ref.last_event_id, ref.journal_id} and reports the turn as SubmitTurn would, without
  // sending the prompt again. With ref.turn_id empty the turn is looked up by ref.request_id in the
  // replay; when the replay shows no such turn, the handler gets Errc::not_found. options.timeout
  // bounds the attachment from this call; on_accepted is not called (the turn was accepted before).
  void AsyncAttachTurn(TurnRef ref, TurnOptions options, TurnHandler handler);
  Result<TurnResult> AttachTurn(TurnRef ref, TurnOptions options = {});

  // Follows the Session's events from options.since, reconnecting like a turn does, never delivering
  // an event twice. `callback` runs on a Context worker, in order.
  WatchHandle Watch(WatchOptions options, WatchCallback callback, WatchEndHandler on_end = {});

  // One-shot requests on their own connection. Interrupt stops whichever turn runs now (rejected:
  // "Session has no active turn"). Answer/Decline resolve an open question by its input id. A timeout
  // that is not positive is refused with Errc::invalid_argument.
  Status Interrupt(std::chrono::milliseconds timeout = kOneShotTimeout);
  Status Answer(const std::string& input_id, std::map<std::string, std::vector<std::string>> answers,
                std::chrono::milliseconds timeout = kOneShotTimeout);
  Status Decline(const std::string& input_id, std::chrono::milliseconds timeout = kOneShotTimeout);

  using StatusHandler = std::function<void(Status status)>;
  void AsyncInterrupt(StatusHandler handler, std::chrono::milliseconds timeout = kOneShotTimeout);
  void AsyncAnswer(std::string input_id, std::map<std::string, std::vector<std::string>> answers,
                   StatusHandler handler, std::chrono::milliseconds timeout = kOneShotTimeout);
  void AsyncDecline(std::string input_id, StatusHandler handler,
                    std::chrono::milliseconds timeout = kOneShotTimeout);

  // Edit or remove a queued turn (accepted, not started yet) by its id, on a connection of their own,
  // guarded by the turn's current revision (PROTOCOL.md §4 "Edit and remove"). `expected_revision` is
  // the revision the caller saw last: TurnRef::revision (on_accepted), then the revision of each
  // user.message.updated of the turn (on_event, Watch). Success is the runtime's user.message.updated
  // (EditQueued reports the turn's new revision, for a later edit or removal) or user.message.removed.
  // Errors: invalid_argument before any I/O (an empty turn id or text, a revision that is not
  // positive, a command text without allow_commands, a timeout that is not positive); rejected with
  // the runtime's reason (`Session turn "turn-3" is no longer pending` once it started or ended,
  // `... revision is 3, not 2` after someone else's edit or merge); connection_failed; connection_lost
  // and timeout, after which the change may or may not have been made (the turn's events say which).
  // Whoever follows the turn sees the change: an edited turn stays queued and its reply answers the
  // new text; a removed one ends as TurnStatus::removed. An edit through the Driver that submitted the
  // turn keeps it that caller's; an edit from elsewhere makes it shared (TurnResult::shared: abandoning
  // it then withdraws nothing, the prompt is not the submitter's alone any more).
  // The async handlers are called exactly once, on a Context worker (on the calling thread when the
  // Context is stopped: Errc::unavailable).
  using RevisionHandler = std::function<void(Result<std::int64_t> revision)>;
  void AsyncEditQueued(std::string turn_id, std::string text, std::int64_t expected_revision, RevisionHandler handler,
                       EditOptions options = {});
  Result<std::int64_t> EditQueued(const std::string& turn_id, std::string text, std::int64_t expected_revision,
                                  EditOptions options = {});
  void AsyncRemoveQueued(std::string turn_id, std::int64_t expected_revision, StatusHandler handler,
                         std::chrono::milliseconds timeout = kOneShotTimeout);
  Status RemoveQueued(const std::string& turn_id, std::int64_t expected_revision,
                      std::chrono::milliseconds timeout = kOneShotTimeout);

  // Stops following every turn in flight on this Driver and leaves it to run in its Session: for a
  // graceful shutdown, after which the next process re-attaches (AttachTurn) from the TurnRef it
  // persisted (TurnOptions::on_accepted). Each turn's handler gets Errc::cancelled, saying that the
  // turn was detached and where it is left (queued or running, its journal and cursor), on a Context
  // worker soon after this returns; its connection is closed; nothing is written to the runtime: no
  // interrupt, no message.remove, no decline of its open questions (they stay open for whoever
  // attaches next). A prompt not sent yet is never sent; one sent but not yet confirmed may still
  // become a turn (AttachTurn by its request id finds it). A turn already being withdrawn (cancelled,
  // timed out) finishes its withdrawal as before. Turns started after the call, watches and the
  // one-shot requests are not affected. Thread-safe; does not block. Needs a running Context, like
  // every handler.
  void DetachTurns();

  // Turns currently in flight (for tests and metrics).
  std::size_t TurnsInFlight() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace sessionturn
