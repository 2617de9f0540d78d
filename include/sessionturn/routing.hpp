// The channel-routing helper's model: chat threads, the messages and button presses a platform
// delivers, what the router sends back, the ChatAdapter a platform implements, routes (who may talk
// to which Sessions), Session naming and the prompt envelope. The Router itself is in router.hpp.
// docs/routing.md is the guide.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "sessionturn/backend.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn {

// Where a conversation happens. `thread` is empty when the platform has no threads there (a
// Telegram private chat or plain group); `workspace` is empty when the platform has one (Telegram).
struct ThreadRef {
  std::string platform;   // "slack", "telegram", ...
  std::string workspace;  // Slack team id
  std::string chat;       // Slack channel id, Telegram chat id
  std::string thread;     // Slack thread_ts, Telegram message_thread_id (forum topic)
  bool operator==(const ThreadRef&) const = default;
};

// The Session name for a platform thread (DESIGN.md §6):
//   <prefix>-<platform>-<first 12 hex of SHA-256("prefix:owner_uid:chat:thread")>
// lower-cased and sanitized to [a-z0-9-], the prefix cut so that the whole fits a 63-character DNS
// label, trailing '-'/'.' trimmed. `owner_uid` is the backend's owner (the spawner's UID in a
// cluster), so two bots with the same prefix never share a Session.
std::string SessionName(std::string_view prefix, std::string_view platform, std::string_view owner_uid,
                        std::string_view chat, std::string_view thread);

enum class MessageKind { new_message, edited, deleted };
std::string_view ToString(MessageKind kind) noexcept;  // "new", "edited", "deleted"

// A message a platform delivered, already verified and parsed by its adapter.
struct InboundMessage {
  std::string platform;
  std::string workspace;
  std::string chat;
  std::string thread;               // empty: the chat has no threads (or the message is in none)
  std::string message_id;           // the platform's id of this message (Slack ts, Telegram message_id)
  std::string reply_to_message_id;  // the message it replies to, when it is a reply
  std::string author_id;
  std::string author_name;          // display name, as the platform gives it (untrusted)
  std::string text;                 // the text with the bot's own mention removed
  std::vector<std::string> attachments_text;  // text of attachments (captions, file snippets), in order
  bool is_bot = false;              // written by a bot
  bool is_self = false;             // written by this bot
  bool mentions_bot = false;        // the text mentioned this bot
  bool is_private_chat = false;     // a one-to-one chat with the bot
  std::string event_id;             // the platform's delivery id (Slack event_id, Telegram update_id)
  std::chrono::system_clock::time_point received{};
  MessageKind kind = MessageKind::new_message;

  ThreadRef Where() const { return ThreadRef{platform, workspace, chat, thread}; }
};

// A button press on one of the router's messages.
struct InboundAction {
  std::string platform;
  std::string workspace;
  std::string chat;
  std::string thread;
  std::string message_id;  // the message that carried the button
  std::string author_id;
  std::string author_name;
  std::string data;        // the opaque data the router put on the button
  std::string event_id;
  // Acknowledges the press on the platform (Telegram answerCallbackQuery; Slack's response). `text`,
  // when not empty, is shown to the presser ("This question was already answered"). Called once.
  std::function<void(std::string_view text)> ack;
};

struct Button {
  std::string label;
  std::string data;  // opaque, at most ChatCapabilities::button_data_limit bytes
};

// A message the router sends: already rendered in the adapter's dialect and within its limit.
struct OutboundMessage {
  std::string text;
  std::vector<std::vector<Button>> buttons;  // rows of buttons; empty: none
  std::string reply_to;                      // a message id to reply to; empty: none
};

// What a platform can do; the router adapts to it.
struct ChatCapabilities {
  std::size_t max_length = 4096;            // one message's limit, in `unit`
  LengthUnit unit = LengthUnit::utf16;
  std::size_t soft_length = 0;              // preferred part length; 0: max_length
  MarkupDialect dialect = MarkupDialect::plain;
  // Edits the platform accepts per chat: at most `edits_per_interval` per `edit_interval`.
  int edits_per_interval = 1;
  std::chrono::milliseconds edit_interval{1000};
  bool buttons = false;
  std::size_t button_data_limit = 64;       // bytes (Telegram callback_data: 64)
  bool threads = false;                     // messages can be in threads (Slack, Telegram forum topics)
  bool typing = false;                      // Typing() shows something
  bool fetch_thread = false;                // FetchThread() returns earlier messages
  // How chat commands are written: "/" (Telegram: "/sessions"); empty: the command word first, after
  // the bot's mention (Slack: "@bot sessions").
  std::string command_prefix;
};

// An earlier message of a thread, for the first turn's context.
struct ThreadHistoryMessage {
  std::string author_name;
  std::string text;
  bool is_bot = false;
};

template <typename T>
using ChatHandler = std::function<void(Result<T> result)>;
using ChatStatusHandler = std::function<void(Status status)>;

// Implemented by a platform (chat/slack.hpp, chat/telegram.hpp, or a bot's own through the bindings).
// Every call is made on the router's Context; handlers may be called from any thread, once. Errors:
// the platform's, as Errc (unavailable with Error::retry_after for a 429, unauthorized, forbidden,
// not_found for a message that is gone, too_large, invalid_argument for text it refused).
class ChatAdapter {
 public:
  virtual ~ChatAdapter() = default;
  virtual ChatCapabilities Capabilities() const = 0;
  // Posts into `where` (its thread, when it has one); the handler gets the new message's id.
  virtual void AsyncPost(const ThreadRef& where, OutboundMessage message, ChatHandler<std::string> handler) = 0;
  virtual void AsyncEdit(const ThreadRef& where, const std::string& message_id, OutboundMessage message,
                         ChatStatusHandler handler) = 0;
  // Shows "typing..." where the platform has it. Default: nothing; the handler gets ok before the
  // call returns (the default has no Context to post to).
  virtual void AsyncTyping(const ThreadRef& where, ChatStatusHandler handler);
  // Up to `max_messages` of the thread's messages before `before_message_id`, oldest first.
  // Default: Errc::unavailable (the adapter cannot fetch history), before the call returns.
  virtual void AsyncFetchThread(const ThreadRef& where, const std::string& before_message_id,
                                std::size_t max_messages, ChatHandler<std::vector<ThreadHistoryMessage>> handler);
};

// Who may talk to the Sessions, and what a matching message creates. A message is handled by the
// first route that matches it; one that matches none never reaches a Session and gets no reply.
struct RouteConfig {
  std::string name;                      // for logs and errors
  std::string platform;                  // empty: any
  std::vector<std::string> chats;        // allowed chat ids; empty: any
  std::vector<std::string> users;        // allowed author ids; empty: any
  // Unset: a mention is required in group chats and not in private chats.
  std::optional<bool> require_mention;
  std::vector<std::string> triggers;     // ECMAScript regexes: when any are set, one must match
  std::vector<std::string> excludes;     // ECMAScript regexes: a match drops the message
  bool allow_bots = false;               // other bots' messages (this bot's own are always ignored)
  std::vector<std::string> allowed_bots; // bot author ids allowed even when allow_bots is false
  std::vector<std::string> admins;       // may `delete`; empty: nobody
  SessionSpec session;                   // what Ensure creates for this route's Sessions
};

// The fixed start of every prompt (DESIGN.md §6): nothing the author controls comes first.
struct PromptEnvelope {
  std::string platform;                         // "slack"
  std::string author_name;                      // flattened to one line, bounded to 80 characters
  std::string author_id;                        // flattened likewise, bounded to 64
  std::string text;                             // the message
  std::vector<std::string> attachments_text;
  std::vector<ThreadHistoryMessage> thread_context;  // earlier messages, first turn of a thread only
};
// "[slack message from Ada (U123)]\n..." : always starts with the fixed literal, so the runtime never
// reads it as a command (`!`, `/goal`); author names lose control, zero-width and bidi characters.
// Then the thread context (a fenced block, at most 8 KB, oldest dropped first), the message, and
// each attachment labelled and fenced; at most 64 KB in all. docs/routing-rules.md has the exact form.
std::string FormatPrompt(const PromptEnvelope& envelope);

}  // namespace sessionturn
