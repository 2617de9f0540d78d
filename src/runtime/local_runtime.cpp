// LocalRuntime: the protocol's server side. Everything that touches Session state runs on the
// runtime's own I/O thread (one io_context, one thread), so there are no data races by construction;
// the public hooks hop onto that thread and wait (bounded) for the result. Readers of the journal on
// other threads (JournalEvents, WaitForEvent) hold `mu`, which the I/O thread takes to append.
#include "sessionturn/testing/local_runtime.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <asio.hpp>

#include "runtime/journal.hpp"
#include "runtime/provider.hpp"

namespace sessionturn::testing {
namespace {

using runtime::Journal;
using runtime::JournalEntry;
using runtime::TurnRecord;
using stream = asio::local::stream_protocol;

// A hook waits this long for the I/O thread; only a wedged runtime (a bug) gets near it.
constexpr std::chrono::seconds kHookTimeout{30};
// Buffers gathered into one writev: amortises the syscall over a burst without one huge write.
constexpr std::size_t kMaxGather = 64;
constexpr std::size_t kReadChunk = 64 * 1024;

Event MakeEvent(std::string_view type) {
  Event e;
  e.type = std::string(type);
  return e;
}

}  // namespace

namespace local_runtime_detail {

struct Core;

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(Core& rt, stream::socket socket) : rt_(rt), sock_(std::move(socket)) {}

  void Start() { Read(); }
  void Send(std::shared_ptr<const std::string> bytes, bool live);
  void Close();

  bool closed() const { return closed_; }
  std::size_t live_queued() const { return live_queued_; }
  bool subscribed_ = false;
  std::int64_t drop_budget_ = -1;  // events left before DropAfterEvents closes it; -1: off
  std::size_t history_items_ = kRuntimeCondensedMaxItems;
  std::size_t history_bytes_ = kRuntimeCondensedMaxBytes;

 private:
  struct OutItem {
    std::shared_ptr<const std::string> bytes;
    bool live;  // counts against the subscriber bound (replay does not)
  };
  void Read();
  void Write();

  Core& rt_;
  stream::socket sock_;
  std::vector<char> rbuf_ = std::vector<char>(kReadChunk);
  LineFramer framer_{kRuntimeMaxRequestBytes};
  std::deque<OutItem> out_;
  std::vector<asio::const_buffer> wbufs_;
  std::size_t in_flight_ = 0;
  std::size_t live_queued_ = 0;
  bool writing_ = false;
  bool flush_posted_ = false;
  bool closed_ = false;
  bool close_after_flush_ = false;
};

// The runtime's side of one turn (see runtime::TurnHost). Dead once the turn is over or killed.
class ActiveHost : public runtime::TurnHost {
 public:
  ActiveHost(Core& rt, std::string turn_id) : rt_(rt), turn_id_(std::move(turn_id)) {}
  void Emit(Event event) override;
  void Ask(std::string input_id, std::vector<InputQuestion> questions) override;
  void Done(std::string status, std::string error) override;
  bool Paused() const override;
  void WhenResumed(std::function<void()> fn) override;
  asio::io_context& io() override;
  std::size_t Backlog() const override;
  std::size_t BacklogBound() const override;

  bool alive = true;
  const std::string& turn_id() const { return turn_id_; }

 private:
  Core& rt_;
  std::string turn_id_;
};

struct Core {
  LocalRuntimeOptions opt;
  std::shared_ptr<runtime::Provider> provider;
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  std::atomic<std::thread::id> io_thread_id{};
  std::atomic<bool> stopped{false};

  std::optional<stream::acceptor> acceptor;
  std::unique_ptr<Journal> journal;  // appended on the I/O thread under `mu`
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::vector<ClientRequest> requests;  // under mu
  std::atomic<std::size_t> conn_count{0};

  std::set<std::shared_ptr<Conn>> conns;
  std::vector<Conn*> subscribers;
  RuntimeStatus status;

  std::shared_ptr<ActiveHost> host;
  std::shared_ptr<runtime::TurnRun> run;
  std::map<std::string, std::map<std::string, std::vector<std::string>>> partial_answers;
  asio::steady_timer interrupt_timer{io};
  asio::steady_timer restart_timer{io};
  bool interrupt_armed = false;
  bool paused = false;
  bool draining = false;
  bool restarting = false;
  bool stopping = false;
  std::vector<std::function<void()>> resume_waiters;
  std::int64_t pending_drop = 0;

  explicit Core(LocalRuntimeOptions o) : opt(std::move(o)) {}

  void Log(LogLevel level, const std::string& message) const {
    if (opt.log_sink) {
      opt.log_sink(level, message);
    } else if (level >= LogLevel::warning) {
      static const LogSink sink = StderrLogSink();
      sink(level, "local runtime: " + message);
    }
  }

  // Runs `fn` on the I/O thread and waits for it (inline when already there or stopped).
  void RunOnIo(const std::function<void()>& fn) {
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

  // ---- listening -------------------------------------------------------------------------------

  Status Listen() {
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

  void Accept() {
    if (!acceptor) return;
    acceptor->async_accept([this](const asio::error_code& ec, stream::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor || !acceptor->is_open()) return;
        Log(LogLevel::warning, "accept failed: " + ec.message());
        Accept();
        return;
      }
      auto c = std::make_shared<Conn>(*this, std::move(socket));
      conns.insert(c);
      conn_count.fetch_add(1);
      if (pending_drop > 0) {
        c->drop_budget_ = pending_drop;
        pending_drop = 0;
      }
      c->Start();
      Accept();
    });
  }

  void CloseListener() {
    if (acceptor) {
      asio::error_code ec;
      acceptor->close(ec);
      acceptor.reset();
      ::unlink(opt.socket_path.c_str());
    }
  }

  void CloseAll() {
    std::vector<std::shared_ptr<Conn>> all(conns.begin(), conns.end());
    for (auto& c : all) c->Close();
  }

  // Called by Conn::Close; the set keeps it alive until this posted removal.
  void Forget(std::shared_ptr<Conn> c) {
    conn_count.fetch_sub(1);
    asio::post(io, [this, c] {
      conns.erase(c);
      std::erase(subscribers, c.get());
    });
  }

  // ---- journal and fan-out ---------------------------------------------------------------------

  static bool IsBoundary(const std::string& type) {
    return type == event_type::kUserMessage || type == event_type::kUserMessageUpdated ||
           type == event_type::kUserMessageRemoved || type == event_type::kTurnStarted ||
           type == event_type::kTurnCompleted || type == event_type::kInputResolved ||
           type == event_type::kRuntimeRecovered;
  }

  // Journals and broadcasts. Returns the error when the journal could not be written.
  Status Append(Event e) {
    Result<const JournalEntry*> r;
    {
      std::lock_guard<std::mutex> lk(mu);
      r = journal->Append(std::move(e));
    }
    if (!r) {
      Log(LogLevel::error, r.error().message);
      return Fail(r.error());
    }
    cv.notify_all();
    const JournalEntry& entry = **r;
    if (IsBoundary(entry.event.type)) journal->Sync();
    for (Conn* c : subscribers) c->Send(entry.bytes, true);
    return {};
  }

  void BroadcastUnjournaled(const Event& e) {
    auto bytes = runtime::EncodeShared(e);
    for (Conn* c : subscribers) c->Send(bytes, true);
  }

  void SendTo(Conn& c, Event e, bool live) {
    if (e.timestamp.empty()) e.timestamp = runtime::NowTimestamp();
    c.Send(runtime::EncodeShared(e), live);
  }

  void Reject(Conn& c, const ClientRequest& r, std::string reason) {
    Event e = MakeEvent(event_type::kError);
    e.request_id = r.request_id;
    e.text = std::move(reason);
    e.status = std::string(status_value::kRejected);
    SendTo(c, std::move(e), true);
  }

  Event StatusEvent() const {
    Event e = MakeEvent(event_type::kRuntimeStatus);
    e.runtime = status;
    return e;
  }

  // ---- subscribe and history -------------------------------------------------------------------

  struct Page {
    std::vector<Event> items;
    bool limited = false;
    std::string cursor;  // "before:<id>" when older items remain
  };

  // A condensed page of the retained journal: prompts (with their final text), finished assistant
  // messages and errors, newest last, without turn or request ids; removed and queued turns left out.
  Page BuildPage(std::int64_t before, std::size_t max_items, std::size_t max_bytes) const {
    std::vector<Event> candidates;
    std::map<std::string, std::size_t> prompt_at;
    std::set<std::string> removed;
    for (const auto& entry : journal->retained()) {
      const Event& e = entry.event;
      if (e.id >= before) break;
      if (e.type == event_type::kUserMessage) {
        prompt_at[e.turn_id] = candidates.size();
        candidates.push_back(e);
      } else if (e.type == event_type::kUserMessageUpdated) {
        if (auto it = prompt_at.find(e.turn_id); it != prompt_at.end()) candidates[it->second].text = e.text;
      } else if (e.type == event_type::kUserMessageRemoved) {
        removed.insert(e.turn_id);
      } else if (e.type == event_type::kAssistantMessage || e.type == event_type::kError) {
        candidates.push_back(e);
      }
    }
    for (const auto& q : journal->state().queued) removed.insert(q.id);
    std::vector<Event> kept;
    for (auto& e : candidates) {
      if (e.type == event_type::kUserMessage && removed.count(e.turn_id)) continue;
      e.turn_id.clear();
      e.request_id.clear();
      kept.push_back(std::move(e));
    }
    Page page;
    std::size_t bytes = 0;
    std::size_t take = 0;
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
      std::size_t size = EncodeEvent(*it).size() + 1;
      if (take >= max_items || (take > 0 && bytes + size > max_bytes)) break;
      bytes += size;
      ++take;
    }
    page.items.assign(kept.end() - static_cast<std::ptrdiff_t>(take), kept.end());
    page.limited = take < kept.size();
    if (page.limited) page.cursor = "before:" + std::to_string(page.items.empty() ? before : page.items.front().id);
    return page;
  }

  HistoryState CurrentHistoryState() const {
    const auto& st = journal->state();
    HistoryState hs;
    if (st.active) {
      hs.active_turn_id = st.active->id;
      hs.active_turn_started = st.active_started;
      hs.turn_interrupting = st.interrupting;
    }
    hs.waiting_for_input = !st.open_inputs.empty();
    if (!st.queued.empty()) {
      const auto& q = st.queued.front();
      hs.pending_turn = PendingTurn{q.id, q.text, q.revision};
    }
    return hs;
  }

  void Subscribe(Conn& c, const ClientRequest& r) {
    const std::int64_t first = journal->first_id();
    const std::int64_t last = journal->last_id();
    bool reset = false;
    if (r.history_bounds && !r.journal_id.empty() && r.journal_id != journal->id()) reset = true;
    if (r.since > 0 && r.journal_id.empty()) reset = true;
    if (r.since < first - 1 || r.since > last) reset = true;
    const std::int64_t since = reset ? 0 : r.since;
    const bool condensed = r.history_bounds && r.history_items > 0 && r.history_bytes > 0 && (r.since == 0 || reset);
    if (r.history_items > 0)
      c.history_items_ = std::min<std::size_t>(static_cast<std::size_t>(r.history_items), kRuntimeCondensedMaxItems);
    if (r.history_bytes > 0)
      c.history_bytes_ = std::min<std::size_t>(static_cast<std::size_t>(r.history_bytes), kRuntimeCondensedMaxBytes);

    Page page;
    if (condensed) page = BuildPage(std::numeric_limits<std::int64_t>::max(), c.history_items_, c.history_bytes_);
    if (r.history_bounds) {
      Event hs = MakeEvent(event_type::kHistoryStart);
      hs.first_event_id = journal->retained().empty() ? 0 : first;
      hs.last_event_id = last;
      hs.journal_id = journal->id();
      hs.reset = reset;
      hs.history_limited = condensed && page.limited;
      hs.history_cursor = page.cursor;
      SendTo(c, std::move(hs), false);
    }
    if (condensed) {
      for (auto& e : page.items) c.Send(runtime::EncodeShared(e), false);
    } else {
      for (const auto& entry : journal->retained())
        if (entry.event.id > since) c.Send(entry.bytes, false);
    }
    SendTo(c, StatusEvent(), false);
    Event end = MakeEvent(event_type::kHistoryEnd);
    if (condensed) end.history_state = CurrentHistoryState();
    SendTo(c, std::move(end), false);
    if (c.closed()) return;
    c.subscribed_ = true;
    subscribers.push_back(&c);
  }

  void History(Conn& c, const ClientRequest& r) {
    const std::string& cur = r.history_cursor;
    std::int64_t before = 0;
    if (cur.rfind("before:", 0) != 0 || (before = std::atoll(cur.c_str() + 7)) <= 0) {
      Reject(c, r, "invalid Session history cursor");
      return;
    }
    Page page = BuildPage(before, c.history_items_, c.history_bytes_);
    Event hs = MakeEvent(event_type::kHistoryStart);
    hs.request_id = r.request_id;
    hs.history_page = true;
    hs.journal_id = journal->id();
    hs.history_limited = page.limited;
    hs.history_cursor = page.cursor;
    SendTo(c, std::move(hs), false);
    for (auto& e : page.items) c.Send(runtime::EncodeShared(e), false);
    Event end = MakeEvent(event_type::kHistoryEnd);
    end.request_id = r.request_id;
    end.history_page = true;
    SendTo(c, std::move(end), false);
  }

  // ---- requests --------------------------------------------------------------------------------

  void OnLine(Conn& c, std::string_view line) {
    auto decoded = DecodeRequest(line);
    if (!decoded) {
      Log(LogLevel::debug, "skipped a line that is not a request: " + decoded.error().message);
      return;
    }
    const ClientRequest& r = *decoded;
    {
      std::lock_guard<std::mutex> lk(mu);
      requests.push_back(r);
    }
    cv.notify_all();
    if (r.type == request_type::kSubscribe) {
      if (!c.subscribed_) Subscribe(c, r);
      return;
    }
    if (r.type != request_type::kHistory && !c.subscribed_) Subscribe(c, ClientRequest::Subscribe(0, {}, false, 0, 0));
    if (c.closed()) return;
    if (r.type == request_type::kMessage) OnMessage(c, r);
    else if (r.type == request_type::kMessageEdit) OnEdit(c, r, false);
    else if (r.type == request_type::kMessageRemove) OnEdit(c, r, true);
    else if (r.type == request_type::kInterrupt) OnInterrupt(c, r);
    else if (r.type == request_type::kInput) OnInput(c, r);
    else if (r.type == request_type::kHistory) History(c, r);
    else Reject(c, r, "unknown request type \"" + r.type + "\"");
  }

  void AppendOrReject(Conn& c, const ClientRequest& r, Event e) {
    if (auto st = Append(std::move(e)); !st) Reject(c, r, st.error().message);
  }

  void OnMessage(Conn& c, const ClientRequest& r) {
    if (draining) return Reject(c, r, std::string(reject_reason::kDraining));
    if (restarting) return Reject(c, r, std::string(reject_reason::kProviderRestarting));
    std::string_view trimmed = TrimUnicodeSpace(r.text);
    if (trimmed.empty()) return Reject(c, r, std::string(reject_reason::kEmptyText));
    const bool shell = trimmed.front() == '!';
    if (!shell && IsRuntimeCommand(r.text)) return Reject(c, r, std::string(reject_reason::kGoalUnsupported));
    const auto& st = journal->state();
    if (!st.queued.empty()) {
      const TurnRecord& q = st.queued.back();
      if (shell) return Reject(c, r, std::string(reject_reason::kCommandMerge));
      if (q.shell) return Reject(c, r, std::string(reject_reason::kMergeOntoCommand));
      Event e = MakeEvent(event_type::kUserMessageUpdated);
      e.request_id = r.request_id;
      e.turn_id = q.id;
      e.text = q.text + "\n\n" + r.text;
      e.revision = std::max<std::int64_t>(1, q.revision) + 1;
      return AppendOrReject(c, r, std::move(e));
    }
    Event e = MakeEvent(event_type::kUserMessage);
    e.request_id = r.request_id;
    e.turn_id = "turn-" + std::to_string(st.next_turn_number);
    e.text = r.text;
    e.revision = 1;
    e.session_command = shell;
    if (!r.attachment_ids.empty()) e.attachments = r.attachment_ids;
    AppendOrReject(c, r, std::move(e));
    MaybeStartNext();
  }

  void OnEdit(Conn& c, const ClientRequest& r, bool remove) {
    const TurnRecord* q = nullptr;
    for (const auto& t : journal->state().queued)
      if (t.id == r.turn_id) q = &t;
    if (!q) return Reject(c, r, "turn " + r.turn_id + " is no longer pending");
    if (r.expected_revision != q->revision)
      return Reject(c, r, "revision is " + std::to_string(q->revision) + ", not " + std::to_string(r.expected_revision));
    if (remove) {
      Event e = MakeEvent(event_type::kUserMessageRemoved);
      e.request_id = r.request_id;
      e.turn_id = q->id;
      e.status = std::string(status_value::kRemoved);
      e.revision = q->revision + 1;
      return AppendOrReject(c, r, std::move(e));
    }
    std::string_view trimmed = TrimUnicodeSpace(r.text);
    if (trimmed.empty()) return Reject(c, r, std::string(reject_reason::kEmptyText));
    const bool shell = trimmed.front() == '!';
    if (!shell && IsRuntimeCommand(r.text)) return Reject(c, r, std::string(reject_reason::kGoalUnsupported));
    if (shell != q->shell) return Reject(c, r, std::string(reject_reason::kCommandMerge));
    Event e = MakeEvent(event_type::kUserMessageUpdated);
    e.request_id = r.request_id;
    e.turn_id = q->id;
    e.text = r.text;
    e.revision = q->revision + 1;
    AppendOrReject(c, r, std::move(e));
  }

  void OnInterrupt(Conn& c, const ClientRequest& r) {
    const auto& st = journal->state();
    if (!st.active || !run) return Reject(c, r, std::string(reject_reason::kNoActiveTurn));
    Event e = MakeEvent(event_type::kTurnInterrupting);
    e.request_id = r.request_id;
    e.turn_id = st.active->id;
    if (auto s = Append(std::move(e)); !s) return Reject(c, r, s.error().message);
    if (interrupt_armed) return;
    interrupt_armed = true;
    const std::string turn_id = st.active->id;
    interrupt_timer.expires_after(opt.interrupt_timeout);
    interrupt_timer.async_wait([this, turn_id](const asio::error_code& ec) {
      if (ec || !host || host->turn_id() != turn_id) return;
      Log(LogLevel::warning, "provider did not stop within the interrupt timeout: killing and restarting it");
      KillRun();
      CompleteTurn(turn_id, std::string(status_value::kInterrupted));
      restarting = true;
      restart_timer.expires_after(opt.provider_restart_delay);
      restart_timer.async_wait([this](const asio::error_code& ec2) {
        if (ec2) return;
        restarting = false;
        MaybeStartNext();
      });
    });
    run->Interrupt();
  }

  void OnInput(Conn& c, const ClientRequest& r) {
    const runtime::OpenInput* in = nullptr;
    for (const auto& o : journal->state().open_inputs)
      if (o.input_id == r.input_id) in = &o;
    if (!in) return Reject(c, r, "input " + r.input_id + " is not pending");
    const std::string turn_id = in->turn_id;
    const std::string input_id = in->input_id;
    if (r.cancel) {
      Event e = MakeEvent(event_type::kInputResolved);
      e.request_id = r.request_id;
      e.turn_id = turn_id;
      e.input_id = input_id;
      e.status = std::string(status_value::kCancelled);
      if (auto s = Append(std::move(e)); !s) return Reject(c, r, s.error().message);
      partial_answers.erase(input_id);
      if (run) run->InputResolved(input_id, true, {});
      return;
    }
    auto& collected = partial_answers[input_id];
    for (const auto& [qid, vals] : r.answers) collected[qid] = vals;
    bool complete = true;
    for (const auto& q : in->questions)
      if (!collected.count(q.id)) complete = false;
    Event e = MakeEvent(complete ? event_type::kInputResolved : event_type::kRequestAccepted);
    e.request_id = r.request_id;
    e.turn_id = turn_id;
    e.input_id = input_id;
    if (complete) e.status = std::string(status_value::kAnswered);
    if (auto s = Append(std::move(e)); !s) return Reject(c, r, s.error().message);
    if (complete) {
      auto answers = std::move(collected);
      partial_answers.erase(input_id);
      if (run) run->InputResolved(input_id, false, answers);
    }
  }

  // ---- turns -----------------------------------------------------------------------------------

  void MaybeStartNext() {
    const auto& st = journal->state();
    if (stopping || paused || restarting || run || st.active || st.queued.empty()) return;
    TurnRecord q = st.queued.front();
    Event e = MakeEvent(event_type::kTurnStarted);
    e.turn_id = q.id;
    e.status = std::string(status_value::kRunning);
    if (!Append(std::move(e))) return;
    runtime::TurnInput in;
    in.turn_id = q.id;
    in.text = q.text;
    in.number = journal->state().turns_started;
    in.session_name = opt.session_name;
    in.state_dir = opt.state_dir;
    in.echo_delay = opt.echo_delay;
    host = std::make_shared<ActiveHost>(*this, q.id);
    run = q.shell ? runtime::NewShellRun(host, std::move(in), opt.allow_shell) : provider->NewRun(host, std::move(in));
    run->Start();
  }

  // Cancels the turn's open questions, then journals turn.completed.
  void CompleteTurn(const std::string& turn_id, const std::string& status_text) {
    std::vector<std::string> open;
    for (const auto& in : journal->state().open_inputs)
      if (in.turn_id == turn_id) open.push_back(in.input_id);
    for (const auto& id : open) {
      Event e = MakeEvent(event_type::kInputResolved);
      e.turn_id = turn_id;
      e.input_id = id;
      e.status = std::string(status_value::kCancelled);
      (void)Append(std::move(e));
      partial_answers.erase(id);
    }
    Event done = MakeEvent(event_type::kTurnCompleted);
    done.turn_id = turn_id;
    done.status = status_text;
    (void)Append(std::move(done));
  }

  // Ends the run without events (crash, stop, interrupt timeout). Its late callbacks hit a dead host.
  void KillRun() {
    interrupt_timer.cancel();
    interrupt_armed = false;
    if (host) host->alive = false;
    auto old_run = std::move(run);
    host.reset();
    if (old_run) old_run->Kill();
    resume_waiters.clear();
  }

  void TurnDone(const std::string& turn_id, std::string status_text, std::string error) {
    if (journal->state().interrupting) status_text = std::string(status_value::kInterrupted);
    interrupt_timer.cancel();
    interrupt_armed = false;
    if (host) host->alive = false;
    if (status_text == status_value::kFailed && !error.empty()) {
      Event e = MakeEvent(event_type::kError);
      e.turn_id = turn_id;
      e.text = std::move(error);
      e.status = std::string(status_value::kFailed);
      (void)Append(std::move(e));
    }
    CompleteTurn(turn_id, status_text);
    // The run may be on the stack below us: release it from a later handler.
    asio::post(io, [old_run = std::move(run), old_host = std::move(host)] {});
    asio::post(io, [this] { MaybeStartNext(); });
  }

  void ProviderEmit(const std::string& turn_id, Event e) {
    if (e.type == event_type::kRuntimeStatus) {
      if (e.runtime) {
        const RuntimeStatus& rs = *e.runtime;
        if (!rs.model.empty()) status.model = rs.model;
        if (!rs.agent_type.empty()) status.agent_type = rs.agent_type;
        if (!rs.working_dir.empty()) status.working_dir = rs.working_dir;
        if (!rs.branch.empty()) status.branch = rs.branch;
        if (rs.usage) status.usage = rs.usage;
        if (rs.extra.is_object())
          for (auto it = rs.extra.begin(); it != rs.extra.end(); ++it) status.extra[it.key()] = it.value();
      }
      Event out = StatusEvent();
      out.timestamp = runtime::NowTimestamp();
      BroadcastUnjournaled(out);
      return;
    }
    e.turn_id = turn_id;
    (void)Append(std::move(e));
  }

  // ---- recovery --------------------------------------------------------------------------------

  void Recover() {
    if (journal->empty()) return;
    (void)Append(MakeEvent(event_type::kRuntimeRecovered));
    runtime::SessionState st = journal->state();
    for (const auto& in : st.open_inputs) {
      Event e = MakeEvent(event_type::kInputResolved);
      e.turn_id = in.turn_id;
      e.input_id = in.input_id;
      e.status = std::string(status_value::kCancelled);
      (void)Append(std::move(e));
    }
    if (st.active) {
      Event e = MakeEvent(event_type::kTurnCompleted);
      e.turn_id = st.active->id;
      e.status = std::string(status_value::kInterrupted);
      (void)Append(std::move(e));
    }
    if (st.queued.size() > 1) {
      const TurnRecord& first = st.queued.front();
      std::string text = first.text;
      for (std::size_t i = 1; i < st.queued.size(); ++i) text += "\n\n" + st.queued[i].text;
      Event up = MakeEvent(event_type::kUserMessageUpdated);
      up.turn_id = first.id;
      up.text = std::move(text);
      up.revision = std::max<std::int64_t>(1, first.revision) + 1;
      (void)Append(std::move(up));
      for (std::size_t i = 1; i < st.queued.size(); ++i) {
        Event e = MakeEvent(event_type::kTurnCompleted);
        e.turn_id = st.queued[i].id;
        e.status = std::string(status_value::kMerged);
        (void)Append(std::move(e));
      }
    }
    MaybeStartNext();
  }

  void Shutdown() {
    stopping = true;
    CloseListener();
    CloseAll();
    KillRun();
    restart_timer.cancel();
    std::lock_guard<std::mutex> lk(mu);
    journal->Close();
  }
};

// ---- Conn ----------------------------------------------------------------------------------------

void Conn::Read() {
  sock_.async_read_some(asio::buffer(rbuf_), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
    if (self->closed_) return;
    if (n > 0) {
      self->framer_.Feed(
          std::string_view(self->rbuf_.data(), n),
          [&](std::string_view line) {
            if (!self->closed_) self->rt_.OnLine(*self, line);
          },
          [&](std::size_t skipped) {
            self->rt_.Log(LogLevel::warning,
                          "skipped a request line of " + std::to_string(skipped) + " bytes (over the 4 MiB bound)");
          });
    }
    if (ec) {
      // End of the client's input ends the connection at once, as the real runtime does.
      self->Close();
      return;
    }
    if (!self->closed_) self->Read();
  });
}

void Conn::Send(std::shared_ptr<const std::string> bytes, bool live) {
  if (closed_ || close_after_flush_) return;
  if (live) {
    if (live_queued_ >= rt_.opt.subscriber_buffer) {
      rt_.Log(LogLevel::info, "a subscriber fell " + std::to_string(live_queued_) + " events behind: disconnected");
      Close();
      return;
    }
    ++live_queued_;
  }
  out_.push_back(OutItem{std::move(bytes), live});
  if (drop_budget_ > 0 && --drop_budget_ == 0) close_after_flush_ = true;
  // Flush from a later handler, not now: everything emitted in this handler (a burst, a replay) then
  // leaves in one writev instead of one syscall per event.
  if (!writing_ && !flush_posted_) {
    flush_posted_ = true;
    asio::post(sock_.get_executor(), [self = shared_from_this()] {
      self->flush_posted_ = false;
      if (!self->closed_ && !self->writing_) self->Write();
    });
  }
}

void Conn::Write() {
  if (out_.empty()) {
    if (close_after_flush_) Close();
    return;
  }
  writing_ = true;
  wbufs_.clear();
  in_flight_ = std::min(out_.size(), kMaxGather);
  for (std::size_t i = 0; i < in_flight_; ++i) wbufs_.push_back(asio::buffer(*out_[i].bytes));
  asio::async_write(sock_, wbufs_, [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
    if (self->closed_) return;
    if (ec) {
      self->Close();
      return;
    }
    for (std::size_t i = 0; i < self->in_flight_; ++i) {
      if (self->out_.front().live) --self->live_queued_;
      self->out_.pop_front();
    }
    self->in_flight_ = 0;
    self->writing_ = false;
    self->Write();
  });
}

void Conn::Close() {
  if (closed_) return;
  closed_ = true;
  asio::error_code ec;
  sock_.shutdown(stream::socket::shutdown_both, ec);
  sock_.close(ec);
  rt_.Forget(shared_from_this());
}

// ---- ActiveHost ----------------------------------------------------------------------------------

void ActiveHost::Emit(Event event) {
  if (alive) rt_.ProviderEmit(turn_id_, std::move(event));
}

void ActiveHost::Ask(std::string input_id, std::vector<InputQuestion> questions) {
  if (!alive) return;
  Event e = MakeEvent(event_type::kInputRequested);
  e.turn_id = turn_id_;
  e.input_id = std::move(input_id);
  e.questions = std::move(questions);
  (void)rt_.Append(std::move(e));
}

void ActiveHost::Done(std::string status, std::string error) {
  if (!alive) return;
  alive = false;
  rt_.TurnDone(turn_id_, std::move(status), std::move(error));
}

bool ActiveHost::Paused() const { return rt_.paused; }

void ActiveHost::WhenResumed(std::function<void()> fn) {
  if (!alive) return;
  if (!rt_.paused) {
    asio::post(rt_.io, std::move(fn));
    return;
  }
  rt_.resume_waiters.push_back(std::move(fn));
}

asio::io_context& ActiveHost::io() { return rt_.io; }

std::size_t ActiveHost::Backlog() const {
  std::size_t most = 0;
  for (const Conn* c : rt_.subscribers)
    if (!c->closed()) most = std::max(most, c->live_queued());
  return most;
}

std::size_t ActiveHost::BacklogBound() const { return rt_.opt.subscriber_buffer; }

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
  auto provider = runtime::Provider::Parse(options.provider);
  if (!provider) return Fail(provider.error());
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->provider = std::move(*provider);
  try {
    std::vector<std::string> warnings;
    auto journal = Journal::Open(impl->opt.state_dir, impl->opt.retained_events, &warnings);
    if (!journal) return Fail(journal.error());
    impl->journal = std::move(*journal);
    for (const auto& w : warnings) impl->Log(LogLevel::warning, w);
    impl->status.session_name = impl->opt.session_name;
    impl->status.agent_type = "sessionturn-local-" + impl->provider->Kind();
    impl->status.working_dir =
        impl->opt.state_dir.empty() ? std::filesystem::current_path().string() : impl->opt.state_dir;
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
      c->drop_budget_ = n > 0 ? n : -1;
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
