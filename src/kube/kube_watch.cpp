// KubeClient's watches: list, then watch from the list's resourceVersion with BOOKMARKs, resume
// where a watch the server ended left off, re-list after 410 Gone; and the blocking Watch on top.
//
// A watch is a chain of steps that run one at a time (list, token, stream, wait, ...): the chain's
// state needs no lock. Only Stop(), the deadline and the client's destruction come from elsewhere;
// they end the watch once (EndWith) and cancel whatever step is in flight.
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "blocking.hpp"
#include "blocking_loop.hpp"
#include "json_fields.hpp"
#include "kube/kube_rest.hpp"

namespace sessionturn::kube {

using nlohmann::json;

namespace {

// A watch that fails this many times in a row (no event in between) gives up.
constexpr int kMaxWatchFailures = 8;
// A watch that ends sooner than this without an event counts as a failure (backoff, bounded).
constexpr std::chrono::milliseconds kMinQuietWatch{500};
// Bound on one watch event line (a Session object is a few KiB; 8 MiB matches the runtime's line bound).
constexpr std::size_t kMaxWatchLine = 8u << 20;
// Each watch request asks the server to end it after server_timeout; one that is not ended by then
// plus this margin is ended by us (and resumed), so a server that forgets cannot hold it forever.
constexpr std::chrono::seconds kWatchGrace{15};

std::string ResourceVersionOf(const json& object) {
  if (!object.is_object()) return {};
  auto md = object.find("metadata");
  if (md == object.end() || !md->is_object()) return {};
  auto rv = md->find("resourceVersion");
  return rv != md->end() && rv->is_string() ? rv->get<std::string>() : std::string();
}

class WatchOp : public Op, public std::enable_shared_from_this<WatchOp> {
 public:
  WatchOp(std::shared_ptr<RestState> state, std::string path, KubeWatchOptions options, WatchHandler on_event,
          KubeStatusHandler on_end, std::shared_ptr<http::Lane> lane)
      : state_(std::move(state)),
        lane_(std::move(lane)),
        path_(std::move(path)),
        options_(std::move(options)),
        on_event_(std::move(on_event)),
        need_list_(options_.resource_version.empty()),
        backoff_(state_->Retry(), options_.deadline),
        rv_(options_.resource_version),
        on_end_(std::move(on_end)),
        retry_timer_(state_->Io(lane_.get())),
        deadline_timer_(state_->Io(lane_.get())) {
    if (!options_.label_selector.empty()) selectors_ += "&labelSelector=" + UrlEncode(options_.label_selector);
    if (!options_.field_selector.empty()) selectors_ += "&fieldSelector=" + UrlEncode(options_.field_selector);
  }

  // On a worker or the lane's loop (posted by StartWatch, which registered the watch with the client).
  void Start() {
    {
      std::lock_guard lock(mu_);
      if (ended_) return;
      deadline_timer_.expires_at(options_.deadline);
      deadline_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
        if (!ec) self->EndWith(self->TimeoutError());
      });
    }
    Step();
  }

  void Cancel(Error why) override {
    if (lane_ && !lane_->loop->get_executor().running_in_this_thread()) {
      // From another thread (the client's destruction), on a lane: ended on the lane's loop, where
      // its handler runs. Waiting here for a handler to return (as EndWith does) could wait for
      // ever: the handler may be inside a blocking call on this client that a later cancel ends.
      // No event is delivered from now on (Ended() counts this), and a post that no loop runs any
      // more holds nothing.
      if (Ended()) return;
      silenced_.store(true, std::memory_order_release);
      asio::post(*lane_->loop, [weak = weak_from_this(), why = std::move(why)]() mutable {
        if (auto self = weak.lock()) self->EndWith(Fail(std::move(why)));
      });
      return;
    }
    EndWith(Fail(std::move(why)));
  }
  // A watch on the Context: its Cancel waits for a handler running on a worker (see Op).
  bool RunsHandlers() const override { return lane_ == nullptr; }

  // Ends the watch once: no event is delivered after this returns (off the delivering thread), the
  // step in flight is cancelled, and the end handler is posted.
  void EndWith(Status status) {
    {
      std::unique_lock lock(deliver_mu_, std::defer_lock);
      if (delivering_.load(std::memory_order_acquire) != std::this_thread::get_id()) lock.lock();
      silenced_.store(true, std::memory_order_release);
    }
    KubeStatusHandler end;
    HttpCall stream;
    KubeCall list;
    {
      std::lock_guard lock(mu_);
      if (ended_) return;
      ended_ = true;
      end = std::move(on_end_);
      stream = stream_;
      list = list_;
      retry_timer_.cancel();
      deadline_timer_.cancel();
    }
    stream.Cancel();
    list.Cancel();
    state_->Untrack(this);
    if (lane_ && end) {
      state_->Post(lane_.get(), [end = std::move(end), status = std::move(status)]() mutable { end(std::move(status)); });
    } else {
      blocking::ReportNow(state_->context, std::move(end), std::move(status));
    }
  }

  bool Active() {
    std::lock_guard lock(mu_);
    return !ended_;
  }

  std::string ResourceVersion() {
    std::lock_guard lock(mu_);
    return rv_;
  }

 private:
  // Ended, or being ended (silenced: a cancel from another thread is on its way to the loop).
  bool Ended() {
    if (silenced_.load(std::memory_order_acquire)) return true;
    std::lock_guard lock(mu_);
    return ended_;
  }

  Status TimeoutError() const { return Fail(Errc::timeout, "watch " + path_ + ": the deadline passed"); }

  std::string Rv() {
    std::lock_guard lock(mu_);
    return rv_;
  }

  void SetRv(std::string rv) {
    if (rv.empty()) return;
    std::lock_guard lock(mu_);
    rv_ = std::move(rv);
  }

  void Step() {
    if (Ended()) return;
    if (std::chrono::steady_clock::now() >= options_.deadline) return EndWith(TimeoutError());
    if (need_list_) return List();
    state_->AsyncBearerToken(
        [self = shared_from_this()](Result<std::string> token) { self->OpenStream(std::move(token)); }, lane_.get());
  }

  void List() {
    CallSpec spec;
    spec.method = "GET";
    spec.path = path_ + (selectors_.empty() ? "" : "?" + selectors_.substr(1));
    spec.deadline = std::min(options_.deadline, std::chrono::steady_clock::now() + state_->options.request_timeout);
    KubeCall call = StartCall(
        state_, std::move(spec), [self = shared_from_this()](Result<json> list) { self->OnList(std::move(list)); },
        lane_);
    bool ended;
    {
      std::lock_guard lock(mu_);
      list_ = call;
      ended = ended_;
    }
    if (ended) call.Cancel();
  }

  void OnList(Result<json> list) {
    {
      std::lock_guard lock(mu_);
      list_ = KubeCall();
    }
    if (Ended()) return;
    if (!list) {
      if (list.error().code == Errc::timeout && std::chrono::steady_clock::now() >= options_.deadline) {
        return EndWith(TimeoutError());
      }
      return EndWith(Fail(list.error()));
    }
    if (relist_ && !Deliver(WatchEvent{"RELISTED", json::object()})) return;
    if (list->is_object()) {
      auto items = list->find("items");
      if (items != list->end() && items->is_array()) {
        for (auto& item : *items) {
          if (!Deliver(WatchEvent{"ADDED", std::move(item)})) return;
        }
      }
    }
    SetRv(ResourceVersionOf(*list));
    need_list_ = false;
    relist_ = false;
    Step();
  }

  void OpenStream(Result<std::string> token) {
    if (Ended()) return;
    if (!token) return EndWith(Fail(token.error()));
    const auto now = std::chrono::steady_clock::now();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(options_.deadline - now);
    if (left.count() <= 0) return EndWith(TimeoutError());
    long long server_timeout =
        std::max<long long>(1, std::min<long long>(options_.server_timeout.count(), left.count() / 1000 + 1));
    watch_path_ = path_ + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(server_timeout) +
                  selectors_;
    std::string rv = Rv();
    if (!rv.empty()) watch_path_ += "&resourceVersion=" + UrlEncode(rv);
    auto http_timeout = std::min<std::chrono::milliseconds>(left + std::chrono::seconds(1),
                                                           std::chrono::seconds(server_timeout) + kWatchGrace);
    HttpRequest request = state_->MakeRequest("GET", watch_path_, *token, {}, {}, http_timeout);
    pending_.clear();
    gone_ = false;
    got_event_ = false;
    stream_error_.reset();
    stream_started_ = now;
    HttpStreamHandlers handlers;
    handlers.on_chunk = [self = shared_from_this()](std::string_view chunk) { return self->OnChunk(chunk); };
    handlers.on_done = [self = shared_from_this()](Result<HttpResponse> r) { self->OnStreamDone(std::move(r)); };
    HttpCall call = state_->Stream(std::move(request), std::move(handlers), lane_.get());
    bool ended;
    {
      std::lock_guard lock(mu_);
      stream_ = call;
      ended = ended_;
    }
    if (ended) call.Cancel();
  }

  // On the HTTP client's strand, inside libcurl: nothing may throw out of it.
  bool OnChunk(std::string_view chunk) {
    if (silenced_.load(std::memory_order_acquire)) return false;
    try {
      pending_.append(chunk);
      std::size_t start = 0;
      while (true) {
        auto nl = pending_.find('\n', start);
        if (nl == std::string::npos) break;
        std::string_view line(pending_.data() + start, nl - start);
        start = nl + 1;
        if (!OnLine(line)) {
          pending_.clear();
          return false;
        }
      }
      pending_.erase(0, start);
      if (pending_.size() > kMaxWatchLine) {
        stream_error_ = Error(Errc::too_large, "watch " + path_ + ": an event is larger than 8 MiB");
        return false;
      }
      return true;
    } catch (const std::exception& e) {
      stream_error_ = Error(Errc::internal, "watch " + path_ + ": " + e.what());
      return false;
    }
  }

  bool OnLine(std::string_view line) {
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) return true;
    json ev = json::parse(line, nullptr, false);
    if (ev.is_discarded() || !ev.is_object()) {
      stream_error_ = Error(Errc::protocol_error, "watch " + path_ + ": an event is not a JSON object");
      return false;
    }
    std::string type = json_fields::String(ev, "type");
    json object = ev.contains("object") ? std::move(ev["object"]) : json::object();
    if (type == "ERROR") {
      const auto status = json_fields::Int(object, "code").value_or(0);
      const int code = status >= 100 && status <= 599 ? static_cast<int>(status) : 0;
      if (code == 410) {
        gone_ = true;  // the resourceVersion was compacted away: re-list
      } else {
        stream_error_ = Error(CodeFor(code), "watch " + path_ + ": " + StatusText(object.dump()), code);
      }
      return false;
    }
    SetRv(ResourceVersionOf(object));
    got_event_ = true;
    return Deliver(WatchEvent{std::move(type), std::move(object)});
  }

  // Runs the event handler unless the watch was silenced; false when the watch is over.
  bool Deliver(const WatchEvent& event) {
    bool keep = false;
    std::optional<Error> threw;
    {
      std::lock_guard lock(deliver_mu_);
      if (silenced_.load(std::memory_order_acquire)) return false;
      delivering_.store(std::this_thread::get_id(), std::memory_order_release);
      try {
        keep = on_event_ ? on_event_(event) : true;
      } catch (const std::exception& e) {
        threw = Error(Errc::internal, "watch " + path_ + ": the event handler threw: " + e.what());
      } catch (...) {
        threw = Error(Errc::internal, "watch " + path_ + ": the event handler threw a non-standard exception");
      }
      delivering_.store(std::thread::id(), std::memory_order_release);
    }
    if (threw) {
      EndWith(Fail(std::move(*threw)));
      return false;
    }
    if (!keep) {
      EndWith(Status{});
      return false;
    }
    return !silenced_.load(std::memory_order_acquire);  // Stop() from inside the handler
  }

  void OnStreamDone(Result<HttpResponse> r) {
    {
      std::lock_guard lock(mu_);
      stream_ = HttpCall();
    }
    if (Ended()) return;
    if (stream_error_) return EndWith(Fail(*stream_error_));
    if (got_event_) failures_ = 0;
    if (gone_ || (r && r->status == 410)) {
      need_list_ = true;
      relist_ = true;
      return Step();
    }
    const auto now = std::chrono::steady_clock::now();
    if (!r) {
      if (now >= options_.deadline) return EndWith(TimeoutError());
      if (++failures_ >= kMaxWatchFailures) return EndWith(Fail(TransportError(state_->config, r.error())));
      return RetryLater(backoff_.Backoff(failures_));
    }
    const int s = r->status;
    if (s == 200) {
      // The server ended the watch (timeoutSeconds): resume from the last resourceVersion. A server
      // that ends watches at once without sending anything must not make this a busy loop.
      if (!got_event_ && now - stream_started_ < kMinQuietWatch) {
        if (++failures_ >= kMaxWatchFailures) {
          return EndWith(Fail(Errc::unavailable, "watch " + path_ + ": the server keeps ending watches at once"));
        }
        return RetryLater(backoff_.Backoff(failures_));
      }
      return Step();
    }
    if (s == 401 && !reauthed_ && state_->config.InvalidateToken()) {
      reauthed_ = true;
      return Step();
    }
    if ((s == 429 || s >= 500) && ++failures_ < kMaxWatchFailures) {
      auto retry_after = RetryAfterOf(*r);
      return RetryLater(retry_after ? std::min(*retry_after, state_->options.max_backoff) : backoff_.Backoff(failures_));
    }
    EndWith(Fail(CodeFor(s), "watch " + path_ + ": HTTP " + std::to_string(s) + " " + StatusText(r->body), s));
  }

  void RetryLater(std::chrono::milliseconds delay) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(options_.deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return EndWith(TimeoutError());
    std::lock_guard lock(mu_);
    if (ended_ || silenced_.load(std::memory_order_acquire)) return;
    retry_timer_.expires_after(std::min(delay, left));
    retry_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (!ec) self->Step();
    });
  }

  const std::shared_ptr<RestState> state_;
  const std::shared_ptr<http::Lane> lane_;  // null: on the Context
  const std::string path_;
  const KubeWatchOptions options_;
  std::string selectors_;
  WatchHandler on_event_;  // under deliver_mu_

  // The chain's own state (one step at a time).
  bool need_list_;
  bool relist_ = false;
  bool reauthed_ = false;
  bool gone_ = false;
  bool got_event_ = false;
  int failures_ = 0;
  std::string pending_;
  std::optional<Error> stream_error_;
  std::string watch_path_;
  std::chrono::steady_clock::time_point stream_started_;
  RetryBudget backoff_;

  std::mutex mu_;
  std::string rv_;  // under mu_: ResourceVersion() reads it from any thread
  bool ended_ = false;
  KubeStatusHandler on_end_;
  HttpCall stream_;
  KubeCall list_;
  asio::steady_timer retry_timer_;
  asio::steady_timer deadline_timer_;

  std::mutex deliver_mu_;
  std::atomic<std::thread::id> delivering_{};
  std::atomic<bool> silenced_{false};
};

}  // namespace
}  // namespace sessionturn::kube

namespace sessionturn {

struct KubeWatch::Impl {
  std::shared_ptr<kube::WatchOp> op;
};

void KubeWatch::Stop() {
  if (impl_) impl_->op->EndWith(Status{});
}

bool KubeWatch::Active() const { return impl_ && impl_->op->Active(); }

std::string KubeWatch::ResourceVersion() const { return impl_ ? impl_->op->ResourceVersion() : std::string(); }

}  // namespace sessionturn

namespace sessionturn::kube {

namespace {

// Makes the watch and starts it on its loop, or ends it at once (stopped Context, bad path, closed client).
std::shared_ptr<WatchOp> StartWatchOp(const std::shared_ptr<RestState>& state, std::string collection_path,
                                      KubeWatchOptions options, WatchHandler on_event, KubeStatusHandler on_end,
                                      std::shared_ptr<http::Lane> lane) {
  const http::Lane* on = lane.get();
  auto op = std::make_shared<WatchOp>(state, collection_path, std::move(options), std::move(on_event),
                                      std::move(on_end), std::move(lane));
  if (state->context.Stopped()) {
    op->EndWith(Fail(blocking::StoppedContextError("watch " + collection_path)));
  } else if (collection_path.empty() || collection_path.front() != '/') {
    op->EndWith(Fail(Errc::invalid_argument, "watch: the collection path \"" + collection_path + "\" is not an API path"));
  } else if (!state->Track(op)) {  // registered now: the client's destruction must find it
    op->EndWith(Fail(Errc::cancelled, "watch " + collection_path + ": the KubeClient was destroyed"));
  } else {
    state->Post(on, [op] { op->Start(); });
  }
  return op;
}

}  // namespace

KubeWatch StartWatch(const std::shared_ptr<RestState>& state, std::string collection_path, KubeWatchOptions options,
                     WatchHandler on_event, KubeStatusHandler on_end, std::shared_ptr<http::Lane> lane) {
  auto op = StartWatchOp(state, std::move(collection_path), std::move(options), std::move(on_event), std::move(on_end),
                         std::move(lane));
  return KubeWatch(std::make_shared<KubeWatch::Impl>(KubeWatch::Impl{std::move(op)}));
}

// The blocking Watch: the watch runs on this thread's lane, and `handler` is called as each event is
// read (inside the HTTP read: the next read waits for it, so a slow handler slows the stream instead
// of queueing events without bound). A handler may make blocking calls on the client (they get a lane
// of their own).
Status BlockingWatch(std::shared_ptr<RestState> state, std::string_view collection_path,
                     const KubeWatchOptions& options, const WatchHandler& handler) {
  const auto bound = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 options.deadline - std::chrono::steady_clock::now()));
  std::shared_ptr<WatchOp> op;
  return http::RunOnLane<void>(
      state->lanes(), state->context, bound, "KubeClient::Watch",
      [&] { return Error(Errc::cancelled, "watch " + std::string(collection_path) + ": the KubeClient was destroyed"); },
      [&](const std::shared_ptr<http::Lane>& lane, KubeStatusHandler done) {
        op = StartWatchOp(state, std::string(collection_path), options, handler, std::move(done), lane);
      },
      [&](Error why) {
        if (op) op->Cancel(std::move(why));
      });
}

}  // namespace sessionturn::kube
