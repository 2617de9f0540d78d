// The prompt envelope (DESIGN.md §6): a fixed header line naming the platform and the author, the
// first turn's thread context, the message, its attachments. docs/routing-rules.md shows the form.
#include "routing/envelope.hpp"

#include <algorithm>
#include <vector>

#include "event_encode.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/routing.hpp"
#include "unicode.hpp"

namespace sessionturn::routing {

using detail::GoRuneLen;

namespace {

constexpr std::string_view kEllipsis = "\xE2\x80\xA6";
constexpr char32_t kReplacement = 0xFFFD;
// The platform's name is ours ("slack", "telegram"); the bound only keeps a misconfigured one short.
constexpr std::size_t kMaxPlatformChars = 32;

void AppendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// The code point at text[i] (U+FFFD for a bad byte) and how many bytes it took.
std::size_t NextRune(std::string_view text, std::size_t i, char32_t& cp) {
  const std::size_t n = GoRuneLen(text, i, &cp);
  if (n == 0) {
    cp = kReplacement;
    return 1;
  }
  return n;
}

bool IsControl(char32_t c) {
  return c < 0x20 || (c >= 0x7F && c <= 0x9F);
}

// Printable ASCII with single spaces between words and none at the ends, within the bound: what
// FlattenLine makes of it is itself (most names and ids).
bool AlreadyFlat(std::string_view text, std::size_t max_chars) {
  if (text.empty() || text.size() > max_chars || text.front() == ' ' || text.back() == ' ') return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c > 0x7E) return false;
    if (c == ' ' && text[i + 1] == ' ') return false;  // not the last byte: that is no space
  }
  return true;
}

// Bytes CleanText keeps as they are: printable ASCII, newline, tab.
bool KeptAsIs(char c) {
  const auto b = static_cast<unsigned char>(c);
  return (b >= 0x20 && b < 0x7F) || b == '\n' || b == '\t';
}

// `text` cut to at most `max_bytes`, ending in "…" when it was cut.
std::string Bound(std::string text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::string out(CutUtf8(text, max_bytes - kEllipsis.size()));
  out += kEllipsis;
  return out;
}

// FlattenLine(text, max_chars), appended to `out`.
void AppendFlatLine(std::string& out, std::string_view text, std::size_t max_chars) {
  if (AlreadyFlat(text, max_chars)) {
    out.append(text);
    return;
  }
  std::vector<char32_t> chars;
  bool space = false;
  // One more than the bound is enough to know the line is too long; the rest is never read.
  for (std::size_t i = 0; i < text.size() && chars.size() <= max_chars;) {
    char32_t cp = 0;
    i += NextRune(text, i, cp);
    if (IsInvisible(cp)) continue;
    if (IsControl(cp) || IsUnicodeSpace(cp)) {
      space = !chars.empty();
      continue;
    }
    if (space) chars.push_back(' ');
    space = false;
    chars.push_back(cp);
  }
  if (chars.size() > max_chars) {
    chars.resize(max_chars > 0 ? max_chars - 1 : 0);
    while (!chars.empty() && chars.back() == ' ') chars.pop_back();
    if (max_chars > 0) chars.push_back(0x2026);
  }
  for (char32_t c : chars) AppendUtf8(out, c);
}

// CleanText(text), appended to `out`.
void AppendCleanText(std::string& out, std::string_view text) {
  const std::size_t at = out.size();
  for (std::size_t i = 0; i < text.size();) {
    std::size_t run = i;
    while (run < text.size() && KeptAsIs(text[run])) ++run;
    if (run > i) {
      out.append(text.substr(i, run - i));
      i = run;
      continue;
    }
    char32_t cp = 0;
    const std::size_t n = NextRune(text, i, cp);
    if (cp == '\r') {
      out.push_back('\n');
      i += (i + 1 < text.size() && text[i + 1] == '\n') ? 2 : 1;
      continue;
    }
    i += n;
    if (cp == '\n' || cp == '\t' || !IsControl(cp)) AppendUtf8(out, cp);
  }
  // Trimmed at both ends: what was appended, once clean.
  const std::string_view added = TrimUnicodeSpace(std::string_view(out).substr(at));
  const std::size_t begin = static_cast<std::size_t>(added.data() - out.data());
  out.resize(begin + added.size());
  out.erase(at, begin - at);
}

// A name or id for the header line, appended to `out`: one line, bounded, and without '[' ']' so the
// header's own brackets are the only ones in it (a name cannot fake the end of the header and a
// second one). False when nothing was appended (the field is empty once cleaned).
bool AppendHeaderField(std::string& out, std::string_view text, std::size_t max_chars) {
  const std::size_t at = out.size();
  AppendFlatLine(out, text, max_chars);
  std::replace(out.begin() + static_cast<std::ptrdiff_t>(at), out.end(), '[', '(');
  std::replace(out.begin() + static_cast<std::ptrdiff_t>(at), out.end(), ']', ')');
  return out.size() > at;
}

// "[platform message from name (id)]": an empty platform reads "chat", an empty id "unknown", and
// an empty name the id.
void AppendHeader(std::string& out, const PromptParts& parts) {
  out += '[';
  if (!AppendHeaderField(out, parts.platform, kMaxPlatformChars)) out += "chat";
  out += " message from ";
  const std::size_t name_at = out.size();
  const bool named = AppendHeaderField(out, parts.author_name, kMaxAuthorNameChars);
  out += " (";
  const std::size_t id_at = out.size();
  if (!AppendHeaderField(out, parts.author_id, kMaxAuthorIdChars)) out += "unknown";
  if (!named) {
    const std::string id = out.substr(id_at);
    out.insert(name_at, id);
  }
  out += ")]";
}

// "name: text", continuation lines indented so that no line of a message looks like another one.
std::string ContextEntry(const ThreadHistoryMessage& message) {
  std::string name = FlattenLine(message.author_name, kMaxAuthorNameChars);
  if (name.empty()) name = "unknown";
  if (message.is_bot) name += " (bot)";
  const std::string text = Bound(CleanText(message.text), kMaxContextMessageBytes);
  std::string out = name + ":";
  out += text.empty() ? "" : " ";
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out += "  ";
  }
  return out;
}

// The earlier messages that fit kMaxThreadContextBytes, newest kept, in a fence of their own.
std::string ThreadContext(const std::vector<ThreadHistoryMessage>& history) {
  std::vector<std::string> kept;
  std::size_t total = 0;
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    std::string entry = ContextEntry(*it);
    if (total + entry.size() + 1 > kMaxThreadContextBytes) break;
    total += entry.size() + 1;
    kept.push_back(std::move(entry));
  }
  std::string body;
  if (const std::size_t dropped = history.size() - kept.size(); dropped > 0) {
    body += "(" + std::to_string(dropped) + " earlier message" + (dropped == 1 ? "" : "s") + " left out)\n";
  }
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) body += *it + "\n";
  const std::string fence = FenceFor(body);
  return "Earlier messages in this thread, oldest first:\n" + fence + "\n" + body + fence + "\n\n";
}

std::string Attachments(const std::vector<std::string>& attachments) {
  std::vector<std::string> texts;
  for (const auto& a : attachments) {
    std::string text = Bound(CleanText(a), kMaxAttachmentBytes);
    if (!text.empty()) texts.push_back(std::move(text));
  }
  std::string out;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string fence = FenceFor(texts[i]);
    out += "\n\n[attachment " + std::to_string(i + 1) + " of " + std::to_string(texts.size()) + "]\n";
    out += fence + "\n" + texts[i] + "\n" + fence;
  }
  return out;
}

}  // namespace

bool IsInvisible(char32_t c) {
  if (c == 0xAD || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x8E2 || c == 0x180E || c == 0xFEFF) return true;
  if ((c >= 0x600 && c <= 0x605) || c == 0x890 || c == 0x891) return true;
  if (c >= 0x200B && c <= 0x200F) return true;  // zero-width space, non-joiner, joiner; LRM, RLM
  if (c >= 0x202A && c <= 0x202E) return true;  // bidi embeddings and overrides
  if (c >= 0x2060 && c <= 0x206F) return true;  // word joiner, invisible operators, isolates, deprecated
  if (c >= 0xFFF9 && c <= 0xFFFB) return true;  // interlinear annotation
  if (c == 0x115F || c == 0x1160 || c == 0x3164 || c == 0xFFA0) return true;  // Hangul fillers
  if (c == 0x110BD || c == 0x110CD || (c >= 0x13430 && c <= 0x1343F)) return true;
  if ((c >= 0x1BCA0 && c <= 0x1BCA3) || (c >= 0x1D173 && c <= 0x1D17A)) return true;
  return c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F);  // tags
}

std::string RepairUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t n = GoRuneLen(text, i, &cp);
    if (n == 0) {
      AppendUtf8(out, kReplacement);
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string_view CutUtf8(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  // Step back over continuation bytes to the start of the sequence the cut falls in.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80 && max_bytes - end < 3) --end;
  return text.substr(0, end);
}

std::string FlattenLine(std::string_view text, std::size_t max_chars) {
  std::string out;
  AppendFlatLine(out, text, max_chars);
  return out;
}

std::string CleanText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  AppendCleanText(out, text);
  return out;
}

std::string FenceFor(std::string_view text) {
  std::size_t longest = 0;
  std::size_t run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<std::size_t>(3, longest + 1), '`');
}

std::string FormatPrompt(const PromptParts& parts) {
  std::string out;
  out.reserve(parts.text.size() + 96);
  AppendHeader(out, parts);
  out += '\n';
  if (!parts.thread_context.empty()) out += ThreadContext(parts.thread_context);
  AppendCleanText(out, parts.text);
  if (!parts.attachments_text.empty()) out += Attachments(parts.attachments_text);
  if (out.size() > kMaxPromptBytes) {
    out.resize(CutUtf8(out, kMaxPromptBytes - kPromptCutMarker.size()).size());
    out += kPromptCutMarker;
  }
  return out;
}

}  // namespace sessionturn::routing

namespace sessionturn {

std::string FormatPrompt(const PromptEnvelope& envelope) {
  return routing::FormatPrompt(routing::PromptParts{envelope.platform, envelope.author_name, envelope.author_id,
                                                    envelope.text, envelope.attachments_text,
                                                    envelope.thread_context});
}

}  // namespace sessionturn
