// Fuzzes LineFramer against a plain model of what it promises: the lines of the stream in order, a
// trailing '\r' removed, blank lines skipped, a line longer than the bound reported once (with its
// length) when its end is seen and never delivered, and the incomplete tail buffered or being skipped.
// The same must hold however the bytes are split: whole, at one cut, and byte by byte.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/protocol.hpp"

namespace {

struct Outcome {
  std::vector<std::string> seen;  // "L<line>" per line, "O<bytes>" per overflow, in order
  std::size_t buffered = 0;
  bool skipping = false;
  bool operator==(const Outcome&) const = default;
};

Outcome Model(std::string_view bytes, std::size_t bound) {
  Outcome out;
  for (;;) {
    const std::size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) break;
    std::string_view line = bytes.substr(0, nl);
    bytes.remove_prefix(nl + 1);
    if (line.size() > bound) {
      out.seen.push_back("O" + std::to_string(line.size()));
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    out.seen.push_back("L" + std::string(line));
  }
  out.skipping = bytes.size() > bound;
  out.buffered = out.skipping ? 0 : bytes.size();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // The first byte picks the bound (1 to 1021 bytes): small enough to reach the overflow paths often,
  // large enough for real runtime lines.
  const std::size_t bound = 1 + data[0] * 4u;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::size_t cut = bytes.empty() ? 0 : data[1] % (bytes.size() + 1);

  auto run = [&](const std::vector<std::string_view>& parts) {
    sessionturn::LineFramer f(bound);
    Outcome out;
    auto on_line = [&](std::string_view l) {
      if (l.empty() || l.size() > bound || l.find('\n') != std::string_view::npos) std::abort();
      out.seen.push_back("L" + std::string(l));
    };
    auto on_overflow = [&](std::size_t skipped) {
      if (skipped <= bound) std::abort();
      out.seen.push_back("O" + std::to_string(skipped));
    };
    for (std::string_view p : parts) f.Feed(p, on_line, on_overflow);
    out.buffered = f.Buffered();
    out.skipping = f.Skipping();
    return out;
  };

  const Outcome expected = Model(bytes, bound);
  if (run({bytes}) != expected) std::abort();
  if (run({bytes.substr(0, cut), bytes.substr(cut)}) != expected) std::abort();
  if (bytes.size() <= 4096) {
    std::vector<std::string_view> single;
    for (std::size_t i = 0; i < bytes.size(); ++i) single.push_back(bytes.substr(i, 1));
    if (run(single) != expected) std::abort();
  }
  return 0;
}
