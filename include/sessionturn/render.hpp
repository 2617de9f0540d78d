// Agent replies (GitHub-flavoured Markdown) rendered to a chat platform's markup and split to its
// length limit. The router renders every message it sends, its own notes included (written in
// Markdown with EscapeMarkdown around anything it quotes), so adapters only carry text.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>
#include "sessionturn/error.hpp"

namespace sessionturn {

// The markup an adapter's platform reads.
enum class MarkupDialect {
  plain,          // no markup: emphasis dropped, links as "text (url)", code as it is
  telegram_html,  // Telegram's HTML parse mode: b, i, s, u, code, pre (with language), a, blockquote;
                  // &lt; &gt; &amp; &quot; escaped; nothing else
  slack_mrkdwn,   // Slack mrkdwn: *bold*, _italic_, ~strike~, `code`, ```pre```, <url|text>, &lt; &gt; &amp;
};
std::string_view ToString(MarkupDialect dialect) noexcept;  // "plain", "telegram_html", "slack_mrkdwn"

// How a platform counts a message's length.
enum class LengthUnit {
  bytes,        // UTF-8 bytes
  code_points,  // Unicode scalar values (Slack's "characters")
  utf16,        // UTF-16 code units (Telegram: an emoji outside the BMP counts 2)
};
std::string_view ToString(LengthUnit unit) noexcept;  // "bytes", "code_points", "utf16"

// The length of UTF-8 text in `unit`. Invalid UTF-8 counts each bad byte as one unit.
std::size_t MeasureLength(std::string_view utf8, LengthUnit unit) noexcept;

// The smallest max_length (and soft_length, when set) RenderReply takes: room for the longest
// label "(i/N)" a reply can need and a few characters.
inline constexpr std::size_t kMinPartLength = 32;

struct RenderOptions {
  MarkupDialect dialect = MarkupDialect::plain;
  // The length each part must fit, in `unit`, markup and the "(i/N)" label included.
  // At least kMinPartLength.
  std::size_t max_length = 4096;
  LengthUnit unit = LengthUnit::utf16;
  // Prefer parts no longer than this (Slack: ~3,900 characters for readability); 0: max_length.
  // A part runs past it, up to max_length, only to reach a boundary (a space at least) rather than
  // cut a word; one above max_length counts as max_length.
  std::size_t soft_length = 0;
  // Label parts when there is more than one: each part's last line is "(i/N)".
  bool label_parts = true;
};

// One rendered part of a reply.
struct RenderedPart {
  std::string text;  // in the dialect, valid on its own (balanced tags), within max_length
  // Some of this part's blocks could not be written in the dialect within max_length (a code
  // fence's or a link's markup left no room for text) and show as text without formatting,
  // escaped for the dialect all the same: the part is sent like any other.
  bool plain_fallback = false;
};

// Renders `markdown` (GitHub-flavoured: tables, strikethrough, autolinks, task lists) in the
// dialect and splits it into parts that fit max_length: at block, then line, then word boundaries,
// and only a word longer than a part between characters; never inside an entity, a tag, a link's
// markup, a UTF-8 sequence or (where there is room) an emoji sequence. A code block cut in two is
// closed at the end of one part and reopened, with its language, at the start of the next; so is
// inline formatting. Raw HTML shows as text. Bytes that are not UTF-8 are replaced by U+FFFD first,
// so the parts are always valid UTF-8. Never drops text: what cannot be written in the dialect
// within the limit is written without markup (plain_fallback). An empty reply renders as one empty
// part. Errc::invalid_argument for unusable options (an unknown dialect or unit, max_length or
// soft_length below kMinPartLength), naming the option. docs/rendering.md has the details.
Result<std::vector<RenderedPart>> RenderReply(std::string_view markdown, const RenderOptions& options);

// Plain text (no Markdown: nothing is parsed or escaped) split into parts of at most `max_length`
// units, at a blank line, then a line break, then a space (the spaces or newlines at a cut go), and
// only a word longer than a part between characters, never inside a UTF-8 sequence. Bytes that are
// not UTF-8 become U+FFFD. Parts are labelled "(i/N)" like RenderReply's when `label_parts` and there
// are several. Errc::invalid_argument for a max_length below kMinPartLength or an unknown unit.
Result<std::vector<std::string>> SplitText(std::string_view text, std::size_t max_length,
                                           LengthUnit unit = LengthUnit::utf16, bool label_parts = true);

// `text` quoted so that Markdown shows it literally (for names, tool input and questions the router
// puts into its own Markdown notes): ASCII punctuation backslash-escaped, a line's leading space or
// tab written as a character reference (so it neither vanishes nor starts a code block).
std::string EscapeMarkdown(std::string_view text);

// `text` as a Markdown code span that shows it exactly (backslashes are not escapes inside one): the
// fence is a backtick run longer than any in `text`, padded with a space where `text` starts or ends
// with a backtick. Line breaks become spaces (a span is one line).
std::string MarkdownCode(std::string_view text);

}  // namespace sessionturn
