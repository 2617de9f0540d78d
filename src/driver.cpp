// The Driver facade: validates, creates the operations (driver/turn_op, watch_op, one_shot_op) and
// waits for them in the blocking forms and the destructor.
#include "sessionturn/driver.hpp"

#include <future>
#include <thread>
#include <utility>

#include "driver/driver_impl.hpp"
#include "driver/one_shot_op.hpp"
#include "driver/turn_op.hpp"
#include "driver/watch_op.hpp"

namespace sessionturn {

using driver_detail::OneShotOp;
using driver_detail::TurnOp;
using driver_detail::WatchOp;

// ---- Driver --------------------------------------------------------------------------------------

Driver::Driver(Context& context, std::shared_ptr<Connector> connector)
    : impl_(std::make_shared<Impl>(context, std::move(connector))) {}

Driver::~Driver() {
  std::vector<std::shared_ptr<TurnOp>> turns;
  std::vector<std::shared_ptr<WatchOp>> watches;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [key, weak] : impl_->turns) {
      if (auto op = weak.lock()) turns.push_back(std::move(op));
    }
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
  if (impl_->context.InWorkerThread() || impl_->context.Stopped()) return;
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

Status ValidateTurn(const std::string& prompt, const TurnOptions& options) {
  if (TrimUnicodeSpace(prompt).empty()) return Fail(Errc::invalid_argument, "the prompt is empty");
  if (!options.allow_commands && IsRuntimeCommand(prompt)) {
    return Fail(Errc::invalid_argument,
                "the prompt would run as a runtime command ('!' shell or '/goal'); set allow_commands to send it");
  }
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

}  // namespace

namespace {
// Starts a turn op once the checks passed; a failed check is reported without I/O.
void StartTurn(const std::shared_ptr<Driver::Impl>& impl, Status valid, std::string prompt, TurnTrackerOptions tracker,
               TurnOptions options, TurnHandler handler) {
  if (impl->context.Stopped()) {
    return ReportNow(impl->context, std::move(handler), Result<TurnResult>(Fail(StoppedContextError("the turn"))));
  }
  if (!valid) return ReportNow(impl->context, std::move(handler), Result<TurnResult>(Fail(valid.error())));
  if (options.cancel.IsCancelled()) {
    return ReportNow(impl->context, std::move(handler),
                     Result<TurnResult>(Fail(Errc::cancelled, "the turn was cancelled before it started")));
  }
  auto op = std::make_shared<TurnOp>(impl, std::move(prompt), std::move(tracker), std::move(options), std::move(handler));
  {
    std::lock_guard lock(impl->mu);
    impl->turns.emplace(op.get(), op);
  }
  op->Start();
}
}  // namespace

void Driver::AsyncSubmitTurn(std::string prompt, TurnOptions options, TurnHandler handler) {
  Status valid = ValidateTurn(prompt, options);
  TurnTrackerOptions tracker{options.questions, options.request_id, std::nullopt};
  StartTurn(impl_, std::move(valid), std::move(prompt), std::move(tracker), std::move(options), std::move(handler));
}

void Driver::AsyncAttachTurn(TurnRef ref, TurnOptions options, TurnHandler handler) {
  Status valid = ValidateAttach(ref, options);
  TurnTrackerOptions tracker{options.questions, {}, std::move(ref)};
  StartTurn(impl_, std::move(valid), std::string(), std::move(tracker), std::move(options), std::move(handler));
}

namespace {
template <typename Start>
Result<TurnResult> BlockingTurn(Context& context, const TurnOptions& options, const char* what, Start start) {
  return blocking::Call<TurnResult>(context, options.timeout + options.abandon_grace, what, std::move(start));
}
}  // namespace

Result<TurnResult> Driver::SubmitTurn(std::string prompt, TurnOptions options) {
  return BlockingTurn(impl_->context, options, "SubmitTurn", [&](TurnHandler h) {
    AsyncSubmitTurn(std::move(prompt), std::move(options), std::move(h));
  });
}

Result<TurnResult> Driver::AttachTurn(TurnRef ref, TurnOptions options) {
  return BlockingTurn(impl_->context, options, "AttachTurn", [&](TurnHandler h) {
    AsyncAttachTurn(std::move(ref), std::move(options), std::move(h));
  });
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
void StartOneShot(const std::shared_ptr<Driver::Impl>& impl, ClientRequest request, std::chrono::milliseconds timeout,
                  Driver::StatusHandler handler, const char* what) {
  if (impl->context.Stopped()) return ReportNow(impl->context, std::move(handler), Status(Fail(StoppedContextError(what))));
  std::make_shared<OneShotOp>(impl, std::move(request), timeout, std::move(handler))->Start();
}
}  // namespace

void Driver::AsyncInterrupt(StatusHandler handler, std::chrono::milliseconds timeout) {
  StartOneShot(impl_, ClientRequest::Interrupt(NewRequestId()), timeout, std::move(handler), "Interrupt");
}

void Driver::AsyncAnswer(std::string input_id, std::map<std::string, std::vector<std::string>> answers,
                         StatusHandler handler, std::chrono::milliseconds timeout) {
  StartOneShot(impl_, ClientRequest::Answer(NewRequestId(), std::move(input_id), std::move(answers)), timeout,
               std::move(handler), "Answer");
}

void Driver::AsyncDecline(std::string input_id, StatusHandler handler, std::chrono::milliseconds timeout) {
  StartOneShot(impl_, ClientRequest::Decline(NewRequestId(), std::move(input_id)), timeout, std::move(handler),
               "Decline");
}

namespace {
template <typename Start>
Status BlockingStatus(Context& context, std::chrono::milliseconds timeout, const char* what, Start start) {
  return blocking::CallStatus(context, timeout, what, std::move(start));
}
}  // namespace

Status Driver::Interrupt(std::chrono::milliseconds timeout) {
  return BlockingStatus(impl_->context, timeout, "Interrupt", [&](StatusHandler h) { AsyncInterrupt(std::move(h), timeout); });
}

Status Driver::Answer(const std::string& input_id, std::map<std::string, std::vector<std::string>> answers,
                      std::chrono::milliseconds timeout) {
  return BlockingStatus(impl_->context, timeout, "Answer",
                        [&](StatusHandler h) { AsyncAnswer(input_id, std::move(answers), std::move(h), timeout); });
}

Status Driver::Decline(const std::string& input_id, std::chrono::milliseconds timeout) {
  return BlockingStatus(impl_->context, timeout, "Decline",
                        [&](StatusHandler h) { AsyncDecline(input_id, std::move(h), timeout); });
}

std::size_t Driver::TurnsInFlight() const {
  std::lock_guard lock(impl_->mu);
  return impl_->turns.size();
}

}  // namespace sessionturn
