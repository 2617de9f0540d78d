// Event decoding (DecodeEvent, DecodeEventInto, Event::Reset, Event::Raw): simdjson's DOM parser,
// whose compiled kernels are picked at run time for the CPU (AVX2, SSE4.2, ...). The parse validates
// the whole line; the tape is then walked once: top-level scalars go straight into their fields,
// nested modelled fields (questions, historyState, runtime) are read from the tape directly, and only
// the values kept as JSON (diff, goal, attachments, unknown runtime members) become nlohmann values.
// Unknown top-level fields are never materialised. A field of an unexpected type is recorded and left
// at its zero value: the event itself is kept (PROTOCOL.md §2, and the real runtime has changed field
// types before).
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "protocol_mismatches.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn {
namespace {

using detail::Mismatches;
namespace sj = simdjson::dom;

// A rare huge line or value must not pin its buffers for the thread's (or a reused Event's)
// lifetime: capacity above this is given back.
constexpr std::size_t kKeepCapacity = 1u << 20;

// Top-level fields of an event.
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

// `k` equals the literal `lit`, given that their lengths are already known to be equal: a compare of
// constant size, which the compiler does inline (a key is looked up on every field of every line).
template <std::size_t N>
bool Is(std::string_view k, const char (&lit)[N]) noexcept {
  return std::memcmp(k.data(), lit, N - 1) == 0;
}

Field FieldOf(std::string_view k) noexcept {
  switch (k.size()) {
    case 2:
      if (Is(k, "id")) return Field::kId;
      break;
    case 4:
      if (Is(k, "type")) return Field::kType;
      if (Is(k, "text")) return Field::kText;
      if (Is(k, "diff")) return Field::kDiff;
      if (Is(k, "goal")) return Field::kGoal;
      break;
    case 5:
      if (Is(k, "reset")) return Field::kReset;
      break;
    case 6:
      if (Is(k, "turnId")) return Field::kTurnId;
      if (Is(k, "status")) return Field::kStatus;
      if (Is(k, "toolId")) return Field::kToolId;
      if (Is(k, "output")) return Field::kOutput;
      break;
    case 7:
      if (Is(k, "inputId")) return Field::kInputId;
      if (Is(k, "runtime")) return Field::kRuntime;
      break;
    case 8:
      if (Is(k, "revision")) return Field::kRevision;
      if (Is(k, "toolName")) return Field::kToolName;
      break;
    case 9:
      if (Is(k, "requestId")) return Field::kRequestId;
      if (Is(k, "timestamp")) return Field::kTimestamp;
      if (Is(k, "questions")) return Field::kQuestions;
      if (Is(k, "journalId")) return Field::kJournalId;
      break;
    case 11:
      if (Is(k, "historyPage")) return Field::kHistoryPage;
      if (Is(k, "lastEventId")) return Field::kLastEventId;
      if (Is(k, "attachments")) return Field::kAttachments;
      break;
    case 12:
      if (Is(k, "firstEventId")) return Field::kFirstEventId;
      if (Is(k, "historyState")) return Field::kHistoryState;
      break;
    case 13:
      if (Is(k, "historyCursor")) return Field::kHistoryCursor;
      break;
    case 14:
      if (Is(k, "sessionCommand")) return Field::kSessionCommand;
      if (Is(k, "historyLimited")) return Field::kHistoryLimited;
      break;
    default:
      break;
  }
  return Field::kUnknown;
}

std::string SimdError(simdjson::error_code code) { return simdjson::error_message(code); }

// Typed scalars out of the tape. A mismatch is recorded under prefix + key (built only then) and
// leaves the member at its zero value.
struct Scalars {
  Mismatches& m;

  void Mismatch(const std::string& prefix, std::string_view key, std::string_view want) {
    std::string path = prefix;
    path.append(key);
    m.Add(std::move(path), want);
  }
  void Str(sj::element v, std::string& out, const std::string& prefix, std::string_view key) {
    if (v.is_null()) return;
    std::string_view s;
    if (v.get_string().get(s)) {
      out.clear();
      return Mismatch(prefix, key, "a string");
    }
    out.assign(s.data(), s.size());
  }
  void Int(sj::element v, std::int64_t& out, const std::string& prefix, std::string_view key) {
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
    out = 0;
    Mismatch(prefix, key, v.is_uint64() ? "an integer in range" : "an integer");
  }
  void Bool(sj::element v, bool& out, const std::string& prefix, std::string_view key) {
    if (v.is_null()) return;
    if (v.get_bool().get(out)) {
      out = false;
      Mismatch(prefix, key, "a boolean");
    }
  }
};

// A value kept as JSON, built from the tape (no text parsed again). simdjson bounded its depth.
Json ToJson(sj::element v) {
  switch (v.type()) {
    case sj::element_type::ARRAY: {
      Json out = Json::array();
      for (sj::element item : sj::array(v)) out.push_back(ToJson(item));
      return out;
    }
    case sj::element_type::OBJECT: {
      Json out = Json::object();
      for (sj::key_value_pair kv : sj::object(v)) out[std::string(kv.key)] = ToJson(kv.value);
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

std::string Indexed(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

void ReadOptions(sj::element v, std::vector<InputOption>& out, const std::string& path, Scalars& r) {
  sj::array arr;
  if (v.get_array().get(arr)) return r.m.Add(path, "an array");
  std::size_t index = 0;
  for (sj::element o : arr) {
    const std::string opath = Indexed(path, index++);
    sj::object obj;
    if (o.get_object().get(obj)) {
      r.m.Add(opath, "an object");
      continue;
    }
    InputOption opt;
    const std::string prefix = opath + ".";
    for (sj::key_value_pair kv : obj) {
      if (kv.key == "label") {
        r.Str(kv.value, opt.label, prefix, kv.key);
      } else if (kv.key == "description") {
        r.Str(kv.value, opt.description, prefix, kv.key);
      }
    }
    out.push_back(std::move(opt));
  }
}

// `v` is an array (the caller checked).
void ReadQuestions(sj::element v, std::vector<InputQuestion>& out, Mismatches& m) {
  Scalars r{m};
  std::size_t index = 0;
  for (sj::element q : sj::array(v)) {
    const std::string path = Indexed("questions", index++);
    sj::object obj;
    if (q.get_object().get(obj)) {
      m.Add(path, "an object");
      continue;
    }
    InputQuestion iq;
    const std::string prefix = path + ".";
    for (sj::key_value_pair kv : obj) {
      const std::string_view k = kv.key;
      if (k == "id") {
        r.Str(kv.value, iq.id, prefix, k);
      } else if (k == "header") {
        r.Str(kv.value, iq.header, prefix, k);
      } else if (k == "question") {
        r.Str(kv.value, iq.question, prefix, k);
      } else if (k == "multiSelect") {
        r.Bool(kv.value, iq.multi_select, prefix, k);
      } else if (k == "secret") {
        r.Bool(kv.value, iq.secret, prefix, k);
      } else if (k == "options" && !kv.value.is_null()) {
        iq.options.clear();
        ReadOptions(kv.value, iq.options, prefix + "options", r);
      }
    }
    out.push_back(std::move(iq));
  }
}

// `v` is an object (the caller checked).
void ReadHistoryState(sj::element v, std::optional<HistoryState>& out, Mismatches& m) {
  Scalars r{m};
  static const std::string kPath = "historyState.";
  static const std::string kPending = "historyState.pendingTurn.";
  HistoryState hs;
  for (sj::key_value_pair kv : sj::object(v)) {
    const std::string_view k = kv.key;
    if (k == "activeTurnId") {
      r.Str(kv.value, hs.active_turn_id, kPath, k);
    } else if (k == "activeTurnStarted") {
      r.Str(kv.value, hs.active_turn_started, kPath, k);
    } else if (k == "turnInterrupting") {
      r.Bool(kv.value, hs.turn_interrupting, kPath, k);
    } else if (k == "waitingForInput") {
      r.Bool(kv.value, hs.waiting_for_input, kPath, k);
    } else if (k == "pendingTurn" && !kv.value.is_null()) {
      sj::object pending;
      if (kv.value.get_object().get(pending)) {
        hs.pending_turn.reset();
        m.Add("historyState.pendingTurn", "an object");
        continue;
      }
      PendingTurn pt;
      for (sj::key_value_pair p : pending) {
        if (p.key == "turnId") {
          r.Str(p.value, pt.turn_id, kPending, p.key);
        } else if (p.key == "text") {
          r.Str(p.value, pt.text, kPending, p.key);
        } else if (p.key == "revision") {
          r.Int(p.value, pt.revision, kPending, p.key);
        }
      }
      hs.pending_turn = std::move(pt);
    } else if (k == "fileDiff" && !kv.value.is_null()) {
      hs.file_diff = ToJson(kv.value);
    }
  }
  out = std::move(hs);
}

// `v` is an object (the caller checked).
void ReadRuntime(sj::element v, std::optional<RuntimeStatus>& out, Mismatches& m) {
  Scalars r{m};
  static const std::string kPath = "runtime.";
  static const std::string kUsage = "runtime.usage.";
  RuntimeStatus rs;
  for (sj::key_value_pair kv : sj::object(v)) {
    const std::string_view k = kv.key;
    if (k == "sessionName") {
      r.Str(kv.value, rs.session_name, kPath, k);
    } else if (k == "agentType") {
      r.Str(kv.value, rs.agent_type, kPath, k);
    } else if (k == "model") {
      r.Str(kv.value, rs.model, kPath, k);
    } else if (k == "workingDir") {
      r.Str(kv.value, rs.working_dir, kPath, k);
    } else if (k == "homeDir") {
      r.Str(kv.value, rs.home_dir, kPath, k);
    } else if (k == "branch") {
      r.Str(kv.value, rs.branch, kPath, k);
    } else if (k == "usage") {
      if (kv.value.is_null()) continue;
      sj::object usage;
      if (kv.value.get_object().get(usage)) {
        rs.usage.reset();
        m.Add("runtime.usage", "an object");
        continue;
      }
      Usage u;
      for (sj::key_value_pair p : usage) {
        const std::string_view uk = p.key;
        if (uk == "inputTokens") {
          r.Int(p.value, u.input_tokens, kUsage, uk);
        } else if (uk == "outputTokens") {
          r.Int(p.value, u.output_tokens, kUsage, uk);
        } else if (uk == "totalTokens") {
          r.Int(p.value, u.total_tokens, kUsage, uk);
        } else if (uk == "contextTokens") {
          r.Int(p.value, u.context_tokens, kUsage, uk);
        } else if (uk == "contextWindow") {
          r.Int(p.value, u.context_window, kUsage, uk);
        }
      }
      rs.usage = u;
    } else {
      rs.extra[std::string(k)] = ToJson(kv.value);
    }
  }
  out = std::move(rs);
}

class EventDecoder {
 public:
  Status Decode(std::string_view line, Event& ev, std::vector<FieldMismatch>* mismatches) {
    ev.Reset();
    // The line is kept in ev.line (Event::Raw parses it on demand), and simdjson parses it there,
    // with its SIMDJSON_PADDING appended for the parse (zeros, inside the string: no read past its
    // end) and cut off again at once (the parsed document holds copies of what it needs). The line
    // is copied once.
    ev.line.reserve(line.size() + simdjson::SIMDJSON_PADDING);
    ev.line.assign(line.data(), line.size());
    ev.line.append(simdjson::SIMDJSON_PADDING, '\0');
    sj::element root;
    const auto parsed =
        parser_.parse(reinterpret_cast<const std::uint8_t*>(ev.line.data()), line.size(), false).get(root);
    ev.line.resize(line.size());
    if (auto err = parsed; err) {
      MaybeShrink(line.size());
      return Fail(Errc::protocol_error, NotObjectOr(line, "invalid JSON: " + SimdError(err)));
    }
    sj::object obj;
    if (auto err = root.get_object().get(obj); err) return Fail(Errc::protocol_error, "not a JSON object");
    Mismatches m(mismatches);
    Scalars r{m};
    for (sj::key_value_pair kv : obj) Field(FieldOf(kv.key), kv.key, kv.value, ev, r);
    MaybeShrink(line.size());
    return {};
  }

 private:
  void MaybeShrink(std::size_t line_size) {
    if (line_size > kKeepCapacity) parser_ = sj::parser();
  }

  static std::string NotObjectOr(std::string_view line, std::string otherwise) {
    const std::size_t first = line.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos || line[first] != '{') return "not a JSON object";
    return otherwise;
  }

  static void Field(sessionturn::Field f, std::string_view key, sj::element v, Event& ev, Scalars& r) {
    static const std::string kTop;
    switch (f) {
      case Field::kUnknown: return;
      case Field::kId: return r.Int(v, ev.id, kTop, key);
      case Field::kRevision: return r.Int(v, ev.revision, kTop, key);
      case Field::kFirstEventId: return r.Int(v, ev.first_event_id, kTop, key);
      case Field::kLastEventId: return r.Int(v, ev.last_event_id, kTop, key);
      case Field::kType: return r.Str(v, ev.type, kTop, key);
      case Field::kTimestamp: return r.Str(v, ev.timestamp, kTop, key);
      case Field::kRequestId: return r.Str(v, ev.request_id, kTop, key);
      case Field::kTurnId: return r.Str(v, ev.turn_id, kTop, key);
      case Field::kText: return r.Str(v, ev.text, kTop, key);
      case Field::kStatus: return r.Str(v, ev.status, kTop, key);
      case Field::kSessionCommand: return r.Bool(v, ev.session_command, kTop, key);
      case Field::kToolId: return r.Str(v, ev.tool_id, kTop, key);
      case Field::kToolName: return r.Str(v, ev.tool_name, kTop, key);
      case Field::kOutput: return r.Str(v, ev.output, kTop, key);
      case Field::kInputId: return r.Str(v, ev.input_id, kTop, key);
      case Field::kJournalId: return r.Str(v, ev.journal_id, kTop, key);
      case Field::kHistoryCursor: return r.Str(v, ev.history_cursor, kTop, key);
      case Field::kReset: return r.Bool(v, ev.reset, kTop, key);
      case Field::kHistoryLimited: return r.Bool(v, ev.history_limited, kTop, key);
      case Field::kHistoryPage: return r.Bool(v, ev.history_page, kTop, key);
      case Field::kDiff:
        if (!v.is_null()) ev.diff = ToJson(v);
        return;
      case Field::kGoal:
        if (!v.is_null()) ev.goal = ToJson(v);
        return;
      case Field::kAttachments:
        if (!v.is_null()) ev.attachments = ToJson(v);
        return;
      case Field::kQuestions:
        if (v.is_null()) return;
        if (!v.is_array()) return r.m.Add("questions", "an array");
        ev.questions.clear();
        return ReadQuestions(v, ev.questions, r.m);
      case Field::kHistoryState:
        if (v.is_null()) return;
        if (!v.is_object()) return r.m.Add("historyState", "an object");
        return ReadHistoryState(v, ev.history_state, r.m);
      case Field::kRuntime:
        if (v.is_null()) return;
        if (!v.is_object()) return r.m.Add("runtime", "an object");
        return ReadRuntime(v, ev.runtime, r.m);
    }
  }

  sj::parser parser_;
};

}  // namespace

Json Event::Raw() const {
  if (line.empty()) return EventToJson(*this);
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return EventToJson(*this);
  return j;
}

bool SameEvent(const Event& a, const Event& b) { return EventToJson(a) == EventToJson(b); }

namespace {

// Empties `s` but keeps its capacity for the next line, unless a rare huge value made it large.
void ClearKeeping(std::string& s) noexcept {
  if (s.capacity() > kKeepCapacity) {
    std::string().swap(s);
  } else {
    s.clear();
  }
}

bool Inside(const std::string& s, std::string_view v) {
  const char* begin = s.data();
  return !v.empty() && std::less_equal<const char*>()(begin, v.data()) &&
         std::less<const char*>()(v.data(), begin + s.size());
}

bool ViewsTopLevelString(const Event& e, std::string_view v) {
  for (const std::string* s : {&e.line, &e.type, &e.timestamp, &e.request_id, &e.turn_id, &e.text, &e.status,
                               &e.tool_id, &e.tool_name, &e.output, &e.input_id, &e.journal_id, &e.history_cursor}) {
    if (Inside(*s, v)) return true;
  }
  return false;
}

}  // namespace

void Event::Reset() noexcept {
  id = 0;
  ClearKeeping(type);
  ClearKeeping(timestamp);
  ClearKeeping(request_id);
  ClearKeeping(turn_id);
  ClearKeeping(text);
  revision = 0;
  ClearKeeping(status);
  session_command = false;
  ClearKeeping(tool_id);
  ClearKeeping(tool_name);
  ClearKeeping(output);
  ClearKeeping(input_id);
  questions.clear();
  // The JSON members are null on most events: left alone then (assigning null builds and swaps).
  if (!diff.is_null()) diff = nullptr;
  first_event_id = 0;
  last_event_id = 0;
  ClearKeeping(journal_id);
  reset = false;
  history_limited = false;
  history_page = false;
  ClearKeeping(history_cursor);
  history_state.reset();
  runtime.reset();
  if (!goal.is_null()) goal = nullptr;
  if (!attachments.is_null()) attachments = nullptr;
  ClearKeeping(line);
}

Status DecodeEventInto(std::string_view line, Event& event, std::vector<FieldMismatch>* mismatches) {
  // One decoder (parser state and buffers, reused across lines) per thread.
  thread_local EventDecoder decoder;
  // A line that views one of the event's own strings (decoding an Event's line again) would be
  // cleared or freed under us: decoded from a copy.
  if (ViewsTopLevelString(event, line)) return DecodeEventInto(std::string(line), event, mismatches);
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

}  // namespace sessionturn
