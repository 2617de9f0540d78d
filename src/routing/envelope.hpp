// Text hygiene for what chat users control (display names, ids, messages, attachment text) before
// it reaches a prompt or one of the router's own messages, and the bounds of the prompt envelope
// (FormatPrompt in routing.hpp). docs/routing-rules.md gives the envelope's exact form.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/routing.hpp"

namespace sessionturn::routing {

// Names are shown on one line: longer ones are cut with "…" (DESIGN.md §6).
inline constexpr std::size_t kMaxAuthorNameChars = 80;
// Platform ids are short (Slack U0123ABCD, Telegram 10 digits); this only stops a forged one.
inline constexpr std::size_t kMaxAuthorIdChars = 64;
// The first turn's thread context: enough for a discussion to be followed, small next to the
// message itself; the oldest messages go first when it does not fit.
inline constexpr std::size_t kMaxThreadContextBytes = 8 * 1024;
// One earlier message in that context, so a single long paste cannot crowd out the others.
inline constexpr std::size_t kMaxContextMessageBytes = 2 * 1024;
// One attachment's text (a file snippet, a caption).
inline constexpr std::size_t kMaxAttachmentBytes = 16 * 1024;
// The whole prompt. A chat message is at most 40,000 characters (Slack) so this is room for the
// message, its context and a few attachments; beyond it the prompt is cut with kPromptCutMarker.
inline constexpr std::size_t kMaxPromptBytes = 64 * 1024;
inline constexpr std::string_view kPromptCutMarker = "\n[\xE2\x80\xA6 prompt cut: it was longer than 64 KB]";

// Characters that are not seen but change how the text around them is shown or read: zero-width
// spaces and joiners, bidi embeddings, overrides and isolates, the BOM, invisible operators, tags,
// the other Unicode format (Cf) characters, and the Hangul fillers that make a name look empty.
bool IsInvisible(char32_t c);

// `text` with every byte that is not part of valid UTF-8 (Go's rules: no surrogates, no overlong
// forms) replaced by U+FFFD.
std::string RepairUtf8(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` that does not end inside a UTF-8 sequence.
std::string_view CutUtf8(std::string_view text, std::size_t max_bytes);

// `text` as one clean line: valid UTF-8, control characters and Unicode white space (newlines,
// U+2028, NEL, ...) turned into single spaces, invisible characters (IsInvisible) removed, trimmed,
// and at most `max_chars` code points (a longer line ends in "…" within that bound). May be empty.
std::string FlattenLine(std::string_view text, std::size_t max_chars);

// A message body for a prompt: valid UTF-8, CR LF and lone CR as LF, other control characters but
// tab removed (NUL included), white space trimmed at both ends. Line structure and everything else
// (emoji joiners included) are kept: the agent reads code points, it is not fooled by how they show.
std::string CleanText(std::string_view text);

// What a prompt is made of (PromptEnvelope's fields), as references to the caller's strings: the
// router makes a turn's prompt from its message without copying the message's fields first.
struct PromptParts {
  std::string_view platform;
  std::string_view author_name;
  std::string_view author_id;
  std::string_view text;
  const std::vector<std::string>& attachments_text;
  const std::vector<ThreadHistoryMessage>& thread_context;
};

// The prompt for `parts`: FormatPrompt (routing.hpp) of the envelope with these fields.
std::string FormatPrompt(const PromptParts& parts);

// A Markdown code fence that `text` cannot close: one backtick more than its longest run, at least 3.
std::string FenceFor(std::string_view text);

}  // namespace sessionturn::routing
