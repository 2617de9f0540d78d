// Driver::DetachTurns: turns in flight end at once with Errc::cancelled and keep running in the
// Session (nothing is written: no interrupt, no remove, no decline), a later process re-attaches from
// the TurnRef, and turns started after the call behave normally. Against the local runtime, and
// against a peer the test speaks for (to catch a turn before its prompt was sent or confirmed).
#include <poll.h>

#include <cstdio>
#include <mutex>
#include <vector>
#include <utility>

#include "driver_support.hpp"

using namespace driver_test;

namespace {

// The first turn runs for a while and then completes on its own; later turns reply at once.
const char* kSlowThenQuick = R"({"turns":[[{"type":"delta","text":"working"},{"type":"sleep","ms":2000},
  {"type":"message","text":"done {prompt}"}],[{"type":"message","text":"reply to {prompt}"}]]})";
// The first turn runs until it is interrupted; later turns reply at once.
const char* kLongThenQuick = R"({"turns":[[{"type":"delta","text":"working"},{"type":"sleep","ms":15000},
  {"type":"message","text":"first done"}],[{"type":"message","text":"reply to {prompt}"}]]})";
const char* kQuestion = R"({"turns":[[{"type":"question","inputId":"in-1","questions":[{"id":"q1",
  "question":"Proceed?","options":[{"label":"yes"},{"label":"no"}]}]},{"type":"message","text":"after"}]]})";

// Hands over the TurnRef given at acceptance (what a router persists), once.
struct RefCatcher {
  std::shared_ptr<std::promise<TurnRef>> promise = std::make_shared<std::promise<TurnRef>>();
  std::future<TurnRef> future = promise->get_future();
  std::function<void(const TurnRef&)> Callback() {
    return [p = promise](const TurnRef& ref) { p->set_value(ref); };
  }
  TurnRef Get() {
    REQUIRE(future.wait_for(kWait) == std::future_status::ready);
    return future.get();
  }
};

// Waits until the turn's own stream delivered an event matching `pred` (not only the journal has it).
void WaitDelivered(Recorder& rec, const std::function<bool(const Event&)>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  for (;;) {
    {
      std::lock_guard lock(rec.mu);
      for (const auto& e : rec.events)
        if (pred(e)) return;
    }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(5ms);
  }
}

void WaitNoTurns(const Driver& driver) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (driver.TurnsInFlight() != 0) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(5ms);
  }
}

std::future<Result<TurnResult>> Submit(Driver& driver, std::string prompt, TurnOptions options = {}) {
  auto promise = std::make_shared<std::promise<Result<TurnResult>>>();
  auto future = promise->get_future();
  driver.AsyncSubmitTurn(std::move(prompt), std::move(options),
                         [promise](Result<TurnResult> r) { promise->set_value(std::move(r)); });
  return future;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A unix socket that listens and says nothing by itself: the test accepts and speaks for the runtime.
class QuietPeer {
 public:
  explicit QuietPeer(std::string path) : path_(std::move(path)) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener_, 4) == 0);
  }
  ~QuietPeer() {
    if (conn_ >= 0) ::close(conn_);
    ::close(listener_);
    ::unlink(path_.c_str());
  }
  void Accept() {
    REQUIRE(Readable(listener_));
    conn_ = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(conn_ >= 0);
  }
  // The next line the client wrote.
  std::string ReadLine() {
    while (buffer_.find('\n') == std::string::npos) REQUIRE(Fill());
    const std::size_t nl = buffer_.find('\n');
    std::string line = buffer_.substr(0, nl);
    buffer_.erase(0, nl + 1);
    return line;
  }
  // Everything the client writes until it closes the connection.
  std::string ReadToEnd() {
    while (Fill()) {
    }
    return std::exchange(buffer_, {});
  }
  void Write(const std::string& lines) {
    REQUIRE(::send(conn_, lines.data(), lines.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(lines.size()));
  }

 private:
  static bool Readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kWait).count())) == 1;
  }
  // False at the end of the stream.
  bool Fill() {
    REQUIRE(Readable(conn_));
    char chunk[4096];
    const ssize_t n = ::read(conn_, chunk, sizeof chunk);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  std::string path_;
  int listener_ = -1;
  int conn_ = -1;
  std::string buffer_;
};

}  // namespace

TEST_CASE("detach: a running turn ends cancelled at once, runs on untouched, and is re-attached", "[driver][detach]") {
  Fixture f("", kSlowThenQuick);
  Recorder rec;
  RefCatcher ref;
  TurnOptions o;
  o.on_event = rec.Callback();
  o.on_accepted = ref.Callback();
  auto turn = f.Async("A", o);
  WaitDelivered(rec, [](const Event& e) { return e.Is("assistant.delta"); });
  f.driver->DetachTurns();
  auto r = Get(turn);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK(Contains(r.error().message, "detached"));
  CHECK(Contains(r.error().message, "still running in the Session"));
  const TurnRef accepted = ref.Get();
  CHECK(Contains(r.error().message, "turn " + accepted.turn_id));
  WaitNoTurns(*f.driver);
  // The turn's connection is closed: only the runtime's own listener remains.
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (f.runtime->ConnectionCount() != 0) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(5ms);
  }
  // It runs to its end in the Session, and a later process follows it there from the persisted ref.
  Driver later(f.ctx, f.connector);
  auto attached = later.AttachTurn(accepted);
  REQUIRE(attached.has_value());
  CHECK(attached->status == TurnStatus::completed);
  CHECK(attached->text == "done A");
  CHECK(f.Requests("interrupt").empty());
  CHECK(f.Requests("message.remove").empty());
}

TEST_CASE("detach: a queued turn stays queued (no message.remove) and runs when its time comes", "[driver][detach]") {
  Fixture f("", kLongThenQuick);
  auto first = f.Async("A");
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  Driver b(f.ctx, f.connector);
  Recorder rec;
  RefCatcher ref;
  TurnOptions o;
  o.on_event = rec.Callback();
  o.on_accepted = ref.Callback();
  auto queued = Submit(b, "B", o);
  const TurnRef accepted = ref.Get();
  b.DetachTurns();
  auto r = Get(queued);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK(Contains(r.error().message, "turn " + accepted.turn_id + " was detached and is still queued in the Session"));
  WaitNoTurns(b);
  CHECK(f.Requests("message.remove").empty());
  // Turns started after the call behave normally: this one merges into the detached turn, which is
  // still there to merge into.
  auto merged = Submit(b, "C");
  f.WaitEvent([&](const Event& e) { return e.Is("user.message.updated") && e.turn_id == accepted.turn_id; });
  REQUIRE(f.driver->Interrupt().has_value());
  REQUIRE(Get(first).has_value());
  auto rc = Get(merged);
  REQUIRE(rc.has_value());
  CHECK(rc->status == TurnStatus::completed);
  CHECK(rc->turn_id == accepted.turn_id);
  CHECK(rc->text == "reply to B\n\nC");
  CHECK(f.Requests("message.remove").empty());
}

TEST_CASE("detach: an open question is not declined and is answered after re-attaching", "[driver][detach]") {
  Fixture f("", kQuestion);
  RefCatcher ref;
  std::promise<Responder> asked;
  TurnOptions o;
  o.questions = QuestionPolicy::ask;
  o.on_accepted = ref.Callback();
  o.on_question = [&asked](const Event&, Responder responder) { asked.set_value(responder); };
  auto turn = f.Async("ask me", o);
  auto asked_future = asked.get_future();
  REQUIRE(asked_future.wait_for(kWait) == std::future_status::ready);
  Responder old = asked_future.get();
  f.driver->DetachTurns();
  auto r = Get(turn);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK_FALSE(old.Answer({{"q1", {"yes"}}}));  // the detached turn cannot answer any more
  CHECK(f.Requests("input").empty());
  for (const auto& e : f.runtime->JournalEvents()) CHECK_FALSE(e.Is("input.resolved"));
  // Whoever attaches next gets the question, still open.
  TurnOptions again;
  again.questions = QuestionPolicy::ask;
  again.on_question = [](const Event&, Responder responder) { CHECK(responder.Answer({{"q1", {"yes"}}})); };
  auto attached = f.driver->AttachTurn(ref.Get(), again);
  REQUIRE(attached.has_value());
  CHECK(attached->status == TurnStatus::completed);
  CHECK(attached->questions_answered == 1);
  CHECK(attached->text == "Answers: q1=yes\n\nafter");
}

TEST_CASE("detach: a Driver destroyed after DetachTurns leaves its turns running", "[driver][detach]") {
  Fixture f("", kSlowThenQuick);
  RefCatcher ref;
  Recorder rec;
  std::future<Result<TurnResult>> turn;
  {
    Driver d(f.ctx, f.connector);
    TurnOptions o;
    o.on_event = rec.Callback();
    o.on_accepted = ref.Callback();
    turn = Submit(d, "A", o);
    WaitDelivered(rec, [](const Event& e) { return e.Is("turn.started"); });
    d.DetachTurns();
  }
  auto r = Get(turn);
  REQUIRE_FALSE(r.has_value());
  CHECK(Contains(r.error().message, "detached"));
  auto done = f.WaitEvent([](const Event& e) { return e.Is("turn.completed"); });
  CHECK(done.status == "completed");
  CHECK(done.turn_id == ref.Get().turn_id);
  CHECK(f.Requests("interrupt").empty());
}

TEST_CASE("detach: a turn already being withdrawn finishes its withdrawal", "[driver][detach]") {
  Fixture f("", kLongThenQuick);
  auto first = f.Async("A");
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  Driver b(f.ctx, f.connector);
  CancellationSource source;
  RefCatcher ref;
  TurnOptions o;
  o.cancel = source.Token();
  o.on_accepted = ref.Callback();
  auto queued = Submit(b, "B", o);
  ref.Get();
  source.Cancel();  // posted to the turn first...
  b.DetachTurns();  // ...so this finds it withdrawing and leaves it to that
  auto r = Get(queued);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK(Contains(r.error().message, "cancelled by the caller"));
  f.WaitEvent([](const Event& e) { return e.Is("user.message.removed"); });
  CHECK(f.Requests("message.remove").size() == 1);
  REQUIRE(f.driver->Interrupt().has_value());
  REQUIRE(Get(first).has_value());
}

TEST_CASE("detach: with nothing in flight it does nothing, and later turns run normally", "[driver][detach]") {
  Fixture f;
  f.driver->DetachTurns();
  auto r = f.driver->SubmitTurn("hello");
  REQUIRE(r.has_value());
  CHECK(r->text == "echo #1: hello");
  f.driver->DetachTurns();  // the finished turn is not touched
  CHECK(f.driver->TurnsInFlight() == 0);
}

namespace {
// A connector whose connects never complete until released (then they fail): a turn stays before
// its first connection.
class StalledConnector : public Connector {
 public:
  void AsyncConnect(ConnectHandler handler) override {
    std::lock_guard lock(mu_);
    held_.push_back(std::move(handler));
  }
  std::string Describe() const override { return "stalled"; }
  void Release() {
    std::vector<ConnectHandler> held;
    {
      std::lock_guard lock(mu_);
      held.swap(held_);
    }
    for (auto& h : held) h(Fail(Errc::connection_failed, "test: released"));
  }

 private:
  std::mutex mu_;
  std::vector<ConnectHandler> held_;
};
}  // namespace

TEST_CASE("detach: before the prompt was sent, nothing is sent", "[driver][detach]") {
  // A new turn's prompt goes out right behind its subscribe (pipelined): the only moment before it
  // is sent is before the first connection is up.
  Context ctx;
  auto connector = std::make_shared<StalledConnector>();
  Driver driver(ctx, connector);
  auto turn = Submit(driver, "never sent");
  driver.DetachTurns();  // ordered after the turn's start on its strand
  auto r = Get(turn);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK(Contains(r.error().message, "before its prompt was sent"));
  connector->Release();  // the late connect finds the turn gone and leaves nothing behind
}

TEST_CASE("detach: a prompt pipelined behind the subscribe, before the replay, is named by its request id",
          "[driver][detach]") {
  TempDir dir;
  QuietPeer peer(dir.path + "/peer.sock");
  Context ctx;
  Driver driver(ctx, MakeUnixConnector(ctx, dir.path + "/peer.sock"));
  TurnOptions o;
  o.request_id = "req-detach-0";
  auto turn = Submit(driver, "pipelined", o);
  peer.Accept();
  CHECK(Contains(peer.ReadLine(), "\"type\":\"subscribe\""));
  CHECK(Contains(peer.ReadLine(), "req-detach-0"));  // the message, before any replay
  driver.DetachTurns();
  auto r = Get(turn);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK(Contains(r.error().message, "before the runtime confirmed its prompt (request req-detach-0)"));
  CHECK(peer.ReadToEnd().empty());  // the connection closed with nothing more written
}

TEST_CASE("detach: a prompt sent but not yet confirmed is named by its request id", "[driver][detach]") {
  TempDir dir;
  QuietPeer peer(dir.path + "/peer.sock");
  Context ctx;
  Driver driver(ctx, MakeUnixConnector(ctx, dir.path + "/peer.sock"));
  TurnOptions o;
  o.request_id = "req-detach-1";
  auto turn = Submit(driver, "sent", o);
  peer.Accept();
  CHECK(Contains(peer.ReadLine(), "\"type\":\"subscribe\""));
  peer.Write(R"({"type":"history.start","firstEventId":1,"lastEventId":0,"journalId":"j-1"})"
             "\n"
             R"({"type":"history.end"})"
             "\n");
  const std::string message = peer.ReadLine();  // pipelined: written before the replay came
  CHECK(Contains(message, "\"type\":\"message\""));
  CHECK(Contains(message, "req-detach-1"));
  driver.DetachTurns();
  auto r = Get(turn);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK(Contains(r.error().message, "before the runtime confirmed its prompt (request req-detach-1)"));
  CHECK(peer.ReadToEnd().empty());  // no message.remove, no interrupt
}
