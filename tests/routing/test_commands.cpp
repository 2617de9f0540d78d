// Chat commands (routing/commands.hpp): both adapter forms, arguments, the asymmetry for unknown words.
#include <catch2/catch.hpp>

#include "routing/commands.hpp"

using namespace sessionturn;
using namespace sessionturn::routing;

namespace {

ChatCapabilities Telegram() {
  ChatCapabilities caps;
  caps.command_prefix = "/";
  return caps;
}

ChatCapabilities Slack() {
  return ChatCapabilities{};
}

ChatCommand Parsed(std::string_view text, const ChatCapabilities& caps, std::string_view bot = {}) {
  auto c = ParseCommand(text, caps, bot);
  REQUIRE(c.has_value());
  return *c;
}

}  // namespace

TEST_CASE("Every command word parses with the prefix", "[commands]") {
  const std::pair<const char*, CommandKind> cases[] = {
      {"/sessions", CommandKind::sessions}, {"/new", CommandKind::new_session}, {"/status", CommandKind::status},
      {"/stop", CommandKind::stop},         {"/suspend", CommandKind::suspend}, {"/resume", CommandKind::resume},
      {"/help", CommandKind::help}};
  for (const auto& [text, kind] : cases) {
    const ChatCommand c = Parsed(text, Telegram());
    CHECK(c.kind == kind);
    CHECK(c.error.empty());
    CHECK(c.word == std::string(text).substr(1));
  }
  const ChatCommand use = Parsed("/use fix-login", Telegram());
  CHECK(use.kind == CommandKind::use);
  CHECK(use.name == "fix-login");
  const ChatCommand del = Parsed("/delete old", Telegram());
  CHECK(del.kind == CommandKind::delete_session);
  CHECK(del.name == "old");
}

TEST_CASE("Every command word parses without a prefix", "[commands]") {
  CHECK(Parsed("sessions", Slack()).kind == CommandKind::sessions);
  CHECK(Parsed("new", Slack()).kind == CommandKind::new_session);
  CHECK(Parsed("new api-v2", Slack()).name == "api-v2");
  CHECK(Parsed("use api-v2", Slack()).kind == CommandKind::use);
  CHECK(Parsed("status", Slack()).kind == CommandKind::status);
  CHECK(Parsed("stop", Slack()).kind == CommandKind::stop);
  CHECK(Parsed("suspend", Slack()).kind == CommandKind::suspend);
  CHECK(Parsed("resume", Slack()).kind == CommandKind::resume);
  CHECK(Parsed("delete api-v2", Slack()).kind == CommandKind::delete_session);
  CHECK(Parsed("help", Slack()).kind == CommandKind::help);
}

TEST_CASE("Command words and names are read case-insensitively and around white space", "[commands]") {
  const ChatCommand c = Parsed("  /USE   Fix-Login \n", Telegram());
  CHECK(c.kind == CommandKind::use);
  CHECK(c.word == "use");
  CHECK(c.name == "fix-login");
  CHECK(Parsed("\xE3\x80\x80Status\xC2\xA0", Slack()).kind == CommandKind::status);  // ideographic and no-break spaces
  CHECK(Parsed("new\tMyProject", Slack()).name == "myproject");
}

TEST_CASE("/cmd@bot is ours when the bot matches or none is given, else another bot's", "[commands]") {
  CHECK(Parsed("/new@gravity_bot x", Telegram(), "gravity_bot").name == "x");
  CHECK(Parsed("/new@Gravity_Bot", Telegram(), "@gravity_bot").kind == CommandKind::new_session);
  CHECK(Parsed("/status@whatever_bot", Telegram()).kind == CommandKind::status);
  CHECK_FALSE(ParseCommand("/new@other_bot x", Telegram(), "gravity_bot").has_value());
  CHECK_FALSE(ParseCommand("/frobnicate@other_bot", Telegram(), "gravity_bot").has_value());
  CHECK_FALSE(ParseCommand("/new@", Telegram(), "gravity_bot").has_value());
}

TEST_CASE("An unknown word with the prefix is an unknown command, never a message", "[commands]") {
  const ChatCommand c = Parsed("/frobnicate now", Telegram());
  CHECK(c.kind == CommandKind::unknown);
  CHECK(c.word == "frobnicate");
  CHECK(Parsed("/goal take over", Telegram()).kind == CommandKind::unknown);
  CHECK(Parsed("/start", Telegram()).kind == CommandKind::unknown);
  CHECK(Parsed("/Weird@gravity_bot", Telegram(), "gravity_bot").word == "weird");
}

TEST_CASE("With the prefix, text that is not Telegram command syntax is a message", "[commands]") {
  for (const char* text : {"/path/to/file is broken", "/", "/ new", "/caf\xC3\xA9", "/new-session", "hello /new", "new",
                           "", "   ", "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" /* 33: one past Telegram's limit */}) {
    INFO(text);
    CHECK_FALSE(ParseCommand(text, Telegram()).has_value());
  }
}

TEST_CASE("Without a prefix, an unknown first word or a sentence is a message", "[commands]") {
  for (const char* text : {"frobnicate", "help me fix the login bug", "stop doing that", "use the other library",
                           "new approach: cache it", "status?", "/new", "", "delete a b", "please stop"}) {
    INFO(text);
    CHECK_FALSE(ParseCommand(text, Slack()).has_value());
  }
}

TEST_CASE("use and delete need a NAME", "[commands]") {
  const ChatCommand use = Parsed("/use", Telegram());
  CHECK(use.kind == CommandKind::use);
  CHECK(use.name.empty());
  CHECK_THAT(use.error, Catch::Contains("`/use NAME` needs a session name"));
  const ChatCommand del = Parsed("delete", Slack());
  CHECK(del.kind == CommandKind::delete_session);
  CHECK_THAT(del.error, Catch::Contains("`delete NAME` needs a session name"));
}

TEST_CASE("new takes an optional NAME", "[commands]") {
  const ChatCommand bare = Parsed("/new", Telegram());
  CHECK(bare.error.empty());
  CHECK(bare.name.empty());
  CHECK(Parsed("/new docs", Telegram()).name == "docs");
}

TEST_CASE("NAME is 1 to 40 of [a-z0-9-] after lower-casing", "[commands]") {
  CHECK(Parsed("/use " + std::string(40, 'a'), Telegram()).error.empty());
  CHECK(Parsed("/use a-1-B", Telegram()).name == "a-1-b");
  for (const std::string& name : {std::string(41, 'a'), std::string("my_project"), std::string("a.b"),
                                  std::string("caf\xC3\xA9"), std::string("a/b")}) {
    INFO(name);
    const ChatCommand c = Parsed("/use " + name, Telegram());
    CHECK(c.kind == CommandKind::use);
    CHECK(c.name.empty());
    CHECK_THAT(c.error, Catch::Contains("not a session name") && Catch::Contains("1 to 40"));
  }
}

TEST_CASE("Extra words are an error with the prefix", "[commands]") {
  const ChatCommand status = Parsed("/status now please", Telegram());
  CHECK(status.kind == CommandKind::status);
  CHECK_THAT(status.error, Catch::Contains("`/status` takes no arguments"));
  const ChatCommand use = Parsed("/use a b", Telegram());
  CHECK_THAT(use.error, Catch::Contains("Usage: `/use NAME`"));
  const ChatCommand fresh = Parsed("/new a b", Telegram());
  CHECK_THAT(fresh.error, Catch::Contains("Usage: `/new [NAME]`"));
}

TEST_CASE("A long message is told from a command by its first words", "[commands]") {
  // Only the first three words are looked at: what follows cannot turn a sentence into a command,
  // nor a command with too many words into a valid one.
  std::string tail;
  for (int i = 0; i < 20000; ++i) tail += " word";
  CHECK_FALSE(ParseCommand("help" + tail, Slack()).has_value());
  CHECK_FALSE(ParseCommand("new docs" + tail, Slack()).has_value());
  CHECK_THAT(Parsed("/use a" + tail, Telegram()).error, Catch::Contains("Usage: `/use NAME`"));
  CHECK_THAT(Parsed("/status" + tail, Telegram()).error, Catch::Contains("`/status` takes no arguments"));
  CHECK(Parsed("  /new \u2003 docs \n", Telegram()).name == "docs");
  CHECK(Parsed("new\u00A0docs", Slack()).name == "docs");
}

TEST_CASE("Command kinds have stable names", "[commands]") {
  CHECK(ToString(CommandKind::sessions) == "sessions");
  CHECK(ToString(CommandKind::new_session) == "new");
  CHECK(ToString(CommandKind::delete_session) == "delete");
  CHECK(ToString(CommandKind::help) == "help");
  CHECK(ToString(CommandKind::unknown) == "unknown");
}

TEST_CASE("HelpText lists every command in the adapter's form", "[commands]") {
  const std::string telegram = HelpText(Telegram());
  for (const char* usage : {"`/sessions`", "`/new [NAME]`", "`/use NAME`", "`/status`", "`/stop`", "`/suspend`",
                            "`/resume`", "`/delete NAME`", "`/help`"}) {
    CHECK_THAT(telegram, Catch::Contains(usage));
  }
  const std::string slack = HelpText(Slack());
  for (const char* usage : {"`sessions`", "`new [NAME]`", "`use NAME`", "`status`", "`stop`", "`suspend`", "`resume`",
                            "`delete NAME`", "`help`"}) {
    CHECK_THAT(slack, Catch::Contains(usage));
  }
  CHECK_THAT(slack, Catch::Contains("mention me first"));
  CHECK(slack.find('/') == std::string::npos);
}

TEST_CASE("Every usage in the help text parses back to its command", "[commands]") {
  for (const ChatCapabilities& caps : {Telegram(), Slack()}) {
    for (const char* example :
         {"sessions", "new", "new x", "use x", "status", "stop", "suspend", "resume", "delete x", "help"}) {
      const std::string text = caps.command_prefix + example;
      INFO(text);
      const auto c = ParseCommand(text, caps);
      REQUIRE(c.has_value());
      CHECK(c->kind != CommandKind::unknown);
      CHECK(c->error.empty());
      CHECK_THAT(HelpText(caps), Catch::Contains("`" + caps.command_prefix + c->word));
    }
  }
}
