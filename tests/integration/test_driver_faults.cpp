// The driver's defects found in review (issue 9), each against the local runtime or a scripted peer:
// lost declines and answers, responders after a resolution, watch handshake and transient connects,
// the turn's timeout as its bound, a stopped Context, attaching to an earlier process's turn,
// mistyped fields.
#include "driver_support.hpp"

using namespace driver_test;

namespace {

const char* kQuestionTurn = R"({"turns":[[{"type":"delta","text":"thinking"},
  {"type":"question","inputId":"claude-1","questions":[{"id":"question-1","question":"Proceed?",
  "options":[{"label":"yes"},{"label":"no"}]}]},{"type":"message","text":"after"}]]})";

// A unix socket peer scripted by the test: answers each subscribe with an empty replay and otherwise
// reads and says nothing (a runtime that never echoes), or says nothing at all (`silent`).
class ScriptedPeer {
 public:
  ScriptedPeer(const std::string& path, bool silent) : silent_(silent) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~ScriptedPeer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : readers_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  int accepted() const { return accepted_.load(); }
  int messages() const { return messages_.load(); }

 private:
  void Accept() {
    for (;;) {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      ++accepted_;
      std::lock_guard lock(mu_);
      fds_.push_back(fd);
      readers_.emplace_back([this, fd] { Serve(fd); });
    }
  }
  void Serve(int fd) {
    std::string buffer;
    char chunk[4096];
    for (;;) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n <= 0) return;
      buffer.append(chunk, static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = buffer.find('\n')) != std::string::npos; buffer.erase(0, nl + 1)) {
        const std::string line = buffer.substr(0, nl);
        if (line.find("\"message\"") != std::string::npos) ++messages_;
        if (silent_ || line.find("\"subscribe\"") == std::string::npos) continue;
        const std::string reply =
            "{\"type\":\"history.start\",\"firstEventId\":1,\"journalId\":\"j-peer\"}\n{\"type\":\"history.end\"}\n";
        if (::write(fd, reply.data(), reply.size()) < 0) return;
      }
    }
  }

  bool silent_;
  int listener_ = -1;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> readers_;
  std::atomic<int> accepted_{0};
  std::atomic<int> messages_{0};
};

// Fails the first `failures` connects with `code`, then connects for real.
class FlakyConnector : public Connector {
 public:
  FlakyConnector(std::shared_ptr<Connector> inner, int failures, Errc code)
      : inner_(std::move(inner)), failures_(failures), code_(code) {}
  void AsyncConnect(ConnectHandler handler) override {
    if (failures_.fetch_sub(1) > 0) {
      handler(Fail(code_, "test: the runtime's backlog is full"));
      return;
    }
    inner_->AsyncConnect(std::move(handler));
  }
  std::string Describe() const override { return "flaky:" + inner_->Describe(); }

 private:
  std::shared_ptr<Connector> inner_;
  std::atomic<int> failures_;
  Errc code_;
};

}  // namespace

TEST_CASE("driver: a decline lost with the stream right after input.requested is sent again", "[driver][questions]") {
  // Before issue 9 the runtime never saw the decline, the provider waited, and the turn hung until its deadline.
  Fixture f("", kQuestionTurn);
  Faults faults;
  faults.swallow_write = "\"cancel\":true";
  auto lossy = std::make_shared<WrapConnector>(f.connector, faults);
  Driver d(f.ctx, lossy);
  TurnOptions o = WithTimeout(kWait);
  auto r = d.SubmitTurn("ask me", o);
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::completed);
  CHECK(r->text == "The question was declined.\n\nafter");
  CHECK(r->questions_declined == 1);
  CHECK(r->reconnects == 1);
  // The lost write never reached the runtime; the resend did, once.
  auto inputs = f.Requests("input");
  REQUIRE(inputs.size() == 1);
  CHECK(inputs[0].cancel);
}

TEST_CASE("driver: an answer given while the stream is down is written after the replay", "[driver][questions]") {
  Fixture f("", kQuestionTurn);
  Faults faults;
  faults.swallow_write = "\"answers\"";
  auto lossy = std::make_shared<WrapConnector>(f.connector, faults);
  Driver d(f.ctx, lossy);
  TurnOptions o = WithTimeout(kWait);
  o.questions = QuestionPolicy::ask;
  o.on_question = [](const Event&, Responder responder) { CHECK(responder.Answer({{"question-1", {"yes"}}})); };
  auto r = d.SubmitTurn("ask me", o);
  REQUIRE(r.has_value());
  CHECK(r->text == "Answers: question-1=yes\n\nafter");
  CHECK(r->questions_answered == 1);
  CHECK(f.Requests("input").size() == 1);
}

TEST_CASE("driver: a stream dropped at every position of a turn with a question gives the undisturbed result",
          "[driver][questions]") {
  TurnResult baseline;
  std::vector<std::string> baseline_events;
  {
    Fixture f("", kQuestionTurn);
    Recorder rec;
    TurnOptions o;
    o.on_event = rec.Callback();
    auto r = f.driver->SubmitTurn("go", o);
    REQUIRE(r.has_value());
    baseline = *r;
    baseline_events = rec.Signature();
  }
  REQUIRE(baseline.text == "The question was declined.\n\nafter");
  const int positions = static_cast<int>(baseline_events.size()) + 4;
  for (int drop_at = 1; drop_at <= positions; ++drop_at) {
    CAPTURE(drop_at);
    Fixture f("", kQuestionTurn);
    Recorder rec;
    Faults faults;
    faults.drop_after_lines = drop_at;
    auto dropping = std::make_shared<WrapConnector>(f.connector, faults);
    Driver d(f.ctx, dropping);
    TurnOptions o = WithTimeout(kWait);
    o.on_event = rec.Callback();
    auto r = d.SubmitTurn("go", o);
    REQUIRE(r.has_value());
    CHECK(r->text == baseline.text);
    CHECK(r->questions_declined == 1);
    CHECK(rec.Signature() == baseline_events);
    CHECK(f.Requests("message").size() == 1);
  }
}

TEST_CASE("driver: a write that fails at every position gives the undisturbed result", "[driver][questions]") {
  // Writes of the first connection: subscribe, message, the decline. Each one failing drops the
  // stream; the reconnect resubscribes and the tracker writes what is still needed.
  for (int fail_at = 1; fail_at <= 3; ++fail_at) {
    CAPTURE(fail_at);
    Fixture f("", kQuestionTurn);
    Faults faults;
    faults.fail_write = fail_at;
    auto failing = std::make_shared<WrapConnector>(f.connector, faults);
    Driver d(f.ctx, failing);
    auto r = d.SubmitTurn("go", WithTimeout(kWait));
    REQUIRE(r.has_value());
    CHECK(r->status == TurnStatus::completed);
    CHECK(r->text == "The question was declined.\n\nafter");
    CHECK(f.Requests("message").size() == 1);
    CHECK(failing->connections() == 2);
  }
}

TEST_CASE("driver: a responder reports false once another client resolved its question", "[driver][questions]") {
  // Before issue 9 Answer() returned true for an answer that was never sent.
  Fixture f("", kQuestionTurn);
  std::promise<Responder> asked;
  TurnOptions o = WithTimeout(kWait);
  o.questions = QuestionPolicy::ask;
  o.on_question = [&](const Event&, Responder responder) { asked.set_value(responder); };
  auto fut = f.Async("ask", o);
  auto responder_future = asked.get_future();
  REQUIRE(responder_future.wait_for(kWait) == std::future_status::ready);
  Responder responder = responder_future.get();
  REQUIRE(f.driver->Answer("claude-1", {{"question-1", {"no"}}}).has_value());  // another client
  auto r = Get(fut);
  REQUIRE(r.has_value());
  CHECK(r->text == "Answers: question-1=no\n\nafter");
  CHECK_FALSE(responder.Answer({{"question-1", {"yes"}}}));
  CHECK_FALSE(responder.Decline());
  CHECK(f.Requests("input").size() == 1);
}

TEST_CASE("driver: a resolution seen before the answer arrives makes the responder report false", "[driver][questions]") {
  Fixture f("", kQuestionTurn);
  std::promise<Responder> asked;
  TurnOptions o = WithTimeout(kWait);
  o.questions = QuestionPolicy::ask;
  o.on_question = [&](const Event&, Responder responder) { asked.set_value(responder); };
  std::promise<void> resolved;
  o.on_event = [&](const Event& e) {
    if (e.Is("input.resolved")) resolved.set_value();
  };
  auto fut = f.Async("ask", o);
  auto rf = asked.get_future();
  REQUIRE(rf.wait_for(kWait) == std::future_status::ready);
  Responder responder = rf.get();
  REQUIRE(f.driver->Decline("claude-1").has_value());
  REQUIRE(resolved.get_future().wait_for(kWait) == std::future_status::ready);
  // The turn may still run (the message follows): the question is settled, the responder knows it.
  CHECK_FALSE(responder.Answer({{"question-1", {"yes"}}}));
  REQUIRE(Get(fut).has_value());
}

TEST_CASE("driver: a watch on a stream that never replays ends after its handshake timeouts", "[driver][watch]") {
  // Before issue 9 a watch had no handshake deadline and waited forever.
  TempDir dir;
  ScriptedPeer peer(dir.path + "/wedged.sock", /*silent=*/true);
  Context ctx;
  Driver driver(ctx, MakeUnixConnector(ctx, dir.path + "/wedged.sock"));
  WatchOptions w;
  w.reconnect.handshake_timeout = 200ms;
  w.reconnect.max_attempts = 1;
  w.reconnect.initial_backoff = 10ms;
  std::promise<Status> ended;
  auto handle = driver.Watch(w, [](const Event&) {}, [&](Status s) { ended.set_value(std::move(s)); });
  auto ef = ended.get_future();
  REQUIRE(ef.wait_for(kWait) == std::future_status::ready);
  Status status = ef.get();
  REQUIRE_FALSE(status);
  CHECK(status.error().code == Errc::connection_lost);
  CHECK_THAT(status.error().message, Catch::Contains("no history.end within"));
  CHECK(peer.accepted() == 2);
}

TEST_CASE("driver: a watch retries a transient first-connect failure", "[driver][watch]") {
  // Before issue 9 only turns retried a busy runtime; a watch ended at once with connection_failed.
  Fixture f;
  auto flaky = std::make_shared<FlakyConnector>(f.connector, 2, Errc::unavailable);
  Driver d(f.ctx, flaky);
  WatchOptions w;
  w.reconnect.initial_backoff = 10ms;
  std::promise<void> got_end;
  std::atomic<bool> once{false};
  auto handle = d.Watch(w, [&](const Event& e) {
    if (e.Is("history.start") || e.Is("history.end") || e.id > 0) {
      if (!once.exchange(true)) got_end.set_value();
    }
  });
  REQUIRE(f.driver->SubmitTurn("hello").has_value());
  REQUIRE(got_end.get_future().wait_for(kWait) == std::future_status::ready);
  CHECK(handle.Active());
  handle.Stop();
}

TEST_CASE("driver: a never-echoed turn ends at its timeout, without the withdrawal grace", "[driver]") {
  // Before issue 9 it waited the 5 s grace on top of its timeout for an echo that never came.
  TempDir dir;
  ScriptedPeer peer(dir.path + "/mute.sock", /*silent=*/false);
  Context ctx;
  Driver driver(ctx, MakeUnixConnector(ctx, dir.path + "/mute.sock"));
  // The grace counts from the message's write: an echo not seen within it will not come.
  TurnOptions o = WithTimeout(1500ms);
  o.abandon_grace = 1s;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = driver.SubmitTurn("hello", o);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::timeout);
  CHECK(took >= 1500ms);
  CHECK(took < 2500ms);  // 1.5 s and scheduling slack, not 2.5 s
  CHECK(peer.messages() == 1);
}

TEST_CASE("driver: a turn on a stopped Context fails at once", "[driver]") {
  // Before issue 9 the async handler was never called and SubmitTurn blocked for the turn's 60 minutes.
  Fixture f;
  Context stopped;
  Driver d(stopped, MakeUnixConnector(stopped, f.socket()));
  stopped.Stop();
  CHECK(stopped.Stopped());
  std::optional<Result<TurnResult>> got;
  d.AsyncSubmitTurn("hello", {}, [&](Result<TurnResult> r) { got = std::move(r); });
  REQUIRE(got.has_value());  // called inline: nothing else would ever call it
  REQUIRE_FALSE(*got);
  CHECK(got->error().code == Errc::unavailable);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = d.SubmitTurn("hello");
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::unavailable);
  CHECK(d.Interrupt().error().code == Errc::unavailable);
  std::optional<Status> watch_end;
  auto handle = d.Watch({}, [](const Event&) {}, [&](Status s) { watch_end = std::move(s); });
  REQUIRE(watch_end.has_value());
  CHECK(watch_end->error().code == Errc::unavailable);
}

TEST_CASE("driver: a Context stopped while a blocking turn waits releases the caller", "[driver]") {
  Fixture f("", kLongTurn);
  auto ctx = std::make_unique<Context>();
  auto d = std::make_unique<Driver>(*ctx, MakeUnixConnector(*ctx, f.socket()));
  std::promise<Result<TurnResult>> out;
  std::thread caller([&] { out.set_value(d->SubmitTurn("slow", WithTimeout(10min))); });
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  const auto t0 = std::chrono::steady_clock::now();
  ctx->Stop();
  auto fut = out.get_future();
  REQUIRE(fut.wait_for(kWait) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  auto r = fut.get();
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::cancelled);
  caller.join();
  d.reset();
  ctx.reset();
}

TEST_CASE("driver: TurnResult carries the request id and the journal cursor", "[driver]") {
  Fixture f;
  TurnOptions o;
  o.request_id = "req-cursor";
  std::optional<TurnRef> accepted;
  o.on_accepted = [&](const TurnRef& ref) { accepted = ref; };
  auto r = f.driver->SubmitTurn("hello", o);
  REQUIRE(r.has_value());
  CHECK(r->request_id == "req-cursor");
  CHECK(r->journal_id == f.runtime->journal_id());
  CHECK(r->last_event_id == f.runtime->last_event_id());
  REQUIRE(accepted.has_value());
  CHECK(accepted->request_id == "req-cursor");
  CHECK(accepted->turn_id == r->turn_id);
  CHECK(accepted->journal_id == f.runtime->journal_id());
  CHECK(accepted->last_event_id > 0);
}

TEST_CASE("driver: a timeout names the turn once it is known", "[driver]") {
  Fixture f("", kLongTurn);
  std::optional<TurnRef> accepted;
  TurnOptions o = WithTimeout(800ms);
  o.on_accepted = [&](const TurnRef& ref) { accepted = ref; };
  auto r = f.driver->SubmitTurn("slow", o);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::timeout);
  REQUIRE(accepted.has_value());
  CHECK_THAT(r.error().message, Catch::Contains(accepted->turn_id));
}

TEST_CASE("driver: AttachTurn follows a turn an earlier process submitted, by request id or turn id", "[driver][attach]") {
  Fixture f("echo", {}, [](auto& o) { o.echo_delay = 30ms; });
  f.runtime->PauseProvider(true);
  // "The earlier process": a raw client submits and goes away before the turn runs.
  TurnRef ref;
  {
    auto promise = std::make_shared<std::promise<Result<std::shared_ptr<Connection>>>>();
    f.connector->AsyncConnect([promise](Result<std::shared_ptr<Connection>> c) { promise->set_value(std::move(c)); });
    auto conn = promise->get_future().get();
    REQUIRE(conn.has_value());
    (*conn)->AsyncWrite(EncodeRequest(ClientRequest::Subscribe(0, "", true, 1, 1024)), {});
    (*conn)->AsyncWrite(EncodeRequest(ClientRequest::Message("req-earlier", "from before the restart")), {});
    auto echo = f.WaitEvent([](const Event& e) { return e.Is("user.message") && e.request_id == "req-earlier"; });
    ref.request_id = "req-earlier";
    ref.journal_id = f.runtime->journal_id();
    ref.last_event_id = echo.id - 1;  // persisted before the echo arrived: look it up by request id
    (*conn)->Close();
  }
  std::promise<Result<TurnResult>> attached;
  f.driver->AsyncAttachTurn(ref, WithTimeout(kWait), [&](Result<TurnResult> r) { attached.set_value(std::move(r)); });
  f.runtime->PauseProvider(false);
  auto fut = attached.get_future();
  REQUIRE(fut.wait_for(kWait) == std::future_status::ready);
  auto r = fut.get();
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::completed);
  CHECK(r->text == "echo #1: from before the restart");
  CHECK(r->request_id == "req-earlier");
  CHECK(f.Requests("message").size() == 1);  // never sent again

  // By turn id from a cursor after the echo.
  auto second = f.Async("second");
  auto echo2 = f.WaitEvent([](const Event& e) { return e.Is("user.message") && e.text == "second"; });
  TurnRef by_id{"", echo2.turn_id, echo2.id, f.runtime->journal_id(), echo2.revision};
  auto again = f.driver->AttachTurn(by_id, WithTimeout(kWait));
  REQUIRE(again.has_value());
  CHECK(again->text == "echo #2: second");
  REQUIRE(Get(second).has_value());

  // Nothing to attach to.
  auto missing = f.driver->AttachTurn(TurnRef{"req-nobody", "", 0, f.runtime->journal_id(), 0}, WithTimeout(kWait));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);
  auto invalid = f.driver->AttachTurn(TurnRef{}, WithTimeout(kWait));
  CHECK(invalid.error().code == Errc::invalid_argument);
}

TEST_CASE("driver: an event with a mistyped field is kept and the field reported once", "[driver]") {
  std::mutex mu;
  std::vector<std::string> warnings;
  ContextOptions co;
  co.log_sink = [&](LogLevel level, std::string_view message) {
    std::lock_guard lock(mu);
    if (level >= LogLevel::warning) warnings.emplace_back(message);
  };
  Fixture f;
  Context ctx(co);
  Faults faults;
  // A newer runtime changed a field's type: the status line must still reach the caller.
  faults.inject = {R"({"type":"runtime.status","runtime":{"model":"m","usage":{"inputTokens":"lots"}}})",
                   R"({"type":"runtime.status","runtime":{"model":"m","usage":{"inputTokens":"more"}}})"};
  Driver d(ctx, std::make_shared<WrapConnector>(MakeUnixConnector(ctx, f.socket()), faults));
  std::atomic<int> statuses{0};
  WatchOptions w;
  auto handle = d.Watch(w, [&](const Event& e) {
    if (e.Is("runtime.status") && e.runtime && e.runtime->model == "m") ++statuses;
  });
  for (int i = 0; i < 500 && statuses.load() < 2; ++i) std::this_thread::sleep_for(10ms);
  handle.Stop();
  CHECK(statuses.load() == 2);
  std::lock_guard lock(mu);
  int about_field = 0;
  for (const auto& w2 : warnings)
    if (w2.find("runtime.usage.inputTokens") != std::string::npos) ++about_field;
  CHECK(about_field == 1);
}
