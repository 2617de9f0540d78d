#include "sessionturn/driver.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <asio.hpp>

namespace sessionturn {

namespace {

using Strand = asio::strand<asio::io_context::executor_type>;

// Margin on top of an operation's own deadline for a blocking wait: the operation always reports by
// its deadline (its timer fires on the Context), so this only matters when the Context is stopped.
constexpr std::chrono::milliseconds kBlockingWaitMargin = std::chrono::seconds(30);
// On top of the abandon grace in ~Driver: time for the close to run once the grace has fired.
constexpr std::chrono::milliseconds kDestructorWaitMargin = std::chrono::seconds(1);

std::string Seconds(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + "s";
  return std::to_string(ms.count()) + "ms";
}

// Skip blank lines and lines that are not JSON objects (PROTOCOL.md §2) without paying for a parse.
bool LooksLikeJsonObject(std::string_view line) {
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    return c == '{';
  }
  return false;
}

std::string Preview(std::string_view line) {
  constexpr std::size_t kPreviewBytes = 80;  // enough to recognise a line in a debug log
  return std::string(line.substr(0, kPreviewBytes)) + (line.size() > kPreviewBytes ? "..." : "");
}

// A first connect that failed because the runtime is busy (Errc::unavailable: its listen backlog is
// full, EAGAIN on a unix socket, or ENOBUFS; typical when thousands of turns start at once) or did not
// answer in time is worth retrying under the reconnect policy; one that failed because nothing listens
// (ENOENT, ECONNREFUSED: Errc::connection_failed) is reported at once.
bool TransientConnectFailure(const Error& error) {
  return error.code == Errc::unavailable || error.code == Errc::timeout;
}

// Runs a caller's callback. An exception from it must not unwind through our handlers (it would
// leave the operation without a pending read, stuck until its deadline): log it and carry on.
template <typename Fn>
void CallUser(const Context& context, const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    context.Log(LogLevel::error, std::string(what) + " threw an exception (ignored): " + e.what());
  } catch (...) {
    context.Log(LogLevel::error, std::string(what) + " threw a non-standard exception (ignored)");
  }
}

std::chrono::milliseconds Backoff(const ReconnectPolicy& policy, int attempt) {
  auto delay = policy.initial_backoff;
  for (int i = 0; i < attempt && delay < policy.max_backoff; ++i) delay *= 2;
  return std::min(delay, policy.max_backoff);
}

}  // namespace

// ---- Cancellation --------------------------------------------------------------------------------

struct CancellationToken::State {
  // Recursive: a callback may Unregister itself (or register another) from inside Cancel().
  std::recursive_mutex mu;
  std::atomic<bool> cancelled{false};
  std::uint64_t next_id = 1;
  std::unordered_map<std::uint64_t, std::function<void()>> callbacks;
};

bool CancellationToken::IsCancelled() const noexcept { return state_ && state_->cancelled.load(); }

std::uint64_t CancellationToken::OnCancel(std::function<void()> fn) const {
  if (!state_ || !fn) return 0;
  std::unique_lock lock(state_->mu);
  if (state_->cancelled.load()) {
    lock.unlock();
    fn();
    return 0;
  }
  const std::uint64_t id = state_->next_id++;
  state_->callbacks.emplace(id, std::move(fn));
  return id;
}

void CancellationToken::Unregister(std::uint64_t id) const {
  if (!state_ || id == 0) return;
  // Taking the lock waits for a Cancel() that is running callbacks on another thread.
  std::lock_guard lock(state_->mu);
  state_->callbacks.erase(id);
}

CancellationSource::CancellationSource() : state_(std::make_shared<CancellationToken::State>()) {}

void CancellationSource::Cancel() {
  std::lock_guard lock(state_->mu);
  if (state_->cancelled.exchange(true)) return;
  auto callbacks = std::move(state_->callbacks);
  state_->callbacks.clear();
  for (auto& [id, fn] : callbacks) fn();
}

bool CancellationSource::IsCancelled() const noexcept { return state_->cancelled.load(); }

CancellationToken CancellationSource::Token() const { return CancellationToken(state_); }

// ---- Driver internals ----------------------------------------------------------------------------

class TurnOp;
class WatchOp;

struct Driver::Impl {
  Context& context;
  std::shared_ptr<Connector> connector;
  mutable std::mutex mu;
  std::condition_variable idle;  // signalled when an operation ends (the destructor waits on it)
  std::unordered_map<const void*, std::weak_ptr<TurnOp>> turns;
  std::unordered_map<const void*, std::weak_ptr<WatchOp>> watches;
  std::size_t one_shots = 0;

  bool Idle() const { return turns.empty() && watches.empty() && one_shots == 0; }

  Impl(Context& c, std::shared_ptr<Connector> conn) : context(c), connector(std::move(conn)) {}
};

struct Responder::Impl {
  std::weak_ptr<TurnOp> op;
  std::string input_id;
  std::atomic<bool> used{false};
};

// One turn in flight: a TurnTracker bound to a connection, serialized on its own strand. Every
// handler (connection, timers, cancellation, responders) is posted onto the strand, so the state
// below is touched by one thread at a time with no lock.
class TurnOp : public std::enable_shared_from_this<TurnOp> {
 public:
  TurnOp(std::shared_ptr<Driver::Impl> driver, std::string prompt, TurnOptions options, TurnHandler handler)
      : driver_(std::move(driver)),
        strand_(asio::make_strand(driver_->context.io())),
        tracker_(std::move(prompt), TurnTrackerOptions{options.questions, options.request_id}),
        options_(std::move(options)),
        handler_(std::move(handler)),
        deadline_(strand_),
        aux_timer_(strand_),
        handshake_timer_(strand_) {}

  void Start() {
    started_at_ = std::chrono::steady_clock::now();
    asio::post(strand_, [self = shared_from_this()] { self->OnStart(); });
  }

  // From any thread.
  void Cancel(Error error) {
    asio::post(strand_, [self = shared_from_this(), error = std::move(error)]() mutable {
      self->AbandonWith(std::move(error));
    });
  }

  void Respond(std::string input_id, std::optional<std::map<std::string, std::vector<std::string>>> answers) {
    asio::post(strand_, [self = shared_from_this(), input_id = std::move(input_id), answers = std::move(answers)]() mutable {
      self->OnRespond(input_id, std::move(answers));
    });
  }

  bool finished() const noexcept { return finished_.load(); }

 private:
  Context& ctx() const { return driver_->context; }

  void Log(LogLevel level, const std::string& message) const {
    if (ctx().ShouldLog(level)) ctx().Log(level, message);
  }

  void OnStart() {
    {
      deadline_.expires_after(options_.timeout);
      deadline_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
        if (ec) return;
        self->AbandonWith(Error(Errc::timeout, "the turn did not complete within " + Seconds(self->options_.timeout)));
      });
    }
    if (options_.cancel.CanBeCancelled()) {
      std::weak_ptr<TurnOp> weak = weak_from_this();
      cancel_id_ = options_.cancel.OnCancel([weak] {
        if (auto self = weak.lock()) self->Cancel(Error(Errc::cancelled, "the turn was cancelled by the caller"));
      });
    }
    Connect();
  }

  void Connect() {
    if (done_) return;
    connecting_ = true;
    driver_->connector->AsyncConnect([self = shared_from_this()](Result<std::shared_ptr<Connection>> result) {
      asio::post(self->strand_, [self, result = std::move(result)]() mutable { self->OnConnect(std::move(result)); });
    });
  }

  void OnConnect(Result<std::shared_ptr<Connection>> result) {
    connecting_ = false;
    if (done_) {
      if (result) (*result)->Close();
      return;
    }
    if (abandoning_ && (!resync_to_withdraw_ || !result)) {
      // Abandoned while (re)connecting: nothing to withdraw on a stream we never followed (or the
      // reconnect made only to withdraw failed: the grace is not for retries).
      if (result) (*result)->Close();
      Finish(Fail(*pending_error_));
      return;
    }
    if (!result) {
      if (!ever_connected_ && !(options_.reconnect.enabled && TransientConnectFailure(result.error()))) {
        Finish(Fail(Errc::connection_failed, "could not reach the runtime at " + driver_->connector->Describe() +
                                                 ": " + result.error().message));
        return;
      }
      last_drop_ = result.error().message;
      ScheduleReconnect();
      return;
    }
    if (ever_connected_) ++reconnects_;
    ever_connected_ = true;
    conn_ = std::move(*result);
    ++generation_;
    handshake_timer_.expires_after(options_.reconnect.handshake_timeout);
    handshake_timer_.async_wait([self = shared_from_this(), gen = generation_](const asio::error_code& ec) {
      if (ec || self->done_ || gen != self->generation_ || !self->conn_) return;
      self->OnDrop(Error(Errc::timeout, "no history.end within " + Seconds(self->options_.reconnect.handshake_timeout) +
                                            " of connecting"));
    });
    Send(tracker_.OnConnected());
    // Answers given while the stream was down go out right after the resubscribe.
    for (auto& request : held_) Send(request);
    held_.clear();
    Read();
  }

  void Read() {
    if (!conn_) return;
    conn_->AsyncReadLine([self = shared_from_this(), gen = generation_](Result<std::string> line) {
      asio::post(self->strand_, [self, gen, line = std::move(line)]() mutable { self->OnLine(gen, std::move(line)); });
    });
  }

  void OnLine(std::uint64_t gen, Result<std::string> line) {
    if (done_ || gen != generation_ || !conn_) return;
    if (!line) {
      OnDrop(line.error());
      return;
    }
    if (!LooksLikeJsonObject(*line)) {
      Log(LogLevel::debug, "skipping a line that is not a JSON object: " + Preview(*line));
      Read();
      return;
    }
    auto event = DecodeEvent(*line);
    if (!event) {
      Log(LogLevel::debug, "skipping an undecodable line (" + event.error().message + "): " + Preview(*line));
      Read();
      return;
    }
    // Progress (a new journaled event, or a complete replay) proves the new stream works: the
    // reconnect budget is for consecutive failures, and a stream that drops before any progress
    // must not reconnect forever.
    const std::int64_t cursor = tracker_.last_event_id();
    HandleEvent(*event);
    if (event->Is(event_type::kHistoryEnd)) handshake_timer_.cancel();
    if (tracker_.last_event_id() > cursor || event->Is(event_type::kHistoryEnd)) reconnect_attempts_ = 0;
    if (!done_) Read();
  }

  void HandleEvent(const Event& event) {
    TurnStep step = tracker_.OnEvent(event);
    const auto now = std::chrono::steady_clock::now();
    if (step.accepted) accepted_at_ = now;
    if (step.started) started_at_turn_ = now;
    if (step.deliver && options_.on_event) CallUser(ctx(), "the on_event callback", [&] { options_.on_event(event); });
    if (abandoning_ && resync_to_withdraw_) {
      // Reconnected only to withdraw: follow the replay; once it is complete, withdraw what is still ours.
      if (step.finished) {
        Finish(Fail(*pending_error_));  // the turn ended while we were away: nothing to withdraw
        return;
      }
      if (!event.Is(event_type::kHistoryEnd)) return;
      resync_to_withdraw_ = false;
      auto requests = tracker_.Abandon();
      if (requests.empty()) {
        Finish(Fail(*pending_error_));  // merged into a shared turn meanwhile: not ours to stop
        return;
      }
      for (const auto& r : requests) {
        withdrawal_ids_.insert(r.request_id);
        withdrew_queued_ = withdrew_queued_ || r.type == request_type::kMessageRemove;
        Send(r);
      }
      return;
    }
    if (abandoning_) {
      if (step.accepted || (step.started && withdrew_queued_)) {
        // Abandoned between sending the message and its echo (now it is a turn), or our remove raced
        // the turn's start (the runtime will reject it "no longer pending"): withdraw it as it is now.
        // The superseded remove's rejection no longer counts as the runtime's word.
        withdrawal_ids_.clear();
        withdrew_queued_ = false;
        auto requests = tracker_.Abandon();
        if (requests.empty()) {
          Finish(Fail(*pending_error_));
          return;
        }
        for (const auto& r : requests) {
          withdrawal_ids_.insert(r.request_id);
          withdrew_queued_ = withdrew_queued_ || r.type == request_type::kMessageRemove;
          Send(r);
        }
        return;
      }
      // Withdrawal written: finish once the runtime confirmed it or the turn ended anyway.
      const bool confirmed = !event.request_id.empty() && withdrawal_ids_.count(event.request_id) > 0;
      if (step.finished || confirmed) Finish(Fail(*pending_error_));
      return;
    }
    if (step.question && !step.finished) SurfaceQuestion(*step.question);
    if (step.finished) {
      completed_at_ = now;
      auto outcome = tracker_.Outcome();
      if (!outcome) {
        // A local failure (too_large) may carry its withdrawal: write it within the grace, then finish.
        if (!step.requests.empty()) {
          WithdrawThenFinish(std::move(step.requests), outcome.error());
          return;
        }
        Finish(Fail(outcome.error()));
        return;
      }
      for (auto& request : step.requests) Send(request);
      Finish(MakeResult(std::move(*outcome)));
      return;
    }
    for (auto& request : step.requests) Send(request);
  }

  TurnResult MakeResult(TurnOutcome outcome) const {
    TurnResult r;
    r.turn_id = std::move(outcome.turn_id);
    r.status = outcome.status;
    r.text = std::move(outcome.text);
    r.error_message = std::move(outcome.error_message);
    r.questions_declined = outcome.questions_declined;
    r.questions_answered = outcome.questions_answered;
    r.shared = outcome.shared;
    r.reconnects = reconnects_;
    auto since = [this](std::optional<std::chrono::steady_clock::time_point> t) -> std::optional<std::chrono::milliseconds> {
      if (!t) return std::nullopt;
      return std::chrono::duration_cast<std::chrono::milliseconds>(*t - started_at_);
    };
    r.time_to_accepted = since(accepted_at_);
    r.time_to_started = since(started_at_turn_);
    r.time_to_completed = since(completed_at_);
    return r;
  }

  void SurfaceQuestion(const Event& event) {
    auto impl = std::make_shared<Responder::Impl>();
    impl->op = weak_from_this();
    impl->input_id = event.input_id;
    responders_[event.input_id] = impl;
    {
      auto timer = std::make_shared<asio::steady_timer>(strand_);
      timer->expires_after(options_.answer_timeout);
      timer->async_wait([self = shared_from_this(), impl](const asio::error_code& ec) {
        if (ec || impl->used.exchange(true)) return;
        self->Log(LogLevel::info, "no answer to input " + impl->input_id + " within " +
                                      Seconds(self->options_.answer_timeout) + ": declining it");
        self->OnRespond(impl->input_id, std::nullopt);
      });
      answer_timers_[event.input_id] = std::move(timer);
    }
    if (options_.on_question) {
      CallUser(ctx(), "the on_question callback", [&] { options_.on_question(event, Responder(impl)); });
    }
  }

  void OnRespond(const std::string& input_id, std::optional<std::map<std::string, std::vector<std::string>>> answers) {
    if (auto it = answer_timers_.find(input_id); it != answer_timers_.end()) {
      it->second->cancel();
      answer_timers_.erase(it);
    }
    responders_.erase(input_id);
    if (done_ || abandoning_) return;
    auto request = answers ? tracker_.Answer(input_id, std::move(*answers)) : tracker_.Decline(input_id);
    if (!request) {
      Log(LogLevel::debug, request.error().message);
      return;
    }
    if (conn_) {
      Send(*request);
    } else {
      held_.push_back(std::move(*request));
    }
  }

  void Send(const ClientRequest& request, Connection::WriteHandler done = {}) {
    if (!conn_) {
      if (done) done(Fail(Errc::connection_lost, "no connection"));
      return;
    }
    if (!done) {
      done = [self = shared_from_this(), type = request.type](Status status) {
        if (!status) self->Log(LogLevel::debug, "writing " + type + " failed: " + status.error().message);
      };
    }
    conn_->AsyncWrite(EncodeRequest(request), std::move(done));
  }

  void OnDrop(const Error& error) {
    tracker_.OnDisconnected();
    std::string describe = conn_->Describe();
    std::string diagnostics = conn_->Diagnostics();
    conn_->Close();
    conn_.reset();
    ++generation_;
    last_drop_ = "the stream from " + describe + " ended: " + error.message +
                 (diagnostics.empty() ? "" : " (" + diagnostics + ")");
    if (abandoning_) {
      Finish(Fail(*pending_error_));
      return;
    }
    if (error.code == Errc::too_large) {
      Finish(Fail(Errc::too_large, last_drop_));
      return;
    }
    if (!options_.reconnect.enabled) {
      Finish(Fail(Errc::connection_lost, last_drop_ + "; reconnecting is disabled"));
      return;
    }
    ScheduleReconnect();
  }

  void ScheduleReconnect() {
    if (reconnect_attempts_ >= options_.reconnect.max_attempts) {
      if (!ever_connected_) {
        Finish(Fail(Errc::connection_failed, "could not reach the runtime at " + driver_->connector->Describe() +
                                                 " in " + std::to_string(reconnect_attempts_ + 1) +
                                                 " attempts: " + last_drop_));
        return;
      }
      Finish(Fail(Errc::connection_lost, "lost the runtime after " + std::to_string(reconnect_attempts_) +
                                             " reconnect attempts: " + last_drop_));
      return;
    }
    const auto delay = Backoff(options_.reconnect, reconnect_attempts_);
    ++reconnect_attempts_;
    Log(LogLevel::info, last_drop_ + "; reconnecting in " + Seconds(delay));
    aux_timer_.expires_after(delay);
    aux_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (ec || self->done_) return;
      self->Connect();
    });
  }

  // Deadline or cancel: withdraw what is ours to withdraw (DESIGN.md §4.5), then report `error`.
  void AbandonWith(Error error) {
    if (done_ || abandoning_) return;
    pending_error_ = error;
    auto requests = tracker_.Abandon();
    if (!conn_ && !requests.empty() && options_.reconnect.enabled) {
      // Between connections with a turn of ours to withdraw: reconnect now (not after the backoff),
      // catch up with the replay, and withdraw the turn as it is then (it may have ended, started or
      // been merged meanwhile), all within the grace. A turn must not be left running unseen.
      abandoning_ = true;
      resync_to_withdraw_ = true;
      deadline_.cancel();
      aux_timer_.cancel();
      aux_timer_.expires_after(options_.abandon_grace);
      aux_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
        if (ec || self->done_) return;
        self->Log(LogLevel::warning, "abandoning turn " + self->tracker_.turn_id() +
                                         ": could not reconnect to withdraw it within the grace");
        self->Finish(Fail(*self->pending_error_));
      });
      if (!connecting_) Connect();
      return;
    }
    if (!conn_) {
      // Before the first connection, or reconnecting is off: there is no stream to write on. Nothing
      // was sent to undo unless the turn was accepted; log that it may run on.
      if (!requests.empty()) {
        Log(LogLevel::warning, "abandoning turn " + tracker_.turn_id() +
                                   " while disconnected: its withdrawal could not be sent");
      }
      if (connecting_) {
        abandoning_ = true;  // OnConnect closes and finishes, or the grace does
        deadline_.cancel();
        aux_timer_.cancel();
        aux_timer_.expires_after(options_.abandon_grace);
        aux_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
          if (ec || self->done_) return;
          self->Finish(Fail(*self->pending_error_));
        });
        return;
      }
      Finish(Fail(std::move(error)));
      return;
    }
    if (requests.empty() && tracker_.phase() != TurnPhase::submitted) {
      Finish(Fail(std::move(error)));
      return;
    }
    // Submitted but not yet echoed: the message may still become a turn; wait (within the grace)
    // for its echo or rejection so an accepted turn is withdrawn rather than left to run unwatched.
    WithdrawThenFinish(std::move(requests), std::move(error));
  }

  void WithdrawThenFinish(std::vector<ClientRequest> requests, Error error) {
    abandoning_ = true;
    pending_error_ = std::move(error);
    for (const auto& r : requests) {
      withdrawal_ids_.insert(r.request_id);
      withdrew_queued_ = withdrew_queued_ || r.type == request_type::kMessageRemove;
    }
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const bool last = i + 1 == requests.size();
      Send(requests[i], [self = shared_from_this(), last, type = requests[i].type](Status status) {
        if (status && last) return;  // written: wait for the runtime's confirmation (or the grace)
        if (!status) {
          asio::post(self->strand_, [self, type, status] {
            self->Log(LogLevel::warning, "could not write the withdrawal (" + type + "): " + status.error().message);
            if (!self->done_) self->Finish(Fail(*self->pending_error_));
          });
        }
      });
    }
    deadline_.cancel();
    aux_timer_.cancel();
    aux_timer_.expires_after(options_.abandon_grace);
    aux_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (ec || self->done_) return;
      self->Finish(Fail(*self->pending_error_));
    });
  }

  void Finish(Result<TurnResult> result) {
    if (done_) return;
    done_ = true;
    finished_.store(true);
    deadline_.cancel();
    aux_timer_.cancel();
    handshake_timer_.cancel();
    for (auto& [id, timer] : answer_timers_) timer->cancel();
    answer_timers_.clear();
    for (auto& [id, impl] : responders_) impl->used.store(true);
    responders_.clear();
    if (cancel_id_ != 0) options_.cancel.Unregister(cancel_id_);
    if (conn_) {
      conn_->Close();
      conn_.reset();
    }
    ++generation_;
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
    if (handler) CallUser(ctx(), "the turn's completion handler", [&] { handler(std::move(result)); });
  }

  std::shared_ptr<Driver::Impl> driver_;
  Strand strand_;
  TurnTracker tracker_;
  TurnOptions options_;
  TurnHandler handler_;
  asio::steady_timer deadline_;
  asio::steady_timer aux_timer_;  // reconnect backoff, then the abandon grace
  // A stream that accepts but never finishes its replay (a wedged runtime or proxy) must not hold the
  // turn until its deadline: without history.end within the policy's handshake_timeout it counts as dropped.
  asio::steady_timer handshake_timer_;
  std::shared_ptr<Connection> conn_;
  std::uint64_t generation_ = 0;  // handlers of an older connection are ignored
  std::uint64_t cancel_id_ = 0;
  bool ever_connected_ = false;
  bool connecting_ = false;
  bool done_ = false;
  std::atomic<bool> finished_{false};
  bool abandoning_ = false;
  std::optional<Error> pending_error_;
  std::set<std::string> withdrawal_ids_;
  bool withdrew_queued_ = false;  // a message.remove is among the withdrawal requests
  bool resync_to_withdraw_ = false;  // abandoned while disconnected: reconnected to withdraw after the replay
  int reconnect_attempts_ = 0;
  int reconnects_ = 0;
  std::string last_drop_;
  std::vector<ClientRequest> held_;
  std::map<std::string, std::shared_ptr<Responder::Impl>> responders_;
  std::map<std::string, std::shared_ptr<asio::steady_timer>> answer_timers_;
  std::chrono::steady_clock::time_point started_at_;
  std::optional<std::chrono::steady_clock::time_point> accepted_at_, started_at_turn_, completed_at_;
};

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

// ---- Watch ---------------------------------------------------------------------------------------

struct WatchHandle::Impl {
  std::shared_ptr<WatchOp> op;
};

class WatchOp : public std::enable_shared_from_this<WatchOp> {
 public:
  WatchOp(std::shared_ptr<Driver::Impl> driver, WatchOptions options, WatchCallback callback, WatchEndHandler on_end)
      : driver_(std::move(driver)),
        strand_(asio::make_strand(driver_->context.io())),
        options_(std::move(options)),
        callback_(std::move(callback)),
        on_end_(std::move(on_end)),
        timer_(strand_) {
    last_event_id_ = options_.since;
    journal_id_ = options_.journal_id;
  }

  void Start() {
    asio::post(strand_, [self = shared_from_this()] { self->Connect(); });
  }

  void Stop() {
    {
      // Waits for a callback running on another thread; recursive so Stop() works from inside one.
      std::lock_guard lock(callback_mu_);
      stopped_ = true;
    }
    asio::post(strand_, [self = shared_from_this()] { self->End(Status{}); });
  }

  bool Active() const { return !ended_.load() && !stopped_.load(); }
  std::int64_t last_event_id() const {
    std::lock_guard lock(cursor_mu_);
    return last_event_id_;
  }
  std::string journal_id() const {
    std::lock_guard lock(cursor_mu_);
    return journal_id_;
  }
  int reconnects() const { return reconnects_.load(); }

 private:
  void Log(LogLevel level, const std::string& message) const {
    if (driver_->context.ShouldLog(level)) driver_->context.Log(level, message);
  }

  void Connect() {
    if (done_) return;
    driver_->connector->AsyncConnect([self = shared_from_this()](Result<std::shared_ptr<Connection>> result) {
      asio::post(self->strand_, [self, result = std::move(result)]() mutable { self->OnConnect(std::move(result)); });
    });
  }

  void OnConnect(Result<std::shared_ptr<Connection>> result) {
    if (done_) {
      if (result) (*result)->Close();
      return;
    }
    if (!result) {
      if (!ever_connected_) {
        End(Fail(Errc::connection_failed, "could not reach the runtime at " + driver_->connector->Describe() + ": " +
                                              result.error().message));
        return;
      }
      last_drop_ = result.error().message;
      ScheduleReconnect();
      return;
    }
    if (ever_connected_) reconnects_.fetch_add(1);
    ever_connected_ = true;
    conn_ = std::move(*result);
    ++generation_;
    std::int64_t since;
    std::string journal;
    {
      std::lock_guard lock(cursor_mu_);
      since = last_event_id_;
      journal = journal_id_;
    }
    // Always ask for history.start: it names the journal (our resume key) and reports resets. The
    // condensed page only when the caller asked for bounded history; else the raw replay.
    ClientRequest sub = ClientRequest::Subscribe(since, journal, true,
                                                 options_.history_bounds ? options_.history_items : 0,
                                                 options_.history_bounds ? options_.history_bytes : 0);
    conn_->AsyncWrite(EncodeRequest(sub), {});
    Read();
  }

  void Read() {
    conn_->AsyncReadLine([self = shared_from_this(), gen = generation_](Result<std::string> line) {
      asio::post(self->strand_, [self, gen, line = std::move(line)]() mutable { self->OnLine(gen, std::move(line)); });
    });
  }

  void OnLine(std::uint64_t gen, Result<std::string> line) {
    if (done_ || gen != generation_ || !conn_) return;
    if (!line) {
      last_drop_ = "the stream from " + conn_->Describe() + " ended: " + line.error().message;
      conn_->Close();
      conn_.reset();
      ++generation_;
      if (line.error().code == Errc::too_large) {
        End(Fail(Errc::too_large, last_drop_));
      } else if (!options_.reconnect.enabled) {
        End(Fail(Errc::connection_lost, last_drop_ + "; reconnecting is disabled"));
      } else {
        ScheduleReconnect();
      }
      return;
    }
    if (!LooksLikeJsonObject(*line)) {
      Log(LogLevel::debug, "watch: skipping a line that is not a JSON object: " + Preview(*line));
      Read();
      return;
    }
    auto event = DecodeEvent(*line);
    if (!event) {
      Log(LogLevel::debug, "watch: skipping an undecodable line: " + event.error().message);
      Read();
      return;
    }
    if (event->Is(event_type::kHistoryEnd) || event->id > 0) attempts_ = 0;
    {
      std::lock_guard lock(cursor_mu_);
      if (event->Is(event_type::kHistoryStart)) {
        const bool changed = !journal_id_.empty() && event->journal_id != journal_id_;
        // A reset replays from the start of the (possibly new) journal: its ids are fresh to us.
        if (event->reset || changed) last_event_id_ = 0;
        if (!event->journal_id.empty()) journal_id_ = event->journal_id;
      } else if (event->id > 0) {
        if (event->id <= last_event_id_) {
          Read();
          return;
        }
        last_event_id_ = event->id;
      }
    }
    // Our own history.start on a resume is plumbing, unless it reports a reset the caller must know of.
    const bool plumbing = !options_.history_bounds && event->Is(event_type::kHistoryStart) && !event->reset;
    if (!plumbing) {
      std::lock_guard lock(callback_mu_);
      if (!stopped_ && callback_) CallUser(driver_->context, "the watch callback", [&] { callback_(*event); });
    }
    if (!done_) Read();
  }

  void ScheduleReconnect() {
    if (attempts_ >= options_.reconnect.max_attempts) {
      End(Fail(Errc::connection_lost,
               "lost the runtime after " + std::to_string(attempts_) + " reconnect attempts: " + last_drop_));
      return;
    }
    const auto delay = Backoff(options_.reconnect, attempts_);
    ++attempts_;
    timer_.expires_after(delay);
    timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (ec || self->done_) return;
      self->Connect();
    });
  }

  void End(Status status) {
    if (done_) return;
    done_ = true;
    ended_.store(true);
    timer_.cancel();
    if (conn_) {
      conn_->Close();
      conn_.reset();
    }
    ++generation_;
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

  std::shared_ptr<Driver::Impl> driver_;
  Strand strand_;
  WatchOptions options_;
  WatchCallback callback_;
  WatchEndHandler on_end_;
  asio::steady_timer timer_;
  std::shared_ptr<Connection> conn_;
  std::uint64_t generation_ = 0;
  bool ever_connected_ = false;
  bool done_ = false;
  int attempts_ = 0;
  std::string last_drop_;
  std::atomic<bool> ended_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<int> reconnects_{0};
  std::recursive_mutex callback_mu_;
  mutable std::mutex cursor_mu_;
  std::int64_t last_event_id_ = 0;
  std::string journal_id_;
};

void WatchHandle::Stop() {
  if (impl_ && impl_->op) impl_->op->Stop();
}
bool WatchHandle::Active() const { return impl_ && impl_->op && impl_->op->Active(); }
std::int64_t WatchHandle::last_event_id() const { return impl_ && impl_->op ? impl_->op->last_event_id() : 0; }
std::string WatchHandle::journal_id() const { return impl_ && impl_->op ? impl_->op->journal_id() : std::string(); }
int WatchHandle::reconnects() const { return impl_ && impl_->op ? impl_->op->reconnects() : 0; }

// ---- One-shot requests ---------------------------------------------------------------------------

// Interrupt / Answer / Decline on a connection of their own: subscribe (bounded, so no replay), send
// the request, and wait for the runtime's word on it.
class OneShotOp : public std::enable_shared_from_this<OneShotOp> {
 public:
  OneShotOp(std::shared_ptr<Driver::Impl> driver, ClientRequest request, std::chrono::milliseconds timeout,
            Driver::StatusHandler handler)
      : driver_(std::move(driver)),
        strand_(asio::make_strand(driver_->context.io())),
        request_(std::move(request)),
        timeout_(timeout),
        handler_(std::move(handler)),
        timer_(strand_) {}

  void Start() {
    {
      std::lock_guard lock(driver_->mu);
      ++driver_->one_shots;
    }
    asio::post(strand_, [self = shared_from_this()] {
      self->timer_.expires_after(self->timeout_);
      self->timer_.async_wait([self](const asio::error_code& ec) {
        if (ec) return;
        self->End(Fail(Errc::timeout, "the runtime did not answer the " + self->request_.type + " request within " +
                                          Seconds(self->timeout_)));
      });
      self->driver_->connector->AsyncConnect([self](Result<std::shared_ptr<Connection>> result) {
        asio::post(self->strand_, [self, result = std::move(result)]() mutable { self->OnConnect(std::move(result)); });
      });
    });
  }

 private:
  void OnConnect(Result<std::shared_ptr<Connection>> result) {
    if (done_) {
      if (result) (*result)->Close();
      return;
    }
    if (!result) {
      End(Fail(Errc::connection_failed, "could not reach the runtime at " + driver_->connector->Describe() + ": " +
                                            result.error().message));
      return;
    }
    conn_ = std::move(*result);
    conn_->AsyncWrite(EncodeRequest(ClientRequest::Subscribe(0, "", true, kTurnHistoryItems, kTurnHistoryBytes)), {});
    conn_->AsyncWrite(EncodeRequest(request_), {});
    Read();
  }

  void Read() {
    conn_->AsyncReadLine([self = shared_from_this()](Result<std::string> line) {
      asio::post(self->strand_, [self, line = std::move(line)]() mutable { self->OnLine(std::move(line)); });
    });
  }

  void OnLine(Result<std::string> line) {
    if (done_) return;
    if (!line) {
      End(Fail(Errc::connection_lost, "the stream from " + conn_->Describe() + " ended before the runtime answered the " +
                                          request_.type + " request: " + line.error().message));
      return;
    }
    if (LooksLikeJsonObject(*line)) {
      if (auto event = DecodeEvent(*line)) {
        if (event->request_id == request_.request_id) {
          if (event->Is(event_type::kError)) {
            End(Fail(Errc::rejected, "the runtime rejected the " + request_.type + " request: " + event->text));
            return;
          }
          if (event->Is(event_type::kTurnInterrupting) || event->Is(event_type::kRequestAccepted) ||
              event->Is(event_type::kInputResolved) || event->Is(event_type::kTurnCompleted)) {
            End(Status{});
            return;
          }
        }
        if (!request_.input_id.empty() && event->Is(event_type::kInputResolved) &&
            event->input_id == request_.input_id) {
          End(Status{});
          return;
        }
      }
    }
    Read();
  }

  void End(Status status) {
    if (done_) return;
    done_ = true;
    timer_.cancel();
    if (conn_) conn_->Close();
    conn_.reset();
    auto handler = std::move(handler_);
    if (handler) CallUser(driver_->context, "the request's completion handler", [&] { handler(std::move(status)); });
    {
      std::lock_guard lock(driver_->mu);
      --driver_->one_shots;
    }
    driver_->idle.notify_all();
  }

  std::shared_ptr<Driver::Impl> driver_;
  Strand strand_;
  ClientRequest request_;
  std::chrono::milliseconds timeout_;
  Driver::StatusHandler handler_;
  asio::steady_timer timer_;
  std::shared_ptr<Connection> conn_;
  bool done_ = false;
};

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
  for (auto& op : turns) op->Cancel(Error(Errc::cancelled, "the Driver was destroyed while the turn was in flight"));
  for (auto& op : watches) op->Stop();
  // Give the abandoned turns their grace to write the withdrawal and close: returning at once would
  // let the caller destroy the Context under them, leaving turns unwithdrawn and connections open.
  // On a worker the wait would block the very thread they need, so there it does not wait.
  if (impl_->context.InWorkerThread()) return;
  std::unique_lock lock(impl_->mu);
  impl_->idle.wait_for(lock, kAbandonGrace + kDestructorWaitMargin, [this] { return impl_->Idle(); });
}

namespace {

Status ValidateTurn(const std::string& prompt, const TurnOptions& options) {
  if (TrimUnicodeSpace(prompt).empty()) return Fail(Errc::invalid_argument, "the prompt is empty");
  if (!options.allow_commands && IsRuntimeCommand(prompt)) {
    return Fail(Errc::invalid_argument,
                "the prompt would run as a runtime command ('!' shell or '/goal'); set allow_commands to send it");
  }
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

template <typename T>
Result<T> WaitBlocking(Context& context, std::future<Result<T>>& future, std::chrono::milliseconds bound,
                       const char* what) {
  if (future.wait_for(bound + kBlockingWaitMargin) != std::future_status::ready) {
    return Fail(Errc::timeout, std::string(what) + " did not report within its deadline; is the Context running (" +
                                   std::to_string(context.threads()) + " threads)?");
  }
  return future.get();
}

}  // namespace

void Driver::AsyncSubmitTurn(std::string prompt, TurnOptions options, TurnHandler handler) {
  if (auto valid = ValidateTurn(prompt, options); !valid) {
    impl_->context.Post([handler = std::move(handler), error = valid.error()]() mutable {
      if (handler) handler(Fail(std::move(error)));
    });
    return;
  }
  if (options.cancel.IsCancelled()) {
    impl_->context.Post([handler = std::move(handler)] {
      if (handler) handler(Fail(Errc::cancelled, "the turn was cancelled before it was sent"));
    });
    return;
  }
  auto op = std::make_shared<TurnOp>(impl_, std::move(prompt), std::move(options), std::move(handler));
  {
    std::lock_guard lock(impl_->mu);
    impl_->turns.emplace(op.get(), op);
  }
  op->Start();
}

Result<TurnResult> Driver::SubmitTurn(std::string prompt, TurnOptions options) {
  if (impl_->context.InWorkerThread()) {
    return Fail(Errc::would_block, "SubmitTurn blocks and was called on a Context worker thread; use AsyncSubmitTurn");
  }
  auto promise = std::make_shared<std::promise<Result<TurnResult>>>();
  auto future = promise->get_future();
  const auto bound = options.timeout + options.abandon_grace;
  AsyncSubmitTurn(std::move(prompt), std::move(options),
                  [promise](Result<TurnResult> result) { promise->set_value(std::move(result)); });
  return WaitBlocking(impl_->context, future, bound, "the turn");
}

WatchHandle Driver::Watch(WatchOptions options, WatchCallback callback, WatchEndHandler on_end) {
  auto op = std::make_shared<WatchOp>(impl_, std::move(options), std::move(callback), std::move(on_end));
  {
    std::lock_guard lock(impl_->mu);
    impl_->watches.emplace(op.get(), op);
  }
  op->Start();
  auto handle_impl = std::make_shared<WatchHandle::Impl>();
  handle_impl->op = std::move(op);
  return WatchHandle(std::move(handle_impl));
}

void Driver::AsyncInterrupt(StatusHandler handler, std::chrono::milliseconds timeout) {
  std::make_shared<OneShotOp>(impl_, ClientRequest::Interrupt(NewRequestId()), timeout, std::move(handler))->Start();
}

void Driver::AsyncAnswer(std::string input_id, std::map<std::string, std::vector<std::string>> answers,
                         StatusHandler handler, std::chrono::milliseconds timeout) {
  std::make_shared<OneShotOp>(impl_, ClientRequest::Answer(NewRequestId(), std::move(input_id), std::move(answers)),
                              timeout, std::move(handler))
      ->Start();
}

void Driver::AsyncDecline(std::string input_id, StatusHandler handler, std::chrono::milliseconds timeout) {
  std::make_shared<OneShotOp>(impl_, ClientRequest::Decline(NewRequestId(), std::move(input_id)), timeout,
                              std::move(handler))
      ->Start();
}

namespace {
template <typename Start>
Status BlockingStatus(Context& context, std::chrono::milliseconds timeout, const char* what, Start start) {
  if (context.InWorkerThread()) {
    return Fail(Errc::would_block, std::string(what) + " blocks and was called on a Context worker thread");
  }
  auto promise = std::make_shared<std::promise<Result<bool>>>();
  auto future = promise->get_future();
  start([promise](Status status) {
    if (status) {
      promise->set_value(true);
    } else {
      promise->set_value(Fail(status.error()));
    }
  });
  auto result = WaitBlocking(context, future, timeout, what);
  if (!result) return Fail(result.error());
  return {};
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
