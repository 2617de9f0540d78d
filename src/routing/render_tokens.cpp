#include "routing/render_tokens.hpp"

#include <algorithm>
#include <array>
#include <iterator>
#include <span>
#include <string_view>

#include "routing/render_text.hpp"

namespace sessionturn::render {
namespace {

// Indentation stops growing here: a deeply nested list would otherwise spend a part's room on
// spaces (the bullets still tell the levels apart).
constexpr std::size_t kMaxIndent = 16;
// Plain text shows at most this many "> ": deeper quotes read the same, and the prefix is repeated
// on every line, so it must stay short next to the smallest part.
constexpr int kMaxPlainQuoteDepth = 3;
constexpr const char* kSlackCodeFence = "```";
constexpr const char* kModifierGrave = "\xCB\x8B";  // ˋ: stands in for a backtick Slack would end code at

enum class Mode { telegram, slack, plain };

std::string LowerScheme(std::string_view url) {
  std::string scheme;
  for (char c : url) {
    if (c == ':') return scheme;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '+' || c == '-' || c == '.')) return "";
    scheme.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
  }
  return "";
}

// Whether the platform takes `url` as a link. Telegram drops a link with a URL it does not accept
// (keeping its text, losing the URL), and a relative URL means nothing in a chat, so those read as
// "text (url)" instead.
bool LinkAllowed(Mode mode, std::string_view url) {
  const std::string scheme = LowerScheme(url);
  if (scheme == "http" || scheme == "https" || scheme == "ftp") return true;
  if (mode == Mode::telegram) return scheme == "tg";
  return scheme == "mailto";
}

// Telegram's class="language-x" takes a language name; a fence's info string can hold anything,
// so an unusual one is left out (the code still shows, unhighlighted).
std::string LanguageName(std::string_view info) {
  constexpr std::size_t kMaxLanguage = 32;
  if (info.size() > kMaxLanguage) return "";
  for (char c : info) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' ||
                    c == '-' || c == '_' || c == '.' || c == '#';
    if (!ok) return "";
  }
  return std::string(info);
}

std::string SlackUrl(std::string_view url) {
  std::string out;
  for (char c : url) {
    if (c == '|') {
      out += "%7C";  // the separator between a Slack link's URL and its text
    } else {
      out.push_back(c);
    }
  }
  return EscapeText(out);
}

// Slack ends inline code at any backtick and a code block at three: those become ˋ, the rest stay.
std::string SlackCode(std::string_view text, bool block) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '`') {
      out.push_back(text[i++]);
      continue;
    }
    std::size_t run = 0;
    while (i + run < text.size() && text[i + run] == '`') ++run;
    for (std::size_t k = 0; k < run; ++k) out += (block && run < 3) ? "`" : kModifierGrave;
    i += run;
  }
  return out;
}

struct Frame {
  std::string key;  // frames with the same key are the same markup ("b", "a3")
  std::string open;
  std::string close;
};

// Writes one block's tokens.
class BlockWriter {
 public:
  BlockWriter(Mode mode, bool escape, bool fallback, LengthUnit unit, Granularity granularity, const Doc& doc,
              std::vector<Token>& out)
      : mode_(mode),
        escape_(escape),
        fallback_(fallback),
        unit_(unit),
        by_runs_(granularity == Granularity::runs),
        doc_(doc),
        out_(out) {}

  void Write(const Block& b) {
    switch (b.kind) {
      case Block::Kind::text: WriteText(b); break;
      case Block::Kind::code: WriteCode(b); break;
      case Block::Kind::table: WriteTable(b); break;
    }
  }

 private:
  std::string Esc(std::string_view s) const { return escape_ ? EscapeText(s) : std::string(s); }

  // Built in place: a token is three strings, and a word's is most of a reply's tokens.
  void Add(TokenKind kind, std::string text, std::string extra = {}) {
    Token& t = out_.emplace_back();
    t.kind = kind;
    t.len = MeasureLength(text, unit_);
    t.extra_len = extra.empty() ? 0 : MeasureLength(extra, unit_);
    t.text = std::move(text);
    t.extra = std::move(extra);
    t.fallback = fallback_;
  }

  std::string QuotePrefix(const Block& b) const {
    if (b.quote_depth == 0 || mode_ == Mode::telegram) return "";  // Telegram quotes are a frame
    if (mode_ == Mode::slack) return "> ";                         // Slack's quotes do not nest
    std::string prefix;
    for (int i = 0; i < std::min(b.quote_depth, kMaxPlainQuoteDepth); ++i) prefix += "> ";
    return Esc(prefix);
  }

  void LineStart(const Block& b, bool first) {
    const std::size_t indent = std::min(b.indent, kMaxIndent);
    const std::size_t marker = first ? ColumnWidth(b.marker) : 0;
    Add(TokenKind::line_start, QuotePrefix(b), std::string(indent > marker ? indent - marker : 0, ' '));
    if (mode_ == Mode::slack) out_.back().cont = out_.back().text;
  }

  // Text as words and the spaces between them; `keep` for code, whose spaces are text. By runs:
  // the leading and trailing spaces as they would be (a part drops a space it starts with), and
  // everything between them as one text: the spaces inside it are emitted as they are once text
  // precedes them, so a part that needs no cut reads the same.
  void Words(std::string_view text, bool keep) {
    if (by_runs_) {
      const std::size_t first = std::min(text.find_first_not_of(" \t"), text.size());
      const std::size_t end = first == text.size() ? first : text.find_last_not_of(" \t") + 1;
      if (first > 0) {
        Add(TokenKind::space, std::string(text.substr(0, first)));
        out_.back().keep = keep;
      }
      if (end > first) Add(TokenKind::text, Esc(text.substr(first, end - first)));
      if (end < text.size() && end > first) {
        Add(TokenKind::space, std::string(text.substr(end)));
        out_.back().keep = keep;
      }
      return;
    }
    for (std::size_t i = 0; i < text.size();) {
      const bool space = text[i] == ' ' || text[i] == '\t';
      std::size_t j = i;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t') == space) ++j;
      if (space) {
        Add(TokenKind::space, std::string(text.substr(i, j - i)));
        out_.back().keep = keep;
      } else {
        Add(TokenKind::text, Esc(text.substr(i, j - i)));
      }
      i = j;
    }
  }

  std::vector<Frame> FramesFor(unsigned style, const Frame* link) const {
    std::vector<Frame> frames;
    const auto add = [&](unsigned bit, const char* key, const char* open, const char* close) {
      if (style & bit) frames.push_back(Frame{key, open, close});
    };
    if (mode_ == Mode::telegram) {
      // Telegram's entity rules: code holds nothing and sits in nothing but a quote.
      if (style & kCode) {
        if (link) {
          frames.push_back(*link);
        } else {
          frames.push_back(Frame{"c", "<code>", "</code>"});
        }
        return frames;
      }
      if (link) frames.push_back(*link);
      add(kBold, "b", "<b>", "</b>");
      add(kItalic, "i", "<i>", "</i>");
      add(kStrike, "s", "<s>", "</s>");
    } else if (mode_ == Mode::slack) {
      add(kBold, "b", "*", "*");
      add(kItalic, "i", "_", "_");
      add(kStrike, "s", "~", "~");
      if (link) {
        frames.push_back(*link);  // Slack formats nothing inside a link's text, code included
      } else {
        add(kCode, "c", "`", "`");
      }
    }
    return frames;
  }

  // Closes what `desired` does not share with what is open, then opens the rest: tags stay balanced.
  void Transition(const std::vector<Frame>& desired) {
    std::size_t same = 0;
    while (same < stack_.size() && same < desired.size() && stack_[same].key == desired[same].key) ++same;
    while (stack_.size() > same) {
      Add(TokenKind::close, "");
      stack_.pop_back();
    }
    for (std::size_t i = same; i < desired.size(); ++i) {
      Add(TokenKind::open, desired[i].open, desired[i].close);
      stack_.push_back(desired[i]);
    }
  }

  void RunText(const Run& run, unsigned style, const Frame* link) {
    Transition(FramesFor(style, link));
    if ((style & kCode) && mode_ == Mode::slack && !link) {
      Words(SlackCode(run.text, false), false);
    } else {
      Words(run.text, false);
    }
  }

  // A soft or hard break: a new line, in the style of the break (bold stays open across it where
  // the dialect allows, and what ended before it is closed before it).
  void Break(const Block& b, const Run& run, const Frame* link) {
    if (mode_ == Mode::slack) {
      if (link) {  // a Slack link's text is one line
        Add(TokenKind::space, " ");
        return;
      }
      Transition({});  // Slack's formatting does not cross lines
    } else {
      Transition(FramesFor(run.style & ~kCode, link));
    }
    Add(TokenKind::line_break, "\n");
    LineStart(b, false);
  }

  void WriteLink(const Block& b, std::size_t begin, std::size_t end) {
    const auto& runs = b.runs;
    const std::string& url = doc_.links[static_cast<std::size_t>(runs[begin].link)];
    std::string text;
    unsigned common = ~0u;  // Slack: the styles every run of the link has, applied around it
    for (std::size_t i = begin; i < end; ++i) {
      if (runs[i].kind == Run::Kind::text) {
        text += runs[i].text;
        common &= runs[i].style;
      }
    }
    if (mode_ != Mode::plain && LinkAllowed(mode_, url)) {
      const Frame link =
          mode_ == Mode::telegram
              ? Frame{"a" + std::to_string(runs[begin].link), "<a href=\"" + EscapeAttribute(url) + "\">", "</a>"}
              : Frame{"a" + std::to_string(runs[begin].link), "<" + SlackUrl(url) + "|", ">"};
      for (std::size_t i = begin; i < end; ++i) {
        if (runs[i].kind != Run::Kind::text) {
          Break(b, runs[i], &link);
        } else {
          RunText(runs[i], mode_ == Mode::slack ? (common & ~kCode) : runs[i].style, &link);
        }
      }
      return;
    }
    for (std::size_t i = begin; i < end; ++i) {
      if (runs[i].kind != Run::Kind::text) {
        Break(b, runs[i], nullptr);
      } else {
        RunText(runs[i], runs[i].style, nullptr);
      }
    }
    const std::string plain = PlainLink(text, url);
    if (plain.size() > text.size()) {  // " (url)" follows, unstyled
      Transition({});
      Words(plain.substr(text.size()), false);
    }
  }

  void WriteText(const Block& b) {
    LineStart(b, true);
    if (!b.marker.empty()) {
      // A marker on a line of its own (an item starting with code) needs no space after it.
      const std::string_view marker =
          b.runs.empty() ? std::string_view(b.marker).substr(0, b.marker.size() - 1) : std::string_view(b.marker);
      Add(TokenKind::text, Esc(marker));
    }
    for (std::size_t i = 0; i < b.runs.size();) {
      const Run& run = b.runs[i];
      if (run.link >= 0) {
        std::size_t end = i;
        while (end < b.runs.size() && b.runs[end].link == run.link) ++end;
        WriteLink(b, i, end);
        i = end;
        continue;
      }
      if (run.kind == Run::Kind::text) {
        RunText(run, run.style, nullptr);
      } else {
        Break(b, run, nullptr);
      }
      ++i;
    }
    Transition({});
  }

  // Lines shown as they are, in a code frame where the dialect has one: code blocks and tables.
  void WriteLines(const Block& b, const std::vector<std::string>& lines, const std::string& language) {
    if (mode_ == Mode::telegram) {
      Add(TokenKind::open, language.empty() ? "<pre>" : "<pre><code class=\"language-" + language + "\">",
          language.empty() ? "</pre>" : "</code></pre>");
      out_.back().block_frame = true;
    } else if (mode_ == Mode::slack) {
      Add(TokenKind::open, std::string(kSlackCodeFence) + "\n", "\n" + std::string(kSlackCodeFence));
      out_.back().block_frame = true;
    }
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) Add(TokenKind::line_break, "\n");
      if (mode_ == Mode::plain && b.quote_depth > 0) Add(TokenKind::line_start, QuotePrefix(b));
      Words(mode_ == Mode::slack ? SlackCode(lines[i], true) : lines[i], true);
    }
    if (mode_ != Mode::plain) Add(TokenKind::close, "");
  }

  void WriteCode(const Block& b) {
    std::vector<std::string> lines;
    for (std::size_t start = 0; start <= b.code.size();) {
      const std::size_t end = std::min(b.code.find('\n', start), b.code.size());
      lines.push_back(b.code.substr(start, end - start));
      start = end + 1;
    }
    WriteLines(b, lines, mode_ == Mode::telegram ? LanguageName(b.language) : "");
  }

  void WriteTable(const Block& b) {
    const auto& rows = b.table.rows;
    std::size_t columns = b.table.align.size();
    for (const auto& row : rows) columns = std::max(columns, row.size());
    std::vector<std::size_t> width(columns, 1);
    for (const auto& row : rows)
      for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], ColumnWidth(row[c]));
    const auto cell = [&](const std::vector<std::string>& row, std::size_t c) {
      const std::string text = c < row.size() ? row[c] : "";
      const std::size_t pad = width[c] - ColumnWidth(text);
      const char align = c < b.table.align.size() ? b.table.align[c] : 0;
      const std::size_t left = align == 'r' ? pad : align == 'c' ? pad / 2 : 0;
      return std::string(left, ' ') + text + std::string(pad - left, ' ');
    };
    std::vector<std::string> lines;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      std::string line;
      for (std::size_t c = 0; c < columns; ++c) line += (c ? " | " : "") + cell(rows[r], c);
      while (!line.empty() && line.back() == ' ') line.pop_back();
      lines.push_back(std::move(line));
      if (r == 0) {
        std::string rule;
        for (std::size_t c = 0; c < columns; ++c) rule += (c ? "-+-" : "") + std::string(width[c], '-');
        lines.push_back(std::move(rule));
      }
    }
    WriteLines(b, lines, "");
  }

  Mode mode_;
  bool escape_;
  bool fallback_;
  LengthUnit unit_;
  bool by_runs_;
  const Doc& doc_;
  std::vector<Token>& out_;
  std::vector<Frame> stack_;
};

Mode ModeFor(MarkupDialect dialect) {
  switch (dialect) {
    case MarkupDialect::telegram_html: return Mode::telegram;
    case MarkupDialect::slack_mrkdwn: return Mode::slack;
    case MarkupDialect::plain: break;
  }
  return Mode::plain;
}

// Whether every place in a block's tokens (`all` from `from` on) leaves room for text in a part that
// starts there: the frames open there reopened, closed again at the end, and the label. `outer` is a
// frame open around the block.
bool Fits(const std::vector<Token>& all, std::size_t from, const Token* outer, const TokenLimits& limits) {
  const std::span<const Token> tokens(all.begin() + static_cast<std::ptrdiff_t>(from), all.end());
  std::vector<const Token*> stack;
  std::size_t opens = 0, closes = 0, cont = 0;
  if (outer) {
    stack.push_back(outer);
    opens += outer->len;
    closes += outer->extra_len;
  }
  const auto room = [&](std::size_t need) {
    return opens + closes + cont + need + kMaxUnitLength + limits.reserve <= limits.max_length;
  };
  for (const Token& t : tokens) {
    switch (t.kind) {
      case TokenKind::text:
        if (!room(0)) return false;
        break;
      case TokenKind::open:
        if (!room(t.len + t.extra_len)) return false;
        stack.push_back(&t);
        opens += t.len;
        closes += t.extra_len;
        break;
      case TokenKind::close:
        if (!stack.empty()) {
          opens -= stack.back()->len;
          closes -= stack.back()->extra_len;
          stack.pop_back();
        }
        break;
      case TokenKind::line_start:
        if (!room(t.len)) return false;
        cont = MeasureLength(t.cont, limits.unit);
        break;
      case TokenKind::line_break:
      case TokenKind::block_break: cont = 0; break;
      case TokenKind::space: break;
    }
  }
  return true;
}

Token Make(TokenKind kind, std::string text, LengthUnit unit) {
  Token t;
  t.kind = kind;
  t.len = MeasureLength(text, unit);
  t.text = std::move(text);
  return t;
}

// What separates two blocks: a newline between the blocks of one tight list, a blank line otherwise.
std::string Separator(const Block& before, const Block& after) {
  return after.tight && after.list_id != 0 && before.list_id == after.list_id ? "\n" : "\n\n";
}

}  // namespace

std::vector<Token> RenderTokens(const Doc& doc, MarkupDialect dialect, const TokenLimits& limits,
                                Granularity granularity) {
  const Mode mode = ModeFor(dialect);
  const bool escape = dialect != MarkupDialect::plain;
  // Telegram's block quotes: one frame over consecutive quoted blocks (they cannot nest).
  Token quote = Make(TokenKind::open, "<blockquote>", limits.unit);
  quote.extra = "</blockquote>";
  quote.extra_len = MeasureLength(quote.extra, limits.unit);
  quote.block_frame = true;

  std::vector<Token> out;
  // About a word and a space per six bytes of text, and a few tokens of markup per block: the
  // vectors grow once, not token by token (moving every token each time).
  // By runs: a text and its two spaces per run (a code line is a run), and the same markup.
  std::size_t bytes = 0, runs = 0;
  for (const Block& b : doc.blocks) {
    bytes += b.code.size();
    runs += b.runs.size() + static_cast<std::size_t>(std::count(b.code.begin(), b.code.end(), '\n')) + 1;
    for (const Run& r : b.runs) bytes += r.text.size();
  }
  out.reserve((granularity == Granularity::runs ? 3 * runs : bytes / 3) + 4 * doc.blocks.size() + 4);
  bool quote_open = false;
  const Block* previous = nullptr;
  for (const Block& b : doc.blocks) {
    const bool in_quote = mode == Mode::telegram && b.quote_depth > 0;
    // What comes before the block's own tokens depends on whether it keeps its markup (a quote frame
    // does not hold a block written plain), so the block is written first, at the end of `out`, and
    // the separator and frames are put in front of it.
    const std::size_t start = out.size();
    BlockWriter(mode, escape, false, limits.unit, granularity, doc, out).Write(b);
    bool quoted = in_quote;
    if (mode != Mode::plain && !Fits(out, start, quoted ? &quote : nullptr, limits)) {
      out.resize(start);
      BlockWriter(Mode::plain, escape, true, limits.unit, granularity, doc, out).Write(b);
      quoted = false;
    }
    std::array<Token, 3> before;
    std::size_t n = 0;
    if (quote_open && !quoted) {
      before[n++] = Make(TokenKind::close, "", limits.unit);
      quote_open = false;
    }
    if (previous) before[n++] = Make(TokenKind::block_break, Separator(*previous, b), limits.unit);
    if (quoted && !quote_open) {
      before[n++] = quote;
      quote_open = true;
    }
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(start), std::make_move_iterator(before.begin()),
               std::make_move_iterator(before.begin() + static_cast<std::ptrdiff_t>(n)));
    previous = &b;
  }
  if (quote_open) out.push_back(Make(TokenKind::close, "", limits.unit));
  return out;
}

std::vector<Token> PlainTokens(std::string_view text, LengthUnit unit) {
  std::vector<Token> out;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    std::size_t j = i;
    if (c == '\n' || c == '\r') {
      std::size_t newlines = 0;
      while (j < text.size() && (text[j] == '\n' || text[j] == '\r')) newlines += text[j++] == '\n';
      // A blank line is a paragraph break, the best place to cut; a lone \r counts as a line break.
      const TokenKind kind = newlines >= 2 ? TokenKind::block_break : TokenKind::line_break;
      out.push_back(Make(kind, std::string(text.substr(i, j - i)), unit));
    } else if (c == ' ' || c == '\t') {
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
      out.push_back(Make(TokenKind::space, std::string(text.substr(i, j - i)), unit));
    } else {
      while (j < text.size() && text[j] != ' ' && text[j] != '\t' && text[j] != '\n' && text[j] != '\r') ++j;
      out.push_back(Make(TokenKind::text, std::string(text.substr(i, j - i)), unit));
    }
    i = j;
  }
  return out;
}

}  // namespace sessionturn::render
