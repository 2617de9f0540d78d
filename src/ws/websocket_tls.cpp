// TLS contexts of the WebSocket client: the caller's material (e.g. a kubeconfig's) applied to an
// OpenSSL context, and the per-owner cache that lets every connection of one owner share that context.
#include "ws/websocket_tls.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

#include <asio/ssl.hpp>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "ws/websocket_internal.hpp"

namespace sessionturn::ws {

using namespace ws_detail;

namespace {

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Applies the TLS material to the context: trust, client certificate, verification mode.
Status ConfigureTlsContext(SSL_CTX* ctx, const WsTls& tls) {
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (tls.insecure) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (tls.ca_pem.empty()) {
      if (SSL_CTX_set_default_verify_paths(ctx) != 1)
        return Fail(Errc::connection_failed, "cannot load the system CA store: " + DrainOpenSslErrors());
    } else {
      X509_STORE* store = SSL_CTX_get_cert_store(ctx);
      BioPtr bio = MemBio(tls.ca_pem);
      int added = 0;
      while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
        if (X509_STORE_add_cert(store, cert) == 1) ++added;
        X509_free(cert);
      }
      ERR_clear_error();  // the loop ends on a "no start line" error by design
      if (added == 0)
        return Fail(Errc::invalid_argument, "the certificate authority data holds no PEM certificate");
    }
  }
  if (!tls.cert_pem.empty() || !tls.key_pem.empty()) {
    if (tls.cert_pem.empty() || tls.key_pem.empty())
      return Fail(Errc::invalid_argument, "a client certificate needs both the certificate and the key");
    BioPtr bio = MemBio(tls.cert_pem);
    X509* leaf = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (leaf == nullptr)
      return Fail(Errc::invalid_argument, "the client certificate data is not a PEM certificate: " +
                                              DrainOpenSslErrors());
    int ok = SSL_CTX_use_certificate(ctx, leaf);
    X509_free(leaf);
    if (ok != 1) return Fail(Errc::invalid_argument, "cannot use the client certificate: " + DrainOpenSslErrors());
    // Intermediates after the leaf go into the chain we present.
    while (X509* extra = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      if (SSL_CTX_add_extra_chain_cert(ctx, extra) != 1) X509_free(extra);
    }
    ERR_clear_error();
    BioPtr key_bio = MemBio(tls.key_pem);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
    if (key == nullptr)
      return Fail(Errc::invalid_argument, "the client key data is not a PEM private key: " + DrainOpenSslErrors());
    ok = SSL_CTX_use_PrivateKey(ctx, key);
    EVP_PKEY_free(key);
    if (ok != 1 || SSL_CTX_check_private_key(ctx) != 1)
      return Fail(Errc::invalid_argument,
                  "the client key does not match the client certificate: " + DrainOpenSslErrors());
  }
  return {};
}

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// Makes a context, keeping asio's exception (OpenSSL cannot allocate one) inside.
Result<std::shared_ptr<asio::ssl::context>> NewContext() {
  try {
    return std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  } catch (const std::exception& e) {
    return Fail(Errc::internal, std::string("cannot create a TLS context: ") + e.what());
  }
}

}  // namespace

TlsDigest TlsMaterialDigest(const WsTls& tls) {
  TlsDigest out{};
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  auto field = [&](const std::string& value) {
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t{value.size()} >> (56 - 8 * i));
    EVP_DigestUpdate(ctx.get(), length, sizeof length);
    EVP_DigestUpdate(ctx.get(), value.data(), value.size());
  };
  // Failures here mean OpenSSL cannot hash at all: abort rather than key every material alike.
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) std::abort();
  field(tls.ca_pem);
  field(tls.cert_pem);
  field(tls.key_pem);
  const unsigned char insecure = tls.insecure ? 1 : 0;
  EVP_DigestUpdate(ctx.get(), &insecure, 1);
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out.data(), &n) != 1 || n != out.size()) std::abort();
  return out;
}

Result<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const WsTls& tls) {
  auto ctx = NewContext();
  if (!ctx) return ctx;
  // The context must be complete before a stream uses it: SSL_new copies the verify mode and the
  // client certificate from it, so later changes would not reach that connection.
  if (auto st = ConfigureTlsContext((*ctx)->native_handle(), tls); !st) return Fail(st.error());
  return ctx;
}

Result<std::shared_ptr<asio::ssl::context>> TlsContextFor(const WsTarget& target) {
  if (!target.use_tls) return NewContext();
  if (target.tls_contexts) return target.tls_contexts->Get(target.tls);
  return MakeTlsContext(target.tls);
}

Result<std::shared_ptr<asio::ssl::context>> TlsContextCache::Get(const WsTls& tls) {
  // Keyed by a digest, not the material: no private key sits in a map key, and comparing keys
  // costs 32 bytes rather than the whole PEM.
  const TlsDigest digest = TlsMaterialDigest(tls);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = contexts_.find(digest); it != contexts_.end()) return it->second;
  // Made under the lock: connections opened at once with new material wait for one context
  // instead of each parsing the CA (about as costly as a TLS handshake with OpenSSL 3).
  auto ctx = MakeTlsContext(tls);
  if (!ctx) return ctx;
  if (contexts_.size() >= kMaxContexts) contexts_.clear();  // live connections keep theirs
  contexts_.emplace(digest, *ctx);
  return ctx;
}

std::size_t TlsContextCache::Size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return contexts_.size();
}

}  // namespace sessionturn::ws
