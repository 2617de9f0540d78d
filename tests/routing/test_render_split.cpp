// render.hpp: splitting a reply into parts (RenderReply's max_length, soft_length, units, labels and
// the plain fallback).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "routing/render_check.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;
using testing_render::CheckTelegramHtml;
using testing_render::ValidUtf8;
using testing_render::WithoutLabel;

namespace {

RenderOptions Options(MarkupDialect dialect, std::size_t max, LengthUnit unit = LengthUnit::code_points) {
  RenderOptions o;
  o.dialect = dialect;
  o.max_length = max;
  o.unit = unit;
  return o;
}

// The parts, each checked: within the limit, valid UTF-8, labelled "(i/N)" when N > 1 (and only
// then), valid Telegram HTML. Returns them without their labels.
std::vector<std::string> Parts(std::string_view md, const RenderOptions& o) {
  auto result = RenderReply(md, o);
  REQUIRE(result);
  std::vector<std::string> texts;
  const std::size_t n = result->size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& text = (*result)[i].text;
    INFO("part " << i + 1 << "/" << n << ": " << text);
    CHECK(MeasureLength(text, o.unit) <= o.max_length);
    CHECK(ValidUtf8(text));
    const std::string body = WithoutLabel(text, i + 1, n);
    CHECK((body != text) == (n > 1 && o.label_parts));
    if (o.dialect == MarkupDialect::telegram_html) CHECK(CheckTelegramHtml(text) == "");
    texts.push_back(body);
  }
  return texts;
}

std::string Words(int n, const char* prefix = "word") {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? " " : "") + std::string(prefix) + std::to_string(i);
  return s;
}

std::string Join(const std::vector<std::string>& parts, const char* sep = " ") {
  std::string s;
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

}  // namespace

TEST_CASE("a long paragraph splits at spaces, words whole", "[render][split]") {
  const std::string md = Words(300);
  for (auto dialect : {MarkupDialect::plain, MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn}) {
    const auto parts = Parts(md, Options(dialect, 200));
    CHECK(parts.size() > 10);
    CHECK(Join(parts) == md);  // nothing lost, nothing cut inside a word, one space at each cut
    for (const auto& p : parts) CHECK(MeasureLength(p, LengthUnit::code_points) > 100);  // filled, not ragged
  }
}

TEST_CASE("a cut prefers a block boundary, then a line", "[render][split]") {
  const std::string a = Words(60, "a"), b = Words(60, "b");  // 229 characters each
  const auto parts = Parts(a + "\n\n" + b, Options(MarkupDialect::plain, 300));
  REQUIRE(parts.size() == 2);
  CHECK(parts[0] == a);
  CHECK(parts[1] == b);
  // Four lines of 69 characters in parts of 250: the cut falls after the third line, not mid-line.
  const std::string x = Words(20, "x"), y = Words(20, "y"), z = Words(20, "z"), w = Words(20, "w");
  const auto lines = Parts(x + "\n" + y + "\n" + z + "\n" + w, Options(MarkupDialect::plain, 250));
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == x + "\n" + y + "\n" + z);
  CHECK(lines[1] == w);
}

TEST_CASE("one huge word is cut between characters, never inside an entity", "[render][split]") {
  std::string word;
  for (int i = 0; i < 400; ++i) word += (i % 3 == 0) ? "&" : (i % 3 == 1) ? "\xC3\xA9" : "x";
  const auto tg = Parts(word, Options(MarkupDialect::telegram_html, 64, LengthUnit::bytes));
  CHECK(tg.size() > 10);
  std::string visible;
  for (const auto& p : tg) {
    std::string v;
    REQUIRE(CheckTelegramHtml(p, &v) == "");  // a cut inside "&amp;" would leave a bare '&'
    visible += v;
  }
  CHECK(visible == word);
  CHECK(Join(Parts(word, Options(MarkupDialect::plain, 50, LengthUnit::bytes)), "") == word);
}

TEST_CASE("a code block cut in two is closed and reopened with its language", "[render][split]") {
  std::string code;
  for (int i = 0; i < 60; ++i) code += "line " + std::to_string(i) + " of the code\n";
  const std::string md = "Intro.\n\n```rust\n" + code + "```\n\nOutro.";
  const auto tg = Parts(md, Options(MarkupDialect::telegram_html, 300));
  REQUIRE(tg.size() > 3);
  std::string lines;
  for (std::size_t i = 1; i + 1 < tg.size(); ++i) {
    INFO(tg[i]);
    CHECK(tg[i].rfind("<pre><code class=\"language-rust\">", 0) == 0);
    CHECK(tg[i].substr(tg[i].size() - 13) == "</code></pre>");
    std::string v;
    CheckTelegramHtml(tg[i], &v);
    lines += v + "\n";
  }
  CHECK(tg.front().rfind("Intro.", 0) == 0);
  CHECK(tg.back().find("Outro.") != std::string::npos);

  const auto slack = Parts(md, Options(MarkupDialect::slack_mrkdwn, 300));
  REQUIRE(slack.size() > 3);
  for (const auto& p : slack) {
    INFO(p);
    std::size_t fences = 0;
    for (std::size_t at = p.find("```"); at != std::string::npos; at = p.find("```", at + 3)) ++fences;
    CHECK(fences % 2 == 0);
  }
  CHECK(slack[1].rfind("```\nline", 0) == 0);
}

TEST_CASE("inline formatting across a cut is closed and reopened", "[render][split]") {
  const std::string md = "**" + Words(100) + "**";
  const auto tg = Parts(md, Options(MarkupDialect::telegram_html, 120));
  REQUIRE(tg.size() > 2);
  for (const auto& p : tg) {
    CHECK(p.rfind("<b>", 0) == 0);
    CHECK(p.substr(p.size() - 4) == "</b>");
  }
  const auto slack = Parts(md, Options(MarkupDialect::slack_mrkdwn, 120));
  for (const auto& p : slack) {
    CHECK(p.front() == '*');
    CHECK(p.back() == '*');
  }
  // A link cut in two links both halves.
  const auto link = Parts("[" + Words(40) + "](https://e.test/x)", Options(MarkupDialect::telegram_html, 150));
  REQUIRE(link.size() > 1);
  for (const auto& p : link) CHECK(p.rfind("<a href=\"https://e.test/x\">", 0) == 0);
}

TEST_CASE("Telegram's UTF-16 limit counts an emoji as two, never splits one", "[render][split]") {
  std::string md;
  for (int i = 0; i < 3000; ++i) md += "\xF0\x9F\x98\x80";  // 😀 x 3000: 6000 UTF-16 units, no spaces
  auto result = RenderReply(md, Options(MarkupDialect::telegram_html, 4096, LengthUnit::utf16));
  REQUIRE(result);
  REQUIRE(result->size() == 2);
  std::size_t emoji = 0;
  for (std::size_t i = 0; i < result->size(); ++i) {
    const std::string body = WithoutLabel((*result)[i].text, i + 1, 2);
    CHECK(MeasureLength((*result)[i].text, LengthUnit::utf16) <= 4096);
    CHECK(ValidUtf8(body));
    CHECK(body.size() % 4 == 0);
    emoji += body.size() / 4;
  }
  CHECK(emoji == 3000);
  CHECK(MeasureLength((*result)[0].text, LengthUnit::utf16) > 4080);  // filled to the limit

  // Emoji sequences (a family, a flag, a skin tone) stay whole when there is room.
  const std::string family = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";
  const std::string flag = "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5";
  const std::string thumb = "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD";
  std::string seq;
  for (int i = 0; i < 40; ++i) seq += family + flag + thumb;
  const auto parts = Parts(seq, Options(MarkupDialect::plain, 45, LengthUnit::utf16));
  std::string joined;
  for (const auto& p : parts) {
    std::string rest = p;  // a run of whole sequences
    while (!rest.empty()) {
      bool matched = false;
      for (const std::string* s : {&family, &flag, &thumb}) {
        if (rest.rfind(*s, 0) == 0) {
          rest = rest.substr(s->size());
          matched = true;
          break;
        }
      }
      INFO(p);
      REQUIRE(matched);
    }
    joined += p;
  }
  CHECK(joined == seq);
}

TEST_CASE("labels (i/N) only when there is more than one part", "[render][split]") {
  auto one = RenderReply("short", Options(MarkupDialect::plain, 100));
  REQUIRE(one);
  REQUIRE(one->size() == 1);
  CHECK((*one)[0].text == "short");

  auto many = RenderReply(Words(400), Options(MarkupDialect::plain, 100));
  REQUIRE(many);
  const std::size_t n = many->size();
  REQUIRE(n >= 10);  // two-digit labels fit too
  for (std::size_t i = 0; i < n; ++i) {
    const std::string label = "\n(" + std::to_string(i + 1) + "/" + std::to_string(n) + ")";
    const std::string& t = (*many)[i].text;
    CHECK(t.substr(t.size() - label.size()) == label);
    CHECK(t.size() <= 100);
  }

  RenderOptions unlabelled = Options(MarkupDialect::plain, 100);
  unlabelled.label_parts = false;
  const auto bare = Parts(Words(400), unlabelled);
  CHECK(Join(bare) == Words(400));
}

TEST_CASE("unusable options are refused, naming the option", "[render][split]") {
  for (std::size_t max : {std::size_t{0}, std::size_t{5}, kMinPartLength - 1}) {
    auto r = RenderReply("text", Options(MarkupDialect::telegram_html, max));
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::invalid_argument);
    CHECK_THAT(r.error().message, Catch::Contains("max_length"));
  }
  RenderOptions soft = Options(MarkupDialect::plain, 100);
  soft.soft_length = 10;
  auto r = RenderReply("text", soft);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("soft_length"));
  RenderOptions dialect = Options(static_cast<MarkupDialect>(7), 100);
  r = RenderReply("text", dialect);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("dialect"));
  CHECK(RenderReply(Words(50), Options(MarkupDialect::telegram_html, kMinPartLength)));
}

TEST_CASE("soft_length is preferred, max_length only to reach a boundary", "[render][split]") {
  RenderOptions o = Options(MarkupDialect::plain, 1000);
  o.soft_length = 100;
  for (const auto& p : Parts(Words(300), o)) CHECK(p.size() <= 100);
  // A word longer than soft_length: the part runs on to the space after it rather than cut it.
  const std::string longword(150, 'a');
  auto parts = Parts(longword + " b c", o);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0] == longword);
  // No boundary before max_length either: cut at soft_length.
  parts = Parts(std::string(1500, 'z'), o);
  for (const auto& p : parts) CHECK(p.size() <= 100);
  CHECK(Join(parts, "") == std::string(1500, 'z'));
}

TEST_CASE("markup that leaves no room falls back to plain text, losing nothing", "[render][split]") {
  // A link whose URL alone is longer than a part: its markup cannot be cut, so the block reads as
  // "text (url)" and the URL is cut like any long word.
  const std::string url = "https://e.test/" + std::string(300, 'u');
  auto result =
      RenderReply("see [the page](" + url + ") now\n\nnext **para**", Options(MarkupDialect::telegram_html, 100));
  REQUIRE(result);
  std::string visible;
  bool fell_back = false, formatted = false;
  for (std::size_t i = 0; i < result->size(); ++i) {
    const auto& part = (*result)[i];
    std::string v;
    REQUIRE(CheckTelegramHtml(part.text, &v) == "");
    visible += WithoutLabel(v, i + 1, result->size());
    fell_back = fell_back || part.plain_fallback;
    if (part.text.find("<b>para</b>") != std::string::npos) formatted = true;  // the next block keeps its markup
    CHECK(part.text.find("<a ") == std::string::npos);
  }
  CHECK(fell_back);
  CHECK(formatted);
  CHECK(testing_render::WithoutWhitespace(visible) == "seethepage(" + url + ")nownextpara");

  // A quote in a part too small for <blockquote> reads as "> " text.
  result = RenderReply("> quoted words here", Options(MarkupDialect::telegram_html, kMinPartLength));
  REQUIRE(result);
  CHECK((*result)[0].plain_fallback);
  CHECK((*result)[0].text.rfind("&gt; quoted", 0) == 0);
}

TEST_CASE("lists and quotes keep their prefixes across parts", "[render][split]") {
  std::string md;
  for (int i = 0; i < 30; ++i) md += "- item " + std::to_string(i) + " with some words\n";
  const auto parts = Parts(md, Options(MarkupDialect::slack_mrkdwn, 120));
  REQUIRE(parts.size() > 3);
  for (const auto& p : parts) CHECK(p.rfind("\xE2\x80\xA2 item", 0) == 0);  // cut between items

  const auto quote = Parts("> " + Words(60), Options(MarkupDialect::slack_mrkdwn, 100));
  REQUIRE(quote.size() > 2);
  for (const auto& p : quote) CHECK(p.rfind("> ", 0) == 0);  // a quote cut mid-line stays quoted
}

TEST_CASE("SplitText cuts plain text at paragraphs, lines and words and keeps every character", "[render][split]") {
  // Markdown characters are text here: nothing is parsed or escaped.
  std::string text = "# not a heading *not bold* <b>&amp;\n\n";
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i) + " \xF0\x9F\x98\x80 ü words\n";
  text += "\n" + std::string(300, 'x');  // one word longer than a part
  for (LengthUnit unit : {LengthUnit::bytes, LengthUnit::code_points, LengthUnit::utf16}) {
    auto parts = SplitText(text, 100, unit);
    REQUIRE(parts);
    REQUIRE(parts->size() > 5);
    std::string joined;
    for (std::size_t i = 0; i < parts->size(); ++i) {
      const std::string& p = (*parts)[i];
      INFO(p);
      CHECK(MeasureLength(p, unit) <= 100);
      CHECK(ValidUtf8(p));
      const std::string label = "\n(" + std::to_string(i + 1) + "/" + std::to_string(parts->size()) + ")";
      REQUIRE(p.size() >= label.size());
      CHECK(p.substr(p.size() - label.size()) == label);
      joined += p.substr(0, p.size() - label.size());
    }
    CHECK(testing_render::WithoutWhitespace(joined) == testing_render::WithoutWhitespace(text));
    CHECK((*parts)[0].rfind("# not a heading *not bold* <b>&amp;", 0) == 0);  // the first paragraph, verbatim
  }
  auto one = SplitText("short  text\n\nkept as is", 100, LengthUnit::utf16);
  REQUIRE(one);
  REQUIRE(one->size() == 1);
  CHECK((*one)[0] == "short  text\n\nkept as is");

  auto bad = SplitText("x", 10, LengthUnit::utf16);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::invalid_argument);
  CHECK(bad.error().message.find("max_length 10") != std::string::npos);
  auto invalid = SplitText("a\xFF" "b", 100, LengthUnit::bytes, false);
  REQUIRE(invalid);
  CHECK((*invalid)[0] == "a\xEF\xBF\xBD" "b");
}
