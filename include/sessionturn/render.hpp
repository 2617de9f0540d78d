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

struct RenderOptions {
  MarkupDialect dialect = MarkupDialect::plain;
  // The length each part must fit, in `unit`, markup and the "(i/N)" label included. > 0.
  std::size_t max_length = 4096;
  LengthUnit unit = LengthUnit::utf16;
  // Prefer parts no longer than this (Slack: ~3,900 characters for readability); 0: max_length.
  std::size_t soft_length = 0;
  // Label parts "(i/N)" when there is more than one.
  bool label_parts = true;
};

// One rendered part of a reply.
struct RenderedPart {
  std::string text;  // in the dialect, within max_length
  bool plain_fallback = false;  // the Markdown could not be rendered in the dialect: sent as plain text
};

// Renders `markdown` and splits it at block, then line, then word boundaries (never inside an entity,
// an escape or a UTF-8 sequence; a code block cut in two is closed and reopened). Never drops text:
// what cannot be rendered is sent as plain text (plain_fallback). An empty reply renders as one empty
// part. Errc::invalid_argument for unusable options (max_length too small to hold a label and a
// character), naming the option.
Result<std::vector<RenderedPart>> RenderReply(std::string_view markdown, const RenderOptions& options);

// `text` quoted so that Markdown shows it literally (for names, tool input and questions the router
// puts into its own Markdown notes).
std::string EscapeMarkdown(std::string_view text);

}  // namespace sessionturn
