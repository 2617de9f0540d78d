// Errors and results for every sessionturn API.
// A failure is a value: `Result<T>` carries either the T or an `Error` whose code says what kind of
// failure it is and whose message says what failed and why, in words a user can act on.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

namespace sessionturn {

// Stable error codes. The C ABI mirrors them as negative `st_status` values, so only append.
enum class Errc : int {
  ok = 0,
  invalid_argument = 1,   // the caller passed something unusable (named in the message)
  protocol_error = 2,     // the peer sent something that breaks the wire contract
  connection_failed = 3,  // could not reach the runtime / API server
  connection_lost = 4,    // the stream dropped and could not be re-established
  timeout = 5,            // a deadline passed
  cancelled = 6,          // the caller cancelled
  rejected = 7,           // the runtime refused the request (its reason is the message)
  not_found = 8,          // HTTP 404 or a missing named thing
  unauthorized = 9,       // HTTP 401
  forbidden = 10,         // HTTP 403
  conflict = 11,          // HTTP 409
  too_large = 12,         // a bound was exceeded (line, queue, reply)
  unavailable = 13,       // temporarily unavailable (429/5xx, draining, suspended by owner)
  io_error = 14,          // local I/O (files, sockets, processes)
  would_block = 15,       // a blocking call was made on a Context worker thread
  failed = 16,            // the remote operation ran and failed (Session phase Failed, ...)
  internal = 17,          // a bug in sessionturn; please report it
};

// A short, stable, lower-case name for the code ("invalid_argument").
std::string_view ToString(Errc code) noexcept;

struct Error {
  Errc code = Errc::internal;
  std::string message;
  int http_status = 0;  // the HTTP status where there was one, else 0
  // When the peer said when to try again (HTTP 429/503 Retry-After, a chat platform's rate limit); 0: it did not.
  std::chrono::milliseconds retry_after{0};

  Error() = default;
  Error(Errc c, std::string msg, int http = 0) : code(c), message(std::move(msg)), http_status(http) {}

  // "timeout: turn did not complete within 60s"
  std::string ToString() const;
};

template <typename T>
using Result = tl::expected<T, Error>;

using Status = tl::expected<void, Error>;

// `return Fail(Errc::invalid_argument, "text must not be empty");`
inline tl::unexpected<Error> Fail(Errc code, std::string message, int http_status = 0) {
  return tl::unexpected<Error>(Error(code, std::move(message), http_status));
}
inline tl::unexpected<Error> Fail(Error error) { return tl::unexpected<Error>(std::move(error)); }

}  // namespace sessionturn
