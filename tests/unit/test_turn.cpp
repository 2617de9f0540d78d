// TurnTracker: one test per rule of DESIGN.md §4, by feeding event sequences (no sockets).
#include <catch2/catch.hpp>

#include "sessionturn/turn.hpp"

using namespace sessionturn;

namespace {

constexpr const char* kRid = "req-ours";

Event Ev(std::string type, std::int64_t id = 0) {
  Event e;
  e.type = std::move(type);
  e.id = id;
  return e;
}
Event HistoryStart(std::int64_t last, std::string journal = "j1", bool reset = false) {
  Event e = Ev("history.start");
  e.first_event_id = last > 0 ? 1 : 0;
  e.last_event_id = last;
  e.journal_id = std::move(journal);
  e.reset = reset;
  return e;
}
Event TurnEv(std::string type, std::int64_t id, std::string turn = "turn-1") {
  Event e = Ev(std::move(type), id);
  e.turn_id = std::move(turn);
  return e;
}
Event Echo(std::int64_t id, std::string rid = kRid, std::string turn = "turn-1", std::int64_t rev = 1) {
  Event e = TurnEv("user.message", id, std::move(turn));
  e.request_id = std::move(rid);
  e.revision = rev;
  return e;
}
Event Updated(std::int64_t id, std::string rid, std::int64_t rev, std::string turn = "turn-1") {
  Event e = TurnEv("user.message.updated", id, std::move(turn));
  e.request_id = std::move(rid);
  e.revision = rev;
  return e;
}
Event Text(std::string type, std::int64_t id, std::string text, std::string turn = "turn-1") {
  Event e = TurnEv(std::move(type), id, std::move(turn));
  e.text = std::move(text);
  return e;
}
Event Completed(std::int64_t id, std::string status, std::string turn = "turn-1") {
  Event e = TurnEv("turn.completed", id, std::move(turn));
  e.status = std::move(status);
  return e;
}

// A tracker subscribed and submitted: the journal had `last` events before us.
TurnTracker Submitted(std::int64_t last = 0, QuestionPolicy policy = QuestionPolicy::decline) {
  TurnTracker t("hello", TurnTrackerOptions{policy, kRid, std::nullopt});
  t.OnConnected();
  t.OnEvent(HistoryStart(last));
  auto step = t.OnEvent(Ev("history.end"));
  REQUIRE(step.requests.size() == 1);
  REQUIRE(t.phase() == TurnPhase::submitted);
  return t;
}

TurnOutcome OutcomeOf(const TurnTracker& t) {
  REQUIRE(t.Done());
  auto out = t.Outcome();
  REQUIRE(out.has_value());
  return *out;
}

}  // namespace

TEST_CASE("turn: subscribes with bounded history, then sends the message after history.end", "[turn]") {
  TurnTracker t("hello world", TurnTrackerOptions{QuestionPolicy::decline, kRid, std::nullopt});
  ClientRequest sub = t.OnConnected();
  CHECK(sub.type == "subscribe");
  CHECK(sub.history_bounds);
  CHECK(sub.history_items == 1);
  CHECK(sub.history_bytes == 1024);
  CHECK(sub.since == 0);
  CHECK(sub.journal_id.empty());
  CHECK(t.OnEvent(HistoryStart(7)).requests.empty());
  Event condensed = Text("assistant.message", 5, "old", "");
  CHECK_FALSE(t.OnEvent(condensed).deliver);
  auto step = t.OnEvent(Ev("history.end"));
  REQUIRE(step.requests.size() == 1);
  CHECK(step.requests[0].type == "message");
  CHECK(step.requests[0].request_id == kRid);
  CHECK(step.requests[0].text == "hello world");
  CHECK(t.last_event_id() == 7);
  CHECK(t.journal_id() == "j1");
}

TEST_CASE("turn: a fresh random requestId per tracker", "[turn]") {
  TurnTracker a("x"), b("x");
  CHECK(!a.request_id().empty());
  CHECK(a.request_id() != b.request_id());
}

TEST_CASE("turn: accepted by its echo, not by another client's message", "[turn]") {
  auto t = Submitted();
  CHECK_FALSE(t.OnEvent(Echo(1, "someone-else", "turn-1")).accepted);
  CHECK(t.phase() == TurnPhase::submitted);
  auto step = t.OnEvent(Echo(2, kRid, "turn-2"));
  CHECK(step.accepted);
  CHECK(step.deliver);
  CHECK(t.turn_id() == "turn-2");
  CHECK(t.phase() == TurnPhase::queued);
  CHECK_FALSE(t.shared());
}

TEST_CASE("turn: accepted by merge into a queued turn is shared", "[turn]") {
  auto t = Submitted();
  auto step = t.OnEvent(Updated(3, kRid, 2, "turn-1"));
  CHECK(step.accepted);
  CHECK(t.shared());
  CHECK(t.revision() == 2);
  t.OnEvent(TurnEv("turn.started", 4));
  t.OnEvent(Text("assistant.message", 5, "both"));
  t.OnEvent(Completed(6, "completed"));
  auto out = OutcomeOf(t);
  CHECK(out.shared);
  CHECK(out.text == "both");
}

TEST_CASE("turn: rejection with our requestId ends with Errc::rejected and the reason", "[turn]") {
  auto t = Submitted();
  Event other = Ev("error");
  other.request_id = "another";
  other.status = "rejected";
  CHECK_FALSE(t.OnEvent(other).finished);
  Event rej = Ev("error");
  rej.request_id = kRid;
  rej.status = "rejected";
  rej.text = "runtime draining for an update";
  CHECK(t.OnEvent(rej).finished);
  auto out = t.Outcome();
  REQUIRE_FALSE(out.has_value());
  CHECK(out.error().code == Errc::rejected);
  CHECK(out.error().message.find("runtime draining for an update") != std::string::npos);
}

TEST_CASE("turn: follows only its own turnId", "[turn]") {
  auto t = Submitted();
  t.OnEvent(Echo(1, kRid, "turn-2"));
  CHECK_FALSE(t.OnEvent(Text("assistant.message", 2, "not ours", "turn-1")).deliver);
  CHECK_FALSE(t.OnEvent(Completed(3, "completed", "turn-1")).finished);
  CHECK(t.OnEvent(TurnEv("turn.started", 4, "turn-2")).started);
  CHECK(t.OnEvent(Text("assistant.message", 5, "ours", "turn-2")).deliver);
  CHECK(t.OnEvent(Completed(6, "completed", "turn-2")).finished);
  auto out = OutcomeOf(t);
  CHECK(out.turn_id == "turn-2");
  CHECK(out.status == TurnStatus::completed);
  CHECK(out.text == "ours");
}

TEST_CASE("turn: a later merge by another request marks it shared", "[turn]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  CHECK_FALSE(t.shared());
  auto step = t.OnEvent(Updated(2, "another", 2));
  CHECK(step.deliver);
  CHECK(t.shared());
  CHECK(t.revision() == 2);
}

TEST_CASE("turn: removed by someone else ends as removed at once", "[turn]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  Event rm = TurnEv("user.message.removed", 2);
  rm.status = "removed";
  rm.revision = 2;
  CHECK(t.OnEvent(rm).finished);
  CHECK(OutcomeOf(t).status == TurnStatus::removed);
}

TEST_CASE("turn: turn.completed ends with its status", "[turn]") {
  for (auto [wire, status] : {std::pair{"completed", TurnStatus::completed}, std::pair{"failed", TurnStatus::failed},
                              std::pair{"interrupted", TurnStatus::interrupted}}) {
    auto t = Submitted();
    t.OnEvent(Echo(1));
    t.OnEvent(TurnEv("turn.started", 2));
    CHECK(t.OnEvent(Completed(3, wire)).finished);
    CHECK(OutcomeOf(t).status == status);
  }
}

TEST_CASE("turn: reply is assistant messages trimmed, empty dropped, joined by a blank line", "[turn]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  t.OnEvent(Text("assistant.delta", 3, "ignored "));
  t.OnEvent(Text("assistant.message", 4, "  first\n"));
  t.OnEvent(Text("assistant.message", 5, " \n\t "));
  t.OnEvent(Text("assistant.message", 6, "second"));
  t.OnEvent(Completed(7, "completed"));
  CHECK(OutcomeOf(t).text == "first\n\nsecond");
}

TEST_CASE("turn: reply falls back to accumulated deltas", "[turn]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  t.OnEvent(Text("assistant.delta", 3, "Hel"));
  t.OnEvent(Text("assistant.delta", 4, "lo"));
  t.OnEvent(Completed(5, "interrupted"));
  CHECK(OutcomeOf(t).text == "Hello");
}

TEST_CASE("turn: the last error text is kept", "[turn]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  t.OnEvent(Text("error", 3, "first problem"));
  t.OnEvent(Text("error", 4, "provider crashed"));
  t.OnEvent(Completed(5, "failed"));
  auto out = OutcomeOf(t);
  CHECK(out.status == TurnStatus::failed);
  CHECK(out.error_message == "provider crashed");
}

TEST_CASE("turn: questions are declined by default and counted", "[turn]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  Event q = TurnEv("input.requested", 3);
  q.input_id = "in-1";
  q.questions.push_back(InputQuestion{"q1", "", "Proceed?", {}, false, false});
  auto step = t.OnEvent(q);
  CHECK(step.deliver);
  CHECK_FALSE(step.question.has_value());
  REQUIRE(step.requests.size() == 1);
  CHECK(step.requests[0].type == "input");
  CHECK(step.requests[0].input_id == "in-1");
  CHECK(step.requests[0].cancel);
  t.OnEvent(Completed(4, "completed"));
  auto out = OutcomeOf(t);
  CHECK(out.questions_declined == 1);
  CHECK(out.questions_answered == 0);
}

TEST_CASE("turn: policy ask surfaces questions, answers once, counts answers", "[turn]") {
  auto t = Submitted(0, QuestionPolicy::ask);
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  Event q = TurnEv("input.requested", 3);
  q.input_id = "in-1";
  auto step = t.OnEvent(q);
  CHECK(step.requests.empty());
  REQUIRE(step.question.has_value());
  CHECK(step.question->input_id == "in-1");
  auto answer = t.Answer("in-1", {{"q1", {"yes"}}});
  REQUIRE(answer.has_value());
  CHECK(answer->type == "input");
  CHECK(answer->answers.at("q1") == std::vector<std::string>{"yes"});
  CHECK_FALSE(answer->cancel);
  CHECK(answer->request_id != kRid);
  auto again = t.Answer("in-1", {});
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().code == Errc::invalid_argument);
  CHECK_FALSE(t.Decline("in-1").has_value());
  Event q2 = TurnEv("input.requested", 4);
  q2.input_id = "in-2";
  t.OnEvent(q2);
  auto decline = t.Decline("in-2");
  REQUIRE(decline.has_value());
  CHECK(decline->cancel);
  t.OnEvent(Completed(5, "completed"));
  auto out = OutcomeOf(t);
  CHECK(out.questions_answered == 1);
  CHECK(out.questions_declined == 1);
}

namespace {
Error Reason() { return Error(Errc::timeout, "the turn did not complete within 8s"); }
Event Question(std::int64_t id, std::string input_id, std::string turn = "turn-1") {
  Event q = TurnEv("input.requested", id, std::move(turn));
  q.input_id = std::move(input_id);
  q.status = "pending";
  q.questions.push_back(InputQuestion{"question-1", "", "Proceed?", {}, false, false});
  return q;
}
// The runtime's answer to an `input`: no turnId (PROTOCOL.md §4 Questions).
Event Resolved(std::int64_t id, std::string input_id, std::string status, std::string rid = "") {
  Event e = Ev("input.resolved", id);
  e.input_id = std::move(input_id);
  e.status = std::move(status);
  e.request_id = std::move(rid);
  return e;
}
}  // namespace

TEST_CASE("turn: abandon interrupts a started, unshared turn and ends on the runtime's word", "[turn][abandon]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  auto plan = t.Abandon(Reason(), true, false);
  CHECK(plan.action == AbandonAction::withdraw);
  REQUIRE(plan.requests.size() == 1);
  CHECK(plan.requests[0].type == "interrupt");
  CHECK(t.Abandoning());
  CHECK_FALSE(t.Done());
  // Events still flow to the caller while the interrupt lands.
  CHECK(t.OnEvent(Text("assistant.delta", 3, "x")).deliver);
  Event interrupting = TurnEv("turn.interrupting", 4);
  interrupting.request_id = plan.requests[0].request_id;
  CHECK(t.OnEvent(interrupting).finished);
  auto out = t.Outcome();
  REQUIRE_FALSE(out);
  CHECK(out.error().code == Errc::timeout);
  // A second abandon is a no-op.
  CHECK(t.Abandon(Reason(), true, false).action == AbandonAction::finish);
}

TEST_CASE("turn: abandon removes a queued turn with the last seen revision", "[turn][abandon]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  Event edit = Updated(2, kRid, 3);  // our own edit bumps the revision without sharing
  t.OnEvent(edit);
  CHECK_FALSE(t.shared());
  auto plan = t.Abandon(Reason(), true, false);
  REQUIRE(plan.requests.size() == 1);
  CHECK(plan.requests[0].type == "message.remove");
  CHECK(plan.requests[0].turn_id == "turn-1");
  CHECK(plan.requests[0].expected_revision == 3);
  Event removed = TurnEv("user.message.removed", 3);
  removed.request_id = plan.requests[0].request_id;
  removed.status = "removed";
  CHECK(t.OnEvent(removed).finished);
  CHECK(t.Outcome().error().code == Errc::timeout);
}

TEST_CASE("turn: a remove that races the start is replaced by an interrupt", "[turn][abandon]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  auto plan = t.Abandon(Reason(), true, false);
  REQUIRE(plan.requests.at(0).type == "message.remove");
  auto started = t.OnEvent(TurnEv("turn.started", 2));
  REQUIRE(started.requests.size() == 1);
  CHECK(started.requests[0].type == "interrupt");
  // The remove's rejection ("no longer pending") is superseded: it does not end the turn.
  Event rejected = Ev("error");
  rejected.request_id = plan.requests[0].request_id;
  rejected.turn_id = "turn-1";
  rejected.status = "rejected";
  rejected.text = "Session turn \"turn-1\" is no longer pending";
  CHECK_FALSE(t.OnEvent(rejected).finished);
  CHECK(t.OnEvent(Completed(3, "interrupted")).finished);
}

TEST_CASE("turn: abandon plans: nothing, await the echo, or reconnect to withdraw", "[turn][abandon]") {
  auto shared = Submitted();
  shared.OnEvent(Echo(1));
  shared.OnEvent(Updated(2, "another", 2));
  CHECK(shared.Abandon(Reason(), true, false).action == AbandonAction::finish);
  CHECK(shared.Done());
  CHECK(shared.Outcome().error().code == Errc::timeout);

  // Never sent: nothing to withdraw.
  TurnTracker fresh("hello", TurnTrackerOptions{QuestionPolicy::decline, kRid, std::nullopt});
  fresh.OnConnected();
  CHECK(fresh.Abandon(Reason(), true, true).action == AbandonAction::finish);

  // Sent long ago and never echoed: not accepted, the timeout is the bound.
  auto stale = Submitted();
  CHECK(stale.Abandon(Reason(), true, /*echo_expected=*/false).action == AbandonAction::finish);

  // Sent just now: the echo may come; once it does, the turn is withdrawn.
  auto recent = Submitted();
  CHECK(recent.Abandon(Reason(), true, true).action == AbandonAction::await_echo);
  auto echo = recent.OnEvent(Echo(1));
  REQUIRE(echo.requests.size() == 1);
  CHECK(echo.requests[0].type == "message.remove");
  // ... or it is rejected, which ends it with the abandon reason.
  auto rejected = Submitted();
  CHECK(rejected.Abandon(Reason(), true, true).action == AbandonAction::await_echo);
  Event err = Ev("error");
  err.request_id = kRid;
  err.status = "rejected";
  err.text = "message must not be empty";
  CHECK(rejected.OnEvent(err).finished);
  CHECK(rejected.Outcome().error().code == Errc::timeout);

  // Disconnected with a running turn: reconnect, withdraw after the replay.
  auto away = Submitted(4);
  away.OnEvent(Echo(5));
  away.OnEvent(TurnEv("turn.started", 6));
  away.OnDisconnected();
  CHECK(away.Abandon(Reason(), false, false).action == AbandonAction::reconnect);
  away.OnConnected();
  away.OnEvent(HistoryStart(7));
  CHECK(away.OnEvent(Text("assistant.delta", 7, "meanwhile")).requests.empty());
  auto end = away.OnEvent(Ev("history.end"));
  REQUIRE(end.requests.size() == 1);
  CHECK(end.requests[0].type == "interrupt");

  // ... unless it ended meanwhile.
  auto ended = Submitted(4);
  ended.OnEvent(Echo(5));
  ended.OnDisconnected();
  CHECK(ended.Abandon(Reason(), false, false).action == AbandonAction::reconnect);
  ended.OnConnected();
  ended.OnEvent(HistoryStart(7));
  CHECK(ended.OnEvent(Completed(6, "completed")).finished);
  CHECK(ended.Outcome().error().code == Errc::timeout);

  auto done = Submitted();
  done.OnEvent(Echo(1));
  done.OnEvent(Completed(2, "completed"));
  CHECK(done.Abandon(Reason(), true, false).action == AbandonAction::finish);
  CHECK(done.Outcome().has_value());  // the turn finished before: its outcome stands
}

TEST_CASE("turn: a decline lost to a dropped stream is written again after the replay", "[turn][questions]") {
  auto t = Submitted(0);
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  auto asked = t.OnEvent(Question(3, "claude-1"));
  REQUIRE(asked.requests.size() == 1);
  const ClientRequest decline = asked.requests[0];
  CHECK(decline.cancel);
  t.OnDisconnected();  // the decline may never have reached the runtime
  t.OnConnected();
  t.OnEvent(HistoryStart(3));
  auto end = t.OnEvent(Ev("history.end"));
  REQUIRE(end.requests.size() == 1);
  CHECK(end.requests[0] == decline);  // same request, same requestId: a duplicate is rejected harmlessly
  // Resolved: nothing more to write after the next drop.
  CHECK(t.OnEvent(Resolved(4, "claude-1", "cancelled", decline.request_id)).deliver);
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(4));
  CHECK(t.OnEvent(Ev("history.end")).requests.empty());
  t.OnEvent(Completed(5, "completed"));
  CHECK(OutcomeOf(t).questions_declined == 1);
}

TEST_CASE("turn: a resolution replayed after the drop is not answered again", "[turn][questions]") {
  auto t = Submitted(0);
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  auto decline = t.OnEvent(Question(3, "claude-1")).requests.at(0);
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(4));
  t.OnEvent(Resolved(4, "claude-1", "cancelled", decline.request_id));
  CHECK(t.OnEvent(Ev("history.end")).requests.empty());
}

TEST_CASE("turn: an answer given while disconnected goes out after the replay, once", "[turn][questions]") {
  auto t = Submitted(0, QuestionPolicy::ask);
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  REQUIRE(t.OnEvent(Question(3, "claude-1")).question);
  t.OnDisconnected();
  auto answer = t.Answer("claude-1", {{"question-1", {"yes"}}});
  REQUIRE(answer);
  t.OnConnected();
  t.OnEvent(HistoryStart(3));
  auto end = t.OnEvent(Ev("history.end"));
  REQUIRE(end.requests.size() == 1);
  CHECK(end.requests[0] == *answer);
  // Answered while connected: written by the caller now, not again at the next history.end on this
  // connection, but again after a drop.
  REQUIRE(t.OnEvent(Question(4, "claude-2")).question);
  REQUIRE(t.Decline("claude-2"));
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(4));
  auto again = t.OnEvent(Ev("history.end"));
  CHECK(again.requests.size() == 2);
}

TEST_CASE("turn: input.resolved without turnId closes a surfaced question", "[turn][questions]") {
  auto t = Submitted(0, QuestionPolicy::ask);
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  REQUIRE(t.OnEvent(Question(3, "claude-1")).question);
  CHECK(t.QuestionOpen("claude-1"));
  // Answered by another client: the runtime's input.resolved carries requestId and inputId only.
  auto step = t.OnEvent(Resolved(4, "claude-1", "answered", "someone-else"));
  CHECK(step.deliver);
  REQUIRE(step.resolved.size() == 1);
  CHECK(step.resolved[0] == "claude-1");
  CHECK_FALSE(t.QuestionOpen("claude-1"));
  CHECK(t.open_questions().empty());
  auto late = t.Answer("claude-1", {{"question-1", {"no"}}});
  REQUIRE_FALSE(late);
  CHECK(late.error().code == Errc::invalid_argument);
  // Someone else's input is not ours.
  CHECK_FALSE(t.OnEvent(Resolved(5, "other-input", "answered")).deliver);
  // request.accepted for a partial answer of ours is delivered, changes nothing.
  REQUIRE(t.OnEvent(Question(6, "claude-2")).question);
  Event accepted = Ev("request.accepted", 7);
  accepted.input_id = "claude-2";
  accepted.status = "accepted";
  CHECK(t.OnEvent(accepted).deliver);
  CHECK(t.QuestionOpen("claude-2"));
}

TEST_CASE("turn: a reset of the same journal rewinds the cursor without delivering twice", "[turn]") {
  auto t = Submitted(0);
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  CHECK(t.OnEvent(Text("assistant.message", 3, "first")).deliver);
  t.OnDisconnected();
  t.OnConnected();
  // The runtime lost its unsynced tail (cursor 3 > its last id 2) and replays from its start.
  Event start = HistoryStart(2, "j1", true);
  t.OnEvent(start);
  CHECK(t.last_event_id() == 0);
  CHECK_FALSE(t.OnEvent(Echo(1)).deliver);
  CHECK_FALSE(t.OnEvent(TurnEv("turn.started", 2)).deliver);
  CHECK_FALSE(t.OnEvent(Ev("history.end")).finished);  // found in the replay
  CHECK(t.OnEvent(Ev("runtime.recovered", 3)).requests.empty());
  auto done = t.OnEvent(Completed(4, "interrupted"));
  CHECK(done.deliver);
  CHECK(done.finished);
  auto out = OutcomeOf(t);
  CHECK(out.status == TurnStatus::interrupted);
  CHECK(out.text == "first");  // not doubled
}

TEST_CASE("turn: attach follows a turn by its id from a cursor, without sending the prompt", "[turn][attach]") {
  TurnTracker t("", TurnTrackerOptions{QuestionPolicy::decline, {}, TurnRef{"req-1", "turn-3", 10, "j1", 2}});
  CHECK(t.attached());
  CHECK(t.Accepted());
  auto sub = t.OnConnected();
  CHECK(sub.since == 10);
  CHECK(sub.journal_id == "j1");
  CHECK(sub.history_items == 0);
  t.OnEvent(HistoryStart(12));
  CHECK(t.OnEvent(TurnEv("turn.started", 11, "turn-3")).started);
  CHECK(t.OnEvent(Text("assistant.message", 12, "done", "turn-3")).deliver);
  CHECK(t.OnEvent(Ev("history.end")).requests.empty());  // no prompt
  CHECK(t.OnEvent(Completed(13, "completed", "turn-3")).finished);
  auto out = OutcomeOf(t);
  CHECK(out.text == "done");
  CHECK(t.request_id() == "req-1");
  // A queued attached turn is withdrawn with the revision it was handed.
  TurnTracker q("", TurnTrackerOptions{QuestionPolicy::decline, {}, TurnRef{"req-2", "turn-4", 10, "j1", 2}});
  q.OnConnected();
  auto plan = q.Abandon(Reason(), true, false);
  REQUIRE(plan.requests.size() == 1);
  CHECK(plan.requests[0].type == "message.remove");
  CHECK(plan.requests[0].expected_revision == 2);
}

TEST_CASE("turn: attach by request id finds the echo in the replay, or reports not_found", "[turn][attach]") {
  TurnTracker t("", TurnTrackerOptions{QuestionPolicy::decline, {}, TurnRef{"req-1", "", 0, "", 0}});
  auto sub = t.OnConnected();
  CHECK(sub.since == 0);
  CHECK(sub.history_items == 0);  // the raw replay: echoes carry request ids
  t.OnEvent(HistoryStart(3));
  CHECK(t.OnEvent(Echo(2, "req-1", "turn-2")).accepted);
  CHECK(t.turn_id() == "turn-2");
  CHECK(t.OnEvent(Ev("history.end")).requests.empty());

  TurnTracker missing("", TurnTrackerOptions{QuestionPolicy::decline, {}, TurnRef{"req-9", "", 5, "j1", 0}});
  missing.OnConnected();
  missing.OnEvent(HistoryStart(7));
  missing.OnEvent(Echo(6, "someone", "turn-4"));
  CHECK(missing.OnEvent(Ev("history.end")).finished);
  auto out = missing.Outcome();
  REQUIRE_FALSE(out);
  CHECK(out.error().code == Errc::not_found);
  CHECK_THAT(out.error().message, Catch::Contains("req-9"));
}

TEST_CASE("turn: keeps the cursor and journal id and resumes with them", "[turn]") {
  auto t = Submitted(10);
  t.OnEvent(Echo(11));
  t.OnEvent(TurnEv("turn.started", 12));
  CHECK(t.last_event_id() == 12);
  t.OnDisconnected();
  auto sub = t.OnConnected();
  CHECK(sub.type == "subscribe");
  CHECK(sub.since == 12);
  CHECK(sub.journal_id == "j1");
  CHECK(sub.history_bounds);
  CHECK(sub.history_items == 0);  // the raw replay: a condensed page has no turn ids
  CHECK(sub.history_bytes == 0);
}

TEST_CASE("turn: a replay after reconnect never delivers an event twice and loses no text", "[turn]") {
  auto t = Submitted(10);
  t.OnEvent(Echo(11));
  t.OnEvent(TurnEv("turn.started", 12));
  CHECK(t.OnEvent(Text("assistant.delta", 13, "a")).deliver);
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(15));
  // The runtime replays from since; anything we saw is dropped, the rest delivered once.
  CHECK_FALSE(t.OnEvent(Text("assistant.delta", 13, "a")).deliver);
  CHECK(t.OnEvent(Text("assistant.delta", 14, "b")).deliver);
  auto end = t.OnEvent(Ev("history.end"));
  CHECK(end.requests.empty());  // no resend once accepted
  CHECK(t.OnEvent(Text("assistant.message", 15, "ab")).deliver);
  CHECK_FALSE(t.OnEvent(Text("assistant.message", 15, "ab")).deliver);
  t.OnEvent(Completed(16, "completed"));
  CHECK(OutcomeOf(t).text == "ab");
}

TEST_CASE("turn: a drop before acceptance resends the message after the replay", "[turn]") {
  auto t = Submitted(3);
  t.OnDisconnected();
  auto sub = t.OnConnected();
  CHECK(sub.since == 3);
  t.OnEvent(HistoryStart(3));
  auto end = t.OnEvent(Ev("history.end"));
  REQUIRE(end.requests.size() == 1);
  CHECK(end.requests[0].type == "message");
  CHECK(end.requests[0].request_id == kRid);
}

TEST_CASE("turn: a reset with a new journal ends an accepted turn interrupted and says why", "[turn]") {
  auto t = Submitted(2);
  t.OnEvent(Echo(3));
  t.OnEvent(TurnEv("turn.started", 4));
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(1, "j2", true));
  Event end = Ev("history.end");
  HistoryState hs;
  hs.active_turn_id = "turn-1";  // a different turn of the new journal, whatever its name
  end.history_state = hs;
  CHECK(t.OnEvent(end).finished);
  auto out = OutcomeOf(t);
  CHECK(out.status == TurnStatus::interrupted);
  CHECK(out.error_message.find("journal changed") != std::string::npos);
}

TEST_CASE("turn: a reset of the same journal keeps following a turn that shows up again", "[turn]") {
  auto t = Submitted(2);
  t.OnEvent(Echo(3));
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(9000, "j1", true));
  Event end = Ev("history.end");
  HistoryState hs;
  hs.active_turn_id = "turn-1";
  hs.active_turn_started = "2026-12-01T07:16:37.003817528Z";
  end.history_state = hs;
  auto step = t.OnEvent(end);
  CHECK_FALSE(step.finished);
  CHECK(step.started);
  CHECK(t.phase() == TurnPhase::running);
  CHECK(t.OnEvent(Text("assistant.message", 9001, "still here")).deliver);
  t.OnEvent(Completed(9002, "completed"));
  CHECK(OutcomeOf(t).text == "still here");
}

TEST_CASE("turn: a reset of the same journal follows our turn when the replay shows it", "[turn]") {
  auto t = Submitted(2);
  t.OnEvent(Echo(3));
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(9000, "j1", true));
  CHECK(t.OnEvent(TurnEv("turn.started", 4000)).started);
  CHECK_FALSE(t.OnEvent(Ev("history.end")).finished);
  CHECK(t.OnEvent(Completed(9001, "completed")).finished);
  CHECK(OutcomeOf(t).status == TurnStatus::completed);
}

TEST_CASE("turn: a reset of the same journal without our turn ends interrupted", "[turn]") {
  auto t = Submitted(2);
  t.OnEvent(Echo(3));
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(9000, "j1", true));
  CHECK(t.OnEvent(Ev("history.end")).finished);
  auto out = OutcomeOf(t);
  CHECK(out.status == TurnStatus::interrupted);
  CHECK(out.error_message.find("retained") != std::string::npos);
}

TEST_CASE("turn: a restart with the same journal replays recovery and explains the interruption", "[turn]") {
  auto t = Submitted(2);
  t.OnEvent(Echo(3));
  t.OnEvent(TurnEv("turn.started", 4));
  t.OnDisconnected();
  t.OnConnected();
  t.OnEvent(HistoryStart(6, "j1"));
  t.OnEvent(Ev("runtime.recovered", 5));
  CHECK(t.OnEvent(Completed(6, "interrupted")).finished);
  auto out = OutcomeOf(t);
  CHECK(out.status == TurnStatus::interrupted);
  CHECK(out.error_message.find("restarted") != std::string::npos);
}

TEST_CASE("turn: a reply above kMaxReplyBytes fails with too_large and withdraws the turn", "[turn]") {
  auto t = Submitted();
  t.OnEvent(Echo(1));
  t.OnEvent(TurnEv("turn.started", 2));
  std::string chunk(4u << 20, 'x');
  std::int64_t id = 3;
  TurnStep step;
  for (int i = 0; i < 5 && !step.finished; ++i) step = t.OnEvent(Text("assistant.delta", id++, chunk));
  REQUIRE(step.finished);
  REQUIRE(step.requests.size() == 1);
  CHECK(step.requests[0].type == "interrupt");
  auto out = t.Outcome();
  REQUIRE_FALSE(out.has_value());
  CHECK(out.error().code == Errc::too_large);
  CHECK(out.error().message.find("16 MiB") != std::string::npos);
}

TEST_CASE("turn: events after the end are ignored and Outcome before the end is an error", "[turn]") {
  auto t = Submitted();
  CHECK_FALSE(t.Outcome().has_value());
  t.OnEvent(Echo(1));
  t.OnEvent(Completed(2, "completed"));
  CHECK_FALSE(t.OnEvent(Text("assistant.message", 3, "late")).deliver);
  CHECK(OutcomeOf(t).text.empty());
}

TEST_CASE("turn: pipelined, the message follows the subscribe on the first connection and is not sent twice",
          "[turn][pipeline]") {
  TurnTracker t("hello", TurnTrackerOptions{QuestionPolicy::decline, kRid, std::nullopt});
  ClientRequest sub = t.OnConnected();
  CHECK(sub.history_items == 1);
  auto message = t.PipelinedMessage();
  REQUIRE(message.has_value());
  CHECK(message->type == "message");
  CHECK(message->request_id == kRid);
  CHECK(message->text == "hello");
  CHECK(t.phase() == TurnPhase::submitted);
  CHECK_FALSE(t.PipelinedMessage().has_value());  // once
  t.OnEvent(HistoryStart(7));
  CHECK(t.OnEvent(Ev("history.end")).requests.empty());  // already written on this connection
  auto step = t.OnEvent(Echo(8));
  CHECK(step.accepted);
  t.OnEvent(TurnEv("turn.started", 9));
  t.OnEvent(Text("assistant.message", 10, "hi"));
  t.OnEvent(Completed(11, "completed"));
  CHECK(OutcomeOf(t).text == "hi");
}

TEST_CASE("turn: pipelining never applies to a resume, an attach or an abandoned turn", "[turn][pipeline]") {
  SECTION("a reconnect after history.start resumes and sends after history.end") {
    TurnTracker t("hello", TurnTrackerOptions{QuestionPolicy::decline, kRid, std::nullopt});
    t.OnConnected();
    REQUIRE(t.PipelinedMessage());
    t.OnEvent(HistoryStart(7));
    t.OnDisconnected();
    ClientRequest sub = t.OnConnected();
    CHECK(sub.since == 7);
    CHECK(sub.journal_id == "j1");
    CHECK_FALSE(t.PipelinedMessage().has_value());
    t.OnEvent(HistoryStart(7));
    auto step = t.OnEvent(Ev("history.end"));  // no echo in the replay: written again, same request id
    REQUIRE(step.requests.size() == 1);
    CHECK(step.requests[0].request_id == kRid);
  }
  SECTION("an attach") {
    TurnTracker t("", TurnTrackerOptions{QuestionPolicy::decline, {}, TurnRef{kRid, "", 3, "j1", 1}});
    t.OnConnected();
    CHECK_FALSE(t.PipelinedMessage().has_value());
  }
  SECTION("before OnConnected") {
    TurnTracker t("hello", TurnTrackerOptions{QuestionPolicy::decline, kRid, std::nullopt});
    CHECK_FALSE(t.PipelinedMessage().has_value());
  }
}

TEST_CASE("turn: a pipelined message whose connection dropped before history.start is looked for in a full replay",
          "[turn][pipeline]") {
  TurnTracker t("hello", TurnTrackerOptions{QuestionPolicy::decline, kRid, std::nullopt});
  t.OnConnected();
  REQUIRE(t.PipelinedMessage());
  t.OnDisconnected();  // nothing arrived: the runtime may or may not have accepted it
  ClientRequest sub = t.OnConnected();
  CHECK(sub.type == "subscribe");
  CHECK(sub.since == 0);
  CHECK(sub.history_items == 0);  // raw: a condensed page carries no request ids
  CHECK(sub.history_bytes == 0);
  CHECK_FALSE(t.PipelinedMessage().has_value());

  SECTION("accepted before the drop: found in the replay, not sent again") {
    t.OnEvent(HistoryStart(9));
    t.OnEvent(Echo(4, "someone-else", "turn-1"));
    auto echo = t.OnEvent(Echo(9, kRid, "turn-2"));
    CHECK(echo.accepted);
    CHECK(echo.deliver);  // never delivered before the drop
    CHECK(t.OnEvent(Ev("history.end")).requests.empty());
    CHECK(t.turn_id() == "turn-2");
  }
  SECTION("never accepted: sent after the replay") {
    t.OnEvent(HistoryStart(9));
    t.OnEvent(Echo(4, "someone-else", "turn-1"));
    auto step = t.OnEvent(Ev("history.end"));
    REQUIRE(step.requests.size() == 1);
    CHECK(step.requests[0].type == "message");
    CHECK(step.requests[0].request_id == kRid);
  }
}
