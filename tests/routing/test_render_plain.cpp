// Reply rendering's fast path for plain text (render::ParsePlainText): whenever it takes a reply,
// its Doc must be exactly the one cmark-gfm makes of it (ParseMarkdownWithCmark), over generated
// text near every construct GFM has and over random bytes; and it must take enough of them that
// the property says something. RenderReply's shortcut for such a reply (PlainReplyText) must read
// as the general path writes that Doc.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "routing/render_doc.hpp"
#include "routing/render_split.hpp"
#include "routing/render_text.hpp"
#include "routing/render_tokens.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;

namespace {

struct Tally {
  int taken = 0;
  int checked = 0;
};

// The Doc written by the general path (tokens by words, then the splitter) in one part.
std::string GeneralWhole(const render::Doc& doc, MarkupDialect dialect) {
  constexpr std::size_t kRoom = 1 << 20;
  render::SplitOptions split;
  split.max_length = kRoom;
  split.soft_length = kRoom;
  split.unit = LengthUnit::bytes;
  split.entities = dialect != MarkupDialect::plain;
  auto parts = render::Split(render::RenderTokens(doc, dialect, {kRoom, LengthUnit::bytes, 0}), split);
  REQUIRE(parts);
  REQUIRE(parts->size() == 1);
  return (*parts)[0].text;
}

// RenderReply's shortcut (PlainReplyText) takes what ParsePlainText takes, and writes it as the
// general path writes that Doc in every dialect. In every dialect and unit, at a soft_length (or a
// max_length) it just fits, RenderReply gives it as the one part; one unit less goes the general way,
// cut in parts as the splitter cuts it.
void CheckReplyText(const std::string& md, const render::Doc& doc) {
  const auto text = render::PlainReplyText(md);
  REQUIRE(text);
  for (MarkupDialect dialect : {MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn, MarkupDialect::plain})
    CHECK(*text == GeneralWhole(doc, dialect));
  const auto dialect = static_cast<MarkupDialect>(md.size() % 3);
  for (LengthUnit unit : {LengthUnit::bytes, LengthUnit::code_points, LengthUnit::utf16}) {
    const std::size_t length = MeasureLength(*text, unit);
    for (bool by_soft : {false, true}) {
      INFO(ToString(dialect) << ", " << ToString(unit) << ", length " << length << (by_soft ? ", soft" : ", max"));
      RenderOptions o;
      o.dialect = dialect;
      o.unit = unit;
      o.max_length = std::max(kMinPartLength, length) + (by_soft ? 40 : 0);
      o.soft_length = by_soft ? std::max(kMinPartLength, length) : 0;
      auto fits = RenderReply(md, o);
      REQUIRE(fits);
      REQUIRE(fits->size() == 1);
      CHECK((*fits)[0].text == *text);
      CHECK_FALSE((*fits)[0].plain_fallback);
      if (length <= kMinPartLength) continue;
      (by_soft ? o.soft_length : o.max_length) = length - 1;
      render::SplitOptions split;
      split.max_length = o.max_length;
      split.soft_length = o.soft_length ? o.soft_length : o.max_length;
      split.unit = unit;
      split.entities = dialect != MarkupDialect::plain;
      auto general = render::Split(render::RenderTokens(doc, dialect, {o.max_length, unit, 0}), split);
      REQUIRE(general);
      auto cut = RenderReply(md, o);
      REQUIRE(cut);
      if (general->size() == 1) {
        // No place to cut within soft_length, and the whole within max_length: one part all the same.
        REQUIRE(cut->size() == 1);
        CHECK((*cut)[0].text == (*general)[0].text);
      } else {
        CHECK(cut->size() > 1);
      }
    }
  }
}

void Compare(const std::string& raw, Tally& tally) {
  const std::string md = render::SanitizeUtf8(raw);
  ++tally.checked;
  const auto plain = render::ParsePlainText(md);
  INFO("[" << md << "]");
  if (!plain) {
    CHECK_FALSE(render::PlainReplyText(md));
    return;
  }
  ++tally.taken;
  CHECK(*plain == render::ParseMarkdownWithCmark(md));
  CheckReplyText(md, *plain);
}

// Pieces of text: plain words and punctuation, and everything that is, or is near, Markdown.
const std::vector<std::string_view> kPieces = {
    "echo", "#3:", "Done", "word", "a", "Z", "2024", "3", "1.", "2)", "10.5", "7)x", "x.", "(see", "it)", "\"q\"",
    "'s", "!", "?", ",", ";", ":", "/", "%", "$", "^", "{x}", "=", "+", "-", "--", "---", "===", "#", "##",
    "# ", "* ", "- ", "+ ", "> ", "*", "_", "__", "`", "```", "~", "~~", "[", "]", "[x]", "[ ] ", "![i](u)",
    "[a (b)]", "](", "][", "]:", "[^1]", "[x]:", "a]", "[a]\n(u)",
    "<", ">", "<b>", "&", "&amp;", "&#35;", "\\", "\\*", "|", "a|b", "|---|", "@", "a@b.co", "http", "http:",
    "http://x.test", "https://e.test/p", "://", "ftp://f", "mailto:a@b.c", "xmpp:a@b.c", "www", "www.",
    "www.e.test", "WWW.E.TEST", "wWw.x", ".www", "\t", "\r", "\r\n", "\x01", "\x7f", " ", "  ", "   ", "    ",
    "\n", "\n", "\n", "\n\n", "\n \n", "  \n", "\xC3\xA9", "\xF0\x9F\x98\x80", "\xC2\xA0", "\xE2\x80\x8B",
    "\xE2\x80\xAE", "\xE3\x80\x80", "\xFF", "\xC3", "www.\xC3\xA9", "1\xEF\xBC\x8E"};

}  // namespace

TEST_CASE("plain text is parsed as cmark-gfm parses it", "[render][plain]") {
  std::mt19937 rng(20261205);
  auto r = [&rng](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  Tally pieces, bytes;
  for (int round = 0; round < 20000; ++round) {
    std::string md;
    const int n = r(14) + 1;
    for (int i = 0; i < n; ++i) {
      // Mostly words and spaces, so that many texts are plain and the rest are plain but for one piece.
      const int kind = r(10);
      if (kind < 4) {
        md += kPieces[static_cast<std::size_t>(r(4))];
      } else if (kind < 7) {
        md += " ";
      } else if (kind < 8) {
        md += "\n";
      } else {
        md += kPieces[static_cast<std::size_t>(r(static_cast<int>(kPieces.size())))];
      }
    }
    Compare(md, pieces);
  }
  // Random bytes, weighted to the characters the fast path allows.
  const std::string_view common = "abcXYZ019 .,:;!?#'\"(/)[]-+=\n";
  for (int round = 0; round < 20000; ++round) {
    std::string md;
    const int n = r(40) + 1;
    for (int i = 0; i < n; ++i) {
      md += r(8) ? common[static_cast<std::size_t>(r(static_cast<int>(common.size())))] : static_cast<char>(r(256));
    }
    Compare(md, bytes);
  }
  for (const Tally* tally : {&pieces, &bytes}) {
    INFO(tally->taken << " of " << tally->checked << " taken by the fast path");
    CHECK(tally->taken * 20 > tally->checked);      // the property is checked on many texts...
    CHECK(tally->taken * 10 < tally->checked * 9);  // ...and the generator reaches past it
  }
}

TEST_CASE("the plain-text fast path takes plain replies and leaves Markdown to cmark", "[render][plain]") {
  for (std::string_view md : {"echo #3: round 2, thread 17", "Done.", "Yes (it is \"fixed\" now)!",
                              "2 files changed, 10 insertions(+)", "line one\nline two\n", "para one\n\npara two",
                              "\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80", "50% of $3 = 1.5; ok?",
                              "echo #2: [slack message from Ann (U17)]\nturn 2 of thread 17, t2-17"}) {
    INFO(md);
    const auto plain = render::ParsePlainText(md);
    REQUIRE(plain);
    CHECK(*plain == render::ParseMarkdownWithCmark(md));
    CheckReplyText(std::string(md), *plain);
  }
  CHECK(render::PlainReplyText("\n\na b\nc\n\n\nd\n") == "a b\nc\n\nd");
  const auto two = render::ParsePlainText("a b\nc\n\n\nd");
  REQUIRE(two);
  REQUIRE(two->blocks.size() == 2);
  REQUIRE(two->blocks[0].runs.size() == 3);
  CHECK(two->blocks[0].runs[1].kind == render::Run::Kind::soft_break);
  CHECK(two->blocks[1].runs[0].text == "d");
  for (std::string_view md :
       {"", "\n\n", "# title", "1. one", "3) three", "- item", "+ item", "> quote", "a *b*", "a_b_", "`code`",
        "[x](y)", "a [x][y]", "a [x]: y", "[x] y", "a <b>", "a & b", "a \\* b", "a | b", "~~s~~", "mail a@b.co",
        "see https://e.test", "see www.e.test", "WWW.E.TEST", " lead", "trail ", "hard  \nbreak", "tab\there",
        "cr\rhere", "a\n===", "a\n    code", "x\n- item", "x\n1. item", "!image", "=x", "-x", "#x"}) {
    INFO(md);
    CHECK_FALSE(render::ParsePlainText(md));
    CHECK_FALSE(render::PlainReplyText(md));
  }
}
