// Reply rendering's shortcut for a reply that fits one part: written by runs (Granularity::runs)
// and taken whole (SplitWhole), it must read exactly as the same Doc written by words and split
// (the general path), and the shortcut must be taken whenever that split needs no cut.
#include <catch2/catch.hpp>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "routing/render_doc.hpp"
#include "routing/render_gen.hpp"
#include "routing/render_split.hpp"
#include "routing/render_text.hpp"
#include "routing/render_tokens.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;
using testing_render::Generator;

namespace {

struct Counts {
  int whole = 0;     // the shortcut taken
  int one_part = 0;  // the general path made at most one part
  int over_bound = 0;  // the reply shows more characters than a part holds (ShownAtLeast)
  int checked = 0;
};

// Both paths over `md`; the shortcut, when taken, the same as the general path.
void Compare(const std::string& md, MarkupDialect dialect, LengthUnit unit, std::size_t max, std::size_t soft,
             Counts& counts) {
  const render::Doc doc = render::ParseMarkdown(render::SanitizeUtf8(md));
  render::SplitOptions split;
  split.max_length = max;
  split.soft_length = soft ? soft : max;
  split.unit = unit;
  split.entities = dialect != MarkupDialect::plain;
  const render::TokenLimits limits{max, unit, 0};
  const auto by_words = render::RenderTokens(doc, dialect, limits, render::Granularity::words);
  const auto by_runs = render::RenderTokens(doc, dialect, limits, render::Granularity::runs);
  INFO(ToString(dialect) << ", " << ToString(unit) << ", max " << max << ", soft " << soft << "\n" << md);
  auto general = render::Split(by_words, split);
  REQUIRE(general);
  const auto whole = render::SplitWhole(by_runs, split);
  ++counts.checked;
  CHECK(by_runs.size() <= by_words.size());
  if (whole) {
    ++counts.whole;
    REQUIRE(whole->size() == general->size());
    for (std::size_t i = 0; i < whole->size(); ++i) {
      CHECK((*whole)[i].text == (*general)[i].text);
      CHECK((*whole)[i].fallback == (*general)[i].fallback);
    }
  }
  if (render::ShownAtLeast(doc) > split.soft_length) {
    // RenderReply skips the shortcut for such a reply: it must be one the shortcut refuses.
    ++counts.over_bound;
    CHECK_FALSE(whole.has_value());
  }
  if (general->size() <= 1) {
    ++counts.one_part;
    // With soft_length at max_length, one part means no cut was made, and the shortcut sees that.
    if (split.soft_length == max) CHECK(whole.has_value());
  }
}

}  // namespace

TEST_CASE("render: a reply that fits one part, written by runs, reads as one written by words", "[render][property]") {
  Generator gen(20261205);
  const MarkupDialect dialects[] = {MarkupDialect::plain, MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn};
  const LengthUnit units[] = {LengthUnit::bytes, LengthUnit::code_points, LengthUnit::utf16};
  Counts counts;
  for (int round = 0; round < 300; ++round) {
    const std::string md = gen.Document();
    INFO("round " << round);
    const MarkupDialect dialect = dialects[round % 3];
    const LengthUnit unit = units[(round / 3) % 3];
    // A limit the document fits, one it may fit, one it does not.
    for (std::size_t max : {std::size_t{100000}, md.size() + 40, kMinPartLength + static_cast<std::size_t>(gen.R(400))}) {
      Compare(md, dialect, unit, max, 0, counts);
      Compare(md, dialect, unit, max, kMinPartLength + static_cast<std::size_t>(gen.R(static_cast<int>(max))), counts);
    }
  }
  // The shortcut is taken where it should be, and the comparison above ran on it; the bound that
  // skips it was reached.
  CHECK(counts.whole >= counts.checked / 3);
  CHECK(counts.one_part > 0);
  CHECK(counts.over_bound > counts.checked / 10);
}

TEST_CASE("render: the by-runs shortcut over random bytes and spaces at every edge", "[render][property]") {
  std::mt19937 rng(11);
  const std::string alphabet = "*_~`[]()!<>&#|-+>\n\t   \\:/.x\xC3\xA9\xF0\x9F\x98\x80\xFF\xE2";
  Counts counts;
  for (int round = 0; round < 400; ++round) {
    std::string md;
    const int len = std::uniform_int_distribution<int>(0, 300)(rng);
    for (int i = 0; i < len; ++i)
      md += alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    INFO("round " << round);
    for (MarkupDialect dialect : {MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn, MarkupDialect::plain}) {
      Compare(md, dialect, LengthUnit::utf16, 4096, 0, counts);
      Compare(md, dialect, LengthUnit::utf16, kMinPartLength + static_cast<std::size_t>(round % 300), 0, counts);
    }
  }
  // Hand-picked: code with leading and trailing spaces, a hard break after spaces, a list, a quote.
  for (const char* md : {"```\n  indented  \n\tand tabbed\t\n```", "line one  \nline two", "- a\n- b\n\n  c  ",
                         "> quoted  text\n> more", "    four-space code  ", "**bold  words** and `code  span`"}) {
    for (MarkupDialect dialect : {MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn, MarkupDialect::plain}) {
      Compare(md, dialect, LengthUnit::utf16, 4096, 0, counts);
      Compare(md, dialect, LengthUnit::bytes, kMinPartLength, 0, counts);
    }
  }
  CHECK(counts.whole >= counts.checked / 3);
  CHECK(counts.over_bound > 0);
}

TEST_CASE("render: a lower bound of a reply's shown length counts what every dialect shows", "[render]") {
  // Printable ASCII but the space, in runs, code and table cells; not markup, spaces or breaks.
  const render::Doc doc = render::ParseMarkdown(
      "**ab** c\\d\n\n```\nx y\n```\n\n| h | i |\n| - | - |\n| 1 | 2 |\n\n[lnk](https://e.com) \xC3\xA9");
  // ab c \ d (5) + x y (2) + h i 1 2 (4) + lnk (3); the URL and the accented letter are not counted.
  CHECK(render::ShownAtLeast(doc) == 14);
  CHECK(render::ShownAtLeast(render::ParseMarkdown("")) == 0);
}

TEST_CASE("render: RenderReply takes the shortcut and the general path alike", "[render]") {
  RenderOptions o;
  o.dialect = MarkupDialect::telegram_html;
  o.unit = LengthUnit::utf16;
  o.max_length = 4096;
  const std::string md = "Done: **3 files** changed, see `src/x.cc` & [the PR](https://example.com/p?a=1&b=2).";
  auto one = RenderReply(md, o);
  REQUIRE(one);
  REQUIRE(one->size() == 1);
  CHECK((*one)[0].text ==
        "Done: <b>3 files</b> changed, see <code>src/x.cc</code> &amp; <a "
        "href=\"https://example.com/p?a=1&amp;b=2\">the PR</a>.");
  // The same reply cut in parts goes the general way, labelled, every word kept.
  o.max_length = kMinPartLength + 10;
  auto parts = RenderReply(md, o);
  REQUIRE(parts);
  REQUIRE(parts->size() > 1);
  std::string joined;
  for (const auto& p : *parts) joined += p.text;
  CHECK(joined.find("(1/") != std::string::npos);
  CHECK(joined.find("changed,") != std::string::npos);
}
