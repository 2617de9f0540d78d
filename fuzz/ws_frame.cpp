// Fuzzes the WebSocket frame reader (server bytes are untrusted): any split of the input gives the
// same events and the same verdict as the whole, no message exceeds the bound, and a poisoned reader
// stays poisoned.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kube/websocket.hpp"

using sessionturn::kube::WsReader;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  // A small bound so the limit paths are reached; the first byte picks it.
  const std::size_t bound = 1 + data[0] * 64u;
  const std::size_t cut = data[1] % (size - 1);
  const bool byte_by_byte = (data[2] & 1) != 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 3, size - 3);
  auto run = [&](std::size_t split, bool single_bytes) {
    WsReader reader(bound);
    std::vector<std::string> seen;
    auto on_event = [&](WsReader::Event&& e) {
      if (e.kind == WsReader::Event::kMessage && e.data.size() > bound) std::abort();
      if (e.kind != WsReader::Event::kMessage && e.data.size() > 125) std::abort();
      seen.push_back(std::to_string(e.kind) + ":" + std::to_string(e.close_code) + ":" + e.data);
    };
    bool ok = true;
    auto feed = [&](std::string_view part) {
      if (!ok) return;
      if (!reader.Feed(part, on_event)) ok = false;
    };
    if (single_bytes) {
      for (char c : bytes) feed(std::string_view(&c, 1));
    } else {
      feed(bytes.substr(0, split));
      feed(bytes.substr(split));
    }
    if (!ok && reader.Feed("x", on_event)) std::abort();  // poisoned stays poisoned
    seen.push_back(ok ? "ok" : "error");
    return seen;
  };
  if (run(bytes.size(), false) != run(cut < bytes.size() ? cut : 0, byte_by_byte && bytes.size() < 4096)) std::abort();
  return 0;
}
