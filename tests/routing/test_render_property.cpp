// render.hpp properties over generated Markdown (a fixed seed, so a failure repeats): whatever the
// dialect, unit and limits, every part fits, is valid UTF-8 and valid markup on its own, and the
// parts together show every word of the input in order.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "routing/render_check.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;
using testing_render::CheckTelegramHtml;
using testing_render::ValidUtf8;
using testing_render::WithoutLabel;
using testing_render::WithoutWhitespace;

namespace {

// Markdown of random blocks and inline markup. Every word it writes is "w<n>x" with n counting up,
// so no word is inside another and their order is checkable; everything else it writes (markup,
// emoji, long runs, punctuation) is noise the check ignores.
class Generator {
 public:
  explicit Generator(std::uint32_t seed) : rng_(seed) {}

  std::string Document() {
    words_.clear();
    std::string md;
    const int blocks = R(12) + 1;
    for (int i = 0; i < blocks; ++i) md += Block(0) + "\n\n";
    return md;
  }

  const std::vector<std::string>& words() const { return words_; }
  int R(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

 private:
  std::string Word() {
    words_.push_back("w" + std::to_string(next_++) + "x");
    return words_.back();
  }

  std::string Words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + Word();
    return s;
  }

  std::string Noise() {
    switch (R(8)) {
      case 0: return "\xF0\x9F\x98\x80";  // 😀 (2 UTF-16 units)
      case 1: return "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";  // a family
      case 2: return "\xE6\xBC\xA2\xE5\xAD\x97";                                                  // 漢字
      case 3: return "a&b <c> \"q\"";
      case 4: return std::string(static_cast<std::size_t>(R(300) + 1), 'L');  // longer than a small part
      case 5: return "<i>raw</i>";
      case 6: return "&amp; &lt;";
      default: return "|";
    }
  }

  std::string Inline(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
      if (i) s += R(12) == 0 ? "\n" : " ";
      switch (R(11)) {
        case 0: s += "**" + Words(R(4) + 1) + "**"; break;
        case 1: s += "_" + Words(R(3) + 1) + "_"; break;
        case 2: s += "~~" + Word() + "~~"; break;
        case 3: s += "`" + Words(R(3) + 1) + "`"; break;
        case 4: s += "[" + Words(R(3) + 1) + "](https://e.test/u" + std::to_string(R(99)) + "?a=1&b=2)"; break;
        case 5: s += "![" + Word() + "](https://e.test/i.png)"; break;
        case 6: {
          const std::string strong = Word();  // one call per statement: the words' order is the text's
          s += "***" + strong + " `" + Word() + "`***";
          break;
        }
        case 7: s += Noise(); break;
        case 8:
          s += "[" + Word() + "](https://e.test/" + std::string(static_cast<std::size_t>(R(400)), 'p') + ")";
          break;
        default: s += Word();
      }
    }
    return s;
  }

  std::string Indent(const std::string& text, const std::string& first, const std::string& rest) {
    std::string out = first;
    for (char c : text) {
      out += c;
      if (c == '\n') out += rest;
    }
    return out;
  }

  std::string Block(int depth) {
    const int kind = depth > 2 ? R(3) : R(11);
    switch (kind) {
      case 0: return Inline(R(20) + 1);
      case 1: return std::string(static_cast<std::size_t>(R(3) + 1), '#') + " " + Inline(R(5) + 1);
      case 2: {
        std::string code = "```" + std::string(R(2) ? "py" : "") + "\n";
        for (int i = R(12) + 1; i > 0; --i)
          code += std::string(static_cast<std::size_t>(R(3) * 2), ' ') + Words(R(8)) + "\n";
        return code + "```";
      }
      case 3:
      case 4: {
        std::string list;
        const bool ordered = kind == 4;
        for (int i = R(4) + 1; i > 0; --i) {
          const std::string marker = ordered ? "1. " : (R(3) == 0 ? "- [x] " : "- ");
          std::string body = Inline(R(6) + 1);
          if (R(4) == 0) body += "\n\n" + Block(depth + 1);
          list += Indent(body, marker, std::string(ordered ? 3 : 2, ' ')) + "\n";
        }
        return list;
      }
      case 5: return Indent(Block(depth + 1), "> ", "> ");
      case 6: {
        const int columns = R(3) + 1;
        std::string table = "|", rule = "|";
        for (int c = 0; c < columns; ++c) {
          table += " " + Word() + " |";
          rule += R(2) ? ":--|" : "--:|";
        }
        table += "\n" + rule + "\n";
        for (int r = R(4); r > 0; --r) {
          table += "|";
          for (int c = 0; c < columns; ++c) table += " " + Inline(R(2) + 1) + " |";
          table += "\n";
        }
        return table;
      }
      case 7: return "---";
      case 8: return "<div>\n" + Words(R(4) + 1) + "\n</div>";
      case 9: return "```" + std::string(static_cast<std::size_t>(R(60) + 1), 'g') + "\n" + Words(R(5) + 1) + "\n```";
      default: return Inline(R(40) + 10);
    }
  }

  std::mt19937 rng_;
  std::vector<std::string> words_;
  int next_ = 0;
};

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
