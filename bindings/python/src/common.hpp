// Shared between the extension's translation units (the driver surface and the Kubernetes surface):
// error mapping and making a Python Driver over a connector.
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

// Raises the sessionturn.Error subclass for error.code (with code and http_status attributes).
[[noreturn]] void Raise(const Error& error);

// A Python `Driver` with its own Context over the connector `make` builds on that Context.
py::object NewDriver(const std::function<std::shared_ptr<Connector>(Context&)>& make, std::string describe);

void RegisterKube(py::module_& m);

}  // namespace sessionturn::python
