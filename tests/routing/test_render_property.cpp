// render.hpp properties over generated Markdown (a fixed seed, so a failure repeats): whatever the
// dialect, unit and limits, every part fits, is valid UTF-8 and valid markup on its own, and the
// parts together show every word of the input in order.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "routing/render_check.hpp"
#include "routing/render_gen.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;
using testing_render::CheckTelegramHtml;
using testing_render::Generator;
using testing_render::ValidUtf8;
using testing_render::WithoutLabel;
using testing_render::WithoutWhitespace;

namespace {

// Whether mrkdwn is well-formed (`<` only opens a link that closes, `&` only in &amp; &lt; &gt;,
// code fences paired); `visible` gets what a Slack reader sees, near enough: link texts without
// their URLs, formatting characters and quote markers left out.
std::string CheckSlack(std::string_view text, std::string* visible) {
  std::size_t fences = 0;
  for (std::size_t at = text.find("```"); at != std::string_view::npos; at = text.find("```", at + 3)) ++fences;
  if (fences % 2) return "unpaired ``` fences";
  visible->clear();
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i, 2) == "> " && (i == 0 || text[i - 1] == '\n')) {  // a quote's marker
      ++i;
    } else if (text[i] == '<') {
      const std::string_view rest = text.substr(i + 1);
      if (rest.rfind("http", 0) != 0 && rest.rfind("mailto:", 0) != 0 && rest.rfind("ftp", 0) != 0)
        return "a '<' that opens no link at byte " + std::to_string(i);
      const std::size_t close = text.find('>', i), next = text.find('<', i + 1);
      if (close == std::string_view::npos || next < close)
        return "a link that does not close at byte " + std::to_string(i);
      const std::string_view link = text.substr(i + 1, close - i - 1);
      *visible += link.substr(link.find('|') == std::string_view::npos ? 0 : link.find('|') + 1);
      i = close;
    } else if (text[i] == '&') {
      const std::string_view rest = text.substr(i);
      if (rest.rfind("&amp;", 0) != 0 && rest.rfind("&lt;", 0) != 0 && rest.rfind("&gt;", 0) != 0)
        return "a bare '&' at byte " + std::to_string(i);
      visible->push_back('&');
    } else if (text[i] != '*' && text[i] != '_' && text[i] != '~' && text[i] != '`') {
      visible->push_back(text[i]);
    }
  }
  return "";
}

// The words, in order, in `seen` (each after the one before it).
bool InOrder(const std::vector<std::string>& words, const std::string& seen, std::string* missing) {
  std::size_t at = 0;
  for (const std::string& w : words) {
    const std::size_t found = seen.find(w, at);
    if (found == std::string::npos) {
      *missing = w;
      return false;
    }
    at = found + w.size();
  }
  return true;
}

}  // namespace

TEST_CASE("generated Markdown: parts fit, are valid, and keep every word in order", "[render][property]") {
  Generator gen(20240611);
  const MarkupDialect dialects[] = {MarkupDialect::plain, MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn};
  const LengthUnit units[] = {LengthUnit::bytes, LengthUnit::code_points, LengthUnit::utf16};
  for (int round = 0; round < 400; ++round) {
    const std::string md = gen.Document();
    RenderOptions o;
    o.dialect = dialects[gen.R(3)];
    o.unit = units[gen.R(3)];
    o.max_length = kMinPartLength + static_cast<std::size_t>(gen.R(3) == 0 ? gen.R(40) : gen.R(2000));
    o.soft_length =
        gen.R(3) == 0 ? kMinPartLength + static_cast<std::size_t>(gen.R(static_cast<int>(o.max_length))) : 0;
    INFO("round " << round << ", " << ToString(o.dialect) << ", " << ToString(o.unit) << ", max " << o.max_length
                  << ", soft " << o.soft_length << "\n"
                  << md);
    auto parts = RenderReply(md, o);
    if (!parts) FAIL(parts.error().ToString());
    const std::size_t n = parts->size();
    std::string seen;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& text = (*parts)[i].text;
      INFO("part " << i + 1 << "/" << n << ":\n" << text);
      REQUIRE(MeasureLength(text, o.unit) <= o.max_length);
      REQUIRE(ValidUtf8(text));
      const std::string body = WithoutLabel(text, i + 1, n);
      REQUIRE((body != text) == (n > 1));
      std::string visible = body;
      if (o.dialect == MarkupDialect::telegram_html) {
        REQUIRE(CheckTelegramHtml(body, &visible) == "");
      } else if (o.dialect == MarkupDialect::slack_mrkdwn) {
        REQUIRE(CheckSlack(body, &visible) == "");
      }
      seen += WithoutWhitespace(visible);
    }
    std::string missing;
    const bool in_order = InOrder(gen.words(), seen, &missing);
    INFO("missing " << missing << " in: " << seen);
    REQUIRE(in_order);
  }
}

TEST_CASE("random bytes never break the limits, UTF-8 or Telegram's parser", "[render][property]") {
  std::mt19937 rng(7);
  const std::string alphabet = "*_~`[]()!<>&#|-+>\n \\:/.x\xC3\xA9\xF0\x9F\x98\x80\xFF\xE2";
  for (int round = 0; round < 300; ++round) {
    std::string md;
    const int len = std::uniform_int_distribution<int>(0, 600)(rng);
    for (int i = 0; i < len; ++i)
      md += alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    for (MarkupDialect dialect : {MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn, MarkupDialect::plain}) {
      RenderOptions o;
      o.dialect = dialect;
      o.unit = LengthUnit::utf16;
      o.max_length = kMinPartLength + static_cast<std::size_t>(round % 50);
      auto parts = RenderReply(md, o);
      INFO("round " << round << " " << ToString(dialect));
      if (!parts) FAIL(parts.error().ToString());
      for (const auto& p : *parts) {
        REQUIRE(MeasureLength(p.text, o.unit) <= o.max_length);
        REQUIRE(ValidUtf8(p.text));
        if (dialect == MarkupDialect::telegram_html) REQUIRE(CheckTelegramHtml(p.text) == "");
      }
    }
  }
}
