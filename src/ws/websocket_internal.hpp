// Helpers shared by the WebSocket client's translation units (ws_connect.cpp, ws_handshake.cpp and
// ws_connection.cpp: the connection; websocket_http.cpp: helpers and refusals; ws_url.cpp: URLs and
// proxies; response_parser.cpp: HTTP responses; websocket_codec.cpp: frames; websocket_tls.cpp: TLS
// contexts). Internal to src/ws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sessionturn/error.hpp"
#include "ws/response_parser.hpp"

namespace sessionturn::ws::ws_detail {

// How much one read asks the socket for: large enough that a full exec line rarely needs many
// reads, small enough to keep per-connection memory modest. WsReader compacts its buffer past it.
inline constexpr std::size_t kReadChunkBytes = 64u << 10;

std::string Lower(std::string_view s);
std::string_view Trim(std::string_view s);  // spaces, tabs (and a trailing CR)
std::string Base64(const unsigned char* data, std::size_t n);
bool IsIpLiteral(std::string_view host);
// "host:port", with brackets around an IPv6 literal.
std::string HostPort(const std::string& host, std::uint16_t port);
// The queued OpenSSL errors, joined, and the queue cleared (so they do not leak into a later call).
std::string DrainOpenSslErrors();

// True when the comma-separated header value holds `token` (case-insensitive).
bool HeaderHasToken(const std::string& value, std::string_view token);
// Turns a refused upgrade into an Error: the status line, plus the Kubernetes Status message if the
// body is one (else the body's start), with 401/403/404 mapped to their own codes.
Error RefusedUpgrade(const std::string& where, const HttpHead& head, std::string_view body);

struct ProxyUrl {
  std::string host;
  std::uint16_t port = 0;
  std::string authorization;  // "Basic ..." when the URL carries user:password
};

Result<ProxyUrl> ParseProxyUrl(std::string_view url);

}  // namespace sessionturn::ws::ws_detail
