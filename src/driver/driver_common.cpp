#include <vector>

#include "driver/driver_impl.hpp"

namespace sessionturn::driver_detail {
namespace {

// Lines that cannot be events are skipped (PROTOCOL.md §2) without paying for a parse.
bool LooksLikeJsonObject(std::string_view line) {
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    return c == '{';
  }
  return false;
}

std::string Preview(std::string_view line) {
  constexpr std::size_t kPreviewBytes = 80;  // enough to recognise a line in a log
  return std::string(line.substr(0, kPreviewBytes)) + (line.size() > kPreviewBytes ? "..." : "");
}

}  // namespace

std::string Seconds(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + "s";
  return std::to_string(ms.count()) + "ms";
}

bool DecodeStreamLine(DriverState& state, std::string_view line, std::string_view who, Event& into) {
  if (!LooksLikeJsonObject(line)) {
    // Text the transport interleaved (a shell's banner on the exec path): not protocol.
    state.Log(LogLevel::debug, std::string(who) + ": skipping a line that is not a JSON object: " + Preview(line));
    return false;
  }
  std::vector<FieldMismatch> mismatches;
  if (auto decoded = DecodeEventInto(line, into, &mismatches); !decoded) {
    // It looks like an event and is not one: a broken runtime or transport, worth a warning.
    state.Log(LogLevel::warning, std::string(who) + ": skipping a line that is not valid JSON (" +
                                     decoded.error().message + "): " + Preview(line));
    return false;
  }
  if (!mismatches.empty()) {
    for (const auto& message : state.mismatches.Note(into.type, mismatches)) state.Log(LogLevel::warning, message);
  }
  return true;
}

}  // namespace sessionturn::driver_detail
