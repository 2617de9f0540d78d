// LocalRuntime's lines against the real runtime's, byte for byte where practical: rejection texts
// and fields, question/interrupt/recovery shapes, timestamps, runtime.status, `!` turns, the Go
// encoder's key order and escapes, and how requests are decoded (unknown types, bad lines, resets).
#include <filesystem>
#include <regex>

#include <catch2/catch.hpp>

#include "event_encode.hpp"
#include "integration/runtime_support.hpp"
#include "runtime/journal.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using namespace sessionturn::test;
using sessionturn::testing::LocalRuntime;
using sessionturn::testing::LocalRuntimeOptions;
namespace reject_reason = sessionturn::testing::reject_reason;

namespace {

struct Rt {
  TempDir dir;
  std::unique_ptr<LocalRuntime> rt;

  explicit Rt(LocalRuntimeOptions o = {}) {
    o.socket_path = dir / "rt.sock";
    if (o.provider.rfind("script-body:", 0) == 0) {
      WriteFile(dir / "script.json", o.provider.substr(12));
      o.provider = "script:" + (dir / "script.json");
    }
    if (!o.log_sink) o.log_sink = [](LogLevel, std::string_view) {};
    o.echo_delay = std::chrono::milliseconds(1);
    auto r = LocalRuntime::Start(o);
    if (!r) FAIL("LocalRuntime::Start: " << r.error().ToString());
    rt = std::move(*r);
  }
  TestClient Client() {
    TestClient c(rt->socket_path());
    REQUIRE(c.connected());
    return c;
  }
  TestClient Subscribed() {
    TestClient c = Client();
    REQUIRE(c.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
    REQUIRE(c.WaitType(event_type::kHistoryEnd));
    return c;
  }
};

LocalRuntimeOptions Provider(std::string p, bool shell = false) {
  LocalRuntimeOptions o;
  o.provider = std::move(p);
  o.allow_shell = shell;
  return o;
}

Event Expect(Result<Event> e) {
  if (!e) FAIL("expected an event: " << e.error().ToString());
  return *e;
}

std::vector<Event> OfType(const std::vector<Event>& evs, std::string_view type) {
  std::vector<Event> out;
  for (const auto& e : evs)
    if (e.type == type) out.push_back(e);
  return out;
}

// A JSON string as the runtime writes it (for building expected lines; the escapes themselves are
// checked byte for byte in the encoding test below).
std::string J(const std::string& s) {
  std::string out;
  sessionturn::detail::AppendGoJsonString(out, s);
  return out;
}

// The prefix every journaled line starts with: its id, type and timestamp, as decoded from it.
std::string Head(const Event& e) {
  return "{\"id\":" + std::to_string(e.id) + ",\"type\":" + J(e.type) + ",\"timestamp\":" + J(e.timestamp);
}

const std::regex kTimestamp(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{0,8}[1-9])?Z)");

// Sends a request and checks the rejection it gets back, byte for byte.
void ExpectRejected(TestClient& c, const ClientRequest& r, const std::string& text, bool with_turn = false) {
  REQUIRE(c.Send(r));
  auto e = Expect(c.WaitFor(ForRequest(r.request_id)));
  std::string want = "{\"type\":\"error\",\"requestId\":" + J(r.request_id);
  if (with_turn) want += ",\"turnId\":" + J(r.turn_id);
  want += ",\"text\":" + J(text) + ",\"status\":\"rejected\"}";
  CHECK(e.line == want);
}

ClientRequest Typed(std::string type, std::string id) {
  ClientRequest r;
  r.type = std::move(type);
  r.request_id = std::move(id);
  return r;
}

}  // namespace

TEST_CASE("wire: rejection texts and fields are the real runtime's", "[runtime][wire]") {
  Rt r(Provider("echo"));
  TestClient c = r.Subscribed();

  ExpectRejected(c, ClientRequest::Message("e0", " \t\n"), "message must not be empty");
  ExpectRejected(c, Typed("T", "u1"), "unsupported client request type \"T\"");
  ExpectRejected(c, Typed("", "u2"), "unsupported client request type \"\"");
  ExpectRejected(c, ClientRequest::Message("s0", "  !  "), "shell command must not be empty");
  ExpectRejected(c, ClientRequest::Message("g0", "/goal ship it"), "/goal is available only in Codex Sessions");
  ExpectRejected(c, ClientRequest::Message("g1", "/goal edit"),
                 "usage: /goal [<objective>|clear|edit <objective>|pause|resume]");
  ClientRequest with_file = ClientRequest::Message("a0", "look at this");
  with_file.attachment_ids = {"att-1"};
  ExpectRejected(c, with_file, "Session attachment storage is unavailable");
  ClientRequest cmd_file = ClientRequest::Message("a1", "!ls");
  cmd_file.attachment_ids = {"att-1"};
  ExpectRejected(c, cmd_file, "Session commands do not accept attachments");
  ExpectRejected(c, ClientRequest::Interrupt("i0"), "Session has no active turn");
  ExpectRejected(c, ClientRequest::Answer("n0", "ID", {{"q", {"x"}}}), "input request \"ID\" is not pending");
  ClientRequest history = Typed("history", "h0");
  ExpectRejected(c, history, "invalid Session history cursor");

  // turn-1 runs and completes; turn-2 waits (paused) for edits and removes.
  REQUIRE(c.Send(ClientRequest::Message("m1", "one")));
  Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1")));
  r.rt->PauseProvider(true);
  REQUIRE(c.Send(ClientRequest::Message("m2", "two")));
  CHECK(Expect(c.WaitFor(ForRequest("m2"))).revision == 1);
  ExpectRejected(c, ClientRequest::Remove("x1", "turn-2", 2), "removing Session turn \"turn-2\": revision is 1, not 2",
                 true);
  ExpectRejected(c, ClientRequest::Remove("x0", "turn-2", 0),
                 "removing Session turn \"turn-2\": expectedRevision must be positive", true);
  ExpectRejected(c, ClientRequest::Edit("e1", "turn-2", "x", 0),
                 "editing Session turn \"turn-2\": expectedRevision must be positive", true);
  REQUIRE(c.Send(ClientRequest::Message("m3", "three")));  // merged: revision 2
  CHECK(Expect(c.WaitFor(ForRequest("m3"))).revision == 2);
  ExpectRejected(c, ClientRequest::Edit("e2", "turn-2", "x", 1), "editing Session turn \"turn-2\": revision is 2, not 1",
                 true);
  ExpectRejected(c, ClientRequest::Edit("e3", "turn-2", "  ", 2), "editing Session turn \"turn-2\": message must not be empty",
                 true);
  ExpectRejected(c, ClientRequest::Edit("e4", "turn-2", "!", 2), "shell command must not be empty", true);
  ExpectRejected(c, ClientRequest::Edit("e9", "turn-9", "x", 1), "Session turn \"turn-9\" is no longer pending", true);
  ExpectRejected(c, ClientRequest::Remove("x9", "turn-9", 1), "Session turn \"turn-9\" is no longer pending", true);
  ExpectRejected(c, ClientRequest::Remove("xq", "tu\"rn\x01", 1), "Session turn \"tu\\\"rn\\x01\" is no longer pending",
                 true);  // %q, as Go quotes
  ExpectRejected(c, ClientRequest::Message("c1", "!ls"), "Session already has a pending command or message");
  r.rt->SetDraining(true);
  ExpectRejected(c, ClientRequest::Message("d1", "later"),
                 "Session runtime is draining for an update; retry after it reconnects");
  // Edits are not held back by a drain.
  REQUIRE(c.Send(ClientRequest::Edit("e5", "turn-2", "better", 2)));
  CHECK(Expect(c.WaitFor(ForRequest("e5"))).type == event_type::kUserMessageUpdated);
  r.rt->SetDraining(false);
  CHECK(reject_reason::kProviderRestarting == "Session provider is restarting; retry after it reconnects");

  // Nothing of this was journaled.
  for (const auto& e : r.rt->JournalEvents()) CHECK(e.type != event_type::kError);
}

TEST_CASE("wire: questions, answers and cancellations have the runtime's shape", "[runtime][wire]") {
  const char* script = R"({"turns":[
      [ {"type":"question","inputId":"claude-request-1","questions":[{"question":"A?"},
          {"question":"B?","options":[{"label":"yes"}]}]},
        {"type":"message","text":"after"} ],
      [ {"type":"question","questions":[{"question":"C?"}]} ]
    ]})";
  Rt r(Provider(std::string("script-body:") + script));
  TestClient c = r.Subscribed();
  REQUIRE(c.Send(ClientRequest::Message("m", "ask")));
  auto req = Expect(c.WaitType(event_type::kInputRequested));
  // The provider chose the input id; question ids are question-N.
  CHECK(req.line == Head(req) +
                        ",\"turnId\":\"turn-1\",\"status\":\"pending\",\"inputId\":\"claude-request-1\",\"questions\":["
                        "{\"id\":\"question-1\",\"question\":\"A?\"},"
                        "{\"id\":\"question-2\",\"question\":\"B?\",\"options\":[{\"label\":\"yes\"}]}]}");

  ExpectRejected(c, ClientRequest::Answer("v1", "claude-request-1", {{"nope", {"x"}}}), "input question \"nope\" is not pending");
  ExpectRejected(c, ClientRequest::Answer("v2", "claude-request-1", {}), "input response must contain at least one answer");
  ExpectRejected(c, ClientRequest::Answer("v3", "claude-request-1", {{"question-1", {}}}),
                 "input question \"question-1\" must contain an answer");

  REQUIRE(c.Send(ClientRequest::Answer("p1", "claude-request-1", {{"question-1", {"a"}}})));
  auto acc = Expect(c.WaitFor(ForRequest("p1")));
  CHECK(acc.line == Head(acc) + ",\"requestId\":\"p1\",\"status\":\"accepted\",\"inputId\":\"claude-request-1\"}");
  REQUIRE(c.Send(ClientRequest::Answer("p2", "claude-request-1", {{"question-2", {"yes"}}})));
  auto res = Expect(c.WaitFor(ForRequest("p2")));
  CHECK(res.line == Head(res) + ",\"requestId\":\"p2\",\"status\":\"answered\",\"inputId\":\"claude-request-1\"}");
  CHECK(Expect(c.WaitType(event_type::kAssistantMessage)).text == "Answers: question-1=a question-2=yes");
  Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1")));

  // Without an id from the provider the runtime picks input-N; a decline resolves it cancelled.
  REQUIRE(c.Send(ClientRequest::Message("m2", "ask again")));
  auto req2 = Expect(c.WaitType(event_type::kInputRequested));
  CHECK(req2.input_id == "input-1");
  REQUIRE(c.Send(ClientRequest::Decline("d1", "input-1")));
  auto dec = Expect(c.WaitFor(ForRequest("d1")));
  CHECK(dec.line == Head(dec) + ",\"requestId\":\"d1\",\"status\":\"cancelled\",\"inputId\":\"input-1\"}");
  Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-2")));

  // Interrupted while asking: turn.interrupting, the question cancelled (no request, no turn), the turn.
  REQUIRE(c.Send(ClientRequest::Message("m3", "ask once more")));
  CHECK(Expect(c.WaitType(event_type::kInputRequested)).input_id == "input-2");
  REQUIRE(c.Send(ClientRequest::Interrupt("i1")));
  std::vector<Event> seen;
  Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-3"), kTestDeadline, &seen));
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].line == Head(seen[0]) + ",\"requestId\":\"i1\",\"turnId\":\"turn-3\",\"status\":\"interrupting\"}");
  CHECK(seen[1].line == Head(seen[1]) + ",\"status\":\"cancelled\",\"inputId\":\"input-2\"}");
  CHECK(seen[2].line == Head(seen[2]) + ",\"turnId\":\"turn-3\",\"status\":\"interrupted\"}");
}

TEST_CASE("wire: runtime.recovered says whether unfinished work was interrupted", "[runtime][wire]") {
  const char* script = R"({"turns":[[{"type":"message","text":"done"}],
                                    [{"type":"question","questions":[{"question":"Q?"}]}]]})";
  Rt r(Provider(std::string("script-body:") + script));
  {
    TestClient c = r.Subscribed();
    REQUIRE(c.Send(ClientRequest::Message("m1", "one")));
    Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1")));
  }
  REQUIRE(r.rt->Restart());
  auto idle = Expect(r.rt->WaitForEvent(IsType(event_type::kRuntimeRecovered), kTestDeadline));
  TestClient c = r.Client();
  REQUIRE(c.Send(ClientRequest::Subscribe(idle.id - 1, r.rt->journal_id(), true, 0, 0)));
  auto replay = c.ReadHistory();
  REQUIRE(replay.size() >= 2);
  CHECK(replay[1].line == Head(replay[1]) + ",\"text\":\"Session runtime restarted\",\"status\":\"recovered\"}");

  REQUIRE(c.Send(ClientRequest::Message("m2", "two")));
  Expect(c.WaitType(event_type::kInputRequested));
  REQUIRE(r.rt->Restart());
  std::vector<Event> after;
  auto rec = Expect(r.rt->WaitForEvent(
      [&](const Event& e) { return e.type == event_type::kRuntimeRecovered && e.id > idle.id; }, kTestDeadline));
  TestClient d = r.Client();
  REQUIRE(d.Send(ClientRequest::Subscribe(rec.id - 1, r.rt->journal_id(), true, 0, 0)));
  auto seen = d.ReadHistory();
  REQUIRE(seen.size() >= 4);
  CHECK(seen[1].line ==
        Head(seen[1]) + ",\"text\":\"Session runtime restarted; unfinished work was interrupted\",\"status\":\"recovered\"}");
  // Recovery names the turn of the question it cancels (a live cancellation does not).
  CHECK(seen[2].line == Head(seen[2]) + ",\"turnId\":\"turn-2\",\"status\":\"cancelled\",\"inputId\":\"input-1\"}");
  CHECK(seen[3].line == Head(seen[3]) + ",\"turnId\":\"turn-2\",\"status\":\"interrupted\"}");
}

TEST_CASE("wire: history.start and history.end on an empty journal", "[runtime][wire]") {
  Rt r(Provider("echo"));
  const std::string jid = r.rt->journal_id();
  {
    TestClient c = r.Client();
    REQUIRE(c.Send(ClientRequest::Subscribe(0, {}, true, 20, 128 * 1024)));
    auto seen = c.ReadHistory();
    REQUIRE(seen.size() == 3);
    CHECK(seen[0].line == "{\"type\":\"history.start\",\"firstEventId\":1,\"journalId\":\"" + jid + "\"}");
    CHECK(seen[1].type == event_type::kRuntimeStatus);
    CHECK(seen[2].line == "{\"type\":\"history.end\",\"historyState\":{}}");
  }
  TestClient c = r.Client();
  REQUIRE(c.Send(ClientRequest::Subscribe(0, {}, true, 0, 0)));
  auto seen = c.ReadHistory();
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].line == "{\"type\":\"history.start\",\"firstEventId\":1,\"journalId\":\"" + jid + "\"}");
  CHECK(seen[2].line == "{\"type\":\"history.end\"}");
}

TEST_CASE("wire: timestamps only on journaled events, RFC 3339 with nanoseconds trimmed", "[runtime][wire]") {
  using sessionturn::runtime::FormatTimestamp;
  const std::int64_t noon = 1786190400LL * 1000000000LL;  // 2026-08-08T12:00:00Z
  CHECK(FormatTimestamp(noon) == "2026-08-08T12:00:00Z");
  CHECK(FormatTimestamp(noon + 123400000) == "2026-08-08T12:00:00.1234Z");
  CHECK(FormatTimestamp(noon + 1) == "2026-08-08T12:00:00.000000001Z");
  CHECK(FormatTimestamp(noon + 999999999) == "2026-08-08T12:00:00.999999999Z");

  TempDir state;
  LocalRuntimeOptions o = Provider("echo");
  o.state_dir = state.path();
  Rt r(o);
  TestClient c = r.Client();
  REQUIRE(c.Send(ClientRequest::Subscribe(0, {}, true, 0, 0)));
  std::vector<Event> seen = c.ReadHistory();
  REQUIRE(c.Send(ClientRequest::Message("m", "hello")));
  Expect(c.WaitType(event_type::kTurnCompleted, kTestDeadline, &seen));
  ExpectRejected(c, ClientRequest::Interrupt("i"), "Session has no active turn");
  std::size_t journaled = 0;
  for (const auto& e : seen) {
    INFO(e.line);
    if (e.id > 0) {
      ++journaled;
      CHECK(std::regex_match(e.timestamp, kTimestamp));
      CHECK(e.line.find(",\"timestamp\":") != std::string::npos);
    } else {
      CHECK(e.line.find("timestamp") == std::string::npos);  // history.*, runtime.status
    }
  }
  CHECK(journaled >= 4);
  // A stamp is kept as written: the journal on disk and a reload give the same text.
  const auto before = r.rt->JournalEvents();
  REQUIRE(r.rt->Restart());
  const auto after = r.rt->JournalEvents();
  REQUIRE(after.size() > before.size());
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(after[i].timestamp == before[i].timestamp);
}

TEST_CASE("wire: an unknown or missing type is rejected without subscribing", "[runtime][wire]") {
  Rt r(Provider("echo"));
  TestClient quiet = r.Client();
  ExpectRejected(quiet, Typed("status", "u1"), "unsupported client request type \"status\"");
  REQUIRE(quiet.SendLine("{\"requestId\":\"u2\"}"));
  CHECK(Expect(quiet.Next()).line ==
        "{\"type\":\"error\",\"requestId\":\"u2\",\"text\":\"unsupported client request type \\\"\\\"\",\"status\":\"rejected\"}");
  // Another client's turn: a subscribed connection would now have its events queued before the
  // next answer; this one's next line is the answer itself.
  TestClient other = r.Subscribed();
  REQUIRE(other.Send(ClientRequest::Message("m", "hello")));
  Expect(other.WaitType(event_type::kTurnCompleted));
  ExpectRejected(quiet, Typed("bogus", "u3"), "unsupported client request type \"bogus\"");
  CHECK(r.rt->ConnectionCount() == 2);
}

TEST_CASE("wire: a line that does not decode closes the connection, and blank lines are skipped", "[runtime][wire]") {
  Rt r(Provider("echo"));
  auto closes = [&](const std::string& line) {
    TestClient c = r.Client();
    REQUIRE(c.SendLine(line));
    auto e = c.Next();
    INFO("sent " << line);
    REQUIRE_FALSE(e);
    CHECK(e.error().code == Errc::connection_lost);
  };
  closes("not json");
  closes("{\"type\":\"message\",\"requestId\":\"m\",\"text\":42}");
  closes("{\"type\":\"subscribe\",\"since\":\"5\"}");
  closes("{\"type\":\"subscribe\",\"since\":1.5}");
  closes("{\"type\":\"input\",\"inputId\":\"x\",\"cancel\":\"true\"}");
  closes("{\"type\":\"input\",\"inputId\":\"x\",\"answers\":[]}");
  closes("[{\"type\":\"subscribe\"}]");
  closes("\"subscribe\"");
  closes("{\"type\":\"subscribe\"");  // never finished on its line
  CHECK(r.rt->JournalEvents().empty());

  // A request before the bad value on its line was served, then the connection closed (what was
  // still queued for it may be lost, as with the real runtime).
  {
    TestClient c = r.Client();
    REQUIRE(c.SendLine("{\"type\":\"message\",\"requestId\":\"served\",\"text\":\"first\"} trailing"));
    CHECK(c.WaitClosed());
    CHECK(r.rt->WaitForEvent([](const Event& e) { return e.request_id == "served"; }, kTestDeadline));
    CHECK(r.rt->WaitForEvent(IsTypeOf(event_type::kTurnCompleted, "turn-1"), kTestDeadline));
  }
  // Blank lines are skipped; two values on one line are two requests; keys match case-insensitively;
  // `null` is an empty request.
  TestClient c = r.Client();
  REQUIRE(c.SendLine(""));
  REQUIRE(c.SendLine("   \t "));
  REQUIRE(c.SendLine("{\"TYPE\":\"subscribe\"}{\"type\":\"message\",\"RequestId\":\"two\",\"text\":\"hi\",\"extra\":[1]}"));
  CHECK(c.WaitType(event_type::kHistoryEnd));
  CHECK(Expect(c.WaitFor(ForRequest("two"))).type == event_type::kUserMessage);
  REQUIRE(c.SendLine("null"));
  auto e = Expect(c.WaitFor(IsType(event_type::kError)));
  CHECK(e.text == "unsupported client request type \"\"");
  CHECK(Expect(c.WaitType(event_type::kTurnCompleted)).status == "completed");
}

TEST_CASE("wire: without historyBounds a subscribe replays from since, never resets", "[runtime][wire]") {
  Rt r(Provider("echo"));
  {
    TestClient a = r.Subscribed();
    REQUIRE(a.Send(ClientRequest::Message("m", "x")));
    Expect(a.WaitType(event_type::kTurnCompleted));
  }
  const std::int64_t last = r.rt->last_event_id();
  REQUIRE(last > 4);
  TestClient b = r.Client();
  REQUIRE(b.Send(ClientRequest::Subscribe(3, "", false, 0, 0)));  // since > 0, no journal id: no reset
  auto seen = b.ReadHistory();
  REQUIRE(seen.size() == static_cast<std::size_t>(last - 3) + 2);
  CHECK(seen[0].id == 4);
  CHECK(seen.front().type != event_type::kHistoryStart);
  TestClient d = r.Client();
  REQUIRE(d.Send(ClientRequest::Subscribe(last + 100, "another", false, 0, 0)));  // beyond: nothing
  auto none = d.ReadHistory();
  REQUIRE(none.size() == 2);
  CHECK(none[0].type == event_type::kRuntimeStatus);
}

TEST_CASE("wire: ! turns run as the runtime's shell tool", "[runtime][wire]") {
  Rt r(Provider("echo", true));
  TestClient c = r.Subscribed();
  SECTION("stderr merged, a failed command fails the tool and completes the turn") {
    REQUIRE(c.Send(ClientRequest::Message("s1", "  ! echo out; echo err >&2; exit 3 ")));
    std::vector<Event> seen;
    auto done = Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1"), kTestDeadline, &seen));
    CHECK(done.status == "completed");
    auto um = OfType(seen, event_type::kUserMessage).at(0);
    CHECK(um.line == Head(um) + ",\"requestId\":\"s1\",\"turnId\":\"turn-1\",\"text\":\"  ! echo out; echo err \\u003e\\u00262; "
                                "exit 3 \",\"revision\":1,\"sessionCommand\":true}");
    auto started = OfType(seen, event_type::kToolStarted).at(0);
    CHECK(started.line == Head(started) + ",\"turnId\":\"turn-1\",\"toolId\":\"turn-1-shell\",\"toolName\":\"echo out; "
                                          "echo err \\u003e\\u00262; exit 3\",\"status\":\"running\"}");
    std::string streamed;
    for (const auto& d : OfType(seen, event_type::kToolDelta)) {
      CHECK(d.tool_name == "echo out; echo err >&2; exit 3");
      CHECK(d.status == "running");
      streamed += d.output;
    }
    CHECK(streamed == "out\nerr\n");
    auto tool = OfType(seen, event_type::kToolCompleted).at(0);
    CHECK(tool.line == Head(tool) + ",\"turnId\":\"turn-1\",\"toolId\":\"turn-1-shell\",\"toolName\":\"echo out; echo err "
                                    "\\u003e\\u00262; exit 3\",\"output\":\"out\\nerr\\n\",\"status\":\"failed\"}");
    CHECK(OfType(seen, event_type::kAssistantMessage).empty());
  }
  SECTION("a silent failure reports the exit; invalid UTF-8 in output becomes \\ufffd") {
    REQUIRE(c.Send(ClientRequest::Message("s2", "!exit 4")));
    std::vector<Event> seen;
    Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1"), kTestDeadline, &seen));
    auto tool = OfType(seen, event_type::kToolCompleted).at(0);
    CHECK(tool.output == "exit status 4");
    CHECK(tool.status == "failed");
    REQUIRE(c.Send(ClientRequest::Message("s3", "!printf 'a\\377b'")));
    seen.clear();
    CHECK(Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-2"), kTestDeadline, &seen)).status ==
          "completed");
    auto done = OfType(seen, event_type::kToolCompleted).at(0);
    CHECK(done.line.find("\"output\":\"a\\ufffdb\"") != std::string::npos);
  }
  SECTION("an interrupt kills it: the tool and the turn end interrupted") {
    REQUIRE(c.Send(ClientRequest::Message("s4", "!sleep 30")));
    Expect(c.WaitType(event_type::kToolStarted));
    REQUIRE(c.Send(ClientRequest::Interrupt("i")));
    std::vector<Event> seen;
    auto done = Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1"), kTestDeadline, &seen));
    CHECK(done.status == "interrupted");
    CHECK(OfType(seen, event_type::kTurnInterrupting).size() == 1);
    CHECK(OfType(seen, event_type::kToolCompleted).at(0).status == "interrupted");
  }
}

TEST_CASE("wire: runtime.status carries the Session, agent, model, directories and usage", "[runtime][wire]") {
  const char* script = R"({"turns":[[
      {"type":"usage","usage":{"inputTokens":10,"outputTokens":5,"totalTokens":15,"contextTokens":15,
                               "contextWindow":200000}},
      {"type":"message","text":"ok"}]]})";
  LocalRuntimeOptions o = Provider(std::string("script-body:") + script);
  o.session_name = "st-<test>";
  Rt r(o);
  const std::string cwd = std::filesystem::current_path().string();
  const char* home = std::getenv("HOME");
  const std::string common = "{\"type\":\"runtime.status\",\"runtime\":{\"sessionName\":\"st-\\u003ctest\\u003e\","
                             "\"agentType\":\"sessionturn-local-script\",\"model\":\"script\",\"workingDir\":" +
                             J(cwd) + (home && *home ? ",\"homeDir\":" + J(home) : std::string()) + ",\"usage\":";
  TestClient c = r.Client();
  REQUIRE(c.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
  auto hist = c.ReadHistory();
  REQUIRE(hist.size() == 2);
  CHECK(hist[0].line == common + "{\"inputTokens\":0,\"outputTokens\":0,\"totalTokens\":0}}}");

  // Re-sent, unjournaled, as each turn starts and when the usage changes.
  for (int turn = 1; turn <= 2; ++turn) {
    REQUIRE(c.Send(ClientRequest::Message("m" + std::to_string(turn), "go")));
    std::vector<Event> seen;
    Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-" + std::to_string(turn)), kTestDeadline, &seen));
    REQUIRE(seen.size() >= 3);
    CHECK(seen[1].type == event_type::kTurnStarted);
    CHECK(seen[2].type == event_type::kRuntimeStatus);
    auto statuses = OfType(seen, event_type::kRuntimeStatus);
    REQUIRE(statuses.size() == 2);
    CHECK(statuses[1].line == common +
                                  "{\"inputTokens\":10,\"outputTokens\":5,\"totalTokens\":15,\"contextTokens\":15,"
                                  "\"contextWindow\":200000}}}");
  }
  for (const auto& e : r.rt->JournalEvents()) CHECK(e.type != event_type::kRuntimeStatus);
}

TEST_CASE("wire: events are encoded as Go encodes them (key order, omitempty, escapes)", "[runtime][wire]") {
  Event e;
  e.id = 7;
  e.type = "input.requested";
  e.timestamp = "2026-08-08T12:00:00.5Z";
  e.request_id = "r";
  e.turn_id = "turn-1";
  e.text = "<a&b>\xE2\x80\xA8\xE2\x80\xA9\x01\x7F\b\f\t\"\\ \xC3\xA9 \xFF\xC0\xAF\xED\xA0\x80";
  e.revision = 2;
  e.session_command = true;
  e.tool_id = "t";
  e.tool_name = "n";
  e.output = "o";
  e.status = "pending";
  e.input_id = "i";
  e.questions.push_back(InputQuestion{"", "", "", {InputOption{"", ""}}, false, false});
  e.questions.push_back(InputQuestion{"q", "h", "?", {InputOption{"l", "d"}}, true, true});
  e.diff = "d";
  e.first_event_id = 1;
  e.last_event_id = 9;
  e.journal_id = "j";
  e.reset = true;
  e.history_limited = true;
  e.history_page = true;
  e.history_cursor = "c";
  HistoryState hs;
  hs.active_turn_id = "turn-1";
  hs.active_turn_started = "2026-08-08T12:00:00Z";
  hs.turn_interrupting = true;
  hs.waiting_for_input = true;
  hs.pending_turn = PendingTurn{"", "", 0};  // Go always writes its three fields
  hs.file_diff = "f";
  e.history_state = hs;
  RuntimeStatus rs;
  rs.session_name = "s";
  rs.agent_type = "a";
  rs.model = "m";
  rs.working_dir = "/w";
  rs.home_dir = "/h";
  rs.branch = "b";
  rs.usage = Usage{0, 0, 0, 0, 0};
  rs.extra = Json{{"zzz", 1}, {"weeklyLimit", Json{{"usedPercent", 3}}}, {"effort", "high"}, {"pullRequestNumber", 12}};
  e.runtime = rs;
  e.goal = Json{{"status", "active"}, {"objective", "ship"}, {"tokenBudget", 0}};
  e.attachments = Json::array({Json{{"id", "a1"}, {"sizeBytes", 5}}});
  const std::string want =
      R"({"id":7,"type":"input.requested","timestamp":"2026-08-08T12:00:00.5Z","requestId":"r","turnId":"turn-1",)"
      R"("text":"\u003ca\u0026b\u003e\u2028\u2029\u0001)"
      "\x7F"
      R"(\b\f\t\"\\ )"
      "\xC3\xA9"
      R"( \ufffd\ufffd\ufffd\ufffd\ufffd\ufffd","revision":2,"sessionCommand":true,"toolId":"t","toolName":"n",)"
      R"("output":"o","status":"pending","inputId":"i","questions":[{"id":"","question":"","options":[{"label":""}]},)"
      R"({"id":"q","header":"h","question":"?","options":[{"label":"l","description":"d"}],"multiSelect":true,)"
      R"("secret":true}],"diff":"d","firstEventId":1,"lastEventId":9,"journalId":"j","reset":true,)"
      R"("historyLimited":true,"historyPage":true,"historyCursor":"c","historyState":{"activeTurnId":"turn-1",)"
      R"("activeTurnStarted":"2026-08-08T12:00:00Z","turnInterrupting":true,"waitingForInput":true,)"
      R"("pendingTurn":{"turnId":"","text":"","revision":0},"fileDiff":"f"},"runtime":{"sessionName":"s",)"
      R"("agentType":"a","model":"m","effort":"high","workingDir":"/w","homeDir":"/h","branch":"b",)"
      R"("pullRequestNumber":12,"usage":{"inputTokens":0,"outputTokens":0,"totalTokens":0},)"
      R"("weeklyLimit":{"usedPercent":3},"zzz":1},"goal":{"objective":"ship","status":"active","tokenBudget":0},)"
      R"("attachments":[{"id":"a1","name":"","mediaType":"","sizeBytes":5}]})";
  CHECK(EncodeEvent(e) == want);
  // Only `type` is written for an otherwise empty event (Go has no omitempty on it).
  CHECK(EncodeEvent(Event{}) == R"({"type":""})");

  // Over the socket, a journaled line as the runtime writes it.
  Rt r(Provider("echo"));
  TestClient c = r.Subscribed();
  REQUIRE(c.Send(ClientRequest::Message("enc", "<b>&\"x\" \xE2\x80\xA8")));
  auto um = Expect(c.WaitFor(ForRequest("enc")));
  CHECK(um.line == Head(um) + R"(,"requestId":"enc","turnId":"turn-1","text":"\u003cb\u003e\u0026\"x\" \u2028","revision":1})");
  auto started = Expect(c.WaitType(event_type::kTurnStarted));
  CHECK(started.line == Head(started) + R"(,"turnId":"turn-1","status":"running"})");
}
