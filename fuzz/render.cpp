// Fuzzes reply rendering (an agent's reply is untrusted text). Input bytes are the Markdown; the
// first byte, when there is one, picks the limits. Properties, in each dialect and unit:
//  - it renders: options that pass RenderReply's checks never fail;
//  - every part fits max_length in the unit and is valid UTF-8, whatever bytes came in;
//  - telegram_html parts have balanced, known tags and no bare '<', '>' or '&';
//  - the parts hold the reply's text: none is empty unless the whole reply is;
//  - the shortcut for a reply that fits one part (written by runs, taken whole) reads exactly as
//    the general path (written by words, split) whenever it is taken;
//  - the plain-text fast path (ParsePlainText), when it takes the reply, makes cmark-gfm's Doc;
//  - PlainReplyText takes exactly the replies ParsePlainText takes, and reads as the general path
//    writes that Doc in one part, in every dialect; RenderReply, with the options of each round, gives
//    the general path's parts for such a reply, whether it fits one part (the shortcut) or not.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "routing/render_doc.hpp"
#include "routing/render_split.hpp"
#include "routing/render_text.hpp"
#include "routing/render_tokens.hpp"
#include "sessionturn/render.hpp"

namespace {

bool ValidUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
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

// Tags balanced and known, and '<' '>' '&' only as markup or entities.
bool BalancedTelegramHtml(std::string_view s) {
  std::vector<std::string_view> stack;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '&') {
      const std::string_view rest = s.substr(i);
      if (rest.rfind("&lt;", 0) != 0 && rest.rfind("&gt;", 0) != 0 && rest.rfind("&amp;", 0) != 0 &&
          rest.rfind("&quot;", 0) != 0)
        return false;
    } else if (s[i] == '>') {
      return false;
    } else if (s[i] == '<') {
      const std::size_t end = s.find('>', i);
      if (end == std::string_view::npos) return false;
      std::string_view tag = s.substr(i + 1, end - i - 1);
      i = end;
      const bool closing = !tag.empty() && tag[0] == '/';
      if (closing) tag.remove_prefix(1);
      const std::string_view name = tag.substr(0, tag.find(' '));
      if (name != "b" && name != "i" && name != "s" && name != "code" && name != "pre" && name != "a" &&
          name != "blockquote")
        return false;
      if (!closing) {
        stack.push_back(name);
      } else if (stack.empty() || stack.back() != name) {
        return false;
      } else {
        stack.pop_back();
      }
    }
  }
  return stack.empty();
}

// The by-runs shortcut against the general path, on the Doc RenderReply parses.
void CheckWhole(const sessionturn::render::Doc& doc, const sessionturn::RenderOptions& o) {
  using namespace sessionturn;
  render::SplitOptions split;
  split.max_length = o.max_length;
  split.soft_length = o.soft_length ? o.soft_length : o.max_length;
  split.unit = o.unit;
  split.entities = o.dialect != MarkupDialect::plain;
  const render::TokenLimits limits{o.max_length, o.unit, 0};
  const auto whole = render::SplitWhole(render::RenderTokens(doc, o.dialect, limits, render::Granularity::runs), split);
  // RenderReply skips the shortcut past this bound: the shortcut must refuse such a reply.
  if (whole && render::ShownAtLeast(doc) > split.soft_length) std::abort();
  if (!whole) return;
  const auto general = render::Split(render::RenderTokens(doc, o.dialect, limits, render::Granularity::words), split);
  if (!general || general->size() != whole->size()) std::abort();
  for (std::size_t i = 0; i < whole->size(); ++i)
    if ((*whole)[i].text != (*general)[i].text || (*whole)[i].fallback != (*general)[i].fallback) std::abort();
}

// A plain reply's parts, shortcut or not, against the general path with the same options.
void CheckPlainReply(const sessionturn::render::Doc& doc, const sessionturn::RenderOptions& o,
                     const std::vector<sessionturn::RenderedPart>& parts) {
  using namespace sessionturn;
  render::SplitOptions split;
  split.max_length = o.max_length;
  split.soft_length = std::min(o.soft_length ? o.soft_length : o.max_length, o.max_length);
  split.unit = o.unit;
  split.entities = o.dialect != MarkupDialect::plain;
  const auto general =
      render::Split(render::RenderTokens(doc, o.dialect, render::TokenLimits{o.max_length, o.unit, 0}), split);
  if (!general || general->empty()) std::abort();
  // A reply of several parts is labelled ("(i/N)", with room kept for it): compared as one part only.
  if (general->size() == 1 && (parts.size() != 1 || parts[0].text != (*general)[0].text)) std::abort();
  if (general->size() > 1 && parts.size() < 2) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sessionturn;
  const std::uint8_t knob = size ? data[0] : 0;
  const std::string_view markdown(reinterpret_cast<const char*>(data), size);
  const std::size_t limits[] = {kMinPartLength + knob % 64, std::size_t{256} + knob, 4096};
  const std::string clean = render::SanitizeUtf8(markdown);
  const render::Doc doc = render::ParseMarkdown(clean);
  const auto plain_doc = render::ParsePlainText(clean);
  if (plain_doc && !(doc == render::ParseMarkdownWithCmark(clean))) std::abort();
  const auto plain_text = render::PlainReplyText(clean);
  if (plain_doc.has_value() != plain_text.has_value()) std::abort();
  if (plain_text) {
    for (MarkupDialect dialect : {MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn, MarkupDialect::plain}) {
      render::SplitOptions whole;
      whole.max_length = whole.soft_length = clean.size() + kMinPartLength;
      whole.unit = LengthUnit::bytes;
      whole.entities = dialect != MarkupDialect::plain;
      auto general = render::Split(
          render::RenderTokens(*plain_doc, dialect, render::TokenLimits{whole.max_length, LengthUnit::bytes, 0}), whole);
      if (!general || general->size() != 1 || (*general)[0].text != *plain_text) std::abort();
    }
  }
  for (MarkupDialect dialect : {MarkupDialect::telegram_html, MarkupDialect::slack_mrkdwn, MarkupDialect::plain}) {
    for (std::size_t limit : limits) {
      RenderOptions o;
      o.dialect = dialect;
      o.max_length = limit;
      o.unit = static_cast<LengthUnit>(knob % 3);
      o.soft_length = (knob & 0x40) ? kMinPartLength + (limit - kMinPartLength) / 2 : 0;
      o.label_parts = (knob & 0x80) == 0;
      auto parts = RenderReply(markdown, o);
      if (!parts || parts->empty()) std::abort();
      CheckWhole(doc, o);
      if (plain_text) CheckPlainReply(doc, o, *parts);
      for (const RenderedPart& p : *parts) {
        if (MeasureLength(p.text, o.unit) > o.max_length || !ValidUtf8(p.text)) std::abort();
        if (p.text.empty() && parts->size() > 1) std::abort();
        if (dialect == MarkupDialect::telegram_html && !BalancedTelegramHtml(p.text)) std::abort();
      }
    }
  }
  return 0;
}
