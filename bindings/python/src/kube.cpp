// The Kubernetes part of _sessionturn: SessionClient (list, get, suspend, resume, delete, wait_ready)
// and Driver.for_session (wait until Ready, then talk through the Pod's exec subresource). Every call
// blocks on HTTP and releases the GIL while it does.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/kube_exec.hpp"
#include "sessionturn/session_driver.hpp"
#include "sessionturn/sessions.hpp"

namespace py = pybind11;
namespace st = sessionturn;
using sessionturn::python::Raise;

namespace {

// A Session resuming from idle needs a Pod scheduled and its runtime started: minutes on a busy cluster.
constexpr double kDefaultWaitReadySeconds = 600.0;

struct PySession {
  std::string name, namespace_name, uid, phase, pod_name, message, ready_reason;
  bool suspend = false, ready = false, idle_suspended = false, owner_suspended = false, failed = false;
  std::map<std::string, std::string> labels, annotations;
  std::string raw_json;

  static PySession From(const st::Session& s) {
    PySession out;
    out.name = s.name;
    out.namespace_name = s.namespace_name;
    out.uid = s.uid;
    out.phase = s.phase;
    out.pod_name = s.pod_name;
    out.message = s.message;
    out.ready_reason = s.ready_reason;
    out.suspend = s.suspend;
    out.ready = s.IsReady();
    out.idle_suspended = s.IsIdleSuspended();
    out.owner_suspended = s.IsOwnerSuspended();
    out.failed = s.IsFailed();
    out.labels = s.labels;
    out.annotations = s.annotations;
    out.raw_json = s.raw.dump();
    return out;
  }
};

std::chrono::milliseconds Seconds(double seconds) {
  if (!(seconds > 0)) throw py::value_error("timeout must be a positive number of seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

st::KubeConfig LoadConfig(const std::optional<std::string>& namespace_name, const std::optional<std::string>& kubeconfig,
                          const std::optional<std::string>& context) {
  st::KubeConfigOptions options;
  if (kubeconfig) options.kubeconfig = *kubeconfig;
  if (context) options.context = *context;
  if (namespace_name) options.namespace_name = *namespace_name;
  st::Result<st::KubeConfig> config = st::Fail(st::Errc::internal, "not loaded");
  {
    py::gil_scoped_release release;  // may run an exec credential plugin
    config = st::KubeConfig::Load(options);
  }
  if (!config) Raise(config.error());
  return std::move(*config);
}

class PySessionClient {
 public:
  PySessionClient(std::optional<std::string> namespace_name, std::optional<std::string> kubeconfig,
                  std::optional<std::string> context)
      : config_(std::make_unique<st::KubeConfig>(LoadConfig(namespace_name, kubeconfig, context))),
        client_(std::make_unique<st::KubeClient>(*config_)),
        sessions_(std::make_unique<st::SessionClient>(*client_, config_->Namespace())) {}

  ~PySessionClient() {
    py::gil_scoped_release release;
    sessions_.reset();
    client_.reset();
  }

  std::vector<PySession> List(const std::optional<std::string>& label_selector) {
    st::Result<std::vector<st::Session>> r = st::Fail(st::Errc::internal, "not run");
    {
      py::gil_scoped_release release;
      r = sessions_->List(label_selector.value_or(""));
    }
    if (!r) Raise(r.error());
    std::vector<PySession> out;
    for (const auto& s : *r) out.push_back(PySession::From(s));
    return out;
  }

  PySession Get(const std::string& name) { return Call([&] { return sessions_->Get(name); }); }
  PySession Suspend(const std::string& name) { return Call([&] { return sessions_->Suspend(name); }); }
  PySession Resume(const std::string& name) { return Call([&] { return sessions_->Resume(name); }); }

  void Delete(const std::string& name) {
    st::Status r;
    {
      py::gil_scoped_release release;
      r = sessions_->Delete(name);
    }
    if (!r) Raise(r.error());
  }

  // Returns the Ready Session. Without a driver to connect, an idle resume this wait requested is
  // acknowledged at once (the caller's next connection reaches the resumed runtime).
  PySession WaitReady(const std::string& name, double timeout, bool resume_idle) {
    st::ReadySession ready = WaitReadyRaw(name, timeout, resume_idle, /*acknowledge=*/true);
    return PySession::From(ready.session);
  }

  st::ReadySession WaitReadyRaw(const std::string& name, double timeout, bool resume_idle, bool acknowledge) {
    auto deadline = std::chrono::steady_clock::now() + Seconds(timeout);
    st::Result<st::ReadySession> r = st::Fail(st::Errc::internal, "not run");
    {
      py::gil_scoped_release release;
      st::WaitReadyOptions options;
      options.resume_idle = resume_idle;
      r = sessions_->WaitReady(name, deadline, options);
      if (acknowledge && r && !r->resume_request.empty()) (void)sessions_->AcknowledgeResume(name, r->resume_request);
    }
    if (!r) Raise(r.error());
    return std::move(*r);
  }

  const std::string& namespace_name() const { return sessions_->Namespace(); }
  const st::KubeConfig& config() const { return *config_; }

 private:
  template <typename Fn>
  PySession Call(Fn&& fn) {
    st::Result<st::Session> r = st::Fail(st::Errc::internal, "not run");
    {
      py::gil_scoped_release release;
      r = fn();
    }
    if (!r) Raise(r.error());
    return PySession::From(*r);
  }

  std::unique_ptr<st::KubeConfig> config_;
  std::unique_ptr<st::KubeClient> client_;
  std::unique_ptr<st::SessionClient> sessions_;
};

py::object DriverForSession(const std::string& name, std::optional<std::string> namespace_name,
                            std::optional<std::string> kubeconfig, std::optional<std::string> context,
                            double wait_timeout) {
  PySessionClient client(std::move(namespace_name), std::move(kubeconfig), std::move(context));
  // The driver acknowledges a resume this wait requested once its first connection has seen the
  // runtime's replay (PROTOCOL.md §5).
  st::ReadySession ready = client.WaitReadyRaw(name, wait_timeout, true, /*acknowledge=*/false);
  st::KubeConfig config = client.config();
  std::string ns = client.namespace_name();
  return sessionturn::python::NewDriver(
      [&](st::Context& ctx) { return st::MakeSessionConnector(ctx, config, ns, name, ready); },
      "kube-exec:" + ns + "/" + ready.pod_name);
}

}  // namespace

void sessionturn::python::RegisterKube(py::module_& m) {
  py::class_<PySession>(m, "Session", "A read-only view of a Kelos Session object.")
      .def_readonly("name", &PySession::name)
      .def_readonly("namespace", &PySession::namespace_name)
      .def_readonly("uid", &PySession::uid)
      .def_readonly("phase", &PySession::phase)
      .def_readonly("pod_name", &PySession::pod_name)
      .def_readonly("message", &PySession::message)
      .def_readonly("ready_reason", &PySession::ready_reason)
      .def_readonly("suspend", &PySession::suspend)
      .def_readonly("ready", &PySession::ready)
      .def_readonly("idle_suspended", &PySession::idle_suspended)
      .def_readonly("owner_suspended", &PySession::owner_suspended)
      .def_readonly("failed", &PySession::failed)
      .def_readonly("labels", &PySession::labels)
      .def_readonly("annotations", &PySession::annotations)
      .def_property_readonly("raw", [](const PySession& s) {
        return py::module_::import("json").attr("loads")(py::str(s.raw_json));
      })
      .def("__repr__", [](const PySession& s) {
        return "<sessionturn.Session " + s.namespace_name + "/" + s.name + " " + s.phase + ">";
      });

  py::class_<PySessionClient>(m, "SessionClient",
                              "Sessions of one namespace. Every call blocks on HTTP (the GIL is released).")
      .def(py::init<std::optional<std::string>, std::optional<std::string>, std::optional<std::string>>(),
           py::arg("namespace") = py::none(), py::kw_only(), py::arg("kubeconfig") = py::none(),
           py::arg("context") = py::none())
      .def("list", &PySessionClient::List, py::arg("label_selector") = py::none())
      .def("get", &PySessionClient::Get, py::arg("name"))
      .def("suspend", &PySessionClient::Suspend, py::arg("name"))
      .def("resume", &PySessionClient::Resume, py::arg("name"))
      .def("delete", &PySessionClient::Delete, py::arg("name"))
      .def("wait_ready", &PySessionClient::WaitReady, py::arg("name"), py::kw_only(),
           py::arg("timeout") = kDefaultWaitReadySeconds, py::arg("resume_idle") = true,
           "Wait until the Session is Ready with a Pod (resuming an idle-suspended one). FailedError, "
           "UnavailableError (suspended by its owner), TimeoutError.")
      .def_property_readonly("namespace", &PySessionClient::namespace_name);

  m.attr("Driver").attr("for_session") = py::cpp_function(
      &DriverForSession, py::arg("name"), py::arg("namespace") = py::none(), py::kw_only(),
      py::arg("kubeconfig") = py::none(), py::arg("context") = py::none(),
      py::arg("wait_timeout") = kDefaultWaitReadySeconds,
      "A driver for a Kubernetes Session: waits until it is Ready (resuming it from idle), then talks through "
      "the Pod's exec subresource with the kubeconfig's credentials.");
  m.attr("Driver").attr("for_session") = py::module_::import("builtins").attr("staticmethod")(
      m.attr("Driver").attr("for_session"));
}
