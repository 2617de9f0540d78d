// Internals shared by the C ABI's translation units: the handle types holding the C++ objects and
// the exception firewall (Guard) every exported function body goes through. Not installed.
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>

#include "sessionturn.h"
#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"

namespace st = sessionturn;

struct st_context {
  std::unique_ptr<st::Context> context;
};

struct st_driver {
  st::Context* context = nullptr;
  std::unique_ptr<st::Driver> driver;
};

namespace sessionturn::capi {


// ---- The firewall ----------------------------------------------------------------------------------

struct LastError {
  std::string message;
  int http_status = 0;
};

// This thread's last error (one per thread, defined in sessionturn_c.cpp).
LastError& ThreadLastError();

inline void SetLastError(st::Errc code, std::string_view message, int http_status = 0) noexcept {
  try {
    auto& last = ThreadLastError();
    last.message.assign(message);
    last.http_status = http_status;
    (void)code;
  } catch (...) {
    // Out of memory while recording an error: the status still says what kind of failure it was.
  }
}

inline st_status ToStatus(st::Errc code) noexcept {
  const int value = static_cast<int>(code);
  if (value <= 0) return ST_OK;
  if (value > static_cast<int>(st::Errc::internal)) return ST_E_INTERNAL;
  return -value;
}

inline st_status Record(const st::Error& error) noexcept {
  SetLastError(error.code, error.message, error.http_status);
  const st_status status = ToStatus(error.code);
  return status == ST_OK ? ST_E_INTERNAL : status;
}

inline st::Error InvalidArgument(std::string message) { return st::Error(st::Errc::invalid_argument, std::move(message)); }

// The single guard every exported body goes through. `fn` returns st::Status (mapped to a status and
// the last error) or a plain value; `fallback` is what a value-returning function yields when `fn`
// throws. `name` prefixes the messages of unexpected failures so a bug report says where.
template <typename Fn, typename R = std::invoke_result_t<Fn>>
R Guard(const char* name, R fallback, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    SetLastError(st::Errc::internal, std::string(name) + ": out of memory");
  } catch (const std::exception& e) {
    SetLastError(st::Errc::internal, std::string(name) + ": unexpected C++ exception: " + e.what());
  } catch (...) {
    SetLastError(st::Errc::internal, std::string(name) + ": unexpected unknown exception");
  }
  return fallback;
}

// The status flavour of the guard: fn returns st::Status.
template <typename Fn>
st_status GuardStatus(const char* name, Fn&& fn) noexcept {
  return Guard(name, static_cast<st_status>(ST_E_INTERNAL), [&]() -> st_status {
    st::Status status = fn();
    if (status) return ST_OK;
    return Record(status.error());
  });
}

// User callbacks are C, but a C++ caller could hand us one that throws; it must not unwind into the
// Context's worker.
template <typename Fn>
void CallUser(st::Context* context, const char* what, Fn&& fn) noexcept {
  try {
    fn();
  } catch (...) {
    try {
      if (context) context->Log(st::LogLevel::error, std::string(what) + " callback threw; ignored");
    } catch (...) {
    }
  }
}

inline std::chrono::milliseconds OrDefault(int64_t ms, std::chrono::milliseconds fallback) {
  return ms > 0 ? std::chrono::milliseconds(ms) : fallback;
}

// Options structs carry a version so fields can be appended; a version we do not know is refused
// rather than read past the caller's struct.
inline st::Status CheckVersion(unsigned int version, unsigned int current, const char* what) {
  if (version == 0 || version > current) {
    return st::Fail(st::Errc::invalid_argument,
                    std::string(what) + ".version is " + std::to_string(version) + "; this library knows 1.." +
                        std::to_string(current) + " (initialize it with the _INIT macro)");
  }
  return {};
}

inline st::Status CheckDriver(const st_driver* driver) {
  if (!driver || !driver->driver) return st::Fail(st::Errc::invalid_argument, "driver is NULL");
  return {};
}

// A `char **out` string: malloc'd, so the caller frees it with st_string_free (std::free).
inline char* CopyString(const std::string& text) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (!copy) throw std::bad_alloc();
  std::memcpy(copy, text.c_str(), text.size() + 1);
  return copy;
}

// A C string argument that may be NULL, as text ("" for NULL).
inline std::string Str(const char* s) { return s ? std::string(s) : std::string(); }

// Makes a driver handle over `connector` (defined in sessionturn_c.cpp, beside the other constructors).
st::Status NewDriver(st_driver** out, st_context* context, std::shared_ptr<st::Connector> connector);

}  // namespace sessionturn::capi
