// Slack Socket Mode (chat/slack.hpp): apps.connections.open with the app token, a WebSocket per
// connection, hello, envelopes acknowledged once the router stored them, `disconnect` answered by
// opening the next connection before the old one goes, dropped connections replaced with backoff.
// Everything here runs on the adapter's strand.
#include <future>

#include "chat/slack_impl.hpp"
#include "chat/slack_wire.hpp"
#include "sessionturn/router.hpp"

namespace sessionturn {

using nlohmann::json;

namespace {

constexpr std::chrono::milliseconds kMaxReconnectDelay{30'000};
constexpr std::size_t kMaxEnvelopeBytes = 1u << 20;
// How long a replaced connection stays open for the acknowledgements of what it delivered (Slack
// itself closes it about 10 s after a `disconnect`).
constexpr std::chrono::milliseconds kRetireGrace{5'000};

std::string FatalText(const Error& e) {
  if (e.code == Errc::forbidden && e.message.find("link_disabled") != std::string::npos) {
    return "Slack turned Socket Mode off for this app (link_disabled); enable it in the app's settings, or run "
           "with --mode events";
  }
  return "Slack refused the app token for Socket Mode (" + e.message +
         "); it must be an app-level token (xapp-) with connections:write";
}

}  // namespace

void SlackAdapter::Impl::UpdateSocketOk() {
  bool ok = false;
  for (const auto& c : conns) ok = ok || (c->hello && !c->retiring);
  if (!ok) {
    for (const auto& c : conns) ok = ok || c->hello;  // a retiring one still delivers until it closes
  }
  socket_ok = ok;
}

void SlackAdapter::Impl::OpenConnection() {
  if (!socket_running || opening) return;
  opening = true;
  Call(
      "apps.connections.open", json::object(),
      [self = shared_from_this()](Result<json> r) {
        asio::post(self->strand, [self, r = std::move(r)]() mutable {
          if (!self->socket_running) {
            self->opening = false;
            return;
          }
          if (!r) {
            self->opening = false;
            if (r.error().code == Errc::unauthorized || r.error().code == Errc::forbidden) {
              return self->Fatal(r.error());
            }
            return self->ConnectFailed(r.error());
          }
          auto target = ws::ParseWsUrl(json_fields::String(*r, "url"));
          if (!target) {
            self->opening = false;
            return self->ConnectFailed(Error(Errc::protocol_error, "Slack apps.connections.open: " +
                                                                       target.error().message));
          }
          target->tls.ca_pem = self->options.tls.ca_pem;
          target->tls.cert_pem = self->options.tls.client_cert_pem;
          target->tls.key_pem = self->options.tls.client_key_pem;
          target->tls.server_name = self->options.tls.server_name;
          target->tls.insecure = self->options.tls.insecure_skip_verify;
          // Slack's envelopes carry one event (a message is at most 40,000 characters, with its blocks):
          // 1 MiB bounds what a connection buffers far below the client's 16 MiB default.
          target->max_message = kMaxEnvelopeBytes;
          target->ping_interval = self->options.ping_interval;
          target->pong_timeout = self->options.pong_timeout;
          target->proxy = self->options.proxy.empty() ? ws::ProxyFromEnvironment(target->host, target->use_tls)
                                                      : self->options.proxy;
          ws::WebSocket::AsyncConnect(self->context, std::move(*target),
                                      [self](Result<std::shared_ptr<ws::WebSocket>> socket) {
                                        asio::post(self->strand, [self, socket = std::move(socket)]() mutable {
                                          self->OnConnected(std::move(socket));
                                        });
                                      });
        });
      },
      {}, /*app_token=*/true);
}

void SlackAdapter::Impl::OnConnected(Result<std::shared_ptr<ws::WebSocket>> socket) {
  if (!socket) {
    opening = false;
    return ConnectFailed(socket.error());
  }
  if (!socket_running) {
    opening = false;
    (*socket)->Abort();
    return;
  }
  auto conn = std::make_shared<Conn>();
  conn->id = next_conn_id++;
  conn->socket = *socket;
  conns.push_back(conn);
  conn->hello_timer = std::make_shared<asio::steady_timer>(context.io(), options.hello_timeout);
  std::weak_ptr<Conn> weak = conn;
  conn->hello_timer->async_wait(asio::bind_executor(strand, [self = shared_from_this(), weak](const asio::error_code& ec) {
    auto c = weak.lock();
    if (ec || !c || c->hello) return;
    c->socket->Abort();
    self->OnClosed(c, Error(Errc::timeout, "Slack sent no hello within " +
                                               std::to_string(self->options.hello_timeout.count()) + " ms"));
  }));
  conn->socket->Start([self = shared_from_this(), weak](Result<ws::WebSocket::Message> frame) {
    asio::post(self->strand, [self, weak, frame = std::move(frame)]() mutable {
      if (auto c = weak.lock()) self->OnFrame(c, std::move(frame));
    });
  });
}

void SlackAdapter::Impl::OnFrame(const std::shared_ptr<Conn>& conn, Result<ws::WebSocket::Message> frame) {
  if (std::find(conns.begin(), conns.end(), conn) == conns.end()) return;  // already gone
  if (!frame) return OnClosed(conn, frame.error());
  auto envelope = slack::ParseEnvelope(frame->data);
  if (!envelope) {
    Log(LogLevel::warning, "skipped a Socket Mode frame: " + envelope.error().message);
    return;
  }
  OnEnvelope(conn, std::move(*envelope));
}

void SlackAdapter::Impl::OnEnvelope(const std::shared_ptr<Conn>& conn, slack::Envelope envelope) {
  if (envelope.type == "hello") {
    if (conn->hello) return;
    conn->hello = true;
    if (conn->hello_timer) conn->hello_timer->cancel();
    opening = false;
    connect_failures = 0;
    Bump(&SlackStats::socket_connections);
    // The connections this one replaces go after a grace: Slack sends new envelopes to this one, and
    // the acknowledgements of what the old ones delivered (a message being stored now) still go out.
    for (const auto& old : conns) {
      if (old == conn || !old->retiring) continue;
      auto timer = std::make_shared<asio::steady_timer>(context.io(), kRetireGrace);
      std::weak_ptr<Conn> weak = old;
      timer->async_wait(asio::bind_executor(strand, [self = shared_from_this(), weak, timer](const asio::error_code&) {
        auto c = weak.lock();
        if (!c) return;
        auto it = std::find(self->conns.begin(), self->conns.end(), c);
        if (it == self->conns.end()) return;  // Slack closed it first
        // Its message handler does not run again once closed by us, so it leaves the list here.
        self->conns.erase(it);
        self->UpdateSocketOk();
        c->socket->AsyncClose(1000, [self, id = c->id](Status s) {
          if (!s) self->Log(LogLevel::debug, "closing Socket Mode connection " + std::to_string(id) + ": " +
                                                 s.error().message);
        });
      }));
    }
    UpdateSocketOk();
    Log(LogLevel::info, "Socket Mode connection " + std::to_string(conn->id) + " is open");
    return;
  }
  if (envelope.type == "disconnect") {
    Bump(&SlackStats::socket_disconnects);
    if (envelope.reason == "link_disabled") {
      return Fatal(Error(Errc::forbidden, "Slack Socket Mode: link_disabled"));
    }
    Log(LogLevel::info, "Slack asks connection " + std::to_string(conn->id) + " to reconnect (" + envelope.reason +
                            "); opening the next one first");
    conn->retiring = true;
    OpenConnection();
    return;
  }
  if (envelope.type != "events_api" && envelope.type != "interactive" && envelope.type != "slash_commands") {
    Log(LogLevel::debug, "a Socket Mode frame of type " + envelope.type + " (not handled)");
    return;
  }
  Bump(&SlackStats::events_received);
  if (envelope.retry_attempt > 0) Bump(&SlackStats::redeliveries);
  std::weak_ptr<Conn> weak = conn;
  auto ack = [self = shared_from_this(), weak, id = envelope.envelope_id] {
    asio::post(self->strand, [self, weak, id] {
      auto c = weak.lock();
      if (!c || std::find(self->conns.begin(), self->conns.end(), c) == self->conns.end()) {
        // Its connection is gone: Slack delivers it again on another, and the router dedupes.
        self->Log(LogLevel::debug, "envelope " + id + " not acknowledged: its connection closed");
        return;
      }
      c->socket->Send(json{{"envelope_id", id}}.dump(), false, [self, id](Status s) {
        if (!s) self->Log(LogLevel::debug, "acknowledging envelope " + id + ": " + s.error().message);
      });
    });
  };
  const SlackBotInfo me = Bot();
  Result<slack::ParsedEvent> parsed = envelope.type == "events_api"    ? slack::ParseEventCallback(envelope.payload, me)
                                      : envelope.type == "interactive" ? slack::ParseInteractive(envelope.payload, me)
                                                                       : slack::ParseSlashCommand(envelope.payload, me);
  if (!parsed) {
    // Slack would send the same bytes again: acknowledged, and the log says what was skipped.
    Bump(&SlackStats::events_ignored);
    Log(LogLevel::warning, "skipped envelope " + envelope.envelope_id + ": " + parsed.error().message);
    return ack();
  }
  if (parsed->action) ack();  // a press is acknowledged at once; the router answers it through the note
  const bool press = parsed->action.has_value();
  Deliver(std::move(*parsed), *router,
          [self = shared_from_this(), r = router] {
            return !self->inbound_stopped && self->socket_running && self->router == r;
          },
          [self = shared_from_this(), ack, press, id = envelope.envelope_id](Result<Disposition> d) {
            if (press) return;
            if (d) return ack();
            // Not stored: left unacknowledged, so Slack delivers it again.
            self->Log(LogLevel::warning, "envelope " + id + " was not stored (" + d.error().message +
                                             "); Slack will deliver it again");
          });
}

void SlackAdapter::Impl::OnClosed(const std::shared_ptr<Conn>& conn, const Error& error) {
  auto it = std::find(conns.begin(), conns.end(), conn);
  if (it == conns.end()) return;
  conns.erase(it);
  if (conn->hello_timer) conn->hello_timer->cancel();
  const bool was_pending = !conn->hello;
  UpdateSocketOk();
  if (!socket_running) return;
  if (conn->retiring) {
    Log(LogLevel::debug, "Socket Mode connection " + std::to_string(conn->id) + " closed after its replacement");
  } else {
    Bump(&SlackStats::socket_disconnects);
    Log(LogLevel::warning, "Socket Mode connection " + std::to_string(conn->id) + " ended: " + error.message);
  }
  if (was_pending) {
    opening = false;
    return ConnectFailed(error);
  }
  const bool live = std::any_of(conns.begin(), conns.end(), [](const auto& c) { return c->hello && !c->retiring; });
  if (!live) OpenConnection();
}

void SlackAdapter::Impl::ConnectFailed(const Error& error) {
  if (!socket_running) return;
  ++connect_failures;
  UpdateSocketOk();
  auto delay = std::min(kMaxReconnectDelay, std::chrono::milliseconds(500) * (1 << std::min(connect_failures, 6)));
  if (error.retry_after.count() > 0) delay = std::max(delay, error.retry_after);
  Log(connect_failures == 1 ? LogLevel::warning : LogLevel::debug,
      "Socket Mode connection failed (" + error.message + "); trying again in " + std::to_string(delay.count()) +
          " ms");
  reconnect_timer = std::make_shared<asio::steady_timer>(context.io(), delay);
  reconnect_timer->async_wait(asio::bind_executor(strand, [self = shared_from_this()](const asio::error_code& ec) {
    if (!ec) self->OpenConnection();
  }));
}

void SlackAdapter::Impl::Fatal(Error error) {
  Log(LogLevel::error, "Socket Mode stopped: " + FatalText(error));
  socket_running = false;
  CloseConnections();
  if (on_fatal) {
    error.message = FatalText(error);
    asio::post(context.io(), [handler = std::move(on_fatal), error] { handler(error); });
    on_fatal = nullptr;
  }
}

void SlackAdapter::Impl::CloseConnections() {
  if (reconnect_timer) reconnect_timer->cancel();
  for (const auto& c : conns) {
    if (c->hello_timer) c->hello_timer->cancel();
    c->socket->Abort();
  }
  conns.clear();
  opening = false;
  socket_ok = false;
}

void SlackAdapter::StartSocketMode(Router& router, std::function<void(Error)> on_fatal) {
  asio::post(impl_->strand, [self = impl_, router = &router, on_fatal = std::move(on_fatal)]() mutable {
    if (self->socket_running) return;
    self->inbound_stopped = false;
    if (self->options.app_token.empty()) {
      asio::post(self->context.io(), [on_fatal = std::move(on_fatal)] {
        on_fatal(Error(Errc::invalid_argument, "Socket Mode needs an app-level token (xapp-)"));
      });
      return;
    }
    self->socket_running = true;
    self->router = router;
    self->on_fatal = std::move(on_fatal);
    self->connect_failures = 0;
    self->OpenConnection();
  });
}

void SlackAdapter::StopInbound() {
  auto stopped = std::make_shared<std::promise<void>>();
  auto done = stopped->get_future();
  asio::post(impl_->strand, [self = impl_, stopped] {
    self->inbound_stopped = true;
    self->socket_running = false;
    self->router = nullptr;
    // Unacknowledged envelopes are delivered again to the next start (Slack retries them).
    self->CloseConnections();
    stopped->set_value();
  });
  // Once this returns, no delivery reaches the router any more (the bridge destroys it next). A
  // stopped Context runs nothing: then nothing reaches the router either, and waiting would hang.
  if (impl_->context.InWorkerThread()) return;
  while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (impl_->context.Stopped()) return;
  }
}

bool SlackAdapter::SocketConnected() const noexcept {
  return impl_->socket_ok.load();
}

}  // namespace sessionturn
