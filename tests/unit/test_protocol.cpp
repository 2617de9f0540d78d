#include <catch2/catch.hpp>

#include <set>

#include <random>

#include "sessionturn/protocol.hpp"

using namespace sessionturn;

TEST_CASE("DecodeEvent reads every scalar field", "[protocol]") {
  auto ev = DecodeEvent(
      R"({"id":7,"type":"user.message.updated","timestamp":"2026-01-01T00:00:00Z","requestId":"r1","turnId":"turn-2",)"
      R"("text":"a\n\nb","revision":3,"status":"running","sessionCommand":true,"toolId":"t1","toolName":"bash",)"
      R"("output":"out","inputId":"in-1","firstEventId":1,"lastEventId":9,"journalId":"j","reset":true,)"
      R"("historyLimited":true,"historyPage":true,"historyCursor":"c1","goal":{"text":"g"},"attachments":[{"id":"a"}],)"
      R"("diff":{"path":"x"}})");
  REQUIRE(ev);
  CHECK(ev->id == 7);
  CHECK(ev->type == "user.message.updated");
  CHECK(ev->timestamp == "2026-01-01T00:00:00Z");
  CHECK(ev->request_id == "r1");
  CHECK(ev->turn_id == "turn-2");
  CHECK(ev->text == "a\n\nb");
  CHECK(ev->revision == 3);
  CHECK(ev->status == "running");
  CHECK(ev->session_command);
  CHECK(ev->tool_id == "t1");
  CHECK(ev->tool_name == "bash");
  CHECK(ev->output == "out");
  CHECK(ev->input_id == "in-1");
  CHECK(ev->first_event_id == 1);
  CHECK(ev->last_event_id == 9);
  CHECK(ev->journal_id == "j");
  CHECK(ev->reset);
  CHECK(ev->history_limited);
  CHECK(ev->history_page);
  CHECK(ev->history_cursor == "c1");
  CHECK(ev->goal["text"] == "g");
  CHECK(ev->attachments[0]["id"] == "a");
  CHECK(ev->diff["path"] == "x");
  CHECK(ev->Is(event_type::kUserMessageUpdated));
}

TEST_CASE("DecodeEvent reads questions, historyState and runtime", "[protocol]") {
  auto ev = DecodeEvent(
      R"({"type":"input.requested","turnId":"turn-1","inputId":"i1","questions":[{"id":"q1","header":"H",)"
      R"("question":"Pick?","options":[{"label":"A","description":"first"},{"label":"B"}],"multiSelect":true,"secret":false}]})");
  REQUIRE(ev);
  REQUIRE(ev->questions.size() == 1);
  const auto& q = ev->questions[0];
  CHECK(q.id == "q1");
  CHECK(q.header == "H");
  CHECK(q.question == "Pick?");
  CHECK(q.multi_select);
  CHECK_FALSE(q.secret);
  REQUIRE(q.options.size() == 2);
  CHECK(q.options[0].label == "A");
  CHECK(q.options[0].description == "first");
  CHECK(q.options[1].label == "B");

  auto he = DecodeEvent(
      R"({"type":"history.end","historyState":{"activeTurnId":"turn-3","activeTurnStarted":"2026-12-01T07:16:37.003817528Z","turnInterrupting":false,)"
      R"("waitingForInput":true,"pendingTurn":{"turnId":"turn-4","text":"next","revision":2},"fileDiff":{"f":1}}})");
  REQUIRE(he);
  REQUIRE(he->history_state);
  CHECK(he->history_state->active_turn_id == "turn-3");
  CHECK(he->history_state->active_turn_started == "2026-12-01T07:16:37.003817528Z");
  CHECK(he->history_state->waiting_for_input);
  REQUIRE(he->history_state->pending_turn);
  CHECK(he->history_state->pending_turn->turn_id == "turn-4");
  CHECK(he->history_state->pending_turn->revision == 2);
  CHECK(he->history_state->file_diff["f"] == 1);

  auto rs = DecodeEvent(
      R"({"type":"runtime.status","runtime":{"sessionName":"s","agentType":"claude","model":"m","workingDir":"/w",)"
      R"("branch":"main","usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3,"contextTokens":4,"contextWindow":5},"pid":42}})");
  REQUIRE(rs);
  REQUIRE(rs->runtime);
  CHECK(rs->runtime->session_name == "s");
  CHECK(rs->runtime->agent_type == "claude");
  CHECK(rs->runtime->branch == "main");
  REQUIRE(rs->runtime->usage);
  CHECK(rs->runtime->usage->context_window == 5);
  CHECK(rs->runtime->extra["pid"] == 42);
}

TEST_CASE("DecodeEvent is tolerant of unknown fields and types", "[protocol]") {
  auto ev = DecodeEvent(R"({"type":"future.thing","id":1,"novel":{"deep":[1,{"x":[true,null]}]},"n":1.5,"s":"x"})");
  REQUIRE(ev);
  CHECK(ev->type == "future.thing");
  CHECK(ev->Raw()["novel"]["deep"][1]["x"][0] == true);
  auto nulls = DecodeEvent(R"({"type":"x","id":null,"text":null,"questions":null,"historyState":null})");
  REQUIRE(nulls);
  CHECK(nulls->id == 0);
  CHECK(nulls->text.empty());
  CHECK_FALSE(nulls->history_state);
  auto integral_float = DecodeEvent(R"({"type":"x","id":12.0})");
  REQUIRE(integral_float);
  CHECK(integral_float->id == 12);
}

TEST_CASE("DecodeEvent fails only on lines that are not JSON objects", "[protocol]") {
  auto check = [](std::string_view line, std::string_view want) {
    auto ev = DecodeEvent(line);
    INFO(line);
    REQUIRE_FALSE(ev);
    CHECK(ev.error().code == Errc::protocol_error);
    CHECK_THAT(ev.error().message, Catch::Contains(std::string(want)));
  };
  check("[1,2]", "not a JSON object");
  check("42", "not a JSON object");
  check("\"str\"", "not a JSON object");
  check("hello world", "not a JSON object");
  check(R"({"type":"x")", "invalid JSON");
  check(R"({"type":"x"} trailing)", "invalid JSON");
  check("", "JSON");
}

TEST_CASE("DecodeEventInto refills one Event line after line exactly as DecodeEvent decodes", "[protocol]") {
  const std::vector<std::string> lines = {
      R"({"id":7,"type":"tool.started","turnId":"t1","toolId":"tu_1","toolName":"Bash","text":"ls -la"})",
      R"({"id":8,"type":"input.requested","inputId":"in1","questions":[{"id":"q","question":"Go?","options":[{"label":"yes"}]}]})",
      R"({"type":"history.end","historyState":{"activeTurnId":"t1","pendingTurn":{"turnId":"t2","text":"next","revision":2}}})",
      R"({"type":"runtime.status","runtime":{"sessionName":"s","usage":{"inputTokens":3},"custom":[1,{"a":null}]}})",
      R"({"id":9,"type":"assistant.delta","text":"short"})",
  };
  Event ev;
  for (int round = 0; round < 2; ++round) {
    for (const auto& line : lines) {
      INFO(line);
      REQUIRE(DecodeEventInto(line, ev));
      auto fresh = DecodeEvent(line);
      REQUIRE(fresh);
      CHECK(SameEvent(ev, *fresh));  // nothing of the previous line is left behind
      CHECK(ev.line == line);
      CHECK(ev.Raw() == Json::parse(line));
    }
  }
  // A failed line leaves the Event Reset, and the next line decodes normally.
  REQUIRE_FALSE(DecodeEventInto(R"({"id":1,"type":)", ev));
  CHECK(ev.type.empty());
  CHECK(ev.line.empty());
  REQUIRE(DecodeEventInto(lines[0], ev));
  CHECK(ev.tool_name == "Bash");
  // The line of an Event decoded again into that same Event (its bytes live in ev.line).
  REQUIRE(DecodeEventInto(ev.line, ev));
  CHECK(ev.tool_name == "Bash");
  CHECK(ev.line == lines[0]);
  REQUIRE(DecodeEventInto(std::string_view(ev.line).substr(0, ev.line.size()), ev));
  CHECK(ev.id == 7);
  // Another of its own strings, a huge one (Reset frees it): decoded from a copy, not from freed memory.
  Event other;
  other.output = R"({"id":3,"type":"tool.delta","toolName":"Bash","text":")" + std::string(2u << 20, 'y') + R"("})";
  REQUIRE(DecodeEventInto(other.output, other));
  CHECK(other.tool_name == "Bash");
  CHECK(other.text.size() == (2u << 20));
  CHECK(other.output.empty());
  // A rare huge line does not pin its buffer in the reused Event.
  const std::string huge = R"({"type":"tool.delta","output":")" + std::string(3u << 20, 'x') + R"("})";
  REQUIRE(DecodeEventInto(huge, ev));
  CHECK(ev.output.size() == (3u << 20));
  REQUIRE(DecodeEventInto(lines[4], ev));
  CHECK(ev.text == "short");
  CHECK(ev.line.capacity() < (1u << 20));
  CHECK(ev.output.capacity() < (1u << 20));
}

TEST_CASE("DecodeEvent keeps an event whose field has an unexpected type and names the field", "[protocol]") {
  struct Case {
    std::string line;
    std::string field;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {R"({"type":"a","id":"7"})", "id", "an integer"},
      {R"({"type":"a","id":1.5})", "id", "an integer"},
      {R"({"type":"a","id":18446744073709551615})", "id", "an integer in range"},
      {R"({"type":"a","text":5})", "text", "a string"},
      {R"({"type":"a","reset":"yes"})", "reset", "a boolean"},
      {R"({"type":"a","sessionCommand":"shell"})", "sessionCommand", "a boolean"},
      {R"({"type":"a","historyCursor":{"before":3}})", "historyCursor", "a string"},
      {R"({"type":"a","questions":{}})", "questions", "an array"},
      {R"({"type":"a","questions":[{"id":3}]})", "questions[0].id", "a string"},
      {R"({"type":"a","questions":[{"id":"q","options":[7]}]})", "questions[0].options[0]", "an object"},
      {R"({"type":"a","historyState":{"pendingTurn":{"revision":"x"}}})", "historyState.pendingTurn.revision", "an integer"},
      {R"({"type":"a","historyState":{"activeTurnStarted":true}})", "historyState.activeTurnStarted", "a string"},
      {R"({"type":"a","runtime":[]})", "runtime", "an object"},
      {R"({"type":"a","runtime":{"usage":{"inputTokens":"many"}}})", "runtime.usage.inputTokens", "an integer"},
  };
  for (const auto& c : cases) {
    INFO(c.line);
    std::vector<FieldMismatch> mismatches;
    auto ev = DecodeEvent(c.line, &mismatches);
    REQUIRE(ev);
    CHECK(ev->type == "a");
    CHECK(ev->line == c.line);  // raw bytes intact for Raw()
    REQUIRE(mismatches.size() == 1);
    CHECK(mismatches[0].field == c.field);
    CHECK(mismatches[0].expected == c.expected);
  }
  // The fields that did decode are kept next to the one that did not.
  std::vector<FieldMismatch> mismatches;
  auto ev = DecodeEvent(R"({"id":4,"type":"user.message","turnId":"turn-2","sessionCommand":"shell","text":"!ls"})", &mismatches);
  REQUIRE(ev);
  CHECK(ev->id == 4);
  CHECK(ev->turn_id == "turn-2");
  CHECK(ev->text == "!ls");
  CHECK_FALSE(ev->session_command);
  CHECK(ev->Raw()["sessionCommand"] == "shell");
  // Without a mismatch list the event still decodes.
  CHECK(DecodeEvent(R"({"type":"a","id":"x"})"));
}

TEST_CASE("Real runtime bytes decode: history.end with a started active turn and a pending turn", "[protocol][real]") {
  // kelos-session-runtime @77d9ad8e, a subscribe while turn-1 runs and turn-2 is queued (edited to revision 3).
  const std::string line =
      R"({"type":"history.end","historyState":{"activeTurnId":"turn-1","activeTurnStarted":"2026-12-01T07:16:37.003817528Z",)"
      R"("pendingTurn":{"turnId":"turn-2","text":"edited","revision":3}}})";
  std::vector<FieldMismatch> mismatches;
  auto ev = DecodeEvent(line, &mismatches);
  REQUIRE(ev);
  CHECK(mismatches.empty());
  REQUIRE(ev->history_state);
  CHECK(ev->history_state->active_turn_id == "turn-1");
  CHECK(ev->history_state->active_turn_started == "2026-12-01T07:16:37.003817528Z");
  REQUIRE(ev->history_state->pending_turn);
  CHECK(ev->history_state->pending_turn->turn_id == "turn-2");
  CHECK(ev->history_state->pending_turn->text == "edited");
  CHECK(ev->history_state->pending_turn->revision == 3);
}

TEST_CASE("Real runtime bytes decode: a shell command's echo carries sessionCommand true", "[protocol][real]") {
  const std::string line =
      R"({"id":3,"type":"user.message","timestamp":"2026-12-01T07:16:40.51Z","requestId":"r-1","turnId":"turn-2",)"
      R"("text":"!echo hi","revision":1,"sessionCommand":true})";
  std::vector<FieldMismatch> mismatches;
  auto ev = DecodeEvent(line, &mismatches);
  REQUIRE(ev);
  CHECK(mismatches.empty());
  CHECK(ev->session_command);
  CHECK(ev->request_id == "r-1");
  CHECK(ev->turn_id == "turn-2");
  CHECK(ev->revision == 1);
}

TEST_CASE("FieldMismatchMemo reports each field once, whatever its array index", "[protocol]") {
  FieldMismatchMemo memo;
  auto first = memo.Note("history.end", {FieldMismatch{"historyState.activeTurnStarted", "a string"}});
  REQUIRE(first.size() == 1);
  CHECK_THAT(first[0], Catch::Contains("historyState.activeTurnStarted"));
  CHECK_THAT(first[0], Catch::Contains("history.end"));
  CHECK_THAT(first[0], Catch::Contains("a string"));
  CHECK(memo.Note("history.end", {FieldMismatch{"historyState.activeTurnStarted", "a string"}}).empty());
  CHECK(memo.Note("input.requested", {FieldMismatch{"questions[0].id", "a string"}}).size() == 1);
  CHECK(memo.Note("input.requested", {FieldMismatch{"questions[3].id", "a string"}}).empty());
  CHECK(memo.Note("x", {}).empty());
}

TEST_CASE("Event encode/decode round-trips and omits empty fields", "[protocol]") {
  Event e;
  e.id = 5;
  e.type = std::string(event_type::kInputRequested);
  e.turn_id = "turn-1";
  e.input_id = "i";
  e.questions.push_back(InputQuestion{"q", "h", "what?", {InputOption{"a", "d"}}, true, true});
  HistoryState hs;
  hs.pending_turn = PendingTurn{"turn-2", "t", 2};
  e.history_state = hs;
  RuntimeStatus rs;
  rs.model = "m";
  rs.usage = Usage{1, 2, 3, 4, 5};
  rs.extra = Json{{"custom", "v"}};
  e.runtime = rs;
  const std::string line = EncodeEvent(e);
  CHECK(line.find('\n') == std::string::npos);
  CHECK_FALSE(EventToJson(e).contains("text"));  // empty fields omitted
  CHECK(line.find("\"reset\"") == std::string::npos);
  auto back = DecodeEvent(line);
  REQUIRE(back);
  CHECK(SameEvent(*back, e));
  CHECK(back->runtime->extra["custom"] == "v");
  CHECK(EncodeEvent(*back) == line);
}

TEST_CASE("ClientRequest encodes exactly the runtime's field names", "[protocol]") {
  CHECK(EncodeRequest(ClientRequest::Subscribe(0, "", true, 1, 1024)) ==
        R"({"historyBounds":true,"historyBytes":1024,"historyItems":1,"type":"subscribe"})");
  CHECK(EncodeRequest(ClientRequest::Subscribe(42, "j-1", true, 1, 1024)) ==
        R"({"historyBounds":true,"historyBytes":1024,"historyItems":1,"journalId":"j-1","since":42,"type":"subscribe"})");
  CHECK(EncodeRequest(ClientRequest::Message("r", "hi")) == R"({"requestId":"r","text":"hi","type":"message"})");
  CHECK(EncodeRequest(ClientRequest::Remove("r", "turn-2", 3)) ==
        R"({"expectedRevision":3,"requestId":"r","turnId":"turn-2","type":"message.remove"})");
  CHECK(EncodeRequest(ClientRequest::Edit("r", "turn-2", "x", 1)) ==
        R"({"expectedRevision":1,"requestId":"r","text":"x","turnId":"turn-2","type":"message.edit"})");
  CHECK(EncodeRequest(ClientRequest::Decline("r", "i1")) == R"({"cancel":true,"inputId":"i1","requestId":"r","type":"input"})");
  CHECK(EncodeRequest(ClientRequest::Answer("r", "i1", {{"q1", {"A", "B"}}})) ==
        R"({"answers":{"q1":["A","B"]},"inputId":"i1","requestId":"r","type":"input"})");
  CHECK(EncodeRequest(ClientRequest::Interrupt("r")) == R"({"requestId":"r","type":"interrupt"})");
}

TEST_CASE("ClientRequest round-trips and rejects bad shapes", "[protocol]") {
  for (const auto& r : {ClientRequest::Subscribe(3, "j", true, 1, 2), ClientRequest::Message("a", "b"),
                        ClientRequest::Answer("a", "i", {{"q", {"x"}}}), ClientRequest::Decline("a", "i")}) {
    auto back = DecodeRequest(EncodeRequest(r));
    REQUIRE(back);
    CHECK(*back == r);
  }
  CHECK_FALSE(DecodeRequest("[]"));
  CHECK_FALSE(DecodeRequest("nope"));
  auto bad = DecodeRequest(R"({"type":"input","answers":{"q":"x"}})");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("answers.q"));
  auto bad2 = DecodeRequest(R"({"type":"subscribe","since":"1"})");
  REQUIRE_FALSE(bad2);
  CHECK_THAT(bad2.error().message, Catch::Contains("\"since\" must be an integer"));
}

TEST_CASE("Invalid UTF-8 is replaced on encode, never thrown", "[protocol]") {
  ClientRequest r = ClientRequest::Message("r", std::string("bad \xff byte"));
  std::string line;
  REQUIRE_NOTHROW(line = EncodeRequest(r));
  CHECK(DecodeRequest(line));
}

TEST_CASE("IsRuntimeCommand mirrors the runtime's parsing", "[protocol]") {
  CHECK(IsRuntimeCommand("!ls"));
  CHECK(IsRuntimeCommand("   !ls"));
  CHECK(IsRuntimeCommand("\n\t!rm -rf /"));
  CHECK(IsRuntimeCommand("\xC2\xA0!ls"));          // NBSP
  CHECK(IsRuntimeCommand("\xE3\x80\x80!ls"));      // ideographic space
  CHECK(IsRuntimeCommand("\xE2\x80\x83!ls"));      // em space
  CHECK(IsRuntimeCommand("/goal"));
  CHECK(IsRuntimeCommand("/goal ship it"));
  CHECK(IsRuntimeCommand("  /goal\tx"));
  CHECK_FALSE(IsRuntimeCommand("/goals"));
  CHECK_FALSE(IsRuntimeCommand("/goalkeeper"));
  CHECK_FALSE(IsRuntimeCommand("hello !ls"));
  CHECK_FALSE(IsRuntimeCommand("[Slack message from bob]\n!ls"));
  CHECK_FALSE(IsRuntimeCommand(""));
  CHECK_FALSE(IsRuntimeCommand("\xE2\x80\x8B!ls"));  // zero-width space is not white space to Go
  CHECK(TrimUnicodeSpace("\xC2\xA0 x \xE2\x80\xA8") == "x");
}

TEST_CASE("NewUuid is a v4 UUID and unique", "[protocol]") {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    std::string u = NewUuid();
    REQUIRE(u.size() == 36);
    CHECK(u[14] == '4');
    CHECK((u[19] == '8' || u[19] == '9' || u[19] == 'a' || u[19] == 'b'));
    ids.insert(u);
  }
  CHECK(ids.size() == 1000);
}

namespace {
std::vector<std::string> Frame(LineFramer& f, std::string_view bytes, std::vector<std::size_t>* overflows = nullptr) {
  std::vector<std::string> out;
  f.Feed(bytes, [&](std::string_view l) { out.emplace_back(l); },
         [&](std::size_t n) {
           if (overflows) overflows->push_back(n);
         });
  return out;
}
}  // namespace

TEST_CASE("LineFramer splits, skips blanks and tolerates CRLF", "[protocol][framer]") {
  LineFramer f;
  CHECK(Frame(f, "a\nb\r\n\n  \r\n\tc\n") == std::vector<std::string>{"a", "b", "\tc"});
  CHECK(Frame(f, "par").empty());
  CHECK(f.Buffered() == 3);
  CHECK(Frame(f, "tial\nnext") == std::vector<std::string>{"partial"});
  CHECK(Frame(f, "\n") == std::vector<std::string>{"next"});
  CHECK(f.Buffered() == 0);
}

TEST_CASE("LineFramer skips an oversized line once and continues", "[protocol][framer]") {
  LineFramer f(10);
  std::vector<std::size_t> overflows;
  // An oversized line arriving in pieces.
  CHECK(Frame(f, "ok\n0123456", &overflows) == std::vector<std::string>{"ok"});
  CHECK(Frame(f, "789abcdef", &overflows).empty());
  CHECK(f.Skipping());
  CHECK(Frame(f, "more more more", &overflows).empty());
  CHECK(overflows.empty());
  CHECK(Frame(f, "end\nafter\n", &overflows) == std::vector<std::string>{"after"});
  REQUIRE(overflows.size() == 1);
  CHECK(overflows[0] == 7 + 9 + 14 + 3);
  // An oversized line complete in one buffer.
  CHECK(Frame(f, "0123456789ABC\nx\n", &overflows) == std::vector<std::string>{"x"});
  REQUIRE(overflows.size() == 2);
  CHECK(overflows[1] == 13);
  // Exactly at the bound is accepted.
  CHECK(Frame(f, "0123456789\n", &overflows) == std::vector<std::string>{"0123456789"});
}

TEST_CASE("LineFramer gives the same lines for every split of the input", "[protocol][framer]") {
  const std::string input = "{\"a\":1}\r\n\n{\"b\":2}\nxx\n   \n{\"c\":3}\n";
  LineFramer whole;
  auto expect = Frame(whole, input);
  for (std::size_t cut1 = 0; cut1 <= input.size(); ++cut1) {
    for (std::size_t cut2 = cut1; cut2 <= input.size(); ++cut2) {
      LineFramer f;
      auto got = Frame(f, input.substr(0, cut1));
      for (auto& l : Frame(f, input.substr(cut1, cut2 - cut1))) got.push_back(l);
      for (auto& l : Frame(f, input.substr(cut2))) got.push_back(l);
      REQUIRE(got == expect);
    }
  }
}

TEST_CASE("Decode survives random and truncated lines (fuzz-style)", "[protocol][fuzz]") {
  std::mt19937 rng(12345);
  const std::vector<std::string> seeds = {
      R"({"id":1,"type":"assistant.delta","turnId":"turn-1","text":"hello \u00e9 \ud83d\ude00"})",
      R"({"type":"input.requested","questions":[{"id":"q","options":[{"label":"a"}]}]})",
      R"({"type":"history.end","historyState":{"pendingTurn":{"turnId":"t","revision":2}}})",
      R"({"type":"runtime.status","runtime":{"usage":{"inputTokens":5}}})",
  };
  const std::string alphabet = "{}[]\":,0123456789.-+eEtrufalsn \\u\xff" "\x80" "abc";
  int decoded = 0, failed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string line;
    const auto& seed = seeds[static_cast<std::size_t>(i) % seeds.size()];
    switch (i % 3) {
      case 0: line = seed.substr(0, rng() % (seed.size() + 1)); break;  // truncated
      case 1: {
        line = seed;
        for (int k = 0; k < 3; ++k) line[rng() % line.size()] = alphabet[rng() % alphabet.size()];
        break;
      }
      default: {
        const std::size_t n = rng() % 64;
        for (std::size_t k = 0; k < n; ++k) line += alphabet[rng() % alphabet.size()];
      }
    }
    Result<Event> ev = Event{};
    REQUIRE_NOTHROW(ev = DecodeEvent(line));
    if (ev) {
      ++decoded;
    } else {
      ++failed;
      CHECK(!ev.error().message.empty());
    }
  }
  CHECK(failed > 0);
  CHECK(decoded > 0);
}
