// Test helpers for rendered replies: a strict checker of Telegram's HTML parse mode (what the Bot
// API accepts without "can't parse entities", and the nesting its entity rules allow), UTF-8
// validity, and the text a reader sees.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sessionturn::testing_render {

inline bool ValidUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size() || (len == 2 && b < 0xC2)) return false;
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (std::size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

// Checks `html` the way Telegram's HTML parse mode reads it, more strictly: only the tags the
// renderer may write (b, i, s, u, code, pre, a href, blockquote, tg-spoiler), every tag closed in
// order, `<` `>` `&` only as markup or as &lt; &gt; &amp; &quot;, and the entity rules: code and pre
// hold no tags (but pre's one <code class="language-x">), code and pre sit in nothing but a
// blockquote, a link holds no link, a blockquote no blockquote, no style inside itself. Returns ""
// when it is fine, else what is wrong. `visible` gets the text a reader sees.
inline std::string CheckTelegramHtml(std::string_view html, std::string* visible = nullptr) {
  struct Open {
    std::string name;
    bool pre_code = false;  // the <code class> right inside a <pre>
  };
  std::vector<Open> stack;
  std::string text;
  const auto inside = [&](std::string_view name) {
    for (const Open& o : stack)
      if (o.name == name) return true;
    return false;
  };
  for (std::size_t i = 0; i < html.size();) {
    const char c = html[i];
    if (c == '&') {
      static const std::pair<std::string_view, char> kEntities[] = {
          {"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}};
      bool found = false;
      for (const auto& [entity, ch] : kEntities) {
        if (html.substr(i, entity.size()) == entity) {
          text.push_back(ch);
          i += entity.size();
          found = true;
          break;
        }
      }
      if (!found) return "a bare '&' at byte " + std::to_string(i);
      continue;
    }
    if (c == '>') return "a bare '>' at byte " + std::to_string(i);
    if (c != '<') {
      text.push_back(c);
      ++i;
      continue;
    }
    const std::size_t end = html.find('>', i);
    if (end == std::string_view::npos) return "an unclosed tag at byte " + std::to_string(i);
    std::string_view tag = html.substr(i + 1, end - i - 1);
    i = end + 1;
    if (!tag.empty() && tag[0] == '/') {
      const std::string name(tag.substr(1));
      if (stack.empty() || stack.back().name != name) return "an unmatched </" + name + ">";
      stack.pop_back();
      continue;
    }
    const std::string name(tag.substr(0, tag.find(' ')));
    const std::string_view attrs = tag.size() > name.size() ? tag.substr(name.size() + 1) : std::string_view();
    if (name != "b" && name != "i" && name != "s" && name != "u" && name != "code" && name != "pre" && name != "a" &&
        name != "blockquote" && name != "tg-spoiler")
      return "an unsupported tag <" + name + ">";
    if (!stack.empty() && (stack.back().name == "pre" || stack.back().name == "code") &&
        !(name == "code" && stack.back().name == "pre"))
      return "<" + name + "> inside <" + stack.back().name + ">";
    bool pre_code = false;
    if (name == "a") {
      if (attrs.substr(0, 6) != "href=\"" || attrs.back() != '"' || attrs.find('"', 6) != attrs.size() - 1)
        return "an <a> without one quoted href: " + std::string(tag);
      if (inside("a")) return "a link inside a link";
    } else if (name == "code" && !stack.empty() && stack.back().name == "pre") {
      if (attrs.substr(0, 16) != "class=\"language-" || attrs.back() != '"') return "a bad <code> in <pre>";
      pre_code = true;
    } else if (!attrs.empty()) {
      return "attributes on <" + name + ">";
    }
    if (name == "code" || name == "pre") {
      for (const Open& o : stack)
        if (o.name != "blockquote" && !(name == "code" && o.name == "pre"))
          return "<" + name + "> inside <" + o.name + ">";
    }
    if (name == "blockquote" && inside("blockquote")) return "a blockquote inside a blockquote";
    if ((name == "b" || name == "i" || name == "s" || name == "u") && inside(name))
      return "<" + name + "> inside itself";
    stack.push_back(Open{name, pre_code});
  }
  if (!stack.empty()) return "<" + stack.back().name + "> not closed";
  if (visible) *visible = text;
  return "";
}

// `text` without its "\n(i/N)" label.
inline std::string WithoutLabel(const std::string& text, std::size_t i, std::size_t n) {
  const std::string label = "\n(" + std::to_string(i) + "/" + std::to_string(n) + ")";
  if (text.size() >= label.size() && text.compare(text.size() - label.size(), label.size(), label) == 0)
    return text.substr(0, text.size() - label.size());
  return text;
}

inline std::string WithoutWhitespace(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '\n' && c != '\t') out.push_back(c);
  return out;
}

}  // namespace sessionturn::testing_render
