// Internal to the router's store: the rows of a table that holds string keys in insertion order
// (`seq INTEGER PRIMARY KEY`), mirrored in memory by a 64-bit hash of each key, so that a look-up
// costs no SQL and a new key is one append with no index (the file is locked: the store is its only
// writer). A hash that matches is confirmed by reading the row (a rare collision reads two). The
// dedupe keys (one table per kind) and the bot-message index use it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace sessionturn::routing {

// Removes the one (hash -> value) entry of a multimap; false when there is none.
inline bool EraseEntry(std::unordered_multimap<std::uint64_t, std::int64_t>& map, std::uint64_t hash,
                       std::int64_t value) {
  auto [first, last] = map.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    if (it->second == value) {
      map.erase(it);
      return true;
    }
  }
  return false;
}

struct KeyRows {
  std::unordered_multimap<std::uint64_t, std::int64_t> seq_by_hash;
  std::deque<std::pair<std::int64_t, std::uint64_t>> order;  // (seq, hash), oldest first
  std::int64_t live = 0;                                      // rows in the table
  // The next row's seq, above every seq in `order`: a seq is never used twice while the mirror
  // lives, so a removed key's place in `order` never matches a newer row.
  std::int64_t next_seq = 1;

  static std::uint64_t Hash(std::string_view key) { return std::hash<std::string_view>{}(key); }

  // A row the table holds, in seq order (loading) or new (next_seq, appended).
  void Add(std::uint64_t hash, std::int64_t seq) {
    seq_by_hash.emplace(hash, seq);
    order.emplace_back(seq, hash);
    ++live;
    next_seq = std::max(next_seq, seq + 1);
  }
  bool Has(std::uint64_t hash, std::int64_t seq) const {
    auto [first, last] = seq_by_hash.equal_range(hash);
    return std::any_of(first, last, [seq](const auto& e) { return e.second == seq; });
  }
  // A row removed on its own: its place in `order` is passed over by eviction, and dropped when such
  // places outnumber the live rows.
  void Erase(std::uint64_t hash, std::int64_t seq) {
    if (!EraseEntry(seq_by_hash, hash, seq)) return;
    --live;
    if (order.size() > 2 * static_cast<std::size_t>(live) + 64) {
      std::erase_if(order, [this](const auto& e) { return !Has(e.second, e.first); });
    }
  }
  // The oldest `count` live rows forgotten here; returns the seq of the last of them (0: none), so
  // that `DELETE ... WHERE seq <= it` removes them from the table, and sets `*forgotten` to how many.
  std::int64_t EvictOldest(std::int64_t count, std::int64_t* forgotten) {
    std::int64_t through = 0;
    *forgotten = 0;
    while (*forgotten < count && !order.empty()) {
      const auto [seq, hash] = order.front();
      order.pop_front();
      if (!EraseEntry(seq_by_hash, hash, seq)) continue;  // removed already: its row is gone
      --live;
      through = seq;
      ++*forgotten;
    }
    return through;
  }
};

}  // namespace sessionturn::routing
