// The HTTP side of the WebSocket client: response heads of the upgrade and of a proxy's CONNECT,
// refused upgrades as errors, proxy URLs and NO_PROXY. Split from websocket.cpp to keep the
// connection's state machine readable.
#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <asio.hpp>
#include <nlohmann/json.hpp>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "kube/websocket.hpp"
#include "kube/websocket_internal.hpp"

namespace sessionturn::kube {

namespace ws_detail {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string Base64(const unsigned char* data, std::size_t n) {
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(n));
  out.resize(static_cast<std::size_t>(len));
  return out;
}

bool IsIpLiteral(std::string_view host) {
  std::error_code ec;
  (void)asio::ip::make_address(std::string(host), ec);
  return !ec;
}

std::string HostPort(const std::string& host, std::uint16_t port) {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

std::string DrainOpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

Result<HttpHead> ParseHttpHead(std::string_view head) {
  HttpHead out;
  std::size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) return Fail(Errc::protocol_error, "malformed HTTP response");
  out.status_line = std::string(head.substr(0, eol));
  if (out.status_line.rfind("HTTP/1.", 0) != 0 || out.status_line.size() < 12)
    return Fail(Errc::protocol_error, "not an HTTP/1.x response: \"" + out.status_line.substr(0, 80) + "\"");
  out.status = std::atoi(out.status_line.c_str() + 9);
  std::size_t pos = eol + 2;
  while (pos < head.size()) {
    std::size_t end = head.find("\r\n", pos);
    if (end == std::string_view::npos) end = head.size();
    std::string_view line = head.substr(pos, end - pos);
    pos = end + 2;
    if (line.empty()) break;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = Lower(Trim(line.substr(0, colon)));
    std::string value(Trim(line.substr(colon + 1)));
    auto [it, inserted] = out.headers.emplace(name, value);
    if (!inserted) it->second += ", " + value;
  }
  return out;
}

bool HeaderHasToken(const std::string& value, std::string_view token) {
  std::string lower = Lower(value);
  std::string want = Lower(token);
  std::size_t start = 0;
  while (start <= lower.size()) {
    std::size_t comma = lower.find(',', start);
    if (comma == std::string::npos) comma = lower.size();
    if (Trim(std::string_view(lower).substr(start, comma - start)) == want) return true;
    start = comma + 1;
  }
  return false;
}

Error RefusedUpgrade(const std::string& where, const HttpHead& head, std::string_view body) {
  std::string message = "WebSocket upgrade to " + where + " refused: " + head.status_line;
  auto json = nlohmann::json::parse(body, nullptr, false);
  if (!json.is_discarded() && json.is_object() && json.value("kind", "") == "Status") {
    std::string text = json.value("message", "");
    if (!text.empty()) message += ": " + text;
  } else if (!body.empty()) {
    std::string text(Trim(body.substr(0, 200)));
    if (!text.empty()) message += ": " + text;
  }
  Errc code = Errc::connection_failed;
  if (head.status == 401) code = Errc::unauthorized;
  else if (head.status == 403) code = Errc::forbidden;
  else if (head.status == 404) code = Errc::not_found;
  else if (head.status == 429 || head.status >= 500) code = Errc::unavailable;
  return Error(code, message, head.status);
}

std::string Dechunk(std::string_view in) {
  std::string out;
  while (!in.empty()) {
    std::size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) break;
    std::size_t size = std::strtoul(std::string(in.substr(0, eol)).c_str(), nullptr, 16);
    in.remove_prefix(eol + 2);
    if (size == 0 || size > in.size()) break;
    out.append(in.substr(0, size));
    in.remove_prefix(std::min(in.size(), size + 2));
  }
  return out;
}

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

}  // namespace sessionturn::kube
