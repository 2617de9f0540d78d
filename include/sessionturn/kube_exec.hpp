// Connections to a Session runtime through the Kubernetes `pods/exec` subresource: a WebSocket
// (v5.channel.k8s.io, else v4) to the API server running `kelos-session-runtime client` in the Pod,
// with stdin/stdout as the line stream, stderr kept as diagnostics and the exit status as the end.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"

namespace sessionturn {

class KubeConfig;
namespace ws {
class TlsContextCache;  // internal: one OpenSSL context per TLS material (src/ws/websocket_tls.hpp)
}  // namespace ws

// The container and program the exec runs (PROTOCOL.md §1).
inline constexpr const char* kKelosAgentContainer = "kelos-agent";
inline const std::vector<std::string>& DefaultExecCommand() {
  static const std::vector<std::string> command{"/kelos/bin/kelos-session-runtime", "client"};
  return command;
}

// The sub-protocols offered, in order of preference (v5 adds the stdin half-close).
inline constexpr const char* kExecProtocolV5 = "v5.channel.k8s.io";
inline constexpr const char* kExecProtocolV4 = "v4.channel.k8s.io";

// Liveness of an open exec stream. A stream can sit idle for the whole of a long turn, and a peer or
// middlebox that vanished without a FIN or RST (a node lost, a NAT entry expired, a load balancer
// failed over) leaves a half-open connection that a read would wait on forever. So the client pings
// every kExecPingInterval and ends the stream (Errc::connection_lost, which makes a driver reconnect)
// when nothing, not even the pong, came back within kExecPongTimeout of the ping going out: a dead
// peer is noticed within 40 s (interval + timeout), well inside a minute. 20 s also stays inside the
// 60 s idle timeout common to load balancers and NATs (AWS ELB's default), so an idle stream is not
// cut by one; the cost is one small frame each way.
inline constexpr std::chrono::milliseconds kExecPingInterval{20'000};
inline constexpr std::chrono::milliseconds kExecPongTimeout{20'000};
// TCP keepalive on the same socket, the backstop when pings are disabled or cannot be written: the
// first probe after 30 s of silence, then every 10 s, dead after 3 unanswered, so within a minute;
// unacknowledged writes are given up after the same 60 s (TCP_USER_TIMEOUT) instead of the kernel's
// ~15 minutes of retransmissions.
inline constexpr std::chrono::seconds kExecTcpKeepaliveIdle{30};
inline constexpr std::chrono::seconds kExecTcpKeepaliveInterval{10};
inline constexpr int kExecTcpKeepaliveCount = 3;

// How to reach the API server, everything in memory. Built from a KubeConfig by the KubeConfig
// constructor of KubeExecConnector, or by hand (tests, callers with their own credentials).
struct KubeExecEndpoint {
  std::string server;           // "https://host:port" (optionally with a path prefix); http:// for tests
  std::string ca_pem;           // empty: the system trust store
  std::string client_cert_pem;  // empty: no client certificate
  std::string client_key_pem;
  std::string tls_server_name;  // SNI and the verified name; empty: the server URL's host
  bool insecure_skip_tls_verify = false;
  // "http://proxy:3128"; empty: HTTPS_PROXY / NO_PROXY from the environment.
  std::string proxy_url;
  // The bearer token source, asked on every connect: hands the token ("" for none) to its callback,
  // from any thread, without blocking the caller (KubeConfig::AsyncBearerToken: refreshes run off
  // the loop). Preferred over bearer_token when both are set.
  std::function<void(Context&, std::function<void(Result<std::string>)>)> async_bearer_token;
  // A synchronous source for a token already at hand (a fixed token, a cached value). It is called
  // on the connecting thread, often a Context worker, so it must not block: a source that reads
  // files or runs programs belongs in async_bearer_token. Neither set: no Authorization header.
  std::function<Result<std::string>()> bearer_token;
  // Called once after a 401, on a Context worker (must not block): forget cached credentials; true
  // when a retry may get a different token (KubeConfig::InvalidateToken). Empty: a 401 is final.
  std::function<bool()> invalidate_token;
  std::chrono::milliseconds connect_timeout{30'000};    // DNS + TCP + proxy + TLS
  std::chrono::milliseconds handshake_timeout{30'000};  // the HTTP upgrade
  std::chrono::milliseconds close_timeout{5'000};       // waiting for the server's close frame
  // Liveness of an open stream (see kExecPingInterval); tests shorten them. A zero ping_interval
  // turns pings off (TCP keepalive stays on).
  std::chrono::milliseconds ping_interval{kExecPingInterval};
  std::chrono::milliseconds pong_timeout{kExecPongTimeout};
  // Where the connections find their TLS context, one per TLS material, so that each turn's
  // connection does not parse the CA and build an OpenSSL context again. ExecEndpointFromConfig
  // sets the KubeConfig's (shared by every connector made from that configuration); empty: the
  // connector keeps its own. The contexts live as long as the last endpoint copy holding them.
  std::shared_ptr<ws::TlsContextCache> tls_contexts;
};

// Makes exec connections to one Pod. Thread-safe; AsyncConnect may be called again to reconnect.
// Errors of AsyncConnect: Errc::unauthorized / forbidden / not_found for 401/403/404 (with the
// API's Status message), connection_failed for DNS/TCP/TLS/proxy failures (TLS verification with
// OpenSSL's reason), protocol_error for a bad handshake (no agreed sub-protocol, wrong accept key),
// timeout naming the phase. The Connection's end: Errc::connection_lost with the remote exit status
// ("exited with code 3 (NonZeroExitCode)") or the transport's reason.
class KubeExecConnector : public Connector {
 public:
  KubeExecConnector(Context& context, KubeExecEndpoint endpoint, std::string namespace_name, std::string pod,
                    std::string container = kKelosAgentContainer,
                    std::vector<std::string> command = DefaultExecCommand(), ConnectionLimits limits = {});
  // From a cluster configuration: its server, TLS material, proxy-url and BearerToken().
  KubeExecConnector(Context& context, const KubeConfig& kube, std::string namespace_name, std::string pod,
                    std::string container = kKelosAgentContainer,
                    std::vector<std::string> command = DefaultExecCommand(), ConnectionLimits limits = {});
  ~KubeExecConnector() override;

  void AsyncConnect(ConnectHandler handler) override;
  std::string Describe() const override;  // "kube-exec:ns/pod"

  // "/api/v1/namespaces/ns/pods/pod/exec?container=...&command=...&stdin=true&stdout=true&stderr=true"
  std::string ExecPath() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// The endpoint of a KubeConfig (server, TLS, proxy-url, BearerToken as the token source).
KubeExecEndpoint ExecEndpointFromConfig(const KubeConfig& kube);

// Convenience: a shared KubeExecConnector.
std::shared_ptr<Connector> MakeKubeExecConnector(Context& context, const KubeConfig& kube, std::string namespace_name,
                                                 std::string pod, std::string container = kKelosAgentContainer,
                                                 std::vector<std::string> command = DefaultExecCommand(),
                                                 ConnectionLimits limits = {});

}  // namespace sessionturn
