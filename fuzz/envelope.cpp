// The prompt envelope on hostile chat input: the input's fields are split at 0x1E (platform, author
// name, author id, message text, then attachments and earlier messages' texts). Whatever they hold,
// the prompt starts with its fixed header line, "[<platform> message from <name> (<id>)]", holding
// exactly one '[' and one ']'; the runtime never reads it as a command (`!`, `/goal`); it is valid
// UTF-8 and within the 64 KB bound; and a message alone comes out as its header line and CleanText's
// text (FormatPrompt cleans the message into the prompt in place).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "routing/envelope.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/routing.hpp"

namespace {

std::vector<std::string_view> Fields(std::string_view in) {
  std::vector<std::string_view> out;
  for (;;) {
    const auto at = in.find('\x1E');
    out.push_back(in.substr(0, at));
    if (at == std::string_view::npos) return out;
    in.remove_prefix(at + 1);
  }
}

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sessionturn;
  const std::vector<std::string_view> f = Fields(std::string_view(reinterpret_cast<const char*>(data), size));
  auto field = [&f](std::size_t i) { return i < f.size() ? std::string(f[i]) : std::string(); };
  PromptEnvelope e;
  e.platform = field(0);
  e.author_name = field(1);
  e.author_id = field(2);
  e.text = field(3);
  for (std::size_t i = 4; i < f.size(); ++i) {
    if (i % 2 == 0) {
      e.attachments_text.emplace_back(f[i]);
    } else {
      e.thread_context.push_back({std::string(f[i - 1]), std::string(f[i]), i % 4 == 1});
    }
  }
  const std::string prompt = FormatPrompt(e);

  const std::string_view header = std::string_view(prompt).substr(0, prompt.find('\n'));
  Check(header.size() < prompt.size());  // a line of its own
  Check(header.front() == '[' && header.ends_with(")]"));
  Check(header.find('[', 1) == std::string_view::npos);
  Check(header.find(']') == header.size() - 1);
  Check(header.find(" message from ") != std::string_view::npos);
  Check(!IsRuntimeCommand(prompt));
  Check(routing::RepairUtf8(prompt) == prompt);
  Check(prompt.size() <= routing::kMaxPromptBytes);

  // The message alone, with no context or attachments: its text is CleanText's, after the header.
  PromptEnvelope plain;
  plain.platform = e.platform;
  plain.author_name = e.author_name;
  plain.author_id = e.author_id;
  plain.text = e.text;
  const std::string alone = FormatPrompt(plain);
  const std::string cleaned = routing::CleanText(e.text);
  if (alone.size() < routing::kMaxPromptBytes) {
    Check(alone.size() >= cleaned.size() && alone.ends_with(cleaned));
    Check(alone.substr(0, alone.size() - cleaned.size()) == std::string(header) + "\n");
  }
  return 0;
}
