// Unicode classification shared by the protocol code and the local runtime (not a public header).
#pragma once

namespace sessionturn {

// Go's unicode.IsSpace: what strings.TrimSpace trims, and so what the runtime trims before it looks
// for a command.
bool IsUnicodeSpace(char32_t c);

}  // namespace sessionturn
