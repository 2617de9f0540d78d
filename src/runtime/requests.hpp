// Request decoding as the real runtime's Go decoder does it: one or more JSON values per line,
// keys matched case-insensitively, `null` for a field or the whole request meaning "zero value",
// and any type mismatch (a float for an integer, a string for a bool...) being an error after
// which the runtime closes the connection.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/protocol.hpp"

namespace sessionturn::runtime {

struct DecodedLine {
  std::vector<ClientRequest> requests;  // the values decoded before any error, in order
  std::string error;                    // non-empty: the connection is to be closed after them
};

// Decodes every JSON value on one line (without its newline).
DecodedLine DecodeRequestLine(std::string_view line);

}  // namespace sessionturn::runtime
