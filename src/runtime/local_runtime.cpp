// LocalRuntime: the socket it listens on, the public API and the fault hooks. What requests do is in
// core_requests.cpp, running turns and recovery in core_turns.cpp (see runtime/core.hpp).
#include "sessionturn/testing/local_runtime.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>

#include "runtime/core.hpp"

namespace sessionturn::testing {
namespace {

using runtime::Journal;
using stream = asio::local::stream_protocol;

// A hook waits this long for the I/O thread; only a wedged runtime (a bug) gets near it.
constexpr std::chrono::seconds kHookTimeout{30};

constexpr std::string_view kRecordingOff =
    "request recording is off: set LocalRuntimeOptions::record_requests to use ReceivedRequests/WaitForRequest";

}  // namespace

namespace local_runtime_detail {

void Core::Log(LogLevel level, const std::string& message) const {
  if (opt.log_sink) {
    opt.log_sink(level, message);
  } else if (level >= LogLevel::warning) {
    static const LogSink sink = StderrLogSink();
    sink(level, "local runtime: " + message);
  }
}

void Core::RunOnIo(const std::function<void()>& fn) {
  if (stopped.load() || std::this_thread::get_id() == io_thread_id.load()) {
    if (!stopped.load()) fn();
    return;
  }
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  asio::post(io, [fn, done] {
    fn();
    done->set_value();
  });
  if (fut.wait_for(kHookTimeout) != std::future_status::ready)
    Log(LogLevel::error, "a test hook did not run within 30 s: the runtime's I/O thread is stuck");
}

Status Core::Listen() {
  namespace fs = std::filesystem;
  const std::string& path = opt.socket_path;
  if (path.size() >= sizeof(sockaddr_un{}.sun_path))
    return Fail(Errc::invalid_argument, "socket path " + path + " is longer than a unix socket allows (107 bytes)");
  std::error_code fec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::exists(parent, fec)) {
    fs::create_directories(parent, fec);
    if (fec) return Fail(Errc::io_error, "cannot create socket directory " + parent.string() + ": " + fec.message());
    ::chmod(parent.c_str(), 0700);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Fail(Errc::io_error, path + " exists and is not a socket; not replacing it");
    // Stale unless something answers on it.
    stream::socket probe(io);
    asio::error_code ec;
    probe.connect(stream::endpoint(path), ec);
    if (!ec) return Fail(Errc::io_error, "another runtime is already listening on " + path);
    ::unlink(path.c_str());
  }
  acceptor.emplace(io);
  asio::error_code ec;
  acceptor->open(stream(), ec);
  if (!ec) acceptor->bind(stream::endpoint(path), ec);
  if (ec) {
    acceptor.reset();
    return Fail(Errc::io_error, "cannot bind unix socket " + path + ": " + ec.message());
  }
  ::chmod(path.c_str(), 0600);
  acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    acceptor.reset();
    return Fail(Errc::io_error, "cannot listen on " + path + ": " + ec.message());
  }
  return {};  // the caller starts Accept() once recovery is done
}

void Core::Accept() {
  if (!acceptor) return;
  acceptor->async_accept([this](const asio::error_code& ec, stream::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor || !acceptor->is_open()) return;
      Log(LogLevel::warning, "accept failed: " + ec.message());
      Accept();
      return;
    }
    Stir();
    auto c = std::make_shared<Conn>(*this, std::move(socket), kRuntimeMaxRequestBytes);
    conns.insert(c);
    conn_count.fetch_add(1);
    if (pending_drop > 0) {
      c->drop_budget = pending_drop;
      pending_drop = 0;
    }
    c->Start();
    Accept();
  });
}

void Core::CloseListener() {
  if (acceptor) {
    asio::error_code ec;
    acceptor->close(ec);
    acceptor.reset();
    ::unlink(opt.socket_path.c_str());
  }
}

void Core::CloseAll() {
  std::vector<std::shared_ptr<Conn>> all(conns.begin(), conns.end());
  for (auto& c : all) c->Close();
}

// Called by Conn::Close; the set keeps it alive until this posted removal.
void Core::OnClosed(const std::shared_ptr<Conn>& c) {
  conn_count.fetch_sub(1);
  asio::post(io, [this, c] {
    conns.erase(c);
    std::erase(subscribers, c.get());
  });
}

void Core::Shutdown() {
  stopping = true;
  CloseListener();
  CloseAll();
  KillRun();
  provider->Stop(true);
  restart_timer.cancel();
  std::lock_guard<std::mutex> lk(mu);
  journal->Close();
}

}  // namespace local_runtime_detail

struct LocalRuntime::Impl : local_runtime_detail::Core {
  using Core::Core;
};

// ---- LocalRuntime --------------------------------------------------------------------------------

LocalRuntime::LocalRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LocalRuntime::~LocalRuntime() { Stop(); }

Result<std::unique_ptr<LocalRuntime>> LocalRuntime::Start(LocalRuntimeOptions options) {
  if (options.socket_path.empty()) return Fail(Errc::invalid_argument, "LocalRuntimeOptions.socket_path is required");
  if (options.subscriber_buffer == 0 || options.retained_events == 0)
    return Fail(Errc::invalid_argument, "retained_events and subscriber_buffer must be positive");
  auto impl = std::make_unique<Impl>(std::move(options));
  runtime::ProviderOptions po;
  po.agent_bin = impl->opt.agent_bin;
  po.log = [raw = impl.get()](LogLevel level, const std::string& message) { raw->Log(level, message); };
  auto provider = runtime::Provider::Parse(impl->opt.provider, po);
  if (!provider) return Fail(provider.error());
  impl->provider = std::move(*provider);
  try {
    std::vector<std::string> warnings;
    auto journal = Journal::Open(impl->opt.state_dir, impl->opt.retained_events, &warnings);
    if (!journal) return Fail(journal.error());
    impl->journal = std::move(*journal);
    for (const auto& w : warnings) impl->Log(LogLevel::warning, w);
    // What the real runtime reports from its configuration: the Session, the agent, its model, where
    // it works (here: the directory `!` commands and command providers run in) and HOME; usage
    // starts at zero and follows what the provider reports.
    impl->status.session_name = impl->opt.session_name;
    impl->status.agent_type = "sessionturn-local-" + impl->provider->Kind();
    impl->provider->Describe(impl->status);
    impl->status.working_dir =
        impl->opt.working_dir.empty() ? std::filesystem::current_path().string() : impl->opt.working_dir;
    if (const char* home = std::getenv("HOME")) impl->status.home_dir = home;
    impl->status.usage = Usage{};
    // Bind, then recover, then accept, all before the I/O thread starts: a client that connects at
    // once must not have its first turn taken for unfinished work of the previous run, and a runtime
    // that cannot bind must not touch the journal.
    if (auto st = impl->Listen(); !st) return Fail(st.error());
    impl->Recover();
    impl->Accept();
  } catch (const std::exception& e) {
    return Fail(Errc::internal, std::string("local runtime failed to start: ") + e.what());
  }
  Impl* raw = impl.get();
  raw->guard.emplace(raw->io.get_executor());
  raw->thread = std::thread([raw] {
    raw->io_thread_id.store(std::this_thread::get_id());
    for (;;) {
      try {
        raw->io.run();
        break;
      } catch (const std::exception& e) {
        raw->Log(LogLevel::error, std::string("a handler threw: ") + e.what());
      }
    }
  });
  return std::unique_ptr<LocalRuntime>(new LocalRuntime(std::move(impl)));
}

void LocalRuntime::Stop() {
  Impl& s = *impl_;
  if (s.stopped.load()) return;
  s.RunOnIo([&s] { s.Shutdown(); });
  s.stopped.store(true);
  s.guard.reset();
  s.io.stop();
  if (s.thread.joinable()) s.thread.join();
}

RuntimeActivity LocalRuntime::Activity() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  RuntimeActivity a;
  a.busy = impl_->busy;
  if (!a.busy) a.idle_for = std::chrono::steady_clock::now() - impl_->stirred;
  a.last_turn = impl_->last_turn;
  return a;
}

bool LocalRuntime::StopIfIdle(std::chrono::milliseconds idle_for) {
  Impl& s = *impl_;
  if (s.stopped.load()) return true;
  bool idle = false;
  s.RunOnIo([&s, &idle, idle_for] {
    {
      std::lock_guard<std::mutex> lk(s.mu);
      idle = !s.busy && std::chrono::steady_clock::now() - s.stirred >= idle_for;
    }
    if (idle) s.Shutdown();  // on the I/O thread: nothing is accepted or handled after the check
  });
  if (idle) Stop();
  return idle;
}

const std::string& LocalRuntime::socket_path() const { return impl_->opt.socket_path; }

std::string LocalRuntime::journal_id() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->journal->id();
}

std::int64_t LocalRuntime::last_event_id() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->journal->last_id();
}

std::vector<Event> LocalRuntime::JournalEvents() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  std::vector<Event> out;
  out.reserve(impl_->journal->retained().size());
  for (const auto& e : impl_->journal->retained()) out.push_back(e.event);
  return out;
}

std::vector<ClientRequest> LocalRuntime::ReceivedRequests() const {
  if (!impl_->opt.record_requests) {
    impl_->Log(LogLevel::error, std::string(kRecordingOff));
    return {};
  }
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->requests;
}

Result<Event> LocalRuntime::WaitForEvent(const std::function<bool(const Event&)>& pred,
                                         std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lk(impl_->mu);
  std::int64_t checked = 0;
  for (;;) {
    for (const auto& e : impl_->journal->retained())
      if (e.event.id > checked && pred(e.event)) return e.event;
    checked = impl_->journal->last_id();
    if (impl_->cv.wait_until(lk, deadline) == std::cv_status::timeout && std::chrono::steady_clock::now() >= deadline) {
      for (const auto& e : impl_->journal->retained())
        if (e.event.id > checked && pred(e.event)) return e.event;
      return Fail(Errc::timeout, "no matching journal event within " + std::to_string(timeout.count()) + " ms");
    }
  }
}

Status LocalRuntime::WaitForRequest(const std::function<bool(const ClientRequest&)>& pred,
                                    std::chrono::milliseconds timeout) const {
  if (!impl_->opt.record_requests) return Fail(Errc::invalid_argument, std::string(kRecordingOff));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lk(impl_->mu);
  std::size_t checked = 0;
  for (;;) {
    for (; checked < impl_->requests.size(); ++checked)
      if (pred(impl_->requests[checked])) return {};
    if (impl_->cv.wait_until(lk, deadline) == std::cv_status::timeout && std::chrono::steady_clock::now() >= deadline) {
      for (; checked < impl_->requests.size(); ++checked)
        if (pred(impl_->requests[checked])) return {};
      return Fail(Errc::timeout, "no matching request within " + std::to_string(timeout.count()) + " ms");
    }
  }
}

void LocalRuntime::DropAllConnections() {
  impl_->RunOnIo([this] { impl_->CloseAll(); });
}

void LocalRuntime::DropAfterEvents(std::int64_t n) {
  impl_->RunOnIo([this, n] {
    Impl& s = *impl_;
    s.pending_drop = 0;
    bool any = false;
    for (const auto& c : s.conns) {
      if (c->closed()) continue;
      c->drop_budget = n > 0 ? n : -1;
      any = true;
    }
    if (!any && n > 0) s.pending_drop = n;
  });
}

void LocalRuntime::PauseProvider(bool paused) {
  impl_->RunOnIo([this, paused] {
    Impl& s = *impl_;
    s.paused = paused;
    if (paused) return;
    auto waiters = std::move(s.resume_waiters);
    s.resume_waiters.clear();
    for (auto& fn : waiters) asio::post(s.io, std::move(fn));
    s.MaybeStartNext();
  });
}

void LocalRuntime::SetDraining(bool draining) {
  impl_->RunOnIo([this, draining] { impl_->draining = draining; });
}

Status LocalRuntime::Restart() {
  Status result;
  impl_->RunOnIo([this, &result] {
    Impl& s = *impl_;
    s.CloseListener();
    s.CloseAll();
    s.KillRun();
    s.provider->Stop(false);  // a crash takes the agent process with it
    s.restart_timer.cancel();
    s.restarting = false;
    s.partial_answers.clear();
    std::vector<std::string> warnings;
    {
      std::lock_guard<std::mutex> lk(s.mu);
      result = s.journal->Reload(&warnings);
    }
    for (const auto& w : warnings) s.Log(LogLevel::warning, w);
    if (!result) return;
    // Bind, recover, accept (as Start does). The old connections are closed but still in the set until
    // their posted removal; the new listener may bind at once because CloseListener unlinked the path.
    result = s.Listen();
    if (!result) return;
    s.Recover();
    s.Accept();
  });
  if (impl_->stopped.load()) return Fail(Errc::unavailable, "the local runtime was stopped");
  return result;
}

std::size_t LocalRuntime::ConnectionCount() const { return impl_->conn_count.load(); }

}  // namespace sessionturn::testing
