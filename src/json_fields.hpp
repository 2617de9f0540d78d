// Type-checked reads of JSON that came from outside the process (not a public header).
//
// nlohmann's `j.value(key, fallback)` throws `type_error` when `j` is not an object or when the field
// is there with another type than the fallback's, and `const j[key]` on a missing key is undefined
// behaviour. A peer decides both, so code that reads a server's, a platform's or a file's JSON uses
// these instead: a field that is absent, null, or of another type reads as absent, and the caller
// decides whether that is an error to name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sessionturn::json_fields {

// object[key], or nullptr when `object` is not an object or has no such field. Works for
// nlohmann::json and nlohmann::ordered_json alike.
template <typename Json>
const Json* Field(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// object[key] when it is a string, else "".
template <typename Json>
std::string String(const Json& object, std::string_view key) {
  const Json* f = Field(object, key);
  return f != nullptr && f->is_string() ? f->template get<std::string>() : std::string();
}

// object[key] when it is an integer that fits in 64 signed bits, else nullopt (a float, a string of
// digits, or an unsigned value past INT64_MAX is not one).
template <typename Json>
std::optional<std::int64_t> Int(const Json& object, std::string_view key) {
  const Json* f = Field(object, key);
  if (f == nullptr) return std::nullopt;
  if (f->is_number_unsigned()) {
    const auto u = f->template get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (f->is_number_integer()) return f->template get<std::int64_t>();
  return std::nullopt;
}

// object[key] when it is a boolean, else nullopt.
template <typename Json>
std::optional<bool> Bool(const Json& object, std::string_view key) {
  const Json* f = Field(object, key);
  if (f == nullptr || !f->is_boolean()) return std::nullopt;
  return f->template get<bool>();
}

// object[key] when it is an object (or an array), else nullptr.
template <typename Json>
const Json* Object(const Json& object, std::string_view key) {
  const Json* f = Field(object, key);
  return f != nullptr && f->is_object() ? f : nullptr;
}
template <typename Json>
const Json* Array(const Json& object, std::string_view key) {
  const Json* f = Field(object, key);
  return f != nullptr && f->is_array() ? f : nullptr;
}

}  // namespace sessionturn::json_fields
