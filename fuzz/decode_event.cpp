// Fuzzes the event decoder and the encoder round trip: whatever decodes must re-encode to a line that
// decodes to the same event.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sessionturn/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto ev = sessionturn::DecodeEvent(line);
  if (!ev) {
    if (ev.error().message.empty()) std::abort();
    return 0;
  }
  const std::string again = sessionturn::EncodeEvent(*ev);
  auto back = sessionturn::DecodeEvent(again);
  if (!back) std::abort();
  (void)sessionturn::DecodeRequest(line);
  return 0;
}
