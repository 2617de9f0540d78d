// TLS contexts for the WebSocket client: one OpenSSL client context per TLS material, held by the
// object that owns that material (a KubeConfig and the connectors made from it, one
// KubeExecConnector, a chat adapter) and released with it. Internal; see WsTarget::tls_contexts.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "ws/websocket.hpp"
#include "sessionturn/error.hpp"

namespace asio::ssl {
class context;
}  // namespace asio::ssl

namespace sessionturn::ws {

// SHA-256 of a TLS material.
using TlsDigest = std::array<unsigned char, 32>;

// SHA-256 over the fields that shape a client context: the CA, the client certificate and key, and
// whether verification is off (each length-prefixed so that no two materials run together). The
// server name is per connection (SNI, the verified name), not part of the context.
TlsDigest TlsMaterialDigest(const WsTls& tls);

// A new client context configured with `tls`: TLS 1.2 or later, the trust (the CA data or the
// system store), the client certificate and key, the verification mode. Errors: invalid_argument
// naming the PEM that does not load or the key that does not match; connection_failed when the
// system store cannot be loaded; internal when OpenSSL cannot make a context at all.
Result<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const WsTls& tls);

// The context one connection to `target` uses: its owner's shared one when target.tls_contexts is
// set, else a new one; for ws:// a bare context the stream type needs but never uses.
Result<std::shared_ptr<asio::ssl::context>> TlsContextFor(const WsTarget& target);

class TlsContextCache {
 public:
  // Distinct materials one owner keeps contexts for. An owner normally has exactly one (its
  // cluster's credentials); the bound only keeps an owner whose endpoint is edited again and again
  // from growing without end (the oldest entries are then dropped all at once).
  static constexpr std::size_t kMaxContexts = 8;

  TlsContextCache() = default;
  TlsContextCache(const TlsContextCache&) = delete;
  TlsContextCache& operator=(const TlsContextCache&) = delete;

  // The context for `tls`: the one made before for the same material, else a new one (kept).
  // Material that does not load is an error and is not kept. Thread-safe. A configured SSL_CTX is
  // safe to share between threads for making connections; it must not be changed once shared,
  // and nothing here changes it.
  Result<std::shared_ptr<asio::ssl::context>> Get(const WsTls& tls);
  // How many materials have a context (tests).
  std::size_t Size() const;

 private:
  mutable std::mutex mutex_;
  std::map<TlsDigest, std::shared_ptr<asio::ssl::context>> contexts_;
};

}  // namespace sessionturn::ws
