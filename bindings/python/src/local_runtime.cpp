// `sessionturn.LocalRuntime`: the in-process Session runtime (testing/local_runtime.hpp) for tests
// and demos, as a context manager.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "common.hpp"
#include "sessionturn/connection.hpp"
#include "sessionturn/testing/local_runtime.hpp"

namespace py = pybind11;
namespace st = sessionturn;

namespace {

using sessionturn::python::Raise;

class PyLocalRuntime {
 public:
  PyLocalRuntime(std::optional<std::string> socket_path, const std::string& provider,
                 std::optional<std::string> state_dir, bool allow_shell, double echo_delay,
                 const std::string& session_name) {
    st::testing::LocalRuntimeOptions options;
    if (socket_path) {
      options.socket_path = *socket_path;
    } else {
      // A private directory of our own (0700 from mkdtemp), removed by stop().
      std::string pattern = (std::filesystem::temp_directory_path() / "sessionturn-py-XXXXXX").string();
      if (!mkdtemp(pattern.data())) {
        Raise(st::Error(st::Errc::io_error, "cannot create a temporary directory for the runtime socket"));
      }
      temp_dir_ = pattern;
      options.socket_path = temp_dir_ + "/runtime.sock";
    }
    options.provider = provider;
    if (state_dir) options.state_dir = *state_dir;
    options.allow_shell = allow_shell;
    options.session_name = session_name;
    if (echo_delay < 0) throw py::value_error("echo_delay must be >= 0");
    options.echo_delay = std::chrono::milliseconds(static_cast<std::int64_t>(echo_delay * 1000.0));
    st::Result<std::unique_ptr<st::testing::LocalRuntime>> runtime;
    {
      py::gil_scoped_release release;
      runtime = st::testing::LocalRuntime::Start(std::move(options));
    }
    if (!runtime) {
      RemoveTempDir();
      Raise(runtime.error());
    }
    runtime_ = std::move(*runtime);
    socket_path_ = runtime_->socket_path();
  }
  ~PyLocalRuntime() {
    py::gil_scoped_release release;
    StopNoGil();
  }

  void Stop() {
    py::gil_scoped_release release;
    StopNoGil();
  }
  const std::string& socket_path() const { return socket_path_; }
  std::string journal_id() const { return runtime_ ? runtime_->journal_id() : std::string(); }
  std::int64_t last_event_id() const { return runtime_ ? runtime_->last_event_id() : 0; }
  std::size_t connection_count() const { return runtime_ ? runtime_->ConnectionCount() : 0; }
  bool running() const { return runtime_ != nullptr; }

 private:
  void StopNoGil() {
    if (runtime_) {
      runtime_->Stop();
      runtime_.reset();
    }
    RemoveTempDir();
  }
  void RemoveTempDir() {
    if (temp_dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
    temp_dir_.clear();
  }

  std::unique_ptr<st::testing::LocalRuntime> runtime_;
  std::string socket_path_;
  std::string temp_dir_;
};
}  // namespace

void sessionturn::python::RegisterLocalRuntime(py::module_& m) {
  py::class_<PyLocalRuntime>(m, "LocalRuntime",
                             "An in-process Session runtime for tests and demos (a context manager).")
      .def(py::init<std::optional<std::string>, const std::string&, std::optional<std::string>, bool, double,
                    const std::string&>(),
           py::arg("socket_path") = py::none(), py::kw_only(), py::arg("provider") = "echo",
           py::arg("state_dir") = py::none(), py::arg("allow_shell") = false, py::arg("echo_delay") = 0.02,
           py::arg("session_name") = "local")
      .def("stop", &PyLocalRuntime::Stop)
      .def("__enter__", [](PyLocalRuntime& r) -> PyLocalRuntime& { return r; })
      .def("__exit__", [](PyLocalRuntime& r, py::object, py::object, py::object) { r.Stop(); })
      .def_property_readonly("socket_path", &PyLocalRuntime::socket_path)
      .def_property_readonly("journal_id", &PyLocalRuntime::journal_id)
      .def_property_readonly("last_event_id", &PyLocalRuntime::last_event_id)
      .def_property_readonly("connection_count", &PyLocalRuntime::connection_count)
      .def_property_readonly("running", &PyLocalRuntime::running)
      .def("driver",
           [](const PyLocalRuntime& r) {
             const std::string path = r.socket_path();
             return sessionturn::python::NewDriver(
                 [path](st::Context& context) { return st::MakeUnixConnector(context, path); }, "unix:" + path);
           },
           "A driver connected to this runtime's socket.");
}
