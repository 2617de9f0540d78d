// Slack's wire format, sans I/O: Socket Mode envelopes, Events API payloads, interactivity and slash
// commands parsed into the router's model; request signatures; Web API answers read into results or
// errors; outbound messages as Block Kit. The adapter and the fuzzers use these; nothing here touches a
// socket.
#pragma once
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include "json_fields.hpp"
#include "sessionturn/chat/slack.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn::slack {

// Block Kit's limits (https://api.slack.com/reference/block-kit): a message holds at most 50 blocks;
// a section's text is 1..3,000 characters; an actions block at most 25 elements; a button's text 75
// characters, its value 2,000, its action_id 255.
inline constexpr std::size_t kMaxBlocks = 50;
inline constexpr std::size_t kMaxSectionChars = 3000;
inline constexpr std::size_t kMaxActionsElements = 25;
inline constexpr std::size_t kMaxButtonTextChars = 75;
inline constexpr std::size_t kMaxButtonValueBytes = 2000;
// chat.postMessage truncates `text` past 40,000 characters; the fallback text is kept below.
inline constexpr std::size_t kMaxTextChars = 40000;

// One Socket Mode frame from Slack.
struct Envelope {
  std::string type;         // "hello", "disconnect", "events_api", "interactive", "slash_commands", ...
  std::string envelope_id;  // to acknowledge ("" for hello and disconnect)
  nlohmann::json payload;   // the event, interaction or command
  int retry_attempt = 0;
  std::string retry_reason;
  std::string reason;  // disconnect: "warning", "refresh_requested", "link_disabled"
};
// Errc::protocol_error when the text is not a JSON object with a type.
Result<Envelope> ParseEnvelope(std::string_view text);

// What one delivery means for the router. At most one of message / action is set; neither with
// `ignored` saying why (a join, a bot's own message), or with `challenge` for url_verification.
struct ParsedEvent {
  std::optional<InboundMessage> message;  // author_name may be empty: resolve author_id (users.info)
  std::optional<InboundAction> action;    // without ack: the adapter binds it
  std::string response_url;               // interactivity and slash commands
  std::string ignored;
  std::optional<std::string> challenge;  // url_verification
  bool is_slash_command = false;
};

// An Events API outer event ({"type":"event_callback","event":{...},"event_id":...}) or a
// url_verification. Errc::protocol_error for anything else, naming what is missing.
Result<ParsedEvent> ParseEventCallback(const nlohmann::json& payload, const SlackBotInfo& bot);
// An interactivity payload; block_actions presses become actions, other types are ignored.
Result<ParsedEvent> ParseInteractive(const nlohmann::json& payload, const SlackBotInfo& bot);
// A slash command (Socket Mode: a JSON object; Events API: the form's fields as strings).
Result<ParsedEvent> ParseSlashCommand(const nlohmann::json& payload, const SlackBotInfo& bot);

// An Events API request body, whichever of the three it is: JSON (events), a form with `payload`
// (interactivity) or a form with `command` (slash commands). Errc::protocol_error otherwise.
Result<ParsedEvent> ParseEventsRequestBody(std::string_view content_type, std::string_view body,
                                           const SlackBotInfo& bot);

// application/x-www-form-urlencoded into its fields (a repeated name keeps the last value).
// Errc::protocol_error for a malformed percent escape.
Result<std::map<std::string, std::string>> ParseForm(std::string_view body);
std::string FormEncode(const std::map<std::string, std::string>& fields);

// Slack's message text as plain text: &lt; &gt; &amp; decoded, <@U1> as @U1, <#C1|name> as #name,
// <!here> as @here, <url|label> as "label (url)", <url> as url. `bot_user_id`'s mentions are removed
// (and reported through *mentioned).
std::string TextToPlain(std::string_view text, std::string_view bot_user_id, bool* mentioned = nullptr);

// Checks an Events API request: "v0=" + hex HMAC-SHA256(secret, "v0:" + timestamp + ":" + body),
// compared in constant time, and the timestamp no further than max_age from now. Errc::unauthorized
// naming what is wrong (no secret configured, header missing, malformed, stale, mismatch).
Status VerifySignature(std::string_view signing_secret, std::string_view timestamp, std::string_view signature,
                       std::string_view body, std::chrono::system_clock::time_point now,
                       std::chrono::seconds max_age);
// The signature Slack would send (tests, the fake's independent check).
std::string Sign(std::string_view signing_secret, std::string_view timestamp, std::string_view body);

// A Web API answer: the whole object when "ok" is true, else the error it names (see ErrorOf).
Result<nlohmann::json> ReadResponse(std::string_view method, int http_status, std::string_view body,
                                    std::string_view retry_after_header = {});
// The Errc for a Web API error code: ratelimited unavailable (+retry_after), invalid_auth and the
// token errors unauthorized, missing_scope / not_in_channel / cant_update_message forbidden,
// *_not_found not_found, msg_too_long too_large, invalid_blocks / no_text invalid_argument, 5xx and
// internal errors unavailable.
Error ErrorOf(std::string_view method, std::string_view error, int http_status,
              std::chrono::milliseconds retry_after = {});
// Slack refused the blocks (then the message goes again as text only).
bool IsBlocksError(const Error& error);

// chat.postMessage / chat.update parameters: a section per up to 3,000 characters of the text (cut at
// line ends), an actions block per row of buttons, the text also as the notification fallback.
// `blocks` false: text only (the fallback after IsBlocksError).
nlohmann::json PostParams(const ThreadRef& where, const OutboundMessage& message, bool blocks);
nlohmann::json UpdateParams(const ThreadRef& where, std::string_view ts, const OutboundMessage& message, bool blocks);
nlohmann::json Blocks(const OutboundMessage& message);

// A user's name from a users.info answer's "user": the display name, else the real name, else the name.
std::string DisplayNameOf(const nlohmann::json& user);

// conversations.replies messages before `before_ts` (all when empty), oldest first, the last `max`.
std::vector<ThreadHistoryMessage> HistoryBefore(const nlohmann::json& messages, std::string_view before_ts,
                                                std::size_t max, const SlackBotInfo& bot);

}  // namespace sessionturn::slack
