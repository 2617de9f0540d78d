// Fuzzes the request decoder: the local runtime parses every line a client sends with it, and clients
// are untrusted. Properties: it never crashes; a failure says why, and a line that is not a JSON object
// always fails; whatever decodes re-encodes to a line that decodes to the same request, and encoding
// that again gives the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sessionturn/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto req = sessionturn::DecodeRequest(line);
  if (!req) {
    if (req.error().message.empty()) std::abort();
    return 0;
  }
  const sessionturn::Json parsed = sessionturn::Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) std::abort();

  const std::string again = sessionturn::EncodeRequest(*req);
  auto back = sessionturn::DecodeRequest(again);
  if (!back || !(*back == *req)) std::abort();
  if (sessionturn::EncodeRequest(*back) != again) std::abort();
  return 0;
}
