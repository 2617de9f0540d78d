#include "runtime/requests.hpp"

#include <cstdint>
#include <limits>

#include "event_encode.hpp"

namespace sessionturn::runtime {
namespace {

using OJson = nlohmann::ordered_json;

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// The end (one past the closing brace) of the object starting at s[pos], or npos when the line
// ends first. Strings are skipped with their escapes; syntax is checked later by the parser.
std::size_t ObjectEnd(std::string_view s, std::size_t pos) {
  int depth = 0;
  bool in_string = false;
  bool escape = false;
  for (std::size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// ASCII case folding, as Go's encoding/json matches keys when there is no exact match.
bool EqualFold(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

class Fields {
 public:
  explicit Fields(std::string& error) : error_(error) {}

  void Str(const OJson& v, std::string_view key, std::string& out) {
    if (v.is_null()) return;
    if (!v.is_string()) return Mismatch(key, "string");
    out = v.get<std::string>();
  }
  void Int(const OJson& v, std::string_view key, std::int64_t& out) {
    if (v.is_null()) return;
    if (v.is_number_integer() && !v.is_number_unsigned()) {
      out = v.get<std::int64_t>();
    } else if (v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)) {
      out = static_cast<std::int64_t>(v.get<std::uint64_t>());
    } else {
      Mismatch(key, v.is_number() ? "int64 (a whole number in range)" : "int64");
    }
  }
  void Bool(const OJson& v, std::string_view key, bool& out) {
    if (v.is_null()) return;
    if (!v.is_boolean()) return Mismatch(key, "bool");
    out = v.get<bool>();
  }
  void Strings(const OJson& v, std::string_view key, std::vector<std::string>& out) {
    if (v.is_null()) {
      out.clear();
      return;
    }
    if (!v.is_array()) return Mismatch(key, "[]string");
    out.clear();
    for (const auto& e : v) {
      std::string s;
      Str(e, key, s);
      out.push_back(std::move(s));
    }
  }
  void Answers(const OJson& v, std::string_view key, std::map<std::string, std::vector<std::string>>& out) {
    if (v.is_null()) {
      out.clear();
      return;
    }
    if (!v.is_object()) return Mismatch(key, "map[string][]string");
    // Go decodes an object into the map it already has: a repeated "answers" adds to it.
    for (auto it = v.begin(); it != v.end(); ++it) Strings(it.value(), key, out[it.key()]);
  }

 private:
  void Mismatch(std::string_view key, std::string_view go_type) {
    if (error_.empty())
      error_ = "json: cannot unmarshal into Go struct field ClientRequest." + std::string(key) + " of type " +
               std::string(go_type);
  }
  std::string& error_;
};

// Decodes one object into a request; the first mismatch is reported in `error`.
ClientRequest FromObject(const OJson& obj, std::string& error) {
  static constexpr std::string_view kKeys[] = {
      "type",          "requestId", "since",         "journalId", "historyBounds",
      "historyItems",  "historyBytes", "historyCursor", "turnId",  "text",
      "expectedRevision", "attachmentIds", "inputId", "answers",   "cancel"};
  ClientRequest r;
  Fields f(error);
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    std::string_view key;
    for (auto k : kKeys)
      if (it.key() == k) key = k;
    if (key.empty())
      for (auto k : kKeys)
        if (EqualFold(it.key(), k)) key = k;
    if (key.empty()) continue;  // unknown fields are ignored
    const OJson& v = it.value();
    if (key == "type") f.Str(v, key, r.type);
    else if (key == "requestId") f.Str(v, key, r.request_id);
    else if (key == "since") f.Int(v, key, r.since);
    else if (key == "journalId") f.Str(v, key, r.journal_id);
    else if (key == "historyBounds") f.Bool(v, key, r.history_bounds);
    else if (key == "historyItems") f.Int(v, key, r.history_items);
    else if (key == "historyBytes") f.Int(v, key, r.history_bytes);
    else if (key == "historyCursor") f.Str(v, key, r.history_cursor);
    else if (key == "turnId") f.Str(v, key, r.turn_id);
    else if (key == "text") f.Str(v, key, r.text);
    else if (key == "expectedRevision") f.Int(v, key, r.expected_revision);
    else if (key == "attachmentIds") f.Strings(v, key, r.attachment_ids);
    else if (key == "inputId") f.Str(v, key, r.input_id);
    else if (key == "answers") f.Answers(v, key, r.answers);
    else if (key == "cancel") f.Bool(v, key, r.cancel);
  }
  return r;
}

// Go's decoder takes invalid UTF-8 inside strings as U+FFFD; nlohmann refuses it. Replace first.
std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = detail::GoRuneLen(s, i, &cp);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = detail::GoRuneLen(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace

DecodedLine DecodeRequestLine(std::string_view raw) {
  std::string cleaned;
  std::string_view line = raw;
  if (!IsValidUtf8(raw)) {
    cleaned = ValidUtf8(raw);
    line = cleaned;
  }
  DecodedLine out;
  std::size_t pos = 0;
  for (;;) {
    while (pos < line.size() && IsJsonSpace(line[pos])) ++pos;
    if (pos >= line.size()) return out;
    if (line.substr(pos, 4) == "null") {
      // Go decodes a top-level null into an empty request (then: unsupported type "").
      pos += 4;
      if (pos < line.size() && !IsJsonSpace(line[pos]) && line[pos] != '{') {
        out.error = "invalid character after top-level value";
        return out;
      }
      out.requests.emplace_back();
      continue;
    }
    if (line[pos] != '{') {
      out.error = "a request must be a JSON object";
      return out;
    }
    const std::size_t end = ObjectEnd(line, pos);
    if (end == std::string_view::npos) {
      out.error = "unexpected end of JSON input";
      return out;
    }
    OJson obj = OJson::parse(line.substr(pos, end - pos), nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded() || !obj.is_object()) {
      out.error = "invalid JSON";
      return out;
    }
    std::string error;
    ClientRequest r = FromObject(obj, error);
    if (!error.empty()) {
      out.error = std::move(error);
      return out;
    }
    out.requests.push_back(std::move(r));
    pos = end;
  }
}

}  // namespace sessionturn::runtime
