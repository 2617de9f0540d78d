#include <strings.h>

#include "http/request_parser.hpp"

namespace sessionturn::http {

namespace {

RequestParser* Self(http_parser* p) { return static_cast<RequestParser*>(p->data); }

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// Each header line and the request line cost their separators too (": ", CRLF).
constexpr std::size_t kLineOverhead = 4;

}  // namespace

bool IsHttpToken(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (c <= 32 || c >= 127) return false;
    if (std::string_view("\"(),/:;<=>?@[\\]{}").find(static_cast<char>(c)) != std::string_view::npos) return false;
  }
  return true;
}

RequestParser::RequestParser(std::size_t max_header_bytes, std::size_t max_body_bytes)
    : max_header_bytes_(max_header_bytes), max_body_bytes_(max_body_bytes) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
  http_parser_settings_init(&settings_);
  settings_.on_message_begin = &RequestParser::OnMessageBegin;
  settings_.on_url = &RequestParser::OnUrl;
  settings_.on_header_field = &RequestParser::OnHeaderField;
  settings_.on_header_value = &RequestParser::OnHeaderValue;
  settings_.on_headers_complete = &RequestParser::OnHeadersComplete;
  settings_.on_body = &RequestParser::OnBody;
  settings_.on_message_complete = &RequestParser::OnMessageComplete;
}

std::size_t RequestParser::Feed(std::string_view bytes) {
  // An empty buffer would tell http_parser the stream ended; a request never ends that way.
  if (state_ != State::need_more || bytes.empty()) return 0;
  const std::size_t used = http_parser_execute(&parser_, &settings_, bytes.data(), bytes.size());
  const auto err = HTTP_PARSER_ERRNO(&parser_);
  if (err == HPE_PAUSED) {
    // OnMessageComplete paused it so that a pipelined request waits for its turn.
    http_parser_pause(&parser_, 0);
    return used;
  }
  if (err == HPE_OK) return used;
  state_ = State::failed;
  if (error_status_ == 0) {
    if (err == HPE_HEADER_OVERFLOW) {
      error_status_ = 431;
      error_message_ = "the request's headers are larger than the HTTP parser allows";
    } else {
      error_status_ = 400;
      error_message_ = std::string("malformed request: ") + http_errno_description(err);
    }
  }
  return used;
}

ParsedRequest RequestParser::TakeRequest() {
  ParsedRequest out = std::move(request_);
  request_ = ParsedRequest{};
  state_ = State::need_more;
  started_ = false;
  headers_complete_ = false;
  header_bytes_ = 0;
  return out;
}

bool RequestParser::CountHeaderBytes(std::size_t n) {
  header_bytes_ += n;
  if (header_bytes_ <= max_header_bytes_) return true;
  Refuse(431, "the request's headers are larger than " + std::to_string(max_header_bytes_) + " bytes");
  return false;
}

int RequestParser::Refuse(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
  return -1;
}

bool RequestParser::SplitTarget() {
  const std::string& target = request_.target;
  std::string_view rest;
  if (!target.empty() && target[0] == '/') {
    rest = target;
  } else if (target == "*" || parser_.method == HTTP_CONNECT) {
    request_.path = parser_.method == HTTP_CONNECT ? "" : target;
    return true;
  } else {
    // absolute-form ("http://host/path?q"), as a proxy would get it. http_parser's offsets are 16-bit.
    http_parser_url url;
    http_parser_url_init(&url);
    if (target.size() > 0xffff || http_parser_parse_url(target.data(), target.size(), 0, &url) != 0) return false;
    if ((url.field_set & (1 << UF_PATH)) == 0) {
      request_.path = "/";
      if ((url.field_set & (1 << UF_QUERY)) != 0) {
        request_.query = target.substr(url.field_data[UF_QUERY].off, url.field_data[UF_QUERY].len);
      }
      return true;
    }
    rest = std::string_view(target).substr(url.field_data[UF_PATH].off);
  }
  rest = rest.substr(0, rest.find('#'));  // a fragment is never sent on purpose; it is not the path's
  const std::size_t q = rest.find('?');
  request_.path = std::string(rest.substr(0, q));
  if (q != std::string_view::npos) request_.query = std::string(rest.substr(q + 1));
  return true;
}

int RequestParser::OnMessageBegin(http_parser* p) {
  auto* self = Self(p);
  self->started_ = true;
  self->in_value_ = true;
  self->header_bytes_ = kLineOverhead;
  return 0;
}

int RequestParser::OnUrl(http_parser* p, const char* at, std::size_t len) {
  auto* self = Self(p);
  if (!self->CountHeaderBytes(len)) return -1;
  self->request_.target.append(at, len);
  return 0;
}

int RequestParser::OnHeaderField(http_parser* p, const char* at, std::size_t len) {
  auto* self = Self(p);
  const bool new_line = self->in_value_;
  self->in_value_ = false;
  if (!self->CountHeaderBytes(len + (new_line ? kLineOverhead : 0))) return -1;
  if (self->headers_complete_) return 0;  // a trailer: bounded, not kept
  if (new_line) self->request_.headers.emplace_back();
  self->request_.headers.back().first.append(at, len);
  return 0;
}

int RequestParser::OnHeaderValue(http_parser* p, const char* at, std::size_t len) {
  auto* self = Self(p);
  self->in_value_ = true;
  if (!self->CountHeaderBytes(len)) return -1;
  if (self->headers_complete_) return 0;
  // http_parser calls OnHeaderField first, even for an empty name, so there is a header to extend.
  if (!self->request_.headers.empty()) self->request_.headers.back().second.append(at, len);
  return 0;
}

int RequestParser::OnHeadersComplete(http_parser* p) {
  auto* self = Self(p);
  auto& r = self->request_;
  self->headers_complete_ = true;
  self->in_value_ = true;  // a chunked body's trailers start new lines
  r.method = http_method_str(static_cast<http_method>(p->method));
  r.http_major = p->http_major;
  r.http_minor = p->http_minor;
  r.keep_alive = http_should_keep_alive(p) != 0;
  r.upgrade = p->upgrade != 0 || p->method == HTTP_CONNECT;
  if (r.http_major != 1) return self->Refuse(505, "HTTP/" + std::to_string(r.http_major) + " is not supported");
  if (!self->SplitTarget()) return self->Refuse(400, "malformed request: invalid request target");
  bool host = false;
  for (const auto& [name, value] : r.headers) {
    // http_parser is lenient here (a space inside a name passes); a name that is not a token is how
    // request smuggling starts, and RFC 9112 §5.1 wants it refused.
    if (!IsHttpToken(name)) return self->Refuse(400, "malformed request: a header name is not an HTTP token");
    if (EqualsNoCase(name, "host")) host = true;
    if (EqualsNoCase(name, "expect")) {
      if (!EqualsNoCase(value, "100-continue")) return self->Refuse(417, "unsupported expectation");
      r.expect_continue = true;
    }
  }
  // RFC 9112 §3.2: a server must answer 400 to an HTTP/1.1 request without a Host header.
  if (!host && (r.http_major > 1 || (r.http_major == 1 && r.http_minor >= 1))) {
    return self->Refuse(400, "malformed request: an HTTP/1.1 request without a Host header");
  }
  // Refused before a byte of it is read (a client waiting on 100 Continue sends none).
  if ((p->flags & F_CONTENTLENGTH) != 0 && p->content_length > self->max_body_bytes_) {
    return self->Refuse(413, "the request's body (" + std::to_string(p->content_length) +
                                 " bytes) is larger than " + std::to_string(self->max_body_bytes_) + " bytes");
  }
  return 0;
}

int RequestParser::OnBody(http_parser* p, const char* at, std::size_t len) {
  auto* self = Self(p);
  if (self->request_.body.size() + len > self->max_body_bytes_) {
    return self->Refuse(413, "the request's body is larger than " + std::to_string(self->max_body_bytes_) + " bytes");
  }
  self->request_.body.append(at, len);
  return 0;
}

int RequestParser::OnMessageComplete(http_parser* p) {
  auto* self = Self(p);
  self->state_ = State::complete;
  http_parser_pause(p, 1);
  return 0;
}

}  // namespace sessionturn::http
