#include "routing/render_doc.hpp"

#include <algorithm>

#include <cmark-gfm-core-extensions.h>
#include <cmark-gfm.h>

#include <array>
#include <cstring>
#include <memory>

#include "routing/render_arena.hpp"
#include "routing/render_text.hpp"

namespace sessionturn::render {
namespace {

// The GitHub extensions a reply may use. Footnotes stay off: a chat message has nowhere to put them,
// and their syntax then reads as the text it is.
constexpr const char* kExtensions[] = {"table", "strikethrough", "autolink", "tasklist"};

// Bullets by nesting level, so a nested list reads as nested even where indentation is lost.
constexpr const char* kBullets[] = {"\xE2\x80\xA2", "\xE2\x97\xA6", "\xE2\x96\xAA"};  // • ◦ ▪
constexpr const char* kUnchecked = "\xE2\x98\x90";                                    // ☐
constexpr const char* kChecked = "\xE2\x98\x91";                                      // ☑
constexpr const char* kRule =
    "\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80"
    "\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80";  // ──────────
constexpr const char* kImage = "image";                              // an image's text when it has no alt text

struct ParserFree {
  void operator()(cmark_parser* p) const { cmark_parser_free(p); }
};
struct NodeFree {
  void operator()(cmark_node* n) const { cmark_node_free(n); }
};
struct IterFree {
  void operator()(cmark_iter* it) const { cmark_iter_free(it); }
};

// The extensions a parse attaches, registered and looked up once: the registry is a process-wide list
// that registration writes without a lock, and a look-up walks it comparing names.
struct Extensions {
  std::array<cmark_syntax_extension*, std::size(kExtensions)> found{};
};

const Extensions& RegisteredExtensions() {
  static const Extensions extensions = [] {
    cmark_gfm_core_extensions_ensure_registered();
    Extensions e;
    for (std::size_t i = 0; i < e.found.size(); ++i) e.found[i] = cmark_find_syntax_extension(kExtensions[i]);
    return e;
  }();
  return extensions;
}

bool Is(cmark_node* node, const char* type) {
  return std::strcmp(cmark_node_get_type_string(node), type) == 0;
}

std::string_view Literal(cmark_node* node) {
  const char* s = cmark_node_get_literal(node);
  return s ? std::string_view(s) : std::string_view();
}

std::string_view WithoutFinalNewline(std::string_view s) {
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Builds a Doc from cmark's events. The walk is iterative (cmark_iter), so however deeply a reply
// nests quotes, lists or emphasis, it never runs out of stack.
class Builder {
 public:
  explicit Builder(std::string_view markdown) : markdown_(markdown) {
    // Lines end as cmark ends them: at "\n", "\r\n" or a lone "\r".
    for (std::size_t i = 0; i < markdown.size(); ++i) {
      if (markdown[i] == '\r' && i + 1 < markdown.size() && markdown[i + 1] == '\n') ++i;
      if (markdown[i] == '\n' || markdown[i] == '\r') line_starts_.push_back(i + 1);
    }
  }

  Doc Build(cmark_node* root) {
    std::unique_ptr<cmark_iter, IterFree> it(cmark_iter_new(root));
    for (cmark_event_type ev; (ev = cmark_iter_next(it.get())) != CMARK_EVENT_DONE;) {
      cmark_node* node = cmark_iter_get_node(it.get());
      if (ev == CMARK_EVENT_ENTER) {
        Enter(node);
      } else {
        Exit(node);
      }
    }
    return std::move(doc_);
  }

 private:
  struct List {
    bool ordered = false;
    int number = 1;
    char delim = '.';
    bool tight = false;
    std::size_t indent = 0;  // where its markers start
    int id = 0;
  };
  struct Item {
    std::string marker;
    bool pending = true;  // the marker is still to be shown, on the item's first block
    std::size_t indent = 0;
  };

  void Enter(cmark_node* node) {
    switch (cmark_node_get_type(node)) {
      case CMARK_NODE_BLOCK_QUOTE: ++quote_depth_; return;
      case CMARK_NODE_LIST: EnterList(node); return;
      case CMARK_NODE_ITEM: EnterItem(node); return;
      case CMARK_NODE_PARAGRAPH: StartText(0); return;
      case CMARK_NODE_HEADING: StartText(kBold); return;
      case CMARK_NODE_CODE_BLOCK: AddCodeBlock(node); return;
      case CMARK_NODE_HTML_BLOCK: AddLiteralBlock(WithoutFinalNewline(Literal(node))); return;
      case CMARK_NODE_THEMATIC_BREAK: AddLiteralBlock(kRule); return;
      case CMARK_NODE_TEXT: AddRun(Run::Kind::text, Literal(node), 0); return;
      case CMARK_NODE_HTML_INLINE: AddRun(Run::Kind::text, Literal(node), 0); return;
      case CMARK_NODE_CODE: AddRun(Run::Kind::text, Literal(node), kCode); return;
      case CMARK_NODE_SOFTBREAK: AddRun(Run::Kind::soft_break, "", 0); return;
      case CMARK_NODE_LINEBREAK: AddRun(Run::Kind::hard_break, "", 0); return;
      case CMARK_NODE_EMPH: ++italic_; return;
      case CMARK_NODE_STRONG: ++bold_; return;
      case CMARK_NODE_LINK:
      case CMARK_NODE_IMAGE: EnterLink(node); return;
      default: break;
    }
    if (Is(node, "strikethrough")) {
      ++strike_;
    } else if (Is(node, "table")) {
      table_ = Table{};
      const uint16_t columns = cmark_gfm_extensions_get_table_columns(node);
      const uint8_t* align = cmark_gfm_extensions_get_table_alignments(node);
      for (uint16_t c = 0; c < columns; ++c) table_.align.push_back(align ? static_cast<char>(align[c]) : 0);
    } else if (Is(node, "table_header") || Is(node, "table_row")) {
      table_.rows.emplace_back();
      cell_end_ = 0;
    } else if (Is(node, "table_cell")) {
      cell_.clear();
      runs_ = &cell_;
    }
  }

  void Exit(cmark_node* node) {
    switch (cmark_node_get_type(node)) {
      case CMARK_NODE_BLOCK_QUOTE: --quote_depth_; return;
      case CMARK_NODE_LIST: lists_.pop_back(); return;
      case CMARK_NODE_ITEM:
        FlushMarker();
        items_.pop_back();
        return;
      case CMARK_NODE_PARAGRAPH:
      case CMARK_NODE_HEADING: FinishText(); return;
      case CMARK_NODE_EMPH: --italic_; return;
      case CMARK_NODE_STRONG: --bold_; return;
      case CMARK_NODE_LINK:
      case CMARK_NODE_IMAGE: ExitLink(node); return;
      default: break;
    }
    if (Is(node, "strikethrough")) {
      --strike_;
    } else if (Is(node, "table")) {
      Block b = NewBlock(Block::Kind::table);
      b.table = std::move(table_);
      Push(std::move(b));
    } else if (Is(node, "table_cell")) {
      if (!table_.rows.empty()) table_.rows.back().push_back(FlattenRuns(cell_));
      runs_ = nullptr;
      cell_end_ = cmark_node_get_end_column(node);
    } else if (Is(node, "table_header") || Is(node, "table_row")) {
      KeepExcessCells(node);
    }
  }

  // GFM drops the cells of a row beyond the header's columns; their text is kept, as written, in
  // the row's last cell (a reply shows all its text).
  void KeepExcessCells(cmark_node* row) {
    const int line = cmark_node_get_start_line(row);
    const int end = cmark_node_get_end_column(row);
    if (table_.rows.empty() || table_.rows.back().empty() || line < 1 || cell_end_ < 1 || end <= cell_end_ ||
        static_cast<std::size_t>(line) > line_starts_.size())
      return;
    const std::size_t start = line_starts_[static_cast<std::size_t>(line) - 1];
    const std::size_t from = start + static_cast<std::size_t>(cell_end_), to = start + static_cast<std::size_t>(end);
    if (to > markdown_.size() || from >= to) return;
    std::string_view extra = markdown_.substr(from, to - from);
    while (!extra.empty() && (extra.front() == '|' || extra.front() == ' ' || extra.front() == '\t'))
      extra.remove_prefix(1);
    while (!extra.empty() && (extra.back() == '|' || extra.back() == ' ' || extra.back() == '\t'))
      extra.remove_suffix(1);
    // A slice at columns cmark reports is whole characters; SanitizeUtf8 makes sure of it.
    if (!extra.empty()) table_.rows.back().back() += " | " + SanitizeUtf8(extra);
  }

  void EnterList(cmark_node* node) {
    List list;
    list.ordered = cmark_node_get_list_type(node) == CMARK_ORDERED_LIST;
    list.number = cmark_node_get_list_start(node);
    list.delim = cmark_node_get_list_delim(node) == CMARK_PAREN_DELIM ? ')' : '.';
    list.tight = cmark_node_get_list_tight(node) != 0;
    list.indent = items_.empty() ? 0 : items_.back().indent;
    list.id = lists_.empty() ? ++next_list_id_ : lists_.front().id;
    lists_.push_back(list);
  }

  void EnterItem(cmark_node* node) {
    if (lists_.empty()) return;  // cmark never makes one outside a list
    List& list = lists_.back();
    std::string marker;
    const bool task = Is(node, "tasklist");
    if (list.ordered) {
      marker = std::to_string(list.number++) + list.delim + " ";
    } else if (!task) {
      std::size_t bullet_level = 0;
      for (const List& l : lists_) bullet_level += l.ordered ? 0 : 1;
      marker = std::string(kBullets[(bullet_level - 1) % std::size(kBullets)]) + " ";
    }
    if (task) marker += std::string(cmark_gfm_extensions_get_tasklist_item_checked(node) ? kChecked : kUnchecked) + " ";
    items_.push_back(Item{marker, true, list.indent + ColumnWidth(marker)});
  }

  void EnterLink(cmark_node* node) {
    const char* url = cmark_node_get_url(node);
    doc_.links.emplace_back(url ? url : "");
    links_.push_back(static_cast<int>(doc_.links.size()) - 1);
    link_runs_.push_back(runs_ ? runs_->size() : 0);
  }

  void ExitLink(cmark_node* node) {
    if (links_.empty()) return;
    // A link without text shows its URL; an image without alt text, kImage.
    if (runs_ && runs_->size() == link_runs_.back()) {
      const std::string& url = doc_.links[static_cast<std::size_t>(links_.back())];
      AddRun(Run::Kind::text, cmark_node_get_type(node) == CMARK_NODE_IMAGE ? kImage : url, 0);
    }
    links_.pop_back();
    link_runs_.pop_back();
  }

  Block NewBlock(Block::Kind kind) {
    Block b;
    b.kind = kind;
    b.quote_depth = quote_depth_;
    if (!items_.empty()) {
      b.indent = items_.back().indent;
      if (items_.back().pending) {
        b.marker = items_.back().marker;
        items_.back().pending = false;
      }
    }
    if (!lists_.empty()) {
      b.list_id = lists_.front().id;
      b.tight = lists_.back().tight;
    }
    return b;
  }

  // A list item that starts with something other than text (a code block, a table, a nested list)
  // or holds nothing shows its marker on a line of its own.
  void FlushMarker() {
    if (!items_.empty() && items_.back().pending) Push(NewBlock(Block::Kind::text));
  }

  void StartText(unsigned base_style) {
    text_ = NewBlock(Block::Kind::text);
    runs_ = &text_.runs;
    base_style_ = base_style;
  }

  void FinishText() {
    Push(std::move(text_));
    text_ = Block{};
    runs_ = nullptr;
    base_style_ = 0;
  }

  void AddRun(Run::Kind kind, std::string_view text, unsigned style) {
    if (!runs_ || (kind == Run::Kind::text && text.empty())) return;
    Run run;
    run.kind = kind;
    run.text = std::string(text);
    run.style = style | base_style_ | (bold_ ? kBold : 0) | (italic_ ? kItalic : 0) | (strike_ ? kStrike : 0);
    run.link = links_.empty() ? -1 : links_.back();
    runs_->push_back(std::move(run));
  }

  void AddCodeBlock(cmark_node* node) {
    const std::string_view code = WithoutFinalNewline(Literal(node));
    if (code.empty()) return;  // an empty fence shows nothing
    FlushMarker();
    Block b = NewBlock(Block::Kind::code);
    const char* info = cmark_node_get_fence_info(node);
    const std::string_view info_view = info ? info : "";
    b.language = std::string(info_view.substr(0, info_view.find_first_of(" \t")));
    b.code = std::string(code);
    Push(std::move(b));
  }

  // Raw HTML and rules: text as it is, line by line.
  void AddLiteralBlock(std::string_view literal) {
    StartText(0);
    for (std::size_t start = 0; start <= literal.size();) {
      const std::size_t end = std::min(literal.find('\n', start), literal.size());
      if (start > 0) AddRun(Run::Kind::hard_break, "", 0);
      AddRun(Run::Kind::text, literal.substr(start, end - start), 0);
      start = end + 1;
    }
    FinishText();
  }

  std::string FlattenRuns(const std::vector<Run>& runs) {
    std::string out;
    for (std::size_t i = 0; i < runs.size();) {
      if (runs[i].kind != Run::Kind::text) {
        out += ' ';
        ++i;
        continue;
      }
      const int link = runs[i].link;
      std::string text;
      for (; i < runs.size() && runs[i].kind == Run::Kind::text && runs[i].link == link; ++i) text += runs[i].text;
      out += link < 0 ? text : PlainLink(text, doc_.links[static_cast<std::size_t>(link)]);
    }
    return out;
  }

  void Push(Block b) {
    const bool empty_text = b.kind == Block::Kind::text && b.runs.empty() && b.marker.empty();
    if (!empty_text) doc_.blocks.push_back(std::move(b));
  }

  std::string_view markdown_;
  std::vector<std::size_t> line_starts_{0};  // where each source line starts (cmark's lines count from 1)
  Doc doc_;
  int quote_depth_ = 0;
  std::vector<List> lists_;
  std::vector<Item> items_;
  int next_list_id_ = 0;
  Block text_;                        // the paragraph or heading being built
  Table table_;                       // the table being built
  std::vector<Run> cell_;             // the table cell being built
  int cell_end_ = 0;                  // the source column the row's last cell ended at
  std::vector<Run>* runs_ = nullptr;  // where inline content goes now (nowhere outside text)
  unsigned base_style_ = 0;
  int bold_ = 0, italic_ = 0, strike_ = 0;
  std::vector<int> links_;              // open links, innermost last
  std::vector<std::size_t> link_runs_;  // runs_->size() when each opened
};

}  // namespace

std::size_t ShownAtLeast(const Doc& doc) {
  auto count = [](std::string_view text) {
    return static_cast<std::size_t>(
        std::count_if(text.begin(), text.end(), [](char c) { return c > ' ' && c < '\x7f'; }));
  };
  std::size_t n = 0;
  for (const Block& b : doc.blocks) {
    for (const Run& r : b.runs) n += count(r.text);
    n += count(b.code);
    for (const auto& row : b.table.rows)
      for (const std::string& cell : row) n += count(cell);
  }
  return n;
}

std::string PlainLink(std::string_view text, std::string_view url) {
  if (text.empty()) return std::string(url);
  const auto shows = [&](std::string_view prefix) {
    return url.size() == prefix.size() + text.size() && url.substr(0, prefix.size()) == prefix &&
           url.substr(prefix.size()) == text;
  };
  if (url.empty() || shows("") || shows("mailto:") || shows("http://") || shows("https://")) return std::string(text);
  return std::string(text) + " (" + std::string(url) + ")";
}

namespace {

// Bytes a plain line may hold anywhere: letters, digits, the space, punctuation that starts nothing
// in GFM mid-line, and every byte of a non-ASCII character (the text is valid UTF-8).
constexpr std::array<bool, 256> kPlainBytes = [] {
  std::array<bool, 256> t{};
  for (int c = 0x80; c < 0x100; ++c) t[static_cast<std::size_t>(c)] = true;
  for (char c = 'a'; c <= 'z'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c = 'A'; c <= 'Z'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c = '0'; c <= '9'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c : std::string_view(" !\"#$%'()+,-./:;=?[]^{}")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

bool IsAsciiDigit(char c) {
  return c >= '0' && c <= '9';
}

bool IsW(char c) {
  return c == 'w' || c == 'W';
}

// A line no block can start with or be, and in which no inline construct can begin.
bool PlainLine(std::string_view line) {
  const auto first = static_cast<unsigned char>(line.front());
  if (IsAsciiDigit(line.front())) {
    // "1." and "1)" start an ordered list.
    const std::size_t after = line.find_first_not_of("0123456789");
    if (after != std::string_view::npos && (line[after] == '.' || line[after] == ')')) return false;
  } else if (!(first >= 0x80 || (first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') || first == '"' ||
               first == '\'' || first == '(')) {
    return false;
  }
  if (line.back() == ' ') return false;  // a hard break, or nothing; either way not text
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (!kPlainBytes[static_cast<unsigned char>(c)]) return false;
    // Brackets are text unless a link follows ("[text](url)", "[text][label]"; a definition "[label]:"
    // would start a paragraph, and no plain line starts with '[').
    if (c == ']' && i + 1 < line.size() && (line[i + 1] == '(' || line[i + 1] == '[' || line[i + 1] == ':'))
      return false;
    // The autolink extension's URLs: "scheme://..." and "www.".
    if (c == ':' && line.substr(i + 1, 2) == "//") return false;
    if (c == '.' && i >= 3 && IsW(line[i - 1]) && IsW(line[i - 2]) && IsW(line[i - 3])) return false;
  }
  return true;
}

// Walks a plain reply's lines: `line(text, first_of_paragraph)` for each that is not blank (a blank
// line ends a paragraph). False when a line is not plain, or when no line has text (cmark's to say).
template <typename OnLine>
bool ForPlainLines(std::string_view markdown, OnLine&& line) {
  bool in_paragraph = false;  // a blank line ends one
  bool any = false;
  for (std::size_t at = 0; at <= markdown.size();) {
    const std::size_t end = std::min(markdown.find('\n', at), markdown.size());
    const std::string_view text = markdown.substr(at, end - at);
    if (text.empty()) {
      in_paragraph = false;
    } else {
      if (!PlainLine(text)) return false;
      line(text, !in_paragraph);
      in_paragraph = true;
      any = true;
    }
    at = end + 1;
  }
  return any;
}

}  // namespace

std::optional<Doc> ParsePlainText(std::string_view markdown) {
  Doc doc;
  const bool plain = ForPlainLines(markdown, [&doc](std::string_view line, bool first) {
    if (first) doc.blocks.emplace_back();
    std::vector<Run>& runs = doc.blocks.back().runs;
    if (!first) runs.push_back(Run{Run::Kind::soft_break, {}, 0, -1});
    runs.push_back(Run{Run::Kind::text, std::string(line), 0, -1});
  });
  if (!plain) return std::nullopt;
  return doc;
}

std::optional<std::string> PlainReplyText(std::string_view markdown) {
  std::string out;
  out.reserve(markdown.size());
  const bool plain = ForPlainLines(markdown, [&out](std::string_view line, bool first) {
    if (!out.empty()) out += first ? "\n\n" : "\n";
    out += line;
  });
  if (!plain) return std::nullopt;
  return out;
}

Doc ParseMarkdown(std::string_view markdown) {
  if (auto plain = ParsePlainText(markdown)) return std::move(*plain);
  return ParseMarkdownWithCmark(markdown);
}

Doc ParseMarkdownWithCmark(std::string_view markdown) {
  const Extensions& extensions = RegisteredExtensions();
  // Everything cmark allocates for this parse comes from the arena, given back when the parse is done
  // (after the tree and the parser below, which are freed first).
  const ParseArena arena;
  std::unique_ptr<cmark_parser, ParserFree> parser(cmark_parser_new_with_mem(CMARK_OPT_DEFAULT, arena.mem()));
  for (cmark_syntax_extension* ext : extensions.found)
    if (ext) cmark_parser_attach_syntax_extension(parser.get(), ext);
  cmark_parser_feed(parser.get(), markdown.data(), markdown.size());
  std::unique_ptr<cmark_node, NodeFree> root(cmark_parser_finish(parser.get()));
  return Builder(markdown).Build(root.get());
}

}  // namespace sessionturn::render
