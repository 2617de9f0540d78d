#include "routing/render_split.hpp"

#include <array>
#include <optional>
#include <string_view>

#include "routing/render_text.hpp"

namespace sessionturn::render {
namespace {

// Where a cut may fall, weakest first.
enum Level { kWord = 0, kLine = 1, kBlock = 2, kLevels = 3 };

// Where the next part starts.
struct Position {
  std::size_t token = 0;
  std::size_t offset = 0;          // into tokens[token].text, when a text was cut in two
  std::vector<std::size_t> stack;  // the frames open there (their open tokens), outermost first
  std::ptrdiff_t line = -1;        // the line_start of the line it is in, -1: none
  bool mid_line = false;           // the cut fell inside that line
};

struct Frame {
  std::size_t token;        // its open token
  std::size_t out_start;    // where its open markup starts in the part
  std::size_t used_before;  // the part's length before it
};

// The walk's state within a part; copied to remember a place a cut may fall.
struct Cursor {
  std::size_t token = 0;
  std::size_t offset = 0;
  std::ptrdiff_t line = -1;
  std::size_t out_size = 0;  // in a snapshot: the part's text size there
  std::size_t used = 0;      // the part's length so far
  std::size_t closes = 0;    // the length of the closes of what is open
  std::vector<Frame> frames;
  bool content = false;  // the part holds text
  bool fallback = false;
};

struct Candidate {
  Cursor at;  // the part as it ends there; at.token is where the next part resumes
  bool mid_line = false;
  bool valid = false;
};

class Splitter {
 public:
  Splitter(const std::vector<Token>& tokens, const SplitOptions& options)
      : t_(tokens), o_(options), soft_(options.soft_length ? options.soft_length : options.max_length) {}

  Result<std::vector<SplitPart>> Run() {
    std::vector<SplitPart> parts;
    Position next;
    while (next.token < t_.size()) {
      const std::size_t token = next.token, offset = next.offset;
      auto part = Part(next);
      if (!part) return Fail(part.error());
      // Each part must take something, or the walk would never end.
      if (next.token < token || (next.token == token && next.offset <= offset))
        return Fail(Errc::internal, "reply splitting made no progress (a bug in sessionturn's renderer)");
      if (!part->text.empty()) parts.push_back(std::move(*part));
    }
    return parts;
  }

  // The whole stream as one part, if it fits soft_length with no cut: a Part that gives up at its
  // first overflow.
  std::optional<std::vector<SplitPart>> Whole() {
    std::vector<SplitPart> parts;
    Position next;
    Cursor c = Begin(next);
    while (c.token < t_.size())
      if (!Step(c)) return std::nullopt;
    SplitPart part = Finish(c, next, t_.size(), 0, false);
    if (!part.text.empty()) parts.push_back(std::move(part));
    return parts;
  }

 private:
  std::size_t Measure(std::string_view s) const { return MeasureLength(s, o_.unit); }
  bool Fits(const Cursor& c, std::size_t n) const { return c.used + n + c.closes + o_.reserve <= budget_; }

  void PushFrame(Cursor& c, std::size_t token) {
    const Token& t = t_[token];
    c.frames.push_back(Frame{token, out_.size(), c.used});
    out_ += t.text;
    c.used += t.len;
    c.closes += t.extra_len;
  }

  // Closes the innermost frame; one that holds nothing is taken out instead (an empty "**" is
  // literal text in Slack).
  void PopFrame(Cursor& c) {
    if (c.frames.empty()) return;
    const Frame f = c.frames.back();
    const Token& t = t_[f.token];
    c.frames.pop_back();
    c.closes -= t.extra_len;
    if (out_.size() == f.out_start + t.text.size()) {
      out_.resize(f.out_start);
      c.used = f.used_before;
      return;
    }
    out_ += t.extra;
    c.used += t.extra_len;
  }

  // Starts a part where `p` says: block frames, then (mid-line) the line's continuation, then the
  // inline frames. The renderer made sure these leave room for text (render_tokens' Fits).
  Cursor Reopen(const Position& p) {
    Cursor c;
    c.token = p.token;
    c.offset = p.offset;
    c.line = p.line;
    for (std::size_t f : p.stack)
      if (t_[f].block_frame) PushFrame(c, f);
    if (p.mid_line && p.line >= 0) {
      const std::string& cont = t_[static_cast<std::size_t>(p.line)].cont;
      out_ += cont;
      c.used += Measure(cont);
    }
    for (std::size_t f : p.stack)
      if (!t_[f].block_frame) PushFrame(c, f);
    return c;
  }

  void Record(const Cursor& c, Level level, std::size_t resume, bool mid_line) {
    Candidate& cand = candidates_[level];
    cand.at = c;
    cand.at.token = resume;
    cand.at.offset = 0;
    cand.at.out_size = out_.size();
    if (!mid_line) cand.at.line = -1;
    cand.mid_line = mid_line;
    cand.valid = true;
  }

  bool HaveCandidate() const {
    for (const Candidate& cand : candidates_)
      if (cand.valid) return true;
    return false;
  }

  // The strongest cut that still fills at least half the part; else the fullest.
  const Candidate& Best() const {
    for (int level = kBlock; level >= kWord; --level) {
      const Candidate* latest = nullptr;
      for (int l = level; l < kLevels; ++l) {
        const Candidate& cand = candidates_[static_cast<std::size_t>(l)];
        if (cand.valid && (!latest || cand.at.out_size > latest->at.out_size)) latest = &cand;
      }
      if (latest && (latest->at.used * 2 >= budget_ || level == kWord)) return *latest;
    }
    return candidates_[kWord];  // not reached: Best is called with a candidate
  }

  SplitPart Finish(Cursor& c, Position& next, std::size_t token, std::size_t offset, bool mid_line) {
    next.token = token;
    next.offset = offset;
    next.line = c.line;
    next.mid_line = mid_line;
    next.stack.clear();
    for (const Frame& f : c.frames) next.stack.push_back(f.token);
    while (!c.frames.empty()) PopFrame(c);
    return SplitPart{std::move(out_), c.fallback};
  }

  SplitPart CutAt(const Candidate& cand, Position& next) {
    Cursor c = cand.at;
    out_.resize(c.out_size);
    return Finish(c, next, c.token, c.offset, cand.mid_line);
  }

  // No place to cut fits: one text cut between characters (entities and emoji sequences whole
  // where there is room), or a cut before the token that does not fit.
  Result<SplitPart> HardCut(Cursor& c, Position& next) {
    const Token& t = t_[c.token];
    if (t.kind == TokenKind::text || t.kind == TokenKind::space) {
      const std::string_view s = t.text;
      std::size_t i = c.offset;
      while (i < s.size()) {
        std::size_t end = NextCut(s, i, o_.entities, true);
        std::size_t len = Measure(s.substr(i, end - i));
        if (!Fits(c, len) && !c.content) {  // the part's first piece: break up an emoji sequence if it must
          end = NextCut(s, i, o_.entities, false);
          len = Measure(s.substr(i, end - i));
        }
        if (!Fits(c, len)) break;
        out_.append(s.substr(i, end - i));
        c.used += len;
        c.content = true;
        c.fallback = c.fallback || t.fallback;
        i = end;
      }
      if (i > c.offset) {
        if (i == s.size()) return Finish(c, next, c.token + 1, 0, true);
        return Finish(c, next, c.token, i, true);
      }
    }
    if (c.content) return Finish(c, next, c.token, c.offset, t.kind != TokenKind::line_start);
    if (budget_ < o_.max_length) {
      budget_ = o_.max_length;
      return HardCut(c, next);
    }
    return Fail(Errc::invalid_argument,
                "max_length " + std::to_string(o_.max_length) +
                    " leaves no room for text next to the markup and the part label; raise max_length");
  }

  // The token at `c` does not fit. Prefer a cut at a boundary before soft_length; failing that, one
  // before max_length; failing that, a hard cut at soft_length. (The rest of a word already cut
  // is cut again at soft_length: running on would not keep it whole.)
  Result<SplitPart> Overflow(Cursor& c, Position& next, bool& retry) {
    retry = false;
    if (HaveCandidate()) return CutAt(Best(), next);
    if (budget_ < o_.max_length && !soft_mark_ && c.offset == 0) {
      soft_mark_ = c;
      soft_mark_->out_size = out_.size();
      budget_ = o_.max_length;
      retry = true;
      return SplitPart{};
    }
    // Back to soft_length for the hard cut, when one can be made there: with text to end the part
    // on, or text to cut (markup at the start of a part cannot be cut, so the cut stays here).
    if (soft_mark_ && (soft_mark_->content || t_[soft_mark_->token].kind == TokenKind::text)) {
      c = *soft_mark_;
      out_.resize(c.out_size);
      budget_ = soft_;
    }
    return HardCut(c, next);
  }

  // Emits a text (or a code space) from c.offset if it fits.
  bool EmitText(Cursor& c, const Token& t) {
    const std::string_view rest = std::string_view(t.text).substr(c.offset);
    const std::size_t len = c.offset ? Measure(rest) : t.len;
    if (!Fits(c, len)) return false;
    out_.append(rest);
    c.used += len;
    c.content = true;
    c.fallback = c.fallback || t.fallback;
    ++c.token;
    c.offset = 0;
    return true;
  }

  // A space or break that a cut may fall on: dropped at the start of a part.
  bool EmitBreak(Cursor& c, const Token& t, Level level) {
    const bool mid_line = level == kWord;
    if (!mid_line) c.line = -1;
    if (!c.content) {
      ++c.token;
      return true;
    }
    Record(c, level, c.token + 1, mid_line);
    if (soft_mark_ || !Fits(c, t.len)) return false;  // past soft_length: the first boundary ends the part
    out_ += t.text;
    c.used += t.len;
    ++c.token;
    return true;
  }

  bool EmitLineStart(Cursor& c, const Token& t) {
    c.line = static_cast<std::ptrdiff_t>(c.token);
    const std::size_t len = t.len + (c.content ? t.extra_len : 0);  // no indentation at a part's start
    if (!Fits(c, len)) return false;
    out_ += t.text;
    if (c.content) out_ += t.extra;
    c.used += len;
    ++c.token;
    return true;
  }

  bool Step(Cursor& c) {
    const Token& t = t_[c.token];
    switch (t.kind) {
      case TokenKind::close:
        PopFrame(c);
        ++c.token;
        return true;
      case TokenKind::open:
        if (!Fits(c, t.len + t.extra_len)) return false;
        PushFrame(c, c.token++);
        return true;
      case TokenKind::text: return EmitText(c, t);
      case TokenKind::space:
        if (!t.keep) return EmitBreak(c, t, kWord);
        if (!EmitText(c, t)) return false;
        Record(c, kWord, c.token, true);
        return !soft_mark_;
      case TokenKind::line_break: return EmitBreak(c, t, kLine);
      case TokenKind::block_break: return EmitBreak(c, t, kBlock);
      case TokenKind::line_start: return EmitLineStart(c, t);
    }
    return true;
  }

  // A part's start: nothing written, the soft budget, no cut recorded; the frames open at `next`
  // reopened.
  Cursor Begin(const Position& next) {
    out_.clear();
    budget_ = soft_;
    soft_mark_.reset();
    candidates_ = {};
    return Reopen(next);
  }

  Result<SplitPart> Part(Position& next) {
    Cursor c = Begin(next);
    while (c.token < t_.size()) {
      if (Step(c)) continue;
      bool retry = false;
      auto part = Overflow(c, next, retry);
      if (!retry) return part;
    }
    return Finish(c, next, t_.size(), 0, false);
  }

  const std::vector<Token>& t_;
  const SplitOptions& o_;
  const std::size_t soft_;
  std::size_t budget_ = 0;
  std::string out_;
  std::optional<Cursor> soft_mark_;
  std::array<Candidate, kLevels> candidates_{};
};

}  // namespace

Result<std::vector<SplitPart>> Split(const std::vector<Token>& tokens, const SplitOptions& options) {
  return Splitter(tokens, options).Run();
}

std::optional<std::vector<SplitPart>> SplitWhole(const std::vector<Token>& tokens, const SplitOptions& options) {
  return Splitter(tokens, options).Whole();
}

}  // namespace sessionturn::render
