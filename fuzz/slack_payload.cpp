// Slack deliveries (Socket Mode frames, Events API bodies: JSON, interactivity and slash-command
// forms; untrusted bytes) through the parsers the adapter uses, and Web API answers through the
// response reader. The first byte picks how the rest is read.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chat/slack_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  namespace sl = sessionturn::slack;
  static const sessionturn::SlackBotInfo bot{"T0TEAM", "Team", "U0BOT", "B0BOT", "helper", ""};
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto envelope = sl::ParseEnvelope(text);
      if (!envelope) break;
      if (envelope->type == "events_api") (void)sl::ParseEventCallback(envelope->payload, bot);
      if (envelope->type == "interactive") (void)sl::ParseInteractive(envelope->payload, bot);
      if (envelope->type == "slash_commands") (void)sl::ParseSlashCommand(envelope->payload, bot);
      break;
    }
    case 1:
      (void)sl::ParseEventsRequestBody("application/json", text, bot);
      break;
    case 2: {
      (void)sl::ParseEventsRequestBody("application/x-www-form-urlencoded", text, bot);
      // A form that parses encodes back to one that parses to the same fields.
      if (auto form = sl::ParseForm(text)) {
        auto again = sl::ParseForm(sl::FormEncode(*form));
        if (!again || *again != *form) std::abort();
      }
      break;
    }
    default: {
      (void)sl::ReadResponse("chat.postMessage", 200, text, text.substr(0, 4));
      bool mentioned = false;
      (void)sl::TextToPlain(text, "U0BOT", &mentioned);
      break;
    }
  }
  return 0;
}
