// The Kubernetes exec channel layer over a WebSocket: stream-prefixed binary messages (0 stdin,
// 1 stdout, 2 stderr, 3 status, 4 resize, 255 close on v5) mapped onto the line Connection.
// Internal; the public face is KubeExecConnector (sessionturn/kube_exec.hpp).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "conn/line_queue.hpp"
#include "sessionturn/connection.hpp"
#include "sessionturn/kube_exec.hpp"
#include "ws/websocket.hpp"

namespace sessionturn::kube {

namespace exec_channel {
inline constexpr unsigned char kStdin = 0;
inline constexpr unsigned char kStdout = 1;
inline constexpr unsigned char kStderr = 2;
inline constexpr unsigned char kStatus = 3;
inline constexpr unsigned char kResize = 4;
inline constexpr unsigned char kClose = 255;  // v5 only: [255, stream] closes that stream
}  // namespace exec_channel

// RFC 3986 percent-encoding of a query value (everything but unreserved characters).
std::string UrlEncodeComponent(std::string_view value);

// "/api/v1/namespaces/{ns}/pods/{pod}/exec?container=..&command=..(one per argv element)&stdin=true&stdout=true&stderr=true"
std::string ExecPath(std::string_view namespace_name, std::string_view pod, std::string_view container,
                     const std::vector<std::string>& command);

// The connection's end for a status-channel message: Success -> connection_lost "exited
// successfully"; Failure -> connection_lost with the message, reason and exit code
// (details.causes[].reason == "ExitCode"); anything unparsable -> protocol_error. `where` names the
// Pod, `stderr_tail` is appended to failures when non-empty.
Error ExecStatusToError(std::string_view status_json, std::string_view where, std::string_view stderr_tail);

// One exec connection. All state lives on the WebSocket's strand.
class ExecConnection final : public Connection, public std::enable_shared_from_this<ExecConnection> {
 public:
  ExecConnection(Context& context, std::shared_ptr<ws::WebSocket> socket, std::string describe, ConnectionLimits limits);
  ~ExecConnection() override;

  // Starts reading; call once after construction.
  void Begin();

  void AsyncReadLine(LineHandler handler) override;
  void AsyncWrite(std::string line, WriteHandler done) override;
  void Close() override;
  std::string Diagnostics() const override;
  std::string Describe() const override { return describe_; }

  // v5: sends [255, 0] so the remote process sees end of input, keeping stdout open. v4 has no
  // half-close: Errc::invalid_argument (close the connection instead).
  void AsyncCloseStdin(WriteHandler done);
  // The agreed sub-protocol.
  const std::string& Protocol() const { return socket_->Subprotocol(); }
  bool IsV5() const { return Protocol() == kExecProtocolV5; }

 private:
  void OnMessage(Result<ws::WebSocket::Message> message);
  void AppendStderr(std::string_view bytes);
  void EndWith(Error error);

  std::shared_ptr<ws::WebSocket> socket_;
  std::string describe_;
  conn::LineQueue lines_;
  bool closed_ = false;         // Close() ran (strand state)
  bool status_seen_ = false;    // the status channel gave the end state
  mutable std::mutex diag_mutex_;
  std::string stderr_tail_;
};

}  // namespace sessionturn::kube
