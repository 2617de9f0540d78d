#include "driver/watch_op.hpp"

namespace sessionturn::driver_detail {

WatchOp::WatchOp(std::shared_ptr<DriverState> driver, WatchOptions options, WatchCallback callback,
                 WatchEndHandler on_end)
    : driver_(std::move(driver)),
      strand_(MakeOperationStrand(*driver_, nullptr)),
      timers_(std::make_shared<OpTimers>(strand_)),
      options_(std::move(options)),
      callback_(std::move(callback)),
      on_end_(std::move(on_end)) {
  last_event_id_ = options_.since;
  journal_id_ = options_.journal_id;
}

void WatchOp::Start() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->done_) return;
    self->stream_ = std::make_shared<EventStream>(self->driver_, nullptr, self->strand_, self->timers_,
                                                  self->options_.reconnect, "watch");
    self->stream_->Start(self->weak_from_this());
  });
}

void WatchOp::Stop() {
  {
    std::lock_guard lock(callback_mu_);
    stopped_ = true;
  }
  asio::post(strand_, [self = shared_from_this()] { self->End(Status{}); });
}

void WatchOp::ReleaseStopped() {
  if (stream_) stream_->Close();
  stream_.reset();
}

std::int64_t WatchOp::last_event_id() const {
  std::lock_guard lock(cursor_mu_);
  return last_event_id_;
}

std::string WatchOp::journal_id() const {
  std::lock_guard lock(cursor_mu_);
  return journal_id_;
}

std::vector<ClientRequest> WatchOp::OnStreamUp(bool reconnected) {
  if (reconnected) reconnects_.fetch_add(1);
  std::lock_guard lock(cursor_mu_);
  // Always ask for history.start: it names the journal (our resume key) and reports resets. The
  // condensed page only when the caller asked for bounded history; else the raw replay.
  return {ClientRequest::Subscribe(last_event_id_, journal_id_, true,
                                   options_.history_bounds ? options_.history_items : 0,
                                   options_.history_bounds ? options_.history_bytes : 0)};
}

void WatchOp::OnStreamEvent(const Event& event) {
  if (done_) return;
  {
    std::lock_guard lock(cursor_mu_);
    if (event.Is(event_type::kHistoryStart)) {
      const bool changed = !journal_id_.empty() && event.journal_id != journal_id_;
      // A reset replays from the start of the (possibly new) journal: its ids are fresh to us.
      if (event.reset || changed) last_event_id_ = 0;
      if (!event.journal_id.empty()) journal_id_ = event.journal_id;
    } else if (event.id > 0) {
      if (event.id <= last_event_id_) return;
      last_event_id_ = event.id;
    }
  }
  // Our own history.start on a resume is plumbing, unless it reports a reset the caller must know of.
  const bool plumbing = !options_.history_bounds && event.Is(event_type::kHistoryStart) && !event.reset;
  if (plumbing) return;
  std::lock_guard lock(callback_mu_);
  if (!stopped_ && callback_) CallUser(driver_->context, "the watch callback", [&] { callback_(event); });
}

void WatchOp::OnStreamDown(const Error& /*why*/) {}

void WatchOp::OnStreamFailed(Error error) { End(Fail(std::move(error))); }

void WatchOp::End(Status status) {
  if (done_) return;
  done_ = true;
  ended_.store(true);
  if (stream_) stream_->Close();
  timers_->CancelAll();
  {
    std::lock_guard lock(driver_->mu);
    driver_->watches.erase(this);
  }
  driver_->idle.notify_all();
  WatchEndHandler on_end = std::move(on_end_);
  on_end_ = nullptr;
  {
    std::lock_guard lock(callback_mu_);
    callback_ = nullptr;
  }
  if (on_end) CallUser(driver_->context, "the watch end handler", [&] { on_end(std::move(status)); });
}

}  // namespace sessionturn::driver_detail

namespace sessionturn {

void WatchHandle::Stop() {
  if (impl_ && impl_->op) impl_->op->Stop();
}
bool WatchHandle::Active() const { return impl_ && impl_->op && impl_->op->Active(); }
std::int64_t WatchHandle::last_event_id() const { return impl_ && impl_->op ? impl_->op->last_event_id() : 0; }
std::string WatchHandle::journal_id() const { return impl_ && impl_->op ? impl_->op->journal_id() : std::string(); }
int WatchHandle::reconnects() const { return impl_ && impl_->op ? impl_->op->reconnects() : 0; }

}  // namespace sessionturn
