// Telegram Bot API wire format, sans I/O (telegram_wire.hpp).
#include "chat/telegram_wire.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>

#include "json_fields.hpp"

namespace sessionturn::telegram {
namespace {

using nlohmann::json;

// A field of an object, or null when absent or when `j` is not an object.
const json& Field(const json& j, const char* name) {
  static const json kNull;
  const json* f = json_fields::Field(j, name);
  return f != nullptr ? *f : kNull;
}

// True only when the field is the boolean true.
bool BoolField(const json& j, const char* name) {
  return json_fields::Bool(j, name).value_or(false);
}

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

char Lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

// Positions of "@username" (case-insensitive, not followed by a word character) in `text`.
std::vector<std::size_t> MentionsOf(std::string_view text, std::string_view username) {
  std::vector<std::size_t> at;
  if (username.empty()) return at;
  const std::size_t n = username.size() + 1;
  for (std::size_t i = 0; i + n <= text.size(); ++i) {
    if (text[i] != '@') continue;
    bool same = true;
    for (std::size_t k = 0; k < username.size() && same; ++k) same = Lower(text[i + 1 + k]) == Lower(username[k]);
    if (!same || (i + n < text.size() && IsWordChar(text[i + n]))) continue;
    at.push_back(i);
    i += n - 1;
  }
  return at;
}

std::string Trim(std::string s) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!s.empty() && space(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && space(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// The text with the bot's mentions removed ("@bot hi" -> "hi", "/new@bot x" -> "/new x").
std::string WithoutMentions(std::string_view text, std::string_view username) {
  std::string out;
  std::size_t from = 0;
  for (std::size_t at : MentionsOf(text, username)) {
    out.append(text.substr(from, at - from));
    from = at + username.size() + 1;
    // "@bot, hi": the punctuation that addressed the bot goes with it.
    if (from < text.size() && (text[from] == ',' || text[from] == ':')) ++from;
  }
  out.append(text.substr(from));
  return Trim(std::move(out));
}

bool MentionedById(const json& entities, std::int64_t bot_id) {
  if (!entities.is_array()) return false;
  for (const json& e : entities) {
    if (json_fields::String(e, "type") == "text_mention" && json_fields::Int(Field(e, "user"), "id") == bot_id)
      return true;
  }
  return false;
}

std::string NameOf(const json& user) {
  std::string name = json_fields::String(user, "first_name");
  const std::string last = json_fields::String(user, "last_name");
  if (!last.empty()) name += (name.empty() ? "" : " ") + last;
  if (name.empty()) name = json_fields::String(user, "username");
  if (name.empty()) name = json_fields::String(user, "title");  // a sender_chat
  return name;
}

// The conversation a message belongs to. In a forum every topic is a thread, General ("1")
// included; elsewhere message_thread_id (comment threads of a channel's discussion group) is not a
// conversation of its own.
std::string ThreadOf(const json& message, const json& chat) {
  if (!BoolField(chat, "is_forum")) return {};
  if (BoolField(message, "is_topic_message")) {
    if (auto id = json_fields::Int(message, "message_thread_id")) return std::to_string(*id);
  }
  return "1";
}

struct Where {
  std::string chat, thread;
  bool is_private = false;
};

Result<Where> WhereOf(const json& message, std::string_view what) {
  const json& chat = Field(message, "chat");
  auto chat_id = json_fields::Int(chat, "id");
  if (!chat_id) return Fail(Errc::protocol_error, std::string(what) + " has no chat.id");
  return Where{std::to_string(*chat_id), ThreadOf(message, chat), json_fields::String(chat, "type") == "private"};
}

Result<ParsedUpdate> ParseMessage(ParsedUpdate out, const json& m, MessageKind kind, const TelegramBotInfo& bot) {
  auto where = WhereOf(m, "update " + std::to_string(out.update_id) + "'s message");
  if (!where) return Fail(where.error());
  auto message_id = json_fields::Int(m, "message_id");
  if (!message_id) return Fail(Errc::protocol_error, "update " + std::to_string(out.update_id) + "'s message has no message_id");
  const bool has_text = Field(m, "text").is_string();
  const std::string raw_text = has_text ? json_fields::String(m, "text") : json_fields::String(m, "caption");
  if (raw_text.empty()) {
    out.ignored = "message " + std::to_string(*message_id) + " in chat " + where->chat + " has no text or caption";
    return out;
  }
  InboundMessage msg;
  msg.platform = "telegram";
  msg.chat = where->chat;
  msg.thread = where->thread;
  msg.is_private_chat = where->is_private;
  msg.message_id = std::to_string(*message_id);
  msg.event_id = std::to_string(out.update_id);
  msg.kind = kind;
  if (auto date = json_fields::Int(m, kind == MessageKind::edited ? "edit_date" : "date")) {
    // Unix seconds. One past what the clock can hold (its ticks overflow past about the year 2262) is
    // not a time the platform meant: the message keeps no received time rather than a wrapped one.
    using Clock = std::chrono::system_clock;
    constexpr auto kMaxSeconds = std::chrono::duration_cast<std::chrono::seconds>(Clock::duration::max()).count();
    if (*date >= 0 && *date <= kMaxSeconds) msg.received = Clock::time_point(std::chrono::seconds(*date));
  }
  const json& from = Field(m, "from");
  const json& sender_chat = Field(m, "sender_chat");
  // An anonymous admin or a channel writes as a chat: that chat is the author.
  const json& author = sender_chat.is_object() ? sender_chat : from;
  if (auto id = json_fields::Int(author, "id")) msg.author_id = std::to_string(*id);
  msg.author_name = NameOf(author);
  msg.is_bot = BoolField(from, "is_bot") && !sender_chat.is_object();
  msg.is_self = bot.id != 0 && json_fields::Int(from, "id") == bot.id;

  const json& reply = Field(m, "reply_to_message");
  if (reply.is_object()) {
    auto reply_id = json_fields::Int(reply, "message_id");
    // In a forum, a message in a topic "replies" to the topic's root (its forum_topic_created service
    // message): that is where it was written, not a reply.
    const bool topic_root = !msg.thread.empty() && (Field(reply, "forum_topic_created").is_object() ||
                                                    (reply_id && std::to_string(*reply_id) == msg.thread));
    if (reply_id && !topic_root) {
      msg.reply_to_message_id = std::to_string(*reply_id);
      if (bot.id != 0 && json_fields::Int(Field(reply, "from"), "id") == bot.id) msg.mentions_bot = true;
    }
  }
  if (!MentionsOf(raw_text, bot.username).empty() ||
      MentionedById(Field(m, has_text ? "entities" : "caption_entities"), bot.id)) {
    msg.mentions_bot = true;
  }
  msg.text = WithoutMentions(raw_text, bot.username);
  if (!has_text) {
    // A caption: the media itself is not text the agent could read; say what it was.
    for (const char* media : {"photo", "document", "video", "audio", "voice", "animation"}) {
      if (!Field(m, media).is_null()) {
        msg.attachments_text.push_back(std::string("(a ") + media + " was attached; only its caption is shown)");
        break;
      }
    }
  }
  out.message = std::move(msg);
  return out;
}

Result<ParsedUpdate> ParseCallback(ParsedUpdate out, const json& cq) {
  out.callback_query_id = json_fields::String(cq, "id");
  if (out.callback_query_id.empty()) {
    return Fail(Errc::protocol_error, "update " + std::to_string(out.update_id) + "'s callback_query has no id");
  }
  const json& message = Field(cq, "message");
  if (!message.is_object()) {
    out.ignored = "callback query " + out.callback_query_id + " is on an inline message, not one of the bot's";
    return out;
  }
  auto where = WhereOf(message, "callback query " + out.callback_query_id + "'s message");
  if (!where) return Fail(where.error());
  InboundAction action;
  action.platform = "telegram";
  action.chat = where->chat;
  action.thread = where->thread;
  if (auto id = json_fields::Int(message, "message_id")) action.message_id = std::to_string(*id);
  const json& from = Field(cq, "from");
  if (auto id = json_fields::Int(from, "id")) action.author_id = std::to_string(*id);
  action.author_name = NameOf(from);
  action.data = json_fields::String(cq, "data");
  action.event_id = std::to_string(out.update_id);
  out.action = std::move(action);
  return out;
}

void AppendUtf8(std::string& out, std::uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes the entity at html[i] == '&'; returns the characters consumed (0: not an entity).
std::size_t DecodeEntity(std::string_view html, std::size_t i, std::string& out) {
  const std::size_t semi = html.find(';', i);
  if (semi == std::string_view::npos || semi - i > 10) return 0;
  const std::string_view name = html.substr(i + 1, semi - i - 1);
  if (name == "lt") out += '<';
  else if (name == "gt") out += '>';
  else if (name == "amp") out += '&';
  else if (name == "quot") out += '"';
  else if (name.size() > 1 && name[0] == '#') {
    const bool hex = name[1] == 'x' || name[1] == 'X';
    const std::string_view digits = name.substr(hex ? 2 : 1);
    std::uint32_t cp = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) return 0;
    AppendUtf8(out, cp);
  } else {
    return 0;
  }
  return semi - i + 1;
}

json ChatIdValue(std::string_view chat) {
  std::int64_t id = 0;
  auto [end, ec] = std::from_chars(chat.data(), chat.data() + chat.size(), id);
  if (ec == std::errc() && end == chat.data() + chat.size()) return id;
  return std::string(chat);  // "@channelusername"
}

json Keyboard(const std::vector<std::vector<Button>>& rows) {
  json keyboard = json::array();
  for (const auto& row : rows) {
    json r = json::array();
    for (const Button& b : row) r.push_back({{"text", b.label}, {"callback_data", b.data}});
    keyboard.push_back(std::move(r));
  }
  return {{"inline_keyboard", std::move(keyboard)}};
}

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

}  // namespace

Result<ParsedUpdate> ParseUpdate(const json& update, const TelegramBotInfo& bot) {
  auto update_id = json_fields::Int(update, "update_id");
  if (!update_id) return Fail(Errc::protocol_error, "a Telegram update without an update_id");
  // The next poll's offset is update_id + 1, and a negative offset means "the last N updates".
  if (*update_id < 0 || *update_id == INT64_MAX) {
    return Fail(Errc::protocol_error,
                "a Telegram update whose update_id " + std::to_string(*update_id) + " cannot be acknowledged");
  }
  ParsedUpdate out;
  out.update_id = *update_id;
  if (const json& m = Field(update, "message"); m.is_object()) {
    return ParseMessage(std::move(out), m, MessageKind::new_message, bot);
  }
  if (const json& m = Field(update, "edited_message"); m.is_object()) {
    return ParseMessage(std::move(out), m, MessageKind::edited, bot);
  }
  if (const json& cq = Field(update, "callback_query"); cq.is_object()) return ParseCallback(std::move(out), cq);
  std::string kind = "nothing";
  for (auto it = update.begin(); it != update.end(); ++it) {
    if (it.key() != "update_id") kind = it.key();
  }
  out.ignored = "update " + std::to_string(out.update_id) + " is a " + kind + ", which the router does not take";
  return out;
}

Result<ParsedUpdate> ParseUpdate(std::string_view text, const TelegramBotInfo& bot) {
  json update = json::parse(text, nullptr, false);
  if (update.is_discarded()) return Fail(Errc::protocol_error, "a Telegram update that is not JSON");
  return ParseUpdate(update, bot);
}

Error ErrorOf(std::string_view method, int code, std::string_view description, std::int64_t retry_after_s) {
  const std::string what = "Telegram " + std::string(method) + ": " +
                           (description.empty() ? "error " + std::to_string(code) : std::string(description));
  Errc errc = Errc::invalid_argument;
  if (code == 429) errc = Errc::unavailable;
  else if (code == 401) errc = Errc::unauthorized;
  else if (code == 403) errc = Errc::forbidden;
  else if (code == 404) errc = Errc::not_found;
  else if (code == 409) errc = Errc::conflict;
  else if (code >= 500) errc = Errc::unavailable;
  else if (Contains(description, "not found") && Contains(description, "message to")) errc = Errc::not_found;
  else if (Contains(description, "message is too long")) errc = Errc::too_large;
  Error e(errc, what, code);
  // Capped as Slack's is (an hour): a larger value from the wire would overflow the wait, not mean it.
  if (retry_after_s > 0) e.retry_after = std::chrono::seconds(std::min<std::int64_t>(retry_after_s, 3600));
  return e;
}

Result<json> ReadResponse(std::string_view method, int status, std::string_view body,
                          std::string_view retry_after_header) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !Field(j, "ok").is_boolean()) {
    if (status >= 200 && status < 300) {
      return Fail(Errc::protocol_error, "Telegram " + std::string(method) + ": the answer is not a Bot API response");
    }
    std::int64_t retry = 0;
    std::from_chars(retry_after_header.data(), retry_after_header.data() + retry_after_header.size(), retry);
    return Fail(ErrorOf(method, status, "HTTP " + std::to_string(status), retry));
  }
  if (BoolField(j, "ok")) return Field(j, "result");
  // An error_code that is no HTTP status (2^32 + 429 would wrap to 429 as an int) leaves the status to decide.
  const std::int64_t error_code = json_fields::Int(j, "error_code").value_or(status);
  const int code = error_code >= 100 && error_code <= 599 ? static_cast<int>(error_code) : status;
  const std::int64_t retry = json_fields::Int(Field(j, "parameters"), "retry_after").value_or(0);
  return Fail(ErrorOf(method, code, json_fields::String(j, "description"), retry));
}

bool IsEntityParseError(const Error& e) {
  return e.http_status == 400 && Contains(e.message, "can't parse entities");
}

bool IsNotModified(const Error& e) {
  return e.http_status == 400 && Contains(e.message, "message is not modified");
}

std::string HtmlToPlain(std::string_view html) {
  std::string out;
  out.reserve(html.size());
  for (std::size_t i = 0; i < html.size(); ++i) {
    const char c = html[i];
    if (c == '<') {
      const std::size_t close = html.find('>', i);
      if (close != std::string_view::npos) {
        i = close;
        continue;
      }
    } else if (c == '&') {
      if (std::size_t used = DecodeEntity(html, i, out); used > 0) {
        i += used - 1;
        continue;
      }
    }
    out += c;
  }
  return out;
}

std::optional<std::int64_t> ThreadIdForSend(std::string_view thread) {
  if (thread.empty() || thread == "1") return std::nullopt;
  std::int64_t id = 0;
  auto [end, ec] = std::from_chars(thread.data(), thread.data() + thread.size(), id);
  if (ec != std::errc() || end != thread.data() + thread.size()) return std::nullopt;
  return id;
}

json SendParams(const ThreadRef& where, const OutboundMessage& message, bool html) {
  json p = {{"chat_id", ChatIdValue(where.chat)}, {"text", message.text}, {"link_preview_options", {{"is_disabled", true}}}};
  if (html) p["parse_mode"] = "HTML";
  if (auto thread = ThreadIdForSend(where.thread)) p["message_thread_id"] = *thread;
  if (!message.reply_to.empty()) {
    // A reply to a message deleted meanwhile still goes out, as a plain message.
    p["reply_parameters"] = {{"message_id", ChatIdValue(message.reply_to)}, {"allow_sending_without_reply", true}};
  }
  if (!message.buttons.empty()) p["reply_markup"] = Keyboard(message.buttons);
  return p;
}

json EditParams(const ThreadRef& where, std::string_view message_id, const OutboundMessage& message, bool html) {
  json p = {{"chat_id", ChatIdValue(where.chat)},
            {"message_id", ChatIdValue(message_id)},
            {"text", message.text},
            {"link_preview_options", {{"is_disabled", true}}}};
  if (html) p["parse_mode"] = "HTML";
  // An edit without reply_markup removes the message's buttons (an answered question loses them).
  p["reply_markup"] = Keyboard(message.buttons);
  return p;
}

std::string Redact(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  for (std::size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at)) {
    text.replace(at, secret.size(), "<redacted>");
    at += 10;
  }
  return text;
}

}  // namespace sessionturn::telegram
