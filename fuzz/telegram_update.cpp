// Telegram updates (getUpdates results and webhook bodies, untrusted bytes) through the parser the
// adapter uses, and Bot API answers through the response reader.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/telegram_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const sessionturn::TelegramBotInfo bot{777, "helper_bot", "Helper", false};
  auto parsed = sessionturn::telegram::ParseUpdate(text, bot);
  if (parsed && parsed->message) (void)sessionturn::telegram::HtmlToPlain(parsed->message->text);
  (void)sessionturn::telegram::ReadResponse("getUpdates", 200, text);
  (void)sessionturn::telegram::HtmlToPlain(text);
  (void)sessionturn::SecretEquals("secret", text);
  return 0;
}
