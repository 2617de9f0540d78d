// HttpResponseParser: http_parser's callbacks collect the head (and a refusal's body); Feed adds the
// head bound and stops exactly where the head of an upgrade or tunnel ends.
#include "ws/response_parser.hpp"

#include <algorithm>

#include "ws/websocket_internal.hpp"

namespace sessionturn::ws {

using namespace ws_detail;

namespace {

HttpResponseParser* Self(http_parser* p) { return static_cast<HttpResponseParser*>(p->data); }

// What OnHeadersComplete returns to http_parser (see on_headers_complete in http_parser.h).
constexpr int kParseBody = 0;
constexpr int kNoBody = 1;             // this response has no body; another response may follow
constexpr int kNoBodyNoMoreHttp = 2;   // neither a body nor more HTTP: the rest is another protocol

}  // namespace

HttpResponseParser::HttpResponseParser(Mode mode, std::size_t max_head, std::size_t max_body)
    : mode_(mode), max_head_(max_head), max_body_(max_body) {
  http_parser_init(&parser_, HTTP_RESPONSE);
  parser_.data = this;
  http_parser_settings_init(&settings_);
  settings_.on_message_begin = &HttpResponseParser::OnMessageBegin;
  settings_.on_status = &HttpResponseParser::OnStatus;
  settings_.on_header_field = &HttpResponseParser::OnHeaderField;
  settings_.on_header_value = &HttpResponseParser::OnHeaderValue;
  settings_.on_headers_complete = &HttpResponseParser::OnHeadersComplete;
  settings_.on_body = &HttpResponseParser::OnBody;
  settings_.on_message_complete = &HttpResponseParser::OnMessageComplete;
}

std::size_t HttpResponseParser::Feed(std::string_view bytes) {
  std::size_t consumed = 0;
  // An empty buffer would tell http_parser the stream ended: that is FeedEof's.
  while (state_ == State::need_more && !bytes.empty()) {
    // Until the head is complete, never hand http_parser more than the bound allows, so the verdict
    // on an oversized head does not depend on how the bytes were split.
    std::string_view part = head_complete_ ? bytes : bytes.substr(0, max_head_ - head_bytes_);
    const std::size_t used = Execute(part);
    if (!head_complete_) head_bytes_ += used;
    consumed += used;
    bytes.remove_prefix(used);
    if (state_ != State::need_more) break;
    if (!head_complete_ && head_bytes_ >= max_head_) {
      Fail(Errc::protocol_error, "the response head exceeds " + std::to_string(max_head_) +
                                     " bytes (kMaxHttpHeadBytes)");
      break;
    }
    if (used < part.size()) break;  // not expected while need_more; never loop without progress
  }
  return consumed;
}

std::size_t HttpResponseParser::Execute(std::string_view bytes) {
  const std::size_t used = http_parser_execute(&parser_, &settings_, bytes.data(), bytes.size());
  const auto err = HTTP_PARSER_ERRNO(&parser_);
  if (err == HPE_PAUSED || state_ != State::need_more) return used;  // OnBody or OnMessageComplete decided
  if (err != HPE_OK) {
    Fail(Errc::protocol_error, std::string("malformed HTTP response: ") + http_errno_description(err));
  } else if (parser_.upgrade && !head_complete_) {
    // http_parser stopped for an upgrade we did not ask for (an interim 101 cannot happen; be safe).
    Fail(Errc::protocol_error, "malformed HTTP response: an unexpected protocol switch");
  }
  return used;
}

void HttpResponseParser::FeedEof() {
  if (state_ != State::need_more) return;
  if (!head_complete_) {
    Fail(Errc::connection_failed, head_bytes_ == 0 ? "the peer closed the connection without a reply"
                                                   : "the peer closed the connection in the middle of the "
                                                     "response head");
    return;
  }
  // A body delimited by the close completes here (OnMessageComplete); any other is cut short.
  http_parser_execute(&parser_, &settings_, nullptr, 0);
  if (state_ == State::need_more) {
    body_truncated_ = true;
    state_ = State::refused;
  }
}

void HttpResponseParser::Fail(Errc code, std::string message) {
  state_ = State::failed;
  error_ = Error(code, std::move(message));
}

bool HttpResponseParser::Interim() const noexcept {
  return parser_.status_code >= 100 && parser_.status_code < 200 && parser_.status_code != 101;
}

int HttpResponseParser::OnMessageBegin(http_parser* p) {
  auto* self = Self(p);
  // A new response: an interim one before it (100 Continue, 103 Early Hints) leaves nothing behind.
  self->head_ = HttpHead{};
  self->field_.clear();
  self->value_.clear();
  self->in_value_ = true;
  return 0;
}

int HttpResponseParser::OnStatus(http_parser* p, const char* at, std::size_t len) {
  Self(p)->head_.reason.append(at, len);
  return 0;
}

int HttpResponseParser::OnHeaderField(http_parser* p, const char* at, std::size_t len) {
  auto* self = Self(p);
  if (self->in_value_) {
    if (!self->field_.empty()) {
      auto [it, inserted] = self->head_.headers.emplace(Lower(self->field_), std::string(Trim(self->value_)));
      if (!inserted) it->second += ", " + std::string(Trim(self->value_));
    }
    self->field_.clear();
    self->value_.clear();
    self->in_value_ = false;
  }
  self->field_.append(at, len);
  return 0;
}

int HttpResponseParser::OnHeaderValue(http_parser* p, const char* at, std::size_t len) {
  auto* self = Self(p);
  self->in_value_ = true;
  self->value_.append(at, len);
  return 0;
}

int HttpResponseParser::OnHeadersComplete(http_parser* p) {
  auto* self = Self(p);
  if (!self->field_.empty()) {
    auto [it, inserted] = self->head_.headers.emplace(Lower(self->field_), std::string(Trim(self->value_)));
    if (!inserted) it->second += ", " + std::string(Trim(self->value_));
  }
  self->field_.clear();
  self->value_.clear();
  if (p->status_code < 100) {  // http_parser takes "2" or "042" for a status; RFC 9110 §15 wants 3 digits
    self->Fail(Errc::protocol_error, "malformed HTTP response: status code " + std::to_string(p->status_code));
    return -1;
  }
  if (self->Interim()) return kNoBody;  // 1xx carry no body; the final response follows
  HttpHead& head = self->head_;
  // The reason goes into error messages: no control characters from a hostile peer there.
  for (char& c : head.reason)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  head.status = p->status_code;
  head.http_major = p->http_major;
  head.http_minor = p->http_minor;
  head.status_line = "HTTP/" + std::to_string(head.http_major) + "." + std::to_string(head.http_minor) + " " +
                     std::to_string(head.status) + (head.reason.empty() ? "" : " " + head.reason);
  self->head_complete_ = true;
  if (self->mode_ == Mode::connect) {
    self->state_ = head.status >= 200 && head.status < 300 ? State::upgraded : State::refused;
    return kNoBodyNoMoreHttp;
  }
  if (head.status == 101) {
    self->state_ = State::upgraded;
    return kNoBodyNoMoreHttp;
  }
  return kParseBody;
}

int HttpResponseParser::OnBody(http_parser* p, const char* at, std::size_t len) {
  auto* self = Self(p);
  const std::size_t room = self->max_body_ - std::min(self->max_body_, self->body_.size());
  self->body_.append(at, std::min(len, room));
  if (len > room) {
    // Enough to explain the refusal; the rest is not worth waiting for.
    self->body_truncated_ = true;
    self->state_ = State::refused;
    http_parser_pause(p, 1);
  }
  return 0;
}

int HttpResponseParser::OnMessageComplete(http_parser* p) {
  auto* self = Self(p);
  if (!self->head_complete_) return 0;  // an interim response ended; the final one follows
  if (self->state_ == State::need_more) self->state_ = State::refused;
  http_parser_pause(p, 1);  // whatever follows is not ours to parse
  return 0;
}

}  // namespace sessionturn::ws
