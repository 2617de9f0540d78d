// The claude-code provider's protocol without I/O (src/runtime/claude_wire.hpp): the spec, the
// command line, the lines we write, and the mapping of the agent's stream to protocol events as
// kelos-session-runtime's Claude provider maps it (per-block messages, no repeat of streamed text,
// tools, results classified as internal/claudecode does).
#include <catch2/catch.hpp>

#include "runtime/claude_wire.hpp"

using namespace sessionturn;
using namespace sessionturn::runtime::claude;

namespace {

std::vector<Event> Feed(StreamDecoder& d, const std::vector<std::string>& lines) {
  std::vector<Event> out;
  for (const auto& l : lines) {
    LineOutcome o = d.Feed(l);
    REQUIRE(o.protocol_error.empty());
    for (auto& e : o.events) out.push_back(std::move(e));
  }
  return out;
}

std::string Stream(const std::string& event) {
  return R"({"type":"stream_event","session_id":"s-1","event":)" + event + "}";
}

std::vector<std::string> Sig(const std::vector<Event>& evs) {
  std::vector<std::string> out;
  for (const auto& e : evs) out.push_back(e.type + "|" + e.text + "|" + e.tool_id + "|" + e.tool_name + "|" + e.status);
  return out;
}

}  // namespace

TEST_CASE("claude wire: the spec's options, and errors naming the wrong one", "[claude]") {
  auto d = ParseSpecOptions("");
  REQUIRE(d);
  CHECK(d->model.empty());
  CHECK_FALSE(d->skip_permissions);  // ask unless skip is asked for
  auto s = ParseSpecOptions("model=claude-sonnet-4-5,effort=high,permissions=skip");
  REQUIRE(s);
  CHECK(s->model == "claude-sonnet-4-5");
  CHECK(s->effort == "high");
  CHECK(s->skip_permissions);
  CHECK(ParseSpecOptions("permissions=never").error().message.find("permissions must be skip or ask") != std::string::npos);
  CHECK(ParseSpecOptions("colour=red").error().message.find("unknown option \"colour\"") != std::string::npos);
  CHECK(ParseSpecOptions("model").error().message.find("needs a value") != std::string::npos);
  CHECK(ParseSpecOptions("model=a,model=b").error().message.find("given twice") != std::string::npos);
  CHECK(ParseSpecOptions("model=a b").error().message.find("white space") != std::string::npos);
}

TEST_CASE("claude wire: the command line, new and resumed", "[claude]") {
  Spec spec;
  auto fresh = CommandArgs(spec, "id-1", false);
  CHECK(fresh == std::vector<std::string>{"--input-format", "stream-json", "--output-format", "stream-json",
                                          "--include-partial-messages", "--replay-user-messages",
                                          "--permission-prompt-tool", "stdio", "--verbose", "-p", "--session-id",
                                          "id-1"});
  spec.skip_permissions = true;
  spec.model = "opus";
  spec.effort = "low";
  auto resumed = CommandArgs(spec, "id-1", true);
  CHECK(resumed == std::vector<std::string>{"--input-format", "stream-json", "--output-format", "stream-json",
                                            "--include-partial-messages", "--replay-user-messages",
                                            "--dangerously-skip-permissions", "--permission-prompt-tool", "stdio",
                                            "--verbose", "-p", "--resume", "id-1", "--model", "opus", "--effort",
                                            "low"});
}

TEST_CASE("claude wire: the lines we write", "[claude]") {
  Json user = Json::parse(UserMessageLine("hi \"there\"\n", "s-1"));
  CHECK(user == Json::parse(R"({"type":"user","message":{"role":"user","content":[{"type":"text",
    "text":"hi \"there\"\n"}]},"parent_tool_use_id":null,"session_id":"s-1"})"));
  CHECK(UserMessageLine("x", "s").back() == '\n');
  CHECK(Json::parse(InterruptLine("r-1")) ==
        Json::parse(R"({"type":"control_request","request_id":"r-1","request":{"subtype":"interrupt"}})"));
  CHECK(Json::parse(ControlErrorLine("r-2", "no", "s")) ==
        Json::parse(R"({"type":"control_response","response":{"subtype":"error","request_id":"r-2","error":"no"},
          "session_id":"s"})"));
  Json ok = Json::parse(ControlSuccessLine("r-3", DenyResponse("stop"), "s"));
  CHECK(ok["response"]["response"] == Json::parse(R"({"behavior":"deny","message":"stop"})"));
  // Invalid UTF-8 in a prompt is replaced, never a throw.
  CHECK_NOTHROW(UserMessageLine(std::string("a\xff" "b"), "s"));
}

TEST_CASE("claude wire: each text block is one message after its deltas, streamed text is not repeated",
          "[claude]") {
  StreamDecoder d;
  d.BeginTurn();
  auto evs = Feed(d, {
      Stream(R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})"),
      Stream(R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}})"),
      Stream(R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}})"),
      Stream(R"({"type":"content_block_stop","index":0})"),
      R"({"type":"assistant","message":{"content":[{"type":"text","text":"Hello there"}]},"session_id":"s-1"})",
      Stream(R"({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})"),
      Stream(R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Second"}})"),
      Stream(R"({"type":"content_block_stop","index":1})"),
  });
  CHECK(Sig(evs) == std::vector<std::string>{"assistant.delta|Hello|||", "assistant.delta| there|||",
                                             "assistant.message|Hello there|||", "assistant.delta|Second|||",
                                             "assistant.message|Second|||"});
  CHECK(d.session_id() == "s-1");
}

TEST_CASE("claude wire: a streamed tool input nested too deep or too long starts the tool without input", "[claude]") {
  // The brackets arrive inside the deltas' strings, where the per-line depth check cannot see them.
  StreamDecoder d;
  d.BeginTurn();
  auto delta = [](const std::string& piece) {
    return Stream(R"({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":")" +
                  piece + R"("}})");
  };
  std::vector<std::string> lines{Stream(
      R"({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"Bash"}})")};
  for (int i = 0; i < 100; ++i) lines.push_back(delta(std::string(1000, '[')));
  lines.push_back(delta(std::string(100000, ']')));
  lines.push_back(Stream(R"({"type":"content_block_stop","index":0})"));
  auto evs = Feed(d, lines);
  REQUIRE(evs.size() == 1);
  CHECK(Sig(evs)[0] == "tool.started||t1|Bash|running");

  // Past the bound (1 MiB) what streamed is not kept; the tool still starts, once.
  StreamDecoder big;
  big.BeginTurn();
  lines = {
      Stream(R"({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t2","name":"Bash"}})"),
      delta(R"({\"command\":\")")};
  for (int i = 0; i < 20; ++i) lines.push_back(delta(std::string(60000, 'x')));
  lines.push_back(delta(R"(\"})"));
  lines.push_back(Stream(R"({"type":"content_block_stop","index":0})"));
  lines.push_back(
      R"({"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"x"}}]}})");
  evs = Feed(big, lines);
  REQUIRE(evs.size() == 1);
  CHECK(Sig(evs)[0] == "tool.started||t2|Bash|running");
}

TEST_CASE("claude wire: without streaming, each assembled text block is a message", "[claude]") {
  StreamDecoder d;
  d.BeginTurn();
  auto evs = Feed(d, {R"({"type":"assistant","message":{"content":[{"type":"text","text":"First"},
      {"type":"text","text":"Second"}]}})"});
  CHECK(Sig(evs) == std::vector<std::string>{"assistant.message|First|||", "assistant.message|Second|||"});
}

TEST_CASE("claude wire: a streamed tool starts once with its input, its result completes it", "[claude]") {
  StreamDecoder d;
  d.BeginTurn();
  auto evs = Feed(d, {
      Stream(R"({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"Bash","input":{}}})"),
      Stream(R"({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}})"),
      Stream(R"({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"and\":\"ls -la\"}"}})"),
      Stream(R"({"type":"content_block_stop","index":0})"),
      R"({"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls -la"}}]}})",
      R"({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1",
         "content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}],"is_error":true}]}})",
  });
  REQUIRE(evs.size() == 2);
  CHECK(Sig(evs)[0] == "tool.started|ls -la|t1|Bash|running");
  CHECK(Sig(evs)[1] == "tool.completed||t1|Bash|failed");
  CHECK(evs[1].output == "a\nb");
  // A tool only in the assembled message (no stream) starts from there; a string result is the output.
  auto more = Feed(d, {
      R"({"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Read","input":{"file_path":"/etc/hosts"}}]}})",
      R"({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"127.0.0.1"}]}})",
  });
  REQUIRE(more.size() == 2);
  CHECK(Sig(more)[0] == "tool.started|/etc/hosts|t2|Read|running");
  CHECK(more[1].output == "127.0.0.1");
  CHECK(more[1].status == "completed");
}

TEST_CASE("claude wire: results classified: success, error with its text, incomplete with its reasons", "[claude]") {
  StreamDecoder d;
  d.BeginTurn();
  auto ok = d.Feed(R"({"type":"result","subtype":"success","is_error":false,"result":"done","stop_reason":"end_turn",
      "usage":{"input_tokens":3,"cache_creation_input_tokens":2,"cache_read_input_tokens":5,"output_tokens":7},
      "modelUsage":{"m":{"contextWindow":200000}}})");
  REQUIRE(ok.turn_end);
  CHECK(ok.turn_end->ok);
  REQUIRE(ok.events.size() == 1);
  REQUIRE(ok.events[0].runtime);
  REQUIRE(ok.events[0].runtime->usage);
  CHECK(ok.events[0].runtime->usage->input_tokens == 10);
  CHECK(ok.events[0].runtime->usage->output_tokens == 7);
  CHECK(ok.events[0].runtime->usage->total_tokens == 17);
  CHECK(ok.events[0].runtime->usage->context_window == 200000);

  auto err = d.Feed(R"({"type":"result","subtype":"success","is_error":true,"result":"API Error: 500"})");
  REQUIRE(err.turn_end);
  CHECK_FALSE(err.turn_end->ok);
  CHECK(err.turn_end->error == "API Error: 500");
  CHECK(err.events[0].runtime->usage->total_tokens == 17);  // counted over the decoder's life
  auto bare = d.Feed(R"({"type":"result","subtype":"error_max_turns","is_error":true})");
  CHECK(bare.turn_end->error == "Claude Code returned an unsuccessful result (subtype=error_max_turns, is_error=true)");
  auto incomplete = d.Feed(R"({"type":"result","subtype":"success","stop_reason":"max_tokens"})");
  CHECK(incomplete.turn_end->error == "Claude Code run incomplete (stop_reason=max_tokens)");
  auto old = d.Feed(R"({"type":"result","subtype":"success"})");  // older agents say no reason
  CHECK(old.turn_end->ok);
}

TEST_CASE("claude wire: init names the model, control lines are told apart, bad lines named", "[claude]") {
  StreamDecoder d;
  auto init = d.Feed(R"({"type":"system","subtype":"init","model":"claude-x","session_id":"s-9"})");
  REQUIRE(init.events.size() == 1);
  CHECK(init.events[0].runtime->model == "claude-x");
  CHECK(d.session_id() == "s-9");
  CHECK(d.Feed(R"({"type":"system","subtype":"init","model":"claude-x"})").events.empty());  // unchanged

  auto req = d.Feed(R"({"type":"control_request","request_id":"q1","request":{"subtype":"can_use_tool",
      "tool_name":"Bash","input":{"command":"ls"}}})");
  REQUIRE(req.control_request);
  CHECK(req.control_request->tool_name == "Bash");
  CHECK(req.control_request->input["command"] == "ls");
  auto resp = d.Feed(R"({"type":"control_response","response":{"subtype":"error","request_id":"r1","error":"busy"}})");
  REQUIRE(resp.control_response_id);
  CHECK(resp.control_response_error == "busy");

  CHECK(d.Feed("not json").protocol_error == "a line that is not JSON: not json");
  CHECK(d.Feed("[1,2]").protocol_error.find("not an object") != std::string::npos);
  CHECK(d.Feed(R"({"type":"rate_limit_event"})").ignored == "a line of type \"rate_limit_event\"");
  // Fields of the wrong type read as absent: no throw, no event.
  auto odd = d.Feed(R"({"type":"stream_event","event":{"type":"content_block_delta","index":"x","delta":7}})");
  CHECK(odd.events.empty());
  CHECK(odd.protocol_error.empty());
}

TEST_CASE("claude wire: questions from AskUserQuestion and the answers back by question text", "[claude]") {
  Json input = Json::parse(R"({"questions":[{"question":"Which color?","header":"Color","multiSelect":false,
      "options":[{"label":"Red","description":"warm"}]},{"question":"Sizes?","multiSelect":true,"options":[]}]})");
  auto qs = AskQuestions(input);
  REQUIRE(qs);
  REQUIRE(qs->size() == 2);
  CHECK((*qs)[0].id == "question-1");
  CHECK((*qs)[1].id == "question-2");
  CHECK((*qs)[1].multi_select);
  CHECK((*qs)[0].options.at(0).description == "warm");
  Json allow = AskAllowResponse(input, *qs, {{"question-1", {"Red"}}, {"question-2", {"S", "L"}}});
  CHECK(allow["behavior"] == "allow");
  CHECK(allow["updatedInput"]["answers"] == Json::parse(R"({"Which color?":"Red","Sizes?":"S, L"})"));
  CHECK(allow["updatedInput"]["questions"] == input["questions"]);

  CHECK(AskQuestions(Json::object()).error().message == "AskUserQuestion did not include valid questions");
  CHECK(AskQuestions(Json::parse(R"({"questions":[{"question":""}]})")).error().message ==
        "AskUserQuestion included an empty question");
}

TEST_CASE("claude wire: a permission question, the decision, and the session rule", "[claude]") {
  auto q = PermissionQuestion("Bash", Json::parse(R"({"command":"rm -rf build\nand more"})"));
  REQUIRE(q.size() == 1);
  CHECK(q[0].question == "Claude Code wants to use Bash: rm -rf build\xE2\x80\xA6. Allow it?");
  CHECK(q[0].options.size() == 3);
  CHECK(DecidePermission({{"question-1", {"allow"}}}).allow);
  CHECK_FALSE(DecidePermission({{"question-1", {"Allow"}}}).remember);
  auto session = DecidePermission({{"question-1", {" Allow for this Session "}}});
  CHECK((session.allow && session.remember));
  auto deny = DecidePermission({{"question-1", {"Deny"}}});
  CHECK_FALSE(deny.allow);
  CHECK(deny.message == "The user denied this tool use");
  CHECK(DecidePermission({{"question-1", {"use a dry run"}}}).message ==
        "The user denied this tool use: use a dry run");
  CHECK_FALSE(DecidePermission({}).allow);
  Json rule = PermissionAllowResponse(Json::parse(R"({"command":"ls"})"), "Bash");
  CHECK(rule["updatedInput"]["command"] == "ls");
  CHECK(rule["updatedPermissions"][0]["rules"][0]["toolName"] == "Bash");
  CHECK(rule["updatedPermissions"][0]["destination"] == "session");
  CHECK_FALSE(PermissionAllowResponse(Json::object(), "").contains("updatedPermissions"));
}

TEST_CASE("claude wire: a tool's input in one short line", "[claude]") {
  CHECK(ShortToolInput("Bash", Json::parse(R"({"command":"make test","description":"Run"})")) == "make test");
  CHECK(ShortToolInput("Edit", Json::parse(R"({"file_path":"/a/b.cpp","old_string":"x"})")) == "/a/b.cpp");
  CHECK(ShortToolInput("Grep", Json::parse(R"({"pattern":"TODO","path":"src"})")) == "TODO");
  CHECK(ShortToolInput("mcp__x__y", Json::parse(R"({"url":"https://example.com"})")) == "https://example.com");
  CHECK(ShortToolInput("Other", Json::parse(R"({"n":1})")) == "{\"n\":1}");
  CHECK(ShortToolInput("Other", Json::object()).empty());
  std::string long_cmd(300, 'x');
  long_cmd += "\xC3\xA9";
  std::string cut = ShortToolInput("Bash", Json{{"command", long_cmd}});
  CHECK(cut.size() <= 200 + 3);
  CHECK(cut.substr(cut.size() - 3) == "\xE2\x80\xA6");
}
