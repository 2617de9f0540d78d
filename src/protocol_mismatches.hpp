// Internal to the protocol's decoders (protocol.cpp for requests, event_decode.cpp for events):
// where a decoder records fields of an unexpected type.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/protocol.hpp"

namespace sessionturn::detail {

// Events keep going; requests stop at the first (DecodeRequest turns it into an error, as the
// runtime's strict decoder does).
class Mismatches {
 public:
  explicit Mismatches(std::vector<FieldMismatch>* out) : out_(out) {}
  void Add(std::string field, std::string_view expected) {
    ++count_;
    if (out_ != nullptr) out_->push_back(FieldMismatch{std::move(field), std::string(expected)});
  }
  std::size_t count() const noexcept { return count_; }

 private:
  std::vector<FieldMismatch>* out_;
  std::size_t count_ = 0;
};

}  // namespace sessionturn::detail
