// Helpers shared by the WebSocket client's translation units (websocket.cpp: the connection;
// websocket_http.cpp: HTTP heads and proxies; websocket_codec.cpp: frames; websocket_tls.cpp: TLS
// contexts). Internal to src/kube.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "sessionturn/error.hpp"

namespace sessionturn::kube::ws_detail {

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

struct HttpHead {
  int status = 0;
  std::string status_line;
  std::map<std::string, std::string> headers;  // lower-case names; repeated headers joined by ", "

  std::string Get(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

Result<HttpHead> ParseHttpHead(std::string_view head);
// True when the comma-separated header value holds `token` (case-insensitive).
bool HeaderHasToken(const std::string& value, std::string_view token);
// Turns a refused upgrade into an Error: the status line, plus the Kubernetes Status message if the
// body is one, with 401/403/404 mapped to their own codes.
Error RefusedUpgrade(const std::string& where, const HttpHead& head, std::string_view body);
// The body of a chunked transfer, as far as it is complete.
std::string Dechunk(std::string_view in);

struct ProxyUrl {
  std::string host;
  std::uint16_t port = 0;
  std::string authorization;  // "Basic ..." when the URL carries user:password
};

Result<ProxyUrl> ParseProxyUrl(std::string_view url);

}  // namespace sessionturn::kube::ws_detail
