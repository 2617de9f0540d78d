#include "sessionturn/protocol.hpp"

#include <cstring>
#include <random>

#include <simdjson.h>

#include "unicode.hpp"

namespace sessionturn {
namespace {

// Top-level fields of an event, decoded straight from the SAX stream (no DOM for the common path).
enum class Field : std::uint8_t {
  kUnknown,
  kId,
  kType,
  kTimestamp,
  kRequestId,
  kTurnId,
  kText,
  kRevision,
  kStatus,
  kSessionCommand,
  kToolId,
  kToolName,
  kOutput,
  kInputId,
  kQuestions,
  kDiff,
  kFirstEventId,
  kLastEventId,
  kJournalId,
  kReset,
  kHistoryLimited,
  kHistoryPage,
  kHistoryCursor,
  kHistoryState,
  kRuntime,
  kGoal,
  kAttachments,
};

Field FieldOf(std::string_view k) noexcept {
  switch (k.size()) {
    case 2:
      if (k == "id") return Field::kId;
      break;
    case 4:
      if (k == "type") return Field::kType;
      if (k == "text") return Field::kText;
      if (k == "diff") return Field::kDiff;
      if (k == "goal") return Field::kGoal;
      break;
    case 5:
      if (k == "reset") return Field::kReset;
      break;
    case 6:
      if (k == "turnId") return Field::kTurnId;
      if (k == "status") return Field::kStatus;
      if (k == "toolId") return Field::kToolId;
      if (k == "output") return Field::kOutput;
      break;
    case 7:
      if (k == "inputId") return Field::kInputId;
      if (k == "runtime") return Field::kRuntime;
      break;
    case 8:
      if (k == "revision") return Field::kRevision;
      if (k == "toolName") return Field::kToolName;
      break;
    case 9:
      if (k == "requestId") return Field::kRequestId;
      if (k == "timestamp") return Field::kTimestamp;
      if (k == "questions") return Field::kQuestions;
      if (k == "journalId") return Field::kJournalId;
      break;
    case 11:
      if (k == "historyPage") return Field::kHistoryPage;
      if (k == "lastEventId") return Field::kLastEventId;
      if (k == "attachments") return Field::kAttachments;
      break;
    case 12:
      if (k == "firstEventId") return Field::kFirstEventId;
      if (k == "historyState") return Field::kHistoryState;
      break;
    case 13:
      if (k == "historyCursor") return Field::kHistoryCursor;
      break;
    case 14:
      if (k == "sessionCommand") return Field::kSessionCommand;
      if (k == "historyLimited") return Field::kHistoryLimited;
      break;
    default:
      break;
  }
  return Field::kUnknown;
}

std::string TypeError(std::string_view key, std::string_view want) {
  std::string msg = "\"";
  msg.append(key);
  msg += "\" must be ";
  msg.append(want);
  return msg;
}

// Where the decoder records fields of an unexpected type. Events keep going; requests stop at the
// first (DecodeRequest turns it into an error, as the runtime's strict decoder does).
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

void ReadOptions(const Json& arr, std::vector<InputOption>& out, const std::string& path, Reader& r) {
  if (!arr.is_array()) return r.Mismatch(path, "an array");
  for (std::size_t j = 0; j < arr.size(); ++j) {
    const Json& o = arr[j];
    const std::string opath = path + "[" + std::to_string(j) + "]";
    if (!o.is_object()) {
      r.Mismatch(opath, "an object");
      continue;
    }
    InputOption opt;
    r.Str(o, "label", opt.label, opath + ".");
    r.Str(o, "description", opt.description, opath + ".");
    out.push_back(std::move(opt));
  }
}

void ReadQuestions(const Json& arr, std::vector<InputQuestion>& out, Mismatches& m) {
  Reader r(m);
  if (arr.is_null()) return;
  if (!arr.is_array()) return r.Mismatch("questions", "an array");
  out.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const Json& q = arr[i];
    const std::string path = "questions[" + std::to_string(i) + "]";
    if (!q.is_object()) {
      r.Mismatch(path, "an object");
      continue;
    }
    InputQuestion iq;
    r.Str(q, "id", iq.id, path + ".");
    r.Str(q, "header", iq.header, path + ".");
    r.Str(q, "question", iq.question, path + ".");
    r.Bool(q, "multiSelect", iq.multi_select, path + ".");
    r.Bool(q, "secret", iq.secret, path + ".");
    if (auto it = q.find("options"); it != q.end() && !it->is_null()) ReadOptions(*it, iq.options, path + ".options", r);
    out.push_back(std::move(iq));
  }
}

void ReadHistoryState(const Json& obj, std::optional<HistoryState>& out, Mismatches& m) {
  Reader r(m);
  if (obj.is_null()) return;
  if (!obj.is_object()) return r.Mismatch("historyState", "an object");
  HistoryState hs;
  const std::string path = "historyState.";
  r.Str(obj, "activeTurnId", hs.active_turn_id, path);
  r.Str(obj, "activeTurnStarted", hs.active_turn_started, path);
  r.Bool(obj, "turnInterrupting", hs.turn_interrupting, path);
  r.Bool(obj, "waitingForInput", hs.waiting_for_input, path);
  if (auto it = obj.find("pendingTurn"); it != obj.end() && !it->is_null()) {
    if (!it->is_object()) {
      r.Mismatch(path + "pendingTurn", "an object");
    } else {
      PendingTurn pt;
      const std::string ppath = path + "pendingTurn.";
      r.Str(*it, "turnId", pt.turn_id, ppath);
      r.Str(*it, "text", pt.text, ppath);
      r.Int(*it, "revision", pt.revision, ppath);
      hs.pending_turn = std::move(pt);
    }
  }
  if (auto it = obj.find("fileDiff"); it != obj.end() && !it->is_null()) hs.file_diff = *it;
  out = std::move(hs);
}

void ReadUsage(const Json& obj, std::optional<Usage>& out, Reader& r) {
  if (!obj.is_object()) return r.Mismatch("runtime.usage", "an object");
  Usage u;
  const std::string upath = "runtime.usage.";
  r.Int(obj, "inputTokens", u.input_tokens, upath);
  r.Int(obj, "outputTokens", u.output_tokens, upath);
  r.Int(obj, "totalTokens", u.total_tokens, upath);
  r.Int(obj, "contextTokens", u.context_tokens, upath);
  r.Int(obj, "contextWindow", u.context_window, upath);
  out = u;
}

void ReadRuntime(const Json& obj, std::optional<RuntimeStatus>& out, Mismatches& m) {
  Reader r(m);
  if (obj.is_null()) return;
  if (!obj.is_object()) return r.Mismatch("runtime", "an object");
  RuntimeStatus rs;
  const std::string path = "runtime.";
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    if (k == "sessionName") {
      r.Str(obj, "sessionName", rs.session_name, path);
    } else if (k == "agentType") {
      r.Str(obj, "agentType", rs.agent_type, path);
    } else if (k == "model") {
      r.Str(obj, "model", rs.model, path);
    } else if (k == "workingDir") {
      r.Str(obj, "workingDir", rs.working_dir, path);
    } else if (k == "homeDir") {
      r.Str(obj, "homeDir", rs.home_dir, path);
    } else if (k == "branch") {
      r.Str(obj, "branch", rs.branch, path);
    } else if (k == "usage") {
      if (!it->is_null()) ReadUsage(*it, rs.usage, r);
    } else {
      rs.extra[k] = *it;
    }
  }
  out = std::move(rs);
}

namespace sj = simdjson::dom;

std::string SimdError(simdjson::error_code code) { return simdjson::error_message(code); }

// Decodes one event with simdjson's DOM parser, whose compiled kernels are picked at run time for
// the CPU (AVX2, SSE4.2, ...); the tape is walked once, top-level scalars go straight into their
// fields, and nested values of modelled fields are handed to nlohmann as minified text (they are
// rare next to deltas and tool output). Unknown fields are never materialised. A field of an
// unexpected type is recorded and skipped: the event itself is kept (PROTOCOL.md §2, and the real
// runtime has changed field types before).
class EventDecoder {
 public:
  Status Decode(std::string_view line, Event& ev, std::vector<FieldMismatch>* mismatches) {
    ev.Reset();
    // simdjson needs SIMDJSON_PADDING readable bytes after the input; copy into a reused buffer.
    buffer_.resize(line.size() + simdjson::SIMDJSON_PADDING);
    std::memcpy(buffer_.data(), line.data(), line.size());
    std::memset(buffer_.data() + line.size(), 0, simdjson::SIMDJSON_PADDING);

    sj::element root;
    if (auto err = parser_.parse(reinterpret_cast<const std::uint8_t*>(buffer_.data()), line.size(), false).get(root);
        err) {
      MaybeShrink(line.size());
      return Fail(Errc::protocol_error, NotObjectOr(line, "invalid JSON: " + SimdError(err)));
    }
    sj::object obj;
    if (auto err = root.get_object().get(obj); err) return Fail(Errc::protocol_error, "not a JSON object");
    Mismatches m(mismatches);
    for (sj::key_value_pair kv : obj) Field(FieldOf(kv.key), kv.key, kv.value, ev, m);
    ev.line.assign(line.data(), line.size());
    MaybeShrink(line.size());
    return {};
  }

 private:
  // A rare huge line must not pin its buffers for the thread's lifetime.
  static constexpr std::size_t kKeepCapacity = 1u << 20;
  void MaybeShrink(std::size_t line_size) {
    if (line_size > kKeepCapacity) {
      buffer_ = std::vector<char>();
      parser_ = sj::parser();
    }
  }

  static std::string NotObjectOr(std::string_view line, std::string otherwise) {
    const std::size_t first = line.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos || line[first] != '{') return "not a JSON object";
    return otherwise;
  }

  static void Str(sj::element v, std::string_view key, std::string& out, Mismatches& m) {
    if (v.is_null()) return;
    std::string_view s;
    if (v.get_string().get(s)) return m.Add(std::string(key), "a string");
    out.assign(s.data(), s.size());
  }

  static void Int(sj::element v, std::string_view key, std::int64_t& out, Mismatches& m) {
    if (v.is_null()) return;
    std::int64_t i = 0;
    if (!v.get_int64().get(i)) {
      out = i;
      return;
    }
    double d = 0;
    if (v.is_double() && !v.get_double().get(d) && d >= -9.2e18 && d <= 9.2e18 &&
        d == static_cast<double>(static_cast<std::int64_t>(d))) {
      out = static_cast<std::int64_t>(d);
      return;
    }
    m.Add(std::string(key), v.is_uint64() ? "an integer in range" : "an integer");
  }

  static void Bool(sj::element v, std::string_view key, bool& out, Mismatches& m) {
    if (v.is_null()) return;
    if (v.get_bool().get(out)) {
      out = false;
      m.Add(std::string(key), "a boolean");
    }
  }

  // Nested values we keep as JSON, built from simdjson's tape directly (no minified text parsed again).
  // The depth is bounded by simdjson's (it refused deeper documents).
  static Json Nested(sj::element v) {
    switch (v.type()) {
      case sj::element_type::ARRAY: {
        Json out = Json::array();
        for (sj::element item : sj::array(v)) out.push_back(Nested(item));
        return out;
      }
      case sj::element_type::OBJECT: {
        Json out = Json::object();
        for (sj::key_value_pair kv : sj::object(v)) out[std::string(kv.key)] = Nested(kv.value);
        return out;
      }
      case sj::element_type::INT64: return Json(std::int64_t(v));
      case sj::element_type::UINT64: return Json(std::uint64_t(v));
      case sj::element_type::DOUBLE: return Json(double(v));
      case sj::element_type::STRING: return Json(std::string(std::string_view(v)));
      case sj::element_type::BOOL: return Json(bool(v));
      case sj::element_type::NULL_VALUE: return Json();
    }
    return Json();
  }

  static void Field(sessionturn::Field f, std::string_view key, sj::element v, Event& ev, Mismatches& m) {
    switch (f) {
      case Field::kUnknown: return;
      case Field::kId: return Int(v, key, ev.id, m);
      case Field::kRevision: return Int(v, key, ev.revision, m);
      case Field::kFirstEventId: return Int(v, key, ev.first_event_id, m);
      case Field::kLastEventId: return Int(v, key, ev.last_event_id, m);
      case Field::kType: return Str(v, key, ev.type, m);
      case Field::kTimestamp: return Str(v, key, ev.timestamp, m);
      case Field::kRequestId: return Str(v, key, ev.request_id, m);
      case Field::kTurnId: return Str(v, key, ev.turn_id, m);
      case Field::kText: return Str(v, key, ev.text, m);
      case Field::kStatus: return Str(v, key, ev.status, m);
      case Field::kSessionCommand: return Bool(v, key, ev.session_command, m);
      case Field::kToolId: return Str(v, key, ev.tool_id, m);
      case Field::kToolName: return Str(v, key, ev.tool_name, m);
      case Field::kOutput: return Str(v, key, ev.output, m);
      case Field::kInputId: return Str(v, key, ev.input_id, m);
      case Field::kJournalId: return Str(v, key, ev.journal_id, m);
      case Field::kHistoryCursor: return Str(v, key, ev.history_cursor, m);
      case Field::kReset: return Bool(v, key, ev.reset, m);
      case Field::kHistoryLimited: return Bool(v, key, ev.history_limited, m);
      case Field::kHistoryPage: return Bool(v, key, ev.history_page, m);
      case Field::kDiff:
        if (!v.is_null()) ev.diff = Nested(v);
        return;
      case Field::kGoal:
        if (!v.is_null()) ev.goal = Nested(v);
        return;
      case Field::kAttachments:
        if (!v.is_null()) ev.attachments = Nested(v);
        return;
      case Field::kQuestions:
        if (v.is_null()) return;
        if (!v.is_array()) return m.Add("questions", "an array");
        ev.questions.clear();
        return ReadQuestions(Nested(v), ev.questions, m);
      case Field::kHistoryState:
        if (v.is_null()) return;
        if (!v.is_object()) return m.Add("historyState", "an object");
        return ReadHistoryState(Nested(v), ev.history_state, m);
      case Field::kRuntime:
        if (v.is_null()) return;
        if (!v.is_object()) return m.Add("runtime", "an object");
        return ReadRuntime(Nested(v), ev.runtime, m);
    }
  }

  sj::parser parser_;
  std::vector<char> buffer_;
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

std::string Dump(const Json& j) {
  // Replace invalid UTF-8 rather than throw: the runtime's own encoder does the same.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

Json Event::Raw() const {
  if (line.empty()) return EventToJson(*this);
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return EventToJson(*this);
  return j;
}

bool SameEvent(const Event& a, const Event& b) { return EventToJson(a) == EventToJson(b); }

void Event::Reset() noexcept {
  id = 0;
  type.clear();
  timestamp.clear();
  request_id.clear();
  turn_id.clear();
  text.clear();
  revision = 0;
  status.clear();
  session_command = false;
  tool_id.clear();
  tool_name.clear();
  output.clear();
  input_id.clear();
  questions.clear();
  diff = nullptr;
  first_event_id = 0;
  last_event_id = 0;
  journal_id.clear();
  reset = false;
  history_limited = false;
  history_page = false;
  history_cursor.clear();
  history_state.reset();
  runtime.reset();
  goal = nullptr;
  attachments = nullptr;
  line.clear();
}

Status DecodeEventInto(std::string_view line, Event& event, std::vector<FieldMismatch>* mismatches) {
  // One decoder (parser state and buffers, reused across lines) per thread.
  thread_local EventDecoder decoder;
  try {
    Status decoded = decoder.Decode(line, event, mismatches);
    if (!decoded) event.Reset();
    return decoded;
  } catch (const std::exception& e) {  // allocation failure; simdjson itself does not throw here
    event.Reset();
    return Fail(Errc::protocol_error, std::string("cannot decode event: ") + e.what());
  }
}

Result<Event> DecodeEvent(std::string_view line, std::vector<FieldMismatch>* mismatches) {
  Event event;
  if (auto decoded = DecodeEventInto(line, event, mismatches); !decoded) return Fail(decoded.error());
  return event;
}

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

std::string EncodeRequest(const ClientRequest& r) { return Dump(RequestToJson(r)); }

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
