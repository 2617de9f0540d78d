// Test helper: random Markdown for the render tests' properties (test_render_property.cpp) and
// the check against Telegram's own parser (test_render_tdlib.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace sessionturn::testing_render {

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

}  // namespace sessionturn::testing_render
