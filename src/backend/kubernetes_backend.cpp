// KubernetesBackend: the SessionBackend of a cluster, over SessionClient (sessions.hpp) and the
// Session connector (session_driver.hpp), every operation asynchronous on the Context through one
// shared KubeClient.
#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>

#ifdef SESSIONTURN_HAVE_YAML_CPP
#include <yaml-cpp/yaml.h>
#endif

#include "blocking.hpp"
#include "json_fields.hpp"
#include "kube/background_writes.hpp"
#include "sessionturn/backend.hpp"

namespace sessionturn {
namespace {

using nlohmann::json;

#ifdef SESSIONTURN_HAVE_YAML_CPP
// YAML to JSON with the YAML 1.2 core schema for plain scalars (true/false, null, numbers), so a
// template's `replicas: 1` stays a number; quoted scalars stay strings.
json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.Scalar();
      if (node.Tag() != "?") return text;  // quoted or explicitly tagged: a string
      if (text == "true" || text == "True" || text == "TRUE") return true;
      if (text == "false" || text == "False" || text == "FALSE") return false;
      if (text == "null" || text == "Null" || text == "NULL" || text == "~" || text.empty()) return nullptr;
      json number = json::parse(text, nullptr, false);
      if (!number.is_discarded() && number.is_number()) return number;
      return text;
    }
    default:
      return nullptr;
  }
}
#endif

Result<json> LoadTemplate(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Fail(Errc::invalid_argument, "cannot read the Session template " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) {
#ifdef SESSIONTURN_HAVE_YAML_CPP
    try {
      doc = YamlToJson(YAML::Load(text));
    } catch (const std::exception& e) {
      return Fail(Errc::invalid_argument, "the Session template " + path + " is neither JSON nor YAML: " + e.what());
    }
#else
    return Fail(Errc::invalid_argument, "the Session template " + path + " is not JSON (built without yaml-cpp)");
#endif
  }
  if (!doc.is_object()) return Fail(Errc::invalid_argument, "the Session template " + path + " is not an object");
  if (doc.contains("spec") && !doc["spec"].is_object()) {
    return Fail(Errc::invalid_argument, "the Session template " + path + ": spec is not an object");
  }
  if (doc.contains("metadata") && !doc["metadata"].is_object()) {
    return Fail(Errc::invalid_argument, "the Session template " + path + ": metadata is not an object");
  }
  const json* md = json_fields::Object(doc, "metadata");
  for (const char* map : {"labels", "annotations"}) {
    const json* field = md != nullptr ? json_fields::Field(*md, map) : nullptr;
    if (field != nullptr && !field->is_object() && !field->is_null()) {
      return Fail(Errc::invalid_argument, "the Session template " + path + ": metadata." + map + " is not a map");
    }
  }
  return doc;
}

std::chrono::system_clock::time_point FromEpoch(long long seconds) {
  return std::chrono::system_clock::time_point(std::chrono::seconds(seconds));
}

SessionInfo ToInfo(const Session& s) {
  SessionInfo info;
  info.name = s.name;
  if (s.IsFailed()) {
    info.phase = SessionPhase::failed;
  } else if (s.IsOwnerSuspended()) {
    info.phase = SessionPhase::suspended;
    info.suspended = SuspendReason::owner;
  } else if (s.phase == "Suspended") {
    info.phase = SessionPhase::suspended;
    info.suspended = SuspendReason::idle;
  } else if (s.IsReady()) {
    info.phase = SessionPhase::ready;
  }
  info.message = s.message;
  info.created = FromEpoch(s.Created());
  info.last_activity = FromEpoch(s.LastActivity());
  info.labels = s.labels;
  info.annotations = s.annotations;
  if (!s.pod_name.empty()) info.details["pod"] = s.pod_name;
  info.details["namespace"] = s.namespace_name;
  if (!s.uid.empty()) info.details["uid"] = s.uid;
  return info;
}

template <typename T>
BackendHandler<Session> AsInfo(BackendHandler<T> handler) {
  return [handler = std::move(handler)](Result<Session> s) {
    if (!s) return handler(Fail(s.error()));
    handler(ToInfo(*s));
  };
}

// Everything an operation needs, shared by the backend and its operations in flight: a backend
// destroyed mid-operation leaves the operation its state (its handler still runs, with the outcome).
struct BackendState : std::enable_shared_from_this<BackendState> {
  BackendState(Context& c, KubeConfig k, KubernetesBackendOptions o, json t)
      : context(c),
        kube(std::move(k)),
        options(std::move(o)),
        tmpl(std::move(t)),
        client(std::make_shared<KubeClient>(c, kube, options.session.client)),
        namespace_name(options.namespace_name.empty() ? kube.Namespace() : options.namespace_name) {}

  Context& context;
  const KubeConfig kube;
  const KubernetesBackendOptions options;
  const json tmpl;
  const std::shared_ptr<KubeClient> client;  // one connection pool for every Session
  const std::string namespace_name;
  // The resume acknowledgements its connectors have in flight: ~KubernetesBackend gives them their time.
  const std::shared_ptr<kube::BackgroundWrites> writes = std::make_shared<kube::BackgroundWrites>();
  std::mutex mu;
  std::string spawner_uid;  // learnt from the spawner on first need; under mu

  SessionClient Sessions() const { return SessionClient(*client, namespace_name); }

  Status Check(const std::string& name, const char* what) const {
    if (context.Stopped()) return Fail(blocking::StoppedContextError(std::string("SessionBackend::") + what));
    return ValidateSessionName(name);
  }

  template <typename Handler>
  void Report(Handler handler, Error error) {
    blocking::ReportNow(context, std::move(handler), Fail(std::move(error)));
  }

  // The owner label this backend puts on its Sessions and checks: (key, value); empty key: none.
  std::pair<std::string, std::string> OwnerLabel() {
    if (!options.spawner.empty()) {
      std::lock_guard lock(mu);
      return {std::string(kSpawnerLabel), spawner_uid};
    }
    if (!options.owner.empty()) return {std::string(kLocalOwnerLabel), options.owner};
    return {};
  }

  Status CheckOwner(const Session& s) {
    auto [key, value] = OwnerLabel();
    if (key.empty()) return {};
    auto it = s.labels.find(key);
    if (it != s.labels.end() && it->second == value) return {};
    std::string theirs = it == s.labels.end() ? "nobody (it has no " + key + " label)" : key + "=" + it->second;
    return Fail(Errc::forbidden, "Session " + namespace_name + "/" + s.name + " belongs to " + theirs + ", not to " +
                                     key + "=" + value + "; refusing to use it");
  }

  // Runs `next` once the spawner's UID is known (the owner check needs it), or fails `handler`.
  template <typename T>
  void WithOwner(BackendHandler<T> handler, std::function<void(BackendHandler<T>)> next) {
    if (options.spawner.empty() || !OwnerLabel().second.empty()) return next(std::move(handler));
    auto self = shared_from_this();
    Sessions().AsyncSpawnerSession(options.spawner, "probe", {},
                                   [self, handler = std::move(handler), next = std::move(next)](Result<json> object) mutable {
                                     if (!object) return handler(Fail(object.error()));
                                     {
                                       std::lock_guard lock(self->mu);
                                       const json* labels = json_fields::Object(*object, "metadata");
                                       if (labels != nullptr) labels = json_fields::Object(*labels, "labels");
                                       self->spawner_uid =
                                           labels != nullptr ? json_fields::String(*labels, kSpawnerLabel) : "";
                                     }
                                     next(std::move(handler));
                                   });
  }

  void Ensure(std::string name, SessionSpec spec, BackendHandler<EnsureResult> handler) {
    auto self = shared_from_this();
    WithOwner<EnsureResult>(std::move(handler), [self, name, spec = std::move(spec)](BackendHandler<EnsureResult> h) {
      self->Sessions().AsyncGet(name, [self, name, spec, h = std::move(h)](Result<Session> s) mutable {
        if (s) {
          if (auto st = self->CheckOwner(*s); !st) return h(Fail(st.error()));
          return h(EnsureResult{ToInfo(*s), false});
        }
        if (s.error().code != Errc::not_found) return h(Fail(s.error()));
        self->Create(name, spec, std::move(h));
      });
    });
  }

  void Create(const std::string& name, const SessionSpec& spec, BackendHandler<EnsureResult> handler) {
    auto self = shared_from_this();
    auto finish = [self, spec, handler](Result<json> object) {
      if (!object) return handler(Fail(object.error()));
      json& md = (*object)["metadata"];
      for (const auto& [k, v] : spec.labels) md["labels"][k] = v;
      for (const auto& [k, v] : spec.annotations) md["annotations"][k] = v;
      // The owner label wins over the caller's labels: it is what the next Ensure checks.
      if (auto [key, value] = self->OwnerLabel(); !key.empty()) md["labels"][key] = value;
      self->Sessions().AsyncCreate(std::move(*object), [handler](Result<Session> s) {
        if (!s) return handler(Fail(s.error()));
        handler(EnsureResult{ToInfo(*s), true});
      });
    };
    if (!options.spawner.empty()) return Sessions().AsyncSpawnerSession(options.spawner, name, {}, finish);
    if (tmpl.is_null()) {
      return Report(std::move(handler), Error(Errc::not_found, "Session " + namespace_name + "/" + name +
                                                                   " does not exist, and this backend has no spawner "
                                                                   "or template to create it from"));
    }
    json object = tmpl;
    if (!object.contains("metadata")) object["metadata"] = json::object();
    object["metadata"]["name"] = name;
    finish(std::move(object));
  }

  void WaitReady(std::string name, std::chrono::steady_clock::time_point deadline, ReadyProgress progress,
                 CancellationToken cancel, BackendHandler<ReadyTarget> handler) {
    WaitReadyOptions wait = options.session.wait;
    wait.cancel = std::move(cancel);
    auto resuming = std::make_shared<std::atomic<bool>>(false);
    wait.on_update = [progress, resuming, user = wait.on_update](const Session& s) {
      if (user) user(s);
      if (s.IsIdleSuspended() || (!s.resume_request.empty() && s.resume_request != s.resume_acknowledgement)) {
        *resuming = true;
      }
      if (progress) progress(ToInfo(s), s.IsReady() ? "ready" : *resuming ? "resuming" : "pending");
    };
    auto self = shared_from_this();
    Sessions().AsyncWaitReady(name, deadline, std::move(wait),
                              [self, name, resuming, handler = std::move(handler)](Result<ReadySession> ready) {
                                if (!ready) return handler(Fail(ready.error()));
                                ReadyTarget target;
                                target.info = ToInfo(ready->session);
                                target.resumed = *resuming;
                                target.connector =
                                    kube::MakeOwnedSessionConnector(self->context, self->kube, self->client,
                                                                    self->namespace_name, name, ready->resume_request,
                                                                    self->options.session, self->writes);
                                handler(std::move(target));
                              });
  }
};

class KubernetesBackend final : public SessionBackend {
 public:
  explicit KubernetesBackend(std::shared_ptr<BackendState> state) : s_(std::move(state)) {}
  ~KubernetesBackend() override {
    // A program that exits right after its turn (the CLI) destroys the backend on its own thread;
    // the connectors may go later, on a worker, where they must not wait.
    if (!s_->context.InWorkerThread() && !s_->context.Stopped()) s_->writes->WaitIdle(kube::kBackgroundWriteGrace);
  }

  Context& GetContext() const noexcept override { return s_->context; }

  std::string Describe() const override {
    std::string out = "kubernetes (namespace " + s_->namespace_name;
    if (!s_->options.spawner.empty()) out += ", spawner " + s_->options.spawner;
    if (!s_->options.template_file.empty()) out += ", template " + s_->options.template_file;
    return out + ")";
  }

  void AsyncEnsure(std::string name, SessionSpec spec, BackendHandler<EnsureResult> handler) override {
    if (auto st = s_->Check(name, "Ensure"); !st) return s_->Report(std::move(handler), st.error());
    if (!spec.parameters.empty()) {
      return s_->Report(std::move(handler),
                        Error(Errc::invalid_argument, "the Kubernetes backend takes no template parameters; \"" +
                                                          spec.parameters.begin()->first + "\" is not one"));
    }
    s_->Ensure(std::move(name), std::move(spec), std::move(handler));
  }

  void AsyncWaitReady(std::string name, std::chrono::steady_clock::time_point deadline, ReadyProgress progress,
                      CancellationToken cancel, BackendHandler<ReadyTarget> handler) override {
    if (auto st = s_->Check(name, "WaitReady"); !st) return s_->Report(std::move(handler), st.error());
    s_->WaitReady(std::move(name), deadline, std::move(progress), std::move(cancel), std::move(handler));
  }

  void AsyncGet(std::string name, BackendHandler<SessionInfo> handler) override {
    if (auto st = s_->Check(name, "Get"); !st) return s_->Report(std::move(handler), st.error());
    s_->Sessions().AsyncGet(name, AsInfo(std::move(handler)));
  }

  void AsyncList(std::string selector, BackendHandler<std::vector<SessionInfo>> handler) override {
    if (s_->context.Stopped()) return s_->Report(std::move(handler), blocking::StoppedContextError("SessionBackend::List"));
    if (auto parsed = ParseLabelSelector(selector); !parsed) return s_->Report(std::move(handler), parsed.error());
    s_->Sessions().AsyncList(selector, [handler = std::move(handler)](Result<std::vector<Session>> list) {
      if (!list) return handler(Fail(list.error()));
      std::vector<SessionInfo> out;
      out.reserve(list->size());
      for (const auto& s : *list) out.push_back(ToInfo(s));
      handler(std::move(out));
    });
  }

  void AsyncSuspend(std::string name, BackendHandler<SessionInfo> handler) override {
    if (auto st = s_->Check(name, "Suspend"); !st) return s_->Report(std::move(handler), st.error());
    s_->Sessions().AsyncSuspend(name, AsInfo(std::move(handler)));
  }

  void AsyncResume(std::string name, BackendHandler<SessionInfo> handler) override {
    if (auto st = s_->Check(name, "Resume"); !st) return s_->Report(std::move(handler), st.error());
    s_->Sessions().AsyncResume(name, AsInfo(std::move(handler)));
  }

  void AsyncDelete(std::string name, BackendStatusHandler handler) override {
    if (auto st = s_->Check(name, "Delete"); !st) return s_->Report(std::move(handler), st.error());
    s_->Sessions().AsyncDelete(name, std::move(handler));
  }

  void AsyncAnnotate(std::string name, std::map<std::string, std::optional<std::string>> annotations,
                     BackendHandler<SessionInfo> handler) override {
    if (auto st = s_->Check(name, "Annotate"); !st) return s_->Report(std::move(handler), st.error());
    s_->Sessions().AsyncAnnotate(name, std::move(annotations), AsInfo(std::move(handler)));
  }

 private:
  std::shared_ptr<BackendState> s_;
};

}  // namespace

Result<std::unique_ptr<SessionBackend>> MakeKubernetesBackend(Context& context, KubeConfig kube,
                                                              KubernetesBackendOptions options) {
  if (!options.spawner.empty() && !options.template_file.empty()) {
    return Fail(Errc::invalid_argument, "the Kubernetes backend takes a spawner or a template file, not both");
  }
  json tmpl;
  if (!options.template_file.empty()) {
    auto loaded = LoadTemplate(options.template_file);
    if (!loaded) return Fail(loaded.error());
    tmpl = std::move(*loaded);
  }
  auto state = std::make_shared<BackendState>(context, std::move(kube), std::move(options), std::move(tmpl));
  return std::unique_ptr<SessionBackend>(std::make_unique<KubernetesBackend>(std::move(state)));
}

}  // namespace sessionturn
