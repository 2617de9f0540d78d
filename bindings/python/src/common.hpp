// Shared between the extension's translation units (module.cpp: the driver; errors.cpp; local_runtime.cpp;
// kube.cpp): error mapping, making a Python Driver over a connector, and each part's registration.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"

namespace sessionturn::python {

namespace py = pybind11;

// The sessionturn.Error subclass instance for error.code, not raised (code and http_status set).
py::object MakeException(const Error& error);
// Raises it.
[[noreturn]] void Raise(const Error& error);

// sessionturn.Context: the library's event loop and its workers, shared by the drivers, backends and
// routers given it (router.cpp registers it).
class LibContext {
 public:
  explicit LibContext(int threads);
  ~LibContext();  // without the GIL: its workers may be waiting for it in a callback
  LibContext(const LibContext&) = delete;
  LibContext& operator=(const LibContext&) = delete;
  Context& get() { return *ctx_; }
  int threads() const { return ctx_->threads(); }

 private:
  std::unique_ptr<Context> ctx_;
};

// `context` when it is a sessionturn.Context, else (None) the process's default one
// (sessionturn.default_context()). The object returned keeps it alive.
py::object ContextOrDefault(py::object context);

// A Python `Driver` on `context` (None: the default one) over the connector `make` builds on it.
py::object NewDriver(const std::function<std::shared_ptr<Connector>(Context&)>& make, std::string describe,
                     py::object context = py::none());

// Each defines its part of the module (errors.cpp, local_runtime.cpp, kube.cpp).
void RegisterErrors(py::module_& m);
void RegisterLocalRuntime(py::module_& m);
void RegisterKube(py::module_& m);
void RegisterRouter(py::module_& m);  // router.cpp: Context, backends, Router, helpers

}  // namespace sessionturn::python
