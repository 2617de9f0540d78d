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
  request_id_ = options_.request_id.empty() ? NewRequestId() : options_.request_id;
}

ClientRequest TurnTracker::OnConnected() {
  ++connections_;
  reset_pending_ = false;
  reset_reason_.clear();
  // A cursor exists once the first history.start told us the journal: from then on every subscribe
  // resumes, so the replay holds exactly what we missed (and a reset tells us when it cannot).
  resuming_ = !journal_id_.empty();
  if (resuming_) {
    // Bounds on (history.start reports resets) but no page size: a condensed page would strip the
    // requestIds and turnIds we follow, so a resume asks for the raw replay of what we missed.
    return ClientRequest::Subscribe(last_event_id_, journal_id_, true, 0, 0);
  }
  return ClientRequest::Subscribe(0, "", true, kTurnHistoryItems, kTurnHistoryBytes);
}

void TurnTracker::OnDisconnected() {
  // Nothing to undo: the cursor and journal id stay, the next OnConnected() resumes from them. A
  // question surfaced to the caller stays open; the runtime keeps it pending across our reconnect.
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

  if (event.Is(event_type::kHistoryStart)) {
    const bool journal_changed = !journal_id_.empty() && !event.journal_id.empty() && event.journal_id != journal_id_;
    if (resuming_ && (event.reset || journal_changed)) {
      reset_pending_ = true;
      reset_reason_ = journal_changed
                          ? "the runtime's journal changed (" + journal_id_ + " -> " + event.journal_id +
                                "), so its history of the turn is gone"
                          : "our resume cursor " + std::to_string(last_event_id_) +
                                " fell outside the runtime's retained events, so the turn's events were lost";
    }
    if (!event.journal_id.empty()) journal_id_ = event.journal_id;
    // The first subscribe gets a condensed page (noise to a turn): skip to the end of the journal.
    // A new journal numbers its events afresh: skip its replay too (turn ids do not carry over).
    // A resume of the same journal keeps the cursor: the replay is what we missed, and after a
    // same-journal reset (cursor outside the window) our turn may still show up in it.
    if (!resuming_ || journal_changed) last_event_id_ = std::max<std::int64_t>(event.last_event_id, 0);
    turn_seen_in_replay_ = false;
    return step;
  }
  if (event.Is(event_type::kHistoryEnd)) {
    HandleHistoryEnd(event, step);
    return step;
  }
  if (event.Is(event_type::kRuntimeRecovered)) {
    saw_recovered_ = true;
    return step;
  }

  switch (phase_) {
    case TurnPhase::subscribing: return step;
    case TurnPhase::submitted: {
      if (event.request_id != request_id_) return step;
      if (event.Is(event_type::kUserMessage) || event.Is(event_type::kUserMessageUpdated)) {
        turn_id_ = event.turn_id;
        revision_ = event.revision > 0 ? event.revision : 1;
        // Merged into a queued turn: it carries another client's prompt too.
        shared_ = event.Is(event_type::kUserMessageUpdated);
        phase_ = TurnPhase::queued;
        step.accepted = true;
        step.deliver = true;
      } else if (event.Is(event_type::kError)) {
        const std::string reason = event.text.empty() ? std::string("no reason given") : event.text;
        FailWith(Error(Errc::rejected, "the runtime rejected the prompt: " + reason), step);
      }
      return step;
    }
    case TurnPhase::queued:
    case TurnPhase::running:
      if (event.turn_id == turn_id_ && !turn_id_.empty()) {
        turn_seen_in_replay_ = true;
        HandleOurEvent(event, step);
      }
      return step;
    case TurnPhase::done: return step;
  }
  return step;
}

void TurnTracker::HandleHistoryEnd(const Event& event, TurnStep& step) {
  if (reset_pending_ && (phase_ == TurnPhase::queued || phase_ == TurnPhase::running)) {
    reset_pending_ = false;
    // Turn ids are per journal: in a new journal "turn-3" is somebody else's turn. With the same
    // journal the condensed state tells whether our turn is still active or queued.
    const bool same_journal = reset_reason_.rfind("the runtime's journal changed", 0) != 0;
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
    }
    return;
  }
  reset_pending_ = false;
  // Before acceptance a (re)connect (re)sends the message. After a plain drop the replay above has
  // already shown the echo if the runtime got it; a resend under the same requestId covers the case
  // where it never arrived.
  if (phase_ == TurnPhase::subscribing || phase_ == TurnPhase::submitted) {
    step.requests.push_back(ClientRequest::Message(request_id_, prompt_));
    message_sent_ = true;
    phase_ = TurnPhase::submitted;
  }
}

void TurnTracker::HandleOurEvent(const Event& event, TurnStep& step) {
  step.deliver = true;
  if (event.Is(event_type::kTurnStarted)) {
    if (!started_) {
      started_ = true;
      step.started = true;
    }
    phase_ = TurnPhase::running;
  } else if (event.Is(event_type::kUserMessageUpdated)) {
    if (event.revision > 0) revision_ = event.revision;
    if (event.request_id != request_id_) shared_ = true;
  } else if (event.Is(event_type::kUserMessageRemoved)) {
    if (event.revision > 0) revision_ = event.revision;
    Finish(TurnStatus::removed, step);
  } else if (event.Is(event_type::kAssistantDelta)) {
    // Deltas are only the fallback for a turn with no finished message: stop keeping them once one came.
    if (!have_message_ && !AppendReply(deltas_, event.text, false)) FailTooLarge(step);
  } else if (event.Is(event_type::kAssistantMessage)) {
    if (!AppendReply(messages_, event.text, true)) FailTooLarge(step);
  } else if (event.Is(event_type::kError)) {
    if (!event.text.empty()) error_text_ = event.text;
  } else if (event.Is(event_type::kInputRequested)) {
    if (options_.questions == QuestionPolicy::decline) {
      step.requests.push_back(ClientRequest::Decline(NewRequestId(), event.input_id));
      ++declined_;
    } else if (open_inputs_.insert(event.input_id).second) {
      step.question = event;
    }
  } else if (event.Is(event_type::kInputResolved)) {
    // Resolved elsewhere (another client, or cancelled by a runtime restart): nobody can answer it now.
    open_inputs_.erase(event.input_id);
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

void TurnTracker::FailTooLarge(TurnStep& step) {
  // Withdraw the turn while it is still ours to withdraw, then end it: nobody will read the rest.
  for (auto& request : Abandon()) step.requests.push_back(std::move(request));
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
  open_inputs_.clear();
}

void TurnTracker::FailWith(Error error, TurnStep& step) {
  failure_ = std::move(error);
  phase_ = TurnPhase::done;
  step.finished = true;
  open_inputs_.clear();
}

Result<ClientRequest> TurnTracker::Answer(const std::string& input_id,
                                          std::map<std::string, std::vector<std::string>> answers) {
  if (open_inputs_.erase(input_id) == 0) {
    return Fail(Errc::invalid_argument, "input " + input_id + " is not an open question of this turn");
  }
  ++answered_;
  return ClientRequest::Answer(NewRequestId(), input_id, std::move(answers));
}

Result<ClientRequest> TurnTracker::Decline(const std::string& input_id) {
  if (open_inputs_.erase(input_id) == 0) {
    return Fail(Errc::invalid_argument, "input " + input_id + " is not an open question of this turn");
  }
  ++declined_;
  return ClientRequest::Decline(NewRequestId(), input_id);
}

std::vector<ClientRequest> TurnTracker::Abandon() const {
  std::vector<ClientRequest> out;
  if (phase_ == TurnPhase::done || shared_) return out;
  if (phase_ == TurnPhase::running) {
    // Interrupt names no turn: only send it while ours is the one running (it is, until completed).
    out.push_back(ClientRequest::Interrupt(NewRequestId()));
  } else if (phase_ == TurnPhase::queued) {
    out.push_back(ClientRequest::Remove(NewRequestId(), turn_id_, revision_));
  }
  return out;
}

Result<TurnOutcome> TurnTracker::Outcome() const {
  if (phase_ != TurnPhase::done) {
    return Fail(Errc::internal, "TurnTracker::Outcome() called before the turn ended (phase " +
                                    std::string(ToString(phase_)) + ")");
  }
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
