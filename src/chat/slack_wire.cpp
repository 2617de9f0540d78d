// Slack's inbound wire format (chat/slack_wire.hpp): Socket Mode envelopes, Events API events,
// interactivity, slash commands, form bodies and message text. Web API answers, signatures and Block
// Kit are in slack_web.cpp.
#include "chat/slack_wire.hpp"

#include <algorithm>
#include <cctype>

namespace sessionturn::slack {

using nlohmann::json;

namespace {

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// &lt; &gt; &amp; (the only escapes Slack puts in message text) decoded; anything else kept as is.
std::string DecodeEntities(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '&') {
      if (s.compare(i, 4, "&lt;") == 0) {
        out += '<';
        i += 3;
        continue;
      }
      if (s.compare(i, 4, "&gt;") == 0) {
        out += '>';
        i += 3;
        continue;
      }
      if (s.compare(i, 5, "&amp;") == 0) {
        out += '&';
        i += 4;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// One <...> token of Slack's markup as plain text.
std::string TokenToPlain(std::string_view inner, std::string_view bot_user_id, bool* mentioned) {
  std::string_view target = inner;
  std::string_view label;
  if (auto bar = inner.find('|'); bar != std::string_view::npos) {
    target = inner.substr(0, bar);
    label = inner.substr(bar + 1);
  }
  if (!target.empty() && target[0] == '@') {
    const std::string_view id = target.substr(1);
    if (!bot_user_id.empty() && id == bot_user_id) {
      if (mentioned) *mentioned = true;
      return {};
    }
    return "@" + DecodeEntities(label.empty() ? id : label);
  }
  if (!target.empty() && target[0] == '#') return "#" + DecodeEntities(label.empty() ? target.substr(1) : label);
  if (!target.empty() && target[0] == '!') {
    if (!label.empty()) return DecodeEntities(label);  // <!subteam^S1|@team>, <!date^...|fallback>
    std::string_view word = target.substr(1);
    word = word.substr(0, word.find('^'));
    return "@" + std::string(word);  // <!here>, <!channel>, <!everyone>
  }
  const std::string url = DecodeEntities(target);
  if (label.empty()) return url;
  std::string text = DecodeEntities(label);
  if (text == url || url.rfind("mailto:", 0) == 0) return text;
  return text + " (" + url + ")";
}

ThreadRef WhereOf(const std::string& team, const std::string& channel, const std::string& ts,
                  const std::string& thread_ts, bool im) {
  ThreadRef where{"slack", team, channel, {}};
  if (!thread_ts.empty() && thread_ts != ts) {
    where.thread = thread_ts;
  } else if (!im) {
    where.thread = thread_ts.empty() ? ts : thread_ts;  // a channel message starts its own thread
  }
  return where;
}

std::vector<std::string> AttachmentsText(const json& message) {
  std::vector<std::string> out;
  if (auto it = message.find("files"); it != message.end() && it->is_array()) {
    for (const json& f : *it) {
      std::string name = json_fields::String(f, "name");
      if (name.empty()) name = json_fields::String(f, "title");
      std::string text = "file " + (name.empty() ? std::string("(unnamed)") : name);
      if (const std::string preview = json_fields::String(f, "preview"); !preview.empty()) text += ":\n" + preview;
      out.push_back(std::move(text));
    }
  }
  if (auto it = message.find("attachments"); it != message.end() && it->is_array()) {
    for (const json& a : *it) {
      std::string text = json_fields::String(a, "text");
      if (text.empty()) text = json_fields::String(a, "fallback");
      if (!text.empty()) out.push_back(TextToPlain(text, {}));
    }
  }
  return out;
}

// The message-shaped part of an event (a message, an app_mention, or the new message inside a
// message_changed).
InboundMessage MessageOf(const json& m, const std::string& team, const std::string& channel, bool im,
                         const SlackBotInfo& bot) {
  InboundMessage msg;
  const std::string ts = json_fields::String(m, "ts");
  const std::string thread_ts = json_fields::String(m, "thread_ts");
  const ThreadRef where = WhereOf(team, channel, ts, thread_ts, im);
  msg.platform = where.platform;
  msg.workspace = where.workspace;
  msg.chat = where.chat;
  msg.thread = where.thread;
  msg.message_id = ts;
  if (!thread_ts.empty() && thread_ts != ts) msg.reply_to_message_id = thread_ts;
  const std::string bot_id = json_fields::String(m, "bot_id");
  msg.author_id = json_fields::String(m, "user");
  if (msg.author_id.empty()) msg.author_id = bot_id;
  msg.is_bot = !bot_id.empty() || json_fields::String(m, "subtype") == "bot_message";
  msg.is_self = (!bot.bot_id.empty() && bot_id == bot.bot_id) || (!bot.user_id.empty() && msg.author_id == bot.user_id);
  if (msg.is_bot) msg.author_name = json_fields::String(m, "username");
  bool mentioned = false;
  msg.text = TextToPlain(json_fields::String(m, "text"), bot.user_id, &mentioned);
  msg.mentions_bot = mentioned;
  msg.attachments_text = AttachmentsText(m);
  msg.is_private_chat = im;
  msg.received = std::chrono::system_clock::now();
  return msg;
}

Result<ParsedEvent> MessageEvent(const json& event, const std::string& team, const std::string& event_id,
                                 const SlackBotInfo& bot) {
  ParsedEvent out;
  const std::string channel = json_fields::String(event, "channel");
  const std::string subtype = json_fields::String(event, "subtype");
  const bool im = json_fields::String(event, "channel_type") == "im";
  if (channel.empty()) return Fail(Errc::protocol_error, "Slack message event without a channel");
  if (subtype.empty() || subtype == "file_share" || subtype == "thread_broadcast" || subtype == "bot_message" ||
      subtype == "me_message") {
    if (json_fields::String(event, "ts").empty()) return Fail(Errc::protocol_error, "Slack message event without a ts");
    out.message = MessageOf(event, team, channel, im, bot);
  } else if (subtype == "message_changed") {
    const json& inner = event.contains("message") ? event["message"] : json();
    if (!inner.is_object() || json_fields::String(inner, "ts").empty()) {
      return Fail(Errc::protocol_error, "Slack message_changed event without the changed message");
    }
    const json& previous = event.contains("previous_message") ? event["previous_message"] : json();
    if (previous.is_object() && json_fields::String(previous, "text") == json_fields::String(inner, "text")) {
      out.ignored = "message " + json_fields::String(inner, "ts") + " in " + channel +
                    " changed but not its text (an unfurl or a reaction)";
      return out;
    }
    out.message = MessageOf(inner, team, channel, im, bot);
    out.message->kind = MessageKind::edited;
  } else if (subtype == "message_deleted") {
    const std::string deleted = json_fields::String(event, "deleted_ts");
    if (deleted.empty()) return Fail(Errc::protocol_error, "Slack message_deleted event without deleted_ts");
    json previous = event.contains("previous_message") && event["previous_message"].is_object()
                        ? event["previous_message"]
                        : json::object();
    previous["ts"] = deleted;
    out.message = MessageOf(previous, team, channel, im, bot);
    out.message->kind = MessageKind::deleted;
  } else {
    out.ignored = "a message event of subtype " + subtype + " in " + channel;
    return out;
  }
  out.message->event_id = event_id;
  return out;
}

}  // namespace

Result<Envelope> ParseEnvelope(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (!j.is_object()) return Fail(Errc::protocol_error, "a Socket Mode frame that is not a JSON object");
  Envelope e;
  e.type = json_fields::String(j, "type");
  if (e.type.empty()) return Fail(Errc::protocol_error, "a Socket Mode frame without a type");
  e.envelope_id = json_fields::String(j, "envelope_id");
  if (auto it = j.find("payload"); it != j.end()) e.payload = std::move(*it);
  if (auto it = j.find("retry_attempt"); it != j.end() && it->is_number_integer()) {
    e.retry_attempt = static_cast<int>(std::clamp<std::int64_t>(it->get<std::int64_t>(), 0, 1000));
  }
  e.retry_reason = json_fields::String(j, "retry_reason");
  e.reason = json_fields::String(j, "reason");
  const bool needs_id = e.type == "events_api" || e.type == "interactive" || e.type == "slash_commands";
  if (needs_id && e.envelope_id.empty()) {
    return Fail(Errc::protocol_error, "a Socket Mode " + e.type + " envelope without an envelope_id");
  }
  return e;
}

Result<ParsedEvent> ParseEventCallback(const json& payload, const SlackBotInfo& bot) {
  if (!payload.is_object()) return Fail(Errc::protocol_error, "a Slack event payload that is not an object");
  const std::string type = json_fields::String(payload, "type");
  ParsedEvent out;
  if (type == "url_verification") {
    if (!payload.contains("challenge") || !payload["challenge"].is_string()) {
      return Fail(Errc::protocol_error, "a Slack url_verification without a challenge");
    }
    out.challenge = payload["challenge"].get<std::string>();
    return out;
  }
  if (type == "app_rate_limited") {
    out.ignored = "Slack is rate-limiting this app's events (app_rate_limited): some events were not delivered";
    return out;
  }
  if (type != "event_callback") {
    return Fail(Errc::protocol_error, "a Slack payload of type \"" + type + "\" (expected event_callback)");
  }
  auto it = payload.find("event");
  if (it == payload.end() || !it->is_object()) return Fail(Errc::protocol_error, "a Slack event_callback without an event");
  const json& event = *it;
  std::string team = json_fields::String(payload, "team_id");
  if (team.empty()) team = json_fields::String(event, "team");
  const std::string event_id = json_fields::String(payload, "event_id");
  const std::string event_type = json_fields::String(event, "type");
  if (event_type == "message") return MessageEvent(event, team, event_id, bot);
  if (event_type == "app_mention") {
    const std::string channel = json_fields::String(event, "channel");
    if (channel.empty() || json_fields::String(event, "ts").empty()) {
      return Fail(Errc::protocol_error, "a Slack app_mention without a channel or ts");
    }
    out.message = MessageOf(event, team, channel, false, bot);
    out.message->mentions_bot = true;
    out.message->event_id = event_id;
    return out;
  }
  out.ignored = "a Slack event of type \"" + event_type + "\" (not handled)";
  return out;
}

Result<ParsedEvent> ParseInteractive(const json& payload, const SlackBotInfo& bot) {
  (void)bot;
  if (!payload.is_object()) return Fail(Errc::protocol_error, "a Slack interaction payload that is not an object");
  ParsedEvent out;
  const std::string type = json_fields::String(payload, "type");
  if (type != "block_actions") {
    out.ignored = "a Slack interaction of type \"" + type + "\" (not handled)";
    return out;
  }
  const json& actions = payload.contains("actions") ? payload["actions"] : json();
  if (!actions.is_array() || actions.empty() || !actions[0].is_object()) {
    return Fail(Errc::protocol_error, "a Slack block_actions payload without actions");
  }
  const json& action = actions[0];
  const json& user = payload.contains("user") ? payload["user"] : json();
  const json& container = payload.contains("container") ? payload["container"] : json();
  const json& message = payload.contains("message") ? payload["message"] : json();
  const json& channel = payload.contains("channel") ? payload["channel"] : json();
  const json& team = payload.contains("team") ? payload["team"] : json();
  InboundAction a;
  a.platform = "slack";
  a.workspace = json_fields::String(team, "id");
  if (a.workspace.empty()) a.workspace = json_fields::String(user, "team_id");
  a.chat = json_fields::String(channel, "id");
  if (a.chat.empty()) a.chat = json_fields::String(container, "channel_id");
  a.message_id = json_fields::String(container, "message_ts");
  if (a.message_id.empty()) a.message_id = json_fields::String(message, "ts");
  a.thread = json_fields::String(message, "thread_ts");
  if (a.thread.empty()) a.thread = json_fields::String(container, "thread_ts");
  if (a.thread == a.message_id && json_fields::String(container, "thread_ts").empty()) a.thread.clear();
  a.author_id = json_fields::String(user, "id");
  a.author_name = json_fields::String(user, "name");
  if (a.author_name.empty()) a.author_name = json_fields::String(user, "username");
  a.data = json_fields::String(action, "value");
  a.event_id = json_fields::String(action, "action_ts");
  if (a.event_id.empty()) a.event_id = json_fields::String(payload, "trigger_id");
  if (a.chat.empty() || a.message_id.empty() || a.author_id.empty()) {
    return Fail(Errc::protocol_error, "a Slack block_actions payload without its channel, message or user");
  }
  if (json_fields::String(action, "type") != "button" || a.data.empty()) {
    out.ignored = "a Slack " + json_fields::String(action, "type") + " action without a button value";
    return out;
  }
  out.response_url = json_fields::String(payload, "response_url");
  out.action = std::move(a);
  return out;
}

Result<ParsedEvent> ParseSlashCommand(const json& payload, const SlackBotInfo& bot) {
  if (!payload.is_object()) return Fail(Errc::protocol_error, "a Slack slash command that is not an object");
  const std::string channel = json_fields::String(payload, "channel_id");
  const std::string user = json_fields::String(payload, "user_id");
  const std::string trigger = json_fields::String(payload, "trigger_id");
  if (channel.empty() || user.empty() || trigger.empty()) {
    return Fail(Errc::protocol_error, "a Slack slash command without channel_id, user_id or trigger_id");
  }
  ParsedEvent out;
  out.is_slash_command = true;
  out.response_url = json_fields::String(payload, "response_url");
  InboundMessage msg;
  msg.platform = "slack";
  msg.workspace = json_fields::String(payload, "team_id");
  msg.chat = channel;
  msg.message_id = "cmd-" + trigger;  // a command is no message; its trigger is unique per invocation
  msg.event_id = msg.message_id;
  msg.author_id = user;
  msg.author_name = json_fields::String(payload, "user_name");
  msg.text = TextToPlain(json_fields::String(payload, "text"), bot.user_id);
  msg.mentions_bot = true;  // a slash command is addressed to the app
  msg.is_private_chat =
      (!channel.empty() && channel[0] == 'D') || json_fields::String(payload, "channel_name") == "directmessage";
  msg.received = std::chrono::system_clock::now();
  out.message = std::move(msg);
  return out;
}

Result<ParsedEvent> ParseEventsRequestBody(std::string_view content_type, std::string_view body,
                                           const SlackBotInfo& bot) {
  std::string type(content_type.substr(0, content_type.find(';')));
  std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
  type = std::string(TrimSpace(type));
  if (type == "application/json") {
    json j = json::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded()) return Fail(Errc::protocol_error, "a Slack events request whose body is not JSON");
    return ParseEventCallback(j, bot);
  }
  if (type != "application/x-www-form-urlencoded") {
    return Fail(Errc::protocol_error, "a Slack events request of content type \"" + type +
                                          "\" (expected JSON or a form)");
  }
  auto form = ParseForm(body);
  if (!form) return Fail(form.error());
  if (auto it = form->find("payload"); it != form->end()) {
    json j = json::parse(it->second, nullptr, false);
    if (!j.is_object()) return Fail(Errc::protocol_error, "a Slack interaction whose payload is not a JSON object");
    return ParseInteractive(j, bot);
  }
  if (form->count("command")) {
    json j = json::object();
    for (auto& [k, v] : *form) j[k] = v;
    return ParseSlashCommand(j, bot);
  }
  return Fail(Errc::protocol_error, "a Slack form request with neither payload nor command");
}

Result<std::map<std::string, std::string>> ParseForm(std::string_view body) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const auto decode = [&](std::string_view s, std::string* out) {
    out->reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '+') {
        *out += ' ';
      } else if (s[i] == '%') {
        if (i + 2 >= s.size()) return false;
        const int hi = hex(s[i + 1]);
        const int lo = hex(s[i + 2]);
        if (hi < 0 || lo < 0) return false;
        *out += static_cast<char>(hi * 16 + lo);
        i += 2;
      } else {
        *out += s[i];
      }
    }
    return true;
  };
  std::map<std::string, std::string> fields;
  while (!body.empty()) {
    const auto amp = body.find('&');
    const std::string_view pair = body.substr(0, amp);
    body = amp == std::string_view::npos ? std::string_view() : body.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    std::string name, value;
    if (!decode(pair.substr(0, eq), &name) ||
        (eq != std::string_view::npos && !decode(pair.substr(eq + 1), &value))) {
      return Fail(Errc::protocol_error, "a form body with a malformed percent escape");
    }
    fields[std::move(name)] = std::move(value);
  }
  return fields;
}

std::string FormEncode(const std::map<std::string, std::string>& fields) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out += '&';
    for (const std::string* s : {&name, &value}) {
      for (unsigned char c : *s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
          out += static_cast<char>(c);
        } else {
          out += '%';
          out += kHex[c >> 4];
          out += kHex[c & 15];
        }
      }
      if (s == &name) out += '=';
    }
  }
  return out;
}

std::string TextToPlain(std::string_view text, std::string_view bot_user_id, bool* mentioned) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t open = text.find('<', i);
    const std::size_t close = open == std::string_view::npos ? open : text.find('>', open);
    if (open == std::string_view::npos || close == std::string_view::npos) {
      out += DecodeEntities(text.substr(i));
      break;
    }
    out += DecodeEntities(text.substr(i, open - i));
    out += TokenToPlain(text.substr(open + 1, close - open - 1), bot_user_id, mentioned);
    i = close + 1;
  }
  std::string_view trimmed = TrimSpace(out);
  // "<@bot>: do this" leaves ": do this".
  if (mentioned && *mentioned && !trimmed.empty() && (trimmed.front() == ':' || trimmed.front() == ',')) {
    trimmed = TrimSpace(trimmed.substr(1));
  }
  return std::string(trimmed);
}

}  // namespace sessionturn::slack
