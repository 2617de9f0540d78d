// The server's sans-I/O RequestParser: requests in any split, pipelined requests one at a time, the
// target split into path and query, keep-alive rules, and the verdicts (400, 413, 417, 431).
#include <catch2/catch.hpp>

#include <vector>

#include "http/request_parser.hpp"

using sessionturn::http::ParsedRequest;
using sessionturn::http::RequestParser;
using State = RequestParser::State;

namespace {

// Feeds `bytes` in pieces of `step` and collects every complete request; stops at a failure.
std::vector<ParsedRequest> ParseAll(RequestParser& p, std::string_view bytes, std::size_t step) {
  std::vector<ParsedRequest> out;
  std::string pending;
  for (std::size_t i = 0; i < bytes.size() && p.state() != State::failed; i += step) {
    pending.append(bytes.substr(i, step));
    for (;;) {
      std::size_t used = p.Feed(pending);
      pending.erase(0, used);
      if (p.state() == State::complete) {
        out.push_back(p.TakeRequest());
        continue;
      }
      break;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("http server parser: a request in any split gives the same parts", "[http][server][parser]") {
  const std::string wire =
      "POST /hook/abc%2Fdef?x=1&y=%20 HTTP/1.1\r\nHost: h\r\nX-Mixed-Case: One\r\nx-mixed-case: Two\r\n"
      "Content-Length: 5\r\n\r\nhello";
  for (std::size_t step : {wire.size(), std::size_t{1}, std::size_t{7}}) {
    RequestParser p(16 << 10, 1 << 20);
    auto requests = ParseAll(p, wire, step);
    REQUIRE(requests.size() == 1);
    const auto& r = requests[0];
    CHECK(r.method == "POST");
    CHECK(r.target == "/hook/abc%2Fdef?x=1&y=%20");
    CHECK(r.path == "/hook/abc%2Fdef");  // raw, not decoded
    CHECK(r.query == "x=1&y=%20");
    REQUIRE(r.headers.size() == 4);
    CHECK(r.headers[1] == std::pair<std::string, std::string>("X-Mixed-Case", "One"));
    CHECK(r.headers[2] == std::pair<std::string, std::string>("x-mixed-case", "Two"));
    CHECK(r.body == "hello");
    CHECK(r.keep_alive);
    CHECK_FALSE(r.expect_continue);
  }
}

TEST_CASE("http server parser: pipelined requests come out one at a time", "[http][server][parser]") {
  const std::string wire =
      "GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
      "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n"
      "GET /c HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
  RequestParser p(16 << 10, 1 << 20);
  // The first Feed stops at the end of the first request.
  std::size_t used = p.Feed(wire);
  CHECK(p.state() == State::complete);
  CHECK(used == std::string("GET /a HTTP/1.1\r\nHost: h\r\n\r\n").size());
  CHECK(p.Feed("more") == 0);  // not before TakeRequest
  CHECK(p.TakeRequest().path == "/a");
  CHECK_FALSE(p.Started());

  for (std::size_t step : {wire.size(), std::size_t{1}, std::size_t{13}}) {
    RequestParser parser(16 << 10, 1 << 20);
    auto requests = ParseAll(parser, wire, step);
    REQUIRE(requests.size() == 3);
    CHECK(requests[0].path == "/a");
    CHECK(requests[1].body == "abcde");
    CHECK(requests[1].headers.size() == 2);  // the trailer is not a header
    CHECK(requests[2].path == "/c");
    CHECK_FALSE(requests[2].keep_alive);
  }
}

TEST_CASE("http server parser: keep-alive, 100-continue, absolute and asterisk targets", "[http][server][parser]") {
  auto one = [](const std::string& wire) {
    RequestParser p(16 << 10, 1 << 20);
    auto requests = ParseAll(p, wire, wire.size());
    REQUIRE(requests.size() == 1);
    return requests[0];
  };
  CHECK_FALSE(one("GET / HTTP/1.0\r\n\r\n").keep_alive);
  CHECK(one("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
  auto r = one("GET http://example.com/p/q?z=9 HTTP/1.1\r\nHost: example.com\r\n\r\n");
  CHECK(r.path == "/p/q");
  CHECK(r.query == "z=9");
  CHECK(one("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").path == "*");

  RequestParser p(16 << 10, 1 << 20);
  p.Feed("POST /up HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n");
  CHECK(p.state() == State::need_more);
  CHECK(p.HeadersComplete());
  CHECK(p.ExpectsContinue());
  p.Feed("abc");
  REQUIRE(p.state() == State::complete);
  CHECK(p.TakeRequest().body == "abc");
}

TEST_CASE("http server parser: verdicts for bad and oversized requests", "[http][server][parser]") {
  auto verdict = [](const std::string& wire, std::size_t max_header = 1024, std::size_t max_body = 16) {
    RequestParser p(max_header, max_body);
    ParseAll(p, wire, 1);  // byte by byte: the bounds hold however the bytes come
    INFO(wire);
    REQUIRE(p.state() == State::failed);
    RequestParser whole(max_header, max_body);
    ParseAll(whole, wire, wire.size());
    CHECK(whole.error_status() == p.error_status());
    return std::make_pair(p.error_status(), p.error_message());
  };
  auto bad = verdict("GET / HTTP/1.1\r\nHost: h\r\nBad Header: x\r\n\r\n");
  CHECK(bad.first == 400);
  CHECK_THAT(bad.second, Catch::Contains("malformed"));
  CHECK(verdict("NOTAMETHOD / HTTP/1.1\r\n\r\n").first == 400);
  CHECK(verdict("GET / HTTP/1.1\r\n\r\n").first == 400);  // HTTP/1.1 without Host
  CHECK(verdict("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").first == 400);

  auto headers = verdict("GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
  CHECK(headers.first == 431);
  CHECK_THAT(headers.second, Catch::Contains("1024 bytes"));
  // Many small headers count too, separators included.
  std::string many = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 0; i < 200; ++i) many += "A: b\r\n";
  CHECK(verdict(many + "\r\n").first == 431);

  auto length = verdict("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 17\r\n\r\n");
  CHECK(length.first == 413);  // refused from the header, before any of the body
  CHECK_THAT(length.second, Catch::Contains("17 bytes"));
  CHECK(verdict("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n1\r\nx\r\n")
            .first == 413);
  CHECK(verdict("POST / HTTP/1.1\r\nHost: h\r\nExpect: something-else\r\n\r\n").first == 417);
  CHECK(verdict("GET / HTTP/2.0\r\nHost: h\r\n\r\n").first == 505);

  // A failed parser stays failed.
  RequestParser p(1024, 16);
  p.Feed("garbage\r\n\r\n");
  REQUIRE(p.state() == State::failed);
  CHECK(p.Feed("GET / HTTP/1.1\r\nHost: h\r\n\r\n") == 0);
  CHECK(p.state() == State::failed);

  // Exactly at the bounds is fine.
  RequestParser ok(1024, 16);
  auto fine = ParseAll(ok, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16\r\n\r\n0123456789abcdef", 5);
  REQUIRE(fine.size() == 1);
  CHECK(fine[0].body.size() == 16);
}
