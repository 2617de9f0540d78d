// The event encoder: one line per event, byte for byte what the runtime's Go encoder writes (keys in
// the Go structs' field order, Go's omitempty rules, Go's string escaping). The local runtime sends
// these bytes, so a client tested against it sees the real runtime's lines.
#include <charconv>

#include "event_encode.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn {
namespace {

void AppendInt(std::string& out, std::int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

namespace detail {

std::size_t GoRuneLen(std::string_view s, std::size_t i, char32_t* cp) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  // The second byte's range depends on the first (Go's utf8 "accept ranges"); later bytes are 80..BF.
  unsigned char lo = 0x80, hi = 0xBF;
  std::size_t len = 0;
  char32_t v = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    v = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    v = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  return len;
}

void AppendGoJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t start = 0;
  std::size_t i = 0;
  auto flush = [&] { out.append(s.data() + start, i - start); };
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if (b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&') {
        ++i;
        continue;
      }
      flush();
      switch (b) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          out += "\\u00";
          out.push_back(kHex[b >> 4]);
          out.push_back(kHex[b & 0xF]);
      }
      start = ++i;
      continue;
    }
    char32_t cp = 0;
    const std::size_t n = GoRuneLen(s, i, &cp);
    if (n == 0) {
      flush();
      out += "\\ufffd";
      start = ++i;
      continue;
    }
    if (cp == 0x2028 || cp == 0x2029) {
      flush();
      out += cp == 0x2028 ? "\\u2028" : "\\u2029";
      i += n;
      start = i;
      continue;
    }
    i += n;
  }
  flush();
  out.push_back('"');
}

void AppendGoJsonValue(std::string& out, const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      out += "null";
      return;
    case Json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::string:
      AppendGoJsonString(out, v.get_ref<const std::string&>());
      return;
    case Json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& e : v) {
        if (!first) out.push_back(',');
        first = false;
        AppendGoJsonValue(out, e);
      }
      out.push_back(']');
      return;
    }
    case Json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out.push_back(',');
        first = false;
        AppendGoJsonString(out, it.key());
        out.push_back(':');
        AppendGoJsonValue(out, it.value());
      }
      out.push_back('}');
      return;
    }
    default:  // numbers and binary: nlohmann's shortest round-trip form
      out += v.dump(-1, ' ', false, Json::error_handler_t::replace);
      return;
  }
}

}  // namespace detail

namespace {

using detail::AppendGoJsonString;
using detail::AppendGoJsonValue;

// Writes one JSON object: fields in call order, a comma before all but the first.
class ObjectWriter {
 public:
  explicit ObjectWriter(std::string& out) : out_(out) { out_.push_back('{'); }
  void End() { out_.push_back('}'); }

  std::string& Key(std::string_view k) {
    if (!first_) out_.push_back(',');
    first_ = false;
    out_.push_back('"');
    out_.append(k);  // our keys are plain ASCII names
    out_ += "\":";
    return out_;
  }
  // A key that came from data (unknown fields kept as JSON): escaped.
  std::string& EscapedKey(std::string_view k) {
    if (!first_) out_.push_back(',');
    first_ = false;
    AppendGoJsonString(out_, k);
    out_.push_back(':');
    return out_;
  }
  // Go's `omitempty` forms, and the always-present forms for fields without it.
  void Str(std::string_view k, std::string_view v) {
    if (!v.empty()) AlwaysStr(k, v);
  }
  void AlwaysStr(std::string_view k, std::string_view v) { AppendGoJsonString(Key(k), v); }
  void Int(std::string_view k, std::int64_t v) {
    if (v != 0) AlwaysInt(k, v);
  }
  void AlwaysInt(std::string_view k, std::int64_t v) { AppendInt(Key(k), v); }
  void Bool(std::string_view k, bool v) {
    if (v) Key(k) += "true";
  }
  // A value kept as JSON: omitted when null (or an empty string, which Go's string fields omit).
  void Value(std::string_view k, const Json& v) {
    if (v.is_null() || v.is_discarded() || (v.is_string() && v.get_ref<const std::string&>().empty())) return;
    AppendGoJsonValue(Key(k), v);
  }

 private:
  std::string& out_;
  bool first_ = true;
};

bool IsEmptyJson(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded: return true;
    case Json::value_t::boolean: return !v.get<bool>();
    case Json::value_t::string: return v.get_ref<const std::string&>().empty();
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return v == 0;
    case Json::value_t::array:
    case Json::value_t::object: return v.empty();
    default: return false;
  }
}

// Keys of `obj` not in `known`, in byte order (where Go would have had no field for them).
template <std::size_t N>
void AppendUnknown(ObjectWriter& w, const Json& obj, const std::string_view (&known)[N]) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool is_known = false;
    for (auto k : known) is_known = is_known || it.key() == k;
    if (is_known) continue;
    AppendGoJsonValue(w.EscapedKey(it.key()), it.value());
  }
}

const Json* Member(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string StrMember(const Json& obj, const char* key) {
  const Json* v = Member(obj, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// Go's Goal struct: objective and status always, tokenBudget when set (a pointer), the rest omitempty.
void AppendGoal(std::string& out, const Json& g) {
  if (!g.is_object()) return AppendGoJsonValue(out, g);
  static constexpr std::string_view kKnown[] = {"objective", "status", "tokenBudget", "tokensUsed", "timeUsedSeconds"};
  ObjectWriter w(out);
  for (const char* k : {"objective", "status"}) {
    const Json* v = Member(g, k);
    if (v && !v->is_string() && !v->is_null()) AppendGoJsonValue(w.Key(k), *v);
    else w.AlwaysStr(k, StrMember(g, k));
  }
  if (const Json* v = Member(g, "tokenBudget"); v && !v->is_null()) AppendGoJsonValue(w.Key("tokenBudget"), *v);
  for (const char* k : {"tokensUsed", "timeUsedSeconds"})
    if (const Json* v = Member(g, k); v && !IsEmptyJson(*v)) AppendGoJsonValue(w.Key(k), *v);
  AppendUnknown(w, g, kKnown);
  w.End();
}

// Go's []Attachment: every field of each element always present.
void AppendAttachments(std::string& out, const Json& a) {
  if (!a.is_array()) return AppendGoJsonValue(out, a);
  static constexpr std::string_view kKnown[] = {"id", "name", "mediaType", "sizeBytes"};
  out.push_back('[');
  bool first = true;
  for (const auto& e : a) {
    if (!first) out.push_back(',');
    first = false;
    if (!e.is_object()) {
      AppendGoJsonValue(out, e);
      continue;
    }
    ObjectWriter w(out);
    for (const char* k : {"id", "name", "mediaType"}) {
      const Json* v = Member(e, k);
      if (v && !v->is_string() && !v->is_null()) AppendGoJsonValue(w.Key(k), *v);
      else w.AlwaysStr(k, StrMember(e, k));
    }
    if (const Json* v = Member(e, "sizeBytes"); v && !v->is_null()) AppendGoJsonValue(w.Key("sizeBytes"), *v);
    else w.AlwaysInt("sizeBytes", 0);
    AppendUnknown(w, e, kKnown);
    w.End();
  }
  out.push_back(']');
}

void AppendQuestions(std::string& out, const std::vector<InputQuestion>& qs) {
  out.push_back('[');
  bool first = true;
  for (const auto& q : qs) {
    if (!first) out.push_back(',');
    first = false;
    ObjectWriter w(out);
    w.AlwaysStr("id", q.id);
    w.Str("header", q.header);
    w.AlwaysStr("question", q.question);
    if (!q.options.empty()) {
      std::string& o = w.Key("options");
      o.push_back('[');
      bool first_opt = true;
      for (const auto& op : q.options) {
        if (!first_opt) o.push_back(',');
        first_opt = false;
        ObjectWriter ow(o);
        ow.AlwaysStr("label", op.label);
        ow.Str("description", op.description);
        ow.End();
      }
      o.push_back(']');
    }
    w.Bool("multiSelect", q.multi_select);
    w.Bool("secret", q.secret);
    w.End();
  }
  out.push_back(']');
}

void AppendHistoryState(std::string& out, const HistoryState& hs) {
  ObjectWriter w(out);
  w.Str("activeTurnId", hs.active_turn_id);
  w.Str("activeTurnStarted", hs.active_turn_started);
  w.Bool("turnInterrupting", hs.turn_interrupting);
  w.Bool("waitingForInput", hs.waiting_for_input);
  if (hs.pending_turn) {
    ObjectWriter p(w.Key("pendingTurn"));
    p.AlwaysStr("turnId", hs.pending_turn->turn_id);
    p.AlwaysStr("text", hs.pending_turn->text);
    p.AlwaysInt("revision", hs.pending_turn->revision);
    p.End();
  }
  w.Value("fileDiff", hs.file_diff);
  w.End();
}

// Go's RuntimeStatus order: sessionName, agentType, model, effort, workingDir, homeDir, branch,
// pullRequestNumber, usage, weeklyLimit (all omitempty). The fields we do not model come from `extra`;
// keys Go has no field for follow in byte order.
void AppendRuntime(std::string& out, const RuntimeStatus& rs) {
  static constexpr std::string_view kKnown[] = {"sessionName", "agentType", "model",  "effort",
                                                "workingDir",  "homeDir",   "branch", "pullRequestNumber",
                                                "usage",       "weeklyLimit"};
  const Json& extra = rs.extra.is_object() ? rs.extra : Json::object();
  ObjectWriter w(out);
  auto from_extra = [&](const char* k) {
    if (const Json* v = Member(extra, k); v && !IsEmptyJson(*v)) {
      if (std::string_view(k) == "weeklyLimit" && v->is_object()) {
        ObjectWriter lw(w.Key(k));
        const Json* used = Member(*v, "usedPercent");
        if (used && !used->is_null()) AppendGoJsonValue(lw.Key("usedPercent"), *used);
        else lw.AlwaysInt("usedPercent", 0);
        static constexpr std::string_view kLimitKnown[] = {"usedPercent"};
        AppendUnknown(lw, *v, kLimitKnown);
        lw.End();
      } else {
        AppendGoJsonValue(w.Key(k), *v);
      }
    }
  };
  w.Str("sessionName", rs.session_name);
  w.Str("agentType", rs.agent_type);
  w.Str("model", rs.model);
  from_extra("effort");
  w.Str("workingDir", rs.working_dir);
  w.Str("homeDir", rs.home_dir);
  w.Str("branch", rs.branch);
  from_extra("pullRequestNumber");
  if (rs.usage) {
    ObjectWriter u(w.Key("usage"));
    u.AlwaysInt("inputTokens", rs.usage->input_tokens);
    u.AlwaysInt("outputTokens", rs.usage->output_tokens);
    u.AlwaysInt("totalTokens", rs.usage->total_tokens);
    u.Int("contextTokens", rs.usage->context_tokens);
    u.Int("contextWindow", rs.usage->context_window);
    u.End();
  }
  from_extra("weeklyLimit");
  AppendUnknown(w, extra, kKnown);
  w.End();
}

}  // namespace

std::string EncodeEvent(const Event& e) {
  std::string out;
  out.reserve(96 + e.text.size() + e.output.size());
  ObjectWriter w(out);
  w.Int("id", e.id);
  w.AlwaysStr("type", e.type);
  w.Str("timestamp", e.timestamp);
  w.Str("requestId", e.request_id);
  w.Str("turnId", e.turn_id);
  w.Str("text", e.text);
  w.Int("revision", e.revision);
  w.Bool("sessionCommand", e.session_command);
  w.Str("toolId", e.tool_id);
  w.Str("toolName", e.tool_name);
  w.Str("output", e.output);
  w.Str("status", e.status);
  w.Str("inputId", e.input_id);
  if (!e.questions.empty()) AppendQuestions(w.Key("questions"), e.questions);
  w.Value("diff", e.diff);
  w.Int("firstEventId", e.first_event_id);
  w.Int("lastEventId", e.last_event_id);
  w.Str("journalId", e.journal_id);
  w.Bool("reset", e.reset);
  w.Bool("historyLimited", e.history_limited);
  w.Bool("historyPage", e.history_page);
  w.Str("historyCursor", e.history_cursor);
  if (e.history_state) AppendHistoryState(w.Key("historyState"), *e.history_state);
  if (e.runtime) AppendRuntime(w.Key("runtime"), *e.runtime);
  if (!e.goal.is_null() && !e.goal.is_discarded()) AppendGoal(w.Key("goal"), e.goal);
  if (!IsEmptyJson(e.attachments)) AppendAttachments(w.Key("attachments"), e.attachments);
  w.End();
  return out;
}

Json EventToJson(const Event& e) {
  // The encoder is the single source of truth for which fields an event carries.
  Json j = Json::parse(EncodeEvent(e), nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? Json::object() : j;
}

}  // namespace sessionturn
