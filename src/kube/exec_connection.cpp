#include "kube/exec_connection.hpp"

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "blocking.hpp"
#include "json_fields.hpp"
#include "sessionturn/kube.hpp"
#include "ws/websocket_tls.hpp"

namespace sessionturn::kube {

namespace {

// A status-channel message larger than this is not a Status object; we refuse to parse it.
constexpr std::size_t kMaxStatusBytes = 64u << 10;
// How much of the stderr tail an error message quotes (Diagnostics() keeps the full 4 KiB).
constexpr std::size_t kStderrInErrorBytes = 512;

std::string Tail(std::string_view s, std::size_t n) {
  return std::string(s.size() > n ? s.substr(s.size() - n) : s);
}

std::string TrimNewlines(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::string UrlEncodeComponent(std::string_view value) { return UrlEncode(value); }

std::string ExecPath(std::string_view namespace_name, std::string_view pod, std::string_view container,
                     const std::vector<std::string>& command) {
  std::string path = "/api/v1/namespaces/" + UrlEncodeComponent(namespace_name) + "/pods/" + UrlEncodeComponent(pod) +
                     "/exec?container=" + UrlEncodeComponent(container);
  for (const auto& arg : command) path += "&command=" + UrlEncodeComponent(arg);
  path += "&stdin=true&stdout=true&stderr=true";
  return path;
}

Error ExecStatusToError(std::string_view status_json, std::string_view where, std::string_view stderr_tail) {
  auto json = nlohmann::json::parse(status_json, nullptr, false);
  if (json.is_discarded() || !json.is_object())
    return Error(Errc::protocol_error, std::string(where) + ": the exec status channel sent something that is not a "
                                                            "Status object: \"" +
                                           Tail(status_json, 120) + "\"");
  std::string status = json_fields::String(json, "status");
  if (status == "Success")
    return Error(Errc::connection_lost,
                 std::string(where) + ": the exec stream ended: the remote command exited successfully");
  std::string message = json_fields::String(json, "message");
  std::string reason = json_fields::String(json, "reason");
  std::string exit_code;
  if (const auto* details = json_fields::Object(json, "details")) {
    if (const auto* causes = json_fields::Array(*details, "causes")) {
      for (const auto& cause : *causes) {
        if (json_fields::String(cause, "reason") == "ExitCode") exit_code = json_fields::String(cause, "message");
      }
    }
  }
  std::string text = std::string(where) + ": the remote command failed";
  if (!exit_code.empty()) text += " with exit code " + exit_code;
  if (!reason.empty()) text += " (" + reason + ")";
  if (!message.empty()) text += ": " + message;
  std::string tail = TrimNewlines(Tail(stderr_tail, kStderrInErrorBytes));
  if (!tail.empty()) text += "; stderr: " + tail;
  return Error(Errc::connection_lost, text);
}

ExecConnection::ExecConnection(Context& context, std::shared_ptr<ws::WebSocket> socket, std::string describe,
                               ConnectionLimits limits)
    : socket_(std::move(socket)), describe_(std::move(describe)), lines_(limits, describe_, &context) {}

ExecConnection::~ExecConnection() {
  // After Close() the socket finishes its close handshake on its own; otherwise hang up now. The
  // last reference is released after any posted job ran, so `closed_` is current here.
  if (!closed_) socket_->Abort();
}

void ExecConnection::Begin() {
  // A weak reference: the socket's handler must not keep this connection alive (the connection owns
  // the socket), so dropping the last Connection reference aborts the socket.
  std::weak_ptr<ExecConnection> weak = shared_from_this();
  socket_->Start([weak](Result<ws::WebSocket::Message> message) {
    if (auto self = weak.lock()) self->OnMessage(std::move(message));
  });
}

void ExecConnection::OnMessage(Result<ws::WebSocket::Message> message) {
  if (closed_) return;
  if (!message) {
    // The socket ended. After a status the status is the end state; otherwise the transport's reason.
    Error error = message.error();
    std::string tail = TrimNewlines(Tail(Diagnostics(), kStderrInErrorBytes));
    if (!tail.empty()) error.message += "; stderr: " + tail;
    EndWith(std::move(error));
    return;
  }
  const std::string& data = message->data;
  if (data.empty()) return;  // keep-alive messages carry no stream byte
  const auto channel = static_cast<unsigned char>(data[0]);
  std::string_view payload = std::string_view(data).substr(1);
  switch (channel) {
    case exec_channel::kStdout:
      if (!lines_.Feed(payload)) socket_->AsyncClose(1000, nullptr);
      break;
    case exec_channel::kStderr: AppendStderr(payload); break;
    case exec_channel::kStatus:
      // The API server announces the lowest writable stream with an empty message when the exec
      // starts (the error stream when there is no stdout/stderr): not a status.
      if (payload.empty()) break;
      if (payload.size() > kMaxStatusBytes) {
        EndWith(Error(Errc::protocol_error, describe_ + ": the exec status message is larger than " +
                                                std::to_string(kMaxStatusBytes) + " bytes"));
      } else {
        EndWith(ExecStatusToError(payload, describe_, Diagnostics()));
      }
      status_seen_ = true;
      break;
    default:
      // Stream 0 and 4 are ours to send; 255 from a server and unknown streams carry nothing we use.
      break;
  }
}

void ExecConnection::AppendStderr(std::string_view bytes) {
  std::lock_guard<std::mutex> lock(diag_mutex_);
  stderr_tail_.append(bytes);
  if (stderr_tail_.size() > kDiagnosticsTailBytes) stderr_tail_.erase(0, stderr_tail_.size() - kDiagnosticsTailBytes);
}

void ExecConnection::EndWith(Error error) {
  if (status_seen_) return;  // the status already named the end; the close that follows adds nothing
  lines_.Finish(std::move(error));
}

void ExecConnection::AsyncReadLine(LineHandler handler) {
  asio::post(socket_->executor(), [self = shared_from_this(), handler = std::move(handler)]() mutable {
    self->lines_.Read(std::move(handler));
  });
}

void ExecConnection::AsyncWrite(std::string line, WriteHandler done) {
  asio::post(socket_->executor(), [self = shared_from_this(), line = std::move(line), done = std::move(done)]() mutable {
    if (self->closed_) {
      if (done) done(Fail(Errc::cancelled, self->describe_ + ": the connection was closed"));
      return;
    }
    std::string frame;
    frame.reserve(line.size() + 2);
    frame.push_back(static_cast<char>(exec_channel::kStdin));
    frame.append(line);
    frame.push_back('\n');
    self->socket_->Send(std::move(frame), /*binary=*/true, std::move(done));
  });
}

void ExecConnection::AsyncCloseStdin(WriteHandler done) {
  asio::post(socket_->executor(), [self = shared_from_this(), done = std::move(done)]() mutable {
    if (!self->IsV5()) {
      if (done)
        done(Fail(Errc::invalid_argument, self->describe_ + ": " + self->Protocol() +
                                              " has no stdin half-close; close the connection instead"));
      return;
    }
    std::string frame{static_cast<char>(exec_channel::kClose), static_cast<char>(exec_channel::kStdin)};
    self->socket_->Send(std::move(frame), /*binary=*/true, std::move(done));
  });
}

void ExecConnection::Close() {
  asio::post(socket_->executor(), [self = shared_from_this()] {
    if (self->closed_) return;
    self->closed_ = true;
    self->lines_.Fail(Error(Errc::cancelled, self->describe_ + ": the connection was closed"));
    // v5: tell the remote process its input ended before hanging up, so it exits cleanly.
    if (self->IsV5()) {
      std::string frame{static_cast<char>(exec_channel::kClose), static_cast<char>(exec_channel::kStdin)};
      self->socket_->Send(std::move(frame), /*binary=*/true, nullptr);
    }
    // The socket keeps itself alive through the close handshake (bounded by its close timeout); a
    // handler holding `self` here would make a cycle that outlives a Context torn down meanwhile.
    self->socket_->AsyncClose(1000, nullptr);
  });
}

std::string ExecConnection::Diagnostics() const {
  std::lock_guard<std::mutex> lock(diag_mutex_);
  return stderr_tail_;
}

}  // namespace sessionturn::kube

namespace sessionturn {

struct KubeExecConnector::Impl : std::enable_shared_from_this<KubeExecConnector::Impl> {
  Context& context;
  KubeExecEndpoint endpoint;
  std::string namespace_name;
  std::string pod;
  std::string container;
  std::vector<std::string> command;
  ConnectionLimits limits;

  Impl(Context& c, KubeExecEndpoint e, std::string ns, std::string p, std::string ctr, std::vector<std::string> cmd,
       ConnectionLimits l)
      : context(c),
        endpoint(std::move(e)),
        namespace_name(std::move(ns)),
        pod(std::move(p)),
        container(std::move(ctr)),
        command(std::move(cmd)),
        limits(l) {
    // A hand-made endpoint: this connector's connections (one per turn, and every reconnect) still
    // share one TLS context.
    if (!endpoint.tls_contexts) endpoint.tls_contexts = std::make_shared<ws::TlsContextCache>();
  }

  std::string Describe() const { return "kube-exec:" + namespace_name + "/" + pod; }

  // Splits the server URL into the target; the path prefix of the URL (a proxied API server) is kept.
  Result<ws::WsTarget> Target() const {
    std::string_view url = endpoint.server;
    ws::WsTarget target;
    if (url.rfind("https://", 0) == 0) {
      url.remove_prefix(8);
      target.use_tls = true;
      target.port = 443;
    } else if (url.rfind("http://", 0) == 0) {
      url.remove_prefix(7);
      target.use_tls = false;
      target.port = 80;
    } else {
      return Fail(Errc::invalid_argument, "the API server URL \"" + endpoint.server + "\" is not http(s)://");
    }
    std::size_t slash = url.find('/');
    std::string_view authority = url.substr(0, slash);
    std::string prefix = slash == std::string_view::npos ? std::string() : std::string(url.substr(slash));
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    std::string_view host = authority;
    std::string_view port;
    if (!authority.empty() && authority.front() == '[') {
      std::size_t close = authority.find(']');
      if (close == std::string_view::npos)
        return Fail(Errc::invalid_argument, "the API server URL \"" + endpoint.server + "\" has a bad IPv6 host");
      host = authority.substr(1, close - 1);
      if (close + 1 < authority.size() && authority[close + 1] == ':') port = authority.substr(close + 2);
    } else if (std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    if (host.empty()) return Fail(Errc::invalid_argument, "the API server URL \"" + endpoint.server + "\" has no host");
    target.host = std::string(host);
    if (!port.empty()) {
      int p = std::atoi(std::string(port).c_str());
      if (p <= 0 || p > 65535)
        return Fail(Errc::invalid_argument, "the API server URL \"" + endpoint.server + "\" has a bad port");
      target.port = static_cast<std::uint16_t>(p);
    }
    target.path = prefix + kube::ExecPath(namespace_name, pod, container, command);
    target.tls.ca_pem = endpoint.ca_pem;
    target.tls.cert_pem = endpoint.client_cert_pem;
    target.tls.key_pem = endpoint.client_key_pem;
    target.tls.server_name = endpoint.tls_server_name;
    target.tls.insecure = endpoint.insecure_skip_tls_verify;
    target.proxy = endpoint.proxy_url.empty() ? ws::ProxyFromEnvironment(target.host, target.use_tls)
                                              : endpoint.proxy_url;
    target.subprotocols = {kExecProtocolV5, kExecProtocolV4};
    target.connect_timeout = endpoint.connect_timeout;
    target.handshake_timeout = endpoint.handshake_timeout;
    target.close_timeout = endpoint.close_timeout;
    target.ping_interval = endpoint.ping_interval;
    target.pong_timeout = endpoint.pong_timeout;
    // The exec stream's own TCP keepalive policy (kExecTcpKeepaliveIdle, why there), not the ws layer's defaults.
    target.tcp_keepalive.idle = kExecTcpKeepaliveIdle;
    target.tcp_keepalive.interval = kExecTcpKeepaliveInterval;
    target.tcp_keepalive.count = kExecTcpKeepaliveCount;
    target.tls_contexts = endpoint.tls_contexts;
    return target;
  }

  // `may_retry`: a 401 may be retried once with a fresh token (an exec credential that expired
  // between the plugin run and the request, a rotated token file). Never blocks: the token comes from
  // the endpoint's asynchronous source (a KubeConfig's refreshes run off the loop).
  void Connect(ConnectHandler handler, bool may_retry = true) {
    auto self = shared_from_this();
    auto target = Target();
    if (!target) return Report(std::move(handler), Fail(target.error()));
    auto with_token = [self, may_retry, handler = std::move(handler),
                       target = std::move(*target)](Result<std::string> token) mutable {
      if (!token) return self->Report(std::move(handler), Fail(token.error()));
      if (!token->empty()) target.headers.emplace_back("Authorization", "Bearer " + *token);
      self->Open(std::move(target), std::move(handler), may_retry);
    };
    if (endpoint.async_bearer_token) return endpoint.async_bearer_token(context, std::move(with_token));
    if (endpoint.bearer_token) return with_token(endpoint.bearer_token());
    with_token(std::string());
  }

  // The handler's error, prefixed with this connector's name, on a worker (never inline: the caller
  // may hold locks).
  void Report(ConnectHandler handler, Result<std::shared_ptr<Connection>> error) {
    if (!error) {
      Error e = error.error();
      e.message = Describe() + ": " + e.message;
      error = Fail(std::move(e));
    }
    blocking::ReportNow(context, std::move(handler), std::move(error));
  }

  void Open(ws::WsTarget target, ConnectHandler handler, bool may_retry) {
    auto self = shared_from_this();
    ws::WebSocket::AsyncConnect(
        context, std::move(target),
        [self, may_retry, handler = std::move(handler)](Result<std::shared_ptr<ws::WebSocket>> ws) mutable {
          if (!ws) {
            if (may_retry && ws.error().code == Errc::unauthorized && self->endpoint.invalidate_token) {
              if (self->endpoint.invalidate_token()) return self->Connect(std::move(handler), false);
              Error e = ws.error();
              e.message = self->Describe() + ": " + e.message + " (no fresher token is available)";
              return handler(Fail(std::move(e)));
            }
            Error e = ws.error();
            e.message = self->Describe() + ": " + e.message;
            return handler(Fail(std::move(e)));
          }
          auto connection = std::make_shared<kube::ExecConnection>(self->context, std::move(*ws), self->Describe(),
                                                                   self->limits);
          connection->Begin();
          handler(std::shared_ptr<Connection>(std::move(connection)));
        });
  }
};

KubeExecConnector::KubeExecConnector(Context& context, KubeExecEndpoint endpoint, std::string namespace_name,
                                     std::string pod, std::string container, std::vector<std::string> command,
                                     ConnectionLimits limits)
    : impl_(std::make_shared<Impl>(context, std::move(endpoint), std::move(namespace_name), std::move(pod),
                                   std::move(container), std::move(command), limits)) {}

KubeExecConnector::~KubeExecConnector() = default;

void KubeExecConnector::AsyncConnect(ConnectHandler handler) { impl_->Connect(std::move(handler)); }

std::string KubeExecConnector::Describe() const { return impl_->Describe(); }

std::string KubeExecConnector::ExecPath() const {
  return kube::ExecPath(impl_->namespace_name, impl_->pod, impl_->container, impl_->command);
}

}  // namespace sessionturn
