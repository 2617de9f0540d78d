// Shared between the extension's translation units (module.cpp: the driver; errors.cpp; local_runtime.cpp;
// kube.cpp): error mapping, making a Python Driver over a connector, and each part's registration.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/router.hpp"

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
  // Joins the workers without the GIL (they may be waiting for it in a callback); on one of its own
  // workers (a Python garbage collection there), on a thread of its own instead.
  ~LibContext();
  LibContext(const LibContext&) = delete;
  LibContext& operator=(const LibContext&) = delete;
  Context& get() { return *ctx_; }
  int threads() const { return ctx_->threads(); }
  // Stops the workers (sessionturn stops every Context at interpreter exit, before finalization).
  void Stop();

 private:
  std::unique_ptr<Context> ctx_;
};

// True while the interpreter can run Python: not finalizing (a thread that takes the GIL then is torn
// down under C++ frames) and not finalized. Objects dropped otherwise are leaked on purpose.
inline bool PythonAlive() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

// A Python object held by C++ and dropped, with the GIL, wherever the last holder goes.
class PyHeld {
 public:
  explicit PyHeld(py::object o) : o_(std::move(o)) {}
  ~PyHeld() {
    if (!PythonAlive()) {
      o_.release();  // the interpreter is gone: leaking beats crashing
      return;
    }
    py::gil_scoped_acquire gil;
    o_ = py::object();
  }
  PyHeld(const PyHeld&) = delete;
  PyHeld& operator=(const PyHeld&) = delete;
  const py::object& get() const { return o_; }

 private:
  py::object o_;
};

// A value a worker hands to a Python call that waits for it. Wait() waits in slices without the GIL,
// so Ctrl-C interrupts it (the work goes on): the value, or nullopt when `timeout` passed first.
template <typename T>
class Handoff {
 public:
  void Set(T v) {
    {
      std::lock_guard lock(mu_);
      value_ = std::move(v);
    }
    cv_.notify_all();
  }
  std::optional<T> Wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout
                                  : std::chrono::steady_clock::time_point::max();
    for (;;) {
      {
        py::gil_scoped_release release;
        std::unique_lock lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return value_.has_value(); }))
          return std::move(value_);
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<T> value_;
};

// Destroys `owned` (a C++ object whose destructor may wait for `keep`'s workers), without the GIL. Called
// with the GIL. On one of those workers (a Python garbage collection can run there) waiting would wait
// for itself: then a thread of its own destroys it, keeping the Context alive until it has.
template <typename P>
void DestroyOffWorker(std::shared_ptr<LibContext> keep, P owned) {
  if (!owned) return;
  if (!keep->get().InWorkerThread()) {
    py::gil_scoped_release release;
    owned.reset();
    return;
  }
  std::thread([keep = std::move(keep), owned = std::move(owned)]() mutable {
    owned.reset();
    keep.reset();  // after it: the object's Context outlives it
  }).detach();
}

// `context` when it is a sessionturn.Context, else (None) the process's default one
// (sessionturn.default_context()). The object returned keeps it alive.
py::object ContextOrDefault(py::object context);

// A Python `Driver` on `context` (None: the default one) over the connector `make` builds on it.
py::object NewDriver(const std::function<std::shared_ptr<Connector>(Context&)>& make, std::string describe,
                     py::object context = py::none());

// A chat adapter implemented in C++ (the built-in TelegramAdapter, SlackAdapter; chat.cpp) given to a
// Python Router instead of an adapter written in Python.
class NativeAdapter {
 public:
  virtual ~NativeAdapter() = default;
  virtual std::shared_ptr<ChatAdapter> Shared() = 0;
  virtual Context& GetContext() = 0;
  // Stops the inbound side (polling, Socket Mode, deliveries still on their way from a webhook or an
  // Events API request); off a worker it returns once nothing more reaches the router. Without the GIL.
  virtual std::function<void()> InboundStop() = 0;
  bool driven = false;  // a live Router drives it (one at a time): set and cleared by router.cpp
};

// The C++ Router of a Python `_Router` (router.cpp) that drives `adapter`, for its inbound side. The
// router is held by the pointer returned (a request in flight keeps it alive), and the adapter's
// InboundStop() runs, off the Context's workers and without the GIL, before the router is destroyed:
// no delivery reaches a router that is gone. TypeError for something else; UnavailableError once
// closed; ValueError when the router does not drive this adapter.
std::shared_ptr<Router> RouterFor(py::handle router, NativeAdapter& adapter);

// Each defines its part of the module (errors.cpp, local_runtime.cpp, kube.cpp).
void RegisterErrors(py::module_& m);
void RegisterLocalRuntime(py::module_& m);
void RegisterKube(py::module_& m);
void RegisterRouter(py::module_& m);  // router.cpp: Context, backends, Router, helpers
void RegisterChat(py::module_& m);    // chat.cpp: TelegramAdapter, SlackAdapter, the bridge programs

}  // namespace sessionturn::python
