// Events API signature verification on untrusted headers and bodies: the input is
// "<timestamp>\n<signature>\n<body>". Verification never crashes, accepts what Sign made for the same
// body at that time, and refuses it once one byte of the body differs.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "chat/slack_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace sl = sessionturn::slack;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto a = in.find('\n');
  const auto b = a == std::string_view::npos ? a : in.find('\n', a + 1);
  const std::string_view ts = in.substr(0, a);
  const std::string_view sig = a == std::string_view::npos ? std::string_view() : in.substr(a + 1, b - a - 1);
  const std::string_view body = b == std::string_view::npos ? std::string_view() : in.substr(b + 1);
  const std::string secret = "8f742231b10e8888abcd99yyyzzz85a5";
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1531420618));
  const auto age = std::chrono::seconds(300);
  (void)sl::VerifySignature(secret, ts, sig, body, now, age);
  (void)sl::VerifySignature("", ts, sig, body, now, age);

  const std::string good_ts = "1531420618";
  const std::string signature = sl::Sign(secret, good_ts, body);
  if (!sl::VerifySignature(secret, good_ts, signature, body, now, age)) std::abort();
  std::string changed(body);
  changed.push_back('x');
  if (sl::VerifySignature(secret, good_ts, signature, changed, now, age)) std::abort();
  if (!body.empty()) {
    changed.assign(body);
    changed[0] = static_cast<char>(changed[0] ^ 1);
    if (sl::VerifySignature(secret, good_ts, signature, changed, now, age)) std::abort();
  }
  return 0;
}
