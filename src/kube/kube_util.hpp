// Small helpers shared by the Kubernetes internals (kubeconfig, REST client, sessions).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sessionturn/error.hpp"

namespace sessionturn::kube_internal {

// Strict standard base64 (whitespace ignored, padding optional). Fails on any other character.
Result<std::string> Base64Decode(std::string_view text);
std::string Base64Encode(std::string_view bytes);

// Reads a whole (small) file; the error names the path and errno text.
Result<std::string> ReadFile(const std::string& path);

// RFC 3339 ("2026-01-02T03:04:05Z", fractions and offsets accepted) to seconds since the epoch.
Result<long long> ParseRfc3339(std::string_view text);

// The string at `key` of a JSON object: "" when absent or null, the JSON text of a non-string.
std::string Str(const nlohmann::json& obj, const char* key);

}  // namespace sessionturn::kube_internal
