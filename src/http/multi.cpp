// The libcurl multi handle on the Context's event loop. libcurl tells us which sockets to watch and
// when to call it back; we wait with Asio and call curl_multi_socket_action on one strand.
//
// Sockets: libcurl opens and closes its connections through our OPENSOCKET/CLOSESOCKET callbacks, so
// a descriptor registered with Asio never outlives its fd and a reused fd number always gets a fresh
// registration. Sockets libcurl makes itself (the threaded resolver's wakeup pair) are watched
// through a dup of the fd, recognised by device and inode, and dropped when libcurl no longer
// wants them or the number turns out to name another file.
//
// Readiness: Asio's epoll reactor is edge-triggered and an async_wait is not speculative, so an edge
// that arrives while no wait is queued is lost. We therefore queue the next wait before calling
// libcurl (an edge during its read is kept), and when libcurl starts wanting a direction we also
// poll the fd once, so data that arrived before the wait was queued is not left unread.
#include "http/multi.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <future>

#include "sessionturn/version.hpp"

namespace sessionturn::http {

namespace {

// How long ~HttpClient waits, off a worker, for the cancelled exchanges' handlers to run.
constexpr std::chrono::seconds kCloseWait{5};
// How often that wait checks whether the Context was stopped under it (then nothing reports).
constexpr std::chrono::milliseconds kStoppedPoll{100};

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

constexpr int kRead = 0;
constexpr int kWrite = 1;
constexpr int BitOf(int direction) { return direction == kRead ? CURL_POLL_IN : CURL_POLL_OUT; }
constexpr int SelectOf(int direction) { return direction == kRead ? CURL_CSELECT_IN : CURL_CSELECT_OUT; }

}  // namespace

struct Multi::Socket {
  explicit Socket(const Strand& strand) : desc(strand) {}
  asio::posix::stream_descriptor desc;
  curl_socket_t fd = CURL_SOCKET_BAD;  // libcurl's number (a foreign socket's desc holds a dup of it)
  int want = 0;                        // CURL_POLL_IN/OUT bits libcurl asked for last
  bool waiting[2] = {false, false};    // an async_wait of that direction is queued
  bool closed = false;
  bool foreign = false;  // made by libcurl itself, not through OnOpenSocket
  dev_t dev = 0;
  ino_t ino = 0;
};

Multi::Multi(Context& context, HttpClientOptions options)
    : Multi(context, context.io(), std::move(options), std::make_shared<Tally>()) {}

Multi::Multi(Context& context, asio::io_context& io, HttpClientOptions options, std::shared_ptr<Tally> tally)
    : context_(context),
      io_(io),
      options_(std::move(options)),
      strand_(asio::make_strand(io)),
      timer_(strand_),
      tally_(std::move(tally)) {
  GlobalInit();
  user_agent_ = options_.user_agent.empty() ? std::string("sessionturn/") + SESSIONTURN_VERSION_STRING
                                            : options_.user_agent;
  multi_ = curl_multi_init();
  share_ = curl_share_init();
  if (multi_ == nullptr || share_ == nullptr) {
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
    if (share_ != nullptr) curl_share_cleanup(share_);
    throw std::bad_alloc();
  }
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, static_cast<curl_socket_callback>(&Multi::OnSocket));
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, static_cast<curl_multi_timer_callback>(&Multi::OnTimer));
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, options_.max_idle_connections);
  // The multi handle shares connections and DNS; TLS sessions need a share to be resumed by the
  // next connection. All use is on the strand, so the share needs no lock callbacks.
  curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
}

Multi::~Multi() {
  // Reached without Close() having run on the strand only when nothing runs any more (a stopped
  // Context) or the last handler holding us is being destroyed: either way nobody else is inside.
  CloseNow(false);
}

void Multi::PrepareEasy(CURL* easy) {
  curl_easy_setopt(easy, CURLOPT_SHARE, share_);
  curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, static_cast<curl_opensocket_callback>(&Multi::OnOpenSocket));
  curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, this);
  curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, static_cast<curl_closesocket_callback>(&Multi::OnCloseSocket));
  curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, this);
}

// ---- submitting, cancelling, closing --------------------------------------------------------------

void Multi::Submit(std::shared_ptr<Transfer> transfer) {
  tally_->Add();
  asio::post(strand_, [self = shared_from_this(), transfer = std::move(transfer)] { self->Start(transfer); });
}

void Multi::Start(const std::shared_ptr<Transfer>& t) {
  if (closed_) t->SetCancel(Transfer::Cancel::client_closed);
  if (t->Cancelled()) return Report(t, Fail(t->CancelledError()));
  CURL* easy = AcquireEasy();
  if (easy == nullptr) return Report(t, Fail(Errc::internal, t->What() + ": curl_easy_init failed"));
  if (auto set = t->Setup(easy, *this, user_agent_); !set) {
    ReleaseEasy(easy);
    t->Teardown();
    return Report(t, Fail(set.error()));
  }
  PrepareEasy(easy);
  transfers_.emplace(easy, t);
  if (CURLMcode rc = curl_multi_add_handle(multi_, easy); rc != CURLM_OK) {
    transfers_.erase(easy);
    ReleaseEasy(easy);
    t->Teardown();
    return Report(t, Fail(Errc::internal, t->What() + ": curl_multi_add_handle: " + curl_multi_strerror(rc)));
  }
  // libcurl now asks for a timeout of 0 (OnTimer), which starts the exchange from the strand.
}

void Multi::Cancel(const std::shared_ptr<Transfer>& t) {
  {
    // Wait for a handler running on another thread; from inside a handler, do not lock ourselves out.
    std::unique_lock lock(deliver_mu_, std::defer_lock);
    if (delivering_.load(std::memory_order_acquire) != std::this_thread::get_id()) lock.lock();
    t->SetCancel(Transfer::Cancel::by_caller);
  }
  asio::post(strand_, [self = shared_from_this(), t] {
    if (self->closed_ || t->easy == nullptr) return;  // not started yet (Start reports it) or done
    auto it = self->transfers_.find(t->easy);
    if (it != self->transfers_.end() && it->second == t) self->Finish(t->easy, CURLE_ABORTED_BY_CALLBACK);
  });
}

void Multi::Close() {
  {
    std::unique_lock lock(deliver_mu_, std::defer_lock);
    if (delivering_.load(std::memory_order_acquire) != std::this_thread::get_id()) lock.lock();
    closing_.store(true, std::memory_order_release);
  }
  if (context_.Joined()) return CloseNow(false);  // nothing runs any more: do it here, report nothing
  auto done = std::make_shared<std::promise<void>>();
  auto closed = done->get_future();
  asio::post(strand_, [self = shared_from_this(), done] {
    self->CloseNow(true);
    done->set_value();
  });
  // A worker cannot wait for the loop it is part of; libcurl's callbacks (where a handler may
  // destroy the client) must not re-enter libcurl. There the strand does it soon after.
  if (context_.InWorkerThread()) return;
  const auto deadline = std::chrono::steady_clock::now() + kCloseWait;
  while (closed.wait_for(kStoppedPoll) != std::future_status::ready) {
    if (context_.Stopped() || std::chrono::steady_clock::now() >= deadline) return;
  }
  std::unique_lock lock(tally_->mu);
  while (tally_->in_flight > 0 && !context_.Stopped() && std::chrono::steady_clock::now() < deadline) {
    tally_->idle.wait_for(lock, kStoppedPoll);
  }
}

void Multi::CloseIdle() {
  {
    std::lock_guard lock(deliver_mu_);
    closing_.store(true, std::memory_order_release);
  }
  CloseNow(false);
}

void Multi::CancelAll() {
  // No wait for a stream handler running now (unlike Close): it may be inside a blocking call that
  // only a cancel queued after this one ends. Handlers that start later see closing_.
  closing_.store(true, std::memory_order_release);
  asio::post(strand_, [self = shared_from_this()] { self->CloseNow(true); });
}

void Multi::CloseNow(bool report) {
  if (closed_) return;
  closed_ = true;
  closing_.store(true, std::memory_order_release);
  for (auto& [easy, t] : transfers_) {
    t->SetCancel(Transfer::Cancel::client_closed);
    curl_multi_remove_handle(multi_, easy);
    curl_easy_cleanup(easy);
    t->easy = nullptr;
    t->Teardown();
    if (report) {
      Report(t, Fail(t->CancelledError()));
    } else {
      t->handlers = HttpStreamHandlers{};  // their captures may hold what holds us
      t->finished.store(true, std::memory_order_release);
      tally_->Done();  // its done handler will never run: it is not in flight any more
    }
  }
  transfers_.clear();
  for (CURL* easy : pool_) curl_easy_cleanup(easy);
  pool_.clear();
  try {
    timer_.cancel();
  } catch (const std::exception&) {
    // Nothing is waiting on it that could matter any more.
  }
  asio::error_code ec;
  // The cached connections close now (through OnCloseSocket); libcurl must not ask for waits any more.
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, static_cast<curl_socket_callback>(nullptr));
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, static_cast<curl_multi_timer_callback>(nullptr));
  curl_multi_cleanup(multi_);
  multi_ = nullptr;
  curl_share_cleanup(share_);
  share_ = nullptr;
  for (auto& [fd, s] : sockets_) {
    s->closed = true;
    if (s->foreign) {
      s->desc.close(ec);
    } else {
      // libcurl closes its own sockets in curl_multi_cleanup; one still here was leaked by it.
      ::close(s->desc.release());
    }
  }
  sockets_.clear();
}

// ---- libcurl's side -------------------------------------------------------------------------------

void Multi::SocketAction(curl_socket_t fd, int events) {
  if (closed_) return;
  int running = 0;
  CURLMcode rc = curl_multi_socket_action(multi_, fd, events, &running);
  if (rc != CURLM_OK && context_.ShouldLog(LogLevel::warning)) {
    context_.Log(LogLevel::warning, std::string("HttpClient: curl_multi_socket_action: ") + curl_multi_strerror(rc));
  }
  CollectDone();
}

void Multi::CollectDone() {
  int left = 0;
  while (!closed_) {
    CURLMsg* message = curl_multi_info_read(multi_, &left);
    if (message == nullptr) break;
    if (message->msg != CURLMSG_DONE) continue;
    // The message is freed by curl_multi_remove_handle: copy what we need first.
    CURL* easy = message->easy_handle;
    CURLcode code = message->data.result;
    Finish(easy, code);
  }
}

void Multi::Finish(CURL* easy, CURLcode code) {
  auto it = transfers_.find(easy);
  if (it == transfers_.end()) return;
  std::shared_ptr<Transfer> t = std::move(it->second);
  transfers_.erase(it);
  curl_multi_remove_handle(multi_, easy);
  Result<HttpResponse> outcome = t->Outcome(code);
  ReleaseEasy(easy);
  t->easy = nullptr;
  t->Teardown();
  Report(t, std::move(outcome));
}

void Multi::Report(const std::shared_ptr<Transfer>& t, Result<HttpResponse> outcome) {
  HttpHandler handler = std::move(t->handlers.on_done);
  t->handlers = HttpStreamHandlers{};  // the stream's captures are released now, not with the handle
  // Posted, never called here: we may be inside libcurl, and the handler may start new exchanges or
  // destroy the client.
  asio::post(io_, [t, tally = tally_, handler = std::move(handler), outcome = std::move(outcome)]() mutable {
    struct Done {
      Transfer& t;
      Tally& tally;
      ~Done() {
        t.finished.store(true, std::memory_order_release);
        tally.Done();
      }
    } done{*t, *tally};
    if (handler) handler(std::move(outcome));
  });
}

// libcurl moves its timeout on nearly every call, and re-arming an Asio timer is a timerfd_settime
// (and an aborted wait) each time: the largest cost per request before this. So "now" is a post
// instead of a timer, and an armed timer is only moved earlier, never later: waking before libcurl's
// timeout is harmless (it does nothing and tells us the new one), waking after it would be late.
int Multi::OnTimer(CURLM*, long timeout_ms, void* userp) noexcept {
  auto* self = static_cast<Multi*>(userp);
  try {
    if (timeout_ms < 0) {
      if (self->timer_armed_) {
        self->timer_armed_ = false;
        self->timer_.cancel();
      }
      return 0;
    }
    auto keep = self->weak_from_this().lock();
    if (!keep) return 0;  // being destroyed
    if (timeout_ms == 0) {
      if (!self->kick_posted_) {
        self->kick_posted_ = true;
        asio::post(self->strand_, [keep] {
          keep->kick_posted_ = false;
          if (!keep->closed_) keep->SocketAction(CURL_SOCKET_TIMEOUT, 0);
        });
      }
      return 0;
    }
    const auto when = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    if (self->timer_armed_ && self->timer_expiry_ <= when) return 0;
    self->timer_armed_ = true;
    self->timer_expiry_ = when;
    self->timer_.expires_at(when);
    self->timer_.async_wait([keep](const asio::error_code& ec) {
      if (ec || keep->closed_) return;  // moved (a newer wait replaced this one), or closed
      keep->timer_armed_ = false;
      keep->SocketAction(CURL_SOCKET_TIMEOUT, 0);
    });
  } catch (const std::exception& e) {
    self->context_.Log(LogLevel::error, std::string("HttpClient: arming libcurl's timer: ") + e.what());
    return -1;
  }
  return 0;
}

int Multi::OnSocket(CURL*, curl_socket_t fd, int what, void* userp, void*) noexcept {
  auto* self = static_cast<Multi*>(userp);
  try {
    self->Watch(fd, what);
  } catch (const std::exception& e) {
    self->context_.Log(LogLevel::error, std::string("HttpClient: watching a socket: ") + e.what());
    return -1;
  }
  return 0;
}

void Multi::Watch(curl_socket_t fd, int what) {
  if (what == CURL_POLL_REMOVE) {
    auto it = sockets_.find(fd);
    if (it == sockets_.end()) return;
    std::shared_ptr<Socket> s = it->second;
    s->want = 0;
    if (s->foreign) return DropSocket(fd);
    asio::error_code ec;
    s->desc.cancel(ec);  // queued waits end with operation_aborted; the fd stays libcurl's
    return;
  }
  std::shared_ptr<Socket> s = SocketFor(fd);
  if (!s) return;
  s->want = what;
  for (int direction : {kRead, kWrite}) {
    if ((what & BitOf(direction)) != 0 && !s->waiting[direction]) Arm(s, direction, /*check_ready=*/true);
  }
}

std::shared_ptr<Multi::Socket> Multi::SocketFor(curl_socket_t fd) {
  auto it = sockets_.find(fd);
  if (it != sockets_.end()) {
    if (!it->second->foreign) return it->second;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_dev == it->second->dev && st.st_ino == it->second->ino) return it->second;
    DropSocket(fd);  // libcurl closed that one and the number now names another file
  }
  // A socket libcurl made itself (not through OnOpenSocket): watch a dup of it, so that closing our
  // descriptor never closes libcurl's fd and its registration dies with the dup.
  struct stat st {};
  if (::fstat(fd, &st) != 0) return nullptr;
  int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {
    context_.Log(LogLevel::warning, "HttpClient: cannot watch a libcurl socket: dup failed");
    return nullptr;
  }
  auto s = std::make_shared<Socket>(strand_);
  asio::error_code ec;
  s->desc.assign(dup, ec);
  if (ec) {
    ::close(dup);
    context_.Log(LogLevel::warning, "HttpClient: cannot watch a libcurl socket: " + ec.message());
    return nullptr;
  }
  s->fd = fd;
  s->foreign = true;
  s->dev = st.st_dev;
  s->ino = st.st_ino;
  sockets_[fd] = s;
  return s;
}

void Multi::DropSocket(curl_socket_t fd) {
  auto it = sockets_.find(fd);
  if (it == sockets_.end()) return;
  std::shared_ptr<Socket> s = std::move(it->second);
  sockets_.erase(it);
  s->closed = true;
  asio::error_code ec;
  if (s->foreign) {
    s->desc.close(ec);  // our dup
  } else {
    s->desc.release();  // libcurl's fd: deregister only
  }
}

void Multi::Arm(const std::shared_ptr<Socket>& s, int direction, bool check_ready) {
  if (s->waiting[direction] || s->closed) return;
  auto self = weak_from_this().lock();
  if (!self) return;  // being destroyed
  s->waiting[direction] = true;
  s->desc.async_wait(direction == kRead ? asio::posix::descriptor_base::wait_read
                                        : asio::posix::descriptor_base::wait_write,
                     [self, s, direction](const asio::error_code& ec) { self->OnReady(s, direction, ec); });
  if (!check_ready) return;
  pollfd p{s->desc.native_handle(), static_cast<short>(direction == kRead ? POLLIN : POLLOUT), 0};
  if (::poll(&p, 1, 0) > 0) {
    // Ready before the wait was queued: that edge is gone, so act on it ourselves. If the wait fires
    // too, libcurl just finds nothing more to do.
    asio::post(strand_, [self, s, direction] {
      if (!self->closed_ && !s->closed && (s->want & BitOf(direction)) != 0) {
        self->SocketAction(s->fd, SelectOf(direction));
      }
    });
  }
}

void Multi::OnReady(const std::shared_ptr<Socket>& s, int direction, const asio::error_code& ec) {
  s->waiting[direction] = false;
  if (closed_ || s->closed) return;
  if ((s->want & BitOf(direction)) == 0) return;  // libcurl lost interest; Watch() arms again when it wants it
  if (ec == asio::error::operation_aborted) {
    // Cancelled by a CURL_POLL_REMOVE that libcurl has since taken back: wait again, checking readiness.
    return Arm(s, direction, /*check_ready=*/true);
  }
  if (ec) return SocketAction(s->fd, CURL_CSELECT_ERR);
  Arm(s, direction, /*check_ready=*/false);  // before libcurl reads: an edge during its read is kept
  SocketAction(s->fd, SelectOf(direction));
}

curl_socket_t Multi::OnOpenSocket(void* clientp, curlsocktype purpose, curl_sockaddr* address) noexcept {
  auto* self = static_cast<Multi*>(clientp);
  if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKET_BAD;
  int fd = ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  if (fd < 0) return CURL_SOCKET_BAD;
  try {
    self->DropSocket(fd);  // a foreign socket's stale entry under the same number
    auto s = std::make_shared<Socket>(self->strand_);
    asio::error_code ec;
    s->desc.assign(fd, ec);
    if (ec) {
      ::close(fd);
      return CURL_SOCKET_BAD;
    }
    s->fd = fd;
    self->sockets_[fd] = std::move(s);
  } catch (...) {
    ::close(fd);
    return CURL_SOCKET_BAD;
  }
  self->tally_->connections_opened.fetch_add(1, std::memory_order_relaxed);
  return fd;
}

int Multi::OnCloseSocket(void* clientp, curl_socket_t fd) noexcept {
  auto* self = static_cast<Multi*>(clientp);
  try {
    auto it = self->sockets_.find(fd);
    if (it != self->sockets_.end() && !it->second->foreign) {
      std::shared_ptr<Socket> s = std::move(it->second);
      self->sockets_.erase(it);
      s->closed = true;
      s->desc.release();  // deregisters and aborts queued waits; the fd is closed below
    }
  } catch (...) {
    // Closing must happen whatever the bookkeeping did.
  }
  return ::close(fd);
}

CURL* Multi::AcquireEasy() {
  if (!pool_.empty()) {
    CURL* easy = pool_.back();
    pool_.pop_back();
    return easy;
  }
  return curl_easy_init();
}

void Multi::ReleaseEasy(CURL* easy) {
  // Reset now: the handle must not keep pointers to this exchange's headers (the Authorization
  // header among them) or body. Connections live in the multi handle, not here.
  curl_easy_reset(easy);
  if (!closed_ && pool_.size() < options_.max_pooled_handles) {
    pool_.push_back(easy);
  } else {
    curl_easy_cleanup(easy);
  }
}

}  // namespace sessionturn::http
