// Internal to reply rendering: UTF-8 repair, lengths in a platform's unit, the places a rendered
// text may be cut (never inside an entity, a UTF-8 sequence or, where it can be helped, an emoji
// sequence) and the escaping the markup dialects need.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "sessionturn/render.hpp"

namespace sessionturn::render {

// `text` with every byte that is not part of a valid UTF-8 sequence, and every NUL, replaced by
// U+FFFD (as cmark replaces NUL: the source then has the columns cmark reports).
std::string SanitizeUtf8(std::string_view text);

// The code point at s[i] (valid UTF-8 assumed, as after SanitizeUtf8) and its length in bytes.
std::size_t DecodeAt(std::string_view s, std::size_t i, char32_t* cp) noexcept;

// The end of the smallest piece starting at s[i] that a cut may not enter: an HTML entity
// ("&amp;", at most 8 bytes) when `entities`, else one code point. With `cluster`, the code point
// keeps the marks that attach to it (variation selectors, skin tones, ZWJ and the code point it
// joins, combining marks, keycaps), up to kMaxClusterBytes.
std::size_t NextCut(std::string_view s, std::size_t i, bool entities, bool cluster) noexcept;

// A cluster longer than this is cut between code points: a cut must always be possible within a
// part's room, and no emoji sequence in use comes near it.
inline constexpr std::size_t kMaxClusterBytes = 32;

// Text escaped for Telegram HTML and Slack mrkdwn alike: & < > as entities (nothing else: Slack
// shows any other entity literally).
std::string EscapeText(std::string_view text);

// A double-quoted HTML attribute value: & < > " as entities.
std::string EscapeAttribute(std::string_view text);

// The width of `text` in a monospaced font, counted as code points (table columns).
std::size_t ColumnWidth(std::string_view text) noexcept;

}  // namespace sessionturn::render
