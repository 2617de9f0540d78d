// The blocking verbs on the caller's own loop (issue 14): with a connector that runs connections on
// the operation's strand (unix, local backend), SubmitTurn and the one-shot verbs do their I/O and
// run the caller's callbacks on the calling thread; cancels, a stopped Context and nested blocking
// calls still work. The fault suites (driver_support's WrapConnector forwards the strand) cover drops,
// lost writes and reconnects on this path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <thread>

#include "driver_support.hpp"

using namespace driver_test;

TEST_CASE("driver: a blocking turn runs on the calling thread, an async one on the Context", "[driver][caller-loop]") {
  Fixture f;
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::set<std::thread::id> seen;
  auto note = [&] {
    std::lock_guard lock(mu);
    seen.insert(std::this_thread::get_id());
  };
  TurnOptions o;
  o.on_event = [&](const Event&) { note(); };
  o.on_accepted = [&](const TurnRef&) { note(); };
  auto r = f.driver->SubmitTurn("hello", o);
  REQUIRE(r.has_value());
  CHECK(r->text == "echo #1: hello");
  CHECK(seen == std::set<std::thread::id>{caller});

  seen.clear();
  std::promise<std::thread::id> done_on;
  TurnOptions a;
  a.on_event = [&](const Event&) { note(); };
  f.driver->AsyncSubmitTurn("again", a, [&](Result<TurnResult> result) {
    CHECK(result.has_value());
    done_on.set_value(std::this_thread::get_id());
  });
  auto fut = done_on.get_future();
  REQUIRE(fut.wait_for(kWait) == std::future_status::ready);
  CHECK(fut.get() != caller);
  std::lock_guard lock(mu);
  CHECK(seen.count(caller) == 0);
}

TEST_CASE("driver: a blocking turn is cancelled from another thread and withdrawn", "[driver][caller-loop]") {
  Fixture f("", kLongTurn);
  CancellationSource source;
  TurnOptions o;
  o.cancel = source.Token();
  o.on_event = [&](const Event& e) {
    if (e.Is("assistant.delta")) {
      std::thread([&source] { source.Cancel(); }).detach();
    }
  };
  auto r = f.driver->SubmitTurn("slow", o);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  REQUIRE(f.runtime->WaitForRequest([](const ClientRequest& q) { return q.type == "interrupt"; }, kWait));
}

TEST_CASE("driver: a Context stopped under a blocking turn ends it, withdrawn, with the reason", "[driver][caller-loop]") {
  Fixture f("", kLongTurn);
  std::thread stopper;
  TurnOptions o;
  o.on_event = [&](const Event& e) {
    if (e.Is("assistant.delta") && !stopper.joinable()) stopper = std::thread([&f] { f.ctx.Stop(); });
  };
  auto r = f.driver->SubmitTurn("slow", o);
  stopper.join();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK_THAT(r.error().message, Catch::Contains("Context was stopped"));
  // The turn ran here, not on the stopped Context: it still withdrew itself.
  REQUIRE(f.runtime->WaitForRequest([](const ClientRequest& q) { return q.type == "interrupt"; }, kWait));
}

TEST_CASE("driver: a blocking call inside a blocking turn's callback runs nested on the same thread",
          "[driver][caller-loop]") {
  Fixture f("", kLongTurn);
  Status interrupted = Fail(Errc::internal, "not called");
  TurnOptions o;
  o.on_event = [&](const Event& e) {
    // The caller's thread is not a Context worker: a blocking verb here is allowed, and runs its own
    // loop while the turn's waits (its events queue in the socket meanwhile).
    if (e.Is("assistant.delta")) interrupted = f.driver->Interrupt();
  };
  auto r = f.driver->SubmitTurn("slow", o);
  CHECK(interrupted.has_value());
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::interrupted);
}

TEST_CASE("driver: the one-shot verbs on the caller's loop report the runtime's word", "[driver][caller-loop]") {
  Fixture f;
  auto interrupted = f.driver->Interrupt();
  REQUIRE_FALSE(interrupted.has_value());
  CHECK(interrupted.error().code == Errc::rejected);
  auto answered = f.driver->Answer("in-none", {{"q", {"a"}}});
  REQUIRE_FALSE(answered.has_value());
  CHECK(answered.error().code == Errc::rejected);
  auto edited = f.driver->EditQueued("turn-9", "new text", 1);
  REQUIRE_FALSE(edited.has_value());
  CHECK(edited.error().code == Errc::rejected);
  // Refused before any I/O, on this path too.
  auto bad = f.driver->RemoveQueued("", 1);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == Errc::invalid_argument);
}

namespace {
// Records the order of writes and reads on its connections: "w:<type>" and "r".
class OrderConnection : public Connection {
 public:
  OrderConnection(std::shared_ptr<Connection> inner, std::shared_ptr<std::vector<std::string>> log,
                  std::shared_ptr<std::mutex> mu)
      : inner_(std::move(inner)), log_(std::move(log)), mu_(std::move(mu)) {}
  void AsyncReadLine(LineHandler handler) override {
    inner_->AsyncReadLine([log = log_, mu = mu_, handler = std::move(handler)](Result<std::string> line) {
      if (line) {
        std::lock_guard lock(*mu);
        log->push_back("r");
      }
      handler(std::move(line));
    });
  }
  void AsyncWrite(std::string line, WriteHandler done) override {
    {
      std::lock_guard lock(*mu_);
      log_->push_back("w:" + DecodeRequest(line).value().type);
    }
    inner_->AsyncWrite(std::move(line), std::move(done));
  }
  void Close() override { inner_->Close(); }
  std::string Diagnostics() const override { return inner_->Diagnostics(); }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  std::shared_ptr<Connection> inner_;
  std::shared_ptr<std::vector<std::string>> log_;
  std::shared_ptr<std::mutex> mu_;
};

class OrderConnector : public Connector {
 public:
  explicit OrderConnector(std::shared_ptr<Connector> inner) : inner_(std::move(inner)) {}
  void AsyncConnect(ConnectHandler handler) override { inner_->AsyncConnect(Wrap(std::move(handler))); }
  void AsyncConnectOn(const OperationStrand& strand, ConnectHandler handler) override {
    inner_->AsyncConnectOn(strand, Wrap(std::move(handler)));
  }
  bool ConnectsOnStrand() const override { return inner_->ConnectsOnStrand(); }
  std::string Describe() const override { return inner_->Describe(); }
  std::vector<std::string> Log() const {
    std::lock_guard lock(*mu_);
    return *log_;
  }

 private:
  ConnectHandler Wrap(ConnectHandler handler) {
    return [log = log_, mu = mu_, handler = std::move(handler)](Result<std::shared_ptr<Connection>> c) {
      if (!c) return handler(std::move(c));
      handler(std::shared_ptr<Connection>(std::make_shared<OrderConnection>(std::move(*c), log, mu)));
    };
  }
  std::shared_ptr<Connector> inner_;
  std::shared_ptr<std::vector<std::string>> log_ = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
};
}  // namespace

TEST_CASE("driver: a turn's first connection writes the prompt right behind the subscribe, blocking or not",
          "[driver][caller-loop][pipeline]") {
  Fixture f;
  const bool blocking = GENERATE(true, false);
  auto order = std::make_shared<OrderConnector>(f.connector);
  Driver d(f.ctx, order);
  Result<TurnResult> r = Fail(Errc::internal, "not run");
  if (blocking) {
    r = d.SubmitTurn("hello");
  } else {
    std::promise<Result<TurnResult>> p;
    d.AsyncSubmitTurn("hello", {}, [&p](Result<TurnResult> result) { p.set_value(std::move(result)); });
    auto fut = p.get_future();
    REQUIRE(fut.wait_for(kWait) == std::future_status::ready);
    r = fut.get();
  }
  REQUIRE(r.has_value());
  CHECK(r->text == "echo #1: hello");
  auto log = order->Log();
  REQUIRE(log.size() >= 3);
  CHECK(log[0] == "w:subscribe");
  CHECK(log[1] == "w:message");  // before the first line of the replay was read
  CHECK(std::count(log.begin(), log.end(), "w:message") == 1);
  CHECK(f.Requests("message").size() == 1);
}

namespace {
// Connects on the Context only (the Connector default): blocking calls then wait for the Context.
class ContextOnlyConnector : public Connector {
 public:
  explicit ContextOnlyConnector(std::shared_ptr<Connector> inner) : inner_(std::move(inner)) {}
  void AsyncConnect(ConnectHandler handler) override { inner_->AsyncConnect(std::move(handler)); }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  std::shared_ptr<Connector> inner_;
};
}  // namespace

TEST_CASE("driver: keep_waiting saying no abandons a blocking turn, on the caller's loop or on the Context",
          "[driver][caller-loop]") {
  Fixture f("", kLongTurn);
  const bool on_caller_loop = GENERATE(true, false);
  std::shared_ptr<Connector> connector = f.connector;
  if (!on_caller_loop) connector = std::make_shared<ContextOnlyConnector>(f.connector);
  Driver d(f.ctx, connector);
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> working{false};
  std::atomic<int> asked{0};
  std::atomic<bool> asked_elsewhere{false};
  TurnOptions o;
  o.on_event = [&](const Event& e) {
    if (e.Is("assistant.delta")) working = true;
  };
  o.keep_waiting = [&] {
    if (std::this_thread::get_id() != caller) asked_elsewhere = true;
    ++asked;
    return !working.load();
  };
  auto r = d.SubmitTurn("slow", o);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK(asked.load() >= 1);
  CHECK_FALSE(asked_elsewhere.load());
  REQUIRE(f.runtime->WaitForRequest([](const ClientRequest& q) { return q.type == "interrupt"; }, kWait));
}
