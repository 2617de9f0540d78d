// The HTTP server's request parser, sans-I/O: bytes in, complete requests or a verdict out (400, 413,
// 417, 431, 505). It wraps Node's http_parser (its settings callbacks collect the parts) and adds our bounds.
// The server and the fuzz target (fuzz/http_request.cpp) use this same class.
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "sessionturn/http.hpp"

namespace sessionturn::http {

struct ParsedRequest {
  std::string method;  // as http_parser names it ("GET")
  std::string target;  // the request-target as sent
  std::string path;    // the target's path, raw (not percent-decoded); "*" for OPTIONS *
  std::string query;   // the target's query without '?', raw
  HttpHeaders headers;  // names as sent, in order; trailers of a chunked body are not included
  std::string body;     // decoded (chunked framing removed)
  int http_major = 1;
  int http_minor = 1;
  bool keep_alive = true;        // per HTTP/1.1 (Connection: close) or HTTP/1.0 (Connection: keep-alive)
  bool expect_continue = false;  // Expect: 100-continue
  bool upgrade = false;          // Upgrade or CONNECT: the bytes after it are not HTTP, so the connection ends
};

// RFC 9110 §5.6.2: a token (method, header name).
bool IsHttpToken(std::string_view s);

class RequestParser {
 public:
  enum class State {
    need_more,  // the request is not complete yet
    complete,   // a request is complete: TakeRequest(), then feed the rest
    failed,     // the bytes are not an acceptable request: answer error_status() and close
  };

  // max_header_bytes bounds the request line and the headers (and a chunked body's trailers):
  // their names, values and target, plus 4 bytes per line for the separators. max_body_bytes bounds
  // the decoded body.
  RequestParser(std::size_t max_header_bytes, std::size_t max_body_bytes);
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Parses from `bytes` and returns how many it used. It stops at the end of a request (State::
  // complete): the bytes after it belong to the next (pipelined) request and are fed again after
  // TakeRequest(). Failed stays failed (0 bytes used).
  std::size_t Feed(std::string_view bytes);

  State state() const noexcept { return state_; }
  // Some byte of the current request was seen (false between requests).
  bool Started() const noexcept { return started_; }
  // The current request's headers are complete (its body may still be coming).
  bool HeadersComplete() const noexcept { return headers_complete_; }
  // The request whose headers are complete asked for 100 Continue (valid once HeadersComplete()).
  bool ExpectsContinue() const noexcept { return request_.expect_continue; }
  // 400, 413, 417, 431 or 505 when failed, with what was wrong (no header values in it).
  int error_status() const noexcept { return error_status_; }
  const std::string& error_message() const noexcept { return error_message_; }

  // The complete request; the parser is then ready for the next one on the same connection.
  ParsedRequest TakeRequest();

 private:
  static int OnMessageBegin(http_parser* p);
  static int OnUrl(http_parser* p, const char* at, std::size_t len);
  static int OnHeaderField(http_parser* p, const char* at, std::size_t len);
  static int OnHeaderValue(http_parser* p, const char* at, std::size_t len);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, std::size_t len);
  static int OnMessageComplete(http_parser* p);

  // Counts header bytes; false (and the 431 verdict) when past the bound.
  bool CountHeaderBytes(std::size_t n);
  // Records the verdict; the callback then returns nonzero so http_parser stops.
  int Refuse(int status, std::string message);
  bool SplitTarget();

  http_parser parser_;
  http_parser_settings settings_;
  std::size_t max_header_bytes_;
  std::size_t max_body_bytes_;
  State state_ = State::need_more;
  bool started_ = false;
  bool headers_complete_ = false;
  bool in_value_ = false;  // the last header callback was a value: the next field starts a new header
  std::size_t header_bytes_ = 0;
  ParsedRequest request_;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace sessionturn::http
