// Internal: JSON text exactly as Go's encoding/json writes it, for the event encoder (EncodeEvent)
// and the local runtime (history cursors, Go-quoted rejection texts). Not installed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "sessionturn/protocol.hpp"

namespace sessionturn::detail {

// The length of the UTF-8 sequence at s[i] when it is one Go's utf8.DecodeRune accepts (no
// surrogates, no overlong forms, at most U+10FFFF), with its code point in *cp; 0 when it is not.
std::size_t GoRuneLen(std::string_view s, std::size_t i, char32_t* cp) noexcept;

// Appends `s` as a JSON string the way Go's encoder does with its default HTML escaping: `"` `\`
// and \b \f \n \r \t short, other control characters \u00XX (lower-case hex), `<` `>` `&` as
// \u003c \u003e \u0026, U+2028/U+2029 escaped, each byte of invalid UTF-8 as \ufffd, everything
// else (DEL and non-ASCII included) raw.
void AppendGoJsonString(std::string& out, std::string_view s);

// Appends any JSON value: objects with their keys in byte order (as Go writes a map), strings as
// above, integers as integers.
void AppendGoJsonValue(std::string& out, const Json& value);

}  // namespace sessionturn::detail
