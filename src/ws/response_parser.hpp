// The HTTP responses the WebSocket client reads, sans-I/O: the reply to the upgrade request and a
// proxy's reply to CONNECT. It wraps Node's http_parser in HTTP_RESPONSE mode (as the HTTP server's
// RequestParser wraps it for requests) and adds our bounds. The connection (ws_handshake.cpp,
// ws_connect.cpp) and the fuzz target (fuzz/ws_response.cpp) use this same class.
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "sessionturn/error.hpp"
#include "ws/websocket.hpp"

namespace sessionturn::ws {

// A response's status line and headers.
struct HttpHead {
  int status = 0;
  int http_major = 1;
  int http_minor = 1;
  std::string reason;                          // "Switching Protocols", as sent
  std::string status_line;                     // "HTTP/1.1 101 Switching Protocols", rebuilt from the parts
  std::map<std::string, std::string> headers;  // lower-case names; repeated headers joined by ", "

  std::string Get(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpResponseParser {
 public:
  enum class Mode {
    upgrade,  // the reply to a WebSocket upgrade: 101 opens it; any other final status is a refusal
              // whose body (bounded) explains why
    connect,  // a proxy's reply to CONNECT: 2xx opens the tunnel; any other is a refusal (its body is
              // not read: the status line says enough, and a proxy may never end it)
  };
  enum class State {
    need_more,  // feed more bytes (or FeedEof)
    upgraded,   // the head of a 101 (upgrade) or 2xx (connect) is complete; the bytes after it belong
                // to the new protocol and were not consumed
    refused,    // another final status; head() and, in upgrade mode, body() are as complete as they get
    failed,     // not an acceptable HTTP/1.x response, or its head is over the bound: error()
  };

  // max_head bounds the bytes up to and including the blank line that ends the head (interim 1xx
  // responses before it count too); max_body bounds the refusal's decoded body (more is cut off).
  explicit HttpResponseParser(Mode mode, std::size_t max_head = kMaxHttpHeadBytes,
                              std::size_t max_body = kMaxErrorBodyBytes);
  HttpResponseParser(const HttpResponseParser&) = delete;
  HttpResponseParser& operator=(const HttpResponseParser&) = delete;

  // Parses from `bytes` and returns how many it consumed. Once the state is not need_more nothing
  // more is consumed: for `upgraded`, bytes.substr(returned) are the first bytes of the new protocol
  // (WebSocket frames sent with the 101, say) and must not be lost.
  std::size_t Feed(std::string_view bytes);
  // The peer closed the connection. Before the end of the head that is a failure; after it the
  // refusal's body is complete (a body delimited by the close) or as complete as it will get.
  void FeedEof();

  State state() const noexcept { return state_; }
  // The final (non-interim) response's head is complete: head() is valid.
  bool HeadComplete() const noexcept { return head_complete_; }
  const HttpHead& head() const noexcept { return head_; }
  // The refusal's body, decoded (chunked framing removed), at most max_body bytes.
  const std::string& body() const noexcept { return body_; }
  // The body was longer than max_body, or the connection closed before its declared end.
  bool BodyTruncated() const noexcept { return body_truncated_; }
  // Errc::protocol_error (malformed, head over the bound) or Errc::connection_failed (closed before
  // the head was complete); valid when failed.
  const Error& error() const noexcept { return *error_; }

 private:
  static int OnMessageBegin(http_parser* p);
  static int OnStatus(http_parser* p, const char* at, std::size_t len);
  static int OnHeaderField(http_parser* p, const char* at, std::size_t len);
  static int OnHeaderValue(http_parser* p, const char* at, std::size_t len);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, std::size_t len);
  static int OnMessageComplete(http_parser* p);

  // One http_parser_execute over `bytes` (already cut to the head bound); the bytes it consumed.
  std::size_t Execute(std::string_view bytes);
  void Fail(Errc code, std::string message);
  bool Interim() const noexcept;  // the response being parsed is a 1xx other than 101

  http_parser parser_;
  http_parser_settings settings_;
  Mode mode_;
  std::size_t max_head_;
  std::size_t max_body_;
  std::size_t head_bytes_ = 0;  // consumed while the final head was incomplete
  State state_ = State::need_more;
  bool head_complete_ = false;
  bool in_value_ = true;  // the last header callback was a value: the next field starts a new header
  std::string field_;
  std::string value_;
  HttpHead head_;
  std::string body_;
  bool body_truncated_ = false;
  std::optional<Error> error_;
};

}  // namespace sessionturn::ws
