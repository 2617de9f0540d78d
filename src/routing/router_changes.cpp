// Changes to a turn that has not started: the author's edit or deletion of its message, and `stop`.
// Before its prompt is sent the router changes it in place (or ends it, never sending it); once the
// runtime has it queued behind another client's turn, `message.edit` / `message.remove` change it there,
// one change at a time, guarded by its revision. A turn merged with another client's prompt is never
// changed or withdrawn: that would change theirs too.
#include "routing/router_impl.hpp"

namespace sessionturn {

using routing::TurnRun;
using routing::TurnStage;

namespace {

routing::TurnChange& ChangeOf(TurnRun& turn) {
  if (!turn.change) turn.change = std::make_unique<routing::TurnChange>();
  return *turn.change;
}

// The runtime says the turn is no longer pending (it started, or ended) rather than refusing the
// revision we named.
bool NoLongerPending(const Error& e) {
  return e.code == Errc::rejected && e.message.find("no longer pending") != std::string::npos;
}

}  // namespace

void Router::Impl::ChangeRunning(const std::shared_ptr<TurnRun>& turn, const InboundMessage& m) {
  const bool deleted = m.kind == MessageKind::deleted;
  if (!turn->attached && !turn->submitted) {
    // Not sent yet (its Session wakes, or the thread's history is fetched): changed here.
    if (deleted) {
      WithdrawUnsent(turn, "The message was deleted before its turn started: withdrawn.");
      return;
    }
    turn->message.text = m.text;
    turn->message.attachments_text = m.attachments_text;
    if (!turn->prompt.empty()) turn->prompt = PromptOf(turn->message, turn->context);
    Note(turn->where, "\u270F\uFE0F Edited before its turn started: the agent will answer the new text.", turn->session,
         m.message_id);
    return;
  }
  if (!turn->attached && !turn->accepted && turn->stage != TurnStage::running) {
    // On its way to the runtime (its acceptance not seen yet): changed once the runtime has it.
    ChangeOf(*turn).pending = std::make_unique<InboundMessage>(m);
    return;
  }
  ChangeQueued(turn, m);
}

void Router::Impl::ChangeQueued(const std::shared_ptr<TurnRun>& turn, const InboundMessage& m) {
  const bool deleted = m.kind == MessageKind::deleted;
  routing::TurnChange& change = ChangeOf(*turn);
  if (change.in_flight) {
    change.pending = std::make_unique<InboundMessage>(m);  // the latest waits for the one on its way
    return;
  }
  auto note = [turn, id = m.message_id](Impl& r, const std::string& text) { r.Note(turn->where, text, turn->session, id); };
  if (turn->shared) {
    return note(*this, deleted ? "The message was deleted, but in the Session it was merged with another client's "
                                 "message: withdrawing it would withdraw theirs too, so it runs as sent."
                               : "The message was edited, but in the Session it was merged with another client's "
                                 "message: changing it would change theirs too, so it runs as sent.");
  }
  if (turn->attached && turn->stage != TurnStage::running && turn->ref.revision <= 0) {
    // Re-attached after a restart before the replay said at which revision it waits: the revision went
    // with the last run.
    return note(*this, deleted ? "The message was deleted, but the bot restarted since it was sent and cannot "
                                 "withdraw it any more: it runs (`stop` interrupts it once it does)."
                               : "The message was edited, but the bot restarted since it was sent and cannot change "
                                 "it any more: it runs as sent.");
  }
  routing::SessionRun* const run = RunOf(*turn);
  // Queued in the runtime (accepted, behind another client's turn): the runtime can still change it.
  if (turn->stage != TurnStage::queued || turn->ref.turn_id.empty() || turn->ref.revision <= 0 || run == nullptr ||
      !run->driver) {
    return note(*this, deleted ? "The message was deleted, but its turn had already started: it goes on (`stop` "
                                 "interrupts it)."
                               : "The message was edited, but its turn had already started: the running turn was "
                                 "not changed.");
  }
  auto driver = run->driver;
  change.in_flight = true;
  auto refused = [turn, deleted, note](Impl& r, const Error& e) {
    r.Log(LogLevel::info, std::string(deleted ? "withdrawing" : "editing") + " queued turn " + turn->ref.turn_id +
                              " failed: " + e.ToString());
    note(r, NoLongerPending(e) ? std::string(deleted ? "The message was deleted, but its turn had already started: "
                                                       "it goes on."
                                                     : "The message was edited, but its turn had already started: "
                                                       "it runs as sent.")
                               : "\u26A0\uFE0F The Session did not take the change (" + EscapeMarkdown(e.message) +
                                     "); the turn may run as sent.");
  };
  if (deleted) {
    // Success ends the turn as removed: its placeholder says so (OnResult).
    driver->AsyncRemoveQueued(turn->ref.turn_id, turn->ref.revision,
                              OnStrand<Status>([turn, refused](Impl& r, Status st) {
                                turn->change->in_flight = false;
                                if (!st) refused(r, st.error());
                                r.ApplyPendingChange(turn);
                              }));
    return;
  }
  InboundMessage edited = turn->message;
  edited.text = m.text;
  edited.attachments_text = m.attachments_text;
  std::string prompt = PromptOf(edited, turn->context);
  driver->AsyncEditQueued(
      turn->ref.turn_id, prompt, turn->ref.revision,
      OnStrand<Result<std::int64_t>>([turn, edited, prompt, refused, note](Impl& r, Result<std::int64_t> revision) {
        turn->change->in_flight = false;
        if (!revision) {
          refused(r, revision.error());
        } else {
          turn->ref.revision = std::max(turn->ref.revision, *revision);
          turn->message = edited;
          turn->prompt = prompt;
          note(r, "\u270F\uFE0F Edited before its turn started: the agent will answer the new text.");
        }
        r.ApplyPendingChange(turn);
      }));
}

void Router::Impl::ApplyPendingChange(const std::shared_ptr<TurnRun>& turn) {
  if (!turn->change || !turn->change->pending || turn->change->in_flight || turn->done) return;
  InboundMessage m = std::move(*turn->change->pending);
  turn->change->pending.reset();
  ChangeQueued(turn, m);
}

void Router::Impl::WithdrawUnsent(const std::shared_ptr<TurnRun>& turn, std::string why) {
  ChangeOf(*turn).withdrawn = std::move(why);
  // Ended now, its reply stored with the turn's end: a restart does not send it. What it waited for
  // (the Session's wake, cancelled here; its creation or the thread's history, which cannot be) finds
  // it done when it comes back, and sends nothing.
  turn->cancel.Cancel();
  TurnResult removed;
  removed.request_id = turn->request_id;
  removed.status = TurnStatus::removed;
  OnResult(turn, std::move(removed));
}

void Router::Impl::StopTurn(routing::SessionRun& s, const ThreadRef& where, const std::string& reply_to) {
  const std::shared_ptr<TurnRun> turn = s.running;
  auto note = [where, session = s.name, reply_to](Impl& r, const std::string& text) {
    r.Note(where, text, session, reply_to);
  };
  if (!turn || turn->done) return note(*this, "Nothing is running.");
  if (!turn->attached && !turn->submitted) {
    WithdrawUnsent(turn, "\u23F9 Stopped before it reached the agent.");
    return note(*this, "\u23F9 Stopped before it reached the agent.");
  }
  if (!turn->attached && !turn->accepted && turn->stage != TurnStage::running) {
    return note(*this, "The message is on its way to the Session: send " + MarkdownCode(caps.command_prefix + "stop") +
                           " again in a moment.");
  }
  auto interrupt = [where, session = s.name, note](Impl& r) {
    auto it = r.sessions.find(session);
    if (it == r.sessions.end() || !it->second->driver) {
      return note(r, "\u26A0\uFE0F The turn could not be stopped: the Session is not connected. Try again in a moment.");
    }
    it->second->driver->AsyncInterrupt(r.OnStrand<Status>([note](Impl& r2, Status st) {
      note(r2, st ? "\u23F9 Stopping the running turn\u2026 its message will say when it ended."
                  : "\u26A0\uFE0F The turn could not be stopped: " + EscapeMarkdown(st.error().message));
    }));
  };
  if (turn->stage != TurnStage::queued) return interrupt(*this);
  // Queued behind another client's turn: withdrawn from the Session's queue, never interrupting theirs.
  if (turn->shared) {
    return note(*this, "Its message was merged with another client's in the Session's queue: withdrawing it would "
                       "withdraw theirs too. It runs when its turn comes; " +
                           MarkdownCode(caps.command_prefix + "stop") + " then interrupts it.");
  }
  if (!s.driver || (turn->change && turn->change->in_flight)) {
    return note(*this, "The turn is being changed: send " + MarkdownCode(caps.command_prefix + "stop") +
                           " again in a moment.");
  }
  ChangeOf(*turn).in_flight = true;
  s.driver->AsyncRemoveQueued(turn->ref.turn_id, turn->ref.revision,
                              OnStrand<Status>([turn, note, interrupt](Impl& r, Status st) {
                                turn->change->in_flight = false;
                                if (st) {
                                  note(r, "\u23F9 Withdrawn from the Session's queue before it started.");
                                } else if (NoLongerPending(st.error()) && !turn->done &&
                                           turn->stage == TurnStage::running) {
                                  interrupt(r);  // it started meanwhile: the turn running now is ours
                                } else {
                                  // Not known to be ours that runs now (it may have ended, or not be seen
                                  // starting yet): nothing else is interrupted.
                                  note(r, "\u26A0\uFE0F The turn could not be withdrawn (" +
                                              EscapeMarkdown(st.error().message) + "): send " +
                                              MarkdownCode(r.caps.command_prefix + "stop") +
                                              " again if it is still running.");
                                }
                                r.ApplyPendingChange(turn);
                              }));
}

}  // namespace sessionturn
