#include "sessionturn/turn.hpp"

#include <algorithm>
#include <utility>

namespace sessionturn {

std::string_view ToString(TurnStatus status) noexcept {
  switch (status) {
    case TurnStatus::completed: return "completed";
    case TurnStatus::failed: return "failed";
    case TurnStatus::interrupted: return "interrupted";
    case TurnStatus::removed: return "removed";
  }
  return "unknown";
}

std::string_view ToString(TurnPhase phase) noexcept {
  switch (phase) {
    case TurnPhase::subscribing: return "subscribing";
    case TurnPhase::submitted: return "submitted";
    case TurnPhase::queued: return "queued";
    case TurnPhase::running: return "running";
    case TurnPhase::done: return "done";
  }
  return "unknown";
}

TurnTracker::TurnTracker(std::string prompt, TurnTrackerOptions options)
    : prompt_(std::move(prompt)), options_(std::move(options)) {
  if (options_.attach) {
    // Someone submitted this turn before us: start where they left off, never send the prompt.
    attached_ = true;
    request_id_ = options_.attach->request_id;
    turn_id_ = options_.attach->turn_id;
    last_event_id_ = std::max<std::int64_t>(options_.attach->last_event_id, 0);
    journal_id_ = options_.attach->journal_id;
    phase_ = turn_id_.empty() ? TurnPhase::submitted : TurnPhase::queued;
    // 0 when unknown: then a queued turn cannot be removed (the runtime wants the exact revision)
    // until the replay shows one.
    revision_ = options_.attach->revision;
  } else {
    request_id_ = options_.request_id.empty() ? NewRequestId() : options_.request_id;
  }
}

ClientRequest TurnTracker::OnConnected() {
  ++connections_;
  connected_ = true;
  reset_ = ResetKind::none;
  reset_reason_.clear();
  // A cursor exists once the first history.start told us the journal (or the caller handed us one to
  // attach at): from then on every subscribe resumes, so the replay holds exactly what we missed (and
  // a reset tells us when it cannot).
  // A message written before the runtime named its journal (pipelined on a connection that dropped
  // before history.start) may have been accepted: replay the retained journal to find its echo.
  const bool blind = message_sent_on_ > 0 && journal_id_.empty();
  resuming_ = !journal_id_.empty() || attached_ || blind;
  if (resuming_) {
    // Bounds on (history.start reports resets) but no page size: a condensed page would strip the
    // requestIds and turnIds we follow, so a resume asks for the raw replay of what we missed.
    return ClientRequest::Subscribe(last_event_id_, journal_id_, true, 0, 0);
  }
  return ClientRequest::Subscribe(0, "", true, kTurnHistoryItems, kTurnHistoryBytes);
}

std::optional<ClientRequest> TurnTracker::PipelinedMessage() {
  if (!connected_ || resuming_ || attached_ || phase_ != TurnPhase::subscribing || abandon_reason_) return std::nullopt;
  phase_ = TurnPhase::submitted;
  message_sent_on_ = connections_;
  return ClientRequest::Message(request_id_, prompt_);
}

void TurnTracker::OnDisconnected() {
  // The cursor and journal id stay, the next OnConnected() resumes from them. A question surfaced to
  // the caller stays open (the runtime keeps it pending across our reconnect), and a decision written
  // on this connection may have been lost with it: it is written again after the next replay.
  connected_ = false;
}

TurnStep TurnTracker::OnEvent(const Event& event) {
  TurnStep step;
  if (phase_ == TurnPhase::done) return step;

  // Deduplicate by journal id: a replay after a reconnect starts at our cursor, and anything at or
  // below it was already handled. Unjournaled events (id 0) pass: they are never replayed.
  if (event.id > 0) {
    if (event.id <= last_event_id_) return step;
    last_event_id_ = event.id;
  }
  const bool replayed = event.id > 0 && event.id <= replay_floor_;

  if (event.Is(event_type::kHistoryStart)) {
    HandleHistoryStart(event);
    return step;
  }
  if (event.Is(event_type::kHistoryEnd)) {
    HandleHistoryEnd(event, step);
  } else if (event.Is(event_type::kRuntimeRecovered)) {
    saw_recovered_ = true;
  } else if (phase_ == TurnPhase::submitted) {
    HandleSubmittedEvent(event, replayed, step);
  } else if (phase_ == TurnPhase::queued || phase_ == TurnPhase::running) {
    if (!turn_id_.empty() && event.turn_id == turn_id_) {
      turn_seen_in_replay_ = true;
      HandleOurEvent(event, replayed, step);
    } else if (event.turn_id.empty() && inputs_.count(event.input_id) > 0 &&
               (event.Is(event_type::kInputResolved) || event.Is(event_type::kRequestAccepted))) {
      // The runtime answers an `input` without the turn's id: the input id says it is ours.
      step.deliver = !replayed;
      if (event.Is(event_type::kInputResolved)) ResolveInput(event.input_id, step);
    }
  }
  if (abandon_reason_) AfterAbandonedEvent(event, step);
  return step;
}

void TurnTracker::HandleHistoryStart(const Event& event) {
  const bool journal_changed = !journal_id_.empty() && !event.journal_id.empty() && event.journal_id != journal_id_;
  if (resuming_ && (event.reset || journal_changed)) {
    reset_ = journal_changed ? ResetKind::new_journal : ResetKind::outside_window;
    reset_reason_ = journal_changed
                        ? "the runtime's journal changed (" + journal_id_ + " -> " + event.journal_id +
                              "), so its history of the turn is gone"
                        : "our resume cursor " + std::to_string(last_event_id_) +
                              " fell outside the runtime's retained events, so the turn's events were lost";
  }
  if (!event.journal_id.empty()) journal_id_ = event.journal_id;
  if (!resuming_ || journal_changed) {
    // The first subscribe gets a condensed page (noise to a turn): skip to the end of the journal. A
    // new journal numbers its events afresh: skip its replay too (turn ids do not carry over).
    last_event_id_ = std::max<std::int64_t>(event.last_event_id, 0);
  } else if (reset_ == ResetKind::outside_window) {
    // The same journal replays from its start: rewind so our turn is found in it if it is there.
    // What we handled before is not handled twice (replay_floor_).
    replay_floor_ = std::max(replay_floor_, last_event_id_);
    last_event_id_ = std::max<std::int64_t>(event.first_event_id - 1, 0);
  }
  turn_seen_in_replay_ = false;
}

void TurnTracker::HandleHistoryEnd(const Event& event, TurnStep& step) {
  const ResetKind reset = reset_;
  reset_ = ResetKind::none;
  const bool following = phase_ == TurnPhase::queued || phase_ == TurnPhase::running;
  if (reset != ResetKind::none && following) {
    // Turn ids are per journal: in a new journal "turn-3" is somebody else's turn. With the same
    // journal the replay (or the condensed state) tells whether our turn is still active or queued.
    const bool same_journal = reset == ResetKind::outside_window;
    bool found = same_journal && turn_seen_in_replay_;
    if (same_journal && event.history_state) {
      const HistoryState& hs = *event.history_state;
      if (hs.active_turn_id == turn_id_) {
        found = true;
        if (!hs.active_turn_started.empty() && !started_) {
          started_ = true;
          phase_ = TurnPhase::running;
          step.started = true;
        }
      } else if (hs.pending_turn && hs.pending_turn->turn_id == turn_id_) {
        found = true;
        revision_ = hs.pending_turn->revision;
      }
    }
    if (!found) {
      error_text_ = "the turn's outcome is unknown: " + reset_reason_ + " (runtime reset)";
      Finish(TurnStatus::interrupted, step);
      return;
    }
  }
  if (phase_ == TurnPhase::subscribing || (phase_ == TurnPhase::submitted && !attached_)) {
    // Before acceptance a (re)connect (re)sends the message. After a plain drop the replay above has
    // already shown the echo if the runtime got it; a resend under the same requestId covers the case
    // where it never arrived.
    if (abandon_reason_) return;
    // Pipelined on this connection: the echo follows.
    if (phase_ == TurnPhase::submitted && message_sent_on_ == connections_) return;
    step.requests.push_back(ClientRequest::Message(request_id_, prompt_));
    phase_ = TurnPhase::submitted;
    message_sent_on_ = connections_;
    return;
  }
  if (phase_ == TurnPhase::submitted) {
    // Attached by request id and the replay since the cursor holds no echo: there is no such turn.
    const std::string where = reset == ResetKind::new_journal ? "the runtime's new journal " + journal_id_
                                                              : "journal " + journal_id_;
    FailWith(Error(Errc::not_found, "no turn for request " + request_id_ + " in " + where + " after event " +
                                        std::to_string(options_.attach ? options_.attach->last_event_id : 0)),
             step);
    return;
  }
  ResendDecisions(step);
}

void TurnTracker::ResendDecisions(TurnStep& step) {
  // A decision written on an earlier connection may have died with it (a dropped stream right after
  // input.requested): write it again. Inputs the runtime resolved meanwhile were removed by the
  // replay; a duplicate of one resolved concurrently is rejected harmlessly ("not pending").
  for (auto& [id, input] : inputs_) {
    if (!input.decision || input.sent_on == connections_) continue;
    input.sent_on = connections_;
    step.requests.push_back(*input.decision);
  }
}

void TurnTracker::HandleSubmittedEvent(const Event& event, bool replayed, TurnStep& step) {
  if (event.request_id != request_id_) return;
  if (event.Is(event_type::kUserMessage) || event.Is(event_type::kUserMessageUpdated)) {
    turn_id_ = event.turn_id;
    revision_ = event.revision > 0 ? event.revision : 1;
    // Merged into a queued turn: it carries another client's prompt too.
    shared_ = event.Is(event_type::kUserMessageUpdated);
    phase_ = TurnPhase::queued;
    turn_seen_in_replay_ = true;
    step.accepted = true;
    step.deliver = !replayed;
  } else if (event.Is(event_type::kError)) {
    const std::string reason = event.text.empty() ? std::string("no reason given") : event.text;
    FailWith(Error(Errc::rejected, "the runtime rejected the prompt: " + reason), step);
  }
}

void TurnTracker::HandleOurEvent(const Event& event, bool replayed, TurnStep& step) {
  step.deliver = !replayed;
  if (event.Is(event_type::kTurnStarted)) {
    if (!started_) {
      started_ = true;
      step.started = true;
    }
    phase_ = TurnPhase::running;
  } else if (event.Is(event_type::kUserMessage)) {
    if (event.revision > 0) revision_ = event.revision;  // an attached turn learns its revision here
  } else if (event.Is(event_type::kUserMessageUpdated)) {
    if (event.revision > 0) revision_ = event.revision;
    // Another request's update: a merge of another prompt, or someone else's edit. Our own edit
    // rewrote our prompt and leaves the turn ours.
    if (event.request_id != request_id_ && !event.request_id.empty() && own_edits_.count(event.request_id) == 0) {
      shared_ = true;
    }
  } else if (event.Is(event_type::kUserMessageRemoved)) {
    if (event.revision > 0) revision_ = event.revision;
    Finish(TurnStatus::removed, step);
  } else if (event.Is(event_type::kAssistantDelta)) {
    // Deltas are only the fallback for a turn with no finished message: stop keeping them once one came.
    if (!replayed && !have_message_ && !AppendReply(deltas_, event.text, false)) FailTooLarge(step);
  } else if (event.Is(event_type::kAssistantMessage)) {
    if (!replayed && !AppendReply(messages_, event.text, true)) FailTooLarge(step);
  } else if (event.Is(event_type::kError)) {
    if (!event.text.empty()) error_text_ = event.text;
  } else if (event.Is(event_type::kInputRequested)) {
    HandleInputRequested(event, replayed, step);
  } else if (event.Is(event_type::kInputResolved)) {
    // Resolved elsewhere, or cancelled by a runtime restart (recovery's input.resolved names the turn).
    ResolveInput(event.input_id, step);
  } else if (event.Is(event_type::kTurnCompleted)) {
    TurnStatus status = TurnStatus::interrupted;
    if (event.status == status_value::kCompleted) {
      status = TurnStatus::completed;
    } else if (event.status == status_value::kFailed) {
      status = TurnStatus::failed;
    } else if (event.status == status_value::kMerged) {
      error_text_ = "the runtime restarted and folded this queued turn into an earlier one";
    } else if (event.status != status_value::kInterrupted) {
      error_text_ = "the turn completed with an unknown status \"" + event.status + "\"";
    }
    if (status == TurnStatus::interrupted && saw_recovered_ && error_text_.empty()) {
      error_text_ = "the runtime restarted while the turn was in progress (runtime.recovered), which interrupted it";
    }
    Finish(status, step);
  }
}

void TurnTracker::HandleInputRequested(const Event& event, bool replayed, TurnStep& step) {
  auto [it, fresh] = inputs_.try_emplace(event.input_id);
  if (!fresh) return;  // seen before this reset's replay: the decision taken then stands
  if (replayed) {
    // Handled before the reset and since resolved (else it would still be in inputs_).
    inputs_.erase(it);
    return;
  }
  Input& input = it->second;
  if (options_.questions == QuestionPolicy::decline || abandon_reason_) {
    // A bot cannot ask anyone, and a turn being withdrawn has nobody to answer for it.
    input.decision = ClientRequest::Decline(NewRequestId(), event.input_id);
    input.sent_on = connections_;
    step.requests.push_back(*input.decision);
    ++declined_;
    return;
  }
  input.surfaced = true;
  step.question = event;
}

void TurnTracker::ResolveInput(const std::string& input_id, TurnStep& step) {
  auto it = inputs_.find(input_id);
  if (it == inputs_.end()) return;
  if (it->second.surfaced && !it->second.decision) step.resolved.push_back(input_id);
  inputs_.erase(it);
}

void TurnTracker::AfterAbandonedEvent(const Event& event, TurnStep& step) {
  if (step.finished) return;  // the turn ended anyway (completed, removed, rejected): Outcome() is the reason
  if (awaiting_replay_) {
    // Reconnected only to withdraw: once the replay is complete, withdraw what is still ours.
    if (!event.Is(event_type::kHistoryEnd)) return;
    awaiting_replay_ = false;
    Withdraw(Withdrawal(), step);
    return;
  }
  if (awaiting_echo_) {
    // Abandoned between sending the message and its echo: now it is a turn, withdraw it.
    if (!step.accepted) return;
    awaiting_echo_ = false;
    Withdraw(Withdrawal(), step);
    return;
  }
  if (step.started && withdrew_queued_) {
    // Our remove raced the turn's start (the runtime rejects it "no longer pending"): interrupt
    // instead. The superseded remove's rejection no longer counts as the runtime's word.
    withdrawal_ids_.clear();
    withdrew_queued_ = false;
    Withdraw(Withdrawal(), step);
    return;
  }
  // Withdrawal written: the runtime's word on it (its echo or its rejection) ends the turn.
  if (!event.request_id.empty() && withdrawal_ids_.count(event.request_id) > 0) FailWith(*abandon_reason_, step);
}

void TurnTracker::AdoptEdit(std::string request_id) {
  own_edits_.insert(std::move(request_id));
}

AbandonPlan TurnTracker::Abandon(Error reason, bool connected, bool echo_expected) {
  AbandonPlan plan;
  if (phase_ == TurnPhase::done || abandon_reason_) return plan;
  abandon_reason_ = std::move(reason);
  auto requests = Withdrawal();
  if (!requests.empty()) {
    if (connected) {
      plan.action = AbandonAction::withdraw;
      for (const auto& r : requests) {
        withdrawal_ids_.insert(r.request_id);
        withdrew_queued_ = withdrew_queued_ || r.type == request_type::kMessageRemove;
      }
      plan.requests = std::move(requests);
    } else {
      // A turn must not be left running unseen: reconnect, catch up, withdraw it as it is then.
      plan.action = AbandonAction::reconnect;
      awaiting_replay_ = true;
    }
    return plan;
  }
  if (phase_ == TurnPhase::submitted && !attached_ && connected && echo_expected) {
    plan.action = AbandonAction::await_echo;
    awaiting_echo_ = true;
    return plan;
  }
  TurnStep ignored;
  FailWith(*abandon_reason_, ignored);
  return plan;
}

std::vector<ClientRequest> TurnTracker::Withdrawal() const {
  std::vector<ClientRequest> out;
  if (phase_ == TurnPhase::done || shared_) return out;
  if (phase_ == TurnPhase::running) {
    // Interrupt names no turn: only send it while ours is the one running (it is, until completed).
    out.push_back(ClientRequest::Interrupt(NewRequestId()));
  } else if (phase_ == TurnPhase::queued && revision_ > 0) {
    out.push_back(ClientRequest::Remove(NewRequestId(), turn_id_, revision_));
  }
  return out;
}

void TurnTracker::Withdraw(std::vector<ClientRequest> requests, TurnStep& step) {
  if (requests.empty()) {
    // Shared meanwhile (or nothing left to stop): not ours to withdraw.
    FailWith(*abandon_reason_, step);
    return;
  }
  for (auto& r : requests) {
    withdrawal_ids_.insert(r.request_id);
    withdrew_queued_ = withdrew_queued_ || r.type == request_type::kMessageRemove;
    step.requests.push_back(std::move(r));
  }
}

void TurnTracker::FailTooLarge(TurnStep& step) {
  // Withdraw the turn while it is still ours to withdraw, then end it: nobody will read the rest.
  for (auto& request : Withdrawal()) step.requests.push_back(std::move(request));
  FailWith(Error(Errc::too_large, "the reply of turn " + turn_id_ + " exceeded " +
                                      std::to_string(kMaxReplyBytes >> 20) +
                                      " MiB (kMaxReplyBytes); the turn was abandoned"),
           step);
}

bool TurnTracker::AppendReply(std::string& into, std::string_view text, bool as_message) {
  std::string_view piece = as_message ? TrimUnicodeSpace(text) : text;
  if (as_message && piece.empty()) return true;
  const std::size_t extra = piece.size() + (as_message && !into.empty() ? 2 : 0);
  if (into.size() + extra > kMaxReplyBytes) return false;
  if (as_message) {
    if (!into.empty()) into += "\n\n";
    have_message_ = true;
    deltas_.clear();
    deltas_.shrink_to_fit();
  }
  into.append(piece);
  return true;
}

void TurnTracker::Finish(TurnStatus status, TurnStep& step) {
  status_ = status;
  phase_ = TurnPhase::done;
  step.finished = true;
  inputs_.clear();
}

void TurnTracker::FailWith(Error error, TurnStep& step) {
  failure_ = std::move(error);
  phase_ = TurnPhase::done;
  step.finished = true;
  inputs_.clear();
}

Result<ClientRequest> TurnTracker::Decide(const std::string& input_id, ClientRequest request) {
  auto it = inputs_.find(input_id);
  if (it == inputs_.end() || !it->second.surfaced || it->second.decision) {
    return Fail(Errc::invalid_argument, "input " + input_id + " is not an open question of this turn");
  }
  it->second.decision = request;
  it->second.sent_on = connected_ ? connections_ : 0;
  return request;
}

Result<ClientRequest> TurnTracker::Answer(const std::string& input_id,
                                          std::map<std::string, std::vector<std::string>> answers) {
  auto request = Decide(input_id, ClientRequest::Answer(NewRequestId(), input_id, std::move(answers)));
  if (request) ++answered_;
  return request;
}

Result<ClientRequest> TurnTracker::Decline(const std::string& input_id) {
  auto request = Decide(input_id, ClientRequest::Decline(NewRequestId(), input_id));
  if (request) ++declined_;
  return request;
}

bool TurnTracker::QuestionOpen(const std::string& input_id) const {
  auto it = inputs_.find(input_id);
  return it != inputs_.end() && it->second.surfaced && !it->second.decision;
}

std::set<std::string> TurnTracker::open_questions() const {
  std::set<std::string> out;
  for (const auto& [id, input] : inputs_)
    if (input.surfaced && !input.decision) out.insert(id);
  return out;
}

Result<TurnOutcome> TurnTracker::Outcome() const {
  if (phase_ != TurnPhase::done) {
    return Fail(Errc::internal, "TurnTracker::Outcome() called before the turn ended (phase " +
                                    std::string(ToString(phase_)) + ")");
  }
  if (abandon_reason_) return Fail(*abandon_reason_);
  if (failure_) return Fail(*failure_);
  TurnOutcome out;
  out.turn_id = turn_id_;
  out.status = status_;
  out.text = have_message_ ? messages_ : std::string(TrimUnicodeSpace(deltas_));
  out.error_message = error_text_;
  out.questions_declined = declined_;
  out.questions_answered = answered_;
  out.shared = shared_;
  return out;
}

}  // namespace sessionturn
