// The driver against the local runtime over real unix sockets (issue 4's list): echo, queueing,
// merging, rejection, junk lines, failures, abandon on timeout (started, queued, shared), questions,
// removal by another client, a drop at every event position, a runtime restart, commands, Watch.
#include <atomic>
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "driver_support.hpp"

using namespace driver_test;

TEST_CASE("driver: an echo turn completes with the reply, events in order, timings", "[driver]") {
  Fixture f;
  Recorder rec;
  TurnOptions o;
  o.on_event = rec.Callback();
  auto r = f.driver->SubmitTurn("hello there", o);
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::completed);
  CHECK(r->text == "echo #1: hello there");
  CHECK(r->turn_id.rfind("turn-", 0) == 0);
  CHECK_FALSE(r->shared);
  CHECK(r->reconnects == 0);
  REQUIRE(r->time_to_accepted);
  REQUIRE(r->time_to_started);
  REQUIRE(r->time_to_completed);
  CHECK(*r->time_to_accepted <= *r->time_to_started);
  CHECK(*r->time_to_started <= *r->time_to_completed);
  auto sig = rec.Signature();
  REQUIRE(sig.size() >= 4);
  CHECK(rec.events.front().type == "user.message");
  CHECK(rec.events.back().type == "turn.completed");
  std::int64_t last = 0;
  for (auto& e : rec.events) {
    CHECK(e.turn_id == r->turn_id);
    CHECK(e.id > last);
    last = e.id;
  }
  // The Session remembers: the second turn is #2.
  auto r2 = f.driver->SubmitTurn("again");
  REQUIRE(r2.has_value());
  CHECK(r2->text == "echo #2: again");
}

TEST_CASE("driver: a turn queued behind another client's running turn waits, then runs", "[driver]") {
  Fixture f("echo", {}, [](auto& o) { o.echo_delay = 150ms; });
  auto first = f.Async("first");
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  Driver other(f.ctx, f.connector);
  auto r2 = other.SubmitTurn("second");
  auto r1 = Get(first);
  REQUIRE(r1.has_value());
  REQUIRE(r2.has_value());
  CHECK(r1->text == "echo #1: first");
  CHECK(r2->text == "echo #2: second");
  CHECK(r1->turn_id != r2->turn_id);
  // Accepted while the first ran, started only after it: it was queued.
  CHECK(*r2->time_to_started - *r2->time_to_accepted >= 100ms);
}

TEST_CASE("driver: a third prompt merged into the queued turn: both callers get the reply, both shared", "[driver]") {
  Fixture f("echo", {}, [](auto& o) { o.echo_delay = 50ms; });
  auto a = f.Async("A");
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  f.runtime->PauseProvider(true);
  // on_shared tells each merged caller once, as it happens: C before its acceptance (the merge is it).
  std::atomic<int> b_shared{0}, c_shared{0};
  std::atomic<bool> c_shared_before_accepted{false};
  TurnOptions ob;
  ob.on_shared = [&] { ++b_shared; };
  auto b = f.Async("B", ob);
  auto b_echo = f.WaitEvent([](const Event& e) { return e.Is("user.message") && e.text == "B"; });
  CHECK(b_shared == 0);
  TurnOptions oc;
  oc.on_shared = [&] { ++c_shared; };
  oc.on_accepted = [&](const TurnRef&) { c_shared_before_accepted = c_shared == 1; };
  auto c = f.Async("C", oc);
  f.WaitEvent([&](const Event& e) { return e.Is("user.message.updated") && e.turn_id == b_echo.turn_id; });
  f.runtime->PauseProvider(false);
  auto ra = Get(a), rb = Get(b), rc = Get(c);
  CHECK(b_shared == 1);
  CHECK(c_shared == 1);
  CHECK(c_shared_before_accepted);
  REQUIRE(ra.has_value());
  REQUIRE(rb.has_value());
  REQUIRE(rc.has_value());
  CHECK_FALSE(ra->shared);
  CHECK(rb->shared);
  CHECK(rc->shared);
  CHECK(rb->turn_id == rc->turn_id);
  CHECK(rb->text == rc->text);
  CHECK(rb->text == "echo #2: B\n\nC");
}

TEST_CASE("driver: a rejection surfaces as Errc::rejected with the runtime's reason", "[driver]") {
  Fixture f;
  f.runtime->SetDraining(true);
  auto r = f.driver->SubmitTurn("hello");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::rejected);
  CHECK(r.error().message.find(std::string(sessionturn::testing::reject_reason::kDraining)) != std::string::npos);
}

TEST_CASE("driver: non-JSON and blank lines are skipped", "[driver]") {
  Fixture f;
  auto junky = std::make_shared<WrapConnector>(f.connector, -1, true);
  Driver d(f.ctx, junky);
  auto r = d.SubmitTurn("through the noise");
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::completed);
  CHECK(r->text == "echo #1: through the noise");
}

TEST_CASE("driver: a failing turn ends failed with its error text", "[driver]") {
  Fixture f("", R"({"turns":[[{"type":"delta","text":"partial"},{"type":"error","text":"first"},
    {"type":"fail","text":"the provider crashed"}]]})");
  auto r = f.driver->SubmitTurn("go");
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::failed);
  CHECK(r->error_message == "the provider crashed");
  CHECK(r->text == "partial");
}

TEST_CASE("driver: a timeout abandons a started turn with an interrupt", "[driver]") {
  Fixture f("", kLongTurn);
  auto r = f.driver->SubmitTurn("slow", WithTimeout(700ms));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  REQUIRE(f.runtime->WaitForRequest([](const ClientRequest& q) { return q.type == "interrupt"; }, kWait));
  auto done = f.WaitEvent([](const Event& e) { return e.Is("turn.completed"); });
  CHECK(done.status == "interrupted");
}

TEST_CASE("driver: a timeout abandons a queued turn with message.remove at the right revision", "[driver]") {
  Fixture f("", kLongTurn);
  auto a = f.Async("A");
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  auto r = f.driver->SubmitTurn("B", WithTimeout(700ms));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  auto removed = f.WaitEvent([](const Event& e) { return e.Is("user.message.removed"); });
  auto removes = f.Requests("message.remove");
  REQUIRE(removes.size() == 1);
  CHECK(removes[0].expected_revision == 1);
  CHECK(removes[0].turn_id == removed.turn_id);
  CHECK(f.Requests("interrupt").empty());
  REQUIRE(f.driver->Interrupt().has_value());
  auto ra = Get(a);
  REQUIRE(ra.has_value());
  CHECK(ra->status == TurnStatus::interrupted);
}

TEST_CASE("driver: a timeout leaves a shared turn alone", "[driver]") {
  Fixture f("", kLongTurn);
  auto a = f.Async("A");
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  auto b = f.Async("B");
  f.WaitEvent([](const Event& e) { return e.Is("user.message") && e.text == "B"; });
  auto r = f.driver->SubmitTurn("C", WithTimeout(700ms));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  // The merge happened (C was accepted) and C withdrew nothing.
  f.WaitEvent([](const Event& e) { return e.Is("user.message.updated"); });
  CHECK(f.Requests("message.remove").empty());
  CHECK(f.Requests("interrupt").empty());
  REQUIRE(f.driver->Interrupt().has_value());  // end A; B (with C) runs next
  auto ra = Get(a);
  REQUIRE(ra.has_value());
  f.WaitEvent([](const Event& e) { return e.Is("turn.started") && e.turn_id != "turn-1"; });
  REQUIRE(f.driver->Interrupt().has_value());
  auto rb = Get(b);
  REQUIRE(rb.has_value());
  CHECK(rb->shared);
  CHECK(rb->status == TurnStatus::interrupted);
}

TEST_CASE("driver: questions are declined by default and counted", "[driver]") {
  Fixture f("", R"({"turns":[[{"type":"question","inputId":"in-1","questions":[{"id":"q1","question":"Proceed?",
    "options":[{"label":"yes"},{"label":"no"}]}]},{"type":"message","text":"after"}]]})");
  auto r = f.driver->SubmitTurn("ask me");
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::completed);
  CHECK(r->questions_declined == 1);
  CHECK(r->questions_answered == 0);
  CHECK(r->text == "The question was declined.\n\nafter");
  auto inputs = f.Requests("input");
  REQUIRE(inputs.size() == 1);
  CHECK(inputs[0].cancel);
}

TEST_CASE("driver: questions answered through the responder reach the provider", "[driver]") {
  Fixture f("", R"({"turns":[[{"type":"question","inputId":"in-1","questions":[{"id":"q1","question":"Proceed?",
    "options":[{"label":"yes"},{"label":"no"}]}]},{"type":"message","text":"after"}]]})");
  TurnOptions o;
  o.questions = QuestionPolicy::ask;
  std::vector<std::thread> answerers;
  std::mutex mu;
  std::string asked;
  o.on_question = [&](const Event& e, Responder responder) {
    {
      std::lock_guard lock(mu);
      asked = e.questions.empty() ? "" : e.questions[0].question;
      // Answer later, from another thread.
      answerers.emplace_back([responder] {
        std::this_thread::sleep_for(50ms);
        CHECK(responder.Answer({{"q1", {"yes"}}}));
        CHECK_FALSE(responder.Decline());
      });
    }
  };
  auto r = f.driver->SubmitTurn("ask me", o);
  for (auto& t : answerers) t.join();
  REQUIRE(r.has_value());
  CHECK(asked == "Proceed?");
  CHECK(r->questions_answered == 1);
  CHECK(r->questions_declined == 0);
  CHECK(r->text == "Answers: q1=yes\n\nafter");
}

TEST_CASE("driver: an unanswered question is declined at the answer deadline", "[driver]") {
  Fixture f("", R"({"turns":[[{"type":"question","inputId":"in-1","questions":[{"id":"q1","question":"?"}]},
    {"type":"message","text":"after"}]]})");
  TurnOptions o;
  o.questions = QuestionPolicy::ask;
  o.answer_timeout = 300ms;
  Responder kept;
  o.on_question = [&](const Event&, Responder responder) { kept = responder; };
  auto r = f.driver->SubmitTurn("ask me", o);
  REQUIRE(r.has_value());
  CHECK(r->questions_declined == 1);
  CHECK(r->text == "The question was declined.\n\nafter");
  CHECK_FALSE(kept.Answer({{"q1", {"late"}}}));
}

TEST_CASE("driver: our queued turn removed by another client ends as removed at once", "[driver]") {
  Fixture f("", kLongTurn);
  auto a = f.Async("A");
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  auto b = f.Async("B");
  auto echo = f.WaitEvent([](const Event& e) { return e.Is("user.message") && e.text == "B"; });
  // Another client withdraws it.
  auto conn_promise = std::make_shared<std::promise<Result<std::shared_ptr<Connection>>>>();
  f.connector->AsyncConnect([conn_promise](Result<std::shared_ptr<Connection>> c) { conn_promise->set_value(std::move(c)); });
  auto conn = conn_promise->get_future().get();
  REQUIRE(conn.has_value());
  (*conn)->AsyncWrite(EncodeRequest(ClientRequest::Remove(NewRequestId(), echo.turn_id, echo.revision)), {});
  auto rb = Get(b);
  REQUIRE(rb.has_value());
  CHECK(rb->status == TurnStatus::removed);
  CHECK(a.wait_for(0s) != std::future_status::ready);  // A is still running: B ended at once
  (*conn)->Close();
  REQUIRE(f.driver->Interrupt().has_value());
  REQUIRE(Get(a).has_value());
}

TEST_CASE("driver: a stream dropped at every event position gives the undisturbed result", "[driver]") {
  const char* script = R"({"turns":[[{"type":"delta","text":"Hel"},{"type":"delta","text":"lo"},
    {"type":"tool.start","id":"t1","name":"bash","text":"ls"},{"type":"tool.complete","id":"t1","name":"bash",
    "output":"a b"},{"type":"message","text":"Hello"},{"type":"delta","text":" again"},
    {"type":"message","text":"again"}]]})";
  std::vector<std::string> baseline_events;
  TurnResult baseline;
  {
    Fixture f("", script);
    Recorder rec;
    auto counter = std::make_shared<WrapConnector>(f.connector, -1, false);
    Driver d(f.ctx, counter);
    TurnOptions o;
    o.on_event = rec.Callback();
    auto r = d.SubmitTurn("go", o);
    REQUIRE(r.has_value());
    baseline = *r;
    baseline_events = rec.Signature();
  }
  REQUIRE(baseline.text == "Hello\n\nagain");
  // history.start, history.end (plus a status line or two) and each event of the turn: a few more
  // positions than events covers every one.
  const int positions = static_cast<int>(baseline_events.size()) + 4;
  for (int drop_at = 1; drop_at <= positions; ++drop_at) {
    CAPTURE(drop_at);
    Fixture f("", script);
    Recorder rec;
    auto dropping = std::make_shared<WrapConnector>(f.connector, drop_at, false);
    Driver d(f.ctx, dropping);
    TurnOptions o;
    o.on_event = rec.Callback();
    auto r = d.SubmitTurn("go", o);
    REQUIRE(r.has_value());
    CHECK(r->status == baseline.status);
    CHECK(r->text == baseline.text);
    CHECK(r->turn_id == baseline.turn_id);
    CHECK(rec.Signature() == baseline_events);
    CHECK(r->reconnects == (dropping->connections() > 1 ? 1 : 0));
    // Exactly one message reached the runtime: no duplicate turn.
    CHECK(f.Requests("message").size() == 1);
  }
}

TEST_CASE("driver: a runtime-side drop mid-turn reconnects and loses nothing", "[driver]") {
  Fixture f("echo", {}, [](auto& o) { o.echo_delay = 100ms; });
  Recorder rec;
  TurnOptions o;
  o.on_event = rec.Callback();
  auto fut = f.Async("resilient", o);
  f.WaitEvent([](const Event& e) { return e.Is("assistant.delta"); });
  f.runtime->DropAllConnections();
  auto r = Get(fut);
  REQUIRE(r.has_value());
  CHECK(r->text == "echo #1: resilient");
  CHECK(r->reconnects >= 1);
  std::int64_t last = 0;
  for (auto& e : rec.events) {
    CHECK(e.id > last);
    last = e.id;
  }
}

TEST_CASE("driver: a runtime restarted mid-turn ends the turn interrupted with an explanation", "[driver]") {
  Fixture f("", kLongTurn);
  auto fut = f.Async("slow");
  f.WaitEvent([](const Event& e) { return e.Is("assistant.delta"); });
  REQUIRE(f.runtime->Restart().has_value());
  auto r = Get(fut);
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::interrupted);
  CHECK(r->error_message.find("restarted") != std::string::npos);
  CHECK(r->reconnects >= 1);
}

TEST_CASE("driver: a prompt the runtime would run as a command is refused unless allowed", "[driver]") {
  Fixture f;
  for (const char* prompt : {"!rm -rf /", "  \t!ls", "/goal win"}) {
    auto r = f.driver->SubmitTurn(prompt);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::invalid_argument);
  }
  CHECK(f.runtime->ReceivedRequests().empty());  // refused before any I/O
  TurnOptions o;
  o.allow_commands = true;
  auto r = f.driver->SubmitTurn("!echo hi", o);
  REQUIRE(r.has_value());  // the runtime ran (or refused to run) it as a command: a finished turn either way
  REQUIRE(f.Requests("message").size() == 1);
  CHECK(f.Requests("message")[0].text == "!echo hi");
}

TEST_CASE("driver: cancelling abandons the turn with Errc::cancelled", "[driver]") {
  Fixture f("", kLongTurn);
  CancellationSource source;
  TurnOptions o;
  o.cancel = source.Token();
  auto fut = f.Async("slow", o);
  f.WaitEvent([](const Event& e) { return e.Is("assistant.delta"); });
  source.Cancel();
  auto r = Get(fut);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  REQUIRE(f.runtime->WaitForRequest([](const ClientRequest& q) { return q.type == "interrupt"; }, kWait));
}

TEST_CASE("driver: an unreachable runtime is connection_failed, and a blocking call on a worker would_block", "[driver]") {
  Context ctx;
  TempDir dir;
  Driver d(ctx, MakeUnixConnector(ctx, dir.path + "/nobody.sock"));
  auto r = d.SubmitTurn("hello");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::connection_failed);
  std::promise<Errc> p;
  ctx.Post([&] { p.set_value(d.SubmitTurn("x").error().code); });
  auto fut = p.get_future();
  REQUIRE(fut.wait_for(kWait) == std::future_status::ready);
  CHECK(fut.get() == Errc::would_block);
}

TEST_CASE("driver: reconnects beyond the budget end with connection_lost", "[driver]") {
  Fixture f("", kLongTurn);
  TurnOptions o;
  o.reconnect.max_attempts = 2;
  o.reconnect.initial_backoff = 20ms;
  auto fut = f.Async("slow", o);
  f.WaitEvent([](const Event& e) { return e.Is("assistant.delta"); });
  f.runtime->Stop();
  auto r = Get(fut);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::connection_lost);
  CHECK(r.error().message.find("2 reconnect attempts") != std::string::npos);
}

TEST_CASE("driver: Interrupt with no running turn is rejected with the runtime's reason", "[driver]") {
  Fixture f;
  auto s = f.driver->Interrupt();
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().code == Errc::rejected);
  CHECK(s.error().message.find(std::string(sessionturn::testing::reject_reason::kNoActiveTurn)) != std::string::npos);
}

TEST_CASE("driver: Answer and Decline by input id on one-shot connections", "[driver]") {
  Fixture f("", R"({"turns":[[{"type":"question","inputId":"in-1","questions":[{"id":"q1","question":"?"}]},
    {"type":"question","inputId":"in-2","questions":[{"id":"q2","question":"?"}]},{"type":"message","text":"end"}]]})");
  TurnOptions o;
  o.questions = QuestionPolicy::ask;
  o.on_question = [](const Event&, Responder) {};  // someone else answers, by id
  auto fut = f.Async("ask", o);
  f.WaitEvent([](const Event& e) { return e.Is("input.requested") && e.input_id == "in-1"; });
  REQUIRE(f.driver->Answer("in-1", {{"q1", {"blue"}}}).has_value());
  f.WaitEvent([](const Event& e) { return e.Is("input.requested") && e.input_id == "in-2"; });
  REQUIRE(f.driver->Decline("in-2").has_value());
  auto again = f.driver->Decline("in-2");
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().code == Errc::rejected);
  auto r = Get(fut);
  REQUIRE(r.has_value());
  CHECK(r->text == "Answers: q1=blue\n\nThe question was declined.\n\nend");
}

TEST_CASE("driver: Watch follows the Session across a drop without duplicates", "[driver]") {
  Fixture f("echo", {}, [](auto& o) { o.echo_delay = 30ms; });
  std::mutex mu;
  std::vector<Event> seen;
  auto handle = f.driver->Watch(WatchOptions{}, [&](const Event& e) {
    std::lock_guard lock(mu);
    seen.push_back(e);
  });
  REQUIRE(f.driver->SubmitTurn("one").has_value());
  f.runtime->DropAllConnections();
  REQUIRE(f.driver->SubmitTurn("two").has_value());
  const auto last = f.runtime->last_event_id();
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (handle.last_event_id() < last && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  handle.Stop();
  CHECK_FALSE(handle.Active());
  std::lock_guard lock(mu);
  std::vector<std::int64_t> ids;
  for (auto& e : seen) {
    if (e.id > 0) ids.push_back(e.id);
  }
  REQUIRE(!ids.empty());
  for (std::size_t i = 0; i < ids.size(); ++i) CHECK(ids[i] == static_cast<std::int64_t>(i + 1));
  CHECK(ids.back() == last);
  CHECK(handle.reconnects() >= 1);
}

TEST_CASE("driver: runtime-side drops after every few events still give the undisturbed result", "[driver]") {
  const char* script = R"({"turns":[[{"type":"delta","text":"a"},{"type":"delta","text":"b"},
    {"type":"message","text":"ab"},{"type":"delta","text":"c"},{"type":"message","text":"c"}]]})";
  for (int n : {3, 4, 6, 8}) {
    CAPTURE(n);
    Fixture f("", script);
    f.runtime->DropAfterEvents(n);
    Recorder rec;
    TurnOptions o;
    o.on_event = rec.Callback();
    o.reconnect.initial_backoff = 10ms;
    auto r = f.driver->SubmitTurn("go", o);
    REQUIRE(r.has_value());
    CHECK(r->status == TurnStatus::completed);
    CHECK(r->text == "ab\n\nc");
    CHECK(r->reconnects >= 1);
    auto sig = rec.Signature();
    REQUIRE(sig.size() == 8);  // echo, started, 5 steps, completed: each exactly once
    CHECK(f.Requests("message").size() == 1);
  }
}

TEST_CASE("driver: a runtime that comes back with a new journal ends the turn interrupted and says why", "[driver]") {
  Fixture f("", kLongTurn);
  auto fut = f.Async("slow");
  f.WaitEvent([](const Event& e) { return e.Is("assistant.delta"); });
  const std::string old_journal = f.runtime->journal_id();
  f.runtime->Stop();
  sessionturn::testing::LocalRuntimeOptions o;
  o.socket_path = f.socket();
  o.state_dir = f.dir.path + "/state2";  // a fresh journal: the old history is gone
  auto fresh = sessionturn::testing::LocalRuntime::Start(o);
  REQUIRE(fresh.has_value());
  CHECK((*fresh)->journal_id() != old_journal);
  auto r = Get(fut);
  REQUIRE(r.has_value());
  CHECK(r->status == TurnStatus::interrupted);
  CHECK(r->error_message.find("journal changed") != std::string::npos);
}

TEST_CASE("driver: cancelled right after submitting, a queued turn is still withdrawn", "[driver]") {
  Fixture f("", kLongTurn);
  auto a = f.Async("A");
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  CancellationSource source;
  TurnOptions o;
  o.cancel = source.Token();
  o.request_id = "req-B";
  auto b = f.Async("B", o);
  REQUIRE(f.runtime->WaitForRequest([](const ClientRequest& q) { return q.request_id == "req-B"; }, kWait));
  source.Cancel();  // races the echo on purpose: either way the accepted turn must be withdrawn
  auto rb = Get(b);
  REQUIRE_FALSE(rb.has_value());
  CHECK(rb.error().code == Errc::cancelled);
  auto removed = f.WaitEvent([](const Event& e) { return e.Is("user.message.removed"); });
  CHECK(removed.revision == 2);
  REQUIRE(f.driver->Interrupt().has_value());
  REQUIRE(Get(a).has_value());
}

TEST_CASE("driver: unusable options are refused with invalid_argument before any I/O", "[driver]") {
  Fixture f;
  auto expect_invalid = [&](std::string prompt, TurnOptions o) {
    auto r = f.driver->SubmitTurn(std::move(prompt), std::move(o));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::invalid_argument);
  };
  expect_invalid(" \n ", {});
  TurnOptions ask;
  ask.questions = QuestionPolicy::ask;  // without on_question
  expect_invalid("hi", ask);
  expect_invalid("hi", WithTimeout(0ms));
  TurnOptions answer;
  answer.answer_timeout = -1ms;
  expect_invalid("hi", answer);
  CHECK(f.runtime->ReceivedRequests().empty());
}

TEST_CASE("driver: many concurrent turns on a multi-threaded Context all complete", "[driver]") {
  TempDir dir;
  sessionturn::testing::LocalRuntimeOptions ro;
  ro.socket_path = dir.path + "/rt.sock";
  ro.echo_delay = 5ms;
  auto runtime = sessionturn::testing::LocalRuntime::Start(ro);
  REQUIRE(runtime.has_value());
  Context ctx(ContextOptions{4, {}, LogLevel::warning});
  Driver driver(ctx, MakeUnixConnector(ctx, ro.socket_path));
  constexpr int kTurns = 40;
  std::vector<std::future<Result<TurnResult>>> futures;
  std::atomic<int> events{0};
  for (int i = 0; i < kTurns; ++i) {
    auto promise = std::make_shared<std::promise<Result<TurnResult>>>();
    futures.push_back(promise->get_future());
    TurnOptions o;
    o.on_event = [&events](const Event&) { events.fetch_add(1); };
    driver.AsyncSubmitTurn("prompt " + std::to_string(i), o,
                           [promise](Result<TurnResult> r) { promise->set_value(std::move(r)); });
  }
  for (int i = 0; i < kTurns; ++i) {
    CAPTURE(i);
    REQUIRE(futures[i].wait_for(kWait) == std::future_status::ready);
    auto r = futures[i].get();
    REQUIRE(r.has_value());
    CHECK(r->status == TurnStatus::completed);
    // Merged turns carry several prompts; each caller's prompt is in its reply.
    CHECK(r->text.find("prompt " + std::to_string(i)) != std::string::npos);
  }
  CHECK(driver.TurnsInFlight() == 0);
  CHECK(events.load() >= kTurns * 3);
}

TEST_CASE("driver: a throwing event callback does not stall the turn", "[driver]") {
  std::vector<std::string> logged;
  std::mutex mu;
  TempDir dir;
  sessionturn::testing::LocalRuntimeOptions ro;
  ro.socket_path = dir.path + "/rt.sock";
  auto runtime = sessionturn::testing::LocalRuntime::Start(ro);
  REQUIRE(runtime.has_value());
  ContextOptions co;
  co.log_sink = [&](LogLevel, std::string_view m) {
    std::lock_guard lock(mu);
    logged.emplace_back(m);
  };
  Context ctx(co);
  Driver driver(ctx, MakeUnixConnector(ctx, ro.socket_path));
  TurnOptions o;
  o.on_event = [](const Event&) { throw std::runtime_error("callback bug"); };
  auto r = driver.SubmitTurn("hello", o);
  REQUIRE(r.has_value());
  CHECK(r->text == "echo #1: hello");
  std::lock_guard lock(mu);
  REQUIRE_FALSE(logged.empty());
  CHECK(logged[0].find("callback bug") != std::string::npos);
}

TEST_CASE("driver: a stream that accepts but never replays counts as dropped after the handshake timeout",
          "[driver]") {
  // A "runtime" that accepts connections and reads, but never answers: a wedged process or proxy.
  TempDir dir;
  const std::string path = dir.path + "/wedged.sock";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 16) == 0);
  std::atomic<int> accepted{0};
  std::vector<int> held;
  std::thread acceptor([&] {
    for (;;) {
      const int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) return;  // the listener was shut down
      held.push_back(fd);
      ++accepted;
    }
  });

  Context ctx;
  Driver driver(ctx, MakeUnixConnector(ctx, path));
  TurnOptions o;
  o.timeout = 60s;
  o.reconnect.handshake_timeout = 300ms;
  o.reconnect.max_attempts = 2;
  o.reconnect.initial_backoff = 10ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = driver.SubmitTurn("hello", o);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::connection_lost);
  CHECK_THAT(r.error().message, Catch::Contains("no history.end within"));
  CHECK(took < 30s);        // bounded by the handshake timeouts, not the turn's 60 s
  CHECK(accepted.load() == 3);  // the first connect and two reconnects

  ::shutdown(listener, SHUT_RDWR);
  ::close(listener);
  acceptor.join();
  for (int fd : held) ::close(fd);
}

TEST_CASE("driver: a timeout while disconnected reconnects at once and withdraws the started turn", "[driver]") {
  Fixture f("", kLongTurn);
  TurnOptions o = WithTimeout(1500ms);
  o.reconnect.initial_backoff = 60s;  // the backoff would outlast the deadline: the abandon must not wait for it
  o.reconnect.max_backoff = 60s;
  std::atomic<bool> started{false};
  o.on_event = [&](const Event& e) {
    if (e.Is("turn.started")) started = true;
  };
  auto pending = f.Async("slow", o);
  f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
  for (int i = 0; i < 400 && !started; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(started);
  f.runtime->DropAllConnections();  // the driver is now in its 60 s backoff
  auto r = Get(pending);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  // The withdrawal reached the runtime over a fresh connection: our turn was interrupted, not left running.
  REQUIRE(f.runtime->WaitForRequest([](const ClientRequest& q) { return q.type == "interrupt"; }, kWait));
  auto done = f.WaitEvent([](const Event& e) { return e.Is("turn.completed"); });
  CHECK(done.status == "interrupted");
}

TEST_CASE("driver: a timeout while disconnected sends nothing when the turn ended meanwhile", "[driver]") {
  // A short turn that completes during the driver's backoff: the reconnect's replay shows it ended, so
  // no interrupt is sent (it would stop whatever runs next).
  Fixture f("", R"({"turns":[[{"type":"delta","text":"a"},{"type":"sleep","ms":300},{"type":"message","text":"done"}]],
                    "repeat":"last"})");
  TurnOptions o = WithTimeout(2000ms);
  o.reconnect.initial_backoff = 60s;
  o.reconnect.max_backoff = 60s;
  std::atomic<bool> started{false};
  o.on_event = [&](const Event& e) {
    if (e.Is("turn.started")) started = true;
  };
  auto pending = f.Async("quick", o);
  for (int i = 0; i < 400 && !started; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(started);
  f.runtime->DropAllConnections();
  f.WaitEvent([](const Event& e) { return e.Is("turn.completed"); });
  auto r = Get(pending);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  CHECK(f.Requests("interrupt").empty());
}
