// Text rules of the real runtime that the local one must reproduce byte for byte: Go's
// strconv.Quote (rejection texts quote ids with %q), bounded head/tail text around a truncation
// marker (tool output, history items), base64url cursors, and parsing a prompt into a command.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sessionturn::runtime {

// Go's strconv.Quote: "turn-2" -> "\"turn-2\"".
std::string GoQuote(std::string_view s);

// Length of the longest prefix of `s` that is valid UTF-8 (Go's validUTF8Prefix), and the start of
// the longest valid suffix (validUTF8Suffix).
std::size_t ValidUtf8PrefixLen(std::string_view s);
std::size_t ValidUtf8SuffixStart(std::string_view s);

// Markers the runtime puts where it cut text out.
inline constexpr std::string_view kToolOutputMarker = "\n\xE2\x80\xA6 output truncated \xE2\x80\xA6\n";
inline constexpr std::string_view kHistoryMarker = "\n\xE2\x80\xA6 history item truncated \xE2\x80\xA6\n";

// Keeps text up to `max` bytes whole; beyond that a head and a tail around `marker` (Go's
// boundedToolOutput / historyTextBuffer), each trimmed to valid UTF-8.
class BoundedText {
 public:
  BoundedText(std::size_t max, std::string_view marker) : max_(max), marker_(marker) {}
  void Write(std::string_view text);
  std::string String() const;
  bool empty() const { return head_.empty() && !truncated_; }

 private:
  std::size_t HeadLimit() const;
  std::size_t TailLimit() const;
  void AppendTail(std::string_view data);

  std::size_t max_;
  std::string_view marker_;
  std::string head_;
  std::string tail_;
  bool truncated_ = false;
};

// One-shot form (Go's boundedHistoryText / truncateToolOutput).
std::string Bounded(std::string_view text, std::size_t max, std::string_view marker);

// base64url without padding (Go's base64.RawURLEncoding). Decode fails on a character outside the
// alphabet, on padding and on a length that cannot be base64; CR and LF are skipped, as Go does.
std::string Base64UrlEncode(std::string_view data);
bool Base64UrlDecode(std::string_view text, std::string* out);

// What a submitted text is to the runtime (its parseSessionCommand).
struct SessionCommand {
  enum class Kind { message, shell, goal };
  Kind kind = Kind::message;
  std::string shell;  // the command a `!` text runs: trimmed, without the '!'
  std::string error;  // set when the text cannot be a command ("shell command must not be empty")
};
SessionCommand ParseSessionCommand(std::string_view text);

// How the runtime merges a message into the queued turn's text.
std::string MergePendingText(const std::string& current, const std::string& addition);

}  // namespace sessionturn::runtime
