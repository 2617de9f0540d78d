#include "kube/websocket.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include <asio/ssl.hpp>
#include <nlohmann/json.hpp>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "sessionturn/version.hpp"

namespace sessionturn::kube {

namespace {

// How much one read asks the socket for: large enough that a full exec line rarely needs many
// reads, small enough to keep per-connection memory modest.
constexpr std::size_t kReadChunkBytes = 64u << 10;
// The WebSocket GUID of RFC 6455 §1.3.
constexpr std::string_view kWsGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string Base64(const unsigned char* data, std::size_t n) {
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(n));
  out.resize(static_cast<std::size_t>(len));
  return out;
}

// The queued OpenSSL errors, joined, and the queue cleared (so they do not leak into a later call).
std::string DrainOpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

bool IsIpLiteral(std::string_view host) {
  std::error_code ec;
  (void)asio::ip::make_address(std::string(host), ec);
  return !ec;
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Applies the kubeconfig's TLS material to the context: trust, client certificate, verification mode.
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

struct HttpHead {
  int status = 0;
  std::string status_line;
  std::map<std::string, std::string> headers;  // lower-case names; repeated headers joined by ", "

  std::string Get(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

Result<HttpHead> ParseHttpHead(std::string_view head) {
  HttpHead out;
  std::size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) return Fail(Errc::protocol_error, "malformed HTTP response");
  out.status_line = std::string(head.substr(0, eol));
  if (out.status_line.rfind("HTTP/1.", 0) != 0 || out.status_line.size() < 12)
    return Fail(Errc::protocol_error, "not an HTTP/1.x response: \"" + out.status_line.substr(0, 80) + "\"");
  out.status = std::atoi(out.status_line.c_str() + 9);
  std::size_t pos = eol + 2;
  while (pos < head.size()) {
    std::size_t end = head.find("\r\n", pos);
    if (end == std::string_view::npos) end = head.size();
    std::string_view line = head.substr(pos, end - pos);
    pos = end + 2;
    if (line.empty()) break;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = Lower(Trim(line.substr(0, colon)));
    std::string value(Trim(line.substr(colon + 1)));
    auto [it, inserted] = out.headers.emplace(name, value);
    if (!inserted) it->second += ", " + value;
  }
  return out;
}

bool HeaderHasToken(const std::string& value, std::string_view token) {
  std::string lower = Lower(value);
  std::string want = Lower(token);
  std::size_t start = 0;
  while (start <= lower.size()) {
    std::size_t comma = lower.find(',', start);
    if (comma == std::string::npos) comma = lower.size();
    if (Trim(std::string_view(lower).substr(start, comma - start)) == want) return true;
    start = comma + 1;
  }
  return false;
}

// Turns a refused upgrade into an Error: the status line, plus the Kubernetes Status message if the
// body is one, with 401/403/404 mapped to their own codes.
Error RefusedUpgrade(const std::string& where, const HttpHead& head, std::string_view body) {
  std::string message = "WebSocket upgrade to " + where + " refused: " + head.status_line;
  auto json = nlohmann::json::parse(body, nullptr, false);
  if (!json.is_discarded() && json.is_object() && json.value("kind", "") == "Status") {
    std::string text = json.value("message", "");
    if (!text.empty()) message += ": " + text;
  } else if (!body.empty()) {
    std::string text(Trim(body.substr(0, 200)));
    if (!text.empty()) message += ": " + text;
  }
  Errc code = Errc::connection_failed;
  if (head.status == 401) code = Errc::unauthorized;
  else if (head.status == 403) code = Errc::forbidden;
  else if (head.status == 404) code = Errc::not_found;
  else if (head.status == 429 || head.status >= 500) code = Errc::unavailable;
  return Error(code, message, head.status);
}

std::string DescribeCode(const std::error_code& ec) {
  if (ec == asio::error::eof) return "the peer closed the connection";
  if (ec == asio::ssl::error::stream_truncated) return "the peer closed the TLS stream without close_notify";
  return ec.message();
}

struct ProxyUrl {
  std::string host;
  std::uint16_t port = 0;
  std::string authorization;  // "Basic ..." when the URL carries user:password
};

Result<ProxyUrl> ParseProxyUrl(std::string_view url) {
  std::string_view rest = url;
  if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
  } else if (rest.find("://") != std::string_view::npos) {
    return Fail(Errc::invalid_argument, "proxy URL \"" + std::string(url) +
                                            "\": only http:// proxies are supported (the tunnel itself carries TLS)");
  }
  std::size_t slash = rest.find('/');
  if (slash != std::string_view::npos) rest = rest.substr(0, slash);
  ProxyUrl out;
  std::size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    std::string cred(rest.substr(0, at));
    out.authorization = "Basic " + Base64(reinterpret_cast<const unsigned char*>(cred.data()), cred.size());
    rest.remove_prefix(at + 1);
  }
  std::string_view host = rest;
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    std::size_t close = rest.find(']');
    if (close == std::string_view::npos) return Fail(Errc::invalid_argument, "proxy URL has a bad IPv6 host");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return Fail(Errc::invalid_argument, "proxy URL \"" + std::string(url) + "\" has no host");
  out.host = std::string(host);
  int p = port.empty() ? 80 : std::atoi(std::string(port).c_str());
  if (p <= 0 || p > 65535) return Fail(Errc::invalid_argument, "proxy URL \"" + std::string(url) + "\" has a bad port");
  out.port = static_cast<std::uint16_t>(p);
  return out;
}

std::string HostPort(const std::string& host, std::uint16_t port) {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

class WsImpl final : public WebSocket, public std::enable_shared_from_this<WsImpl> {
 public:
  WsImpl(Context& context, WsTarget target)
      : target_(std::move(target)),
        strand_(asio::make_strand(context.io())),
        ssl_ctx_(SharedSslContext(target_, tls_status_)),
        stream_(strand_, *ssl_ctx_),
        resolver_(strand_),
        timer_(strand_),
        reader_(target_.max_message),
        read_chunk_(kReadChunkBytes) {}

  void Begin(ConnectHandler handler) {
    connect_handler_ = std::move(handler);
    if (!target_.proxy.empty()) {
      auto proxy = ParseProxyUrl(target_.proxy);
      if (!proxy) return FailConnect(proxy.error());
      proxy_ = std::move(*proxy);
    }
    if (target_.use_tls) {
      if (auto st = tls_status_; !st) {
        Error e = st.error();
        e.message = "TLS configuration for " + target_.Describe() + ": " + e.message;
        return FailConnect(std::move(e));
      }
    }
    ArmTimer(target_.connect_timeout, "connecting to " + Where());
    const std::string& host = proxy_ ? proxy_->host : target_.host;
    std::uint16_t port = proxy_ ? proxy_->port : target_.port;
    resolver_.async_resolve(host, std::to_string(port),
                            asio::bind_executor(strand_, [self = shared_from_this()](
                                                             std::error_code ec, asio::ip::tcp::resolver::results_type r) {
                              self->OnResolved(ec, std::move(r));
                            }));
  }

  void Start(MessageHandler handler) override {
    asio::post(strand_, [self = shared_from_this(), handler = std::move(handler)]() mutable {
      if (self->terminated_ || self->transport_closed_) {
        if (handler && !self->close_requested_)
          handler(Fail(Errc::connection_lost, "the WebSocket to " + self->Where() + " is already closed"));
        return;
      }
      self->handler_ = std::move(handler);
      self->started_ = true;
      if (!self->buffer_.empty()) {
        std::string pending = std::move(self->buffer_);
        self->buffer_.clear();
        if (!self->FeedReader(pending)) return;
      }
      self->StartRead();
    });
  }

  void Send(std::string payload, bool binary, DoneHandler done) override {
    asio::post(strand_, [self = shared_from_this(), payload = std::move(payload), binary,
                         done = std::move(done)]() mutable {
      if (self->close_requested_ || self->terminated_) {
        // Cancelled only when our side closed; a peer's close or a dropped stream is a lost connection.
        if (done)
          done(Fail(self->closed_by_us_ ? Errc::cancelled : Errc::connection_lost,
                    "the WebSocket to " + self->Where() + (self->closed_by_us_ ? " is closing" : " has ended")));
        return;
      }
      self->Enqueue(EncodeWsFrame(binary ? ws_opcode::kBinary : ws_opcode::kText, payload), std::move(done));
    });
  }

  void AsyncClose(std::uint16_t code, DoneHandler done) override {
    asio::post(strand_, [self = shared_from_this(), code, done = std::move(done)]() mutable {
      self->DoClose(code, std::move(done));
    });
  }

  void Abort() override {
    asio::post(strand_, [self = shared_from_this()] {
      self->closed_by_us_ = true;
      self->handler_ = nullptr;
      self->terminated_ = true;
      self->CloseTransport();
      self->CompleteClose(Fail(Errc::cancelled, "the WebSocket was aborted"));
    });
  }

  const std::string& Subprotocol() const override { return subprotocol_; }
  Strand& executor() override { return strand_; }
  std::string Describe() const override { return target_.Describe(); }

 private:
  // The context must be complete before the stream exists: SSL_new copies the verify mode and the
  // client certificate from it, so later changes would not reach this connection.
  static asio::ssl::context MakeSslContext(const WsTarget& target, Status& status) {
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    if (target.use_tls) status = ConfigureTlsContext(ctx.native_handle(), target.tls);
    return ctx;
  }

  // Making an OpenSSL 3 context and parsing the CA costs about as much as the TLS handshake itself, and
  // every turn (and reconnect) opens a new exec connection: reuse one context per TLS material. A
  // configured SSL_CTX is safe to share between threads for making connections.
  static std::shared_ptr<asio::ssl::context> SharedSslContext(const WsTarget& target, Status& status) {
    constexpr std::size_t kMaxCachedContexts = 16;  // distinct clusters/credentials a process talks to
    static std::mutex mu;
    static std::map<std::string, std::shared_ptr<asio::ssl::context>> cache;
    if (!target.use_tls) return std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    std::string key;
    key.reserve(target.tls.ca_pem.size() + target.tls.cert_pem.size() + target.tls.key_pem.size() + 4);
    key.append(target.tls.ca_pem).append(1, '\0').append(target.tls.cert_pem).append(1, '\0');
    key.append(target.tls.key_pem).append(1, '\0').append(target.tls.insecure ? "1" : "0");
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    auto ctx = std::make_shared<asio::ssl::context>(MakeSslContext(target, status));
    if (!status) return ctx;  // not cached: the error is reported by Begin
    if (cache.size() >= kMaxCachedContexts) cache.clear();
    cache.emplace(std::move(key), ctx);
    return ctx;
  }

  // Runs `fn` with the byte stream: the TLS stream, or the bare socket for ws://.
  template <typename Fn>
  void WithStream(Fn&& fn) {
    if (target_.use_tls) fn(stream_);
    else fn(stream_.next_layer());
  }

  std::string Where() const { return target_.Describe(); }

  void ArmTimer(std::chrono::milliseconds timeout, std::string phase) {
    phase_ = std::move(phase);
    phase_timeout_ = timeout;
    timer_.expires_after(timeout);
    timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this(), gen = ++timer_generation_](
                                                       std::error_code ec) {
      if (ec || gen != self->timer_generation_) return;
      self->timed_out_ = true;
      self->OnTimeout();
    }));
  }
  void DisarmTimer() {
    ++timer_generation_;
    timer_.cancel();
  }

  Error TimeoutError() const {
    return Error(Errc::timeout, "timed out after " + std::to_string(phase_timeout_.count()) + " ms " + phase_);
  }

  void OnTimeout() {
    if (connect_handler_) {
      resolver_.cancel();
      CloseTransport();  // the pending operation completes with an error; FailConnect reports the timeout
      return;
    }
    // The close handshake deadline: give up waiting for the peer's close frame.
    CloseTransport();
    CompleteClose(Fail(TimeoutError()));
  }

  void FailConnect(Error error) {
    if (timed_out_) error = TimeoutError();
    DisarmTimer();
    CloseTransport();
    if (auto h = std::move(connect_handler_)) {
      connect_handler_ = nullptr;
      h(Fail(std::move(error)));
    }
  }

  void OnResolved(std::error_code ec, asio::ip::tcp::resolver::results_type results) {
    const std::string& host = proxy_ ? proxy_->host : target_.host;
    if (ec)
      return FailConnect(Error(Errc::connection_failed,
                               "cannot resolve " + host + (proxy_ ? " (the proxy)" : "") + ": " + ec.message()));
    asio::async_connect(stream_.lowest_layer(), results,
                        asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec2,
                                                                                 const asio::ip::tcp::endpoint&) {
                          self->OnConnected(ec2);
                        }));
  }

  void OnConnected(std::error_code ec) {
    if (ec) {
      std::string what = proxy_ ? "the proxy " + HostPort(proxy_->host, proxy_->port) + " for " + Where() : Where();
      return FailConnect(Error(Errc::connection_failed, "cannot connect to " + what + ": " + ec.message()));
    }
    std::error_code ignored;
    stream_.lowest_layer().set_option(asio::ip::tcp::no_delay(true), ignored);
    if (proxy_) return SendProxyConnect();
    AfterTunnel();
  }

  void SendProxyConnect() {
    std::string authority = HostPort(target_.host, target_.port);
    request_ = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n";
    if (!proxy_->authorization.empty()) request_ += "Proxy-Authorization: " + proxy_->authorization + "\r\n";
    request_ += "\r\n";
    asio::async_write(stream_.next_layer(), asio::buffer(request_),
                      asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t) {
                        if (ec)
                          return self->FailConnect(
                              Error(Errc::connection_failed, "proxy CONNECT for " + self->Where() + ": " + ec.message()));
                        self->ReadProxyReply();
                      }));
  }

  void ReadProxyReply() {
    asio::async_read_until(
        stream_.next_layer(), asio::dynamic_buffer(buffer_, kMaxHttpHeadBytes), "\r\n\r\n",
        asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
          if (ec)
            return self->FailConnect(Error(Errc::connection_failed, "proxy CONNECT for " + self->Where() +
                                                                        ": no reply: " + DescribeCode(ec)));
          auto head = ParseHttpHead(std::string_view(self->buffer_).substr(0, n));
          if (!head) return self->FailConnect(head.error());
          if (head->status != 200)
            return self->FailConnect(Error(Errc::connection_failed, "proxy refused CONNECT to " + self->Where() +
                                                                        ": " + head->status_line,
                                           head->status));
          self->buffer_.erase(0, n);
          self->AfterTunnel();
        }));
  }

  void AfterTunnel() {
    if (!target_.use_tls) return SendUpgrade();
    SSL* ssl = stream_.native_handle();
    const std::string& name = target_.tls.server_name.empty() ? target_.host : target_.tls.server_name;
    bool ip = IsIpLiteral(name);
    // SNI must be a DNS name (RFC 6066 §3), never an address.
    if (!ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1)
      return FailConnect(Error(Errc::connection_failed, "cannot set SNI " + name + ": " + DrainOpenSslErrors()));
    if (!target_.tls.insecure) {
      int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) : SSL_set1_host(ssl, name.c_str());
      if (ok != 1)
        return FailConnect(Error(Errc::connection_failed, "cannot set the name to verify (" + name +
                                                              "): " + DrainOpenSslErrors()));
    }
    stream_.async_handshake(asio::ssl::stream_base::client,
                            asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec) {
                              self->OnTlsHandshake(ec);
                            }));
  }

  void OnTlsHandshake(std::error_code ec) {
    if (!ec) return SendUpgrade();
    std::string why = DescribeCode(ec);
    long verify = SSL_get_verify_result(stream_.native_handle());
    if (verify != X509_V_OK) {
      why = std::string("certificate verification failed: ") + X509_verify_cert_error_string(verify);
      const std::string& name = target_.tls.server_name.empty() ? target_.host : target_.tls.server_name;
      if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
        why += " (the certificate is not valid for \"" + name + "\")";
    }
    FailConnect(Error(Errc::connection_failed, "TLS handshake with " + Where() + " failed: " + why));
  }

  void SendUpgrade() {
    ArmTimer(target_.handshake_timeout, "waiting for the WebSocket handshake with " + Where());
    key_ = NewWsKey();
    bool default_port = target_.port == (target_.use_tls ? 443 : 80);
    std::string host = target_.host.find(':') != std::string::npos ? "[" + target_.host + "]" : target_.host;
    if (!default_port) host += ":" + std::to_string(target_.port);
    request_ = "GET " + target_.path + " HTTP/1.1\r\nHost: " + host +
               "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " +
               key_ + "\r\nUser-Agent: sessionturn/" SESSIONTURN_VERSION_STRING "\r\n";
    if (!target_.subprotocols.empty()) {
      request_ += "Sec-WebSocket-Protocol: ";
      for (std::size_t i = 0; i < target_.subprotocols.size(); ++i)
        request_ += (i ? ", " : "") + target_.subprotocols[i];
      request_ += "\r\n";
    }
    for (const auto& [name, value] : target_.headers) request_ += name + ": " + value + "\r\n";
    request_ += "\r\n";
    WithStream([&](auto& s) {
      asio::async_write(s, asio::buffer(request_),
                        asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t) {
                          if (ec)
                            return self->FailConnect(Error(Errc::connection_failed, "sending the WebSocket upgrade to " +
                                                                                        self->Where() + ": " +
                                                                                        DescribeCode(ec)));
                          self->ReadUpgradeReply();
                        }));
    });
  }

  void ReadUpgradeReply() {
    WithStream([&](auto& s) {
      asio::async_read_until(
          s, asio::dynamic_buffer(buffer_, kMaxHttpHeadBytes), "\r\n\r\n",
          asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
            self->OnUpgradeReply(ec, n);
          }));
    });
  }

  void OnUpgradeReply(std::error_code ec, std::size_t n) {
    if (ec) {
      std::string why = ec == asio::error::not_found ? "the response head exceeds " +
                                                           std::to_string(kMaxHttpHeadBytes) + " bytes (kMaxHttpHeadBytes)"
                                                     : DescribeCode(ec);
      return FailConnect(Error(Errc::connection_failed, "no WebSocket handshake reply from " + Where() + ": " + why));
    }
    auto head = ParseHttpHead(std::string_view(buffer_).substr(0, n));
    if (!head) {
      Error e = head.error();
      e.message = "WebSocket handshake with " + Where() + ": " + e.message;
      return FailConnect(std::move(e));
    }
    buffer_.erase(0, n);
    if (head->status != 101) {
      head_ = std::move(*head);
      return ReadErrorBody();
    }
    if (!HeaderHasToken(head->Get("upgrade"), "websocket") || !HeaderHasToken(head->Get("connection"), "upgrade"))
      return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                         ": the 101 reply lacks Upgrade: websocket / Connection: Upgrade"));
    std::string accept = head->Get("sec-websocket-accept");
    if (accept != WsAcceptFor(key_))
      return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                         ": wrong Sec-WebSocket-Accept \"" + accept.substr(0, 64) +
                                                         "\" (the server did not answer our key)"));
    std::string protocol = head->Get("sec-websocket-protocol");
    if (!target_.subprotocols.empty()) {
      if (protocol.empty())
        return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                           ": the server agreed to no sub-protocol (offered " +
                                                           JoinedSubprotocols() + ")"));
      if (std::find(target_.subprotocols.begin(), target_.subprotocols.end(), protocol) == target_.subprotocols.end())
        return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                           ": the server chose sub-protocol \"" + protocol +
                                                           "\", which we did not offer (" + JoinedSubprotocols() + ")"));
    } else if (!protocol.empty()) {
      return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                         ": the server chose sub-protocol \"" + protocol +
                                                         "\" although none was offered"));
    }
    if (!head->Get("sec-websocket-extensions").empty())
      return FailConnect(Error(Errc::protocol_error, "WebSocket handshake with " + Where() +
                                                         ": the server enabled extensions we did not offer"));
    subprotocol_ = protocol;
    DisarmTimer();
    phase_.clear();
    auto h = std::move(connect_handler_);
    connect_handler_ = nullptr;
    h(std::static_pointer_cast<WebSocket>(shared_from_this()));
  }

  std::string JoinedSubprotocols() const {
    std::string out;
    for (const auto& p : target_.subprotocols) out += (out.empty() ? "" : ", ") + p;
    return out;
  }

  void ReadErrorBody() {
    std::string length = head_.Get("content-length");
    std::size_t want = kMaxErrorBodyBytes;
    bool exact = false;
    if (!length.empty()) {
      want = std::min<std::size_t>(std::strtoull(length.c_str(), nullptr, 10), kMaxErrorBodyBytes);
      exact = true;
    }
    if (buffer_.size() >= want) return FinishErrorBody();
    std::size_t missing = want - buffer_.size();
    WithStream([&](auto& s) {
      asio::async_read(s, asio::dynamic_buffer(buffer_, kMaxErrorBodyBytes), asio::transfer_exactly(missing),
                       asio::bind_executor(strand_, [self = shared_from_this(), exact](std::error_code ec, std::size_t) {
                         // Without a length the body ends at EOF; with one, a short body is still worth showing.
                         (void)exact;
                         (void)ec;
                         self->FinishErrorBody();
                       }));
    });
  }

  void FinishErrorBody() {
    std::string body = buffer_;
    if (HeaderHasToken(head_.Get("transfer-encoding"), "chunked")) body = Dechunk(body);
    FailConnect(RefusedUpgrade(Where(), head_, body));
  }

  static std::string Dechunk(std::string_view in) {
    std::string out;
    while (!in.empty()) {
      std::size_t eol = in.find("\r\n");
      if (eol == std::string_view::npos) break;
      std::size_t size = std::strtoul(std::string(in.substr(0, eol)).c_str(), nullptr, 16);
      in.remove_prefix(eol + 2);
      if (size == 0 || size > in.size()) break;
      out.append(in.substr(0, size));
      in.remove_prefix(std::min(in.size(), size + 2));
    }
    return out;
  }

  // --- open state -------------------------------------------------------------------------------

  void StartRead() {
    if (transport_closed_ || reading_) return;
    reading_ = true;
    WithStream([&](auto& s) {
      s.async_read_some(asio::buffer(read_chunk_),
                        asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
                          self->reading_ = false;
                          self->OnRead(ec, n);
                        }));
    });
  }

  void OnRead(std::error_code ec, std::size_t n) {
    if (ec) {
      if (close_requested_) {
        // We sent our close; the peer hanging up instead of echoing it still ends the connection.
        CloseTransport();
        CompleteClose({});
        return;
      }
      if (transport_closed_) return;
      Terminate(Error(Errc::connection_lost, "the WebSocket to " + Where() + " dropped: " + DescribeCode(ec) +
                                                 (peer_closed_ ? "" : " (no close frame)")));
      return;
    }
    if (!FeedReader(std::string_view(read_chunk_.data(), n))) return;
    StartRead();
  }

  // False when the stream must stop (a protocol violation, the close handshake done).
  bool FeedReader(std::string_view bytes) {
    auto st = reader_.Feed(bytes, [this](WsReader::Event&& e) { OnEvent(std::move(e)); });
    if (!st) {
      // Tell the peer why (1009 too big, 1002 protocol error), then stop.
      std::uint16_t code = st.error().code == Errc::too_large ? 1009 : 1002;
      if (!close_requested_ && !peer_closed_) {
        close_requested_ = true;
        Enqueue(CloseFrame(code), nullptr);
        close_transport_after_flush_ = true;
        ArmTimer(target_.close_timeout, "flushing our close frame to " + Where());
      }
      Error e = st.error();
      e.message = "WebSocket from " + Where() + ": " + e.message;
      Terminate(std::move(e), /*close_now=*/false);
      return false;
    }
    // Keep reading after delivery ended too: our close waits for the peer's close frame, which may
    // come after data frames already in flight.
    return !transport_closed_;
  }

  void OnEvent(WsReader::Event&& e) {
    if (terminated_ && !close_requested_) return;
    switch (e.kind) {
      case WsReader::Event::kMessage:
        if (handler_ && !close_requested_) handler_(Message{e.binary, std::move(e.data)});
        break;
      case WsReader::Event::kPing:
        if (!close_requested_ && !peer_closed_) Enqueue(EncodeWsFrame(ws_opcode::kPong, e.data), nullptr);
        break;
      case WsReader::Event::kPong: break;
      case WsReader::Event::kClose: OnPeerClose(e.close_code, e.data); break;
    }
  }

  std::string CloseFrame(std::uint16_t code) {
    std::string payload;
    payload.push_back(static_cast<char>(code >> 8));
    payload.push_back(static_cast<char>(code & 0xff));
    return EncodeWsFrame(ws_opcode::kClose, payload);
  }

  void OnPeerClose(std::uint16_t code, const std::string& reason) {
    if (peer_closed_) return;
    peer_closed_ = true;
    if (close_requested_) {
      // The reply to our close: the handshake is complete.
      DisarmTimer();
      close_transport_after_flush_ = true;
      if (!writing_) CloseTransport();
      CompleteClose({});
      return;
    }
    // The server closes first: echo its code (RFC 6455 §5.5.1), then hang up once that is written.
    close_requested_ = true;
    Enqueue(CloseFrame(code == 0 ? 1000 : code), nullptr);
    close_transport_after_flush_ = true;
    ArmTimer(target_.close_timeout, "echoing the server's close frame to " + Where());
    std::string text = "the server closed the WebSocket to " + Where() + " (code " +
                       (code == 0 ? std::string("none") : std::to_string(code)) +
                       (reason.empty() ? std::string() : ": " + reason) + ")";
    Terminate(Error(Errc::connection_lost, text), /*close_now=*/false);
  }

  // Ends message delivery with `error` (once).
  void Terminate(Error error, bool close_now = true) {
    if (close_now) CloseTransport();
    if (terminated_) return;
    terminated_ = true;
    auto h = std::move(handler_);
    handler_ = nullptr;
    if (h) h(Fail(std::move(error)));
  }

  void DoClose(std::uint16_t code, DoneHandler done) {
    closed_by_us_ = true;
    if (done) close_done_.push_back(std::move(done));
    if (transport_closed_) return CompleteClose({});
    handler_ = nullptr;  // the caller is done with messages
    if (close_requested_) return;  // already closing (ours or the echo of the peer's); wait for it
    close_requested_ = true;
    terminated_ = true;
    Enqueue(CloseFrame(code), nullptr);
    ArmTimer(target_.close_timeout, "waiting for the server's close frame from " + Where());
    // The peer's close arrives through the reader, which must be running for that.
    if (!started_) {
      started_ = true;
      if (!buffer_.empty()) {
        std::string pending = std::move(buffer_);
        buffer_.clear();
        if (!FeedReader(pending)) return;
      }
    }
    StartRead();
  }

  void CompleteClose(Status status) {
    auto dones = std::move(close_done_);
    close_done_.clear();
    for (auto& d : dones) d(status);
  }

  struct Outgoing {
    std::string bytes;
    DoneHandler done;
  };

  void Enqueue(std::string bytes, DoneHandler done) {
    if (transport_closed_) {
      if (done) done(Fail(Errc::connection_lost, "the WebSocket to " + Where() + " is closed"));
      return;
    }
    out_.push_back(Outgoing{std::move(bytes), std::move(done)});
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (out_.empty() || transport_closed_) {
      writing_ = false;
      if (close_transport_after_flush_) CloseTransport();
      return;
    }
    writing_ = true;
    WithStream([&](auto& s) {
      asio::async_write(s, asio::buffer(out_.front().bytes),
                        asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t) {
                          self->OnWritten(ec);
                        }));
    });
  }

  void OnWritten(std::error_code ec) {
    if (out_.empty()) {  // the queue was failed by CloseTransport meanwhile
      writing_ = false;
      return;
    }
    Outgoing done = std::move(out_.front());
    out_.pop_front();
    if (ec) {
      writing_ = false;
      Error e(transport_closed_ ? Errc::cancelled : Errc::connection_lost,
              "writing to the WebSocket " + Where() + ": " + DescribeCode(ec));
      if (done.done) done.done(Fail(e));
      Terminate(e);
      return;
    }
    if (done.done) done.done({});
    WriteNext();
  }

  void CloseTransport() {
    if (transport_closed_) return;
    transport_closed_ = true;
    DisarmTimer();
    std::error_code ignored;
    stream_.lowest_layer().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.lowest_layer().close(ignored);
    resolver_.cancel();
    auto pending = std::move(out_);
    out_.clear();
    // The frame being written (front) completes through its own handler with operation_aborted.
    for (std::size_t i = writing_ ? 1 : 0; i < pending.size(); ++i)
      if (pending[i].done) pending[i].done(Fail(Errc::cancelled, "the WebSocket to " + Where() + " closed"));
    if (writing_ && !pending.empty()) out_.push_back(std::move(pending.front()));
  }

  WsTarget target_;
  Strand strand_;
  Status tls_status_;  // set while ssl_ctx_ is made; reported by Begin
  std::shared_ptr<asio::ssl::context> ssl_ctx_;  // shared by connections with the same TLS material
  asio::ssl::stream<asio::ip::tcp::socket> stream_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer timer_;
  std::uint64_t timer_generation_ = 0;
  std::string phase_;
  std::chrono::milliseconds phase_timeout_{0};
  bool timed_out_ = false;
  std::optional<ProxyUrl> proxy_;
  ConnectHandler connect_handler_;
  std::string request_;
  std::string key_;
  std::string buffer_;  // handshake bytes, then frame bytes read with the head and not yet fed
  HttpHead head_;
  std::string subprotocol_;

  WsReader reader_;
  std::vector<char> read_chunk_;
  MessageHandler handler_;
  bool started_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool terminated_ = false;
  bool close_requested_ = false;  // a close frame was queued (ours, or the echo of the peer's)
  bool closed_by_us_ = false;     // AsyncClose or Abort was called
  bool peer_closed_ = false;
  bool close_transport_after_flush_ = false;
  bool transport_closed_ = false;
  std::deque<Outgoing> out_;
  std::vector<DoneHandler> close_done_;
};

}  // namespace

std::string WsTarget::Describe() const {
  std::string p = path.substr(0, path.find('?'));
  return std::string(use_tls ? "wss://" : "ws://") + HostPort(host, port) + p;
}

bool NoProxyMatches(std::string_view no_proxy, std::string_view host_in) {
  std::string host = Lower(host_in);
  std::size_t start = 0;
  while (start <= no_proxy.size()) {
    std::size_t comma = no_proxy.find(',', start);
    if (comma == std::string_view::npos) comma = no_proxy.size();
    std::string entry = Lower(Trim(no_proxy.substr(start, comma - start)));
    start = comma + 1;
    if (entry.empty()) continue;
    if (entry == "*") return true;
    // Entries may carry a port ("host:port"); we match on the host only, as curl does.
    if (std::size_t colon = entry.rfind(':'); colon != std::string::npos && entry.find(':') == colon)
      entry = entry.substr(0, colon);
    if (!entry.empty() && entry.front() == '.') entry.erase(0, 1);
    if (host == entry) return true;
    if (host.size() > entry.size() && host.compare(host.size() - entry.size(), entry.size(), entry) == 0 &&
        host[host.size() - entry.size() - 1] == '.')
      return true;
    // CIDR entries ("10.0.0.0/8") for IPv4 literals.
    if (std::size_t slash = entry.find('/'); slash != std::string::npos && IsIpLiteral(host)) {
      std::error_code ec1, ec2;
      auto net = asio::ip::make_address(entry.substr(0, slash), ec1);
      auto addr = asio::ip::make_address(host, ec2);
      int bits = std::atoi(entry.c_str() + slash + 1);
      if (!ec1 && !ec2 && net.is_v4() && addr.is_v4() && bits >= 0 && bits <= 32) {
        std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
        if ((net.to_v4().to_uint() & mask) == (addr.to_v4().to_uint() & mask)) return true;
      }
    }
  }
  return false;
}

std::string ProxyFromEnvironment(std::string_view host, bool use_tls) {
  auto env = [](const char* upper, const char* lower) -> std::string {
    if (const char* v = std::getenv(lower); v && *v) return v;
    if (const char* v = std::getenv(upper); v && *v) return v;
    return {};
  };
  std::string proxy = use_tls ? env("HTTPS_PROXY", "https_proxy") : env("HTTP_PROXY", "http_proxy");
  if (proxy.empty()) return {};
  if (NoProxyMatches(env("NO_PROXY", "no_proxy"), host)) return {};
  return proxy;
}

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

Status WsReader::Poison(Errc code, std::string message) {
  error_ = Error(code, std::move(message));
  buffer_.clear();
  message_.clear();
  offset_ = 0;
  return Fail(*error_);
}

Status WsReader::Feed(std::string_view bytes, const EventFn& on_event) {
  if (error_) return Fail(*error_);
  buffer_.append(bytes);
  for (;;) {
    std::string_view avail = std::string_view(buffer_).substr(offset_);
    if (avail.size() < 2) break;
    const auto b0 = static_cast<std::uint8_t>(avail[0]);
    const auto b1 = static_cast<std::uint8_t>(avail[1]);
    const bool fin = (b0 & 0x80) != 0;
    const std::uint8_t opcode = b0 & 0x0f;
    if ((b0 & 0x70) != 0) return Poison(Errc::protocol_error, "a frame has reserved bits set (no extension was agreed)");
    if ((b1 & 0x80) != 0) return Poison(Errc::protocol_error, "the server masked a frame (RFC 6455 §5.1 forbids it)");
    const bool control = (opcode & 0x08) != 0;
    if (opcode != ws_opcode::kContinuation && opcode != ws_opcode::kText && opcode != ws_opcode::kBinary &&
        opcode != ws_opcode::kClose && opcode != ws_opcode::kPing && opcode != ws_opcode::kPong)
      return Poison(Errc::protocol_error, "a frame has the unknown opcode " + std::to_string(opcode));
    std::uint64_t length = b1 & 0x7f;
    std::size_t header = 2;
    if (control && (!fin || length > 125))
      return Poison(Errc::protocol_error, "a control frame is fragmented or longer than 125 bytes");
    if (length == 126) {
      if (avail.size() < 4) break;
      length = (std::uint64_t{static_cast<std::uint8_t>(avail[2])} << 8) | static_cast<std::uint8_t>(avail[3]);
      header = 4;
    } else if (length == 127) {
      if (avail.size() < 10) break;
      length = 0;
      for (int i = 2; i < 10; ++i) length = (length << 8) | static_cast<std::uint8_t>(avail[i]);
      if ((length >> 63) != 0) return Poison(Errc::protocol_error, "a frame length has its top bit set");
      header = 10;
    }
    // Check the bound on the declared length, before buffering the payload.
    if (!control) {
      std::size_t already = in_message_ ? message_.size() : 0;
      if (length > max_message_ - already)
        return Poison(Errc::too_large, "a message exceeds the WebSocket message bound of " +
                                           std::to_string(max_message_) + " bytes (kMaxWsMessageBytes)");
    }
    if (avail.size() - header < length) break;
    std::string_view payload = avail.substr(header, static_cast<std::size_t>(length));
    offset_ += header + static_cast<std::size_t>(length);
    if (control) {
      Event e;
      if (opcode == ws_opcode::kClose) {
        e.kind = Event::kClose;
        if (payload.size() == 1) return Poison(Errc::protocol_error, "a close frame has a 1-byte payload");
        if (payload.size() >= 2) {
          e.close_code = static_cast<std::uint16_t>((static_cast<std::uint8_t>(payload[0]) << 8) |
                                                    static_cast<std::uint8_t>(payload[1]));
          e.data = std::string(payload.substr(2));
        }
      } else {
        e.kind = opcode == ws_opcode::kPing ? Event::kPing : Event::kPong;
        e.data = std::string(payload);
      }
      on_event(std::move(e));
      if (error_) return Fail(*error_);
      continue;
    }
    if (opcode == ws_opcode::kContinuation) {
      if (!in_message_) return Poison(Errc::protocol_error, "a continuation frame arrived outside a message");
      message_.append(payload);
      if (fin) {
        in_message_ = false;
        Event e;
        e.binary = message_binary_;
        e.data = std::move(message_);
        message_.clear();
        on_event(std::move(e));
      }
      continue;
    }
    if (in_message_) return Poison(Errc::protocol_error, "a new message began inside a fragmented message");
    if (fin) {
      Event e;
      e.binary = opcode == ws_opcode::kBinary;
      e.data = std::string(payload);
      on_event(std::move(e));
    } else {
      in_message_ = true;
      message_binary_ = opcode == ws_opcode::kBinary;
      message_.assign(payload);
    }
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

void WebSocket::AsyncConnect(Context& context, WsTarget target, ConnectHandler handler) {
  std::shared_ptr<WsImpl> ws;
  try {
    ws = std::make_shared<WsImpl>(context, std::move(target));
  } catch (const std::exception& e) {
    // asio::ssl::context throws when OpenSSL cannot make a context; keep exceptions inside.
    context.Post([handler = std::move(handler), what = std::string(e.what())] {
      handler(Fail(Errc::internal, std::string("cannot create a TLS context: ") + what));
    });
    return;
  }
  asio::post(ws->executor(), [ws, handler = std::move(handler)]() mutable { ws->Begin(std::move(handler)); });
}

}  // namespace sessionturn::kube
