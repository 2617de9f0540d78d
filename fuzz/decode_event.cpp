// Fuzzes the event decoder (runtime bytes are untrusted). Properties:
//  - tolerance: a line fails to decode exactly when it is not a JSON object (simdjson, the decoder's own
//    parser, is the judge); a field of an unexpected type never drops the event, and a failure says why;
//  - round trip: whatever decodes re-encodes to a line that decodes, with no mismatched field, to the same
//    event, and encoding that again gives the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "sessionturn/protocol.hpp"

namespace {

bool IsJsonObject(std::string_view line) {
  static simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(simdjson::padded_string(line)).get(root)) return false;
  return root.type() == simdjson::dom::element_type::OBJECT;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  std::vector<sessionturn::FieldMismatch> mismatches;
  auto ev = sessionturn::DecodeEvent(line, &mismatches);
  if (ev.has_value() != IsJsonObject(line)) std::abort();
  if (!ev) {
    if (ev.error().message.empty() || !mismatches.empty()) std::abort();
    return 0;
  }
  if (ev->line != line) std::abort();
  for (const auto& m : mismatches)
    if (m.field.empty() || m.expected.empty()) std::abort();

  const std::string again = sessionturn::EncodeEvent(*ev);
  std::vector<sessionturn::FieldMismatch> again_mismatches;
  auto back = sessionturn::DecodeEvent(again, &again_mismatches);
  if (!back || !again_mismatches.empty()) std::abort();
  if (!sessionturn::SameEvent(*ev, *back)) std::abort();
  if (sessionturn::EncodeEvent(*back) != again) std::abort();
  return 0;
}
