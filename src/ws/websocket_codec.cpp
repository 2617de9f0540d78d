// The sans-I/O half of the WebSocket client: the handshake's key and accept value, frame encoding
// and the server frame reader (RFC 6455). No socket here, so the fuzzer and unit tests reach all of it.
#include <cstdlib>
#include <optional>
#include <string>

#include <openssl/rand.h>
#include <openssl/sha.h>

#include "ws/websocket.hpp"
#include "ws/websocket_internal.hpp"

namespace sessionturn::ws {

using namespace ws_detail;

namespace {

// The WebSocket GUID of RFC 6455 §1.3.
constexpr std::string_view kWsGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

}  // namespace

std::string WsAcceptFor(std::string_view key) {
  std::string input = std::string(key) + std::string(kWsGuid);
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  return Base64(digest, sizeof digest);
}

std::string NewWsKey() {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) {
    // RAND_bytes failing means the CSPRNG is unusable; a predictable key would only weaken the
    // handshake check, never the payload, but we still refuse to pretend.
    std::abort();
  }
  return Base64(raw, sizeof raw);
}

std::string EncodeWsFrame(std::uint8_t opcode, std::string_view payload, bool fin, bool mask) {
  std::string out;
  out.reserve(payload.size() + 14);
  out.push_back(static_cast<char>((fin ? 0x80 : 0x00) | (opcode & 0x0f)));
  const char mask_bit = mask ? static_cast<char>(0x80) : 0;
  std::size_t n = payload.size();
  if (n < 126) {
    out.push_back(static_cast<char>(mask_bit | static_cast<char>(n)));
  } else if (n <= 0xffff) {
    out.push_back(static_cast<char>(mask_bit | 126));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n & 0xff));
  } else {
    out.push_back(static_cast<char>(mask_bit | 127));
    for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((std::uint64_t{n} >> shift) & 0xff));
  }
  if (!mask) {
    out.append(payload);
    return out;
  }
  // A fresh key per frame from the CSPRNG (RFC 6455 §5.3: unpredictable, so intermediaries cannot be
  // poisoned by chosen plaintext).
  unsigned char key[4];
  if (RAND_bytes(key, sizeof key) != 1) std::abort();
  out.append(reinterpret_cast<const char*>(key), 4);
  std::size_t base = out.size();
  out.append(payload);
  for (std::size_t i = 0; i < n; ++i) out[base + i] = static_cast<char>(out[base + i] ^ key[i & 3]);
  return out;
}

tl::unexpected<Error> WsReader::Poison(Errc code, std::string message) {
  error_ = Error(code, std::move(message));
  buffer_.clear();
  message_.clear();
  offset_ = 0;
  return Fail(*error_);
}

Result<std::optional<WsReader::FrameHeader>> WsReader::ParseHeader(std::string_view avail) {
  if (avail.size() < 2) return std::nullopt;
  const auto b0 = static_cast<std::uint8_t>(avail[0]);
  const auto b1 = static_cast<std::uint8_t>(avail[1]);
  FrameHeader h;
  h.fin = (b0 & 0x80) != 0;
  h.opcode = b0 & 0x0f;
  if ((b0 & 0x70) != 0) return Poison(Errc::protocol_error, "a frame has reserved bits set (no extension was agreed)");
  if ((b1 & 0x80) != 0) return Poison(Errc::protocol_error, "the server masked a frame (RFC 6455 §5.1 forbids it)");
  h.control = (h.opcode & 0x08) != 0;
  if (h.opcode != ws_opcode::kContinuation && h.opcode != ws_opcode::kText && h.opcode != ws_opcode::kBinary &&
      h.opcode != ws_opcode::kClose && h.opcode != ws_opcode::kPing && h.opcode != ws_opcode::kPong)
    return Poison(Errc::protocol_error, "a frame has the unknown opcode " + std::to_string(h.opcode));
  h.length = b1 & 0x7f;
  h.size = 2;
  if (h.control && (!h.fin || h.length > 125))
    return Poison(Errc::protocol_error, "a control frame is fragmented or longer than 125 bytes");
  if (h.length == 126) {
    if (avail.size() < 4) return std::nullopt;
    h.length = (std::uint64_t{static_cast<std::uint8_t>(avail[2])} << 8) | static_cast<std::uint8_t>(avail[3]);
    h.size = 4;
  } else if (h.length == 127) {
    if (avail.size() < 10) return std::nullopt;
    h.length = 0;
    for (int i = 2; i < 10; ++i) h.length = (h.length << 8) | static_cast<std::uint8_t>(avail[i]);
    if ((h.length >> 63) != 0) return Poison(Errc::protocol_error, "a frame length has its top bit set");
    h.size = 10;
  }
  // Check the bound on the declared length, before buffering the payload.
  if (!h.control) {
    std::size_t already = in_message_ ? message_.size() : 0;
    if (h.length > max_message_ - already)
      return Poison(Errc::too_large, "a message exceeds the WebSocket message bound of " +
                                         std::to_string(max_message_) + " bytes (kMaxWsMessageBytes)");
  }
  return h;
}

Status WsReader::OnControl(const FrameHeader& h, std::string_view payload, const EventFn& on_event) {
  Event e;
  if (h.opcode == ws_opcode::kClose) {
    e.kind = Event::kClose;
    if (payload.size() == 1) return Poison(Errc::protocol_error, "a close frame has a 1-byte payload");
    if (payload.size() >= 2) {
      e.close_code = static_cast<std::uint16_t>((static_cast<std::uint8_t>(payload[0]) << 8) |
                                                static_cast<std::uint8_t>(payload[1]));
      e.data = std::string(payload.substr(2));
    }
  } else {
    e.kind = h.opcode == ws_opcode::kPing ? Event::kPing : Event::kPong;
    e.data = std::string(payload);
  }
  on_event(std::move(e));
  if (error_) return Fail(*error_);
  return {};
}

Status WsReader::OnData(const FrameHeader& h, std::string_view payload, const EventFn& on_event) {
  if (h.opcode == ws_opcode::kContinuation) {
    if (!in_message_) return Poison(Errc::protocol_error, "a continuation frame arrived outside a message");
    message_.append(payload);
    if (h.fin) {
      in_message_ = false;
      Event e;
      e.binary = message_binary_;
      e.data = std::move(message_);
      message_.clear();
      on_event(std::move(e));
    }
    return {};
  }
  if (in_message_) return Poison(Errc::protocol_error, "a new message began inside a fragmented message");
  if (h.fin) {
    Event e;
    e.binary = h.opcode == ws_opcode::kBinary;
    e.data = std::string(payload);
    on_event(std::move(e));
  } else {
    in_message_ = true;
    message_binary_ = h.opcode == ws_opcode::kBinary;
    message_.assign(payload);
  }
  return {};
}

Status WsReader::Feed(std::string_view bytes, const EventFn& on_event) {
  if (error_) return Fail(*error_);
  buffer_.append(bytes);
  for (;;) {
    std::string_view avail = std::string_view(buffer_).substr(offset_);
    auto header = ParseHeader(avail);
    if (!header) return Fail(header.error());
    if (!*header) break;  // the header is not complete yet
    const FrameHeader& h = **header;
    if (avail.size() - h.size < h.length) break;  // nor the payload
    std::string_view payload = avail.substr(h.size, static_cast<std::size_t>(h.length));
    offset_ += h.size + static_cast<std::size_t>(h.length);
    auto st = h.control ? OnControl(h, payload, on_event) : OnData(h, payload, on_event);
    if (!st) return st;
  }
  // Drop consumed bytes, without moving a large partial frame on every small read.
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  } else if (offset_ > kReadChunkBytes) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return {};
}

}  // namespace sessionturn::ws
