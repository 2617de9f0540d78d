// Slack's Web API side of the wire format (chat/slack_wire.hpp): request signatures, answers read into
// results or errors, outbound messages as Block Kit, users and thread history read from answers.
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <charconv>

#include "chat/slack_wire.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn::slack {

using nlohmann::json;

namespace {

// The longest prefix of `s` of at most `max` code points (never inside a UTF-8 sequence).
std::string_view CutCodePoints(std::string_view s, std::size_t max) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;  // a continuation byte
    if (count == max) return s.substr(0, i);
    ++count;
  }
  return s;
}

// The text cut into pieces of at most `max` code points, at line ends where a line allows it.
std::vector<std::string> Sections(std::string_view text, std::size_t max) {
  std::vector<std::string> out;
  while (!text.empty()) {
    std::string_view piece = CutCodePoints(text, max);
    if (piece.size() < text.size()) {
      const auto nl = piece.rfind('\n');
      if (nl != std::string_view::npos && nl > 0) piece = piece.substr(0, nl + 1);
    }
    out.emplace_back(piece);
    text.remove_prefix(piece.size());
  }
  return out;
}

bool TsLess(std::string_view a, std::string_view b) {
  const auto split = [](std::string_view ts) {
    const auto dot = ts.find('.');
    return std::pair(ts.substr(0, dot), dot == std::string_view::npos ? std::string_view() : ts.substr(dot + 1));
  };
  auto [ai, af] = split(a);
  auto [bi, bf] = split(b);
  if (ai.size() != bi.size()) return ai.size() < bi.size();
  if (ai != bi) return ai < bi;
  return af < bf;
}

}  // namespace

std::string Sign(std::string_view signing_secret, std::string_view timestamp, std::string_view body) {
  std::string base = "v0:";
  base.append(timestamp);
  base += ':';
  base.append(body);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), signing_secret.data(), static_cast<int>(signing_secret.size()),
       reinterpret_cast<const unsigned char*>(base.data()), base.size(), mac, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "v0=";
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[mac[i] >> 4];
    out += kHex[mac[i] & 15];
  }
  return out;
}

Status VerifySignature(std::string_view signing_secret, std::string_view timestamp, std::string_view signature,
                       std::string_view body, std::chrono::system_clock::time_point now,
                       std::chrono::seconds max_age) {
  if (signing_secret.empty()) {
    return Fail(Errc::unauthorized, "no signing secret is configured, so no request can be verified");
  }
  if (timestamp.empty() || signature.empty()) {
    return Fail(Errc::unauthorized, timestamp.empty() ? "the request has no X-Slack-Request-Timestamp"
                                                      : "the request has no X-Slack-Signature");
  }
  std::int64_t seconds = 0;
  auto [end, ec] = std::from_chars(timestamp.data(), timestamp.data() + timestamp.size(), seconds);
  if (ec != std::errc() || end != timestamp.data() + timestamp.size()) {
    return Fail(Errc::unauthorized, "X-Slack-Request-Timestamp is not a number of seconds");
  }
  const std::int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  // Compared without subtracting the untrusted value (a hostile timestamp must not overflow).
  if (seconds < now_s - max_age.count() || seconds > now_s + max_age.count()) {
    return Fail(Errc::unauthorized, "the request's timestamp is more than " + std::to_string(max_age.count()) +
                                        " s from now (stale or replayed)");
  }
  if (signature.rfind("v0=", 0) != 0) return Fail(Errc::unauthorized, "X-Slack-Signature is not a v0 signature");
  const std::string expected = Sign(signing_secret, timestamp, body);
  // The length of an HMAC-SHA256 in hex is public; the contents are compared in constant time.
  if (signature.size() != expected.size() || CRYPTO_memcmp(signature.data(), expected.data(), expected.size()) != 0) {
    return Fail(Errc::unauthorized, "X-Slack-Signature does not match the body (wrong signing secret, or forged)");
  }
  return {};
}

Error ErrorOf(std::string_view method, std::string_view error, int http_status, std::chrono::milliseconds retry_after) {
  const std::string m = "Slack " + std::string(method) + ": ";
  const std::string e(error);
  Error out(Errc::failed, m + (e.empty() ? "HTTP " + std::to_string(http_status) : e));
  out.http_status = http_status;
  static const char* const kAuth[] = {"invalid_auth", "not_authed", "account_inactive", "token_revoked",
                                      "token_expired", "no_permission_token", "invalid_token"};
  static const char* const kForbidden[] = {"missing_scope", "not_allowed_token_type", "no_permission",
                                           "not_in_channel", "is_archived", "channel_is_archived",
                                           "cant_update_message", "edit_window_closed", "restricted_action",
                                           "access_denied", "team_access_not_granted", "ekm_access_denied"};
  static const char* const kInvalid[] = {"invalid_blocks", "invalid_blocks_format", "no_text", "invalid_arguments",
                                         "missing_argument", "invalid_arg_name", "invalid_array_arg",
                                         "invalid_charset", "invalid_form_data", "invalid_post_type",
                                         "missing_post_type", "invalid_json", "json_not_object", "too_many_attachments",
                                         "invalid_cursor", "invalid_ts_latest", "invalid_ts_oldest"};
  const auto in = [&](const auto& list) {
    return std::find(std::begin(list), std::end(list), e) != std::end(list);
  };
  if (e == "ratelimited" || http_status == 429) {
    out.code = Errc::unavailable;
    out.retry_after = retry_after.count() > 0 ? retry_after : std::chrono::milliseconds(1000);
  } else if (in(kAuth)) {
    out.code = Errc::unauthorized;
  } else if (in(kForbidden)) {
    out.code = Errc::forbidden;
  } else if (e.size() > 10 && e.compare(e.size() - 10, 10, "_not_found") == 0) {
    out.code = Errc::not_found;
  } else if (e == "unknown_method") {
    out.code = Errc::not_found;
  } else if (e == "msg_too_long" || e == "msg_blocks_too_long" || e == "too_many_blocks") {
    out.code = Errc::too_large;
  } else if (in(kInvalid)) {
    out.code = Errc::invalid_argument;
  } else if (http_status >= 500 || e == "internal_error" || e == "fatal_error" || e == "service_unavailable" ||
             e == "request_timeout") {
    out.code = Errc::unavailable;
  } else if (http_status >= 400) {
    out.code = Errc::protocol_error;
  }
  return out;
}

Result<json> ReadResponse(std::string_view method, int http_status, std::string_view body,
                          std::string_view retry_after_header) {
  std::chrono::milliseconds retry_after{0};
  if (!retry_after_header.empty()) {
    std::int64_t s = 0;
    auto [end, ec] = std::from_chars(retry_after_header.data(), retry_after_header.data() + retry_after_header.size(), s);
    if (ec == std::errc() && s >= 0) retry_after = std::chrono::seconds(std::min<std::int64_t>(s, 3600));
  }
  json j = json::parse(body.begin(), body.end(), nullptr, false);
  // "ok" must be true or false: a string there (seen from the fuzzer) threw out of json::value.
  const auto ok = j.is_object() ? j.find("ok") : j.end();
  if (!j.is_object() || (ok != j.end() && !ok->is_boolean())) {
    if (http_status == 429 || http_status >= 500) return Fail(ErrorOf(method, "", http_status, retry_after));
    return Fail(Errc::protocol_error, "Slack " + std::string(method) + ": HTTP " + std::to_string(http_status) +
                                          (j.is_object() ? " with an \"ok\" that is not true or false"
                                                         : " with a body that is not a JSON object"));
  }
  if (ok != j.end() && ok->get<bool>() && http_status >= 200 && http_status < 300) return j;
  Error e = ErrorOf(method, json_fields::String(j, "error"), http_status, retry_after);
  if (auto it = j.find("errors"); it != j.end() && it->is_array() && !it->empty()) {
    e.message += " (" + it->dump(-1, ' ', false, json::error_handler_t::replace) + ")";
  }
  if (const std::string needed = json_fields::String(j, "needed"); !needed.empty())
    e.message += " (needs scope " + needed + ")";
  return Fail(std::move(e));
}

bool IsBlocksError(const Error& error) {
  return error.code == Errc::invalid_argument && error.message.find("invalid_blocks") != std::string::npos;
}

json Blocks(const OutboundMessage& message) {
  json blocks = json::array();
  for (std::string& section : Sections(message.text, kMaxSectionChars)) {
    if (section.find_first_not_of(" \n\t") == std::string::npos) continue;  // Slack refuses an empty section
    blocks.push_back({{"type", "section"}, {"text", {{"type", "mrkdwn"}, {"text", std::move(section)}}}});
  }
  std::size_t row_index = 0;
  for (const auto& row : message.buttons) {
    json elements = json::array();
    std::size_t col = 0;
    for (const Button& b : row) {
      if (elements.size() == kMaxActionsElements) break;
      std::string label(CutCodePoints(b.label, kMaxButtonTextChars));
      if (label.empty()) label = "?";
      elements.push_back({{"type", "button"},
                          {"text", {{"type", "plain_text"}, {"text", std::move(label)}, {"emoji", true}}},
                          {"action_id", "st-" + std::to_string(row_index) + "-" + std::to_string(col++)},
                          {"value", b.data.substr(0, kMaxButtonValueBytes)}});
    }
    if (!elements.empty()) {
      blocks.push_back({{"type", "actions"}, {"block_id", "st-row-" + std::to_string(row_index)},
                        {"elements", std::move(elements)}});
    }
    ++row_index;
  }
  // More than a message holds: the caller sends the text alone rather than lose any of it.
  if (blocks.size() > kMaxBlocks) return json::array();
  return blocks;
}

json PostParams(const ThreadRef& where, const OutboundMessage& message, bool blocks) {
  json p = {{"channel", where.chat},
            {"text", std::string(CutCodePoints(message.text, kMaxTextChars))},
            {"unfurl_links", false},
            {"unfurl_media", false}};
  if (!where.thread.empty()) p["thread_ts"] = where.thread;
  if (blocks) {
    json b = Blocks(message);
    if (!b.empty()) p["blocks"] = std::move(b);
  }
  return p;
}

json UpdateParams(const ThreadRef& where, std::string_view ts, const OutboundMessage& message, bool blocks) {
  json p = {{"channel", where.chat}, {"ts", std::string(ts)},
            {"text", std::string(CutCodePoints(message.text, kMaxTextChars))}};
  // Blocks left out would keep the old ones (and their buttons): an empty list replaces them.
  p["blocks"] = blocks ? Blocks(message) : json::array();
  return p;
}

std::string DisplayNameOf(const json& user) {
  const json& profile = user.is_object() && user.contains("profile") ? user["profile"] : json();
  for (std::string name : {json_fields::String(profile, "display_name"), json_fields::String(profile, "real_name"),
                           json_fields::String(user, "real_name"), json_fields::String(user, "name")}) {
    if (!name.empty()) return name;
  }
  return json_fields::String(user, "id");
}

std::vector<ThreadHistoryMessage> HistoryBefore(const json& messages, std::string_view before_ts, std::size_t max,
                                                const SlackBotInfo& bot) {
  std::vector<ThreadHistoryMessage> out;
  if (!messages.is_array()) return out;
  std::vector<const json*> sorted;
  for (const json& m : messages) {
    const std::string ts = json_fields::String(m, "ts");
    if (ts.empty() || (!before_ts.empty() && !TsLess(ts, before_ts))) continue;
    sorted.push_back(&m);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const json* a, const json* b) {
    return TsLess(json_fields::String(*a, "ts"), json_fields::String(*b, "ts"));
  });
  for (const json* mp : sorted) {
    const json& m = *mp;
    ThreadHistoryMessage h;
    h.is_bot = !json_fields::String(m, "bot_id").empty();
    h.author_name = json_fields::String(m, "user");  // an id: the adapter puts the names it knows in
    if (h.is_bot && !json_fields::String(m, "username").empty()) h.author_name = json_fields::String(m, "username");
    if (!bot.bot_id.empty() && json_fields::String(m, "bot_id") == bot.bot_id && !bot.user.empty())
      h.author_name = bot.user;
    if (h.author_name.empty()) h.author_name = h.is_bot ? "a bot" : "someone";
    h.text = TextToPlain(json_fields::String(m, "text"), bot.user_id);
    if (h.text.empty()) continue;
    out.push_back(std::move(h));
  }
  if (out.size() > max) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(max));
  return out;
}

}  // namespace sessionturn::slack
