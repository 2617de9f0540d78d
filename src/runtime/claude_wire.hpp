// Claude Code's bidirectional stream-json protocol, without I/O: the provider spec, the command
// line, the lines we write (a user message, control requests and responses) and a decoder that
// turns each line the agent writes into what the runtime does with it: protocol events, the end of
// a turn, a control request to answer. It maps the stream as kelos-session-runtime's Claude provider
// does (internal/sessionruntime/claude.go); docs/local-runtime.md says where we differ.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn::runtime::claude {

// `claude-code[:model=M,effort=E,permissions=skip|ask]`. Permissions default to ask: skipping the
// agent's permission checks must be the user's explicit choice.
struct Spec {
  std::string model;
  std::string effort;
  bool skip_permissions = false;
};
// Parses what follows "claude-code:" (empty: the defaults). Errors name the option that is wrong.
Result<Spec> ParseSpecOptions(std::string_view options);

// The agent's arguments (after the program): the stream-json flags, --session-id (a new
// conversation) or --resume (an existing one), then --model and --effort when given.
std::vector<std::string> CommandArgs(const Spec& spec, const std::string& session_id, bool resume);

// Lines we write, each ending in '\n'.
std::string UserMessageLine(std::string_view prompt, std::string_view session_id);
std::string InterruptLine(std::string_view request_id);
std::string ControlSuccessLine(std::string_view request_id, const Json& response, std::string_view session_id);
std::string ControlErrorLine(std::string_view request_id, std::string_view message, std::string_view session_id);

// A tool call's input in one short line (at most 200 bytes, valid UTF-8): Bash's command, the
// path of a file tool, a search's pattern, a URL, a task's description; otherwise compact JSON.
std::string ShortToolInput(std::string_view tool, const Json& input);

// ---- questions -----------------------------------------------------------------------------------

// AskUserQuestion's input as the protocol's questions (ids question-1, question-2, ...). Errors are
// the texts the real runtime sends back to the agent.
Result<std::vector<InputQuestion>> AskQuestions(const Json& input);
// The allow response to AskUserQuestion: its input with "answers" (question text -> the answers
// joined by ", ").
Json AskAllowResponse(const Json& input, const std::vector<InputQuestion>& questions,
                      const std::map<std::string, std::vector<std::string>>& answers);
// The deny response (behavior deny, with a message the agent reads).
Json DenyResponse(std::string_view message);

// A permission request (permissions=ask) as one question with three options.
inline constexpr std::string_view kAllowOption = "Allow";
inline constexpr std::string_view kDenyOption = "Deny";
inline constexpr std::string_view kAllowSessionOption = "Allow for this Session";
std::vector<InputQuestion> PermissionQuestion(std::string_view tool, const Json& input);

struct PermissionDecision {
  bool allow = false;
  bool remember = false;  // "Allow for this Session": later requests for the tool are allowed at once
  std::string message;    // the deny message the agent reads
};
PermissionDecision DecidePermission(const std::map<std::string, std::vector<std::string>>& answers);
// The allow response to a permission request; `remember_tool` adds a session-wide rule for it.
Json PermissionAllowResponse(const Json& input, std::string_view remember_tool);

// ---- decoding ------------------------------------------------------------------------------------

struct ControlRequest {
  std::string request_id;
  std::string subtype;  // can_use_tool, ...
  std::string tool_name;
  Json input = Json::object();
};

struct TurnEnd {
  bool ok = true;
  std::string error;  // set when !ok: the result's text, or why the run was incomplete
};

// What one line from the agent means.
struct LineOutcome {
  std::vector<Event> events;  // in order; runtime.status events carry a model or usage update
  std::optional<TurnEnd> turn_end;
  std::optional<ControlRequest> control_request;
  std::optional<std::string> control_response_id;  // a response to one of our requests
  std::string control_response_error;               // its error, when it refused
  std::string protocol_error;                       // set: the line is not this protocol
  std::string ignored;                              // set: a well-formed line we have no use for (for the log)
};

// Decodes the agent's stdout line by line. Turn state (text per content block, the tools started,
// whether text was streamed) is reset by BeginTurn; usage is counted over the decoder's lifetime.
class StreamDecoder {
 public:
  void BeginTurn();
  LineOutcome Feed(std::string_view line);
  // A new agent process: the conversation id is whatever it names next (usage keeps counting).
  void ForgetSession() { session_id_.clear(); }

  // The conversation the agent last named ("session_id" of any line); empty until it does.
  const std::string& session_id() const { return session_id_; }
  const std::string& model() const { return model_; }

 private:
  void StreamEvent(const Json& event, LineOutcome& out);
  void Message(std::string_view type, const Json& message, LineOutcome& out);
  void ToolStarted(const std::string& id, const std::string& name, const Json& input, LineOutcome& out);
  void OnResult(const Json& line, LineOutcome& out);

  std::string session_id_;
  std::string model_;
  // Turn state.
  std::map<std::int64_t, std::string> block_text_;
  std::map<std::int64_t, std::string> block_tool_;        // index -> tool id of a streamed tool_use
  std::map<std::int64_t, std::string> block_tool_name_;   // index -> its name
  std::map<std::int64_t, std::string> block_tool_input_;  // index -> its input JSON so far
  std::map<std::string, std::string> tools_;              // tool id -> name, for tool.completed
  bool had_text_delta_ = false;
  // Usage over the decoder's lifetime.
  Usage usage_;
};

}  // namespace sessionturn::runtime::claude
