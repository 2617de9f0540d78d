// Claude Code's stdout (untrusted bytes from the agent process) through the line framer and the
// decoder the claude-code provider uses; a control request's input through the question builders.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/claude_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sessionturn::runtime::claude;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  StreamDecoder decoder;
  decoder.BeginTurn();
  sessionturn::LineFramer framer(1 << 16);
  framer.Feed(text, [&](std::string_view line) {
    LineOutcome o = decoder.Feed(line);
    if (o.control_request) {
      const auto& cr = *o.control_request;
      (void)PermissionQuestion(cr.tool_name, cr.input);
      if (auto qs = AskQuestions(cr.input)) (void)AskAllowResponse(cr.input, *qs, {{"question-1", {"x"}}});
      (void)PermissionAllowResponse(cr.input, cr.tool_name);
    }
  });
  (void)ParseSpecOptions(text);
  return 0;
}
