// The Slack wire format without I/O: envelopes, events, interactivity and slash commands into the
// router's model; signatures (Slack's published example); Web API answers into results and errors;
// Block Kit for outbound messages (chat/slack_wire.hpp).
#include <catch2/catch.hpp>

#include "chat/slack_wire.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;
using nlohmann::json;
namespace sl = sessionturn::slack;

namespace {

const SlackBotInfo kBot{"T0TEAM", "Team", "U0BOT", "B0BOT", "helper", "https://team.slack.com/"};

json Callback(json event, std::string event_id = "Ev001") {
  return {{"type", "event_callback"}, {"team_id", "T0TEAM"}, {"api_app_id", "A0APP"},
          {"event", std::move(event)}, {"event_id", std::move(event_id)}, {"event_time", 1700000000}};
}

InboundMessage MessageOf(const json& payload) {
  auto parsed = sl::ParseEventCallback(payload, kBot);
  REQUIRE(parsed.has_value());
  INFO(parsed->ignored);
  REQUIRE(parsed->message);
  return *parsed->message;
}

}  // namespace

TEST_CASE("slack wire: a direct message is a private chat without a thread", "[chat][slack]") {
  auto m = MessageOf(Callback({{"type", "message"}, {"channel", "D0ANN"}, {"channel_type", "im"}, {"user", "U0ANN"},
                               {"text", "fix the &lt;login&gt; page &amp; tests"}, {"ts", "1700000000.000100"}}));
  CHECK(m.platform == "slack");
  CHECK(m.workspace == "T0TEAM");
  CHECK(m.chat == "D0ANN");
  CHECK(m.thread.empty());
  CHECK(m.message_id == "1700000000.000100");
  CHECK(m.author_id == "U0ANN");
  CHECK(m.author_name.empty());  // the adapter asks users.info
  CHECK(m.text == "fix the <login> page & tests");
  CHECK(m.is_private_chat);
  CHECK_FALSE(m.mentions_bot);
  CHECK_FALSE(m.is_bot);
  CHECK(m.event_id == "Ev001");
  CHECK(m.kind == MessageKind::new_message);
}

TEST_CASE("slack wire: a channel mention starts a thread keyed by its ts, without the mention", "[chat][slack]") {
  auto m = MessageOf(Callback({{"type", "app_mention"}, {"channel", "C0GEN"}, {"user", "U0ANN"},
                               {"text", "<@U0BOT>: sessions"}, {"ts", "1700000001.000200"}}));
  CHECK(m.thread == "1700000001.000200");
  CHECK(m.text == "sessions");
  CHECK(m.mentions_bot);
  CHECK_FALSE(m.is_private_chat);
  CHECK(m.reply_to_message_id.empty());

  // The message event for the same ts (both are subscribed) has the same id: the router dedupes it.
  auto dup = MessageOf(Callback({{"type", "message"}, {"channel", "C0GEN"}, {"channel_type", "channel"},
                                 {"user", "U0ANN"}, {"text", "<@U0BOT> sessions"}, {"ts", "1700000001.000200"}},
                                "Ev002"));
  CHECK(dup.message_id == m.message_id);
  CHECK(dup.thread == m.thread);
  CHECK(dup.mentions_bot);
}

TEST_CASE("slack wire: a thread reply keeps the thread and replies to its parent", "[chat][slack]") {
  auto m = MessageOf(Callback({{"type", "message"}, {"channel", "C0GEN"}, {"channel_type", "channel"},
                               {"user", "U0BOB"}, {"text", "and the tests?"}, {"ts", "1700000005.000000"},
                               {"thread_ts", "1700000001.000200"}}));
  CHECK(m.thread == "1700000001.000200");
  CHECK(m.reply_to_message_id == "1700000001.000200");
  CHECK_FALSE(m.mentions_bot);  // the adapter decides from the threads it posted in

  auto im = MessageOf(Callback({{"type", "message"}, {"channel", "D0ANN"}, {"channel_type", "im"}, {"user", "U0ANN"},
                                {"text", "more"}, {"ts", "1700000006.000000"}, {"thread_ts", "1700000002.000000"}}));
  CHECK(im.thread == "1700000002.000000");
}

TEST_CASE("slack wire: markup becomes plain text", "[chat][slack]") {
  bool mentioned = false;
  CHECK(sl::TextToPlain("<@U0BOT> see <https://x.io/a?b=1&amp;c=2|the docs> and <https://y.io>", "U0BOT",
                        &mentioned) == "see the docs (https://x.io/a?b=1&c=2) and https://y.io");
  CHECK(mentioned);
  CHECK(sl::TextToPlain("ask <@U0ANN> in <#C0GEN|general> <!here> <!subteam^S1|@devs> <mailto:a@b.c|a@b.c>", "U0BOT") ==
        "ask @U0ANN in #general @here @devs a@b.c");
  CHECK(sl::TextToPlain("a < b without a close", "U0BOT") == "a < b without a close");
  CHECK(sl::TextToPlain("&amp;lt; stays one level", "") == "&lt; stays one level");
}

TEST_CASE("slack wire: edits and deletions", "[chat][slack]") {
  auto edit = MessageOf(Callback({{"type", "message"}, {"subtype", "message_changed"}, {"channel", "D0ANN"},
                                  {"channel_type", "im"}, {"hidden", true}, {"ts", "1700000010.000000"},
                                  {"message", {{"type", "message"}, {"user", "U0ANN"}, {"text", "new text"},
                                               {"ts", "1700000000.000100"}, {"edited", {{"user", "U0ANN"}}}}},
                                  {"previous_message", {{"user", "U0ANN"}, {"text", "old"}, {"ts", "1700000000.000100"}}}}));
  CHECK(edit.kind == MessageKind::edited);
  CHECK(edit.message_id == "1700000000.000100");
  CHECK(edit.text == "new text");

  auto unfurl = sl::ParseEventCallback(
      Callback({{"type", "message"}, {"subtype", "message_changed"}, {"channel", "D0ANN"}, {"channel_type", "im"},
                {"message", {{"user", "U0ANN"}, {"text", "same"}, {"ts", "1.0"}}},
                {"previous_message", {{"user", "U0ANN"}, {"text", "same"}, {"ts", "1.0"}}}}),
      kBot);
  REQUIRE(unfurl);
  CHECK_FALSE(unfurl->message);
  CHECK_THAT(unfurl->ignored, Catch::Contains("not its text"));

  auto del = MessageOf(Callback({{"type", "message"}, {"subtype", "message_deleted"}, {"channel", "C0GEN"},
                                 {"channel_type", "channel"}, {"deleted_ts", "1700000001.000200"},
                                 {"previous_message", {{"user", "U0ANN"}, {"text", "x"}}}}));
  CHECK(del.kind == MessageKind::deleted);
  CHECK(del.message_id == "1700000001.000200");
  CHECK(del.author_id == "U0ANN");
}

TEST_CASE("slack wire: bot messages, our own, joins and other events", "[chat][slack]") {
  auto own = MessageOf(Callback({{"type", "message"}, {"subtype", "bot_message"}, {"channel", "C0GEN"},
                                 {"bot_id", "B0BOT"}, {"text", "hi"}, {"ts", "2.0"}}));
  CHECK(own.is_bot);
  CHECK(own.is_self);
  auto other = MessageOf(Callback({{"type", "message"}, {"channel", "C0GEN"}, {"bot_id", "B0OTHER"},
                                   {"user", "U0OTHERBOT"}, {"text", "hi"}, {"ts", "3.0"}}));
  CHECK(other.is_bot);
  CHECK_FALSE(other.is_self);

  auto join = sl::ParseEventCallback(Callback({{"type", "message"}, {"subtype", "channel_join"},
                                               {"channel", "C0GEN"}, {"user", "U0ANN"}, {"ts", "4.0"}}),
                                     kBot);
  REQUIRE(join);
  CHECK_FALSE(join->message);
  CHECK_THAT(join->ignored, Catch::Contains("channel_join"));
  auto reaction = sl::ParseEventCallback(Callback({{"type", "reaction_added"}}), kBot);
  REQUIRE(reaction);
  CHECK_FALSE(reaction->message);

  auto files = MessageOf(Callback({{"type", "message"}, {"subtype", "file_share"}, {"channel", "D0ANN"},
                                   {"channel_type", "im"}, {"user", "U0ANN"}, {"text", "look"}, {"ts", "5.0"},
                                   {"files", json::array({{{"name", "trace.txt"}, {"preview", "panic: oops"}}})}}));
  REQUIRE(files.attachments_text.size() == 1);
  CHECK(files.attachments_text[0] == "file trace.txt:\npanic: oops");
}

TEST_CASE("slack wire: malformed payloads are errors that say what is missing", "[chat][slack]") {
  CHECK(sl::ParseEventCallback(json::array(), kBot).error().code == Errc::protocol_error);
  CHECK_THAT(sl::ParseEventCallback({{"type", "event_callback"}}, kBot).error().message, Catch::Contains("without an event"));
  CHECK_THAT(sl::ParseEventCallback(Callback({{"type", "message"}, {"user", "U0ANN"}}), kBot).error().message,
             Catch::Contains("without a channel"));
  CHECK_THAT(sl::ParseEventCallback({{"type", "block_actions"}}, kBot).error().message, Catch::Contains("block_actions"));
  auto challenge = sl::ParseEventCallback({{"type", "url_verification"}, {"challenge", "abc"}}, kBot);
  REQUIRE(challenge);
  CHECK(challenge->challenge == "abc");
}

TEST_CASE("slack wire: Socket Mode envelopes", "[chat][slack]") {
  auto hello = sl::ParseEnvelope(R"({"type":"hello","num_connections":1})");
  REQUIRE(hello);
  CHECK(hello->type == "hello");
  auto env = sl::ParseEnvelope(
      R"({"envelope_id":"e-1","type":"events_api","payload":{"type":"event_callback"},"retry_attempt":2,"retry_reason":"timeout","accepts_response_payload":false})");
  REQUIRE(env);
  CHECK(env->envelope_id == "e-1");
  CHECK(env->retry_attempt == 2);
  CHECK(env->payload["type"] == "event_callback");
  auto bye = sl::ParseEnvelope(R"({"type":"disconnect","reason":"refresh_requested"})");
  REQUIRE(bye);
  CHECK(bye->reason == "refresh_requested");
  CHECK_THAT(sl::ParseEnvelope(R"({"type":"events_api","payload":{}})").error().message, Catch::Contains("envelope_id"));
  CHECK(sl::ParseEnvelope("not json").error().code == Errc::protocol_error);
  CHECK(sl::ParseEnvelope(R"({"envelope_id":"x"})").error().code == Errc::protocol_error);
}

TEST_CASE("slack wire: a button press becomes an action", "[chat][slack]") {
  json payload = {{"type", "block_actions"},
                  {"user", {{"id", "U0ANN"}, {"username", "ann"}, {"name", "ann"}, {"team_id", "T0TEAM"}}},
                  {"team", {{"id", "T0TEAM"}}},
                  {"channel", {{"id", "C0GEN"}, {"name", "general"}}},
                  {"container", {{"type", "message"}, {"message_ts", "1700000002.000000"}, {"channel_id", "C0GEN"},
                                 {"thread_ts", "1700000001.000200"}}},
                  {"message", {{"ts", "1700000002.000000"}, {"thread_ts", "1700000001.000200"}}},
                  {"actions", json::array({{{"type", "button"}, {"action_id", "st-0-1"}, {"block_id", "st-row-0"},
                                            {"value", "q:7:1"}, {"action_ts", "1700000003.1"}}})},
                  {"trigger_id", "tr-1"},
                  {"response_url", "https://hooks.slack.com/actions/x"}};
  auto parsed = sl::ParseInteractive(payload, kBot);
  REQUIRE(parsed);
  REQUIRE(parsed->action);
  CHECK(parsed->action->chat == "C0GEN");
  CHECK(parsed->action->thread == "1700000001.000200");
  CHECK(parsed->action->message_id == "1700000002.000000");
  CHECK(parsed->action->author_id == "U0ANN");
  CHECK(parsed->action->data == "q:7:1");
  CHECK(parsed->action->event_id == "1700000003.1");

  payload["type"] = "view_submission";
  auto view = sl::ParseInteractive(payload, kBot);
  REQUIRE(view);
  CHECK_FALSE(view->action);
}

TEST_CASE("slack wire: Events API bodies: JSON, interactivity forms, slash command forms", "[chat][slack]") {
  const std::string slash = "token=x&team_id=T0TEAM&channel_id=C0GEN&channel_name=general&user_id=U0ANN&user_name=ann"
                            "&command=%2Fsessionturn&text=use+fix-login&trigger_id=13345.7&response_url=https%3A%2F%2Fh";
  auto cmd = sl::ParseEventsRequestBody("application/x-www-form-urlencoded", slash, kBot);
  REQUIRE(cmd);
  REQUIRE(cmd->message);
  CHECK(cmd->is_slash_command);
  CHECK(cmd->message->text == "use fix-login");
  CHECK(cmd->message->mentions_bot);
  CHECK(cmd->message->thread.empty());
  CHECK(cmd->message->message_id == "cmd-13345.7");
  CHECK(cmd->message->author_name == "ann");

  const std::string press = "payload=" + std::string("%7B%22type%22%3A%22shortcut%22%7D");
  auto shortcut = sl::ParseEventsRequestBody("application/x-www-form-urlencoded; charset=utf-8", press, kBot);
  REQUIRE(shortcut);
  CHECK_FALSE(shortcut->action);

  auto event = sl::ParseEventsRequestBody("Application/JSON; charset=utf-8",
                                          Callback({{"type", "app_mention"}, {"channel", "C0GEN"}, {"user", "U0ANN"},
                                                    {"text", "<@U0BOT> hi"}, {"ts", "9.0"}})
                                              .dump(),
                                          kBot);
  REQUIRE(event);
  REQUIRE(event->message);

  CHECK_THAT(sl::ParseEventsRequestBody("text/plain", "x", kBot).error().message, Catch::Contains("text/plain"));
  CHECK(sl::ParseEventsRequestBody("application/json", "{", kBot).error().code == Errc::protocol_error);
  CHECK_THAT(sl::ParseEventsRequestBody("application/x-www-form-urlencoded", "a=%zz", kBot).error().message,
             Catch::Contains("percent"));
  CHECK_THAT(sl::ParseEventsRequestBody("application/x-www-form-urlencoded", "a=%4", kBot).error().message,
             Catch::Contains("percent"));
}

TEST_CASE("slack wire: forms round-trip", "[chat][slack]") {
  std::map<std::string, std::string> fields = {{"text", "a b&c=d/é"}, {"user", "U1"}};
  auto back = sl::ParseForm(sl::FormEncode(fields));
  REQUIRE(back);
  CHECK(*back == fields);
}

TEST_CASE("slack wire: request signatures (Slack's published example)", "[chat][slack]") {
  // https://api.slack.com/authentication/verifying-requests-from-slack
  const std::string secret = "8f742231b10e8888abcd99yyyzzz85a5";
  const std::string ts = "1531420618";
  const std::string body =
      "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name="
      "foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks."
      "slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015."
      "47445629121.803a0bc887a14d10d2c447fce8b6703c";
  const std::string expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
  CHECK(sl::Sign(secret, ts, body) == expected);
  const auto at = std::chrono::system_clock::time_point(std::chrono::seconds(1531420618 + 30));
  CHECK(sl::VerifySignature(secret, ts, expected, body, at, std::chrono::seconds(300)));

  const auto msg = [&](std::string_view sec, std::string_view t, std::string_view sig, std::string_view b,
                       std::chrono::system_clock::time_point now) {
    auto s = sl::VerifySignature(sec, t, sig, b, now, std::chrono::seconds(300));
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::unauthorized);
    return s.error().message;
  };
  CHECK_THAT(msg(secret, ts, expected, body + "x", at), Catch::Contains("does not match"));
  CHECK_THAT(msg("another-secret", ts, expected, body, at), Catch::Contains("does not match"));
  CHECK_THAT(msg(secret, ts, expected, body, at + std::chrono::minutes(6)), Catch::Contains("stale"));
  CHECK_THAT(msg(secret, ts, expected, body, at - std::chrono::minutes(10)), Catch::Contains("stale"));
  CHECK_THAT(msg(secret, "", expected, body, at), Catch::Contains("Timestamp"));
  CHECK_THAT(msg(secret, ts, "", body, at), Catch::Contains("Signature"));
  CHECK_THAT(msg(secret, "12ab", expected, body, at), Catch::Contains("not a number"));
  // Extreme timestamps are refused without arithmetic on them (no overflow for UBSan to find).
  CHECK_THAT(msg(secret, "-9223372036854775808", expected, body, at), Catch::Contains("stale"));
  CHECK_THAT(msg(secret, "9223372036854775807", expected, body, at), Catch::Contains("stale"));
  CHECK_THAT(msg(secret, ts, "v1=" + expected.substr(3), body, at), Catch::Contains("not a v0"));
  CHECK_THAT(msg(secret, ts, expected.substr(0, 20), body, at), Catch::Contains("does not match"));
  CHECK_THAT(msg("", ts, expected, body, at), Catch::Contains("no signing secret"));
}

TEST_CASE("slack wire: Web API answers and their errors", "[chat][slack]") {
  auto ok = sl::ReadResponse("chat.postMessage", 200, R"({"ok":true,"ts":"1.2","channel":"C1"})");
  REQUIRE(ok);
  CHECK((*ok)["ts"] == "1.2");

  const auto err = [](int status, std::string body, std::string retry = {}) {
    auto r = sl::ReadResponse("chat.update", status, body, retry);
    REQUIRE_FALSE(r);
    return r.error();
  };
  auto limited = err(429, R"({"ok":false,"error":"ratelimited"})", "7");
  CHECK(limited.code == Errc::unavailable);
  CHECK(limited.retry_after == std::chrono::seconds(7));
  CHECK(err(200, R"({"ok":false,"error":"invalid_auth"})").code == Errc::unauthorized);
  auto scope = err(200, R"({"ok":false,"error":"missing_scope","needed":"chat:write"})");
  CHECK(scope.code == Errc::forbidden);
  CHECK_THAT(scope.message, Catch::Contains("chat:write"));
  CHECK(err(200, R"({"ok":false,"error":"message_not_found"})").code == Errc::not_found);
  CHECK(err(200, R"({"ok":false,"error":"msg_too_long"})").code == Errc::too_large);
  auto blocks = err(200, R"({"ok":false,"error":"invalid_blocks","errors":["must be less than 3001 characters"]})");
  CHECK(sl::IsBlocksError(blocks));
  CHECK_THAT(blocks.message, Catch::Contains("3001"));
  CHECK(err(503, "<html>busy</html>").code == Errc::unavailable);
  CHECK(err(200, "garbage").code == Errc::protocol_error);
  // An "ok" that is not a boolean (the slack_payload fuzzer's find: it threw out of the reader).
  auto odd = err(200, R"({"ok":"invalid_blocks","errors":["x"],"needed":"chat:write"})");
  CHECK(odd.code == Errc::protocol_error);
  CHECK_THAT(odd.message, Catch::Contains("\"ok\" that is not true or false"));
  CHECK(err(200, R"({"ok":1})").code == Errc::protocol_error);
  CHECK(err(503, R"({"ok":"no"})").code == Errc::unavailable);
  CHECK(err(200, R"({"ts":"1.2"})").code == Errc::failed);  // no "ok" at all: not a success
  CHECK(err(200, R"({"ok":false,"error":"something_new"})").code == Errc::failed);
}

TEST_CASE("slack wire: outbound messages as Block Kit", "[chat][slack]") {
  OutboundMessage m;
  m.text = "*Which one?*\n1. a\n2. b";
  m.buttons = {{{"Option A", "q:1:0"}, {"Option B", "q:1:1"}}, {{std::string(100, 'x'), "q:1:2"}}};
  ThreadRef where{"slack", "T0TEAM", "C0GEN", "1700000001.000200"};
  json p = sl::PostParams(where, m, true);
  CHECK(p["channel"] == "C0GEN");
  CHECK(p["thread_ts"] == "1700000001.000200");
  CHECK(p["text"] == m.text);
  REQUIRE(p["blocks"].size() == 3);
  CHECK(p["blocks"][0]["type"] == "section");
  CHECK(p["blocks"][0]["text"]["type"] == "mrkdwn");
  CHECK(p["blocks"][1]["type"] == "actions");
  CHECK(p["blocks"][1]["elements"][1]["value"] == "q:1:1");
  CHECK(p["blocks"][1]["elements"][0]["action_id"] != p["blocks"][1]["elements"][1]["action_id"]);
  CHECK(MeasureLength(p["blocks"][2]["elements"][0]["text"]["text"].get<std::string>(), LengthUnit::code_points) ==
        sl::kMaxButtonTextChars);

  // A text past a section's 3,000 characters spreads over sections, cut at line ends, none lost.
  OutboundMessage big;
  for (int i = 0; i < 400; ++i) big.text += "line " + std::to_string(i) + " ééééé\n";
  json blocks = sl::Blocks(big);
  std::string joined;
  for (const auto& b : blocks) {
    const std::string t = b["text"]["text"].get<std::string>();
    CHECK(MeasureLength(t, LengthUnit::code_points) <= sl::kMaxSectionChars);
    joined += t;
  }
  CHECK(blocks.size() > 1);
  CHECK(joined == big.text);

  json top = sl::PostParams(ThreadRef{"slack", "T0TEAM", "D0ANN", ""}, OutboundMessage{"hi", {}, "5.0"}, false);
  CHECK_FALSE(top.contains("thread_ts"));
  CHECK_FALSE(top.contains("blocks"));
  json update = sl::UpdateParams(where, "1.5", OutboundMessage{"done", {}, ""}, true);
  CHECK(update["ts"] == "1.5");
  CHECK(update["blocks"].size() == 1);  // the buttons are gone
  CHECK(sl::UpdateParams(where, "1.5", OutboundMessage{"done", {}, ""}, false)["blocks"].empty());
}

TEST_CASE("slack wire: names and thread history", "[chat][slack]") {
  CHECK(sl::DisplayNameOf({{"id", "U1"}, {"name", "ann"}, {"profile", {{"display_name", "Ann B"}}}}) == "Ann B");
  CHECK(sl::DisplayNameOf({{"id", "U1"}, {"name", "ann"}, {"profile", {{"display_name", ""}, {"real_name", "Ann Bee"}}}}) ==
        "Ann Bee");
  CHECK(sl::DisplayNameOf({{"id", "U1"}, {"name", "ann"}}) == "ann");
  json messages = json::array({{{"user", "U0ANN"}, {"text", "parent"}, {"ts", "100.000001"}},
                               {{"bot_id", "B0BOT"}, {"username", "helper"}, {"text", "working"}, {"ts", "100.000002"}},
                               {{"user", "U0BOB"}, {"text", "<@U0BOT> also this"}, {"ts", "99.000003"}},
                               {{"user", "U0ANN"}, {"text", "now"}, {"ts", "101.000000"}}});
  auto history = sl::HistoryBefore(messages, "101.000000", 2, kBot);
  REQUIRE(history.size() == 2);
  CHECK(history[0].text == "parent");  // sorted by ts, oldest first, the last two kept
  CHECK(history[1].text == "working");
  CHECK(history[1].is_bot);
}
