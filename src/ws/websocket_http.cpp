// Small helpers of the WebSocket client (strings, base64, addresses, OpenSSL's error queue) and its
// HTTP side: header tokens, and a refused upgrade turned into an Error. The response parser is
// response_parser.cpp; URLs and proxies are ws_url.cpp.
#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <asio.hpp>
#include <nlohmann/json.hpp>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "json_fields.hpp"
#include "ws/websocket.hpp"
#include "ws/websocket_internal.hpp"

namespace sessionturn::ws {

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
  if (!json.is_discarded() && json_fields::String(json, "kind") == "Status") {
    std::string text = json_fields::String(json, "message");
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

}  // namespace ws_detail

}  // namespace sessionturn::ws
