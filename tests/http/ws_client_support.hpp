// Helpers for the WebSocket client's tests (test_websocket*.cpp): connecting, sending and closing
// synchronously, collecting messages, targets on loopback and the Python peer's arguments.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/context.hpp"
#include "support/ws_test_util.hpp"
#include "ws/websocket.hpp"

namespace wsclient {

using namespace sessionturn;
using namespace sessionturn::ws;
using wstest::kWait;

using ConnectResult = Result<std::shared_ptr<WebSocket>>;

inline ConnectResult ConnectSync(Context& context, WsTarget target) {
  auto promise = std::make_shared<std::promise<ConnectResult>>();
  auto future = promise->get_future();
  WebSocket::AsyncConnect(context, std::move(target), [promise](ConnectResult r) { promise->set_value(std::move(r)); });
  if (future.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
    return Fail(Errc::internal, "the test gave up waiting for AsyncConnect to complete");
  return future.get();
}

inline WsTarget LocalTarget(int port, bool tls = false) {
  WsTarget t;
  t.host = "127.0.0.1";
  t.port = static_cast<std::uint16_t>(port);
  t.path = "/ws?x=1";
  t.use_tls = tls;
  t.subprotocols = {"v5.channel.k8s.io", "v4.channel.k8s.io"};
  return t;
}

inline std::vector<std::string> PeerArgs(std::vector<std::string> extra) {
  std::vector<std::string> argv{SESSIONTURN_PYTHON, wstest::Fake("ws_peer.py")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

using Inbox = wstest::Inbox<Result<WebSocket::Message>>;

inline std::shared_ptr<Inbox> StartCollecting(WebSocket& ws) {
  auto inbox = std::make_shared<Inbox>();
  ws.Start([inbox](Result<WebSocket::Message> m) { inbox->Push(std::move(m)); });
  return inbox;
}

inline Status SendSync(WebSocket& ws, std::string payload, bool binary = false) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  ws.Send(std::move(payload), binary, [promise](Status s) { promise->set_value(std::move(s)); });
  if (future.wait_for(kWait) != std::future_status::ready) return Fail(Errc::internal, "send did not complete");
  return future.get();
}

inline Status CloseSync(WebSocket& ws) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  ws.AsyncClose(1000, [promise](Status s) { promise->set_value(std::move(s)); });
  if (future.wait_for(kWait) != std::future_status::ready) return Fail(Errc::internal, "close did not complete");
  return future.get();
}

// Shows the error when a result that should be a message is not.
inline std::string Why(const std::optional<Result<WebSocket::Message>>& m) {
  if (!m) return "no message within the deadline";
  return *m ? std::string("ok") : (*m).error().ToString();
}

inline std::string Frame(std::uint8_t first, std::string_view payload) {
  // An unmasked server frame with a short payload.
  std::string f;
  f.push_back(static_cast<char>(first));
  f.push_back(static_cast<char>(payload.size()));
  f.append(payload);
  return f;
}

}  // namespace wsclient
