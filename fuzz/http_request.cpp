// Fuzzes the HTTP server's RequestParser (request bytes are untrusted) the way the server drives it:
// requests taken one at a time, the rest fed again, no feeding past a request that ends the
// connection. Any split of the input gives the same requests and the same verdict as the whole
// (but 400 and 431 may trade places, see below);
// no body passes max_body_bytes, no request line and headers pass max_header_bytes; a verdict is
// one the server answers with; a failed parser stays failed.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "http/request_parser.hpp"

using sessionturn::http::ParsedRequest;
using sessionturn::http::RequestParser;

namespace {

std::string Describe(const ParsedRequest& r) {
  std::string out = r.method + "|" + r.target + "|" + r.path + "|" + r.query + "|";
  for (const auto& [name, value] : r.headers) out += name + ":" + value + "\n";
  out += "|" + r.body + "|" + std::to_string(r.http_major) + "." + std::to_string(r.http_minor);
  out += r.keep_alive ? "k" : "-";
  out += r.expect_continue ? "e" : "-";
  out += r.upgrade ? "u" : "-";
  return out;
}

// What the parser's bound counts (4 bytes of separators per line, the request line included).
std::size_t HeaderBytes(const ParsedRequest& r) {
  std::size_t n = 4 + r.target.size();
  for (const auto& [name, value] : r.headers) n += 4 + name.size() + value.size();
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  // Small bounds so the limit paths are reached; the first byte picks them.
  const std::size_t max_header = 32 + data[0] * 16u;
  const std::size_t max_body = data[0] * 8u;
  const std::size_t cut = (static_cast<std::size_t>(data[1]) << 8 | data[2]) % (size - 2);
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 3, size - 3);

  // Feeds the pieces in order as the server would and describes every request and the end.
  auto run = [&](const std::vector<std::string_view>& pieces) {
    RequestParser parser(max_header, max_body);
    std::vector<std::string> seen;
    std::string pending;
    bool ended = false;  // a request ended the connection: nothing more is fed
    for (auto piece : pieces) {
      if (ended || parser.state() == RequestParser::State::failed) break;
      pending.append(piece);
      while (!ended) {
        const std::size_t used = parser.Feed(pending);
        if (used > pending.size()) std::abort();
        pending.erase(0, used);
        if (parser.state() != RequestParser::State::complete) break;
        ParsedRequest r = parser.TakeRequest();
        if (r.body.size() > max_body) std::abort();
        if (HeaderBytes(r) > max_header) std::abort();
        if (r.path.empty() && r.method != "CONNECT") std::abort();
        ended = !r.keep_alive || r.upgrade;
        seen.push_back(Describe(r));
      }
    }
    if (parser.state() == RequestParser::State::failed) {
      const int status = parser.error_status();
      if (status != 400 && status != 413 && status != 417 && status != 431 && status != 505) std::abort();
      if (parser.error_message().empty()) std::abort();
      if (parser.Feed("GET / HTTP/1.1\r\nHost: h\r\n\r\n") != 0) std::abort();  // failed stays failed
      seen.push_back("failed " + std::to_string(status));
    } else {
      seen.push_back(parser.Started() ? "partial" : "between");
    }
    return seen;
  };

  const auto whole = run({bytes});
  auto same = [&](const std::vector<std::string>& other) {
    if (other == whole) return true;
    // One exception: a malformed byte past the header bound. http_parser hands over header bytes when
    // a buffer ends, so in small pieces the bound is crossed (431) before it reaches the bad byte, in
    // one piece it fails on the byte (400) first. Either way the request is refused and the
    // connection closed; everything before it must be the same.
    if (other.size() != whole.size()) return false;
    if (!std::equal(whole.begin(), whole.end() - 1, other.begin())) return false;
    const std::string a = whole.back();
    const std::string b = other.back();
    return (a == "failed 400" && b == "failed 431") || (a == "failed 431" && b == "failed 400");
  };
  if (!same(run({bytes.substr(0, cut), bytes.substr(cut)}))) std::abort();
  if (bytes.size() <= 512) {
    std::vector<std::string_view> singles;
    for (std::size_t i = 0; i < bytes.size(); ++i) singles.push_back(bytes.substr(i, 1));
    if (!same(run(singles))) std::abort();
  }
  return 0;
}
