// The HTTP server's wire helpers: responses on the wire, listen addresses, peer names.
#include <strings.h>

#include <ctime>

#include "http/server_impl.hpp"

namespace sessionturn {

namespace {

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

bool IsFieldValue(std::string_view s) {
  for (unsigned char c : s) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  return true;
}

std::string HttpDate() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

}  // namespace

std::string ServerRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (EqualsNoCase(key, name)) return value;
  }
  return "";
}

namespace http {

bool WantsClose(const ServerResponse& response) {
  for (const auto& [name, value] : response.headers) {
    if (EqualsNoCase(name, "connection") && EqualsNoCase(value, "close")) return true;
  }
  return false;
}

ServerResponse PlainResponse(int status, std::string text) {
  ServerResponse r;
  r.status = status;
  r.headers = {{"Content-Type", "text/plain; charset=utf-8"}};
  r.body = std::move(text);
  r.body += '\n';
  return r;
}

bool SerializeResponse(const ServerResponse& response, const Framing& framing, std::string& out,
                       std::string& problem) {
  const int status = response.status;
  if (status < 200 || status > 599) {
    problem = "status " + std::to_string(status) + " is not a final status (200-599)";
    return false;
  }
  for (const auto& [name, value] : response.headers) {
    if (!http::IsHttpToken(name)) {
      problem = "header name '" + name + "' is not an HTTP token";
      return false;
    }
    if (!IsFieldValue(value)) {
      problem = "the value of header " + name + " holds CR, LF or NUL";  // not the value: it may be a secret
      return false;
    }
  }
  // RFC 9110 §8.6, §15.3.5, §15.4.5: 204 has no Content-Length; neither carries a body, nor does 304.
  const bool no_content = status == 204 || status == 304;
  const bool send_body = !framing.head && !no_content;
  out.clear();
  out.reserve(256 + response.body.size());
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += http_status_str(static_cast<http_status>(status));
  out += "\r\nDate: ";
  out += HttpDate();
  out += "\r\n";
  for (const auto& [name, value] : response.headers) {
    if (EqualsNoCase(name, "content-length") || EqualsNoCase(name, "transfer-encoding") ||
        EqualsNoCase(name, "connection") || EqualsNoCase(name, "date")) {
      continue;
    }
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (status != 204 && !(status == 304 && response.body.empty())) {
    // For HEAD (and 304) the length of the body a GET would get: that is what the client may use.
    out += "Content-Length: ";
    out += std::to_string(response.body.size());
    out += "\r\n";
  }
  if (framing.close) {
    out += "Connection: close\r\n";
  } else if (framing.http10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  if (send_body) out += response.body;
  return true;
}

std::string EndpointString(const asio::ip::tcp::endpoint& endpoint) {
  const auto address = endpoint.address();
  const std::string host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  return host + ":" + std::to_string(endpoint.port());
}

Result<asio::ip::tcp::endpoint> ParseListenAddress(const std::string& listen) {
  auto bad = [&](const std::string& why) {
    return Fail(Errc::invalid_argument, "listen address '" + listen +
                                            "' is not ADDR:PORT with an IP address (\"127.0.0.1:8080\", "
                                            "\"[::1]:8080\"): " + why);
  };
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  asio::error_code ec;
  asio::ip::address address;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    address = asio::ip::make_address_v6(host.substr(1, host.size() - 2), ec);
  } else if (host.find(':') != std::string::npos) {
    return bad("an IPv6 address goes in brackets");
  } else if (host.empty()) {
    return bad("no address (\"0.0.0.0\" listens on every IPv4 interface)");
  } else {
    address = asio::ip::make_address_v4(host, ec);
  }
  if (ec) return bad("'" + host + "' is not an IP address");
  return asio::ip::tcp::endpoint(address, static_cast<unsigned short>(std::stoul(port)));
}

}  // namespace http
}  // namespace sessionturn
