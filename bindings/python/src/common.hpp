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

// A Python `Driver` with its own Context over the connector `make` builds on that Context.
py::object NewDriver(const std::function<std::shared_ptr<Connector>(Context&)>& make, std::string describe);

// Each defines its part of the module (errors.cpp, local_runtime.cpp, kube.cpp).
void RegisterErrors(py::module_& m);
void RegisterLocalRuntime(py::module_& m);
void RegisterKube(py::module_& m);
void RegisterRouter(py::module_& m);  // router.cpp: Context, backends, Router, helpers

}  // namespace sessionturn::python
