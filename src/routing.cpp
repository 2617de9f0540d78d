// routing.hpp's non-inline parts: Session naming, MessageKind's names, ChatAdapter's defaults. The
// prompt envelope is in routing/envelope.cpp.
#include "sessionturn/routing.hpp"

#include <openssl/evp.h>

#include <array>
#include <cstdlib>

#include "event_encode.hpp"

namespace sessionturn {

namespace {

// A Kubernetes object name here is a DNS label (RFC 1123): at most 63 characters.
constexpr std::size_t kMaxSessionName = 63;
// Hex digits of the hash kept in a name: 48 bits, so a collision needs ~16 million threads per
// prefix and owner, and the name keeps room for a readable prefix.
constexpr std::size_t kHashDigits = 12;

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int n = 0;
  // EVP_Digest fails only when OpenSSL cannot allocate or lost SHA-256: nothing to recover from.
  if (EVP_Digest(data.data(), data.size(), digest.data(), &n, EVP_sha256(), nullptr) != 1) std::abort();
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xF]);
  }
  return out;
}

std::string TrimDashes(std::string_view s) {
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  while (!s.empty() && s.back() == '-') s.remove_suffix(1);
  return std::string(s);
}

// Lower-cased, every code point outside [a-z0-9-] one '-' (a bad UTF-8 byte too), then '-' trimmed
// from both ends: a DNS label starts and ends with a letter or digit.
std::string Sanitize(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t n = detail::GoRuneLen(text, i, &cp);
    i += n == 0 ? 1 : n;
    if (cp >= 'A' && cp <= 'Z') cp += 'a' - 'A';
    const bool keep = n == 1 && ((cp >= 'a' && cp <= 'z') || (cp >= '0' && cp <= '9') || cp == '-');
    out.push_back(keep ? static_cast<char>(cp) : '-');
  }
  return TrimDashes(out);
}

}  // namespace

std::string SessionName(std::string_view prefix, std::string_view platform, std::string_view owner_uid,
                        std::string_view chat, std::string_view thread) {
  std::string key;
  key.append(prefix).append(":").append(owner_uid).append(":").append(chat).append(":").append(thread);
  const std::string hash = Sha256Hex(key).substr(0, kHashDigits);

  // What the hash leaves, for "<prefix>-<platform>-": the platform is kept whole unless it alone is
  // too long; the prefix gets the rest (and is dropped when nothing is left for it).
  const std::size_t room = kMaxSessionName - kHashDigits;
  std::string plat = Sanitize(platform);
  if (plat.size() + 1 > room) plat = TrimDashes(plat.substr(0, room - 1));
  std::string pre = Sanitize(prefix);
  const std::size_t pre_room = plat.empty() ? room - 1 : (room > plat.size() + 2 ? room - plat.size() - 2 : 0);
  if (pre.size() > pre_room) pre = TrimDashes(pre.substr(0, pre_room));

  std::string name;
  if (!pre.empty()) name += pre + "-";
  if (!plat.empty()) name += plat + "-";
  return name + hash;
}

std::string_view ToString(MessageKind kind) noexcept {
  switch (kind) {
    case MessageKind::new_message: return "new";
    case MessageKind::edited: return "edited";
    case MessageKind::deleted: return "deleted";
  }
  return "unknown";
}

// The defaults have no Context to post to, so they call the handler before they return; an adapter
// that overrides them follows the class's rule (handlers may be called from any thread, once).
void ChatAdapter::AsyncTyping(const ThreadRef& /*where*/, ChatStatusHandler handler) {
  handler(Status{});
}

void ChatAdapter::AsyncFetchThread(const ThreadRef& where, const std::string& /*before_message_id*/,
                                   std::size_t /*max_messages*/,
                                   ChatHandler<std::vector<ThreadHistoryMessage>> handler) {
  handler(Fail(Errc::unavailable, "the " + (where.platform.empty() ? std::string("chat") : where.platform) +
                                      " adapter cannot fetch a thread's earlier messages"));
}

}  // namespace sessionturn
