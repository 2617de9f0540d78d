// Fuzzes LineFramer: any split of the input gives the same lines as the whole, no line exceeds the bound,
// and no line contains a newline.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "sessionturn/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t bound = 1 + data[0] % 64;
  const std::size_t cut = data[1] % (size - 1);
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  auto run = [&](std::size_t split) {
    sessionturn::LineFramer f(bound);
    std::vector<std::string> lines;
    auto on_line = [&](std::string_view l) {
      if (l.size() > bound || l.find('\n') != std::string_view::npos) std::abort();
      lines.emplace_back(l);
    };
    f.Feed(bytes.substr(0, split), on_line);
    f.Feed(bytes.substr(split), on_line);
    return lines;
  };
  if (run(0) != run(cut < bytes.size() ? cut : 0)) std::abort();
  return 0;
}
