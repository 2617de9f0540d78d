// Telegram Bot API wire format, sans I/O: updates parsed into the router's model, API responses read
// into results or errors, and the HTML fallback. The adapter (telegram_adapter.cpp) and the fuzzer use
// these; nothing here touches a socket.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <nlohmann/json.hpp>
#include "sessionturn/chat/telegram.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn::telegram {

// One update, as the router takes it. Exactly one of message / action is set, or neither with
// `ignored` saying why (a sticker, a service message, a channel post): the caller logs it.
struct ParsedUpdate {
  std::int64_t update_id = 0;
  std::optional<InboundMessage> message;
  std::optional<InboundAction> action;  // without ack: the adapter binds answerCallbackQuery
  std::string callback_query_id;        // for the action's ack
  std::string ignored;
};

// Parses one Update object. Errc::protocol_error when it is not an object or has no update_id.
Result<ParsedUpdate> ParseUpdate(const nlohmann::json& update, const TelegramBotInfo& bot);
Result<ParsedUpdate> ParseUpdate(std::string_view json, const TelegramBotInfo& bot);

// A Bot API response body: its "result" when "ok" is true, else the error it names, mapped to Errc
// (see ErrorOf). `method` names the call in messages.
Result<nlohmann::json> ReadResponse(std::string_view method, int http_status, std::string_view body,
                                    std::string_view retry_after_header = {});

// The Errc for a Bot API error: 429 unavailable (retry_after from parameters.retry_after), 401
// unauthorized, 403 forbidden, 404 not_found (a method the server lacks), 409 conflict, "message to
// edit not found"/"message to delete not found" not_found, "message is too long" too_large, other 400s
// invalid_argument, 5xx unavailable.
Error ErrorOf(std::string_view method, int error_code, std::string_view description, std::int64_t retry_after_s);

// The description says Telegram could not parse the HTML entities (then the text goes again as plain).
bool IsEntityParseError(const Error& error);
// The description says the edit changed nothing (a success for us).
bool IsNotModified(const Error& error);

// Telegram HTML (what the renderer emits) as the plain text Telegram would show: tags dropped,
// &lt; &gt; &amp; &quot; and numeric references decoded.
std::string HtmlToPlain(std::string_view html);

// sendMessage / editMessageText parameters for an outbound message.
nlohmann::json SendParams(const ThreadRef& where, const OutboundMessage& message, bool html);
nlohmann::json EditParams(const ThreadRef& where, std::string_view message_id, const OutboundMessage& message,
                          bool html);

// message_thread_id for a thread: none for "" and for the General topic ("1"), which Telegram wants
// omitted when sending.
std::optional<std::int64_t> ThreadIdForSend(std::string_view thread);

// Replaces every occurrence of `secret` in `text` with "<redacted>" (error messages carry URLs, and
// the token is in the URL path).
std::string Redact(std::string text, std::string_view secret);

}  // namespace sessionturn::telegram
