// Internal to the router and its store: a key made of several strings joined by U+001F (the unit
// separator, which no platform id holds), in one allocation (a chain of `+` makes one per piece).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace sessionturn::routing {

// Into `key`, replacing what it held: a key made again and again (a look-up's) reuses its buffer.
inline void JoinKeyInto(std::string& key, std::initializer_list<std::string_view> parts) {
  std::size_t size = parts.size() == 0 ? 0 : parts.size() - 1;
  for (std::string_view p : parts) size += p.size();
  key.clear();
  key.reserve(size);
  bool first = true;
  for (std::string_view p : parts) {
    if (!first) key.push_back('\x1f');
    key.append(p);
    first = false;
  }
}

inline std::string JoinKey(std::initializer_list<std::string_view> parts) {
  std::string key;
  JoinKeyInto(key, parts);
  return key;
}

}  // namespace sessionturn::routing
