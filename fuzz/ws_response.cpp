// Fuzzes the WebSocket client's HTTP response parser (a server's or a proxy's reply is untrusted):
// the whole input and the same input split every few bytes give the same verdict (state, head, body,
// error), the bounds hold (head bytes consumed, body size), an upgrade consumes exactly its head
// (never a byte of the frames after it), and a decided parser consumes nothing more.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ws/response_parser.hpp"

using sessionturn::ws::HttpResponseParser;
using State = HttpResponseParser::State;

namespace {

struct Verdict {
  std::string text;        // everything that must not depend on the split
  std::size_t consumed = 0;
  State state = State::need_more;
};

Verdict Run(std::string_view bytes, HttpResponseParser::Mode mode, std::size_t max_head, std::size_t max_body,
            std::size_t step) {
  HttpResponseParser parser(mode, max_head, max_body);
  Verdict v;
  std::string_view rest = bytes;
  while (!rest.empty() && parser.state() == State::need_more) {
    std::string_view part = step == 0 ? rest : rest.substr(0, step);
    const std::size_t used = parser.Feed(part);
    if (used > part.size()) std::abort();
    v.consumed += used;
    if (used < part.size()) break;
    rest.remove_prefix(part.size());
  }
  if (parser.state() == State::need_more) parser.FeedEof();
  if (parser.state() == State::need_more) std::abort();  // EOF always decides
  if (parser.Feed("HTTP/1.1 200 OK\r\n\r\n") != 0) std::abort();  // decided: nothing more is consumed
  v.state = parser.state();
  v.text = std::to_string(static_cast<int>(v.state));
  if (v.state == State::failed) {
    v.text += ":" + std::to_string(static_cast<int>(parser.error().code)) + ":" + parser.error().message;
    return v;
  }
  const auto& head = parser.head();
  if (!parser.HeadComplete() || head.status < 100 || head.status > 999) std::abort();
  if (parser.body().size() > max_body) std::abort();
  v.text += ":" + head.status_line + ":" + parser.body() + ":" + (parser.BodyTruncated() ? "cut" : "whole");
  for (const auto& [name, value] : head.headers) v.text += "\n" + name + "=" + value;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // The first byte picks the mode and the split; the second a small head bound, so the limit paths
  // are reached (a third of the inputs keep the real kMaxHttpHeadBytes).
  const auto mode = (data[0] & 1) != 0 ? HttpResponseParser::Mode::connect : HttpResponseParser::Mode::upgrade;
  const std::size_t step = 1 + ((data[0] >> 1) % 13);
  const std::size_t max_head = data[1] % 3 == 0 ? sessionturn::ws::kMaxHttpHeadBytes : 16 + data[1] * 4u;
  const std::size_t max_body = 1 + (data[1] >> 2);
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);

  const Verdict whole = Run(bytes, mode, max_head, max_body, 0);
  const Verdict split = Run(bytes, mode, max_head, max_body, step);
  if (whole.text != split.text) std::abort();
  if (whole.state == State::upgraded) {
    // Exactly the head, however it arrived, and within the bound.
    if (whole.consumed != split.consumed || whole.consumed > max_head) std::abort();
    // The bytes after the head are untouched: feeding the head alone ends in the same place.
    HttpResponseParser again(mode, max_head, max_body);
    if (again.Feed(bytes.substr(0, whole.consumed)) != whole.consumed || again.state() != State::upgraded) std::abort();
  }
  return 0;
}
