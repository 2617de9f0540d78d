#include "sessionturn/render.hpp"

#include <algorithm>

#include "event_encode.hpp"
#include "routing/render_doc.hpp"
#include "routing/render_split.hpp"
#include "routing/render_text.hpp"
#include "routing/render_tokens.hpp"

namespace sessionturn {
namespace {

std::size_t Digits(std::size_t n) {
  std::size_t d = 1;
  while (n >= 10) {
    n /= 10;
    ++d;
  }
  return d;
}

// "\n(i/N)" with i and N of `digits` digits at most.
std::size_t LabelReserve(std::size_t digits) {
  return digits == 0 ? 0 : 4 + 2 * digits;
}

std::string Label(std::size_t i, std::size_t n) {
  return "\n(" + std::to_string(i) + "/" + std::to_string(n) + ")";
}

// CommonMark lets a backslash escape exactly these.
bool IsAsciiPunctuation(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

bool KnownDialect(MarkupDialect d) {
  return d == MarkupDialect::plain || d == MarkupDialect::telegram_html || d == MarkupDialect::slack_mrkdwn;
}

bool KnownUnit(LengthUnit u) {
  return u == LengthUnit::bytes || u == LengthUnit::code_points || u == LengthUnit::utf16;
}

Status CheckOptions(const RenderOptions& o) {
  if (!KnownDialect(o.dialect))
    return Fail(Errc::invalid_argument,
                "RenderOptions.dialect " + std::to_string(static_cast<int>(o.dialect)) + " is not a MarkupDialect");
  if (!KnownUnit(o.unit))
    return Fail(Errc::invalid_argument,
                "RenderOptions.unit " + std::to_string(static_cast<int>(o.unit)) + " is not a LengthUnit");
  if (o.max_length < kMinPartLength)
    return Fail(Errc::invalid_argument, "RenderOptions.max_length " + std::to_string(o.max_length) +
                                            " is too small: a part needs at least " + std::to_string(kMinPartLength) +
                                            " units for its label \"(i/N)\" and some text");
  if (o.soft_length != 0 && o.soft_length < kMinPartLength)
    return Fail(Errc::invalid_argument, "RenderOptions.soft_length " + std::to_string(o.soft_length) +
                                            " is too small: 0 (none) or at least " + std::to_string(kMinPartLength));
  return {};
}

}  // namespace

std::string_view ToString(MarkupDialect dialect) noexcept {
  switch (dialect) {
    case MarkupDialect::plain: return "plain";
    case MarkupDialect::telegram_html: return "telegram_html";
    case MarkupDialect::slack_mrkdwn: return "slack_mrkdwn";
  }
  return "unknown";
}

std::string_view ToString(LengthUnit unit) noexcept {
  switch (unit) {
    case LengthUnit::bytes: return "bytes";
    case LengthUnit::code_points: return "code_points";
    case LengthUnit::utf16: return "utf16";
  }
  return "unknown";
}

std::size_t MeasureLength(std::string_view utf8, LengthUnit unit) noexcept {
  if (unit == LengthUnit::bytes) return utf8.size();
  std::size_t n = 0;
  for (std::size_t i = 0; i < utf8.size();) {
    if (static_cast<unsigned char>(utf8[i]) < 0x80) {  // ASCII: one unit in every unit
      ++n;
      ++i;
      continue;
    }
    char32_t cp = 0;
    const std::size_t len = detail::GoRuneLen(utf8, i, &cp);
    if (len == 0) {  // a bad byte is one unit
      ++n;
      ++i;
      continue;
    }
    n += (unit == LengthUnit::utf16 && cp > 0xFFFF) ? 2 : 1;
    i += len;
  }
  return n;
}

namespace {

std::vector<RenderedPart> Labelled(std::vector<render::SplitPart> parts, bool label_parts) {
  std::vector<RenderedPart> out;
  out.reserve(std::max<std::size_t>(parts.size(), 1));
  const bool label = label_parts && parts.size() > 1;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    RenderedPart part;
    part.text = std::move(parts[i].text);
    if (label) part.text += Label(i + 1, parts.size());
    part.plain_fallback = parts[i].fallback;
    out.push_back(std::move(part));
  }
  if (out.empty()) out.emplace_back();
  return out;
}

// Splits what `tokens_for` writes (given the room left for a label) into labelled parts. N is known
// only once the text is split, and the label's room changes N: split without a label first (a text
// that fits one part has none), then with room for as many digits as N has until N fits that room.
template <typename TokensFor>
Result<std::vector<RenderedPart>> SplitLabelled(TokensFor&& tokens_for, render::SplitOptions split, bool label_parts) {
  std::size_t digits = 0;
  std::vector<render::SplitPart> parts;
  for (;;) {
    split.reserve = LabelReserve(digits);
    const std::vector<render::Token> tokens = tokens_for(render::TokenLimits{split.max_length, split.unit, split.reserve});
    auto result = render::Split(tokens, split);
    if (!result) return Fail(result.error());
    parts = std::move(*result);
    if (!label_parts || parts.size() <= 1 || Digits(parts.size()) <= digits) break;
    digits = std::max(digits + 1, Digits(parts.size()));
  }

  return Labelled(std::move(parts), label_parts);
}

}  // namespace

Result<std::vector<RenderedPart>> RenderReply(std::string_view markdown, const RenderOptions& options) {
  if (auto ok = CheckOptions(options); !ok) return Fail(ok.error());
  render::SplitOptions split;
  split.max_length = options.max_length;
  split.soft_length = std::min(options.soft_length ? options.soft_length : options.max_length, options.max_length);
  split.unit = options.unit;
  split.entities = options.dialect != MarkupDialect::plain;

  const std::string text = render::SanitizeUtf8(markdown);
  // The commonest reply, plain text in one part, reads the same in every dialect: no Doc, no tokens.
  if (auto plain = render::PlainReplyText(text); plain && MeasureLength(*plain, split.unit) <= split.soft_length) {
    std::vector<RenderedPart> one(1);
    one.front().text = std::move(*plain);
    return one;
  }
  const render::Doc doc = render::ParseMarkdown(text);
  // Most replies fit one part: written by runs, such a reply is the same text in a fraction of the
  // tokens. Only one that does not fit is written again, by words, and split; one that shows more
  // characters than a part holds goes that way at once.
  const bool may_fit = markdown.size() <= split.soft_length || render::ShownAtLeast(doc) <= split.soft_length;
  if (may_fit) {
    if (auto whole = render::SplitWhole(
            render::RenderTokens(doc, options.dialect, render::TokenLimits{split.max_length, split.unit, 0},
                                 render::Granularity::runs),
            split))
      return Labelled(std::move(*whole), options.label_parts);
  }
  return SplitLabelled(
      [&](const render::TokenLimits& limits) { return render::RenderTokens(doc, options.dialect, limits); }, split,
      options.label_parts);
}

Result<std::vector<std::string>> SplitText(std::string_view text, std::size_t max_length, LengthUnit unit,
                                           bool label_parts) {
  if (!KnownUnit(unit))
    return Fail(Errc::invalid_argument, "SplitText: unit " + std::to_string(static_cast<int>(unit)) +
                                            " is not a LengthUnit");
  if (max_length < kMinPartLength)
    return Fail(Errc::invalid_argument, "SplitText: max_length " + std::to_string(max_length) +
                                            " is too small: a part needs at least " + std::to_string(kMinPartLength) +
                                            " units for its label \"(i/N)\" and some text");
  const std::vector<render::Token> tokens = render::PlainTokens(render::SanitizeUtf8(text), unit);
  render::SplitOptions split;
  split.max_length = max_length;
  split.soft_length = max_length;
  split.unit = unit;
  auto parts = SplitLabelled([&](const render::TokenLimits&) { return tokens; }, split, label_parts);
  if (!parts) return Fail(parts.error());
  std::vector<std::string> out;
  out.reserve(parts->size());
  for (auto& p : *parts) out.push_back(std::move(p.text));
  return out;
}

std::string MarkdownCode(std::string_view text) {
  std::string body(text);
  for (char& c : body) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::size_t longest = 0;
  for (std::size_t i = 0; i < body.size();) {
    std::size_t run = 0;
    while (i + run < body.size() && body[i + run] == '`') ++run;
    longest = std::max(longest, run);
    i += run == 0 ? 1 : run;
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`');
  return fence + (pad ? " " : "") + body + (pad ? " " : "") + fence;
}

std::string EscapeMarkdown(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  bool line_start = true;
  for (char c : text) {
    if (line_start && (c == ' ' || c == '\t')) {
      // Markdown strips a line's leading whitespace, or (four spaces) makes it code: the first as a
      // character reference keeps it, and the rest, as text.
      out += c == ' ' ? "&#32;" : "&#9;";
    } else if (IsAsciiPunctuation(c)) {
      out += '\\';
      out += c;
    } else {
      out += c;
    }
    line_start = c == '\n';
  }
  return out;
}

}  // namespace sessionturn
