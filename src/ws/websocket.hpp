// An RFC 6455 WebSocket client over standalone Asio and OpenSSL (libcurl 7.88 as shipped here has no
// WebSocket support), for the Kubernetes exec subresource (src/kube/exec_connection.cpp) and Slack's
// Socket Mode. Internal to the library. The frame codec (WsReader, EncodeWsFrame) and the HTTP
// response parser (ws/response_parser.hpp) are sans-I/O so they can be fuzzed and unit-tested
// without a socket.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio.hpp>

#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"

namespace sessionturn::ws {

class TlsContextCache;  // ws/websocket_tls.hpp

// Largest message (all fragments together) we accept by default. The exec channel carries protocol
// lines of at most 8 MiB (kMaxLineBytes) split arbitrarily into messages; 16 MiB leaves room for
// framing and a whole line in one message while bounding what a hostile peer can make us buffer.
// Slack's Socket Mode envelopes are far smaller. WsTarget::max_message overrides it.
inline constexpr std::size_t kMaxWsMessageBytes = 16u << 20;
// Largest HTTP response head (status line + headers) we read during the handshake or proxy CONNECT.
inline constexpr std::size_t kMaxHttpHeadBytes = 64u << 10;
// Largest non-101 response body we read to explain a refused handshake (a Kubernetes Status, a Slack
// error page: small).
inline constexpr std::size_t kMaxErrorBodyBytes = 64u << 10;
// Defaults for every wait. Connect covers DNS, TCP, proxy CONNECT and TLS; generous because servers
// behind load balancers can be slow to accept, but finite so a black hole fails clearly.
inline constexpr std::chrono::milliseconds kDefaultWsConnectTimeout{30'000};
inline constexpr std::chrono::milliseconds kDefaultWsHandshakeTimeout{30'000};
inline constexpr std::chrono::milliseconds kDefaultWsCloseTimeout{5'000};
// Liveness defaults. A stream may sit idle for a long time, and a peer or middlebox that vanished
// without a FIN or RST leaves a half-open connection a read would wait on forever: a ping every
// 20 s, and nothing back within 20 s of it ends the stream, so a dead peer is noticed within 40 s.
// 20 s also stays inside the 60 s idle timeout common to load balancers and NATs. Users with their
// own policy (the Kubernetes exec code: kExecPingInterval) set WsTarget's fields.
inline constexpr std::chrono::milliseconds kDefaultWsPingInterval{20'000};
inline constexpr std::chrono::milliseconds kDefaultWsPongTimeout{20'000};
// TCP keepalive defaults, the backstop when pings are off or cannot be written: the first probe
// after 30 s of silence, then every 10 s, dead after 3 unanswered (within a minute).
inline constexpr std::chrono::seconds kDefaultWsTcpKeepaliveIdle{30};
inline constexpr std::chrono::seconds kDefaultWsTcpKeepaliveInterval{10};
inline constexpr int kDefaultWsTcpKeepaliveCount = 3;

namespace ws_opcode {
inline constexpr std::uint8_t kContinuation = 0x0;
inline constexpr std::uint8_t kText = 0x1;
inline constexpr std::uint8_t kBinary = 0x2;
inline constexpr std::uint8_t kClose = 0x8;
inline constexpr std::uint8_t kPing = 0x9;
inline constexpr std::uint8_t kPong = 0xA;
}  // namespace ws_opcode

// TLS settings, all in memory (e.g. the kubeconfig's *-data fields or files already read).
struct WsTls {
  std::string ca_pem;       // trusted CAs; empty = the system's default trust store
  std::string cert_pem;     // client certificate (chain) for mutual TLS; empty = none
  std::string key_pem;      // its private key
  std::string server_name;  // SNI and the name verified in the certificate; empty = the host
  bool insecure = false;    // skip verification (only when the configuration says so)
};

// TCP keepalive of the socket (kDefaultWsTcpKeepaliveIdle, why there). TCP_USER_TIMEOUT is set to
// idle + interval * count, so unacknowledged writes fail as soon as a silent peer would.
struct WsTcpKeepalive {
  bool enabled = true;
  std::chrono::seconds idle = kDefaultWsTcpKeepaliveIdle;
  std::chrono::seconds interval = kDefaultWsTcpKeepaliveInterval;
  int count = kDefaultWsTcpKeepaliveCount;
};

// Where and how to open one WebSocket.
struct WsTarget {
  std::string host;
  std::uint16_t port = 443;
  std::string path = "/";  // path and query, already URL-encoded
  bool use_tls = true;
  WsTls tls;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. Authorization (never logged)
  std::vector<std::string> subprotocols;  // offered in order of preference; non-empty = one must be agreed
  // "http://host:port" of an HTTP proxy to tunnel through with CONNECT. Empty = direct. Use
  // ProxyFromEnvironment() to honour HTTPS_PROXY / NO_PROXY.
  std::string proxy;
  std::chrono::milliseconds connect_timeout = kDefaultWsConnectTimeout;
  std::chrono::milliseconds handshake_timeout = kDefaultWsHandshakeTimeout;
  std::chrono::milliseconds close_timeout = kDefaultWsCloseTimeout;
  // Once Start() ran, a ping every ping_interval; when nothing at all (the pong included) arrives
  // within pong_timeout of a ping being written, the stream ends with Errc::connection_lost. Zero
  // ping_interval: no pings.
  std::chrono::milliseconds ping_interval = kDefaultWsPingInterval;
  std::chrono::milliseconds pong_timeout = kDefaultWsPongTimeout;
  WsTcpKeepalive tcp_keepalive;
  std::size_t max_message = kMaxWsMessageBytes;
  // The owner's TLS contexts (one per material, shared by its connections); empty: this connection
  // makes its own context.
  std::shared_ptr<TlsContextCache> tls_contexts;

  std::string Describe() const;  // "wss://host:port/path" without the query
};

// A target for a ws:// or wss:// URL: the host (an IPv6 literal in brackets, stored without them),
// the port (default 80 or 443), the path and query as given (already URL-encoded; "/" when empty),
// use_tls for wss://; every other field keeps its default. Errors: Errc::invalid_argument naming
// what is wrong (the scheme, an empty or malformed host, a bad port, userinfo, a fragment, a byte
// that must be percent-encoded).
Result<WsTarget> ParseWsUrl(std::string_view url);

// The proxy URL for `host` from HTTPS_PROXY/https_proxy (or HTTP_PROXY for plain ws), unless
// NO_PROXY/no_proxy matches it ("*", exact host, ".suffix" or "suffix" domain match, IP).
std::string ProxyFromEnvironment(std::string_view host, bool use_tls);
// True when `no_proxy` (comma-separated) exempts `host`.
bool NoProxyMatches(std::string_view no_proxy, std::string_view host);

// Sec-WebSocket-Accept for a key (SHA-1 + base64, RFC 6455 §4.2.2).
std::string WsAcceptFor(std::string_view key);
// 16 random bytes, base64 (RAND_bytes).
std::string NewWsKey();

// Encodes one frame. Client frames are masked with a fresh random key (RAND_bytes) per frame.
std::string EncodeWsFrame(std::uint8_t opcode, std::string_view payload, bool fin = true, bool mask = true);

// Parses a server's frame stream into messages and control frames, enforcing RFC 6455: server
// frames unmasked, reserved bits clear, control frames short and unfragmented, continuation only
// inside a fragmented message, the message bound. Control frames may interleave with fragments.
class WsReader {
 public:
  struct Event {
    enum Kind { kMessage, kPing, kPong, kClose } kind = kMessage;
    bool binary = true;      // kMessage: binary or text
    std::string data;        // message / ping / pong payload, or the close reason
    std::uint16_t close_code = 0;  // kClose: 0 when the peer sent none (1005)
  };
  using EventFn = std::function<void(Event&& event)>;

  explicit WsReader(std::size_t max_message = kMaxWsMessageBytes) : max_message_(max_message) {}

  // Consumes `bytes`; calls `on_event` per complete message or control frame. After an error the
  // reader is poisoned and every later call returns it again.
  Status Feed(std::string_view bytes, const EventFn& on_event);

 private:
  struct FrameHeader {
    bool fin = true;
    bool control = false;
    std::uint8_t opcode = 0;
    std::uint64_t length = 0;  // of the payload
    std::size_t size = 2;      // of the header
  };
  // The frame header at the start of `avail`, or nullopt while it is incomplete; checks the rules
  // a header alone can break, the message bound included.
  Result<std::optional<FrameHeader>> ParseHeader(std::string_view avail);
  Status OnControl(const FrameHeader& h, std::string_view payload, const EventFn& on_event);
  Status OnData(const FrameHeader& h, std::string_view payload, const EventFn& on_event);
  tl::unexpected<Error> Poison(Errc code, std::string message);

  std::size_t max_message_;
  std::string buffer_;
  std::size_t offset_ = 0;
  bool in_message_ = false;
  bool message_binary_ = true;
  std::string message_;
  std::optional<Error> error_;
};

// One client WebSocket. Every handler runs on executor() (a strand), so handlers of one socket never
// run concurrently. Methods may be called from any thread.
class WebSocket {
 public:
  using Strand = asio::strand<asio::io_context::executor_type>;
  struct Message {
    bool binary = true;
    std::string data;
  };
  using ConnectHandler = std::function<void(Result<std::shared_ptr<WebSocket>> socket)>;
  // Called per message; the final call carries an error (Errc::connection_lost naming the close code,
  // the transport error or the missed pong, Errc::protocol_error, Errc::too_large) and nothing
  // follows it.
  using MessageHandler = std::function<void(Result<Message> message)>;
  using DoneHandler = std::function<void(Status status)>;

  virtual ~WebSocket() = default;

  // Resolves, connects (through the proxy if any), does TLS and the upgrade. Errors: connection_failed
  // (DNS, TCP, TLS, proxy, verification with OpenSSL's reason), timeout (naming the phase),
  // protocol_error (bad Accept, no agreed sub-protocol, a malformed reply or one whose head exceeds
  // kMaxHttpHeadBytes), unauthorized/forbidden/not_found (401/403/404) and unavailable (429, 5xx)
  // with the start of the reply's body (a Kubernetes Status: its message), else connection_failed
  // naming the status line.
  static void AsyncConnect(Context& context, WsTarget target, ConnectHandler handler);

  // Starts delivering messages and the pings (a pong can only be seen once we read). Call once.
  // Nothing is read before it, and frames that came in the same read as the 101 wait for it, so
  // nothing is lost. Pings from the peer are answered with pongs.
  virtual void Start(MessageHandler handler) = 0;
  // Sends one message as one frame. `done` may be empty.
  virtual void Send(std::string payload, bool binary, DoneHandler done) = 0;
  // Sends a close frame and waits (close_timeout) for the peer's; then closes the transport. The
  // message handler is not called again. Idempotent.
  virtual void AsyncClose(std::uint16_t code, DoneHandler done) = 0;
  // Closes the transport now; pending sends complete with Errc::cancelled; no handler runs again.
  virtual void Abort() = 0;

  virtual const std::string& Subprotocol() const = 0;
  virtual Strand& executor() = 0;
  virtual std::string Describe() const = 0;
};

}  // namespace sessionturn::ws
