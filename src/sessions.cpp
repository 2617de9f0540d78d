// SessionClient and WaitReady: Kelos Sessions through KubeClient (PROTOCOL.md §5, DESIGN.md §5).
#include "sessionturn/sessions.hpp"

#include "blocking.hpp"
#include "json_fields.hpp"
#include "kube/kube_util.hpp"
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

// The string members of obj[key] (labels, annotations); others are left out.
std::map<std::string, std::string> StringMap(const json& obj, const char* key) {
  std::map<std::string, std::string> out;
  const json* map = json_fields::Object(obj, key);
  if (map == nullptr) return out;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
  }
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
  s.labels = StringMap(md, "labels");
  s.annotations = StringMap(md, "annotations");
  s.phase = StrAt(object, {"status", "phase"});
  s.pod_name = StrAt(object, {"status", "podName"});
  s.message = StrAt(object, {"status", "message"});
  if (const json* spec = json_fields::Object(object, "spec")) {
    s.suspend = json_fields::Bool(*spec, "suspend").value_or(false);
  }
  if (const json* status = json_fields::Object(object, "status")) {
    if (const json* conds = json_fields::Array(*status, "conditions")) {
      for (const auto& c : *conds) {
        if (json_fields::String(c, "type") == "Ready" && json_fields::String(c, "status") != "True") {
          s.ready_reason = json_fields::String(c, "reason");
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

long long Session::Created() const {
  auto t = kube_internal::ParseRfc3339(StrAt(raw, {"metadata", "creationTimestamp"}));
  return t ? *t : 0;
}

long long Session::LastActivity() const {
  auto t = kube_internal::ParseRfc3339(StrAt(raw, {"status", "lastActivityTime"}));
  return t ? *t : Created();
}

SessionClient::SessionClient(KubeClient& client, std::string namespace_name)
    : client_(&client), namespace_(namespace_name.empty() ? client.Config().Namespace() : std::move(namespace_name)) {}

std::string SessionClient::CollectionPath() const {
  return "/apis/" + std::string(kSessionApiVersion) + "/namespaces/" + UrlEncode(namespace_) + "/sessions";
}

std::string SessionClient::ObjectPath(const std::string& name) const { return CollectionPath() + "/" + UrlEncode(name); }

namespace {

// A Session (or the error) from an API answer.
SessionHandler<nlohmann::json> ToSession(SessionHandler<Session> handler) {
  return [handler = std::move(handler)](Result<json> j) {
    if (!j) return handler(Fail(j.error()));
    handler(Session::FromJson(*j));
  };
}

SessionHandler<nlohmann::json> ToStatus(SessionStatusHandler handler) {
  return [handler = std::move(handler)](Result<json> j) {
    if (!j) return handler(Fail(j.error()));
    handler(Status{});
  };
}

// The blocking forms: one API call or a few (a guarded patch re-reads up to kConflictRetries
// times), each bounded by the client's request_timeout; this bound only matters when something is
// badly wrong.
constexpr std::chrono::milliseconds kBlockingBound = std::chrono::minutes(10);

template <typename T, typename Start>
Result<T> Block(KubeClient& client, const char* what, Start&& start) {
  return blocking::Call<T>(client.context(), kBlockingBound, what, std::forward<Start>(start));
}

}  // namespace

void SessionClient::AsyncGet(const std::string& name, SessionHandler<Session> handler) {
  client_->AsyncGet(ObjectPath(name), ToSession(std::move(handler)));
}

void SessionClient::AsyncList(const std::string& label_selector, SessionHandler<std::vector<Session>> handler) {
  std::string path = CollectionPath();
  if (!label_selector.empty()) path += "?labelSelector=" + UrlEncode(label_selector);
  client_->AsyncGet(path, [handler = std::move(handler)](Result<json> j) {
    if (!j) return handler(Fail(j.error()));
    std::vector<Session> out;
    if (j->contains("items") && (*j)["items"].is_array()) {
      for (const auto& item : (*j)["items"]) {
        auto s = Session::FromJson(item);
        if (!s) return handler(Fail(s.error()));
        out.push_back(std::move(*s));
      }
    }
    handler(std::move(out));
  });
}

void SessionClient::AsyncCreate(json object, SessionHandler<Session> handler) {
  auto refuse = [&](const std::string& why) {
    blocking::ReportNow(client_->context(), std::move(handler), Result<Session>(Fail(Errc::invalid_argument, why)));
  };
  if (!object.is_object()) return refuse("Create: the Session must be a JSON object");
  object["apiVersion"] = kSessionApiVersion;
  object["kind"] = "Session";
  if (!object.contains("metadata") || !object["metadata"].is_object()) object["metadata"] = json::object();
  if (StrAt(object, {"metadata", "name"}).empty() && StrAt(object, {"metadata", "generateName"}).empty()) {
    return refuse("Create: the Session has no metadata.name");
  }
  object["metadata"]["namespace"] = namespace_;
  client_->AsyncPost(CollectionPath(), std::move(object), ToSession(std::move(handler)));
}

void SessionClient::AsyncSpawnerSession(const std::string& spawner, const std::string& name,
                                        std::map<std::string, std::string> extra_annotations,
                                        SessionHandler<json> handler) {
  std::string path = "/apis/" + std::string(kSessionApiVersion) + "/namespaces/" + UrlEncode(namespace_) +
                     "/sessionspawners/" + UrlEncode(spawner);
  std::string where = "SessionSpawner " + namespace_ + "/" + spawner;
  client_->AsyncGet(path, [handler = std::move(handler), where, spawner, name,
                           extra = std::move(extra_annotations)](Result<json> sp) {
    if (!sp) {
      return handler(Fail(sp.error().code, "reading " + where + ": " + sp.error().message, sp.error().http_status));
    }
    std::string uid = StrAt(*sp, {"metadata", "uid"});
    const json* tmpl = nullptr;
    if (sp->contains("spec") && (*sp)["spec"].is_object() && (*sp)["spec"].contains("sessionTemplate")) {
      tmpl = &(*sp)["spec"]["sessionTemplate"];
    }
    if (tmpl == nullptr || !tmpl->is_object()) {
      return handler(Fail(Errc::invalid_argument, where + " has no spec.sessionTemplate"));
    }
    if (uid.empty()) return handler(Fail(Errc::protocol_error, where + " has no metadata.uid"));
    json md = json::object();
    md["name"] = name;
    json tmd = tmpl->value("metadata", json::object());
    md["labels"] = tmd.is_object() && tmd.contains("labels") && tmd["labels"].is_object() ? tmd["labels"] : json::object();
    md["labels"][std::string(kSpawnerLabel)] = uid;
    md["annotations"] = tmd.is_object() && tmd.contains("annotations") && tmd["annotations"].is_object()
                            ? tmd["annotations"]
                            : json::object();
    for (const auto& [k, v] : extra) md["annotations"][k] = v;
    md["ownerReferences"] = json::array({{{"apiVersion", std::string(kSessionApiVersion)},
                                          {"kind", "SessionSpawner"},
                                          {"name", spawner},
                                          {"uid", uid},
                                          {"controller", true},
                                          {"blockOwnerDeletion", true}}});
    handler(json{{"metadata", md}, {"spec", tmpl->value("spec", json::object())}});
  });
}

void SessionClient::AsyncCreateFromSpawner(const std::string& spawner, const std::string& name,
                                           std::map<std::string, std::string> extra_annotations,
                                           SessionHandler<Session> handler) {
  KubeClient* client = client_;
  std::string ns = namespace_;
  AsyncSpawnerSession(spawner, name, std::move(extra_annotations),
                      [client, ns, handler = std::move(handler)](Result<json> object) mutable {
                        if (!object) return handler(Fail(object.error()));
                        SessionClient(*client, ns).AsyncCreate(std::move(*object), std::move(handler));
                      });
}

void SessionClient::AsyncDelete(const std::string& name, SessionStatusHandler handler) {
  client_->AsyncDelete(ObjectPath(name), ToStatus(std::move(handler)));
}

void SessionClient::AsyncSuspend(const std::string& name, SessionHandler<Session> handler) {
  client_->AsyncPatch(ObjectPath(name), json{{"spec", {{"suspend", true}}}}, PatchType::merge,
                      ToSession(std::move(handler)));
}

void SessionClient::AsyncResume(const std::string& name, SessionHandler<Session> handler) {
  client_->AsyncPatch(ObjectPath(name), json{{"spec", {{"suspend", nullptr}}}}, PatchType::merge,
                      ToSession(std::move(handler)));
}

namespace {

// One guarded patch: read, make the patch, apply it under the read's resourceVersion; on 409 again,
// up to kConflictRetries attempts.
struct GuardedPatchOp : std::enable_shared_from_this<GuardedPatchOp> {
  SessionClient sessions;
  std::string name;
  std::function<std::optional<json>(const Session&)> make_patch;
  SessionHandler<Session> handler;
  int attempt = 0;
  Error last;

  GuardedPatchOp(SessionClient s, std::string n, std::function<std::optional<json>(const Session&)> m,
                 SessionHandler<Session> h)
      : sessions(std::move(s)), name(std::move(n)), make_patch(std::move(m)), handler(std::move(h)) {}

  void Attempt() {
    if (attempt++ == kConflictRetries) {
      return handler(Fail(Errc::conflict, "Session " + sessions.Namespace() + "/" + name + " kept changing: " +
                                              std::to_string(kConflictRetries) + " attempts ended in conflict (" +
                                              last.message + ")",
                          409));
    }
    sessions.AsyncGet(name, [self = shared_from_this()](Result<Session> current) {
      if (!current) return self->handler(Fail(current.error()));
      std::optional<json> patch = self->make_patch(*current);
      if (!patch) return self->handler(std::move(current));
      (*patch)["metadata"]["resourceVersion"] = current->resource_version;
      self->sessions.Client().AsyncPatch(self->sessions.ObjectPath(self->name), std::move(*patch), PatchType::merge,
                                         [self](Result<json> j) {
                                           if (j) return self->handler(Session::FromJson(*j));
                                           if (j.error().code != Errc::conflict) return self->handler(Fail(j.error()));
                                           self->last = j.error();
                                           self->Attempt();
                                         });
    });
  }
};

}  // namespace

void SessionClient::AsyncGuardedPatch(const std::string& name,
                                      std::function<std::optional<json>(const Session&)> make_patch,
                                      SessionHandler<Session> handler) {
  std::make_shared<GuardedPatchOp>(*this, name, std::move(make_patch), std::move(handler))->Attempt();
}

void SessionClient::AsyncAnnotate(const std::string& name, std::map<std::string, std::optional<std::string>> annotations,
                                  SessionHandler<Session> handler) {
  AsyncGuardedPatch(
      name,
      [annotations = std::move(annotations)](const Session&) -> std::optional<json> {
        json ann = json::object();
        for (const auto& [k, v] : annotations) ann[k] = v ? json(*v) : json(nullptr);
        return json{{"metadata", {{"annotations", ann}}}};
      },
      std::move(handler));
}

void SessionClient::AsyncRequestIdleResume(const std::string& name, SessionHandler<std::string> handler) {
  std::string request = NewUuid();
  AsyncGuardedPatch(
      name,
      [request](const Session& cur) -> std::optional<json> {
        if (!cur.resume_request.empty()) return std::nullopt;  // one is already in flight
        json ann = {{std::string(kIdleResumeRequestAnnotation), request},
                    {std::string(kIdleResumeRequestTimeAnnotation), nullptr},
                    {std::string(kIdleResumeAckAnnotation), nullptr},
                    {std::string(kIdleResumeAckTimeAnnotation), nullptr}};
        return json{{"metadata", {{"annotations", ann}}}};
      },
      [handler = std::move(handler)](Result<Session> s) {
        if (!s) return handler(Fail(s.error()));
        handler(s->resume_request);
      });
}

void SessionClient::AsyncAcknowledgeResume(const std::string& name, const std::string& request,
                                           SessionStatusHandler handler) {
  if (request.empty()) {
    return blocking::ReportNow(client_->context(), std::move(handler),
                               Status(Fail(Errc::invalid_argument, "AcknowledgeResume: the request value is empty")));
  }
  AsyncGuardedPatch(
      name,
      [request](const Session& cur) -> std::optional<json> {
        if (cur.resume_acknowledgement == request &&
            cur.annotations.count(std::string(kIdleResumeAckTimeAnnotation)) == 0) {
          return std::nullopt;
        }
        json ann = {{std::string(kIdleResumeAckAnnotation), request},
                    {std::string(kIdleResumeAckTimeAnnotation), nullptr}};
        return json{{"metadata", {{"annotations", ann}}}};
      },
      [handler = std::move(handler)](Result<Session> s) {
        if (!s) return handler(Fail(s.error()));
        handler(Status{});
      });
}

// ---- Blocking forms ---------------------------------------------------------------------------

Result<Session> SessionClient::Get(const std::string& name) {
  return Block<Session>(*client_, "SessionClient::Get", [&](SessionHandler<Session> h) { AsyncGet(name, std::move(h)); });
}

Result<std::vector<Session>> SessionClient::List(const std::string& label_selector) {
  return Block<std::vector<Session>>(*client_, "SessionClient::List", [&](SessionHandler<std::vector<Session>> h) {
    AsyncList(label_selector, std::move(h));
  });
}

Result<Session> SessionClient::Create(json object) {
  return Block<Session>(*client_, "SessionClient::Create",
                        [&](SessionHandler<Session> h) { AsyncCreate(std::move(object), std::move(h)); });
}

Result<Session> SessionClient::CreateFromSpawner(const std::string& spawner, const std::string& name,
                                                 const std::map<std::string, std::string>& extra_annotations) {
  return Block<Session>(*client_, "SessionClient::CreateFromSpawner", [&](SessionHandler<Session> h) {
    AsyncCreateFromSpawner(spawner, name, extra_annotations, std::move(h));
  });
}

Status SessionClient::Delete(const std::string& name) {
  return blocking::CallStatus(client_->context(), kBlockingBound, "SessionClient::Delete",
                              [&](SessionStatusHandler h) { AsyncDelete(name, std::move(h)); });
}

Result<Session> SessionClient::Suspend(const std::string& name) {
  return Block<Session>(*client_, "SessionClient::Suspend",
                        [&](SessionHandler<Session> h) { AsyncSuspend(name, std::move(h)); });
}

Result<Session> SessionClient::Resume(const std::string& name) {
  return Block<Session>(*client_, "SessionClient::Resume",
                        [&](SessionHandler<Session> h) { AsyncResume(name, std::move(h)); });
}

Result<std::string> SessionClient::RequestIdleResume(const std::string& name) {
  return Block<std::string>(*client_, "SessionClient::RequestIdleResume",
                            [&](SessionHandler<std::string> h) { AsyncRequestIdleResume(name, std::move(h)); });
}

Status SessionClient::AcknowledgeResume(const std::string& name, const std::string& request) {
  return blocking::CallStatus(client_->context(), kBlockingBound, "SessionClient::AcknowledgeResume",
                              [&](SessionStatusHandler h) { AsyncAcknowledgeResume(name, request, std::move(h)); });
}

Result<Session> SessionClient::Annotate(const std::string& name,
                                        const std::map<std::string, std::optional<std::string>>& annotations) {
  return Block<Session>(*client_, "SessionClient::Annotate",
                        [&](SessionHandler<Session> h) { AsyncAnnotate(name, annotations, std::move(h)); });
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
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return blocking::Call<ReadySession>(client_->context(), std::max(left, std::chrono::milliseconds(0)),
                                      "SessionClient::WaitReady", [&](SessionHandler<ReadySession> h) {
                                        AsyncWaitReady(name, deadline, options, std::move(h));
                                      });
}

}  // namespace sessionturn
