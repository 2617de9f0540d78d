// TEMPORARY shim until the WebSocket client moves here from src/kube (branch ws-move replaces this file).
#pragma once
#include <charconv>
#include "kube/websocket.hpp"
namespace sessionturn::ws {
using kube::ProxyFromEnvironment;
using kube::WebSocket;
using kube::WsTarget;
using kube::WsTls;
inline Result<WsTarget> ParseWsUrl(std::string_view url) {
  WsTarget t;
  std::string_view rest;
  if (url.rfind("wss://", 0) == 0) {
    rest = url.substr(6);
    t.use_tls = true;
    t.port = 443;
  } else if (url.rfind("ws://", 0) == 0) {
    rest = url.substr(5);
    t.use_tls = false;
    t.port = 80;
  } else {
    return Fail(Errc::invalid_argument, "not a ws:// or wss:// URL: " + std::string(url));
  }
  const auto slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  t.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (!t.path.empty() && t.path[0] == '?') t.path = "/" + t.path;
  const auto colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    unsigned p = 0;
    auto sv = authority.substr(colon + 1);
    auto [e, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), p);
    if (ec != std::errc() || e != sv.data() + sv.size() || p == 0 || p > 65535) {
      return Fail(Errc::invalid_argument, "bad port in " + std::string(url));
    }
    t.port = static_cast<std::uint16_t>(p);
    authority = authority.substr(0, colon);
  }
  if (authority.empty()) return Fail(Errc::invalid_argument, "no host in " + std::string(url));
  t.host = std::string(authority);
  return t;
}
}  // namespace sessionturn::ws
