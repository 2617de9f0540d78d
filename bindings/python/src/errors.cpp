// The exception classes of `sessionturn` (one per Errc, each also a standard exception where one
// fits) and the mapping from a C++ Error to them.
#include <pybind11/pybind11.h>

#include <map>
#include <string>

#include "common.hpp"
#include "sessionturn/error.hpp"

namespace py = pybind11;
namespace st = sessionturn;

namespace {

struct ErrorClasses {
  py::object base;
  std::map<st::Errc, py::object> by_code;
};

ErrorClasses& Errors() {
  static ErrorClasses* classes = new ErrorClasses();  // leaked on purpose: lives as long as the module
  return *classes;
}

py::object ErrorClassFor(st::Errc code) {
  auto& errors = Errors();
  auto it = errors.by_code.find(code);
  return it == errors.by_code.end() ? errors.base : it->second;
}

// The exception object for `error` (not raised): its class follows the code; it carries `code`
// ("timeout") and `http_status`.
}  // namespace

py::object sessionturn::python::MakeException(const st::Error& error) {
  py::object cls = ErrorClassFor(error.code);
  py::object exc = cls(error.message);
  exc.attr("code") = py::str(std::string(st::ToString(error.code)));
  exc.attr("http_status") = error.http_status;
  return exc;
}


[[noreturn]] void sessionturn::python::Raise(const st::Error& error) {
  py::object exc = MakeException(error);
  PyErr_SetObject(exc.get_type().ptr(), exc.ptr());
  throw py::error_already_set();
}

void sessionturn::python::RegisterErrors(py::module_& m) {
  auto& errors = Errors();
  auto make = [&](const char* name, py::tuple bases, const char* doc) {
    py::dict ns;
    ns["__doc__"] = doc;
    ns["__module__"] = "sessionturn";
    ns["code"] = py::str("");
    ns["http_status"] = 0;
    py::object cls = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(name, bases, ns);
    m.attr(name) = cls;
    return cls;
  };
  py::object builtins = py::module_::import("builtins");
  errors.base = make("Error", py::make_tuple(builtins.attr("Exception")),
                     "Base of every sessionturn error. Attributes: code (str, e.g. 'timeout'), http_status (int, 0 "
                     "when no HTTP was involved).");
  struct Spec {
    st::Errc code;
    const char* name;
    const char* builtin;  // an extra standard base, or nullptr
    const char* doc;
  };
  const Spec specs[] = {
      {st::Errc::invalid_argument, "InvalidArgumentError", "ValueError", "The caller passed something unusable."},
      {st::Errc::protocol_error, "ProtocolError", nullptr, "The runtime broke the wire contract."},
      {st::Errc::connection_failed, "ConnectionFailedError", "ConnectionError", "Could not reach the runtime."},
      {st::Errc::connection_lost, "ConnectionLostError", "ConnectionError",
       "The stream dropped and could not be re-established."},
      {st::Errc::timeout, "TimeoutError", "TimeoutError", "A deadline passed."},
      {st::Errc::cancelled, "CancelledError", nullptr, "The caller cancelled."},
      {st::Errc::rejected, "RejectedError", nullptr, "The runtime refused the request (its reason is the message)."},
      {st::Errc::not_found, "NotFoundError", nullptr, "HTTP 404 or a missing named thing."},
      {st::Errc::unauthorized, "UnauthorizedError", nullptr, "HTTP 401."},
      {st::Errc::forbidden, "ForbiddenError", nullptr, "HTTP 403."},
      {st::Errc::conflict, "ConflictError", nullptr, "HTTP 409."},
      {st::Errc::too_large, "TooLargeError", nullptr, "A bound was exceeded (line, queue, reply)."},
      {st::Errc::unavailable, "UnavailableError", nullptr, "Temporarily unavailable."},
      {st::Errc::io_error, "IoError", "OSError", "Local I/O failed (files, sockets, processes)."},
      {st::Errc::would_block, "WouldBlockError", nullptr, "A blocking call was made from a callback."},
      {st::Errc::failed, "FailedError", nullptr, "The remote operation ran and failed."},
      {st::Errc::internal, "InternalError", nullptr, "A bug in sessionturn; please report it."},
  };
  for (const auto& s : specs) {
    py::tuple bases = s.builtin ? py::make_tuple(errors.base, builtins.attr(s.builtin)) : py::make_tuple(errors.base);
    errors.by_code[s.code] = make(s.name, bases, s.doc);
  }
}
