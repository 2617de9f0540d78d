// The store's JSON columns (store_json.hpp).
#include "routing/store_json.hpp"

#include <simdjson.h>

#include <chrono>
#include <optional>

#include "event_encode.hpp"

namespace sessionturn::routing {
namespace {

// The stored names, fixed here rather than taken from ToString(MessageKind): what is on disk must not
// change when a display name does.
constexpr std::pair<MessageKind, std::string_view> kKinds[] = {
    {MessageKind::new_message, "new"}, {MessageKind::edited, "edited"}, {MessageKind::deleted, "deleted"}};

std::string_view KindName(MessageKind kind) {
  for (const auto& [k, name] : kKinds)
    if (k == kind) return name;
  return "new";
}

std::optional<MessageKind> KindFrom(std::string_view name) {
  for (const auto& [k, n] : kKinds)
    if (n == name) return k;
  return std::nullopt;
}

// Reads fields of one object, remembering the first that has the wrong type.
class Fields {
 public:
  Fields(const Json& j, std::string_view what) : j_(j), what_(what) {}

  void Str(const char* key, std::string& out) {
    if (const Json* v = Get(key, &Json::is_string, "a string")) out = v->get<std::string>();
  }
  void Bool(const char* key, bool& out) {
    if (const Json* v = Get(key, &Json::is_boolean, "a boolean")) out = v->get<bool>();
  }
  void Int(const char* key, std::int64_t& out) {
    if (const Json* v = Get(key, &Json::is_number_integer, "an integer")) out = v->get<std::int64_t>();
  }
  const Json* Array(const char* key) { return Get(key, &Json::is_array, "an array"); }

  Status Done() const {
    if (error_.empty()) return {};
    return Fail(Errc::invalid_argument, error_);
  }
  void Mismatch(const std::string& why) {
    if (error_.empty()) error_ = std::string(what_) + ": " + why;
  }

 private:
  const Json* Get(const char* key, bool (Json::*is)() const noexcept, const char* expected) {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    if (!((*it).*is)()) {
      Mismatch(std::string("\"") + key + "\" is not " + expected);
      return nullptr;
    }
    return &*it;
  }

  const Json& j_;
  std::string_view what_;
  std::string error_;
};

Result<std::vector<std::string>> StringList(const Json* arr, std::string_view what) {
  std::vector<std::string> out;
  if (!arr) return out;
  out.reserve(arr->size());
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const Json& s = (*arr)[i];
    if (!s.is_string())
      return Fail(Errc::invalid_argument, std::string(what) + "[" + std::to_string(i) + "] is not a string");
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

// Written and read by hand: a message is stored on every intake and read back when its turn begins,
// and nlohmann's tree for it cost more than the rest of the intake (issue 11's bench).
std::string InboundMessageToJsonText(const InboundMessage& m, const RowFields* row) {
  using detail::AppendGoJsonString;
  std::string out;
  out.reserve(128 + m.text.size() + m.author_name.size());
  auto str = [&](std::string_view key, std::string_view value) {
    out += out.empty() ? '{' : ',';
    out += '"';
    out += key;
    out += "\":";
    AppendGoJsonString(out, value);
  };
  // Left out when the row holds it; an empty value its column does not hold is written.
  auto column = [&](std::string_view key, std::string_view value, std::string_view in_row) {
    if (row == nullptr ? !value.empty() : value != in_row) str(key, value);
  };
  auto unless_empty = [&](std::string_view key, std::string_view value) {
    if (!value.empty()) str(key, value);
  };
  auto flag = [&](std::string_view key, bool value) {
    if (!value) return;
    out += out.empty() ? '{' : ',';
    out += '"';
    out += key;
    out += "\":true";
  };
  str("message_id", m.message_id);
  column("platform", m.platform, row ? row->platform : "");
  column("workspace", m.workspace, row ? row->workspace : "");
  column("chat", m.chat, row ? row->chat : "");
  column("thread", m.thread, row ? row->thread : "");
  column("author_id", m.author_id, row ? row->author_id : "");
  unless_empty("reply_to_message_id", m.reply_to_message_id);
  unless_empty("author_name", m.author_name);
  str("text", m.text);
  if (!m.attachments_text.empty()) {
    out += ",\"attachments_text\":[";
    for (std::size_t i = 0; i < m.attachments_text.size(); ++i) {
      if (i > 0) out += ',';
      AppendGoJsonString(out, m.attachments_text[i]);
    }
    out += ']';
  }
  flag("is_bot", m.is_bot);
  flag("is_self", m.is_self);
  flag("mentions_bot", m.mentions_bot);
  flag("is_private_chat", m.is_private_chat);
  unless_empty("event_id", m.event_id);
  const auto received = std::chrono::duration_cast<std::chrono::milliseconds>(m.received.time_since_epoch());
  out += ",\"received_ms\":";
  out += std::to_string(received.count());
  if (m.kind != MessageKind::new_message) str("kind", KindName(m.kind));
  out += '}';
  return out;
}

Result<InboundMessage> InboundMessageFromJsonText(std::string_view text, const RowFields* row) {
  namespace sj = simdjson::dom;
  // A parser keeps the capacity of the largest text it read: one per thread for the usual message,
  // and one of its own for an outsized one, so that one 4 MB message does not hold 4 MB for good.
  constexpr std::size_t kKeptCapacity = 64 * 1024;
  thread_local sj::parser kept;
  std::optional<sj::parser> outsized;
  sj::parser& parser = text.size() <= kKeptCapacity ? kept : outsized.emplace();
  sj::element root;
  if (auto err = parser.parse(text.data(), text.size()).get(root); err)
    return Fail(Errc::invalid_argument, std::string("not valid JSON: ") + simdjson::error_message(err));
  sj::object obj;
  if (root.get(obj) != simdjson::SUCCESS) return Fail(Errc::invalid_argument, "a stored message is not a JSON object");
  InboundMessage m;
  if (row != nullptr) {
    m.platform = row->platform;
    m.workspace = row->workspace;
    m.chat = row->chat;
    m.thread = row->thread;
    m.author_id = row->author_id;
  }
  std::string error;
  auto mismatch = [&](std::string_view key, const char* expected) {
    if (error.empty()) error = "a stored message: \"" + std::string(key) + "\" is not " + expected;
  };
  // Absent and null fields keep their defaults (a row written before a field existed).
  auto str = [&](std::string_view key, sj::element v, std::string& out) {
    std::string_view sv;
    if (v.get(sv) == simdjson::SUCCESS) {
      out.assign(sv);
    } else if (!v.is_null()) {
      mismatch(key, "a string");
    }
  };
  auto flag = [&](std::string_view key, sj::element v, bool& out) {
    if (v.get(out) != simdjson::SUCCESS && !v.is_null()) mismatch(key, "a boolean");
  };
  std::string kind = "new";
  for (sj::key_value_pair field : obj) {
    const std::string_view k = field.key;
    const sj::element v = field.value;
    if (k == "platform") str(k, v, m.platform);
    else if (k == "workspace") str(k, v, m.workspace);
    else if (k == "chat") str(k, v, m.chat);
    else if (k == "thread") str(k, v, m.thread);
    else if (k == "message_id") str(k, v, m.message_id);
    else if (k == "reply_to_message_id") str(k, v, m.reply_to_message_id);
    else if (k == "author_id") str(k, v, m.author_id);
    else if (k == "author_name") str(k, v, m.author_name);
    else if (k == "text") str(k, v, m.text);
    else if (k == "event_id") str(k, v, m.event_id);
    else if (k == "kind") str(k, v, kind);
    else if (k == "is_bot") flag(k, v, m.is_bot);
    else if (k == "is_self") flag(k, v, m.is_self);
    else if (k == "mentions_bot") flag(k, v, m.mentions_bot);
    else if (k == "is_private_chat") flag(k, v, m.is_private_chat);
    else if (k == "received_ms") {
      // Past what the clock holds (about ±292 years at nanosecond ticks) the cast would overflow.
      using Clock = std::chrono::system_clock;
      constexpr auto kMaxMs = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::duration::max()).count();
      std::int64_t ms = 0;
      if (v.get(ms) == simdjson::SUCCESS && ms >= -kMaxMs && ms <= kMaxMs) {
        m.received = Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(ms)));
      } else if (!v.is_null()) {
        mismatch(k, "an integer of milliseconds the clock can hold");
      }
    } else if (k == "attachments_text") {
      sj::array arr;
      if (v.get(arr) != simdjson::SUCCESS) {
        if (!v.is_null()) mismatch(k, "an array");
        continue;
      }
      std::size_t i = 0;
      for (sj::element item : arr) {
        std::string_view sv;
        if (item.get(sv) != simdjson::SUCCESS) {
          if (error.empty())
            error = "a stored message's attachments_text[" + std::to_string(i) + "] is not a string";
          break;
        }
        m.attachments_text.emplace_back(sv);
        ++i;
      }
    }
  }
  if (error.empty()) {
    if (auto k = KindFrom(kind)) {
      m.kind = *k;
    } else {
      error = "a stored message: \"kind\" is \"" + kind + "\", not new, edited or deleted";
    }
  }
  if (!error.empty()) return Fail(Errc::invalid_argument, error);
  return m;
}

Json QuestionsToJson(const std::vector<InputQuestion>& questions) {
  Json out = Json::array();
  for (const InputQuestion& q : questions) {
    Json options = Json::array();
    for (const InputOption& o : q.options) options.push_back(Json{{"label", o.label}, {"description", o.description}});
    out.push_back(Json{{"id", q.id},
                       {"header", q.header},
                       {"question", q.question},
                       {"options", std::move(options)},
                       {"multiSelect", q.multi_select},
                       {"secret", q.secret}});
  }
  return out;
}

Result<std::vector<InputQuestion>> QuestionsFromJson(const Json& j) {
  if (!j.is_array()) return Fail(Errc::invalid_argument, "stored questions are not a JSON array");
  std::vector<InputQuestion> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string what = "stored question " + std::to_string(i);
    if (!j[i].is_object()) return Fail(Errc::invalid_argument, what + " is not a JSON object");
    InputQuestion q;
    Fields f(j[i], what);
    f.Str("id", q.id);
    f.Str("header", q.header);
    f.Str("question", q.question);
    f.Bool("multiSelect", q.multi_select);
    f.Bool("secret", q.secret);
    const Json* options = f.Array("options");
    if (auto st = f.Done(); !st) return Fail(st.error());
    for (std::size_t k = 0; options && k < options->size(); ++k) {
      const std::string owhat = what + " option " + std::to_string(k);
      if (!(*options)[k].is_object()) return Fail(Errc::invalid_argument, owhat + " is not a JSON object");
      InputOption o;
      Fields of((*options)[k], owhat);
      of.Str("label", o.label);
      of.Str("description", o.description);
      if (auto st = of.Done(); !st) return Fail(st.error());
      q.options.push_back(std::move(o));
    }
    out.push_back(std::move(q));
  }
  return out;
}

Json StringsToJson(const std::vector<std::string>& strings) {
  return Json(strings);
}

Result<std::vector<std::string>> StringsFromJson(const Json& j) {
  if (!j.is_array()) return Fail(Errc::invalid_argument, "stored parts are not a JSON array");
  return StringList(&j, "stored parts");
}

std::string DumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<Json> ParseJson(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail(Errc::invalid_argument, "not valid JSON");
  return j;
}

}  // namespace sessionturn::routing
