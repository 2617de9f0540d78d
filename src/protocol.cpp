#include "sessionturn/protocol.hpp"

#include <cstring>
#include <random>

#include "event_encode.hpp"
#include "protocol_mismatches.hpp"
#include "unicode.hpp"

namespace sessionturn {
namespace {

std::string TypeError(std::string_view key, std::string_view want) {
  std::string msg = "\"";
  msg.append(key);
  msg += "\" must be ";
  msg.append(want);
  return msg;
}

using detail::Mismatches;

// Reads typed members out of a nested object (nlohmann), recording each type mismatch with its path
// and leaving that member at its zero value.
class Reader {
 public:
  explicit Reader(Mismatches& m) : m_(m) {}

  void Str(const Json& obj, const char* key, std::string& out, const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return;
    if (!it->is_string()) return Mismatch(path + key, "a string");
    out = it->get_ref<const std::string&>();
  }
  void Int(const Json& obj, const char* key, std::int64_t& out, const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return;
    if (it->is_number_integer() && !(it->is_number_unsigned() && it->get<std::uint64_t>() > INT64_MAX)) {
      out = it->get<std::int64_t>();
    } else if (it->is_number_float() && it->get<double>() >= -9.2e18 && it->get<double>() <= 9.2e18 &&
               it->get<double>() == static_cast<double>(static_cast<std::int64_t>(it->get<double>()))) {
      out = static_cast<std::int64_t>(it->get<double>());
    } else {
      Mismatch(path + key, "an integer");
    }
  }
  void Bool(const Json& obj, const char* key, bool& out, const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return;
    if (!it->is_boolean()) return Mismatch(path + key, "a boolean");
    out = it->get<bool>();
  }
  void Mismatch(std::string key, std::string_view want) { m_.Add(std::move(key), want); }

 private:
  Mismatches& m_;
};

template <typename T>
void PutIf(Json& j, const char* key, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.empty()) j[key] = v;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v) j[key] = true;
  } else if constexpr (std::is_same_v<T, Json>) {
    if (!v.is_null()) j[key] = v;
  } else {
    if (v != 0) j[key] = v;
  }
}


}  // namespace

std::vector<std::string> FieldMismatchMemo::Note(std::string_view event_type,
                                                 const std::vector<FieldMismatch>& mismatches) {
  std::vector<std::string> out;
  if (mismatches.empty()) return out;
  std::lock_guard lock(mu_);
  for (const auto& m : mismatches) {
    // Array indices are not part of the identity: questions[0].id and questions[3].id are one field.
    std::string key;
    key.reserve(m.field.size());
    bool in_index = false;
    for (char c : m.field) {
      if (c == '[') in_index = true;
      if (!in_index) key += c;
      if (c == ']') in_index = false;
    }
    if (!reported_.insert(key).second) continue;
    out.push_back("the runtime sent field \"" + m.field + "\" of a \"" + std::string(event_type) +
                  "\" event with an unexpected type (expected " + m.expected +
                  "); the event was kept with that field empty. Reported once per field: the runtime may be "
                  "newer than this sessionturn");
  }
  return out;
}

// EventToJson and EncodeEvent live in event_encode.cpp (the Go-exact event encoder).

Json RequestToJson(const ClientRequest& r) {
  Json j = Json::object();
  PutIf(j, "type", r.type);
  PutIf(j, "requestId", r.request_id);
  PutIf(j, "since", r.since);
  PutIf(j, "journalId", r.journal_id);
  PutIf(j, "historyBounds", r.history_bounds);
  PutIf(j, "historyItems", r.history_items);
  PutIf(j, "historyBytes", r.history_bytes);
  PutIf(j, "turnId", r.turn_id);
  PutIf(j, "text", r.text);
  if (!r.attachment_ids.empty()) j["attachmentIds"] = r.attachment_ids;
  PutIf(j, "expectedRevision", r.expected_revision);
  PutIf(j, "inputId", r.input_id);
  if (!r.answers.empty()) j["answers"] = r.answers;
  PutIf(j, "cancel", r.cancel);
  PutIf(j, "historyCursor", r.history_cursor);
  return j;
}

namespace {
// One request line, written directly (every turn writes two): the members of RequestToJson, zero
// ones left out, keys in byte order as a Go map or nlohmann's object writes them, strings escaped as
// Go's encoder does (detail::AppendGoJsonString).
class RequestWriter {
 public:
  explicit RequestWriter(std::string& out) : out_(out) { out_.push_back('{'); }
  void Str(std::string_view key, const std::string& v) {
    if (v.empty()) return;
    Key(key);
    detail::AppendGoJsonString(out_, v);
  }
  void Int(std::string_view key, std::int64_t v) {
    if (v == 0) return;
    Key(key);
    out_ += std::to_string(v);
  }
  void True(std::string_view key, bool v) {
    if (!v) return;
    Key(key);
    out_ += "true";
  }
  void Strings(const std::vector<std::string>& items) {
    out_.push_back('[');
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_.push_back(',');
      detail::AppendGoJsonString(out_, items[i]);
    }
    out_.push_back(']');
  }
  void Key(std::string_view key) {
    if (out_.size() > 1) out_.push_back(',');
    out_.push_back('"');
    out_.append(key);
    out_ += "\":";
  }
  void End() { out_.push_back('}'); }

 private:
  std::string& out_;
};
}  // namespace

std::string EncodeRequest(const ClientRequest& r) {
  std::string out;
  out.reserve(96 + r.text.size() + r.request_id.size() + r.journal_id.size() + r.history_cursor.size());
  RequestWriter w(out);
  if (!r.answers.empty()) {  // std::map: its keys are in byte order already
    w.Key("answers");
    out.push_back('{');
    bool first = true;
    for (const auto& [question, values] : r.answers) {
      if (!first) out.push_back(',');
      first = false;
      detail::AppendGoJsonString(out, question);
      out.push_back(':');
      w.Strings(values);
    }
    out.push_back('}');
  }
  if (!r.attachment_ids.empty()) {
    w.Key("attachmentIds");
    w.Strings(r.attachment_ids);
  }
  w.True("cancel", r.cancel);
  w.Int("expectedRevision", r.expected_revision);
  w.True("historyBounds", r.history_bounds);
  w.Int("historyBytes", r.history_bytes);
  w.Str("historyCursor", r.history_cursor);
  w.Int("historyItems", r.history_items);
  w.Str("inputId", r.input_id);
  w.Str("journalId", r.journal_id);
  w.Str("requestId", r.request_id);
  w.Int("since", r.since);
  w.Str("text", r.text);
  w.Str("turnId", r.turn_id);
  w.Str("type", r.type);
  w.End();
  return out;
}

Result<ClientRequest> DecodeRequest(std::string_view line) {
  Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail(Errc::protocol_error, "invalid JSON");
  if (!j.is_object()) return Fail(Errc::protocol_error, "not a JSON object");
  ClientRequest r;
  std::vector<FieldMismatch> found;
  Mismatches mismatches(&found);
  Reader rd(mismatches);
  const std::string root;
  rd.Str(j, "type", r.type, root);
  rd.Str(j, "requestId", r.request_id, root);
  rd.Int(j, "since", r.since, root);
  rd.Str(j, "journalId", r.journal_id, root);
  rd.Bool(j, "historyBounds", r.history_bounds, root);
  rd.Int(j, "historyItems", r.history_items, root);
  rd.Int(j, "historyBytes", r.history_bytes, root);
  rd.Str(j, "turnId", r.turn_id, root);
  rd.Str(j, "text", r.text, root);
  rd.Int(j, "expectedRevision", r.expected_revision, root);
  rd.Str(j, "inputId", r.input_id, root);
  rd.Bool(j, "cancel", r.cancel, root);
  if (auto it = j.find("attachmentIds"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) {
      rd.Mismatch("attachmentIds", "an array of strings");
    } else {
      for (const auto& a : *it) {
        if (!a.is_string()) {
          rd.Mismatch("attachmentIds", "an array of strings");
          break;
        }
        r.attachment_ids.push_back(a.get<std::string>());
      }
    }
  }
  if (auto it = j.find("answers"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) {
      rd.Mismatch("answers", "an object of string arrays");
    } else {
      for (auto a = it->begin(); a != it->end(); ++a) {
        std::vector<std::string> vals;
        if (!a->is_array()) {
          rd.Mismatch("answers." + a.key(), "an array of strings");
          continue;
        }
        for (const auto& v : *a) {
          if (!v.is_string()) {
            rd.Mismatch("answers." + a.key(), "an array of strings");
            break;
          }
          vals.push_back(v.get<std::string>());
        }
        r.answers.emplace(a.key(), std::move(vals));
      }
    }
  }
  rd.Str(j, "historyCursor", r.history_cursor, root);
  if (!found.empty()) return Fail(Errc::protocol_error, TypeError(found.front().field, found.front().expected));
  return r;
}

ClientRequest ClientRequest::Subscribe(std::int64_t since, std::string journal_id, bool history_bounds,
                                       std::int64_t history_items, std::int64_t history_bytes) {
  ClientRequest r;
  r.type = request_type::kSubscribe;
  r.since = since;
  r.journal_id = std::move(journal_id);
  r.history_bounds = history_bounds;
  r.history_items = history_items;
  r.history_bytes = history_bytes;
  return r;
}
ClientRequest ClientRequest::Message(std::string request_id, std::string text) {
  ClientRequest r;
  r.type = request_type::kMessage;
  r.request_id = std::move(request_id);
  r.text = std::move(text);
  return r;
}
ClientRequest ClientRequest::Edit(std::string request_id, std::string turn_id, std::string text,
                                  std::int64_t expected_revision) {
  ClientRequest r;
  r.type = request_type::kMessageEdit;
  r.request_id = std::move(request_id);
  r.turn_id = std::move(turn_id);
  r.text = std::move(text);
  r.expected_revision = expected_revision;
  return r;
}
ClientRequest ClientRequest::Remove(std::string request_id, std::string turn_id, std::int64_t expected_revision) {
  ClientRequest r;
  r.type = request_type::kMessageRemove;
  r.request_id = std::move(request_id);
  r.turn_id = std::move(turn_id);
  r.expected_revision = expected_revision;
  return r;
}
ClientRequest ClientRequest::Answer(std::string request_id, std::string input_id,
                                    std::map<std::string, std::vector<std::string>> answers) {
  ClientRequest r;
  r.type = request_type::kInput;
  r.request_id = std::move(request_id);
  r.input_id = std::move(input_id);
  r.answers = std::move(answers);
  return r;
}
ClientRequest ClientRequest::Decline(std::string request_id, std::string input_id) {
  ClientRequest r;
  r.type = request_type::kInput;
  r.request_id = std::move(request_id);
  r.input_id = std::move(input_id);
  r.cancel = true;
  return r;
}
ClientRequest ClientRequest::Interrupt(std::string request_id) {
  ClientRequest r;
  r.type = request_type::kInterrupt;
  r.request_id = std::move(request_id);
  return r;
}

std::string NewUuid() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  std::uint64_t hi = rng();
  std::uint64_t lo = rng();
  hi = (hi & ~0xF000ULL) | 0x4000ULL;                        // version 4
  lo = (lo & ~(0xC0ULL << 56)) | (0x80ULL << 56);            // variant 10xx
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 15; i >= 0; --i) {
    out += kHex[(hi >> (i * 4)) & 0xF];
    if (i == 8 || i == 4) out += '-';
  }
  out += '-';
  for (int i = 15; i >= 0; --i) {
    out += kHex[(lo >> (i * 4)) & 0xF];
    if (i == 12) out += '-';
  }
  return out;
}

std::string NewRequestId() { return NewUuid(); }

namespace {

// Decodes one UTF-8 code point at `s[i]`; returns its length (0 when invalid).
std::size_t DecodeUtf8(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t len = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  return len;
}

// Length of the last UTF-8 sequence ending at `end` (exclusive), 0 when none is valid.
std::size_t LastRune(std::string_view s, std::size_t end, char32_t& cp) {
  for (std::size_t len = 1; len <= 4 && len <= end; ++len) {
    const auto b = static_cast<unsigned char>(s[end - len]);
    if ((b & 0xC0) != 0x80) {
      return DecodeUtf8(s, end - len, cp) == len ? len : 0;
    }
  }
  return 0;
}

}  // namespace

// Go's unicode.IsSpace, which strings.TrimSpace uses.
bool IsUnicodeSpace(char32_t c) {
  switch (c) {
    case '\t': case '\n': case '\v': case '\f': case '\r': case ' ':
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string_view TrimUnicodeSpace(std::string_view text) {
  std::size_t start = 0;
  while (start < text.size()) {
    char32_t cp = 0;
    const std::size_t n = DecodeUtf8(text, start, cp);
    if (n == 0 || !IsUnicodeSpace(cp)) break;
    start += n;
  }
  std::size_t end = text.size();
  while (end > start) {
    char32_t cp = 0;
    const std::size_t n = LastRune(text, end, cp);
    if (n == 0 || !IsUnicodeSpace(cp)) break;
    end -= n;
  }
  return text.substr(start, end - start);
}

bool IsRuntimeCommand(std::string_view text) {
  const std::string_view t = TrimUnicodeSpace(text);
  if (t.empty()) return false;
  if (t.front() == '!') return true;
  constexpr std::string_view kGoal = "/goal";
  if (t.substr(0, kGoal.size()) != kGoal) return false;
  if (t.size() == kGoal.size()) return true;
  char32_t cp = 0;
  const std::size_t n = DecodeUtf8(t, kGoal.size(), cp);
  return n != 0 && IsUnicodeSpace(cp);
}

void LineFramer::Emit(std::string_view line, const LineFn& on_line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  bool blank = true;
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r') {
      blank = false;
      break;
    }
  }
  if (!blank) on_line(line);
}

void LineFramer::Feed(std::string_view bytes, const LineFn& on_line, const OverflowFn& on_overflow) {
  while (!bytes.empty()) {
    const void* nl = std::memchr(bytes.data(), '\n', bytes.size());
    if (skipping_) {
      if (nl == nullptr) {
        skipped_ += bytes.size();
        return;
      }
      const auto pos = static_cast<std::size_t>(static_cast<const char*>(nl) - bytes.data());
      skipped_ += pos;
      skipping_ = false;
      if (on_overflow) on_overflow(skipped_);
      skipped_ = 0;
      bytes.remove_prefix(pos + 1);
      continue;
    }
    if (nl == nullptr) {
      if (partial_.size() + bytes.size() > max_line_) {
        skipping_ = true;
        skipped_ = partial_.size() + bytes.size();
        partial_.clear();
        partial_.shrink_to_fit();
      } else {
        partial_.append(bytes.data(), bytes.size());
      }
      return;
    }
    const auto pos = static_cast<std::size_t>(static_cast<const char*>(nl) - bytes.data());
    if (partial_.size() + pos > max_line_) {
      const std::size_t skipped = partial_.size() + pos;
      partial_.clear();
      partial_.shrink_to_fit();
      if (on_overflow) on_overflow(skipped);
    } else if (partial_.empty()) {
      Emit(bytes.substr(0, pos), on_line);
    } else {
      partial_.append(bytes.data(), pos);
      std::string line = std::move(partial_);
      partial_.clear();
      Emit(line, on_line);
    }
    bytes.remove_prefix(pos + 1);
  }
}

}  // namespace sessionturn
