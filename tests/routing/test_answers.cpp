// Questions in chat (routing/answers.hpp): replies read as answers, the question message, buttons.
#include <catch2/catch.hpp>

#include "routing/answers.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;
using namespace sessionturn::routing;

namespace {

InputQuestion Pick(bool multi = false) {
  InputQuestion q;
  q.id = "question-1";
  q.header = "Database";
  q.question = "Which database should I use?";
  q.options = {{"Postgres", "the usual"}, {"SQLite", "one file"}, {"MySQL", ""}};
  q.multi_select = multi;
  return q;
}

InputQuestion Open() {
  InputQuestion q;
  q.id = "question-2";
  q.question = "What should the branch be called?";
  return q;
}

std::vector<std::string> Answer(std::string_view text, const InputQuestion& q) {
  auto a = ParseAnswer(text, q);
  REQUIRE(a.has_value());
  return *a;
}

std::string Refused(std::string_view text, const InputQuestion& q) {
  auto a = ParseAnswer(text, q);
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().code == Errc::invalid_argument);
  return a.error().message;
}

using Labels = std::vector<std::string>;

}  // namespace

TEST_CASE("A number picks that option's label", "[answers]") {
  CHECK(Answer("2", Pick()) == Labels{"SQLite"});
  CHECK(Answer(" 1 \n", Pick()) == Labels{"Postgres"});
  CHECK(Answer("03", Pick()) == Labels{"MySQL"});
}

TEST_CASE("Several numbers pick several options only for multi_select", "[answers]") {
  for (const char* text : {"1,3", "1 3", "1, 3", " 1 ,  3 ", "1,,3"}) {
    INFO(text);
    CHECK(Answer(text, Pick(true)) == Labels{"Postgres", "MySQL"});
    CHECK_THAT(Refused(text, Pick(false)), Catch::Contains("pick one of 1\xE2\x80\x93"
                                                           "3"));
  }
  CHECK(Answer("3, 1, 3", Pick(true)) == Labels{"MySQL", "Postgres"});  // in the order given, once each
}

TEST_CASE("A number with no option is an error naming the range", "[answers]") {
  CHECK_THAT(Refused("4", Pick()), Catch::Contains("no option 4") && Catch::Contains("1\xE2\x80\x93"
                                                                                     "3"));
  CHECK_THAT(Refused("0", Pick()), Catch::Contains("no option 0"));
  CHECK_THAT(Refused("1, 9", Pick(true)), Catch::Contains("no option 9: pick from 1\xE2\x80\x93"
                                                          "3"));
  CHECK_THAT(Refused("99999999999999999999999", Pick()), Catch::Contains("no option that large"));
  InputQuestion one = Pick();
  one.options.resize(1);
  CHECK_THAT(Refused("2", one), Catch::Contains("pick one of 1, or"));
}

TEST_CASE("A number with no option says how to answer with it as such", "[answers]") {
  CHECK_THAT(Refused("4", Pick()), Catch::Contains("or put your own answer in double quotes"));
  CHECK_THAT(Refused("1 3", Pick()), Catch::Contains("or put your own answer in double quotes"));
  CHECK(Answer("\"4\"", Pick()) == Labels{"4"});
  CHECK(Answer("  \"1, 3\"  ", Pick()) == Labels{"1, 3"});
  CHECK(Answer("\xE2\x80\x9C" "SQLite" "\xE2\x80\x9D", Pick()) == Labels{"SQLite"});  // typed quotes; not the option
  CHECK(Answer("\"sqlite\"", Pick()) == Labels{"sqlite"});
  CHECK_THAT(Refused("\" \"", Pick()), Catch::Contains("empty"));
  CHECK(Answer("\"", Pick()) == Labels{"\""});  // a lone quote is text
  CHECK(Answer("\"4", Pick()) == Labels{"\"4"});  // not enclosed: no numbers, so free text
  CHECK(Answer("\"a\" or \"b\"", Pick()) == Labels{"\"a\" or \"b\""});  // two pairs: as written
  CHECK(Answer("\xE2\x80\x9C" "a\xE2\x80\x9D or \xE2\x80\x9C" "b\xE2\x80\x9D", Pick()) ==
        Labels{"\xE2\x80\x9C" "a\xE2\x80\x9D or \xE2\x80\x9C" "b\xE2\x80\x9D"});
}

// A secret question's reply of numbers that are no option's is a PIN or a code: its own answer, taken
// as written and never shown back (not even in an error).
TEST_CASE("A secret question takes a number that is no option as its own answer", "[answers]") {
  InputQuestion secret = Pick();
  secret.secret = true;
  for (const char* pin : {"482193", "0", "99999999999999999999999", "12 34"}) {
    INFO(pin);
    CHECK(Answer(pin, secret) == Labels{pin});
  }
  CHECK(Answer("2", secret) == Labels{"SQLite"});  // an option's number is that option
  secret.multi_select = true;
  CHECK(Answer("2, 482193", secret) == Labels{"2, 482193"});
  CHECK(Answer("1, 3", secret) == Labels{"Postgres", "MySQL"});
}

TEST_CASE("An option's label picks it, trimmed and in any case", "[answers]") {
  CHECK(Answer("sqlite", Pick()) == Labels{"SQLite"});
  CHECK(Answer("  POSTGRES  ", Pick()) == Labels{"Postgres"});
  CHECK(Answer("sqlite, mysql", Pick(true)) == Labels{"SQLite", "MySQL"});
  // Several labels in a single-choice question are free text, as the runtime allows.
  CHECK(Answer("sqlite, mysql", Pick(false)) == Labels{"sqlite, mysql"});
}

TEST_CASE("A label is looked for before a number", "[answers]") {
  InputQuestion q;
  q.question = "How many workers?";
  q.options = {{"1", ""}, {"2", ""}, {"4", ""}, {"8", ""}};
  CHECK(Answer("4", q) == Labels{"4"});
  CHECK(Answer("3", q) == Labels{"4"});  // no label "3": option 3
}

TEST_CASE("Free text answers a question with options when it matches none", "[answers]") {
  CHECK(Answer("DuckDB, because it is embedded", Pick()) == Labels{"DuckDB, because it is embedded"});
  CHECK(Answer("2 of them", Pick()) == Labels{"2 of them"});
  CHECK(Answer("sqlite, duckdb", Pick(true)) == Labels{"sqlite, duckdb"});
}

TEST_CASE("A question without options takes the reply as written, trimmed", "[answers]") {
  CHECK(Answer("  feature/login-fix \n", Open()) == Labels{"feature/login-fix"});
  CHECK(Answer("2", Open()) == Labels{"2"});
  InputQuestion secret = Open();
  secret.secret = true;
  CHECK(Answer("hunter2", secret) == Labels{"hunter2"});
}

TEST_CASE("An empty reply is an error", "[answers]") {
  CHECK_THAT(Refused("", Pick()), Catch::Contains("empty"));
  CHECK_THAT(Refused(" \n\t", Open()), Catch::Contains("empty"));
}

TEST_CASE("FormatQuestion shows the header, the question, numbered options and a hint", "[answers]") {
  Event ev;
  ev.type = "input.requested";
  ev.questions = {Pick()};
  const std::string text = FormatQuestion(ev, ChatCapabilities{});
  CHECK(text == "**" + EscapeMarkdown("Database") + "**\n\n" + EscapeMarkdown("Which database should I use?") +
                    "\n\n1. **Postgres**: the usual\n2. **SQLite**: one file\n3. **MySQL**\n\n" +
                    "Reply with a number, an option's name or your own answer.");
}

TEST_CASE("FormatQuestion's hint follows the question and the platform", "[answers]") {
  Event ev;
  ev.questions = {Pick(true)};
  CHECK_THAT(FormatQuestion(ev, {}), Catch::Contains("one or more numbers (like `1, 3`)"));
  ChatCapabilities buttons;
  buttons.buttons = true;
  ev.questions = {Pick()};
  CHECK_THAT(FormatQuestion(ev, buttons), Catch::Contains("Tap a button or reply with a number"));
  ev.questions = {Open()};
  const std::string open = FormatQuestion(ev, buttons);
  CHECK_THAT(open, Catch::EndsWith("Reply with your answer."));
  CHECK_THAT(open, Catch::StartsWith("**The agent asks**\n\n"));
}

TEST_CASE("FormatQuestion says a secret answer will not be echoed", "[answers]") {
  Event ev;
  InputQuestion q = Open();
  q.secret = true;
  ev.questions = {q};
  CHECK_THAT(FormatQuestion(ev, {}), Catch::Contains("secret: the bot will not repeat it"));
  ev.questions = {Open()};
  CHECK_THAT(FormatQuestion(ev, {}), !Catch::Contains("secret"));
}

TEST_CASE("FormatQuestion numbers several questions", "[answers]") {
  Event ev;
  ev.questions = {Pick(), Open()};
  const std::string text = FormatQuestion(ev, {});
  CHECK_THAT(text, Catch::StartsWith("The agent has 2 questions: answer them one reply each, in order."));
  CHECK_THAT(text, Catch::Contains("**Question 1 of 2: " + EscapeMarkdown("Database") + "**"));
  CHECK_THAT(text, Catch::Contains("**Question 2 of 2**"));
}

TEST_CASE("FormatQuestion escapes what the agent wrote and keeps it on its lines", "[answers]") {
  Event ev;
  InputQuestion q;
  q.header = "*Bold*\nheader";
  q.question = "Run `rm -rf`?\n<b>really</b>";
  q.options = {{"**yes**", "[link](http://x)"}};
  ev.questions = {q};
  const std::string text = FormatQuestion(ev, {});
  CHECK_THAT(text, Catch::StartsWith("**" + EscapeMarkdown("*Bold* header") + "**"));
  CHECK_THAT(text, Catch::Contains(EscapeMarkdown("Run `rm -rf`?\n<b>really</b>")));
  CHECK_THAT(text, Catch::Contains("1. **" + EscapeMarkdown("**yes**") + "**: " + EscapeMarkdown("[link](http://x)")));
}

TEST_CASE("QuestionButtons makes one button per option with short opaque data", "[answers]") {
  ChatCapabilities caps;
  caps.buttons = true;
  const auto rows = QuestionButtons("17", Pick(), caps);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].size() == 1);
  CHECK(rows[0][0].label == "Postgres");
  CHECK(rows[0][0].data == "q:17:1");
  CHECK(rows[2][0].data == "q:17:3");
  for (const auto& row : rows) CHECK(row[0].data.size() <= caps.button_data_limit);
}

TEST_CASE("QuestionButtons makes none where a button cannot answer", "[answers]") {
  ChatCapabilities caps;
  caps.buttons = true;
  CHECK(QuestionButtons("1", Open(), caps).empty());
  CHECK(QuestionButtons("1", Pick(true), caps).empty());
  CHECK(QuestionButtons("1", Pick(), ChatCapabilities{}).empty());
  caps.button_data_limit = 6;  // "q:17:1" is 6 bytes: fits; "q:170:1" does not
  CHECK(QuestionButtons("17", Pick(), caps).size() == 3);
  CHECK(QuestionButtons("170", Pick(), caps).empty());
}

TEST_CASE("QuestionButtons bounds and cleans labels", "[answers]") {
  ChatCapabilities caps;
  caps.buttons = true;
  InputQuestion q = Pick();
  q.options = {{std::string(200, 'L'), ""}, {"a\nb\xE2\x80\xAE", ""}, {"\xE2\x80\x8B", ""}};
  const auto rows = QuestionButtons("1", q, caps);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0][0].label == std::string(63, 'L') + "\xE2\x80\xA6");
  CHECK(rows[1][0].label == "a b");
  CHECK(rows[2][0].label == "3");  // nothing visible left: its number
}

TEST_CASE("ParseButtonData reads back what QuestionButtons wrote", "[answers]") {
  ChatCapabilities caps;
  caps.buttons = true;
  for (const auto& row : QuestionButtons("q-7:x", Pick(), caps)) {
    const auto choice = ParseButtonData(row[0].data);
    REQUIRE(choice.has_value());
    CHECK(choice->question_id == "q-7:x");
  }
  const auto c = ParseButtonData("q:42:3");
  REQUIRE(c.has_value());
  CHECK(c->question_id == "42");
  CHECK(c->option == 3);
  for (const char* bad : {"", "q:", "q:42", "q::1", "q:42:", "q:42:0", "q:42:x", "q:42:1x", "x:42:1", "q:42:-1"}) {
    INFO(bad);
    CHECK_FALSE(ParseButtonData(bad).has_value());
  }
}

TEST_CASE("FormatQuestion keeps each option on one bounded line", "[answers]") {
  Event ev;
  InputQuestion q = Pick();
  q.options = {{"a\nb", std::string(1000, 'd') + "\nsecond line"}};
  ev.questions = {q};
  const std::string text = FormatQuestion(ev, {});
  CHECK_THAT(text, Catch::Contains("1. **a b**: " + std::string(499, 'd') + "\xE2\x80\xA6\n"));
}
