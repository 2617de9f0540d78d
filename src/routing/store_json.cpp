// The store's JSON columns (store_json.hpp).
#include "routing/store_json.hpp"

#include <chrono>
#include <optional>

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

Json InboundMessageToJson(const InboundMessage& m) {
  const auto received = std::chrono::duration_cast<std::chrono::milliseconds>(m.received.time_since_epoch());
  return Json{{"platform", m.platform},
              {"workspace", m.workspace},
              {"chat", m.chat},
              {"thread", m.thread},
              {"message_id", m.message_id},
              {"reply_to_message_id", m.reply_to_message_id},
              {"author_id", m.author_id},
              {"author_name", m.author_name},
              {"text", m.text},
              {"attachments_text", m.attachments_text},
              {"is_bot", m.is_bot},
              {"is_self", m.is_self},
              {"mentions_bot", m.mentions_bot},
              {"is_private_chat", m.is_private_chat},
              {"event_id", m.event_id},
              {"received_ms", received.count()},
              {"kind", KindName(m.kind)}};
}

Result<InboundMessage> InboundMessageFromJson(const Json& j) {
  if (!j.is_object()) return Fail(Errc::invalid_argument, "a stored message is not a JSON object");
  InboundMessage m;
  Fields f(j, "a stored message");
  f.Str("platform", m.platform);
  f.Str("workspace", m.workspace);
  f.Str("chat", m.chat);
  f.Str("thread", m.thread);
  f.Str("message_id", m.message_id);
  f.Str("reply_to_message_id", m.reply_to_message_id);
  f.Str("author_id", m.author_id);
  f.Str("author_name", m.author_name);
  f.Str("text", m.text);
  f.Bool("is_bot", m.is_bot);
  f.Bool("is_self", m.is_self);
  f.Bool("mentions_bot", m.mentions_bot);
  f.Bool("is_private_chat", m.is_private_chat);
  f.Str("event_id", m.event_id);
  std::int64_t received_ms = 0;
  f.Int("received_ms", received_ms);
  m.received = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::milliseconds(received_ms)));
  std::string kind = "new";
  f.Str("kind", kind);
  if (auto k = KindFrom(kind)) {
    m.kind = *k;
  } else {
    f.Mismatch("\"kind\" is \"" + kind + "\", not new, edited or deleted");
  }
  const Json* attachments = f.Array("attachments_text");
  if (auto st = f.Done(); !st) return Fail(st.error());
  auto texts = StringList(attachments, "a stored message's attachments_text");
  if (!texts) return Fail(texts.error());
  m.attachments_text = std::move(*texts);
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
