#include "runtime/text.hpp"

#include <vector>

#include "event_encode.hpp"
#include "sessionturn/protocol.hpp"
#include "unicode.hpp"

namespace sessionturn::runtime {
namespace {

using detail::GoRuneLen;

// Go's unicode.IsPrint, for the code points that matter in ids and short texts: letters, marks,
// numbers, punctuation and symbols print; controls, separators other than ' ', format characters,
// private use and noncharacters do not. (Unassigned code points are taken as printable.)
bool IsPrint(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0x9F)) return false;
  if (c < 0x7F) return true;
  if (c == 0xA0 || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
      (c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E)
    return false;
  if ((c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000) return false;       // private use
  if ((c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE) return false;  // noncharacters
  if (c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F)) return false;      // tags
  return true;
}

constexpr char kHex[] = "0123456789abcdef";

void AppendHex(std::string& out, std::uint32_t v, int digits) {
  for (int i = digits - 1; i >= 0; --i) out.push_back(kHex[(v >> (4 * i)) & 0xF]);
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int B64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

}  // namespace

std::string GoQuote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = GoRuneLen(s, i, &cp);
    if (n == 0) {
      out += "\\x";
      AppendHex(out, static_cast<unsigned char>(s[i]), 2);
      ++i;
      continue;
    }
    if (cp == '"' || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (IsPrint(cp)) {
      out.append(s.data() + i, n);
    } else {
      switch (cp) {
        case '\a': out += "\\a"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\v': out += "\\v"; break;
        default:
          if (cp < ' ' || cp == 0x7F) {
            out += "\\x";
            AppendHex(out, cp, 2);
          } else if (cp < 0x10000) {
            out += "\\u";
            AppendHex(out, cp, 4);
          } else {
            out += "\\U";
            AppendHex(out, cp, 8);
          }
      }
    }
    i += n;
  }
  out.push_back('"');
  return out;
}

std::size_t ValidUtf8PrefixLen(std::string_view s) {
  // The longest valid prefix ends where forward decoding first fails.
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const std::size_t n = GoRuneLen(s, i, &cp);
    if (n == 0) break;
    i += n;
  }
  return i;
}

std::size_t ValidUtf8SuffixStart(std::string_view s) {
  // valid[i]: s[i:] is valid UTF-8. Filled from the end; the answer is the smallest valid i.
  std::vector<bool> valid(s.size() + 1, false);
  valid[s.size()] = true;
  std::size_t best = s.size();
  for (std::size_t i = s.size(); i-- > 0;) {
    char32_t cp = 0;
    const std::size_t n = GoRuneLen(s, i, &cp);
    valid[i] = n > 0 && valid[i + n];
    if (valid[i]) best = i;
  }
  return best;
}

std::size_t BoundedText::HeadLimit() const {
  const std::size_t available = max_ > marker_.size() ? max_ - marker_.size() : 0;
  return available / 2;
}

std::size_t BoundedText::TailLimit() const {
  const std::size_t available = max_ > marker_.size() ? max_ - marker_.size() : 0;
  return available - available / 2;
}

void BoundedText::AppendTail(std::string_view data) {
  const std::size_t limit = TailLimit();
  if (limit == 0) return;
  if (data.size() >= limit) {
    tail_.assign(data.substr(data.size() - limit));
    return;
  }
  if (tail_.size() + data.size() > limit) tail_.erase(0, tail_.size() + data.size() - limit);
  tail_.append(data);
}

void BoundedText::Write(std::string_view text) {
  if (text.empty() || max_ == 0) return;
  if (truncated_) return AppendTail(text);
  if (head_.size() + text.size() <= max_) {
    head_.append(text);
    return;
  }
  const std::size_t head_limit = HeadLimit();
  std::string retained = std::move(head_);
  const std::size_t keep = std::min(head_limit, retained.size());
  head_.assign(retained, 0, keep);
  const std::size_t from_text = std::min(head_limit - head_.size(), text.size());
  head_.append(text.substr(0, from_text));
  truncated_ = true;
  AppendTail(std::string_view(retained).substr(keep));
  AppendTail(text.substr(from_text));
}

std::string BoundedText::String() const {
  if (!truncated_) return head_;
  std::string out(head_, 0, ValidUtf8PrefixLen(head_));
  out.append(marker_);
  out.append(tail_, ValidUtf8SuffixStart(tail_));
  return out;
}

std::string Bounded(std::string_view text, std::size_t max, std::string_view marker) {
  if (text.size() <= max) return std::string(text);
  const std::size_t available = max > marker.size() ? max - marker.size() : 0;
  const std::size_t head = available / 2;
  const std::size_t tail = available - head;
  std::string_view h = text.substr(0, head);
  std::string_view t = text.substr(text.size() - tail);
  std::string out(h.substr(0, ValidUtf8PrefixLen(h)));
  out.append(marker);
  out.append(t.substr(ValidUtf8SuffixStart(t)));
  return out;
}

std::string Base64UrlEncode(std::string_view data) {
  std::string out;
  out.reserve((data.size() * 4 + 2) / 3);
  std::size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const std::uint32_t v = (static_cast<unsigned char>(data[i]) << 16) | (static_cast<unsigned char>(data[i + 1]) << 8) |
                            static_cast<unsigned char>(data[i + 2]);
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back(kB64[v & 63]);
  }
  const std::size_t rest = data.size() - i;
  if (rest > 0) {
    std::uint32_t v = static_cast<unsigned char>(data[i]) << 16;
    if (rest == 2) v |= static_cast<unsigned char>(data[i + 1]) << 8;
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    if (rest == 2) out.push_back(kB64[(v >> 6) & 63]);
  }
  return out;
}

bool Base64UrlDecode(std::string_view text, std::string* out) {
  out->clear();
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t count = 0;
  for (char c : text) {
    if (c == '\r' || c == '\n') continue;
    const int v = B64Value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    ++count;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return count % 4 != 1;
}

SessionCommand ParseSessionCommand(std::string_view text) {
  SessionCommand c;
  const std::string_view trimmed = TrimUnicodeSpace(text);
  if (!trimmed.empty() && trimmed.front() == '!') {
    c.kind = SessionCommand::Kind::shell;
    c.shell = std::string(TrimUnicodeSpace(trimmed.substr(1)));
    if (c.shell.empty()) c.error = "shell command must not be empty";
    return c;
  }
  if (!IsRuntimeCommand(trimmed)) return c;  // a plain message (the only other command is /goal)
  c.kind = SessionCommand::Kind::goal;
  const std::string_view args = TrimUnicodeSpace(trimmed.substr(5));
  std::size_t end = 0;
  while (end < args.size()) {
    char32_t cp = 0;
    const std::size_t n = GoRuneLen(args, end, &cp);
    if (n > 0 && IsUnicodeSpace(cp)) break;
    end += n > 0 ? n : 1;
  }
  if (args.substr(0, end) == "edit" && TrimUnicodeSpace(args.substr(end)).empty())
    c.error = "usage: /goal [<objective>|clear|edit <objective>|pause|resume]";
  return c;
}

std::string MergePendingText(const std::string& current, const std::string& addition) {
  if (TrimUnicodeSpace(current).empty()) return addition;
  if (TrimUnicodeSpace(addition).empty()) return current;
  return current + "\n\n" + addition;
}

}  // namespace sessionturn::runtime
