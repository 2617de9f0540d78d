#include "sessionturn/protocol.hpp"

#include <cstring>
#include <random>

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

// Reads typed members out of a nested object, recording the first type mismatch with its path.
class Reader {
 public:
  explicit Reader(std::string* error) : error_(error) {}

  void Str(const Json& obj, const char* key, std::string& out, const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return;
    if (!it->is_string()) return Mismatch(path + key, "a string");
    out = it->get_ref<const std::string&>();
  }
  void Int(const Json& obj, const char* key, std::int64_t& out, const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return;
    if (it->is_number_integer()) {
      out = it->get<std::int64_t>();
    } else if (it->is_number_float() && it->get<double>() == static_cast<double>(static_cast<std::int64_t>(it->get<double>()))) {
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
  void Mismatch(const std::string& key, std::string_view want) {
    if (error_->empty()) *error_ = TypeError(key, want);
  }

 private:
  std::string* error_;
};

void ReadQuestions(const Json& arr, std::vector<InputQuestion>& out, std::string* error) {
  Reader r(error);
  if (arr.is_null()) return;
  if (!arr.is_array()) return r.Mismatch("questions", "an array");
  out.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const Json& q = arr[i];
    std::string path = "questions[" + std::to_string(i) + "].";
    if (!q.is_object()) {
      r.Mismatch(path.substr(0, path.size() - 1), "an object");
      continue;
    }
    InputQuestion iq;
    r.Str(q, "id", iq.id, path);
    r.Str(q, "header", iq.header, path);
    r.Str(q, "question", iq.question, path);
    r.Bool(q, "multiSelect", iq.multi_select, path);
    r.Bool(q, "secret", iq.secret, path);
    if (auto it = q.find("options"); it != q.end() && !it->is_null()) {
      if (!it->is_array()) {
        r.Mismatch(path + "options", "an array");
      } else {
        for (std::size_t j = 0; j < it->size(); ++j) {
          const Json& o = (*it)[j];
          std::string opath = path + "options[" + std::to_string(j) + "].";
          if (!o.is_object()) {
            r.Mismatch(opath.substr(0, opath.size() - 1), "an object");
            continue;
          }
          InputOption opt;
          r.Str(o, "label", opt.label, opath);
          r.Str(o, "description", opt.description, opath);
          iq.options.push_back(std::move(opt));
        }
      }
    }
    out.push_back(std::move(iq));
  }
}

void ReadHistoryState(const Json& obj, std::optional<HistoryState>& out, std::string* error) {
  Reader r(error);
  if (obj.is_null()) return;
  if (!obj.is_object()) return r.Mismatch("historyState", "an object");
  HistoryState hs;
  const std::string path = "historyState.";
  r.Str(obj, "activeTurnId", hs.active_turn_id, path);
  r.Bool(obj, "activeTurnStarted", hs.active_turn_started, path);
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
  if (auto it = obj.find("fileDiff"); it != obj.end()) hs.file_diff = *it;
  out = std::move(hs);
}

void ReadRuntime(const Json& obj, std::optional<RuntimeStatus>& out, std::string* error) {
  Reader r(error);
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
    } else if (k == "branch") {
      r.Str(obj, "branch", rs.branch, path);
    } else if (k == "usage") {
      if (it->is_null()) continue;
      if (!it->is_object()) {
        r.Mismatch(path + "usage", "an object");
        continue;
      }
      Usage u;
      const std::string upath = path + "usage.";
      r.Int(*it, "inputTokens", u.input_tokens, upath);
      r.Int(*it, "outputTokens", u.output_tokens, upath);
      r.Int(*it, "totalTokens", u.total_tokens, upath);
      r.Int(*it, "contextTokens", u.context_tokens, upath);
      r.Int(*it, "contextWindow", u.context_window, upath);
      rs.usage = u;
    } else {
      rs.extra[k] = *it;
    }
  }
  out = std::move(rs);
}

// SAX handler that fills an Event. Scalars at depth 1 go straight into their fields; nested values
// of modelled fields are built as a small DOM subtree and converted when they close; nested values of
// unknown fields are skipped without allocation.
class EventSax {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  explicit EventSax(Event* ev) : ev_(ev) {}

  std::string error;

  bool null() {
    if (Nested()) return Put(Json(nullptr));
    return true;  // absent == null == zero value
  }
  bool boolean(bool v) {
    if (Nested()) return Put(Json(v));
    if (!TopLevelValue()) return false;
    switch (field_) {
      case Field::kReset: ev_->reset = v; return true;
      case Field::kHistoryLimited: ev_->history_limited = v; return true;
      case Field::kHistoryPage: ev_->history_page = v; return true;
      case Field::kUnknown: return true;
      case Field::kHistoryCursor: ev_->history_cursor = v; return true;
      case Field::kDiff: ev_->diff = v; return true;
      case Field::kGoal: ev_->goal = v; return true;
      case Field::kAttachments: ev_->attachments = v; return true;
      default: return Mismatch();
    }
  }
  bool number_integer(number_integer_t v) { return Integer(v, Json(v)); }
  bool number_unsigned(number_unsigned_t v) {
    if (v > static_cast<number_unsigned_t>(INT64_MAX)) {
      if (Nested()) return Put(Json(v));
      if (!TopLevelValue()) return false;
      if (IsIntField()) return Fail("\"" + key_ + "\" is out of range");
      return Other(Json(v));
    }
    return Integer(static_cast<std::int64_t>(v), Json(v));
  }
  bool number_float(number_float_t v, const string_t&) {
    if (Nested()) return Put(Json(v));
    if (!TopLevelValue()) return false;
    if (IsIntField()) {
      auto i = static_cast<std::int64_t>(v);
      if (static_cast<double>(i) != v) return Fail(TypeError(key_, "an integer"));
      return Integer(i, Json(v));
    }
    return Other(Json(v));
  }
  bool string(string_t& v) {
    if (Nested()) return Put(Json(std::move(v)));
    if (!TopLevelValue()) return false;
    std::string* dst = StringField();
    if (dst != nullptr) {
      *dst = std::move(v);
      return true;
    }
    if (field_ == Field::kUnknown) return true;
    return Other(Json(std::move(v)));
  }
  bool binary(binary_t&) { return Fail("unexpected binary value"); }

  bool start_object(std::size_t) {
    if (depth_ == 0) {
      ++depth_;
      seen_root_ = true;
      return true;
    }
    return StartNested(Json::object());
  }
  bool key(string_t& k) {
    if (depth_ == 1) {
      key_ = std::move(k);
      field_ = FieldOf(key_);
      return true;
    }
    if (skip_depth_ > 0) return true;
    pending_key_ = std::move(k);
    return true;
  }
  bool end_object() { return EndNested(); }
  bool start_array(std::size_t) {
    if (depth_ == 0) return Fail("not a JSON object (an array)");
    return StartNested(Json::array());
  }
  bool end_array() { return EndNested(); }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    if (error.empty()) {
      if (!seen_root_ && depth_ == 0 && position <= 1) {
        error = "not a JSON object: invalid JSON";
      } else {
        error = "invalid JSON at byte " + std::to_string(position) + ": " + ex.what();
      }
    }
    return false;
  }

 private:
  bool Nested() const noexcept { return depth_ > 1; }

  // A scalar at depth 0 means the line is not an object.
  bool TopLevelValue() {
    if (depth_ == 0) return Fail("not a JSON object");
    return true;
  }

  bool Fail(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  bool Mismatch() {
    switch (field_) {
      case Field::kId:
      case Field::kRevision:
      case Field::kFirstEventId:
      case Field::kLastEventId:
        return Fail(TypeError(key_, "an integer"));
      case Field::kReset:
      case Field::kHistoryLimited:
      case Field::kHistoryPage:
        return Fail(TypeError(key_, "a boolean"));
      case Field::kQuestions:
        return Fail(TypeError(key_, "an array"));
      case Field::kHistoryState:
      case Field::kRuntime:
        return Fail(TypeError(key_, "an object"));
      default:
        return Fail(TypeError(key_, "a string"));
    }
  }

  bool IsIntField() const noexcept {
    return field_ == Field::kId || field_ == Field::kRevision || field_ == Field::kFirstEventId ||
           field_ == Field::kLastEventId;
  }

  bool Integer(std::int64_t v, Json as_json) {
    if (Nested()) return Put(std::move(as_json));
    if (!TopLevelValue()) return false;
    switch (field_) {
      case Field::kId: ev_->id = v; return true;
      case Field::kRevision: ev_->revision = v; return true;
      case Field::kFirstEventId: ev_->first_event_id = v; return true;
      case Field::kLastEventId: ev_->last_event_id = v; return true;
      default: return Other(std::move(as_json));
    }
  }

  // A scalar for a field that is not a plain string/int/bool field.
  bool Other(Json v) {
    switch (field_) {
      case Field::kUnknown: return true;
      case Field::kHistoryCursor: ev_->history_cursor = std::move(v); return true;
      case Field::kDiff: ev_->diff = std::move(v); return true;
      case Field::kGoal: ev_->goal = std::move(v); return true;
      case Field::kAttachments: ev_->attachments = std::move(v); return true;
      default: return Mismatch();
    }
  }

  std::string* StringField() noexcept {
    switch (field_) {
      case Field::kType: return &ev_->type;
      case Field::kTimestamp: return &ev_->timestamp;
      case Field::kRequestId: return &ev_->request_id;
      case Field::kTurnId: return &ev_->turn_id;
      case Field::kText: return &ev_->text;
      case Field::kStatus: return &ev_->status;
      case Field::kSessionCommand: return &ev_->session_command;
      case Field::kToolId: return &ev_->tool_id;
      case Field::kToolName: return &ev_->tool_name;
      case Field::kOutput: return &ev_->output;
      case Field::kInputId: return &ev_->input_id;
      case Field::kJournalId: return &ev_->journal_id;
      default: return nullptr;
    }
  }

  bool StartNested(Json container) {
    ++depth_;
    if (skip_depth_ > 0) {
      ++skip_depth_;
      return true;
    }
    if (depth_ == 2) {
      switch (field_) {
        case Field::kUnknown:
          skip_depth_ = 1;
          return true;
        case Field::kQuestions:
        case Field::kHistoryState:
        case Field::kRuntime:
        case Field::kDiff:
        case Field::kGoal:
        case Field::kAttachments:
        case Field::kHistoryCursor:
          break;
        default:
          return Mismatch();
      }
      root_ = std::move(container);
      stack_.clear();
      stack_.push_back(&root_);
      return true;
    }
    Json* parent = stack_.back();
    Json* child = nullptr;
    if (parent->is_object()) {
      child = &((*parent)[pending_key_] = std::move(container));
    } else {
      parent->push_back(std::move(container));
      child = &parent->back();
    }
    stack_.push_back(child);
    return true;
  }

  bool Put(Json v) {
    if (skip_depth_ > 0) return true;
    Json* parent = stack_.back();
    if (parent->is_object()) {
      (*parent)[pending_key_] = std::move(v);
    } else {
      parent->push_back(std::move(v));
    }
    return true;
  }

  bool EndNested() {
    --depth_;
    if (depth_ == 0) return true;  // end of the root object
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    stack_.pop_back();
    if (depth_ == 1) return Finish();
    return true;
  }

  bool Finish() {
    switch (field_) {
      case Field::kQuestions:
        ev_->questions.clear();
        ReadQuestions(root_, ev_->questions, &error);
        break;
      case Field::kHistoryState: ReadHistoryState(root_, ev_->history_state, &error); break;
      case Field::kRuntime: ReadRuntime(root_, ev_->runtime, &error); break;
      case Field::kDiff: ev_->diff = std::move(root_); break;
      case Field::kGoal: ev_->goal = std::move(root_); break;
      case Field::kAttachments: ev_->attachments = std::move(root_); break;
      case Field::kHistoryCursor: ev_->history_cursor = std::move(root_); break;
      default: break;
    }
    root_ = Json();
    return error.empty();
  }

  Event* ev_;
  int depth_ = 0;
  int skip_depth_ = 0;
  bool seen_root_ = false;
  std::string key_;
  Field field_ = Field::kUnknown;
  std::string pending_key_;
  Json root_;
  std::vector<Json*> stack_;
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

Json QuestionsToJson(const std::vector<InputQuestion>& qs) {
  Json arr = Json::array();
  for (const auto& q : qs) {
    Json o = Json::object();
    PutIf(o, "id", q.id);
    PutIf(o, "header", q.header);
    PutIf(o, "question", q.question);
    if (!q.options.empty()) {
      Json opts = Json::array();
      for (const auto& op : q.options) {
        Json oj = Json::object();
        PutIf(oj, "label", op.label);
        PutIf(oj, "description", op.description);
        opts.push_back(std::move(oj));
      }
      o["options"] = std::move(opts);
    }
    PutIf(o, "multiSelect", q.multi_select);
    PutIf(o, "secret", q.secret);
    arr.push_back(std::move(o));
  }
  return arr;
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

Result<Event> DecodeEvent(std::string_view line) {
  Event ev;
  EventSax sax(&ev);
  try {
    const bool ok = Json::sax_parse(line.begin(), line.end(), &sax, nlohmann::json::input_format_t::json, true);
    if (!ok || !sax.error.empty()) {
      return Fail(Errc::protocol_error, sax.error.empty() ? "invalid JSON" : sax.error);
    }
  } catch (const std::exception& e) {
    return Fail(Errc::protocol_error, std::string("invalid JSON: ") + e.what());
  }
  ev.line.assign(line.data(), line.size());
  return ev;
}

Json EventToJson(const Event& e) {
  Json j = Json::object();
  PutIf(j, "id", e.id);
  PutIf(j, "type", e.type);
  PutIf(j, "timestamp", e.timestamp);
  PutIf(j, "requestId", e.request_id);
  PutIf(j, "turnId", e.turn_id);
  PutIf(j, "text", e.text);
  PutIf(j, "revision", e.revision);
  PutIf(j, "status", e.status);
  PutIf(j, "sessionCommand", e.session_command);
  PutIf(j, "toolId", e.tool_id);
  PutIf(j, "toolName", e.tool_name);
  PutIf(j, "output", e.output);
  PutIf(j, "inputId", e.input_id);
  if (!e.questions.empty()) j["questions"] = QuestionsToJson(e.questions);
  PutIf(j, "diff", e.diff);
  PutIf(j, "firstEventId", e.first_event_id);
  PutIf(j, "lastEventId", e.last_event_id);
  PutIf(j, "journalId", e.journal_id);
  PutIf(j, "reset", e.reset);
  PutIf(j, "historyLimited", e.history_limited);
  PutIf(j, "historyPage", e.history_page);
  PutIf(j, "historyCursor", e.history_cursor);
  if (e.history_state) {
    const HistoryState& hs = *e.history_state;
    Json h = Json::object();
    PutIf(h, "activeTurnId", hs.active_turn_id);
    PutIf(h, "activeTurnStarted", hs.active_turn_started);
    PutIf(h, "turnInterrupting", hs.turn_interrupting);
    PutIf(h, "waitingForInput", hs.waiting_for_input);
    if (hs.pending_turn) {
      Json p = Json::object();
      PutIf(p, "turnId", hs.pending_turn->turn_id);
      PutIf(p, "text", hs.pending_turn->text);
      PutIf(p, "revision", hs.pending_turn->revision);
      h["pendingTurn"] = std::move(p);
    }
    PutIf(h, "fileDiff", hs.file_diff);
    j["historyState"] = std::move(h);
  }
  if (e.runtime) {
    const RuntimeStatus& rs = *e.runtime;
    Json r = rs.extra.is_object() ? rs.extra : Json::object();
    PutIf(r, "sessionName", rs.session_name);
    PutIf(r, "agentType", rs.agent_type);
    PutIf(r, "model", rs.model);
    PutIf(r, "workingDir", rs.working_dir);
    PutIf(r, "branch", rs.branch);
    if (rs.usage) {
      Json u = Json::object();
      PutIf(u, "inputTokens", rs.usage->input_tokens);
      PutIf(u, "outputTokens", rs.usage->output_tokens);
      PutIf(u, "totalTokens", rs.usage->total_tokens);
      PutIf(u, "contextTokens", rs.usage->context_tokens);
      PutIf(u, "contextWindow", rs.usage->context_window);
      r["usage"] = std::move(u);
    }
    j["runtime"] = std::move(r);
  }
  PutIf(j, "goal", e.goal);
  PutIf(j, "attachments", e.attachments);
  return j;
}

std::string EncodeEvent(const Event& e) { return Dump(EventToJson(e)); }

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
  std::string error;
  Reader rd(&error);
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
  if (auto it = j.find("historyCursor"); it != j.end()) r.history_cursor = *it;
  if (!error.empty()) return Fail(Errc::protocol_error, error);
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
