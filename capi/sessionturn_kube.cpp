// The C ABI's Kubernetes part: cluster configuration, Session operations and drivers for a Session
// through the Pod's exec subresource, in a translation unit of its own so the Kubernetes surface of
// the ABI reads in one place.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sessionturn/session_driver.hpp"

#include "capi_internal.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/kube_exec.hpp"
#include "sessionturn/sessions.hpp"

using namespace sessionturn::capi;  // NOLINT: the firewall helpers

struct st_kube {
  std::unique_ptr<st::KubeConfig> config;
  std::unique_ptr<st::KubeClient> client;
  std::unique_ptr<st::SessionClient> sessions;
};

struct st_session_list {
  std::vector<st::Session> sessions;
};

namespace {

// How long WaitReady waits when the caller passes no timeout: a Session resuming from idle needs a
// Pod scheduled and its runtime started, minutes on a busy cluster.
constexpr std::chrono::milliseconds kDefaultWaitReady = std::chrono::minutes(10);

st::Status CheckKube(const st_kube* kube) {
  if (!kube || !kube->sessions) return st::Fail(st::Errc::invalid_argument, "kube is NULL");
  return {};
}

st::Status CheckName(const char* name) {
  if (!name || !*name) return st::Fail(st::Errc::invalid_argument, "Session name is NULL or empty");
  return {};
}

// Waits for the Session and acknowledges an idle resume this wait requested or found pending.
st::Result<st::ReadySession> WaitReadyAndAck(st_kube* kube, const std::string& name, int64_t timeout_ms,
                                             bool resume_idle) {
  st::WaitReadyOptions options;
  options.resume_idle = resume_idle;
  auto deadline = std::chrono::steady_clock::now() + OrDefault(timeout_ms, kDefaultWaitReady);
  auto ready = kube->sessions->WaitReady(name, deadline, options);
  if (!ready) return ready;
  if (!ready->resume_request.empty()) {
    // st_session_wait_ready has no driver to wait for: the caller's next connection reaches the resumed
    // runtime, so acknowledge now (st_driver_new_session instead acknowledges after the first replay).
    // A failure to acknowledge does not make the Session unusable: not fatal.
    (void)kube->sessions->AcknowledgeResume(name, ready->resume_request);
  }
  return ready;
}

template <typename Fn>
const char* ListField(const char* fn_name, const st_session_list* list, size_t index, Fn&& fn) noexcept {
  return Guard(fn_name, static_cast<const char*>(nullptr), [&]() -> const char* {
    if (!list) {
      Record(InvalidArgument("list is NULL"));
      return nullptr;
    }
    if (index >= list->sessions.size()) {
      Record(InvalidArgument("index " + std::to_string(index) + " is out of range (count " +
                             std::to_string(list->sessions.size()) + ")"));
      return nullptr;
    }
    return fn(list->sessions[index]);
  });
}

}  // namespace

ST_API st_status st_kube_new(st_kube** out, const st_kube_options* options) {
  return GuardStatus("st_kube_new", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    st::KubeConfigOptions opts;
    if (options) {
      if (auto ok = CheckVersion(options->version, ST_KUBE_OPTIONS_VERSION, "st_kube_options"); !ok) return ok;
      if (options->kubeconfig) opts.kubeconfig = options->kubeconfig;
      if (options->context) opts.context = options->context;
      if (options->namespace_name) opts.namespace_name = options->namespace_name;
    }
    auto config = st::KubeConfig::Load(opts);
    if (!config) return st::Fail(config.error());
    auto handle = std::make_unique<st_kube>();
    handle->config = std::make_unique<st::KubeConfig>(*config);
    handle->client = std::make_unique<st::KubeClient>(std::move(*config));
    handle->sessions = std::make_unique<st::SessionClient>(*handle->client, handle->config->Namespace());
    *out = handle.release();
    return {};
  });
}

ST_API const char* st_kube_namespace(const st_kube* kube) {
  return Guard("st_kube_namespace", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (!kube || !kube->sessions) {
      Record(InvalidArgument("kube is NULL"));
      return nullptr;
    }
    return kube->sessions->Namespace().c_str();
  });
}

ST_API void st_kube_free(st_kube* kube) {
  Guard("st_kube_free", 0, [&] {
    delete kube;
    return 0;
  });
}

ST_API st_status st_session_list_new(st_session_list** out, st_kube* kube, const char* label_selector) {
  return GuardStatus("st_session_list_new", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (auto ok = CheckKube(kube); !ok) return ok;
    auto list = kube->sessions->List(label_selector ? label_selector : "");
    if (!list) return st::Fail(list.error());
    *out = new st_session_list{std::move(*list)};
    return {};
  });
}

ST_API size_t st_session_list_count(const st_session_list* list) {
  return Guard("st_session_list_count", static_cast<size_t>(0), [&]() -> size_t {
    if (!list) {
      Record(InvalidArgument("list is NULL"));
      return 0;
    }
    return list->sessions.size();
  });
}

ST_API const char* st_session_list_name(const st_session_list* list, size_t index) {
  return ListField("st_session_list_name", list, index, [](const st::Session& s) { return s.name.c_str(); });
}
ST_API const char* st_session_list_phase(const st_session_list* list, size_t index) {
  return ListField("st_session_list_phase", list, index, [](const st::Session& s) { return s.phase.c_str(); });
}
ST_API const char* st_session_list_pod_name(const st_session_list* list, size_t index) {
  return ListField("st_session_list_pod_name", list, index, [](const st::Session& s) { return s.pod_name.c_str(); });
}
ST_API const char* st_session_list_message(const st_session_list* list, size_t index) {
  return ListField("st_session_list_message", list, index, [](const st::Session& s) { return s.message.c_str(); });
}

ST_API void st_session_list_free(st_session_list* list) {
  Guard("st_session_list_free", 0, [&] {
    delete list;
    return 0;
  });
}

ST_API st_status st_session_suspend(st_kube* kube, const char* name) {
  return GuardStatus("st_session_suspend", [&]() -> st::Status {
    if (auto ok = CheckKube(kube); !ok) return ok;
    if (auto ok = CheckName(name); !ok) return ok;
    auto r = kube->sessions->Suspend(name);
    if (!r) return st::Fail(r.error());
    return {};
  });
}

ST_API st_status st_session_resume(st_kube* kube, const char* name) {
  return GuardStatus("st_session_resume", [&]() -> st::Status {
    if (auto ok = CheckKube(kube); !ok) return ok;
    if (auto ok = CheckName(name); !ok) return ok;
    auto r = kube->sessions->Resume(name);
    if (!r) return st::Fail(r.error());
    return {};
  });
}

ST_API st_status st_session_wait_ready(char** pod_name, st_kube* kube, const char* name, int64_t timeout_ms,
                                       int resume_idle) {
  return GuardStatus("st_session_wait_ready", [&]() -> st::Status {
    if (pod_name) *pod_name = nullptr;
    if (auto ok = CheckKube(kube); !ok) return ok;
    if (auto ok = CheckName(name); !ok) return ok;
    auto ready = WaitReadyAndAck(kube, name, timeout_ms, resume_idle != 0);
    if (!ready) return st::Fail(ready.error());
    if (pod_name) *pod_name = CopyString(ready->pod_name);
    return {};
  });
}

ST_API st_status st_driver_new_session(st_driver** out, st_context* context, st_kube* kube, const char* name,
                                       int64_t wait_timeout_ms) {
  return GuardStatus("st_driver_new_session", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!context) return st::Fail(InvalidArgument("context is NULL"));
    if (auto ok = CheckKube(kube); !ok) return ok;
    if (auto ok = CheckName(name); !ok) return ok;
    if (context->context->InWorkerThread()) {
      return st::Fail(st::Errc::would_block, "st_driver_new_session was called from a callback (a Context worker)");
    }
    st::WaitReadyOptions options;
    options.resume_idle = true;
    auto ready = kube->sessions->WaitReady(
        name, std::chrono::steady_clock::now() + OrDefault(wait_timeout_ms, kDefaultWaitReady), options);
    if (!ready) return st::Fail(ready.error());
    // A resume this wait requested is acknowledged once the driver's first connection has seen the
    // runtime's replay (PROTOCOL.md §5), not before.
    return NewDriver(out, context,
                     st::MakeSessionConnector(*context->context, *kube->config, kube->sessions->Namespace(), name,
                                              *ready));
  });
}
