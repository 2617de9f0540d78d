#include "driver/turn_op.hpp"

#include <utility>

namespace sessionturn::driver_detail {

TurnOp::TurnOp(std::shared_ptr<DriverState> driver, PrivateLoop loop, std::string prompt, TurnTrackerOptions tracker,
               TurnOptions options, TurnHandler handler)
    : loop_(std::move(loop)),
      driver_(std::move(driver)),
      strand_(MakeOperationStrand(*driver_, loop_)),
      tracker_(std::move(prompt), std::move(tracker)),
      options_(std::move(options)),
      handler_(std::move(handler)),
      attached_(tracker_.attached()),
      timers_(std::make_shared<OpTimers>(strand_)) {}

void TurnOp::Start() {
  started_at_ = std::chrono::steady_clock::now();
  asio::post(strand_, [self = shared_from_this()] { self->OnStart(); });
}

// Cancel, Detach and Respond come from other threads and hold the turn weakly: a turn that finished
// meanwhile has nothing to do, and on a private loop that its caller no longer runs the queued job
// must not keep the turn (and with it the loop) alive.
void TurnOp::Cancel(Error error) {
  asio::post(strand_, [weak = weak_from_this(), error = std::move(error)]() mutable {
    if (auto self = weak.lock()) self->AbandonWith(std::move(error));
  });
}

void TurnOp::Detach() {
  asio::post(strand_, [weak = weak_from_this()] {
    if (auto self = weak.lock()) self->OnDetach();
  });
}

void TurnOp::Respond(std::string input_id, std::optional<std::map<std::string, std::vector<std::string>>> answers) {
  asio::post(strand_, [weak = weak_from_this(), input_id = std::move(input_id), answers = std::move(answers)]() mutable {
    if (auto self = weak.lock()) self->OnRespond(input_id, std::move(answers));
  });
}

void TurnOp::ReleaseStopped() {
  if (loop_) return;  // runs on its caller's thread, not on the stopped Context
  if (stream_) stream_->Close();
  stream_.reset();
}

void TurnOp::OnStart() {
  // The stream bounds its replay (handshake_timeout after connecting) right after this: the timer
  // waits for that bound from the start, so that neither the deadline nor the handshake re-arms it.
  const auto now = OpTimers::Clock::now();
  if (options_.reconnect.handshake_timeout < options_.timeout) {
    timers_->ExpectBy(now + options_.reconnect.handshake_timeout);
  }
  deadline_ = timers_->At(now + options_.timeout, [self = shared_from_this()] {
    self->deadline_ = 0;
    const std::string& turn = self->tracker_.turn_id();
    self->AbandonWith(Error(Errc::timeout, (turn.empty() ? std::string("the turn") : "turn " + turn) +
                                               " did not complete within " + Seconds(self->options_.timeout)));
  });
  if (options_.cancel.CanBeCancelled()) {
    std::weak_ptr<TurnOp> weak = weak_from_this();
    cancel_id_ = options_.cancel.OnCancel([weak] {
      if (auto self = weak.lock()) self->Cancel(Error(Errc::cancelled, "the turn was cancelled by the caller"));
    });
  }
  if (done_) return;  // cancelled synchronously above
  stream_ = std::make_shared<EventStream>(driver_, loop_, strand_, timers_, options_.reconnect, "turn");
  stream_->Start(weak_from_this());
}

void TurnOp::OnDetach() {
  // A turn already being withdrawn carries on: the caller's cancel (or a too_large reply) came first,
  // and the detach neither undoes it nor cuts its withdrawal short.
  if (done_ || tracker_.Done() || tracker_.Abandoning()) return;
  // Finish writes nothing: no interrupt, no remove, and the open questions stay open for whoever
  // attaches next.
  Finish(Fail(DetachedError()));
}

// Says where the turn is left, so that a log line is enough to find it again.
Error TurnOp::DetachedError() const {
  const std::string& turn = tracker_.turn_id();
  const std::string cursor = " (journal " + tracker_.journal_id() + ", after event " +
                             std::to_string(tracker_.last_event_id()) + "); AttachTurn follows it again";
  switch (tracker_.phase()) {
    case TurnPhase::subscribing:
      return Error(Errc::cancelled,
                   "the turn was detached before its prompt was sent: nothing of it runs in the Session");
    case TurnPhase::submitted:
      if (attached_) {
        return Error(Errc::cancelled,
                     "the attachment to request " + tracker_.request_id() +
                         " was detached before the replay showed its turn; the Session was not touched");
      }
      return Error(Errc::cancelled, "the turn was detached before the runtime confirmed its prompt (request " +
                                        tracker_.request_id() + "): it may be queued or running in the Session" +
                                        cursor + " by that request id");
    case TurnPhase::queued:
      return Error(Errc::cancelled, "turn " + turn + " was detached and is still queued in the Session" + cursor);
    case TurnPhase::running:
    case TurnPhase::done:  // not reached: OnDetach leaves a finished turn alone
      break;
  }
  return Error(Errc::cancelled, "turn " + turn + " was detached and is still running in the Session" + cursor);
}

std::vector<ClientRequest> TurnOp::OnStreamUp(bool /*reconnected*/) {
  std::vector<ClientRequest> requests{tracker_.OnConnected()};
  // A new turn's first connection writes its prompt right behind the subscribe (TurnTracker).
  if (auto message = tracker_.PipelinedMessage()) {
    message_written_at_ = std::chrono::steady_clock::now();
    requests.push_back(std::move(*message));
  }
  return requests;
}

void TurnOp::OnStreamEvent(const Event& event) {
  if (done_) return;
  // An edit of our turn through this Driver leaves it ours; the tracker cannot tell it from a merge.
  if (event.Is(event_type::kUserMessageUpdated) && !event.request_id.empty() &&
      event.request_id != tracker_.request_id() && driver_->IsOwnEdit(event.request_id)) {
    tracker_.AdoptEdit(event.request_id);
  }
  HandleStep(event, tracker_.OnEvent(event));
}

void TurnOp::OnStreamDown(const Error& why) {
  tracker_.OnDisconnected();
  if (done_) return;
  if (tracker_.Abandoning()) {
    // The withdrawal (or the echo we waited for) died with the stream; the grace is not for retries,
    // except when we reconnected precisely to withdraw (then the stream keeps trying within the grace).
    driver_->Log(LogLevel::warning, "turn " + tracker_.turn_id() + ": the stream dropped while withdrawing (" +
                                        why.message + "); the turn may run on");
    Finish(Fail(tracker_.abandon_reason()));
  }
}

void TurnOp::OnStreamFailed(Error error) {
  if (done_) return;
  if (tracker_.Abandoning()) error = tracker_.abandon_reason();  // why the caller gave up, not the transport
  Finish(Fail(std::move(error)));
}

void TurnOp::HandleStep(const Event& event, TurnStep step) {
  const auto now = std::chrono::steady_clock::now();
  if (tracker_.shared() && !shared_told_) {
    shared_told_ = true;
    if (options_.on_shared) CallUser(ctx(), "the on_shared callback", [&] { options_.on_shared(); });
  }
  if (step.accepted) {
    accepted_at_ = now;
    if (!attached_ && options_.on_accepted) {
      CallUser(ctx(), "the on_accepted callback", [&] { options_.on_accepted(tracker_.Ref()); });
    }
  }
  if (step.started) started_at_turn_ = now;
  // Before the event is delivered: a caller that sees input.resolved finds its responder closed.
  for (const auto& id : step.resolved) CloseQuestion(id);
  if (step.deliver && options_.on_event) CallUser(ctx(), "the on_event callback", [&] { options_.on_event(event); });
  if (step.question && !step.finished) SurfaceQuestion(*step.question);
  if (!step.finished) {
    SendAll(std::move(step.requests));
    return;
  }
  completed_at_ = now;
  auto outcome = tracker_.Outcome();
  if (!outcome && !step.requests.empty() && !tracker_.Abandoning()) {
    // A local failure (too_large) carries its withdrawal: write it within the grace, then finish.
    WithdrawThenFinish(std::move(step.requests), outcome.error());
    return;
  }
  SendAll(std::move(step.requests));
  Finish(outcome ? Result<TurnResult>(MakeResult(std::move(*outcome))) : Fail(outcome.error()));
}

void TurnOp::SendAll(std::vector<ClientRequest> requests) {
  for (auto& request : requests) {
    if (request.type == request_type::kMessage) message_written_at_ = std::chrono::steady_clock::now();
    if (!tracker_.Abandoning()) {
      stream_->Send(request);
      continue;
    }
    // While withdrawing, a write that fails means the withdrawal did not reach the runtime: say so.
    stream_->Send(request, [self = shared_from_this(), type = request.type](Status status) {
      if (status) return;
      asio::post(self->strand_, [self, type, status] {
        if (self->done_) return;
        self->driver_->Log(LogLevel::warning, "could not write the withdrawal (" + type + "): " + status.error().message);
        self->Finish(Fail(self->tracker_.abandon_reason()));
      });
    });
  }
}

// Deadline or cancel: withdraw what is ours to withdraw (DESIGN.md §4.5), then report `error`. The
// grace applies only when something may still run: a message written long ago and never echoed was
// not accepted, so the turn's timeout stays its bound.
void TurnOp::AbandonWith(Error error) {
  if (done_ || tracker_.Abandoning()) return;
  timers_->Cancel(deadline_);
  const auto now = std::chrono::steady_clock::now();
  const bool connected = stream_ && stream_->connected();
  const auto grace = options_.abandon_grace;
  const bool echo_expected = message_written_at_ && now - *message_written_at_ < grace;
  AbandonPlan plan = tracker_.Abandon(error, connected, echo_expected);
  switch (plan.action) {
    case AbandonAction::finish:
      Finish(Fail(std::move(error)));
      return;
    case AbandonAction::withdraw:
      SendAll(std::move(plan.requests));
      StartGrace(grace);
      return;
    case AbandonAction::await_echo:
      StartGrace(std::chrono::duration_cast<std::chrono::milliseconds>(*message_written_at_ + grace - now));
      return;
    case AbandonAction::reconnect:
      // Between connections with a turn of ours to withdraw: reconnect now (not after the backoff),
      // catch up with the replay, and withdraw the turn as it is then, all within the grace.
      if (!options_.reconnect.enabled || !stream_) {
        driver_->Log(LogLevel::warning, "abandoning turn " + tracker_.turn_id() +
                                            " while disconnected with reconnecting disabled: it may run on");
        Finish(Fail(std::move(error)));
        return;
      }
      StartGrace(grace);  // first: the reconnect may report (and go on) before ReconnectNow returns
      stream_->ReconnectNow();
      return;
  }
}

void TurnOp::StartGrace(std::chrono::milliseconds grace) {
  timers_->Cancel(grace_);
  grace_ = timers_->After(grace, [self = shared_from_this()] {
    self->grace_ = 0;
    if (self->done_) return;
    if (self->tracker_.Accepted()) {
      self->driver_->Log(LogLevel::warning, "abandoning turn " + self->tracker_.turn_id() +
                                                ": the runtime did not confirm its withdrawal within " +
                                                Seconds(self->options_.abandon_grace) + "; it may run on");
    }
    self->Finish(Fail(self->tracker_.abandon_reason()));
  });
}

void TurnOp::WithdrawThenFinish(std::vector<ClientRequest> requests, Error error) {
  timers_->Cancel(deadline_);
  auto remaining = std::make_shared<std::size_t>(requests.size());
  for (auto& request : requests) {
    stream_->Send(request, [self = shared_from_this(), remaining, error](Status status) {
      asio::post(self->strand_, [self, remaining, error, status] {
        if (!status) self->driver_->Log(LogLevel::warning, "could not write the withdrawal: " + status.error().message);
        if (--*remaining == 0 || !status) self->Finish(Fail(error));
      });
    });
  }
  timers_->Cancel(grace_);
  grace_ = timers_->After(options_.abandon_grace, [self = shared_from_this(), error] {
    self->grace_ = 0;
    self->Finish(Fail(error));
  });
}

TurnResult TurnOp::MakeResult(TurnOutcome outcome) const {
  TurnResult r;
  r.request_id = tracker_.request_id();
  r.turn_id = std::move(outcome.turn_id);
  r.status = outcome.status;
  r.text = std::move(outcome.text);
  r.error_message = std::move(outcome.error_message);
  r.questions_declined = outcome.questions_declined;
  r.questions_answered = outcome.questions_answered;
  r.shared = outcome.shared;
  r.reconnects = stream_ ? stream_->reconnects() : 0;
  r.last_event_id = tracker_.last_event_id();
  r.journal_id = tracker_.journal_id();
  auto since = [this](std::optional<std::chrono::steady_clock::time_point> t) -> std::optional<std::chrono::milliseconds> {
    if (!t) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::milliseconds>(*t - started_at_);
  };
  r.time_to_accepted = since(accepted_at_);
  r.time_to_started = since(started_at_turn_);
  r.time_to_completed = since(completed_at_);
  return r;
}

void TurnOp::SurfaceQuestion(const Event& event) {
  auto impl = std::make_shared<Responder::Impl>();
  impl->op = weak_from_this();
  impl->input_id = event.input_id;
  responders_[event.input_id] = impl;
  if (auto it = answer_timers_.find(event.input_id); it != answer_timers_.end()) timers_->Cancel(it->second);
  answer_timers_[event.input_id] = timers_->After(options_.answer_timeout, [self = shared_from_this(), impl] {
    self->answer_timers_.erase(impl->input_id);
    if (impl->used.exchange(true)) return;
    self->driver_->Log(LogLevel::info, "no answer to input " + impl->input_id + " within " +
                                           Seconds(self->options_.answer_timeout) + ": declining it");
    self->OnRespond(impl->input_id, std::nullopt);
  });
  if (options_.on_question) {
    CallUser(ctx(), "the on_question callback", [&] { options_.on_question(event, Responder(impl)); });
  }
}

void TurnOp::CloseQuestion(const std::string& input_id) {
  // Resolved by the runtime (another client answered, or a restart cancelled it): nobody can answer it
  // now, so the responder reports false and the answer timer must not decline it later.
  if (auto it = answer_timers_.find(input_id); it != answer_timers_.end()) {
    timers_->Cancel(it->second);
    answer_timers_.erase(it);
  }
  if (auto it = responders_.find(input_id); it != responders_.end()) {
    it->second->used.store(true);
    responders_.erase(it);
  }
}

void TurnOp::OnRespond(const std::string& input_id,
                       std::optional<std::map<std::string, std::vector<std::string>>> answers) {
  if (auto it = answer_timers_.find(input_id); it != answer_timers_.end()) {
    timers_->Cancel(it->second);
    answer_timers_.erase(it);
  }
  responders_.erase(input_id);
  if (done_ || tracker_.Abandoning()) return;
  auto request = answers ? tracker_.Answer(input_id, std::move(*answers)) : tracker_.Decline(input_id);
  if (!request) {
    driver_->Log(LogLevel::debug, request.error().message);
    return;
  }
  // While disconnected the tracker writes it after the next replay (with every unresolved decision).
  if (stream_ && stream_->connected()) stream_->Send(*request);
}

void TurnOp::Finish(Result<TurnResult> result) {
  if (done_) return;
  done_ = true;
  finished_.store(true);
  deadline_ = 0;
  grace_ = 0;
  answer_timers_.clear();
  timers_->CancelAll();  // with the stream's: nothing of the turn waits any more
  for (auto& [id, impl] : responders_) impl->used.store(true);
  responders_.clear();
  if (cancel_id_ != 0) options_.cancel.Unregister(cancel_id_);
  if (stream_) stream_->Close();
  {
    std::lock_guard lock(driver_->mu);
    driver_->turns.erase(this);
  }
  driver_->idle.notify_all();
  auto handler = std::move(handler_);
  handler_ = nullptr;
  // Release the caller's callbacks now: they may hold resources the caller wants back.
  options_.on_event = nullptr;
  options_.on_question = nullptr;
  options_.on_accepted = nullptr;
  options_.on_shared = nullptr;
  if (handler) CallUser(ctx(), "the turn's completion handler", [&] { handler(std::move(result)); });
}

}  // namespace sessionturn::driver_detail

namespace sessionturn {

bool Responder::Answer(std::map<std::string, std::vector<std::string>> answers) const {
  if (!impl_ || impl_->used.exchange(true)) return false;
  auto op = impl_->op.lock();
  if (!op || op->finished()) return false;
  op->Respond(impl_->input_id, std::move(answers));
  return true;
}

bool Responder::Decline() const {
  if (!impl_ || impl_->used.exchange(true)) return false;
  auto op = impl_->op.lock();
  if (!op || op->finished()) return false;
  op->Respond(impl_->input_id, std::nullopt);
  return true;
}

std::string Responder::input_id() const { return impl_ ? impl_->input_id : std::string(); }

}  // namespace sessionturn
