// Internal to reply rendering: a Doc written out in a markup dialect as a stream of tokens, the
// form the splitter cuts. Text arrives already escaped in words; markup arrives as frames (an open
// token carries its close) so that a cut can close what is open and the next part reopen it; the
// places a cut may fall are tokens of their own (spaces, line breaks, block breaks).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "routing/render_doc.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn::render {

enum class TokenKind {
  text,         // content, escaped for the dialect; cut only between entities and characters
  space,        // spaces between words: a cut may fall here (and the spaces go)
  line_break,   // "\n": a cut may fall here (and the newline goes)
  block_break,  // what separates two blocks ("\n\n", "\n" in a tight list): a cut may fall here
  line_start,   // a line's prefix: `text` (a quote's "> ", kept), then `extra` (indentation, left out
                // at the start of a part)
  open,         // markup that opens a frame; `extra` is the markup that closes it
  close,        // closes the innermost open frame
};

struct Token {
  TokenKind kind = TokenKind::text;
  std::string text;
  std::string extra;
  // line_start: what a part starts with when a cut falls mid-line (Slack's quote marker: the rest
  // of the line stays quoted).
  std::string cont;
  bool block_frame = false;   // open: a quote or code frame, reopened before `cont` and inline frames
  bool keep = false;          // space: part of the text (code, tables); a cut after it keeps it
  bool fallback = false;      // from a block rendered without markup (RenderedPart::plain_fallback)
  std::size_t len = 0;        // text's length in the unit
  std::size_t extra_len = 0;  // extra's length in the unit
};

struct TokenLimits {
  std::size_t max_length = 0;  // a part's limit
  LengthUnit unit = LengthUnit::utf16;
  std::size_t reserve = 0;  // kept free in every part (the "(i/N)" label)
};

// How finely text is cut into tokens. `words`: each word a token, each run of spaces a token, the
// form a split needs. `runs`: a run of text (one style) as one token between its leading and
// trailing spaces: the same text and markup in fewer tokens, with nowhere to cut inside a run. A
// reply that fits one part (most do) needs no cut, and writing it by runs is much cheaper: see
// SplitWhole.
enum class Granularity { words, runs };

// The Doc in `dialect`. A block whose markup could leave a part no room for text within
// `limits` (a code fence with a very long language, a link with a very long URL, a frame the
// label leaves too little room for) is written without markup, its tokens marked `fallback`; the
// choice does not depend on the granularity.
std::vector<Token> RenderTokens(const Doc& doc, MarkupDialect dialect, const TokenLimits& limits,
                                Granularity granularity = Granularity::words);

// Plain text (no Markdown, no escaping; valid UTF-8) as words, spaces, line breaks and paragraph
// breaks (a blank line), the form the splitter cuts: SplitText.
std::vector<Token> PlainTokens(std::string_view text, LengthUnit unit);

// The most units one cut-free piece of text takes ("&amp;" is 5, a code point at most 4): the
// room a part must have beyond its markup to make progress.
inline constexpr std::size_t kMaxUnitLength = 6;

}  // namespace sessionturn::render
