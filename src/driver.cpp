// The Driver facade: validates, creates the operations (driver/turn_op, watch_op, one_shot_op) and
// waits for them in the blocking forms and the destructor.
#include "sessionturn/driver.hpp"

#include <cstdint>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include "driver/caller_loop.hpp"
#include "driver/driver_impl.hpp"
#include "driver/one_shot_op.hpp"
#include "driver/turn_op.hpp"
#include "driver/watch_op.hpp"

namespace sessionturn {

using driver_detail::OneShotHandler;
using driver_detail::PrivateLoop;
using driver_detail::OneShotOp;
using driver_detail::TurnOp;
using driver_detail::WatchOp;

namespace {
// The turns in flight now, held so that they can be told something after the lock is released.
std::vector<std::shared_ptr<TurnOp>> LiveTurns(Driver::Impl& impl) {
  std::vector<std::shared_ptr<TurnOp>> turns;
  std::lock_guard lock(impl.mu);
  for (auto& [key, weak] : impl.turns) {
    if (auto op = weak.lock()) turns.push_back(std::move(op));
  }
  return turns;
}
}  // namespace

// ---- Driver --------------------------------------------------------------------------------------

Driver::Driver(Context& context, std::shared_ptr<Connector> connector)
    : impl_(std::make_shared<Impl>(context, std::move(connector))) {}

Driver::~Driver() {
  std::vector<std::shared_ptr<TurnOp>> turns = LiveTurns(*impl_);
  std::vector<std::shared_ptr<WatchOp>> watches;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [key, weak] : impl_->watches) {
      if (auto op = weak.lock()) watches.push_back(std::move(op));
    }
  }
  if (impl_->context.Joined()) {
    // Nothing runs any more, so nothing will finish them: release their connections here (a pending
    // read holds its stream, and the stream its connection) so they are freed with the Context.
    for (auto& op : turns) op->ReleaseStopped();
    for (auto& op : watches) op->ReleaseStopped();
    return;
  }
  for (auto& op : turns) op->Cancel(Error(Errc::cancelled, "the Driver was destroyed while the turn was in flight"));
  for (auto& op : watches) op->Stop();
  // Give the abandoned turns their grace to write the withdrawal and close: returning at once would
  // let the caller destroy the Context under them, leaving turns unwithdrawn and connections open.
  // On a worker the wait would block the very thread they need, so there it does not wait.
  // A stopped Context runs nothing any more: there is nobody to wait for.
  // Nor inside a callback of a blocking call on this thread's caller loop: those turns need this thread.
  if (impl_->context.InWorkerThread() || impl_->context.Stopped() || driver_detail::caller_loop_depth > 0) return;
  std::unique_lock lock(impl_->mu);
  impl_->idle.wait_for(lock, kAbandonGrace + driver_detail::kDestructorWaitMargin, [this] { return impl_->Idle(); });
}

namespace {

using driver_detail::StoppedContextError;

Status ValidateOptions(const TurnOptions& options) {
  if (options.questions == QuestionPolicy::ask && !options.on_question) {
    return Fail(Errc::invalid_argument, "QuestionPolicy::ask needs an on_question callback");
  }
  if (options.reconnect.max_attempts < 0) return Fail(Errc::invalid_argument, "reconnect.max_attempts is negative");
  // Every wait has a deadline: a zero or negative one is a mistake, not "forever".
  if (options.timeout.count() <= 0) return Fail(Errc::invalid_argument, "the turn timeout must be positive");
  if (options.answer_timeout.count() <= 0) return Fail(Errc::invalid_argument, "answer_timeout must be positive");
  if (options.abandon_grace.count() < 0) return Fail(Errc::invalid_argument, "abandon_grace must not be negative");
  return {};
}

// A prompt, or the new text of a queued turn (`what` names it): the runtime parses both as commands.
Status ValidatePrompt(const std::string& text, bool allow_commands, const std::string& what) {
  if (TrimUnicodeSpace(text).empty()) return Fail(Errc::invalid_argument, what + " is empty");
  if (!allow_commands && IsRuntimeCommand(text)) {
    return Fail(Errc::invalid_argument,
                what + " would run as a runtime command ('!' shell or '/goal'); set allow_commands to send it");
  }
  return {};
}

Status ValidateTurn(const std::string& prompt, const TurnOptions& options) {
  if (auto valid = ValidatePrompt(prompt, options.allow_commands, "the prompt"); !valid) return valid;
  return ValidateOptions(options);
}

Status ValidateAttach(const TurnRef& ref, const TurnOptions& options) {
  if (ref.request_id.empty() && ref.turn_id.empty()) {
    return Fail(Errc::invalid_argument, "AttachTurn needs the turn's request_id or turn_id");
  }
  if (ref.last_event_id < 0) return Fail(Errc::invalid_argument, "AttachTurn: last_event_id is negative");
  return ValidateOptions(options);
}

using blocking::ReportNow;

// A failed check, reported without I/O: on a Context worker for an async call, here and now for a
// blocking call on a private loop (its caller waits for exactly this; a job on a Context that is being
// stopped could be dropped, and the caller would wait out its whole bound).
template <typename Handler, typename Value>
void ReportEarly(Context& context, const driver_detail::PrivateLoop& loop, Handler handler, Value value) {
  if (loop) {
    if (handler) handler(std::move(value));
    return;
  }
  ReportNow(context, std::move(handler), std::move(value));
}

}  // namespace

namespace {
// Starts a turn op once the checks passed; a failed check is reported without I/O (and no op).
std::shared_ptr<TurnOp> StartTurn(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop, Status valid,
                                  std::string prompt, TurnTrackerOptions tracker, TurnOptions options,
                                  TurnHandler handler) {
  if (impl->context.Stopped() && !loop) {
    ReportEarly(impl->context, loop, std::move(handler), Result<TurnResult>(Fail(StoppedContextError("the turn"))));
    return nullptr;
  }
  if (!valid) {
    ReportEarly(impl->context, loop, std::move(handler), Result<TurnResult>(Fail(valid.error())));
    return nullptr;
  }
  if (options.cancel.IsCancelled()) {
    ReportEarly(impl->context, loop, std::move(handler),
              Result<TurnResult>(Fail(Errc::cancelled, "the turn was cancelled before it started")));
    return nullptr;
  }
  auto op = std::make_shared<TurnOp>(impl, std::move(loop), std::move(prompt), std::move(tracker), std::move(options),
                                     std::move(handler));
  {
    std::lock_guard lock(impl->mu);
    impl->turns.emplace(op.get(), op);
  }
  op->Start();
  return op;
}

std::shared_ptr<TurnOp> SubmitOn(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop, std::string prompt,
                                 TurnOptions options, TurnHandler handler) {
  Status valid = ValidateTurn(prompt, options);
  TurnTrackerOptions tracker{options.questions, options.request_id, std::nullopt};
  return StartTurn(impl, std::move(loop), std::move(valid), std::move(prompt), std::move(tracker), std::move(options),
                   std::move(handler));
}

std::shared_ptr<TurnOp> AttachOn(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop, TurnRef ref,
                                 TurnOptions options, TurnHandler handler) {
  Status valid = ValidateAttach(ref, options);
  TurnTrackerOptions tracker{options.questions, {}, std::move(ref)};
  return StartTurn(impl, std::move(loop), std::move(valid), std::string(), std::move(tracker), std::move(options),
                   std::move(handler));
}

// A blocking verb. With a connector that runs connections on our strand, the operation `start`
// makes runs on a private loop on this thread (driver/caller_loop.hpp: no thread hand-off);
// otherwise on the Context, with this thread waiting for its report.
// `keep_waiting` (TurnOptions::keep_waiting) is asked on this thread about every 100 ms.
template <typename T, typename Op, typename Start>
Result<T> Blocking(Driver::Impl& impl, std::chrono::milliseconds bound, const char* what, Start start,
                   const std::function<bool()>& keep_waiting = {}) {
  std::shared_ptr<Op> op;
  auto cancel = [&op](Error error) {
    if (op) op->Cancel(std::move(error));
  };
  if (!impl.connector->ConnectsOnStrand() || impl.context.Stopped()) {
    bool given_up = false;
    return blocking::Call<T>(
        impl.context, bound, what, [&](auto handler) { op = start(nullptr, std::move(handler)); },
        [&] {
          if (!keep_waiting || given_up || driver_detail::KeepWaiting(keep_waiting)) return;
          given_up = true;
          cancel(Error(Errc::cancelled, "the turn was cancelled by the caller"));
        });
  }
  return driver_detail::RunOnCallerLoop<T>(
      impl.context, bound, what, [&](PrivateLoop loop, auto handler) { op = start(std::move(loop), std::move(handler)); },
      cancel, keep_waiting);
}
}  // namespace

void Driver::AsyncSubmitTurn(std::string prompt, TurnOptions options, TurnHandler handler) {
  SubmitOn(impl_, nullptr, std::move(prompt), std::move(options), std::move(handler));
}

void Driver::AsyncAttachTurn(TurnRef ref, TurnOptions options, TurnHandler handler) {
  AttachOn(impl_, nullptr, std::move(ref), std::move(options), std::move(handler));
}

Result<TurnResult> Driver::SubmitTurn(std::string prompt, TurnOptions options) {
  const auto bound = options.timeout + options.abandon_grace;
  std::function<bool()> keep_waiting = std::move(options.keep_waiting);
  return Blocking<TurnResult, TurnOp>(
      *impl_, bound, "SubmitTurn",
      [&](PrivateLoop loop, TurnHandler h) {
        return SubmitOn(impl_, std::move(loop), std::move(prompt), std::move(options), std::move(h));
      },
      keep_waiting);
}

Result<TurnResult> Driver::AttachTurn(TurnRef ref, TurnOptions options) {
  const auto bound = options.timeout + options.abandon_grace;
  std::function<bool()> keep_waiting = std::move(options.keep_waiting);
  return Blocking<TurnResult, TurnOp>(
      *impl_, bound, "AttachTurn",
      [&](PrivateLoop loop, TurnHandler h) {
        return AttachOn(impl_, std::move(loop), std::move(ref), std::move(options), std::move(h));
      },
      keep_waiting);
}

WatchHandle Driver::Watch(WatchOptions options, WatchCallback callback, WatchEndHandler on_end) {
  auto handle_impl = std::make_shared<WatchHandle::Impl>();
  if (impl_->context.Stopped()) {
    // Nothing would run it: report the end here and hand back an inactive handle.
    handle_impl->op = std::make_shared<WatchOp>(impl_, std::move(options), WatchCallback{}, WatchEndHandler{});
    handle_impl->op->Stop();
    if (on_end) on_end(Fail(StoppedContextError("the watch")));
    return WatchHandle(std::move(handle_impl));
  }
  auto op = std::make_shared<WatchOp>(impl_, std::move(options), std::move(callback), std::move(on_end));
  handle_impl->op = op;
  {
    std::lock_guard lock(impl_->mu);
    impl_->watches.emplace(op.get(), op);
  }
  op->Start();
  return WatchHandle(std::move(handle_impl));
}

namespace {
// Every wait has a deadline: a zero or negative one is a mistake, not "forever".
Status ValidateTimeout(std::chrono::milliseconds timeout, const std::string& what) {
  if (timeout.count() <= 0) return Fail(Errc::invalid_argument, what + ": the timeout must be positive");
  return {};
}

Status ValidateQueued(const std::string& turn_id, std::int64_t expected_revision, std::chrono::milliseconds timeout,
                      const std::string& what) {
  if (turn_id.empty()) return Fail(Errc::invalid_argument, what + " needs the queued turn's id");
  if (expected_revision <= 0) {
    // The runtime refuses it too; said here, the caller learns where the number comes from.
    return Fail(Errc::invalid_argument, what +
                                            ": expected_revision must be positive (the turn's revision: 1 when "
                                            "it was accepted, then that of its last user.message.updated)");
  }
  return ValidateTimeout(timeout, what);
}

// Starts a one-shot request once the checks passed; a failed check is reported without I/O (and no op).
std::shared_ptr<OneShotOp> StartOneShot(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop, Status valid,
                                        ClientRequest request, std::chrono::milliseconds timeout,
                                        OneShotHandler handler, const char* what) {
  if (impl->context.Stopped() && !loop) {
    ReportEarly(impl->context, loop, std::move(handler), Result<Event>(Fail(StoppedContextError(what))));
    return nullptr;
  }
  if (valid) valid = ValidateTimeout(timeout, what);
  if (!valid) {
    ReportEarly(impl->context, loop, std::move(handler), Result<Event>(Fail(valid.error())));
    return nullptr;
  }
  auto op = std::make_shared<OneShotOp>(impl, std::move(loop), std::move(request), timeout, std::move(handler));
  op->Start();
  return op;
}

// For the requests whose caller only needs to know whether the runtime carried them out.
OneShotHandler ReportStatus(Driver::StatusHandler handler) {
  return [handler = std::move(handler)](Result<Event> settled) {
    if (handler) handler(settled ? Status{} : Status(Fail(settled.error())));
  };
}

std::shared_ptr<OneShotOp> InterruptOn(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop,
                                       Driver::StatusHandler handler, std::chrono::milliseconds timeout) {
  return StartOneShot(impl, std::move(loop), {}, ClientRequest::Interrupt(NewRequestId()), timeout,
                      ReportStatus(std::move(handler)), "Interrupt");
}

std::shared_ptr<OneShotOp> AnswerOn(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop, std::string input_id,
                                    std::map<std::string, std::vector<std::string>> answers,
                                    Driver::StatusHandler handler, std::chrono::milliseconds timeout) {
  return StartOneShot(impl, std::move(loop), {},
                      ClientRequest::Answer(NewRequestId(), std::move(input_id), std::move(answers)), timeout,
                      ReportStatus(std::move(handler)), "Answer");
}

std::shared_ptr<OneShotOp> DeclineOn(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop, std::string input_id,
                                     Driver::StatusHandler handler, std::chrono::milliseconds timeout) {
  return StartOneShot(impl, std::move(loop), {}, ClientRequest::Decline(NewRequestId(), std::move(input_id)), timeout,
                      ReportStatus(std::move(handler)), "Decline");
}

std::shared_ptr<OneShotOp> EditQueuedOn(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop,
                                        std::string turn_id, std::string text, std::int64_t expected_revision,
                                        Driver::RevisionHandler handler, const EditOptions& options) {
  Status valid = ValidateQueued(turn_id, expected_revision, options.timeout, "EditQueued");
  if (valid) valid = ValidatePrompt(text, options.allow_commands, "the edited text");
  auto request = ClientRequest::Edit(NewRequestId(), std::move(turn_id), std::move(text), expected_revision);
  // Noted before it is written: the edited turn's own stream may see the update before this one does.
  if (valid) impl->NoteOwnEdit(request.request_id);
  return StartOneShot(
      impl, std::move(loop), std::move(valid), std::move(request), options.timeout,
      [handler = std::move(handler), expected_revision](Result<Event> settled) {
        if (!handler) return;
        if (!settled) return handler(Fail(settled.error()));
        // The runtime numbers revisions; one that left the number out still moved it on by one.
        handler(settled->revision > 0 ? settled->revision : expected_revision + 1);
      },
      "EditQueued");
}

std::shared_ptr<OneShotOp> RemoveQueuedOn(const std::shared_ptr<Driver::Impl>& impl, PrivateLoop loop,
                                          std::string turn_id, std::int64_t expected_revision,
                                          Driver::StatusHandler handler, std::chrono::milliseconds timeout) {
  Status valid = ValidateQueued(turn_id, expected_revision, timeout, "RemoveQueued");
  return StartOneShot(impl, std::move(loop), std::move(valid),
                      ClientRequest::Remove(NewRequestId(), std::move(turn_id), expected_revision), timeout,
                      ReportStatus(std::move(handler)), "RemoveQueued");
}

// A blocking one-shot verb that reports a Status.
template <typename Start>
Status BlockingStatus(Driver::Impl& impl, std::chrono::milliseconds timeout, const char* what, Start start) {
  auto result = Blocking<bool, OneShotOp>(impl, timeout, what, [&](PrivateLoop loop, auto done) {
    return start(std::move(loop), [done = std::move(done)](Status status) mutable {
      if (status) {
        done(true);
      } else {
        done(Fail(status.error()));
      }
    });
  });
  if (!result) return Fail(result.error());
  return {};
}
}  // namespace

void Driver::AsyncInterrupt(StatusHandler handler, std::chrono::milliseconds timeout) {
  InterruptOn(impl_, nullptr, std::move(handler), timeout);
}

void Driver::AsyncAnswer(std::string input_id, std::map<std::string, std::vector<std::string>> answers,
                         StatusHandler handler, std::chrono::milliseconds timeout) {
  AnswerOn(impl_, nullptr, std::move(input_id), std::move(answers), std::move(handler), timeout);
}

void Driver::AsyncDecline(std::string input_id, StatusHandler handler, std::chrono::milliseconds timeout) {
  DeclineOn(impl_, nullptr, std::move(input_id), std::move(handler), timeout);
}

void Driver::AsyncEditQueued(std::string turn_id, std::string text, std::int64_t expected_revision,
                             RevisionHandler handler, EditOptions options) {
  EditQueuedOn(impl_, nullptr, std::move(turn_id), std::move(text), expected_revision, std::move(handler), options);
}

void Driver::AsyncRemoveQueued(std::string turn_id, std::int64_t expected_revision, StatusHandler handler,
                               std::chrono::milliseconds timeout) {
  RemoveQueuedOn(impl_, nullptr, std::move(turn_id), expected_revision, std::move(handler), timeout);
}

Status Driver::Interrupt(std::chrono::milliseconds timeout) {
  return BlockingStatus(*impl_, timeout, "Interrupt", [&](PrivateLoop loop, StatusHandler h) {
    return InterruptOn(impl_, std::move(loop), std::move(h), timeout);
  });
}

Status Driver::Answer(const std::string& input_id, std::map<std::string, std::vector<std::string>> answers,
                      std::chrono::milliseconds timeout) {
  return BlockingStatus(*impl_, timeout, "Answer", [&](PrivateLoop loop, StatusHandler h) {
    return AnswerOn(impl_, std::move(loop), input_id, std::move(answers), std::move(h), timeout);
  });
}

Status Driver::Decline(const std::string& input_id, std::chrono::milliseconds timeout) {
  return BlockingStatus(*impl_, timeout, "Decline", [&](PrivateLoop loop, StatusHandler h) {
    return DeclineOn(impl_, std::move(loop), input_id, std::move(h), timeout);
  });
}

Result<std::int64_t> Driver::EditQueued(const std::string& turn_id, std::string text, std::int64_t expected_revision,
                                        EditOptions options) {
  return Blocking<std::int64_t, OneShotOp>(*impl_, options.timeout, "EditQueued", [&](PrivateLoop loop, RevisionHandler h) {
    return EditQueuedOn(impl_, std::move(loop), turn_id, std::move(text), expected_revision, std::move(h), options);
  });
}

Status Driver::RemoveQueued(const std::string& turn_id, std::int64_t expected_revision,
                            std::chrono::milliseconds timeout) {
  return BlockingStatus(*impl_, timeout, "RemoveQueued", [&](PrivateLoop loop, StatusHandler h) {
    return RemoveQueuedOn(impl_, std::move(loop), turn_id, expected_revision, std::move(h), timeout);
  });
}

void Driver::DetachTurns() {
  // Each turn ends on its own strand, after whatever it is doing now; a cancel posted before this
  // (or the destructor's, posted after) is ordered with it there.
  for (auto& op : LiveTurns(*impl_)) op->Detach();
}

std::size_t Driver::TurnsInFlight() const {
  std::lock_guard lock(impl_->mu);
  return impl_->turns.size();
}

}  // namespace sessionturn
