#include "sessionturn/error.hpp"

namespace sessionturn {

std::string_view ToString(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::protocol_error: return "protocol_error";
    case Errc::connection_failed: return "connection_failed";
    case Errc::connection_lost: return "connection_lost";
    case Errc::timeout: return "timeout";
    case Errc::cancelled: return "cancelled";
    case Errc::rejected: return "rejected";
    case Errc::not_found: return "not_found";
    case Errc::unauthorized: return "unauthorized";
    case Errc::forbidden: return "forbidden";
    case Errc::conflict: return "conflict";
    case Errc::too_large: return "too_large";
    case Errc::unavailable: return "unavailable";
    case Errc::io_error: return "io_error";
    case Errc::would_block: return "would_block";
    case Errc::failed: return "failed";
    case Errc::internal: return "internal";
  }
  return "unknown";
}

std::string Error::ToString() const {
  std::string out(sessionturn::ToString(code));
  if (http_status != 0) out += " (HTTP " + std::to_string(http_status) + ")";
  if (!message.empty()) {
    out += ": ";
    out += message;
  }
  return out;
}

}  // namespace sessionturn
