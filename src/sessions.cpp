// SessionClient and WaitReady: Kelos Sessions through KubeClient (PROTOCOL.md §5, DESIGN.md §5).
#include "sessionturn/sessions.hpp"

#include <thread>

#include "sessionturn/protocol.hpp"

namespace sessionturn {

using nlohmann::json;

namespace {

std::string StrAt(const json& obj, std::initializer_list<const char*> keys) {
  const json* cur = &obj;
  for (const char* k : keys) {
    if (!cur->is_object()) return {};
    auto it = cur->find(k);
    if (it == cur->end()) return {};
    cur = &*it;
  }
  return cur->is_string() ? cur->get<std::string>() : std::string();
}

std::map<std::string, std::string> StringMap(const json& obj) {
  std::map<std::string, std::string> out;
  if (!obj.is_object()) return out;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

std::string Describe(const Session& s) {
  std::string out = "phase " + (s.phase.empty() ? std::string("(none yet)") : s.phase);
  if (!s.message.empty()) out += ": " + s.message;
  return out;
}

}  // namespace

Result<Session> Session::FromJson(const json& object) {
  if (!object.is_object() || !object.contains("metadata") || !object["metadata"].is_object()) {
    return Fail(Errc::protocol_error, "a Session object without metadata");
  }
  Session s;
  const json& md = object["metadata"];
  s.name = StrAt(md, {"name"});
  s.namespace_name = StrAt(md, {"namespace"});
  s.uid = StrAt(md, {"uid"});
  s.resource_version = StrAt(md, {"resourceVersion"});
  s.labels = StringMap(md.value("labels", json::object()));
  s.annotations = StringMap(md.value("annotations", json::object()));
  s.phase = StrAt(object, {"status", "phase"});
  s.pod_name = StrAt(object, {"status", "podName"});
  s.message = StrAt(object, {"status", "message"});
  if (object.contains("spec") && object["spec"].is_object()) {
    auto it = object["spec"].find("suspend");
    s.suspend = it != object["spec"].end() && it->is_boolean() && it->get<bool>();
  }
  if (object.contains("status") && object["status"].is_object()) {
    const json& conds = object["status"].value("conditions", json::array());
    if (conds.is_array()) {
      for (const auto& c : conds) {
        if (c.is_object() && c.value("type", "") == "Ready" && c.value("status", "") != "True") {
          s.ready_reason = c.value("reason", "");
        }
      }
    }
  }
  auto ann = [&](std::string_view key) {
    auto it = s.annotations.find(std::string(key));
    return it == s.annotations.end() ? std::string() : it->second;
  };
  s.resume_request = ann(kIdleResumeRequestAnnotation);
  s.resume_acknowledgement = ann(kIdleResumeAckAnnotation);
  s.raw = object;
  return s;
}

bool Session::IsReady() const { return phase == "Ready" && !pod_name.empty(); }
bool Session::IsIdleSuspended() const {
  return phase == "Suspended" && !suspend && ready_reason == "IdlePolicyTriggered";
}
bool Session::IsOwnerSuspended() const { return suspend; }
bool Session::IsFailed() const { return phase == "Failed"; }

SessionClient::SessionClient(KubeClient& client, std::string namespace_name)
    : client_(&client), namespace_(namespace_name.empty() ? client.Config().Namespace() : std::move(namespace_name)) {}

std::string SessionClient::CollectionPath() const {
  return "/apis/" + std::string(kSessionApiVersion) + "/namespaces/" + UrlEncode(namespace_) + "/sessions";
}

std::string SessionClient::ObjectPath(const std::string& name) const { return CollectionPath() + "/" + UrlEncode(name); }

Result<Session> SessionClient::Get(const std::string& name) {
  auto j = client_->Get(ObjectPath(name));
  if (!j) return Fail(j.error());
  return Session::FromJson(*j);
}

Result<std::vector<Session>> SessionClient::List(const std::string& label_selector) {
  std::string path = CollectionPath();
  if (!label_selector.empty()) path += "?labelSelector=" + UrlEncode(label_selector);
  auto j = client_->Get(path);
  if (!j) return Fail(j.error());
  std::vector<Session> out;
  if (j->contains("items") && (*j)["items"].is_array()) {
    for (const auto& item : (*j)["items"]) {
      auto s = Session::FromJson(item);
      if (!s) return Fail(s.error());
      out.push_back(std::move(*s));
    }
  }
  return out;
}

Result<Session> SessionClient::Create(json object) {
  if (!object.is_object()) return Fail(Errc::invalid_argument, "Create: the Session must be a JSON object");
  object["apiVersion"] = kSessionApiVersion;
  object["kind"] = "Session";
  if (!object.contains("metadata") || !object["metadata"].is_object()) object["metadata"] = json::object();
  if (StrAt(object, {"metadata", "name"}).empty() && StrAt(object, {"metadata", "generateName"}).empty()) {
    return Fail(Errc::invalid_argument, "Create: the Session has no metadata.name");
  }
  object["metadata"]["namespace"] = namespace_;
  auto j = client_->Post(CollectionPath(), object);
  if (!j) return Fail(j.error());
  return Session::FromJson(*j);
}

Result<Session> SessionClient::CreateFromSpawner(const std::string& spawner, const std::string& name,
                                                 const std::map<std::string, std::string>& extra_annotations) {
  std::string path = "/apis/" + std::string(kSessionApiVersion) + "/namespaces/" + UrlEncode(namespace_) +
                     "/sessionspawners/" + UrlEncode(spawner);
  auto sp = client_->Get(path);
  if (!sp) return Fail(sp.error().code, "reading SessionSpawner " + namespace_ + "/" + spawner + ": " + sp.error().message,
                       sp.error().http_status);
  std::string uid = StrAt(*sp, {"metadata", "uid"});
  const json* tmpl = nullptr;
  if (sp->contains("spec") && (*sp)["spec"].is_object() && (*sp)["spec"].contains("sessionTemplate")) {
    tmpl = &(*sp)["spec"]["sessionTemplate"];
  }
  if (tmpl == nullptr || !tmpl->is_object()) {
    return Fail(Errc::invalid_argument, "SessionSpawner " + namespace_ + "/" + spawner + " has no spec.sessionTemplate");
  }
  json md = json::object();
  md["name"] = name;
  json tmd = tmpl->value("metadata", json::object());
  md["labels"] = tmd.is_object() && tmd.contains("labels") && tmd["labels"].is_object() ? tmd["labels"] : json::object();
  md["labels"][std::string(kSpawnerLabel)] = uid;
  md["annotations"] =
      tmd.is_object() && tmd.contains("annotations") && tmd["annotations"].is_object() ? tmd["annotations"] : json::object();
  for (const auto& [k, v] : extra_annotations) md["annotations"][k] = v;
  json object = {{"metadata", md}, {"spec", tmpl->value("spec", json::object())}};
  return Create(std::move(object));
}

Status SessionClient::Delete(const std::string& name) {
  auto j = client_->Delete(ObjectPath(name));
  if (!j) return Fail(j.error());
  return {};
}

Result<Session> SessionClient::Suspend(const std::string& name) {
  auto j = client_->Patch(ObjectPath(name), json{{"spec", {{"suspend", true}}}}, PatchType::merge);
  if (!j) return Fail(j.error());
  return Session::FromJson(*j);
}

Result<Session> SessionClient::Resume(const std::string& name) {
  auto j = client_->Patch(ObjectPath(name), json{{"spec", {{"suspend", nullptr}}}}, PatchType::merge);
  if (!j) return Fail(j.error());
  return Session::FromJson(*j);
}

Result<Session> SessionClient::GuardedPatch(const std::string& name,
                                            const std::function<std::optional<json>(const Session&)>& make_patch) {
  Error last;
  for (int attempt = 0; attempt < kConflictRetries; ++attempt) {
    auto current = Get(name);
    if (!current) return Fail(current.error());
    std::optional<json> patch = make_patch(*current);
    if (!patch) return current;
    (*patch)["metadata"]["resourceVersion"] = current->resource_version;
    auto j = client_->Patch(ObjectPath(name), *patch, PatchType::merge);
    if (j) return Session::FromJson(*j);
    if (j.error().code != Errc::conflict) return Fail(j.error());
    last = j.error();
  }
  return Fail(Errc::conflict, "Session " + namespace_ + "/" + name + " kept changing: " +
                                  std::to_string(kConflictRetries) + " attempts ended in conflict (" + last.message + ")",
              409);
}

Result<Session> SessionClient::Annotate(const std::string& name,
                                        const std::map<std::string, std::optional<std::string>>& annotations) {
  return GuardedPatch(name, [&](const Session&) -> std::optional<json> {
    json ann = json::object();
    for (const auto& [k, v] : annotations) ann[k] = v ? json(*v) : json(nullptr);
    return json{{"metadata", {{"annotations", ann}}}};
  });
}

Result<std::string> SessionClient::RequestIdleResume(const std::string& name) {
  std::string request = NewUuid();
  auto s = GuardedPatch(name, [&](const Session& cur) -> std::optional<json> {
    if (!cur.resume_request.empty()) return std::nullopt;  // one is already in flight
    json ann = {{std::string(kIdleResumeRequestAnnotation), request},
                {std::string(kIdleResumeRequestTimeAnnotation), nullptr},
                {std::string(kIdleResumeAckAnnotation), nullptr},
                {std::string(kIdleResumeAckTimeAnnotation), nullptr}};
    return json{{"metadata", {{"annotations", ann}}}};
  });
  if (!s) return Fail(s.error());
  return s->resume_request;
}

Status SessionClient::AcknowledgeResume(const std::string& name, const std::string& request) {
  if (request.empty()) return Fail(Errc::invalid_argument, "AcknowledgeResume: the request value is empty");
  auto s = GuardedPatch(name, [&](const Session& cur) -> std::optional<json> {
    if (cur.resume_acknowledgement == request && cur.annotations.count(std::string(kIdleResumeAckTimeAnnotation)) == 0) {
      return std::nullopt;
    }
    json ann = {{std::string(kIdleResumeAckAnnotation), request}, {std::string(kIdleResumeAckTimeAnnotation), nullptr}};
    return json{{"metadata", {{"annotations", ann}}}};
  });
  if (!s) return Fail(s.error());
  return {};
}

Status SessionClient::Watch(const KubeWatchOptions& options,
                            const std::function<bool(const std::string& type, const Session&)>& handler) {
  return client_->Watch(CollectionPath(), options, [&](const WatchEvent& ev) {
    if (ev.type == "BOOKMARK" || ev.type == "RELISTED") return true;
    auto s = Session::FromJson(ev.object);
    if (!s) return true;
    return handler(ev.type, *s);
  });
}

Result<ReadySession> SessionClient::WaitReady(const std::string& name, std::chrono::steady_clock::time_point deadline,
                                              const WaitReadyOptions& options) {
  using clock = std::chrono::steady_clock;
  const std::string who = "Session " + namespace_ + "/" + name;
  std::string resume_request;
  std::optional<Session> last_seen;
  std::optional<Result<ReadySession>> outcome;

  // Decides what one observation means; sets `outcome` when the wait is over.
  auto evaluate = [&](const Session& s) {
    last_seen = s;
    if (options.on_update) options.on_update(s);
    if (s.IsReady()) {
      ReadySession ready{s.pod_name, s, resume_request};
      if (ready.resume_request.empty() && !s.resume_request.empty() && s.resume_request != s.resume_acknowledgement) {
        ready.resume_request = s.resume_request;  // someone else's resume: acknowledging it is still ours to do
      }
      outcome = std::move(ready);
    } else if (s.IsFailed()) {
      outcome = Fail(Errc::failed, who + " failed" + (s.message.empty() ? "" : ": " + s.message));
    } else if (s.IsOwnerSuspended()) {
      outcome = Fail(Errc::unavailable, who + " is suspended by its owner (spec.suspend)" +
                                            (s.message.empty() ? "" : ": " + s.message));
    } else if (s.IsIdleSuspended() && resume_request.empty()) {
      if (!options.resume_idle) {
        outcome = Fail(Errc::unavailable, who + " is suspended by its idle policy and resume_idle is off");
        return;
      }
      auto r = RequestIdleResume(name);
      if (!r) {
        outcome = Fail(r.error().code, who + ": requesting an idle resume: " + r.error().message, r.error().http_status);
      } else {
        resume_request = *r;
      }
    }
  };
  auto timeout = [&] {
    return Fail(Errc::timeout, who + " was not ready by the deadline (" +
                                   (last_seen ? Describe(*last_seen) : std::string("not found")) + ")");
  };
  auto fatal = [](const Error& e) {
    return e.code == Errc::unauthorized || e.code == Errc::forbidden || e.code == Errc::would_block ||
           e.code == Errc::invalid_argument;
  };

  bool watching = true;
  while (!outcome) {
    if (clock::now() >= deadline) return timeout();
    if (watching) {
      KubeWatchOptions wo;
      wo.field_selector = "metadata.name=" + name;
      wo.deadline = deadline;
      auto st = client_->Watch(CollectionPath(), wo, [&](const WatchEvent& ev) {
        if (ev.type == "ADDED" || ev.type == "MODIFIED") {
          auto s = Session::FromJson(ev.object);
          if (s && s->name == name) evaluate(*s);
        } else if (ev.type == "DELETED") {
          last_seen.reset();  // gone again: keep waiting for it to reappear
        }
        return !outcome.has_value();
      });
      if (outcome) break;
      if (!st) {
        if (st.error().code == Errc::timeout) return timeout();
        if (fatal(st.error())) return Fail(st.error());
        watching = false;  // refused or dropped for good: poll from now on
      }
      continue;
    }
    auto s = Get(name);
    if (s) {
      evaluate(*s);
      if (outcome) break;
    } else if (s.error().code != Errc::not_found && fatal(s.error())) {
      return Fail(s.error());
    }
    auto left = deadline - clock::now();
    if (left <= clock::duration::zero()) return timeout();
    std::this_thread::sleep_for(std::min<clock::duration>(left, options.poll_interval));
  }
  return std::move(*outcome);
}

}  // namespace sessionturn
