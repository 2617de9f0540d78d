// URLs of the WebSocket client: ws:// and wss:// targets (ParseWsUrl), the target's description,
// proxy URLs, and HTTPS_PROXY / NO_PROXY from the environment.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>

#include <asio.hpp>

#include "ws/websocket.hpp"
#include "ws/websocket_internal.hpp"

namespace sessionturn::ws {

namespace ws_detail {

Result<ProxyUrl> ParseProxyUrl(std::string_view url) {
  std::string_view rest = url;
  if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
  } else if (rest.find("://") != std::string_view::npos) {
    return Fail(Errc::invalid_argument, "proxy URL \"" + std::string(url) +
                                            "\": only http:// proxies are supported (the tunnel itself carries TLS)");
  }
  std::size_t slash = rest.find('/');
  if (slash != std::string_view::npos) rest = rest.substr(0, slash);
  ProxyUrl out;
  std::size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    std::string cred(rest.substr(0, at));
    out.authorization = "Basic " + Base64(reinterpret_cast<const unsigned char*>(cred.data()), cred.size());
    rest.remove_prefix(at + 1);
  }
  std::string_view host = rest;
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    std::size_t close = rest.find(']');
    if (close == std::string_view::npos) return Fail(Errc::invalid_argument, "proxy URL has a bad IPv6 host");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return Fail(Errc::invalid_argument, "proxy URL \"" + std::string(url) + "\" has no host");
  out.host = std::string(host);
  int p = port.empty() ? 80 : std::atoi(std::string(port).c_str());
  if (p <= 0 || p > 65535) return Fail(Errc::invalid_argument, "proxy URL \"" + std::string(url) + "\" has a bad port");
  out.port = static_cast<std::uint16_t>(p);
  return out;
}

}  // namespace ws_detail

using namespace ws_detail;

namespace {

// The URL for an error message, without what may be secret: the query (Slack's ticket) and userinfo.
std::string Redacted(std::string_view url) {
  std::string out(url.substr(0, std::min<std::size_t>(url.find_first_of("?#"), 200)));
  const std::size_t scheme = out.find("://");
  const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  const std::size_t at = out.find('@', start);
  if (at != std::string::npos && at < out.find('/', start)) out.replace(start, at - start, "***");
  return out;
}

Error BadUrl(std::string_view url, const std::string& why) {
  return Error(Errc::invalid_argument, "WebSocket URL \"" + Redacted(url) + "\": " + why);
}

// The bytes a request line may carry as they are: visible ASCII. Anything else must be
// percent-encoded by the caller (a space or CR/LF would end the line: header injection).
bool RequestTargetSafe(std::string_view s) {
  for (unsigned char c : s)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

// A registered name (RFC 3986 §3.2.2, as DNS uses it) or an IPv4 literal.
bool HostNameValid(std::string_view host) {
  for (unsigned char c : host)
    if (!std::isalnum(c) && c != '-' && c != '.' && c != '_' && c != '~') return false;
  return true;
}

// "host", "host:port", "[v6]" or "[v6]:port" into the target's host and port.
Status ParseAuthority(std::string_view url, std::string_view authority, WsTarget& target) {
  if (authority.find('@') != std::string_view::npos)
    return Fail(BadUrl(url, "userinfo (user@ or user:password@) is not allowed; send credentials in a header"));
  std::string_view host = authority;
  std::optional<std::string_view> port;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return Fail(BadUrl(url, "the IPv6 host has no closing ']'"));
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') return Fail(BadUrl(url, "unexpected characters after the IPv6 host"));
    if (!after.empty()) port = after.substr(1);
    std::error_code ec;
    (void)asio::ip::make_address_v6(std::string(host), ec);
    if (host.empty() || ec)
      return Fail(BadUrl(url, "\"" + std::string(host) + "\" is not an IPv6 address"));
  } else {
    const std::size_t colon = authority.find(':');
    if (colon != std::string_view::npos) {
      if (authority.find(':', colon + 1) != std::string_view::npos)
        return Fail(BadUrl(url, "an IPv6 host must be in brackets ([::1])"));
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    if (host.empty()) return Fail(BadUrl(url, "the host is empty"));
    if (!HostNameValid(host)) return Fail(BadUrl(url, "the host \"" + std::string(host) + "\" has invalid characters"));
  }
  target.host = std::string(host);
  if (port) {
    const bool digits = !port->empty() && port->size() <= 5 &&
                        port->find_first_not_of("0123456789") == std::string_view::npos;
    const long value = digits ? std::strtol(std::string(*port).c_str(), nullptr, 10) : 0;
    if (value < 1 || value > 65535)
      return Fail(BadUrl(url, "bad port \"" + std::string(port->substr(0, 20)) + "\" (1 to 65535)"));
    target.port = static_cast<std::uint16_t>(value);
  }
  return {};
}

}  // namespace

Result<WsTarget> ParseWsUrl(std::string_view url) {
  WsTarget target;
  std::string_view rest = url;
  const std::size_t scheme_end = rest.find("://");
  const std::string scheme = scheme_end == std::string_view::npos ? std::string() : Lower(rest.substr(0, scheme_end));
  if (scheme == "wss") {
    target.use_tls = true;
    target.port = 443;
  } else if (scheme == "ws") {
    target.use_tls = false;
    target.port = 80;
  } else {
    return Fail(BadUrl(url, "the scheme must be ws:// or wss://"));
  }
  rest.remove_prefix(scheme_end + 3);
  // RFC 6455 §3: a WebSocket URI has no fragment.
  if (rest.find('#') != std::string_view::npos) return Fail(BadUrl(url, "a fragment (#...) is not allowed"));
  const std::size_t path_start = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_start);
  if (auto st = ParseAuthority(url, authority, target); !st) return Fail(st.error());
  std::string_view path = path_start == std::string_view::npos ? std::string_view() : rest.substr(path_start);
  if (!RequestTargetSafe(path))
    return Fail(BadUrl(url, "the path or query holds a space, a control or a non-ASCII byte (percent-encode it)"));
  target.path = path.empty() || path.front() == '?' ? "/" + std::string(path) : std::string(path);
  return target;
}

std::string WsTarget::Describe() const {
  std::string p = path.substr(0, path.find('?'));
  return std::string(use_tls ? "wss://" : "ws://") + HostPort(host, port) + p;
}

bool NoProxyMatches(std::string_view no_proxy, std::string_view host_in) {
  std::string host = Lower(host_in);
  std::size_t start = 0;
  while (start <= no_proxy.size()) {
    std::size_t comma = no_proxy.find(',', start);
    if (comma == std::string_view::npos) comma = no_proxy.size();
    std::string entry = Lower(Trim(no_proxy.substr(start, comma - start)));
    start = comma + 1;
    if (entry.empty()) continue;
    if (entry == "*") return true;
    // Entries may carry a port ("host:port"); we match on the host only, as curl does.
    if (std::size_t colon = entry.rfind(':'); colon != std::string::npos && entry.find(':') == colon)
      entry = entry.substr(0, colon);
    if (!entry.empty() && entry.front() == '.') entry.erase(0, 1);
    if (host == entry) return true;
    if (host.size() > entry.size() && host.compare(host.size() - entry.size(), entry.size(), entry) == 0 &&
        host[host.size() - entry.size() - 1] == '.')
      return true;
    // CIDR entries ("10.0.0.0/8") for IPv4 literals.
    if (std::size_t slash = entry.find('/'); slash != std::string::npos && IsIpLiteral(host)) {
      std::error_code ec1, ec2;
      auto net = asio::ip::make_address(entry.substr(0, slash), ec1);
      auto addr = asio::ip::make_address(host, ec2);
      int bits = std::atoi(entry.c_str() + slash + 1);
      if (!ec1 && !ec2 && net.is_v4() && addr.is_v4() && bits >= 0 && bits <= 32) {
        std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
        if ((net.to_v4().to_uint() & mask) == (addr.to_v4().to_uint() & mask)) return true;
      }
    }
  }
  return false;
}

std::string ProxyFromEnvironment(std::string_view host, bool use_tls) {
  auto env = [](const char* upper, const char* lower) -> std::string {
    if (const char* v = std::getenv(lower); v && *v) return v;
    if (const char* v = std::getenv(upper); v && *v) return v;
    return {};
  };
  std::string proxy = use_tls ? env("HTTPS_PROXY", "https_proxy") : env("HTTP_PROXY", "http_proxy");
  if (proxy.empty()) return {};
  if (NoProxyMatches(env("NO_PROXY", "no_proxy"), host)) return {};
  return proxy;
}

}  // namespace sessionturn::ws
