#include "routing/render_text.hpp"

#include "event_encode.hpp"

namespace sessionturn::render {
namespace {

// Code points that belong to the one before them, so a cut between the two would break what the
// reader sees as one character.
bool Attaches(char32_t cp) {
  return (cp >= 0x0300 && cp <= 0x036F) ||    // combining diacritical marks
         (cp >= 0xFE00 && cp <= 0xFE0F) ||    // variation selectors (the emoji presentation one)
         (cp >= 0x1F3FB && cp <= 0x1F3FF) ||  // skin tones
         (cp >= 0xE0020 && cp <= 0xE007F) ||  // tag sequences (flags of regions)
         cp == 0x20E3 || cp == 0x200D;        // keycap, zero-width joiner
}

bool IsRegionalIndicator(char32_t cp) {
  return cp >= 0x1F1E6 && cp <= 0x1F1FF;
}

bool IsEntityChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '#';
}

}  // namespace

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    // A run of ASCII other than NUL, as it is, at once.
    std::size_t ascii = i;
    while (ascii < text.size() && static_cast<unsigned char>(text[ascii]) - 1u < 0x7Fu) ++ascii;
    if (ascii > i) {
      out.append(text.substr(i, ascii - i));
      i = ascii;
      continue;
    }
    char32_t cp = 0;
    const std::size_t len = detail::GoRuneLen(text, i, &cp);
    if (len == 0 || cp == 0) {  // NUL too: cmark would replace it the same way, shifting its source columns
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

std::size_t DecodeAt(std::string_view s, std::size_t i, char32_t* cp) noexcept {
  const std::size_t len = detail::GoRuneLen(s, i, cp);
  if (len != 0) return len;
  *cp = 0xFFFD;  // not reached after SanitizeUtf8; one byte keeps callers moving
  return 1;
}

std::size_t NextCut(std::string_view s, std::size_t i, bool entities, bool cluster) noexcept {
  if (entities && s[i] == '&') {
    for (std::size_t k = i + 1; k < s.size() && k - i < 8; ++k) {
      if (s[k] == ';') return k + 1;
      if (!IsEntityChar(s[k])) break;
    }
  }
  char32_t cp = 0;
  std::size_t end = i + DecodeAt(s, i, &cp);
  if (!cluster) return end;
  bool joined = false;                  // after a ZWJ the next code point joins whatever it is
  bool flag = IsRegionalIndicator(cp);  // two regional indicators are one flag
  while (end < s.size()) {
    char32_t next = 0;
    const std::size_t len = DecodeAt(s, end, &next);
    const bool pairs = flag && IsRegionalIndicator(next);
    if (!joined && !pairs && !Attaches(next)) break;
    if (end + len - i > kMaxClusterBytes) break;
    joined = next == 0x200D;
    flag = false;
    end += len;
  }
  return end;
}

std::string EscapeText(std::string_view text) {
  const std::size_t at = text.find_first_of("&<>");
  if (at == std::string_view::npos) return std::string(text);  // most words: nothing to escape
  std::string out;
  out.reserve(text.size() + 8);
  out.append(text.substr(0, at));
  for (char c : text.substr(at)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string EscapeAttribute(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '"') {
      out += "&quot;";
    } else {
      out += EscapeText(std::string_view(&c, 1));
    }
  }
  return out;
}

std::size_t ColumnWidth(std::string_view text) noexcept {
  return MeasureLength(text, LengthUnit::code_points);
}

}  // namespace sessionturn::render
