#include "runtime/claude_wire.hpp"

#include <algorithm>
#include <cstdint>

#include "json_fields.hpp"
#include "runtime/text.hpp"

namespace sessionturn::runtime::claude {
namespace {

constexpr std::size_t kShortInputBytes = 200;
// Deeper lines are not the agent's protocol (its deepest is a tool input): nlohmann's copy, dump and
// destruction recurse, so a line of 8 MiB of '[' must be refused before it is parsed.
constexpr int kMaxNesting = 128;
// A streamed tool input kept past this many bytes would only feed a one-line summary.
constexpr std::size_t kMaxStreamedToolInput = 1 << 20;
// What an overflowed input is replaced by: not JSON, so the tool line shows no input.
constexpr std::string_view kOverflowedToolInput = "(too long)";
constexpr std::string_view kEllipsis = "\xE2\x80\xA6";

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Line(const Json& j) { return Dump(j) + "\n"; }

// Type-safe field reads (json_fields.hpp): a field of the wrong type reads as absent, as 0 or false.
using json_fields::Field;
std::string Str(const Json& j, const char* key) {
  return json_fields::String(j, key);
}
bool Bool(const Json& j, const char* key) {
  return json_fields::Bool(j, key).value_or(false);
}
std::int64_t Int(const Json& j, const char* key) {
  return json_fields::Int(j, key).value_or(0);
}
const Json& Obj(const Json& j, const char* key) {
  static const Json kEmpty = Json::object();
  const Json* f = json_fields::Object(j, key);
  return f != nullptr ? *f : kEmpty;
}

std::string Excerpt(std::string_view s, std::size_t max = 120) {
  if (s.size() <= max) return std::string(s.substr(0, ValidUtf8PrefixLen(s)));
  std::string_view head = s.substr(0, max);
  return std::string(head.substr(0, ValidUtf8PrefixLen(head))) + std::string(kEllipsis);
}

// One line: the first line of `s`, white space collapsed, cut to kShortInputBytes.
std::string OneLine(std::string_view s) {
  s = TrimUnicodeSpace(s);
  bool more_lines = false;
  if (auto nl = s.find('\n'); nl != std::string_view::npos) {
    more_lines = true;
    s = TrimUnicodeSpace(s.substr(0, nl));
  }
  std::string out;
  for (char c : s) out += (c == '\t' || c == '\r') ? ' ' : c;
  if (out.size() > kShortInputBytes) {
    out.resize(ValidUtf8PrefixLen(std::string_view(out).substr(0, kShortInputBytes)));
    more_lines = true;
  }
  if (more_lines) out += kEllipsis;
  return out;
}

// True when `line` nests arrays and objects deeper than kMaxNesting (brackets in strings do not count).
bool TooDeep(std::string_view line) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// Token counts add up without overflow (the agent's numbers are untrusted).
std::int64_t Add(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return b > 0 ? INT64_MAX : INT64_MIN;
  return out;
}
std::int64_t Tokens(std::int64_t v) { return v < 0 ? 0 : v; }

Event Make(std::string_view type) {
  Event e;
  e.type = std::string(type);
  return e;
}

Event StatusUpdate(RuntimeStatus status) {
  Event e = Make(event_type::kRuntimeStatus);
  e.runtime = std::move(status);
  return e;
}

std::string Join(const std::vector<std::string>& values, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += sep;
    out += values[i];
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

Result<Spec> ParseSpecOptions(std::string_view options) {
  Spec spec;
  std::set<std::string> seen;
  auto bad = [](const std::string& why) {
    return Fail(Errc::invalid_argument, "provider \"claude-code\": " + why +
                                            " (claude-code[:model=M,effort=E,permissions=skip|ask])");
  };
  while (!options.empty()) {
    auto comma = options.find(',');
    std::string_view item = options.substr(0, comma);
    options = comma == std::string_view::npos ? std::string_view() : options.substr(comma + 1);
    auto eq = item.find('=');
    if (eq == std::string_view::npos) return bad("option \"" + std::string(item) + "\" needs a value (KEY=VALUE)");
    std::string key(item.substr(0, eq));
    std::string value(item.substr(eq + 1));
    if (value.empty()) return bad("option \"" + key + "\" has an empty value");
    if (std::any_of(value.begin(), value.end(), [](unsigned char c) { return c <= ' ' || c == 0x7F; }))
      return bad("option \"" + key + "\" has white space or a control character in its value");
    if (!seen.insert(key).second) return bad("option \"" + key + "\" is given twice");
    if (key == "model") spec.model = value;
    else if (key == "effort") spec.effort = value;
    else if (key == "permissions") {
      if (value != "skip" && value != "ask") return bad("permissions must be skip or ask, not \"" + value + "\"");
      spec.skip_permissions = value == "skip";
    } else {
      return bad("unknown option \"" + key + "\" (model, effort, permissions)");
    }
  }
  return spec;
}

std::vector<std::string> CommandArgs(const Spec& spec, const std::string& session_id, bool resume) {
  std::vector<std::string> args = {"--input-format", "stream-json", "--output-format", "stream-json",
                                   "--include-partial-messages", "--replay-user-messages"};
  if (spec.skip_permissions) args.emplace_back("--dangerously-skip-permissions");
  for (const char* a : {"--permission-prompt-tool", "stdio", "--verbose", "-p"}) args.emplace_back(a);
  args.emplace_back(resume ? "--resume" : "--session-id");
  args.push_back(session_id);
  if (!spec.model.empty()) args.insert(args.end(), {"--model", spec.model});
  if (!spec.effort.empty()) args.insert(args.end(), {"--effort", spec.effort});
  return args;
}

std::string UserMessageLine(std::string_view prompt, std::string_view session_id) {
  Json content = Json::array({Json{{"type", "text"}, {"text", prompt}}});
  return Line(Json{{"type", "user"},
                   {"message", {{"role", "user"}, {"content", std::move(content)}}},
                   {"parent_tool_use_id", nullptr},
                   {"session_id", session_id}});
}

std::string InterruptLine(std::string_view request_id) {
  return Line(Json{{"type", "control_request"}, {"request_id", request_id}, {"request", {{"subtype", "interrupt"}}}});
}

std::string ControlSuccessLine(std::string_view request_id, const Json& response, std::string_view session_id) {
  return Line(Json{{"type", "control_response"},
                   {"response", {{"subtype", "success"}, {"request_id", request_id}, {"response", response}}},
                   {"session_id", session_id}});
}

std::string ControlErrorLine(std::string_view request_id, std::string_view message, std::string_view session_id) {
  return Line(Json{{"type", "control_response"},
                   {"response", {{"subtype", "error"}, {"request_id", request_id}, {"error", message}}},
                   {"session_id", session_id}});
}

std::string ShortToolInput(std::string_view tool, const Json& input) {
  if (!input.is_object()) return input.is_null() ? std::string() : OneLine(Dump(input));
  // The field that says what the call does, by tool; then the usual suspects for tools we do not know.
  static const std::vector<std::pair<std::string_view, const char*>> kByTool = {
      {"Bash", "command"},     {"Read", "file_path"},   {"Write", "file_path"},      {"Edit", "file_path"},
      {"MultiEdit", "file_path"}, {"NotebookEdit", "notebook_path"}, {"Grep", "pattern"}, {"Glob", "pattern"},
      {"WebFetch", "url"},     {"WebSearch", "query"},  {"Task", "description"},     {"Agent", "description"}};
  for (const auto& [name, key] : kByTool)
    if (name == tool)
      if (std::string v = Str(input, key); !v.empty()) return OneLine(v);
  for (const char* key : {"command", "file_path", "path", "pattern", "url", "query", "description"})
    if (std::string v = Str(input, key); !v.empty()) return OneLine(v);
  return input.empty() ? std::string() : OneLine(Dump(input));
}

// ---- questions -----------------------------------------------------------------------------------

Result<std::vector<InputQuestion>> AskQuestions(const Json& input) {
  const Json* qs = Field(input, "questions");
  if (!qs || !qs->is_array() || qs->empty())
    return Fail(Errc::invalid_argument, "AskUserQuestion did not include valid questions");
  std::vector<InputQuestion> out;
  for (const Json& q : *qs) {
    if (!q.is_object()) return Fail(Errc::invalid_argument, "AskUserQuestion did not include valid questions");
    InputQuestion iq;
    iq.id = "question-" + std::to_string(out.size() + 1);
    iq.header = Str(q, "header");
    iq.question = Str(q, "question");
    iq.multi_select = Bool(q, "multiSelect");
    if (iq.question.empty()) return Fail(Errc::invalid_argument, "AskUserQuestion included an empty question");
    if (const Json* opts = Field(q, "options"); opts && opts->is_array())
      for (const Json& o : *opts)
        if (o.is_object()) iq.options.push_back(InputOption{Str(o, "label"), Str(o, "description")});
    out.push_back(std::move(iq));
  }
  return out;
}

Json AskAllowResponse(const Json& input, const std::vector<InputQuestion>& questions,
                      const std::map<std::string, std::vector<std::string>>& answers) {
  Json updated = input.is_object() ? input : Json::object();
  Json by_text = Json::object();
  for (const auto& q : questions)
    if (auto it = answers.find(q.id); it != answers.end()) by_text[q.question] = Join(it->second, ", ");
  updated["answers"] = std::move(by_text);
  return Json{{"behavior", "allow"}, {"updatedInput", std::move(updated)}, {"decisionClassification", "user_temporary"}};
}

Json DenyResponse(std::string_view message) { return Json{{"behavior", "deny"}, {"message", message}}; }

std::vector<InputQuestion> PermissionQuestion(std::string_view tool, const Json& input) {
  InputQuestion q;
  q.id = "question-1";
  q.header = "Permission";
  std::string what = ShortToolInput(tool, input);
  q.question = "Claude Code wants to use " + std::string(tool) + (what.empty() ? "" : ": " + what) + ". Allow it?";
  q.options = {InputOption{std::string(kAllowOption), "this once"},
               InputOption{std::string(kDenyOption), "the agent is told it may not"},
               InputOption{std::string(kAllowSessionOption), "every " + std::string(tool) + " call from now on"}};
  return {std::move(q)};
}

PermissionDecision DecidePermission(const std::map<std::string, std::vector<std::string>>& answers) {
  PermissionDecision d;
  std::string answer;
  auto it = answers.find("question-1");
  if (it == answers.end() && !answers.empty()) it = answers.begin();
  if (it != answers.end() && !it->second.empty()) answer = std::string(TrimUnicodeSpace(it->second.front()));
  const std::string lower = Lower(answer);
  if (lower == Lower(kAllowOption)) {
    d.allow = true;
  } else if (lower == Lower(kAllowSessionOption)) {
    d.allow = d.remember = true;
  } else {
    d.message = "The user denied this tool use";
    if (!answer.empty() && lower != Lower(kDenyOption)) d.message += ": " + answer;
  }
  return d;
}

Json PermissionAllowResponse(const Json& input, std::string_view remember_tool) {
  Json r{{"behavior", "allow"}, {"updatedInput", input.is_object() ? input : Json::object()}};
  if (!remember_tool.empty())
    r["updatedPermissions"] = Json::array({Json{{"type", "addRules"},
                                                {"rules", Json::array({Json{{"toolName", remember_tool}}})},
                                                {"behavior", "allow"},
                                                {"destination", "session"}}});
  return r;
}

// ---- decoding ------------------------------------------------------------------------------------

void StreamDecoder::BeginTurn() {
  block_text_.clear();
  block_tool_.clear();
  block_tool_name_.clear();
  block_tool_input_.clear();
  tools_.clear();
  had_text_delta_ = false;
}

LineOutcome StreamDecoder::Feed(std::string_view line) {
  LineOutcome out;
  if (TooDeep(line)) {
    out.protocol_error = "a line nested deeper than " + std::to_string(kMaxNesting) + " levels: " + Excerpt(line);
    return out;
  }
  Json j = Json::parse(line, nullptr, false);
  if (j.is_discarded()) {
    out.protocol_error = "a line that is not JSON: " + Excerpt(line);
    return out;
  }
  if (!j.is_object()) {
    out.protocol_error = "a JSON value that is not an object: " + Excerpt(line);
    return out;
  }
  const std::string type = Str(j, "type");
  if (type == "control_request") {
    const Json& req = Obj(j, "request");
    ControlRequest cr{Str(j, "request_id"), Str(req, "subtype"), Str(req, "tool_name"), Json::object()};
    if (const Json* in = Field(req, "input")) cr.input = *in;
    if (cr.request_id.empty()) out.ignored = "a control request without request_id";
    else out.control_request = std::move(cr);
    return out;
  }
  if (type == "control_response") {
    const Json& resp = Obj(j, "response");
    std::string id = Str(resp, "request_id");
    if (id.empty()) {
      out.ignored = "a control response without request_id";
      return out;
    }
    out.control_response_id = std::move(id);
    if (Str(resp, "subtype") == "error") {
      out.control_response_error = Str(resp, "error");
      if (out.control_response_error.empty()) out.control_response_error = "refused without a reason";
    }
    return out;
  }
  if (std::string sid = Str(j, "session_id"); !sid.empty()) session_id_ = std::move(sid);
  if (type == "stream_event") {
    StreamEvent(Obj(j, "event"), out);
  } else if (type == "assistant" || type == "user") {
    Message(type, Obj(j, "message"), out);
  } else if (type == "result") {
    OnResult(j, out);
  } else if (type == "system") {
    if (Str(j, "subtype") == "init") {
      if (std::string m = Str(j, "model"); !m.empty() && m != model_) {
        model_ = m;
        RuntimeStatus rs;
        rs.model = std::move(m);
        out.events.push_back(StatusUpdate(std::move(rs)));
      }
    } else {
      out.ignored = "system message \"" + Str(j, "subtype") + "\"";
    }
  } else {
    out.ignored = "a line of type \"" + type + "\"";
  }
  return out;
}

void StreamDecoder::StreamEvent(const Json& event, LineOutcome& out) {
  const std::string type = Str(event, "type");
  const std::int64_t index = Int(event, "index");
  if (type == "content_block_start") {
    const Json& block = Obj(event, "content_block");
    if (Str(block, "type") == "tool_use") {
      // Announced at the block's end, when its input is known (a tool line says what it runs).
      block_tool_[index] = Str(block, "id");
      block_tool_name_[index] = Str(block, "name");
      block_tool_input_[index].clear();
    }
  } else if (type == "content_block_delta") {
    const Json& delta = Obj(event, "delta");
    const std::string dtype = Str(delta, "type");
    if (dtype == "text_delta") {
      std::string text = Str(delta, "text");
      if (text.empty()) return;
      had_text_delta_ = true;
      block_text_[index] += text;
      Event e = Make(event_type::kAssistantDelta);
      e.text = std::move(text);
      out.events.push_back(std::move(e));
    } else if (dtype == "input_json_delta" && block_tool_.count(index)) {
      // Only the tool line's short input is made from it, and the assembled message repeats the whole
      // input: past kMaxStreamedToolInput the rest is not kept, and the tool line goes without input.
      std::string& input = block_tool_input_[index];
      const std::string piece = Str(delta, "partial_json");
      if (input.size() + piece.size() <= kMaxStreamedToolInput)
        input += piece;
      else
        input.assign(kOverflowedToolInput);
    }
  } else if (type == "content_block_stop") {
    if (auto it = block_text_.find(index); it != block_text_.end()) {
      // Each finished text block is one message, so clients show blocks apart.
      if (!it->second.empty()) {
        Event e = Make(event_type::kAssistantMessage);
        e.text = std::move(it->second);
        out.events.push_back(std::move(e));
      }
      block_text_.erase(it);
    }
    if (auto it = block_tool_.find(index); it != block_tool_.end()) {
      // The brackets arrived inside the deltas' strings, so the line check did not see them.
      const std::string& text = block_tool_input_[index];
      Json input = TooDeep(text) ? Json::object() : Json::parse(text, nullptr, false);
      if (input.is_discarded()) input = Json::object();
      ToolStarted(it->second, block_tool_name_[index], input, out);
      block_tool_.erase(it);
      block_tool_name_.erase(index);
      block_tool_input_.erase(index);
    }
  }
}

void StreamDecoder::Message(std::string_view type, const Json& message, LineOutcome& out) {
  const Json* content = Field(message, "content");
  if (type == "assistant") {
    const Json& u = Obj(message, "usage");
    if (!u.empty())
      usage_.context_tokens = Add(Add(Tokens(Int(u, "input_tokens")), Tokens(Int(u, "cache_creation_input_tokens"))),
                                  Tokens(Int(u, "cache_read_input_tokens")));
  }
  if (!content || !content->is_array()) return;  // a replayed prompt may be a plain string
  for (const Json& block : *content) {
    const std::string btype = Str(block, "type");
    if (type == "assistant" && btype == "text") {
      // Only when nothing was streamed (older agents, or partial messages off): else it is a repeat.
      std::string text = Str(block, "text");
      if (!had_text_delta_ && !text.empty()) {
        Event e = Make(event_type::kAssistantMessage);
        e.text = std::move(text);
        out.events.push_back(std::move(e));
      }
    } else if (type == "assistant" && btype == "tool_use") {
      const Json* input = Field(block, "input");
      ToolStarted(Str(block, "id"), Str(block, "name"), input ? *input : Json::object(), out);
    } else if (type == "user" && btype == "tool_result") {
      Event e = Make(event_type::kToolCompleted);
      e.tool_id = Str(block, "tool_use_id");
      if (auto it = tools_.find(e.tool_id); it != tools_.end()) e.tool_name = it->second;
      e.status = std::string(Bool(block, "is_error") ? status_value::kFailed : status_value::kCompleted);
      if (const Json* c = Field(block, "content")) {
        if (c->is_string()) {
          e.output = c->get<std::string>();
        } else if (c->is_array()) {
          std::vector<std::string> texts;
          for (const Json& part : *c)
            if (Str(part, "type") == "text" && !Str(part, "text").empty()) texts.push_back(Str(part, "text"));
          e.output = Join(texts, "\n");
        }
      }
      out.events.push_back(std::move(e));
    }
  }
}

void StreamDecoder::ToolStarted(const std::string& id, const std::string& name, const Json& input, LineOutcome& out) {
  if (!id.empty() && tools_.count(id)) return;  // streamed first, then repeated in the assembled message
  tools_[id] = name;
  Event e = Make(event_type::kToolStarted);
  e.tool_id = id;
  e.tool_name = name;
  e.text = ShortToolInput(name, input);
  e.status = std::string(status_value::kRunning);
  out.events.push_back(std::move(e));
}

void StreamDecoder::OnResult(const Json& j, LineOutcome& out) {
  const Json& u = Obj(j, "usage");
  const std::int64_t in = Add(Add(Tokens(Int(u, "input_tokens")), Tokens(Int(u, "cache_creation_input_tokens"))),
                              Tokens(Int(u, "cache_read_input_tokens")));
  const std::int64_t outp = Tokens(Int(u, "output_tokens"));
  usage_.input_tokens = Add(usage_.input_tokens, in);
  usage_.output_tokens = Add(usage_.output_tokens, outp);
  usage_.total_tokens = Add(usage_.total_tokens, Add(in, outp));
  for (const auto& [m, mu] : Obj(j, "modelUsage").items())
    usage_.context_window = std::max(usage_.context_window, Int(mu, "contextWindow"));
  RuntimeStatus rs;
  rs.usage = usage_;
  out.events.push_back(StatusUpdate(std::move(rs)));

  // Classified as the real runtime does (internal/claudecode Result.Status).
  const std::string subtype = Str(j, "subtype");
  const bool is_error = Bool(j, "is_error");
  const std::string stop = Str(j, "stop_reason");
  const std::string terminal = Str(j, "terminal_reason");
  TurnEnd end;
  if (is_error || subtype != "success") {
    end.ok = false;
    end.error = Str(j, "result");
    if (end.error.empty()) {
      std::vector<std::string> details;
      if (!subtype.empty()) details.push_back("subtype=" + subtype);
      if (is_error) details.emplace_back("is_error=true");
      end.error = "Claude Code returned an unsuccessful result";
      if (!details.empty()) end.error += " (" + Join(details, ", ") + ")";
    }
  } else if ((!terminal.empty() && terminal != "completed") || (!stop.empty() && stop != "end_turn")) {
    std::vector<std::string> details;
    if (!terminal.empty() && terminal != "completed") details.push_back("terminal_reason=" + terminal);
    if (!stop.empty() && stop != "end_turn") details.push_back("stop_reason=" + stop);
    end.ok = false;
    end.error = "Claude Code run incomplete (" + Join(details, ", ") + ")";
  }
  out.turn_end = std::move(end);
}

}  // namespace sessionturn::runtime::claude
