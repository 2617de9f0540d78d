// render.hpp: every Markdown construct in each dialect, escaping, and the small public helpers.
// Splitting is in test_render_split.cpp, the randomized properties in test_render_property.cpp.
#include <catch2/catch.hpp>

#include <string>

#include <cmark-gfm.h>

#include "routing/render_arena.hpp"
#include "routing/render_check.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;
using testing_render::CheckTelegramHtml;
using testing_render::ValidUtf8;

namespace {

std::string Render(std::string_view md, MarkupDialect dialect) {
  RenderOptions o;
  o.dialect = dialect;
  o.max_length = 100000;
  o.unit = LengthUnit::code_points;
  auto parts = RenderReply(md, o);
  REQUIRE(parts);
  REQUIRE(parts->size() == 1);
  CHECK_FALSE((*parts)[0].plain_fallback);
  return (*parts)[0].text;
}

std::string Tg(std::string_view md) {
  std::string html = Render(md, MarkupDialect::telegram_html);
  INFO(html);
  CHECK(CheckTelegramHtml(html) == "");
  return html;
}
std::string Slack(std::string_view md) {
  return Render(md, MarkupDialect::slack_mrkdwn);
}
std::string Plain(std::string_view md) {
  return Render(md, MarkupDialect::plain);
}

}  // namespace

TEST_CASE("headings render as bold lines", "[render]") {
  CHECK(Tg("# Title *here*\n\ntext") == "<b>Title <i>here</i></b>\n\ntext");
  CHECK(Tg("Setext\n===") == "<b>Setext</b>");
  CHECK(Slack("## Title") == "*Title*");
  CHECK(Plain("### Title **x**") == "Title x");
}

TEST_CASE("nested emphasis and strikethrough", "[render]") {
  CHECK(Tg("**bold _it_ more** ~~gone~~") == "<b>bold <i>it</i> more</b> <s>gone</s>");
  CHECK(Tg("***both***") == "<b><i>both</i></b>");
  // Bold inside bold is one entity, not two (Telegram allows no style inside itself).
  CHECK(Tg("# A **b** c") == "<b>A b c</b>");
  CHECK(Slack("**bold _it_** ~strike~") == "*bold _it_* ~strike~");
  CHECK(Plain("**bold _it_** ~~strike~~") == "bold it strike");
}

TEST_CASE("code spans keep backticks and escape <&>", "[render]") {
  CHECK(Tg("`` a`b <&> ``") == "<code>a`b &lt;&amp;&gt;</code>");
  CHECK(Slack("`` a`b <&> ``") ==
        "`a\xCB\x8B"
        "b &lt;&amp;&gt;`");  // Slack ends code at any backtick
  CHECK(Plain("`` a`b <&> ``") == "a`b <&>");
  // Telegram's code holds nothing and sits in nothing but a quote: bold closes around it, a link
  // keeps its text plain.
  CHECK(Tg("**a `c` b**") == "<b>a </b><code>c</code><b> b</b>");
  CHECK(Tg("[`x`](https://e.test)") == "<a href=\"https://e.test\">x</a>");
  CHECK(Slack("[`x`](https://e.test)") == "<https://e.test|x>");
}

TEST_CASE("fenced code blocks keep their language", "[render]") {
  const std::string md = "```python\nif a < b & c:\n    print(\"x\")\n```";
  CHECK(Tg(md) == "<pre><code class=\"language-python\">if a &lt; b &amp; c:\n    print(\"x\")</code></pre>");
  CHECK(Slack(md) == "```\nif a &lt; b &amp; c:\n    print(\"x\")\n```");
  CHECK(Plain(md) == "if a < b & c:\n    print(\"x\")");
  CHECK(Tg("```c++ {.numbered}\nx\n```") == "<pre><code class=\"language-c++\">x</code></pre>");
  // A language name Telegram could not take is left out; the code stays.
  CHECK(Tg("```a\"b\nx\n```") == "<pre>x</pre>");
  CHECK(Tg("    indented\n    code") == "<pre>indented\ncode</pre>");
  CHECK(Slack("```\na ``` b\n```") == "```\na \xCB\x8B\xCB\x8B\xCB\x8B b\n```");
  CHECK(Tg("```\n```\n\ntext") == "text");  // an empty fence shows nothing
}

TEST_CASE("lists nest by indentation, ordered ones keep their numbers", "[render]") {
  const std::string md = "- one\n- two\n  - inner\n    1. deep\n- three\n\n7) seven\n8) eight";
  const std::string want =
      "\xE2\x80\xA2 one\n\xE2\x80\xA2 two\n  \xE2\x97\xA6 inner\n    1. deep\n\xE2\x80\xA2 three\n\n7) seven\n8) eight";
  CHECK(Tg(md) == want);
  CHECK(Slack(md) == want);
  CHECK(Plain(md) == want);
  // A loose list keeps its blank lines; an item's later paragraphs are indented under it.
  CHECK(Plain("1. a\n\n   more\n2. b") == "1. a\n\n   more\n\n2. b");
  CHECK(Tg("- **bold** item") == "\xE2\x80\xA2 <b>bold</b> item");
  // An item that starts with code shows its marker on its own line.
  CHECK(Tg("- ```\n  x\n  ```") == "\xE2\x80\xA2\n<pre>x</pre>");
}

TEST_CASE("task lists show their boxes", "[render]") {
  CHECK(Tg("- [ ] todo\n- [x] done") == "\xE2\x98\x90 todo\n\xE2\x98\x91 done");
  CHECK(Plain("1. [x] first") == "1. \xE2\x98\x91 first");
}

TEST_CASE("quotes: Telegram blockquote, Slack and plain '>'", "[render]") {
  CHECK(Tg("> quoted **b**\n> more\n\nafter") == "<blockquote>quoted <b>b</b>\nmore</blockquote>\n\nafter");
  // Telegram's quotes cannot nest: a nested one continues the outer.
  CHECK(Tg("> a\n> > b") == "<blockquote>a\n\nb</blockquote>");
  CHECK(Tg("> ```go\n> x := 1\n> ```") ==
        "<blockquote><pre><code class=\"language-go\">x := 1</code></pre></blockquote>");
  CHECK(Slack("> a\n> b") == "> a\n> b");
  CHECK(Slack("> *a\n> b*") == "> _a_\n> _b_");  // Slack's formatting does not cross lines
  CHECK(Plain("> a\n> > b") == "> a\n\n> > b");
}

TEST_CASE("links with & and | in URL and text", "[render]") {
  const std::string md = "[a & b | c](https://e.test/p?x=1&y=2|3)";
  CHECK(Tg(md) == "<a href=\"https://e.test/p?x=1&amp;y=2|3\">a &amp; b | c</a>");
  CHECK(Slack(md) == "<https://e.test/p?x=1&amp;y=2%7C3|a &amp; b | c>");
  CHECK(Plain(md) == "a & b | c (https://e.test/p?x=1&y=2|3)");
  CHECK(Tg("[q](<https://e.test/\"x\">)") == "<a href=\"https://e.test/&quot;x&quot;\">q</a>");
  // A URL the platform would not link (relative, javascript:) reads as text with the URL after it.
  CHECK(Tg("[click](javascript:alert(1))") == "click (javascript:alert(1))");
  CHECK(Slack("[doc](docs/x.md)") == "doc (docs/x.md)");
  CHECK(Slack("**[a](https://e.test)**") == "*<https://e.test|a>*");
  CHECK(Plain("[](https://e.test/x)") == "https://e.test/x");  // a link without text shows its URL
  CHECK(Tg("**[a](https://e.test)**") == "<a href=\"https://e.test\"><b>a</b></a>");
}

TEST_CASE("autolinks", "[render]") {
  CHECK(Tg("see https://e.test/a?b=1&c=2 and www.e.test") ==
        "see <a href=\"https://e.test/a?b=1&amp;c=2\">https://e.test/a?b=1&amp;c=2</a> and "
        "<a href=\"http://www.e.test\">www.e.test</a>");
  CHECK(Tg("<https://e.test>") == "<a href=\"https://e.test\">https://e.test</a>");
  CHECK(Tg("mail ada@e.test") == "mail ada@e.test");  // Telegram finds addresses itself
  CHECK(Slack("mail ada@e.test") == "mail <mailto:ada@e.test|ada@e.test>");
  CHECK(Plain("see https://e.test and ada@e.test") == "see https://e.test and ada@e.test");
}

TEST_CASE("tables render as aligned columns", "[render]") {
  const std::string md = "| Name | n |\n|:--|--:|\n| a & b | 1 |\n| long name | 12345 |";
  const std::string rows = "Name      |     n\n----------+------\na & b     |     1\nlong name | 12345";
  CHECK(Plain(md) == rows);
  CHECK(Tg(md) == "<pre>Name      |     n\n----------+------\na &amp; b     |     1\nlong name | 12345</pre>");
  CHECK(Slack(md) == "```\nName      |     n\n----------+------\na &amp; b     |     1\nlong name | 12345\n```");
  // GFM drops cells beyond the header's columns: their text stays, in the last cell.
  CHECK(Plain("| a | b |\n|--|--|\n| 1 | 2 | 3 \\| x | **4** |") ==
        "a | b\n--+-------------------\n1 | 2 | 3 \\| x | **4**");
  CHECK(Plain("> | a |\n> |--|\n> | 1 | 2 |") == "> a\n> -----\n> 1 | 2");
  CHECK(Plain("| a | b |\r|--|--|\r| 1 | 2 | 3 |") == "a | b\n--+------\n1 | 2 | 3");  // lone CR line ends
  // NUL (which cmark widens to U+FFFD) before the excess cells: their text is still whole characters.
  const std::string nul_row = Plain(std::string("| a |\n|--|\n| \0\0 | \xC3\xA9\xC3\xA9 |", 24));
  CHECK(ValidUtf8(nul_row));
  CHECK(nul_row.find("| \xC3\xA9\xC3\xA9") != std::string::npos);
  CHECK(Plain("| c |\n|:-:|\n| abc |\n| [l](https://e.test) |") ==
        "        c\n------------------\n       abc\nl (https://e.test)");
}

TEST_CASE("images show their alt text as a link", "[render]") {
  CHECK(Tg("![a diagram](https://e.test/d.png)") == "<a href=\"https://e.test/d.png\">a diagram</a>");
  CHECK(Tg("![](https://e.test/d.png)") == "<a href=\"https://e.test/d.png\">image</a>");
  CHECK(Slack("![alt](https://e.test/d.png)") == "<https://e.test/d.png|alt>");
  CHECK(Plain("![alt](https://e.test/d.png)") == "alt (https://e.test/d.png)");
}

TEST_CASE("raw HTML is shown as text, never passed through", "[render]") {
  CHECK(Tg("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;");
  CHECK(Tg("a <b>b</b> c") == "a &lt;b&gt;b&lt;/b&gt; c");
  CHECK(Tg("<div>\nx\n</div>") == "&lt;div&gt;\nx\n&lt;/div&gt;");
  CHECK(Slack("<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;");
  CHECK(Plain("a <i>b</i>") == "a <i>b</i>");
}

TEST_CASE("escaping: entities, a literal &amp (entity), Slack mentions", "[render]") {
  CHECK(Tg("AT&T &amp; \\&amp; 1 < 2 > 0") == "AT&amp;T &amp; &amp;amp; 1 &lt; 2 &gt; 0");
  CHECK(Plain("AT&T &amp; \\&amp;") == "AT&T & &amp;");
  // Slack reads <!channel>, <@U1> and <#C1> as mentions: escaped, they are text.
  CHECK(Slack("<!channel> <@U123> \\<#C1\\>") == "&lt;!channel&gt; &lt;@U123&gt; &lt;#C1&gt;");
  CHECK(Slack("a & b") == "a &amp; b");
  CHECK(Slack("\"q\" 'x'") == "\"q\" 'x'");  // nothing else is an entity to Slack
}

TEST_CASE("hard and soft breaks are newlines, rules a line", "[render]") {
  CHECK(Tg("a\nb\\\nc  \nd") == "a\nb\nc\nd");
  CHECK(Tg("**a\nb**") == "<b>a\nb</b>");
  CHECK(Slack("**a\nb**") == "*a*\n*b*");
  CHECK(Tg("a\n\n---\n\nb") ==
        "a\n\n\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80"
        "\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\n\nb");
}

TEST_CASE("an empty reply is one empty part", "[render]") {
  for (auto dialect : {MarkupDialect::plain, MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn}) {
    RenderOptions o;
    o.dialect = dialect;
    for (std::string_view md : {"", "  \n\n  ", "<!-- -->"}) {
      auto parts = RenderReply(md, o);
      REQUIRE(parts);
      REQUIRE(parts->size() == 1);
      if (md.empty() || md[0] == ' ') CHECK((*parts)[0].text.empty());
    }
  }
}

TEST_CASE("invalid UTF-8 becomes U+FFFD, output stays valid", "[render]") {
  const std::string md = "a\xFF\xC3(b **\xE2\x82** \xF0\x9F\x98";
  for (auto dialect : {MarkupDialect::plain, MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn}) {
    const std::string out = Render(md, dialect);
    CHECK(ValidUtf8(out));
    CHECK(out.find("\xEF\xBF\xBD") != std::string::npos);
  }
  CHECK(Plain("a\xFF"
              "b") ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(Plain(std::string("a\0b", 3)) ==
        "a\xEF\xBF\xBD"
        "b");  // cmark replaces NUL the same way
}

TEST_CASE("MeasureLength counts bytes, code points and UTF-16 units", "[render]") {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a é € 😀
  CHECK(MeasureLength(s, LengthUnit::bytes) == 10);
  CHECK(MeasureLength(s, LengthUnit::code_points) == 4);
  CHECK(MeasureLength(s, LengthUnit::utf16) == 5);
  CHECK(MeasureLength("\xFF\xF0\x9F", LengthUnit::code_points) == 3);  // each bad byte one unit
  CHECK(MeasureLength("\xFF\xF0\x9F", LengthUnit::utf16) == 3);
  CHECK(MeasureLength("", LengthUnit::utf16) == 0);
}

TEST_CASE("dialect and unit names", "[render]") {
  CHECK(ToString(MarkupDialect::plain) == "plain");
  CHECK(ToString(MarkupDialect::telegram_html) == "telegram_html");
  CHECK(ToString(MarkupDialect::slack_mrkdwn) == "slack_mrkdwn");
  CHECK(ToString(LengthUnit::bytes) == "bytes");
  CHECK(ToString(LengthUnit::code_points) == "code_points");
  CHECK(ToString(LengthUnit::utf16) == "utf16");
  CHECK(ToString(static_cast<LengthUnit>(9)) == "unknown");
}

TEST_CASE("EscapeMarkdown makes text show literally", "[render]") {
  const std::string texts[] = {
      "*not bold* _not it_ `not code` ~~no~~",
      "[not](a link) ![nor](an image) <b>tag</b> &amp; AT&T",
      "# not a heading\n- not a list\n1. not numbered\n> not quoted",
      "first line\n    not code\n\ttab",
      "a\\b | c | d\n---",
      "name_with_underscores and 2*3*4",
  };
  for (const std::string& text : texts) {
    INFO(text);
    CHECK(Plain(EscapeMarkdown(text)) == text);
  }
  CHECK(EscapeMarkdown("a*b") == "a\\*b");
  CHECK(EscapeMarkdown("plain words") == "plain words");
  CHECK(EscapeMarkdown("é 😀") == "é 😀");
  CHECK(Tg(EscapeMarkdown("<script>&")) == "&lt;script&gt;&amp;");
}

TEST_CASE("render: MarkdownCode shows its text exactly, whatever backticks it holds", "[render]") {
  CHECK(MarkdownCode("/delete fix-login") == "`/delete fix-login`");
  CHECK(MarkdownCode("a`b") == "``a`b``");
  CHECK(MarkdownCode("`x``") == "``` `x`` ```");
  CHECK(MarkdownCode("two\nlines") == "`two lines`");
  // Rendered, the text comes back exactly: a backslash in a code span is no escape.
  CHECK(Plain("Send " + MarkdownCode("/delete fix\\-login") + " again") == "Send /delete fix\\-login again");
}

TEST_CASE("render: a parse takes cmark's memory from this thread's arena and gives it all back",
          "[routing][render]") {
  using render::ParseArena;
  const std::string reply = "# Title\n\nSome *text* with `code` and a [link](https://example.com).\n\n"
                            "| a | b |\n|---|---|\n| 1 | 2 |\n\n```cpp\nint main() {}\n```\n\n- [x] done\n- ~~no~~\n";
  const std::string first = Render(reply, MarkupDialect::telegram_html);
  CHECK(ParseArena::BytesUsed() == 0);
  CHECK(ParseArena::BytesHeld() == 64 * 1024);  // the slab kept for the next parse
  {
    // While a scope is open, cmark's allocations are counted in it, and freeing gives nothing back.
    const ParseArena arena;
    cmark_node* node = cmark_node_new_with_mem(CMARK_NODE_PARAGRAPH, arena.mem());
    CHECK(ParseArena::BytesUsed() >= sizeof(void*));
    cmark_node_free(node);
    CHECK(ParseArena::BytesUsed() >= sizeof(void*));
    // A scope opened inside it hands out cmark's own allocator.
    const ParseArena inner;
    CHECK(inner.mem() == cmark_get_default_mem_allocator());
    CHECK(arena.mem() != cmark_get_default_mem_allocator());
  }
  CHECK(ParseArena::BytesUsed() == 0);
  // A reply far bigger than a slab (buffers grown by realloc past it, lines in slabs of their own)
  // renders the same text whatever the arena held before, and the big slabs go when it is done.
  std::string big;
  for (int i = 0; i < 2000; ++i) big += "Line " + std::to_string(i) + " with **bold** and `code` text.\n\n";
  const std::string once = Render(big, MarkupDialect::slack_mrkdwn);
  CHECK(ParseArena::BytesHeld() == 64 * 1024);
  CHECK(Render(big, MarkupDialect::slack_mrkdwn) == once);
  CHECK(once.find("Line 1999 with *bold* and `code` text.") != std::string::npos);
  CHECK(Render(reply, MarkupDialect::telegram_html) == first);
}
