// Asynchronous HTTP on the Context: HttpClient runs libcurl's multi-socket interface on the
// Context's event loop (no thread of its own), with connection reuse, TLS material in memory, a
// streaming form for watches and long polls, and a blocking form run on the caller's thread. The retry helper
// (RetryPolicy, RetryBudget, ParseRetryAfter, ShouldRetry) is shared by every API client built on it.
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

#include "sessionturn/error.hpp"

namespace sessionturn {

class Context;

// A non-streaming response body larger than this fails with Errc::too_large: no API object we ask
// for is anywhere near it, and an unbounded buffer is a way to run a process out of memory.
inline constexpr std::size_t kDefaultMaxResponseBytes = 64u << 20;
// The response headers of one exchange, all of them together (libcurl bounds each line itself).
inline constexpr std::size_t kMaxResponseHeaderBytes = 1u << 20;

// TLS material, everything in memory. Verification is on unless insecure_skip_verify is set. The
// fields match KubeTls one for one (the cluster's TLS, kube.hpp), so the one maps onto the other.
struct HttpTls {
  std::string ca_pem;           // trusted CAs; empty: the system's trust store
  std::string client_cert_pem;  // empty: no client certificate
  std::string client_key_pem;
  // SNI and the name the certificate must carry; empty: the URL's host. The connection still goes
  // to the URL's host and port (the Host header names server_name).
  std::string server_name;
  bool insecure_skip_verify = false;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, POST, PUT, PATCH, DELETE, or any other token
  std::string url;             // http:// or https://, with its query
  HttpHeaders headers;         // added to (or replacing) the defaults: User-Agent, Accept-Encoding
  std::string body;            // sent with POST, PUT and PATCH (even when empty), and any method when non-empty
  // The whole exchange, connecting included; for a stream, its whole life. Every wait has a deadline.
  std::chrono::milliseconds timeout{30'000};
  std::chrono::milliseconds connect_timeout{10'000};  // name resolution, TCP, proxy and TLS handshake
  HttpTls tls;
  // "": the environment's proxy settings (http_proxy, https_proxy, no_proxy), as libcurl reads them.
  // Set ("http://proxy:3128"): every request goes through it and no_proxy does not apply (kubectl's
  // proxy-url behaves so).
  std::string proxy;
  // Non-streaming requests only (a stream's 2xx body goes to its chunk handler unbuffered).
  std::size_t max_response_bytes = kDefaultMaxResponseBytes;
};

// A response of any status: at this layer an HTTP status is not an error (the caller decides).
struct HttpResponse {
  int status = 0;
  HttpHeaders headers;  // of the final response (not of a 100 Continue or a proxy's CONNECT)
  std::string body;     // the whole body; for a stream, only when the status is not 2xx
  // New connections this exchange opened: 0 when it reused one kept alive from an earlier exchange.
  int new_connections = 0;

  // The first header of that name (case-insensitive), "" when there is none.
  std::string Header(std::string_view name) const;
};

using HttpHandler = std::function<void(Result<HttpResponse> response)>;

// The handlers of a streaming request (AsyncStream). They run on a Context worker, one at a time
// for all the streams of one HttpClient, so they must not block (hand slow work elsewhere).
struct HttpStreamHandlers {
  // Optional: the final response's status and headers, once, before any chunk. Return false to end
  // the stream (on_done then gets Errc::cancelled).
  std::function<bool(const HttpResponse& head)> on_headers;
  // Each piece of a 2xx body as it arrives, in order (pieces do not follow line or message
  // boundaries). Return false to end the stream (on_done then gets Errc::cancelled). A body of any
  // other status is not streamed: it is collected into the response on_done gets.
  std::function<bool(std::string_view chunk)> on_chunk;
  // Once, last: the response (status and headers; the body when not 2xx) when the server ended the
  // body, or the error. After a cancel: Errc::cancelled.
  HttpHandler on_done;
};

// Cancels one request or stream. Cheap to copy; a default-constructed handle does nothing.
class HttpCall {
 public:
  struct Impl;
  HttpCall() = default;
  explicit HttpCall(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  // Ends the exchange: its done handler gets Errc::cancelled (on a worker, soon: one hop through the
  // event loop), unless it already reported. Once Cancel() returned, no chunk or headers handler
  // starts any more; from inside such a handler it takes effect when the handler returns. Any
  // thread, idempotent.
  void Cancel();
  // The done handler has not been called yet (or is being called now).
  bool Active() const;

 private:
  std::shared_ptr<Impl> impl_;
};

struct HttpClientOptions {
  std::string user_agent;  // empty: "sessionturn/<version>"
  // Idle connections kept alive for reuse (libcurl's connection cache), across all hosts.
  long max_idle_connections = 32;
  // Easy handles kept for reuse between exchanges (each holds buffers worth keeping).
  std::size_t max_pooled_handles = 16;
};

// HTTP/1.1 and HTTP/2 (where the server offers it over TLS) on a Context. One libcurl multi handle
// per client: exchanges share its connections (keep-alive, HTTP/2 multiplexing), DNS cache and TLS
// sessions. All libcurl calls run serialized on one strand of the Context, so a Context with several
// workers is fine; the client has no thread of its own.
//
// Thread-safety: every method may be called from any thread. Handlers run on a Context worker.
// Destroying the client cancels everything in flight: done handlers get Errc::cancelled (none are
// called if the Context is stopped, as for every operation on a stopped Context). Off a worker the
// destructor waits (bounded) until those handlers have run, so nothing of the client runs after it;
// on a worker it cannot wait for the loop it is blocking, and only guarantees that no chunk or
// headers handler starts after it returned. Destroy the client before its Context.
//
// Errors (an HTTP status is never one): Errc::connection_failed when the request was never sent
// (name resolution, connect, proxy, TLS handshake and certificate verification: safe to retry even a
// create, see ShouldRetry); Errc::connection_lost when the connection failed after the request may
// have been sent; Errc::timeout (the message names the phase: connecting, TLS handshake, waiting for
// the response, reading the body); Errc::too_large; Errc::cancelled; Errc::invalid_argument for a
// request libcurl refuses (a malformed URL, an unsupported scheme). Messages say which request
// failed and libcurl's own explanation (a TLS verification failure says what was wrong with the
// certificate); they never contain header values.
class HttpClient {
 public:
  explicit HttpClient(Context& context, HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;

  Context& context() const noexcept;

  // Sends the request; `handler` gets the whole response (any status) or the error, on a worker.
  HttpCall AsyncRequest(HttpRequest request, HttpHandler handler);
  // Sends the request and streams a 2xx body to handlers.on_chunk (see HttpStreamHandlers).
  HttpCall AsyncStream(HttpRequest request, HttpStreamHandlers handlers);

  // Blocking AsyncRequest, run on the calling thread (a loop of its own with this thread's kept-alive
  // connections; no worker is involved). On a worker of the client's Context: Errc::would_block at once.
  Result<HttpResponse> Request(HttpRequest request);

  // Connections this client opened so far, by its async and blocking requests (diagnostics and
  // tests: keep-alive shows as few).
  std::uint64_t ConnectionsOpened() const noexcept;
  // Requests and streams accepted whose done handler has not returned yet (blocking ones included).
  std::size_t InFlight() const noexcept;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// ---- Retries ------------------------------------------------------------------------------------

// How a caller retries: attempts, exponential backoff with jitter, a cap that also bounds a server's
// Retry-After. Which outcomes are retried is the caller's decision (ShouldRetry is the usual one).
struct RetryPolicy {
  int max_attempts = 5;                            // attempts in all, the first included (1 = never retry)
  std::chrono::milliseconds initial_backoff{200};  // the base wait after the first failure, doubled per failure
  std::chrono::milliseconds max_backoff{8'000};    // the base wait never exceeds it, nor does a Retry-After
  // Each backoff is drawn uniformly from [base * (1 - jitter), base], so clients that failed together
  // do not retry together. 0: exactly the base; clamped to [0, 1]. A Retry-After is honoured as given.
  double jitter = 0.5;
};

// A Retry-After header value (RFC 9110 §10.2.3): delay-seconds ("120") or an HTTP-date ("Sun, 06 Nov
// 1994 08:49:37 GMT", and the obsolete RFC 850 and asctime forms), relative to `now`. A date in the
// past is zero. nullopt when the value is neither (then the caller's own backoff applies).
std::optional<std::chrono::milliseconds> ParseRetryAfter(
    std::string_view value, std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

// The retry state of one operation: counts attempts and computes the waits, never past the deadline.
// Not thread-safe (one operation uses it from one place at a time).
class RetryBudget {
 public:
  // seed 0: a random seed (tests pass one for reproducible jitter).
  RetryBudget(RetryPolicy policy, std::chrono::steady_clock::time_point deadline, std::uint64_t seed = 0);

  // Call after an attempt failed in a way the caller retries. Returns the wait before the next
  // attempt: the server's Retry-After when given (capped by max_backoff), else the jittered backoff;
  // nullopt when the attempts are used up or the next attempt would start at or after the deadline
  // (then the caller reports the failure it has, now, rather than sleep until the deadline).
  std::optional<std::chrono::milliseconds> NextDelay(std::optional<std::chrono::milliseconds> retry_after = {},
                                                     std::chrono::steady_clock::time_point now =
                                                         std::chrono::steady_clock::now());
  // The jittered backoff after `failures` failures (1 for the first), without counting an attempt.
  std::chrono::milliseconds Backoff(int failures);

  int attempts() const noexcept { return attempts_; }  // attempts made so far (1 once the first failed)
  std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }
  const RetryPolicy& policy() const noexcept { return policy_; }

 private:
  double NextUnit();  // uniform in [0, 1)

  RetryPolicy policy_;
  std::chrono::steady_clock::time_point deadline_;
  std::uint64_t random_state_;  // splitmix64: a budget is made per call, so seeding must be cheap
  int attempts_ = 1;
};

// The usual retry decision for an exchange: a failure before the request was sent
// (Errc::connection_failed) is retried for every request; a connection lost or a timeout after it may
// have been sent, 429 and 5xx (but 501 and 505, which no retry cures) only for idempotent ones (GET, PUT, DELETE, a
// guarded PATCH). A POST that creates is therefore retried only when the server cannot have seen it.
bool ShouldRetry(const Result<HttpResponse>& outcome, bool idempotent);

// The response's Retry-After, parsed (nullopt when absent or unreadable).
std::optional<std::chrono::milliseconds> RetryAfterOf(const HttpResponse& response);

}  // namespace sessionturn
