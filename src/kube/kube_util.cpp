#include "kube/kube_util.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace sessionturn::kube_internal {

namespace {
constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

Result<std::string> Base64Decode(std::string_view text) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  int padding = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    int v = Value(c);
    if (v < 0 || padding > 0) {
      return Fail(Errc::invalid_argument, "invalid base64: unexpected character at offset " + std::to_string(i));
    }
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  // 6 leftover bits cannot come from whole bytes: the input was truncated.
  if (bits >= 6 || padding > 2) return Fail(Errc::invalid_argument, "invalid base64: truncated input");
  return out;
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    buffer = (buffer << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(buffer >> bits) & 0x3F]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(buffer << (6 - bits)) & 0x3F]);
  while (out.size() % 4 != 0) out.push_back('=');
  return out;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(Errc::io_error, "cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Fail(Errc::io_error, "cannot read " + path + ": read error");
  return ss.str();
}

Result<long long> ParseRfc3339(std::string_view text) {
  std::tm tm{};
  int year = 0, mon = 0, day = 0, hour = 0, min = 0, sec = 0;
  std::string s(text);
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &year, &mon, &day, &hour, &min, &sec, &consumed) < 6 ||
      consumed <= 0) {
    return Fail(Errc::invalid_argument, "not an RFC 3339 time: \"" + s + "\"");
  }
  std::size_t pos = static_cast<std::size_t>(consumed);
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
  }
  long long offset = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh = 0, om = 0;
    if (std::sscanf(s.c_str() + pos + 1, "%2d:%2d", &oh, &om) != 2) {
      return Fail(Errc::invalid_argument, "not an RFC 3339 time (bad offset): \"" + s + "\"");
    }
    offset = (s[pos] == '+' ? 1 : -1) * (oh * 3600LL + om * 60LL);
    pos += 6;
  } else {
    return Fail(Errc::invalid_argument, "not an RFC 3339 time (no zone): \"" + s + "\"");
  }
  if (pos != s.size()) return Fail(Errc::invalid_argument, "not an RFC 3339 time: \"" + s + "\"");
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  return static_cast<long long>(timegm(&tm)) - offset;
}

std::string Str(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

}  // namespace sessionturn::kube_internal
