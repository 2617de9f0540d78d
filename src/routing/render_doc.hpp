// Internal to reply rendering: a reply's Markdown, parsed by cmark-gfm, as the few things a chat
// message can show: text blocks (paragraphs, headings, raw HTML shown as text, rules) of styled
// runs, code blocks and tables, each with the quote and list it sits in. The dialects render this
// (render_tokens), not the cmark tree, so every dialect sees the same structure.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sessionturn::render {

// Run::style bits.
inline constexpr unsigned kBold = 1;
inline constexpr unsigned kItalic = 2;
inline constexpr unsigned kStrike = 4;
inline constexpr unsigned kCode = 8;  // a code span

// A piece of inline content in one style.
struct Run {
  enum class Kind { text, soft_break, hard_break };
  Kind kind = Kind::text;
  std::string text;
  unsigned style = 0;  // kBold | kItalic | ...
  int link = -1;       // index into Doc::links, -1: not in a link (an image is a link to the image)
  friend bool operator==(const Run&, const Run&) = default;
};

struct Table {
  std::vector<char> align;                     // per column: 'l', 'c', 'r' or 0 (none)
  std::vector<std::vector<std::string>> rows;  // cells as text; the first row is the header
  friend bool operator==(const Table&, const Table&) = default;
};

struct Block {
  enum class Kind { text, code, table };
  Kind kind = Kind::text;
  int quote_depth = 0;     // block quotes around it
  std::size_t indent = 0;  // the column its list item's content starts at (0: not in a list)
  std::string
      marker;  // the list item's marker ("• ", "2. ", "☑ ") on its first line, when it is the item's first block
  int list_id = 0;        // the outermost list it is in (0: none), to tell a tight list's blocks apart from the next
  bool tight = false;     // in a tight list: one newline from the block before it in the same list, not a blank line
  std::vector<Run> runs;  // text
  std::string language;   // code: the info string's first word
  std::string code;       // code: the literal, without its final newline
  Table table;            // table
  friend bool operator==(const Block&, const Block&) = default;
};

struct Doc {
  std::vector<Block> blocks;
  std::vector<std::string> links;  // link (and image) destinations
  friend bool operator==(const Doc&, const Doc&) = default;
};

// Parses GitHub-flavoured Markdown (tables, strikethrough, autolinks, task lists). `markdown` must
// be valid UTF-8 (SanitizeUtf8). Raw HTML becomes text; nothing is dropped but empty blocks.
// Plain text (ParsePlainText) is taken without cmark; the rest is ParseMarkdownWithCmark.
Doc ParseMarkdown(std::string_view markdown);

// The Doc of a reply in which no character can start any Markdown construct: paragraphs of lines
// that each start with a letter, a digit not followed by '.' or ')', a quote, '(' or a non-ASCII
// character, hold none of the characters of emphasis, code, HTML, entities, escapes, tables,
// strikethrough or e-mail autolinks ("*_`<>&\|~@"), no ']' followed by '(', '[' or ':' (links),
// no "://" or "www." (URL autolinks), no tab, no control character, and no space at either end.
// Such a reply reads as its own text, line by line (cmark makes the same Doc of it:
// test_render_plain.cpp and the render fuzz target compare them); std::nullopt for anything else.
// cmark's parse was half of a short plain reply's render.
std::optional<Doc> ParsePlainText(std::string_view markdown);

// A reply ParsePlainText takes, as every dialect writes it when it is one part: its lines as they
// are (a plain line holds nothing any dialect escapes), "\n" between a paragraph's lines and "\n\n"
// between paragraphs. std::nullopt for a reply ParsePlainText refuses. RenderReply's shortcut for
// the commonest reply: the Doc, its tokens and the splitter were most of such a reply's render
// (test_render_plain.cpp checks it against that path in every dialect).
std::optional<std::string> PlainReplyText(std::string_view markdown);

// ParseMarkdown through cmark-gfm whatever the text.
Doc ParseMarkdownWithCmark(std::string_view markdown);

// A lower bound of the length of `doc` rendered, in any dialect and unit: its printable ASCII
// characters but the space (in runs, code and table cells). Each is one unit in every unit, and every
// dialect shows each of them (escaped maybe, never dropped); whitespace may go at a part's edges.
std::size_t ShownAtLeast(const Doc& doc);

// How a link reads without markup: "text (url)", or the text alone when it already shows the URL
// (autolinks, e-mail addresses).
std::string PlainLink(std::string_view text, std::string_view url);

}  // namespace sessionturn::render
