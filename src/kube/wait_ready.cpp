// SessionClient::AsyncWaitReady (DESIGN.md §5): a watch on the one Session, a poll when the watch is
// refused or fails for good, an idle resume requested once, all on the client's Context without a
// thread of its own. One strand orders the watch's events, the poll's answers, the timers and a
// cancellation.
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include <atomic>
#include <memory>

#include "sessionturn/sessions.hpp"

namespace sessionturn {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string Describe(const Session& s) {
  std::string out = "phase " + (s.phase.empty() ? std::string("(none yet)") : s.phase);
  if (!s.message.empty()) out += ": " + s.message;
  return out;
}

// Errors no retry or poll cures: the wait ends with them.
bool Fatal(const Error& e) {
  return e.code == Errc::unauthorized || e.code == Errc::forbidden || e.code == Errc::would_block ||
         e.code == Errc::invalid_argument || e.code == Errc::cancelled;
}

class WaitReadyOp : public std::enable_shared_from_this<WaitReadyOp> {
 public:
  WaitReadyOp(SessionClient sessions, std::string name, Clock::time_point deadline, WaitReadyOptions options,
              SessionHandler<ReadySession> handler)
      : sessions_(std::move(sessions)),
        name_(std::move(name)),
        who_("Session " + sessions_.Namespace() + "/" + name_),
        deadline_(deadline),
        options_(std::move(options)),
        handler_(std::move(handler)),
        strand_(asio::make_strand(sessions_.Client().context().io())),
        deadline_timer_(strand_),
        poll_timer_(strand_) {}

  void Start() {
    auto self = shared_from_this();
    asio::post(strand_, [self] {
      if (self->options_.cancel.IsCancelled()) return self->Finish(Fail(Errc::cancelled, self->who_ + ": the wait was cancelled"));
      if (self->options_.cancel.CanBeCancelled()) {
        std::weak_ptr<WaitReadyOp> weak = self;
        self->options_.cancel.OnCancel([weak] {
          if (auto op = weak.lock()) {
            asio::post(op->strand_, [op] { op->Finish(Fail(Errc::cancelled, op->who_ + ": the wait was cancelled")); });
          }
        });
      }
      self->deadline_timer_.expires_at(self->deadline_);
      self->deadline_timer_.async_wait([self](std::error_code ec) {
        if (!ec) self->Finish(self->Timeout());
      });
      self->Watch();
    });
  }

 private:
  void Watch() {
    KubeWatchOptions wo;
    wo.field_selector = "metadata.name=" + name_;
    wo.deadline = deadline_;
    auto self = shared_from_this();
    watch_ = sessions_.Client().AsyncWatch(
        sessions_.CollectionPath(), wo,
        [self](const WatchEvent& ev) {
          if (ev.type == "ADDED" || ev.type == "MODIFIED") {
            auto s = Session::FromJson(ev.object);
            if (s && s->name == self->name_) asio::post(self->strand_, [self, s = std::move(*s)] { self->Evaluate(s); });
          } else if (ev.type == "DELETED") {
            asio::post(self->strand_, [self] { self->last_seen_.reset(); });  // gone again: wait for it to reappear
          }
          return !self->done_.load();
        },
        [self](Status st) {
          asio::post(self->strand_, [self, st = std::move(st)] {
            if (self->done_ || st) return;  // ended by us (the outcome is known) or by the handler
            if (st.error().code == Errc::timeout) return self->Finish(self->Timeout());
            if (Fatal(st.error())) return self->Finish(Fail(st.error()));
            self->Poll();  // refused or failed for good: poll from now on
          });
        });
  }

  void Poll() {
    if (done_) return;
    auto self = shared_from_this();
    sessions_.AsyncGet(name_, [self](Result<Session> s) {
      asio::post(self->strand_, [self, s = std::move(s)] {
        if (self->done_) return;
        if (s) {
          self->Evaluate(*s);
        } else if (s.error().code != Errc::not_found && Fatal(s.error())) {
          return self->Finish(Fail(s.error()));
        }
        if (self->done_) return;
        self->poll_timer_.expires_after(self->options_.poll_interval);
        self->poll_timer_.async_wait([self](std::error_code ec) {
          if (!ec) self->Poll();
        });
      });
    });
  }

  // What one observation means; finishes the wait when it is over.
  void Evaluate(const Session& s) {
    if (done_) return;
    last_seen_ = s;
    if (options_.on_update) options_.on_update(s);
    // The owner's decision first: a Session still Ready whose owner asked for the suspension is
    // about to stop, and connecting to it would only race the controller.
    if (s.IsOwnerSuspended()) {
      return Finish(Fail(Errc::unavailable, who_ + " is suspended by its owner (spec.suspend)" +
                                                (s.message.empty() ? "" : ": " + s.message)));
    }
    if (s.IsReady()) {
      ReadySession ready{s.pod_name, s, resume_request_};
      if (ready.resume_request.empty() && !s.resume_request.empty() && s.resume_request != s.resume_acknowledgement) {
        ready.resume_request = s.resume_request;  // someone else's resume: acknowledging it is still ours to do
      }
      return Finish(std::move(ready));
    }
    if (s.IsFailed()) return Finish(Fail(Errc::failed, who_ + " failed" + (s.message.empty() ? "" : ": " + s.message)));
    if (s.IsIdleSuspended() && resume_request_.empty() && !resume_in_flight_) {
      if (!options_.resume_idle) {
        return Finish(Fail(Errc::unavailable, who_ + " is suspended by its idle policy and resume_idle is off"));
      }
      resume_in_flight_ = true;
      auto self = shared_from_this();
      sessions_.AsyncRequestIdleResume(name_, [self](Result<std::string> r) {
        asio::post(self->strand_, [self, r = std::move(r)] {
          self->resume_in_flight_ = false;
          if (!r) {
            return self->Finish(Fail(r.error().code, self->who_ + ": requesting an idle resume: " + r.error().message,
                                     r.error().http_status));
          }
          self->resume_request_ = *r;
        });
      });
    }
  }

  tl::unexpected<Error> Timeout() const {
    return Fail(Errc::timeout, who_ + " was not ready by the deadline (" +
                                   (last_seen_ ? Describe(*last_seen_) : std::string("not found")) + ")");
  }

  void Finish(Result<ReadySession> outcome) {
    if (done_.exchange(true)) return;
    deadline_timer_.cancel();
    poll_timer_.cancel();
    watch_.Stop();
    // The watch holds our handlers and we hold the watch: let go of it, or the two keep each other.
    watch_ = KubeWatch();
    auto handler = std::move(handler_);
    handler(std::move(outcome));
  }

  SessionClient sessions_;
  const std::string name_;
  const std::string who_;
  const Clock::time_point deadline_;
  WaitReadyOptions options_;
  SessionHandler<ReadySession> handler_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::steady_timer deadline_timer_;
  asio::steady_timer poll_timer_;
  KubeWatch watch_;
  std::atomic<bool> done_{false};
  std::optional<Session> last_seen_;
  std::string resume_request_;
  bool resume_in_flight_ = false;
};

}  // namespace

void SessionClient::AsyncWaitReady(const std::string& name, Clock::time_point deadline, WaitReadyOptions options,
                                   SessionHandler<ReadySession> handler) {
  std::make_shared<WaitReadyOp>(*this, name, deadline, std::move(options), std::move(handler))->Start();
}

}  // namespace sessionturn
