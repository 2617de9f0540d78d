// The Telegram wire format without I/O: updates into the router's model, Bot API answers into results
// and errors, the HTML fallback, outbound parameters, the secret comparison (chat/telegram_wire.hpp).
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

#include "chat/telegram_wire.hpp"

using namespace sessionturn;
using nlohmann::json;
namespace tg = sessionturn::telegram;

namespace {

const TelegramBotInfo kBot{777, "helper_bot", "Helper", false};

tg::ParsedUpdate Parse(const json& update) {
  auto parsed = tg::ParseUpdate(update, kBot);
  REQUIRE(parsed.has_value());
  return *parsed;
}

json PrivateMessage(std::string text) {
  return {{"update_id", 10},
          {"message",
           {{"message_id", 5},
            {"date", 1700000000},
            {"from", {{"id", 42}, {"is_bot", false}, {"first_name", "Ada"}, {"last_name", "Lovelace"}}},
            {"chat", {{"id", 42}, {"type", "private"}}},
            {"text", std::move(text)}}}};
}

}  // namespace

TEST_CASE("telegram wire: a private message becomes an InboundMessage", "[chat][telegram]") {
  auto u = Parse(PrivateMessage("hello"));
  CHECK(u.update_id == 10);
  REQUIRE(u.message);
  const InboundMessage& m = *u.message;
  CHECK(m.platform == "telegram");
  CHECK(m.chat == "42");
  CHECK(m.thread.empty());
  CHECK(m.message_id == "5");
  CHECK(m.event_id == "10");
  CHECK(m.author_id == "42");
  CHECK(m.author_name == "Ada Lovelace");
  CHECK(m.text == "hello");
  CHECK(m.is_private_chat);
  CHECK_FALSE(m.is_bot);
  CHECK_FALSE(m.is_self);
  CHECK(m.kind == MessageKind::new_message);
  CHECK(m.received == std::chrono::system_clock::time_point(std::chrono::seconds(1700000000)));
}

TEST_CASE("telegram wire: a date the clock cannot hold leaves the received time unset", "[chat][telegram]") {
  // Found by fuzz/telegram_update: 81,700,000,000 s overflowed the nanosecond clock.
  for (std::int64_t date : {std::int64_t{81700000000}, std::int64_t{-5}, std::numeric_limits<std::int64_t>::max()}) {
    auto update = PrivateMessage("hello");
    update["message"]["date"] = date;
    auto u = Parse(update);
    REQUIRE(u.message);
    CHECK(u.message->text == "hello");
    CHECK(u.message->received == std::chrono::system_clock::time_point{});
  }
}

TEST_CASE("telegram wire: mentions of the bot are found and removed, others kept", "[chat][telegram]") {
  auto group = [](std::string text) {
    json u = PrivateMessage(std::move(text));
    u["message"]["chat"] = {{"id", -100123}, {"type", "supergroup"}};
    return u;
  };
  auto m = *Parse(group("@Helper_Bot, what is 2+2?")).message;
  CHECK(m.mentions_bot);
  CHECK_FALSE(m.is_private_chat);
  CHECK(m.text == "what is 2+2?");
  m = *Parse(group("/status@helper_bot")).message;
  CHECK(m.mentions_bot);
  CHECK(m.text == "/status");
  m = *Parse(group("ask @helper_botty instead")).message;  // a longer name is someone else
  CHECK_FALSE(m.mentions_bot);
  CHECK(m.text == "ask @helper_botty instead");
  json by_id = group("hey Helper");
  by_id["message"]["entities"] = json::array({{{"type", "text_mention"}, {"offset", 4}, {"length", 6},
                                               {"user", {{"id", 777}, {"is_bot", true}, {"first_name", "Helper"}}}}});
  CHECK(Parse(by_id).message->mentions_bot);
}

TEST_CASE("telegram wire: a reply to the bot counts as addressing it", "[chat][telegram]") {
  json u = PrivateMessage("and then?");
  u["message"]["chat"] = {{"id", -5}, {"type", "group"}};
  u["message"]["reply_to_message"] = {{"message_id", 3}, {"from", {{"id", 777}, {"is_bot", true}}},
                                      {"chat", {{"id", -5}, {"type", "group"}}}};
  auto m = *Parse(u).message;
  CHECK(m.reply_to_message_id == "3");
  CHECK(m.mentions_bot);
}

TEST_CASE("telegram wire: forum topics are threads, General is thread 1, a topic root is no reply",
          "[chat][telegram]") {
  json u = PrivateMessage("in a topic");
  u["message"]["chat"] = {{"id", -1009}, {"type", "supergroup"}, {"is_forum", true}};
  u["message"]["message_thread_id"] = 17;
  u["message"]["is_topic_message"] = true;
  u["message"]["reply_to_message"] = {{"message_id", 17}, {"forum_topic_created", {{"name", "t"}}},
                                      {"chat", {{"id", -1009}, {"type", "supergroup"}}}};
  auto m = *Parse(u).message;
  CHECK(m.thread == "17");
  CHECK(m.reply_to_message_id.empty());
  CHECK_FALSE(m.mentions_bot);

  json general = PrivateMessage("in General");
  general["message"]["chat"] = {{"id", -1009}, {"type", "supergroup"}, {"is_forum", true}};
  CHECK(Parse(general).message->thread == "1");

  // A reply thread in a supergroup that is no forum is not a conversation of its own.
  json plain = PrivateMessage("a reply thread");
  plain["message"]["chat"] = {{"id", -1008}, {"type", "supergroup"}};
  plain["message"]["message_thread_id"] = 4;
  CHECK(Parse(plain).message->thread.empty());
}

TEST_CASE("telegram wire: captions are text, edits are edits, media without text is ignored with a reason",
          "[chat][telegram]") {
  json photo = PrivateMessage("");
  photo["message"].erase("text");
  photo["message"]["photo"] = json::array({{{"file_id", "x"}}});
  auto ignored = Parse(photo);
  CHECK_FALSE(ignored.message);
  CHECK_THAT(ignored.ignored, Catch::Contains("no text or caption"));

  photo["message"]["caption"] = "look at this";
  auto m = *Parse(photo).message;
  CHECK(m.text == "look at this");
  REQUIRE(m.attachments_text.size() == 1);
  CHECK_THAT(m.attachments_text[0], Catch::Contains("photo"));

  json edited = PrivateMessage("fixed text");
  edited["edited_message"] = edited["message"];
  edited["edited_message"]["edit_date"] = 1700000100;
  edited.erase("message");
  auto e = *Parse(edited).message;
  CHECK(e.kind == MessageKind::edited);
  CHECK(e.text == "fixed text");
  CHECK(e.received == std::chrono::system_clock::time_point(std::chrono::seconds(1700000100)));
}

TEST_CASE("telegram wire: the bot's own and other bots' messages are marked", "[chat][telegram]") {
  json self = PrivateMessage("mine");
  self["message"]["from"] = {{"id", 777}, {"is_bot", true}, {"first_name", "Helper"}};
  auto m = *Parse(self).message;
  CHECK(m.is_self);
  CHECK(m.is_bot);
  json anon = PrivateMessage("anonymous admin");
  anon["message"]["chat"] = {{"id", -7}, {"type", "supergroup"}};
  anon["message"]["sender_chat"] = {{"id", -7}, {"type", "supergroup"}, {"title", "Team"}};
  anon["message"]["from"] = {{"id", 1087968824}, {"is_bot", true}, {"first_name", "Group"}};
  m = *Parse(anon).message;
  CHECK(m.author_id == "-7");
  CHECK(m.author_name == "Team");
  CHECK_FALSE(m.is_bot);
}

TEST_CASE("telegram wire: a callback query becomes an InboundAction", "[chat][telegram]") {
  json u = {{"update_id", 11},
            {"callback_query",
             {{"id", "cb-1"},
              {"from", {{"id", 42}, {"first_name", "Ada"}}},
              {"data", "q:abc:0"},
              {"message", {{"message_id", 9}, {"chat", {{"id", 42}, {"type", "private"}}}}}}}};
  auto p = Parse(u);
  CHECK(p.callback_query_id == "cb-1");
  REQUIRE(p.action);
  CHECK(p.action->chat == "42");
  CHECK(p.action->message_id == "9");
  CHECK(p.action->data == "q:abc:0");
  CHECK(p.action->author_id == "42");
  CHECK(p.action->event_id == "11");

  u["callback_query"].erase("message");  // an inline message: not one of the router's
  auto inline_press = Parse(u);
  CHECK_FALSE(inline_press.action);
  CHECK_THAT(inline_press.ignored, Catch::Contains("inline message"));
}

TEST_CASE("telegram wire: unreadable updates are errors that say what is wrong", "[chat][telegram]") {
  auto not_json = tg::ParseUpdate(std::string_view("{nope"), kBot);
  REQUIRE_FALSE(not_json);
  CHECK(not_json.error().code == Errc::protocol_error);
  auto no_id = tg::ParseUpdate(json{{"message", json::object()}}, kBot);
  REQUIRE_FALSE(no_id);
  CHECK_THAT(no_id.error().message, Catch::Contains("update_id"));
  // An id whose next offset would overflow, or a negative one (a negative offset counts from the end).
  for (std::int64_t id : {INT64_MAX, std::int64_t{-5}}) {
    auto bad_id = tg::ParseUpdate(json{{"update_id", id}, {"poll", json::object()}}, kBot);
    REQUIRE_FALSE(bad_id);
    CHECK_THAT(bad_id.error().message, Catch::Contains("update_id " + std::to_string(id)));
  }
  auto no_chat = tg::ParseUpdate(json{{"update_id", 1}, {"message", {{"message_id", 1}, {"text", "x"}}}}, kBot);
  REQUIRE_FALSE(no_chat);
  CHECK_THAT(no_chat.error().message, Catch::Contains("chat.id"));
  auto other = Parse(json{{"update_id", 2}, {"poll", json::object()}});
  CHECK_THAT(other.ignored, Catch::Contains("poll"));
}

TEST_CASE("telegram wire: Bot API answers map to results and errors", "[chat][telegram]") {
  auto ok = tg::ReadResponse("sendMessage", 200, R"({"ok":true,"result":{"message_id":3}})");
  REQUIRE(ok);
  CHECK((*ok)["message_id"] == 3);

  auto limited = tg::ReadResponse(
      "sendMessage", 429, R"({"ok":false,"error_code":429,"description":"Too Many Requests: retry after 7","parameters":{"retry_after":7}})");
  REQUIRE_FALSE(limited);
  CHECK(limited.error().code == Errc::unavailable);
  CHECK(limited.error().retry_after == std::chrono::seconds(7));
  // A wait past any sense is capped at an hour, not overflowed.
  auto absurd = tg::ReadResponse(
      "sendMessage", 429, R"({"ok":false,"error_code":429,"description":"x","parameters":{"retry_after":9223372036854775807}})");
  REQUIRE_FALSE(absurd);
  CHECK(absurd.error().retry_after == std::chrono::hours(1));

  auto gone = tg::ReadResponse("editMessageText", 400,
                               R"({"ok":false,"error_code":400,"description":"Bad Request: message to edit not found"})");
  CHECK(gone.error().code == Errc::not_found);
  auto same = tg::ReadResponse(
      "editMessageText", 400, R"({"ok":false,"error_code":400,"description":"Bad Request: message is not modified: x"})");
  CHECK(tg::IsNotModified(same.error()));
  auto entities = tg::ReadResponse(
      "sendMessage", 400,
      R"({"ok":false,"error_code":400,"description":"Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0"})");
  CHECK(tg::IsEntityParseError(entities.error()));
  CHECK(entities.error().code == Errc::invalid_argument);
  auto token = tg::ReadResponse("getMe", 401, R"({"ok":false,"error_code":401,"description":"Unauthorized"})");
  CHECK(token.error().code == Errc::unauthorized);
  auto conflict = tg::ReadResponse("getUpdates", 409, R"({"ok":false,"error_code":409,"description":"Conflict: x"})");
  CHECK(conflict.error().code == Errc::conflict);
  auto long_text = tg::ReadResponse("sendMessage", 400, R"({"ok":false,"error_code":400,"description":"Bad Request: message is too long"})");
  CHECK(long_text.error().code == Errc::too_large);
  // A proxy's HTML error page: the status decides, the Retry-After header counts.
  auto bad_gateway = tg::ReadResponse("getUpdates", 502, "<html>502 Bad Gateway</html>", "3");
  CHECK(bad_gateway.error().code == Errc::unavailable);
  CHECK(bad_gateway.error().retry_after == std::chrono::seconds(3));
  // An error_code no HTTP status could be is not narrowed into one (2^32 + 429 is not a rate limit).
  auto wrapped = tg::ReadResponse("sendMessage", 400, R"({"ok":false,"error_code":4294967725,"description":"x"})");
  CHECK(wrapped.error().code == Errc::invalid_argument);
  CHECK(wrapped.error().http_status == 400);
  CHECK(wrapped.error().retry_after == std::chrono::milliseconds(0));
  auto garbage = tg::ReadResponse("getMe", 200, "not json");
  CHECK(garbage.error().code == Errc::protocol_error);
}

TEST_CASE("telegram wire: HTML falls back to the text Telegram would show", "[chat][telegram]") {
  CHECK(tg::HtmlToPlain("<b>bold</b> &amp; <a href=\"x\">link</a> &lt;tag&gt; &quot;q&quot;") ==
        "bold & link <tag> \"q\"");
  CHECK(tg::HtmlToPlain("&#169; &#x1F600;") == "\u00a9 \U0001F600");
  CHECK(tg::HtmlToPlain("a & b; 1 < 2") == "a & b; 1 < 2");  // not entities or tags: kept
  CHECK(tg::HtmlToPlain("&#xD800;") == "\uFFFD");             // a lone surrogate is no character
}

TEST_CASE("telegram wire: outbound parameters", "[chat][telegram]") {
  OutboundMessage m{"<b>hi</b>", {{{"Yes", "q:1:0"}, {"No", "q:1:1"}}}, "12"};
  json p = tg::SendParams({"telegram", "", "-100", "17"}, m, true);
  CHECK(p["chat_id"] == -100);
  CHECK(p["parse_mode"] == "HTML");
  CHECK(p["message_thread_id"] == 17);
  CHECK(p["reply_parameters"]["message_id"] == 12);
  CHECK(p["reply_parameters"]["allow_sending_without_reply"] == true);
  CHECK(p["reply_markup"]["inline_keyboard"][0][1]["callback_data"] == "q:1:1");
  json general = tg::SendParams({"telegram", "", "-100", "1"}, {"x", {}, ""}, false);
  CHECK_FALSE(general.contains("message_thread_id"));  // General: omitted
  CHECK_FALSE(general.contains("parse_mode"));
  CHECK_FALSE(general.contains("reply_markup"));
  CHECK(tg::SendParams({"telegram", "", "@channel", ""}, {"x", {}, ""}, false)["chat_id"] == "@channel");
  json edit = tg::EditParams({"telegram", "", "42", ""}, "9", {"done", {}, ""}, true);
  CHECK(edit["message_id"] == 9);
  CHECK(edit["reply_markup"]["inline_keyboard"].empty());  // an answered question loses its buttons
}

TEST_CASE("telegram wire: the token is redacted and secrets compare exactly", "[chat][telegram]") {
  CHECK(tg::Redact("POST http://x/bot1:AB/getMe: 1:AB", "1:AB") == "POST http://x/bot<redacted>/getMe: <redacted>");
  CHECK(tg::Redact("nothing here", "") == "nothing here");
  CHECK(SecretEquals("s3cret", "s3cret"));
  CHECK_FALSE(SecretEquals("s3cret", "s3cre"));
  CHECK_FALSE(SecretEquals("s3cret", "s3cret "));
  CHECK_FALSE(SecretEquals("", ""));  // no secret configured: nothing matches
}
