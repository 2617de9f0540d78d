// The LocalBackend's waits (local_backend.hpp): the Session lock taken without blocking a worker,
// stopping a runtime, WaitReady (start on demand, then poll until it serves) and the connector a
// ReadyTarget carries. Every wait is an Asio timer on the backend's Context; no worker sleeps.
#include <algorithm>
#include <optional>

#include <asio.hpp>

#include "backend/local_backend.hpp"
#include "backend/local_process.hpp"
#include "blocking.hpp"
#include "conn/operation_strand.hpp"

namespace sessionturn::local {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Unix connects that fail this way mean nothing listens there: the runtime is not (or no longer) up.
bool NothingListens(const Error& e) {
  return e.code == Errc::connection_failed;
}

std::string Ms(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

void TryLock(std::shared_ptr<Core> core, std::string name, SteadyClock::time_point until,
             std::shared_ptr<asio::steady_timer> timer, std::function<void(Result<SessionLock>)> then) {
  if (core->closed.load()) return then(Fail(core->Cancelled("an operation on Session " + name)));
  const SessionPaths paths = core->Paths(name);
  auto lock = SessionLock::TryAcquire(paths.lock_file);
  if (!lock) {
    if (lock.error().code == Errc::not_found)
      return then(Fail(Errc::not_found, "there is no Session " + name + " in " + core->options.state_dir));
    return then(Fail(lock.error()));
  }
  if (lock->held()) return then(std::move(*lock));
  if (SteadyClock::now() >= until) {
    return then(Fail(Errc::unavailable, "Session " + name + " stayed locked by another operation or process for " +
                                            Ms(kLockWait) + " (" + paths.lock_file + ")"));
  }
  timer->expires_after(kLockRetry);
  timer->async_wait([core = std::move(core), name = std::move(name), until, timer,
                     then = std::move(then)](const asio::error_code&) mutable {
    TryLock(std::move(core), std::move(name), until, std::move(timer), std::move(then));
  });
}

// One WaitReady: each step looks at the Session under its lock and either finishes, starts its
// runtime, or looks again after a while.
class WaitOp : public std::enable_shared_from_this<WaitOp> {
 public:
  WaitOp(std::shared_ptr<Core> core, std::string name, SteadyClock::time_point deadline, ReadyProgress progress,
         CancellationToken cancel, BackendHandler<ReadyTarget> handler)
      : core_(std::move(core)),
        name_(std::move(name)),
        deadline_(deadline),
        progress_(std::move(progress)),
        cancel_(std::move(cancel)),
        handler_(std::move(handler)),
        timer_(core_->context.io()) {}

  void Step() {
    if (core_->closed.load()) return Finish(Fail(core_->Cancelled("WaitReady for Session " + name_)));
    if (cancel_.IsCancelled())
      return Finish(Fail(Errc::cancelled, "WaitReady for Session " + name_ + " was cancelled"));
    if (SteadyClock::now() >= deadline_) return Finish(Fail(TimedOut()));
    WithSessionLock(core_, name_, [self = shared_from_this()](Result<SessionLock> lock) {
      if (!lock) {
        if (lock.error().code == Errc::not_found) return self->Absent();
        return self->Finish(Fail(lock.error()));
      }
      self->Decide(*lock);
    });
  }

 private:
  Error TimedOut() const {
    if (!seen_)
      return Error(Errc::not_found, "there is no Session " + name_ + " in " + core_->options.state_dir +
                                        " (it did not appear before the deadline)");
    return Error(Errc::timeout, "Session " + name_ + " was not ready before the deadline" +
                                    (last_message_.empty() ? std::string() : ": " + last_message_));
  }

  void Absent() {
    SessionInfo info;
    info.name = name_;
    info.phase = SessionPhase::pending;
    info.message = "there is no Session " + name_ + " yet";
    Report(info, "pending");
    Again(kAbsentPoll);
  }

  void Decide(const SessionLock& lock) {
    auto seen = Observe(*core_, name_, &lock);
    if (!seen) {
      if (seen.error().code == Errc::not_found) return Absent();
      return Finish(Fail(seen.error()));
    }
    seen_ = true;
    last_message_ = seen->info.message;
    const SessionInfo& info = seen->info;
    if (info.phase == SessionPhase::suspended && info.suspended == SuspendReason::owner) {
      return Finish(Fail(Errc::unavailable, "Session " + name_ + " is suspended by its owner; Resume it first"));
    }
    if (seen->live.serving) {
      Report(info, "ready");
      ReadyTarget target;
      target.connector = MakeSessionConnector(core_, name_);
      target.info = info;
      target.resumed = resumed_;
      return Finish(std::move(target));
    }
    if (seen->live.alive) return Starting(info, seen->live.pid);
    if (started_pid_ != 0) {
      // The runtime this wait started is gone again. Gone idle, it served and nobody came in its
      // suspend_after (a short one, on a loaded machine, can pass before this wait looks): started
      // again, a few times. Gone any other way, a restart did not cure it.
      const bool idle = info.phase == SessionPhase::suspended && info.suspended == SuspendReason::idle;
      if (!idle || idle_restarts_ >= kIdleRestarts) {
        return Finish(Fail(Errc::failed, "Session " + name_ + ": " + info.message +
                                             (idle ? " (its runtime went idle " + std::to_string(idle_restarts_ + 1) +
                                                         " times before this wait saw it serving: is suspend_after "
                                                         "too short?)"
                                                   : std::string())));
      }
      ++idle_restarts_;
      poll_ = std::chrono::milliseconds(1);
    }
    Start(lock, *seen);
  }

  void Start(const SessionLock& lock, const Observation& seen) {
    if (seen.info.phase == SessionPhase::suspended && seen.info.suspended == SuspendReason::idle) {
      resumed_ = true;
      stage_ = "resuming";
    }
    Report(seen.info, stage_);
    auto pid = core_->host->Start(core_->Paths(name_), seen.record);
    if (!pid) {
      const Errc code = pid.error().code == Errc::not_found ? Errc::not_found : Errc::failed;
      return Finish(Fail(code, "Session " + name_ + ": cannot start its runtime: " + pid.error().message));
    }
    started_pid_ = *pid;
    start_deadline_ = SteadyClock::now() + core_->options.start_timeout;
    // Look again at once (a hosted runtime serves already); the look also records the start.
    Decide(lock);
  }

  void Starting(const SessionInfo& info, long pid) {
    Report(info, stage_);
    if (started_pid_ == pid && SteadyClock::now() >= start_deadline_) {
      core_->host->Kill(core_->Paths(name_).dir, pid);
      std::string tail = LogTail(core_->Paths(name_).log);
      return Finish(Fail(Errc::timeout, "Session " + name_ + ": its runtime (pid " + std::to_string(pid) +
                                            ") did not start serving within " + Ms(core_->options.start_timeout) +
                                            " and was killed" +
                                            (tail.empty() ? std::string() : "; runtime.log:\n" + tail)));
    }
    Again(poll_);
    poll_ = std::min(poll_ * 2, kStartPollMax);
  }

  void Again(std::chrono::milliseconds after) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - SteadyClock::now());
    timer_.expires_after(std::clamp(after, std::chrono::milliseconds(0), std::max(left, std::chrono::milliseconds(0))));
    timer_.async_wait([self = shared_from_this()](const asio::error_code&) { self->Step(); });
  }

  void Report(const SessionInfo& info, const std::string& stage) {
    if (!progress_ || stage == reported_) return;
    reported_ = stage;
    progress_(info, stage);
  }

  void Finish(Result<ReadyTarget> result) {
    if (!handler_) return;
    auto handler = std::move(handler_);
    handler_ = nullptr;
    handler(std::move(result));
  }

  std::shared_ptr<Core> core_;
  std::string name_;
  SteadyClock::time_point deadline_;
  ReadyProgress progress_;
  CancellationToken cancel_;
  BackendHandler<ReadyTarget> handler_;
  asio::steady_timer timer_;
  bool seen_ = false;  // the Session existed at some look
  bool resumed_ = false;
  std::string stage_ = "starting";
  std::string reported_;
  std::string last_message_;
  long started_pid_ = 0;
  int idle_restarts_ = 0;  // runtimes this wait started that went idle before it saw them serving
  static constexpr int kIdleRestarts = 3;
  SteadyClock::time_point start_deadline_{};
  std::chrono::milliseconds poll_{1};
};

class SessionConnector final : public Connector, public std::enable_shared_from_this<SessionConnector> {
 public:
  SessionConnector(std::shared_ptr<Core> core, std::string name)
      : core_(std::move(core)), name_(std::move(name)), socket_path_(core_->Paths(name_).socket) {}

  void AsyncConnect(ConnectHandler handler) override { Attempt(std::nullopt, std::move(handler), false); }
  // The runtime's socket on the caller's strand (a blocking turn's private loop, or the turn's own).
  void AsyncConnectOn(const OperationStrand& strand, ConnectHandler handler) override {
    Attempt(strand, std::move(handler), false);
  }
  bool ConnectsOnStrand() const override { return true; }

  std::string Describe() const override { return "local:" + name_ + " (unix:" + socket_path_ + ")"; }

 private:
  void Attempt(std::optional<OperationStrand> strand, ConnectHandler handler, bool rechecked) {
    if (core_->closed.load()) {
      blocking::ReportNow(
          core_->context, std::move(handler),
          Result<std::shared_ptr<Connection>>(Fail(core_->Cancelled("connecting to Session " + name_))));
      return;
    }
    auto socket = SocketPath::For(socket_path_);
    if (!socket) {
      if (rechecked) {
        blocking::ReportNow(core_->context, std::move(handler),
                            Result<std::shared_ptr<Connection>>(Fail(Errc::connection_failed, socket.error().message)));
      } else {
        Recheck(std::move(handler));
      }
      return;
    }
    // The directory descriptor behind a long path lives until the connect has completed.
    auto held = std::make_shared<SocketPath>(std::move(*socket));
    auto inner = MakeUnixConnector(core_->context, held->path());
    auto connected = [self = shared_from_this(), held, rechecked,
                      handler = std::move(handler)](Result<std::shared_ptr<Connection>> c) mutable {
      if (c || rechecked || !NothingListens(c.error())) return handler(std::move(c));
      self->Recheck(std::move(handler));
    };
    if (strand) {
      inner->AsyncConnectOn(*strand, std::move(connected));
    } else {
      inner->AsyncConnect(std::move(connected));
    }
  }

  // Nothing listens: the runtime idle-exited (or crashed) since; start it as WaitReady would.
  // Reported on the Context, so the connection is made there too: one on the operation's strand must
  // complete on that strand, which a blocking caller may have stopped running by then.
  void Recheck(ConnectHandler handler) {
    const auto deadline = SteadyClock::now() + core_->options.start_timeout;
    WaitReady(core_, name_, deadline, {}, {},
              [self = shared_from_this(), handler = std::move(handler)](Result<ReadyTarget> ready) mutable {
                if (!ready) {
                  // The driver retries a connect that failed `unavailable` as a busy runtime; a Session
                  // suspended by its owner is not going to answer a retry, so it is a failed connect.
                  Error e = ready.error();
                  if (e.code == Errc::unavailable) e.code = Errc::connection_failed;
                  return handler(Fail(std::move(e)));
                }
                self->Attempt(std::nullopt, std::move(handler), true);
              });
  }

  std::shared_ptr<Core> core_;
  std::string name_;
  // The runtime's socket: the state root and the name are fixed, and every connect of every turn
  // needs it (the Session's paths were a third of a connect here).
  const std::string socket_path_;
};

// Waits (on a timer) until a runtime asked to stop has gone; SIGKILL after kStopGrace.
class StopOp : public std::enable_shared_from_this<StopOp> {
 public:
  StopOp(std::shared_ptr<Core> core, std::string dir, long pid, std::function<void()> done)
      : core_(std::move(core)),
        dir_(std::move(dir)),
        pid_(pid),
        done_(std::move(done)),
        timer_(core_->context.io()),
        kill_at_(SteadyClock::now() + kStopGrace) {}

  void Poll() {
    if (!core_->host->Running(dir_, pid_)) return done_();
    if (SteadyClock::now() >= kill_at_) {
      if (killed_) {
        core_->context.Log(LogLevel::warning, "local backend: runtime pid " + std::to_string(pid_) + " of " + dir_ +
                                                  " survived SIGKILL for " + Ms(kStopGrace) + "; going on without it");
        return done_();
      }
      core_->host->Kill(dir_, pid_);
      killed_ = true;
      kill_at_ = SteadyClock::now() + kStopGrace;
    }
    timer_.expires_after(kStopPoll);
    timer_.async_wait([self = shared_from_this()](const asio::error_code&) { self->Poll(); });
  }

 private:
  std::shared_ptr<Core> core_;
  std::string dir_;
  long pid_;
  std::function<void()> done_;
  asio::steady_timer timer_;
  SteadyClock::time_point kill_at_;
  bool killed_ = false;
};

}  // namespace

void WithSessionLock(std::shared_ptr<Core> core, std::string name, std::function<void(Result<SessionLock>)> then) {
  if (core->context.Stopped()) {
    then(Fail(blocking::StoppedContextError("an operation on Session " + name)));
    return;
  }
  auto timer = std::make_shared<asio::steady_timer>(core->context.io());
  const auto until = SteadyClock::now() + kLockWait;
  core->context.Post([core, name = std::move(name), until, timer, then = std::move(then)]() mutable {
    TryLock(std::move(core), std::move(name), until, std::move(timer), std::move(then));
  });
}

void StopRuntime(std::shared_ptr<Core> core, SessionPaths paths, long pid, std::function<void()> done) {
  if (pid <= 0 || !core->host->RequestStop(paths, pid)) return done();
  auto op = std::make_shared<StopOp>(std::move(core), paths.dir, pid, std::move(done));
  op->Poll();
}

void WaitReady(std::shared_ptr<Core> core, std::string name, std::chrono::steady_clock::time_point deadline,
               ReadyProgress progress, CancellationToken cancel, BackendHandler<ReadyTarget> handler) {
  if (core->context.Stopped()) {
    if (handler) handler(Fail(blocking::StoppedContextError("WaitReady for Session " + name)));
    return;
  }
  Context& context = core->context;
  auto op = std::make_shared<WaitOp>(std::move(core), std::move(name), deadline, std::move(progress), std::move(cancel),
                                     std::move(handler));
  context.Post([op] { op->Step(); });  // never report inline, not even a deadline that has passed
}

std::shared_ptr<Connector> MakeSessionConnector(std::shared_ptr<Core> core, std::string name) {
  return std::make_shared<SessionConnector>(std::move(core), std::move(name));
}

}  // namespace sessionturn::local
