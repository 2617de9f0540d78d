// Internal to reply rendering: cuts a token stream (render_tokens) into parts that each fit a
// length, at a block break where one is near the end of the part, else a line break, else a space,
// else (one word longer than a part) between characters. Frames open at a cut are closed at the end
// of the part and reopened at the start of the next, so every part is valid markup on its own.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "routing/render_tokens.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn::render {

struct SplitOptions {
  std::size_t max_length = 0;
  std::size_t soft_length = 0;  // preferred length (<= max_length)
  LengthUnit unit = LengthUnit::utf16;
  std::size_t reserve = 0;  // kept free in every part for its label
  bool entities = false;    // the text holds HTML entities a cut must not enter
};

struct SplitPart {
  std::string text;
  bool fallback = false;  // holds text of a block rendered without markup
};

// The parts, in order; none when the tokens hold no text. Errc::invalid_argument when a part has
// no room for any text (the limit is too small for the markup and the reserve).
Result<std::vector<SplitPart>> Split(const std::vector<Token>& tokens, const SplitOptions& options);

// The tokens as they are when they fit one part of soft_length with no cut (the part, or none when
// they hold no text): then what Split makes of them, and of the same Doc written by words
// (Granularity), is this. std::nullopt when a cut would be needed: split the tokens by words.
std::optional<std::vector<SplitPart>> SplitWhole(const std::vector<Token>& tokens, const SplitOptions& options);

}  // namespace sessionturn::render
