// Fuzzes the WebSocket frame reader (server bytes are untrusted): any split of the input gives the
// same events and the same verdict as the whole, no message exceeds the bound, a poisoned reader
// stays poisoned, and the events re-encoded as frames (EncodeWsFrame, unmasked as a server sends them)
// read back as the same events.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "ws/websocket.hpp"

using sessionturn::ws::EncodeWsFrame;
using sessionturn::ws::WsReader;
namespace ws_opcode = sessionturn::ws::ws_opcode;

namespace {

std::string Describe(const WsReader::Event& e) {
  return std::to_string(e.kind) + ":" + (e.binary ? "b" : "t") + ":" + std::to_string(e.close_code) + ":" + e.data;
}

// The frame a server would send for `e`.
std::string Reencode(const WsReader::Event& e) {
  switch (e.kind) {
    case WsReader::Event::kMessage:
      return EncodeWsFrame(e.binary ? ws_opcode::kBinary : ws_opcode::kText, e.data, true, false);
    case WsReader::Event::kPing: return EncodeWsFrame(ws_opcode::kPing, e.data, true, false);
    case WsReader::Event::kPong: return EncodeWsFrame(ws_opcode::kPong, e.data, true, false);
    case WsReader::Event::kClose: break;
  }
  std::string payload;  // no code and no reason: an empty close frame
  if (e.close_code != 0 || !e.data.empty()) {
    payload.push_back(static_cast<char>(e.close_code >> 8));
    payload.push_back(static_cast<char>(e.close_code & 0xff));
    payload += e.data;
  }
  return EncodeWsFrame(ws_opcode::kClose, payload, true, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  // A small bound so the limit paths are reached; the first byte picks it.
  const std::size_t bound = 1 + data[0] * 64u;
  const std::size_t cut = data[1] % (size - 1);
  const bool byte_by_byte = (data[2] & 1) != 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 3, size - 3);
  std::vector<WsReader::Event> events;  // of the latest run
  auto run = [&](std::size_t split, bool single_bytes) {
    WsReader reader(bound);
    std::vector<std::string> seen;
    events.clear();
    auto on_event = [&](WsReader::Event&& e) {
      if (e.kind == WsReader::Event::kMessage && e.data.size() > bound) std::abort();
      if (e.kind != WsReader::Event::kMessage && e.data.size() > 125) std::abort();
      seen.push_back(Describe(e));
      events.push_back(std::move(e));
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

  std::string frames;
  std::vector<std::string> expected;
  for (const auto& e : events) {
    expected.push_back(Describe(e));
    frames += Reencode(e);
  }
  expected.push_back("ok");
  WsReader again(bound);
  std::vector<std::string> reread;
  const bool ok = static_cast<bool>(again.Feed(frames, [&](WsReader::Event&& e) {
    reread.push_back(Describe(e));
  }));
  reread.push_back(ok ? "ok" : "error");
  if (reread != expected) std::abort();
  return 0;
}
