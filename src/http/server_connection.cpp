// One HTTP server connection: read a request (bounded in bytes and time), hand it to its handler,
// write the answer, then the next request or the end. One request at a time: a pipelined request
// waits in `pending_` until the one before it was answered, so answers go out in order.
#include "http/server_impl.hpp"

namespace sessionturn::http {

namespace {

std::string Millis(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

}  // namespace

ServerConnection::ServerConnection(std::shared_ptr<HttpServer::Core> core, asio::ip::tcp::socket socket,
                                   std::uint64_t id, bool over_capacity)
    : core_(std::move(core)), socket_(std::move(socket)), timer_(socket_.get_executor()), id_(id),
      over_capacity_(over_capacity), parser_(core_->options.max_header_bytes, core_->options.max_body_bytes) {}

void ServerConnection::Start() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    asio::error_code ec;
    auto peer = self->socket_.remote_endpoint(ec);
    self->remote_ = ec ? "unknown" : EndpointString(peer);
    if (self->over_capacity_) {
      self->current_ = Current{};
      self->phase_ = Phase::handler;  // nothing is read: the answer goes out at once
      self->Respond(PlainResponse(503, "the server has too many connections open (" +
                                           std::to_string(self->core_->options.max_connections) + ")"),
                    false);
      return;
    }
    self->Arm(self->core_->options.header_timeout, Wait::header);
    self->Read();
  });
}

void ServerConnection::BeginStop() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->stopping_ = true;
    if (self->phase_ == Phase::waiting) self->Close();
  });
}

void ServerConnection::ForceClose() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
}

void ServerConnection::Deliver(std::uint64_t seq, ServerResponse response, Answer how) {
  // Through the gate: a respond may come from any thread, also while the Context is being stopped.
  core_->gate->Post([self = shared_from_this(), seq, response = std::move(response), how]() mutable {
    asio::dispatch(self->socket_.get_executor(), [self, seq, response = std::move(response), how]() mutable {
      self->OnAnswer(seq, std::move(response), how);
    });
  });
}

void ServerConnection::Read() {
  if (reading_ || phase_ == Phase::closed) return;
  reading_ = true;
  socket_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
    self->OnRead(ec, n);
  });
}

void ServerConnection::OnRead(const asio::error_code& ec, std::size_t n) {
  reading_ = false;
  if (phase_ == Phase::closed) return;
  if (phase_ == Phase::lingering) {
    lingered_ += n;
    if (ec || lingered_ > kLingerBytes) {
      Close();
    } else {
      Read();
    }
    return;
  }
  // A deadline answered (408) while this read was pending: what it brought is not read as a request.
  if (phase_ == Phase::writing) return;
  // The peer closed or the socket failed: a half-received request has nobody to answer to.
  if (ec) {
    Close();
    return;
  }
  Consume(std::string_view(buffer_.data(), n));
}

void ServerConnection::Consume(std::string_view bytes) {
  if (bytes.empty()) {
    Read();
    return;
  }
  if (phase_ == Phase::waiting) {
    phase_ = Phase::headers;
    if (!fresh_) Arm(core_->options.header_timeout, Wait::header);
  }
  const std::size_t used = parser_.Feed(bytes);
  switch (parser_.state()) {
    case RequestParser::State::failed:
      Reject(parser_.error_status(), parser_.error_message());
      return;
    case RequestParser::State::complete:
      pending_.assign(bytes.substr(used));
      DispatchRequest();
      return;
    case RequestParser::State::need_more:
      if (parser_.HeadersComplete() && phase_ == Phase::headers) {
        phase_ = Phase::body;
        Arm(core_->options.body_timeout, Wait::body);
        // The client waits for this before it sends the body (or a while, then sends it anyway).
        if (parser_.ExpectsContinue()) Send("HTTP/1.1 100 Continue\r\n\r\n", false);
      }
      Read();
      return;
  }
}

void ServerConnection::DispatchRequest() {
  ParsedRequest parsed = parser_.TakeRequest();
  phase_ = Phase::handler;
  ++seq_;
  current_ = Current{parsed.method,       parsed.path,           parsed.method == "HEAD",
                     parsed.keep_alive && !parsed.upgrade, parsed.http_major == 1 && parsed.http_minor == 0,
                     std::chrono::steady_clock::now()};
  Arm(core_->options.handler_timeout, Wait::handler);
  ServerRequest request;
  request.method = std::move(parsed.method);
  request.target = std::move(parsed.target);
  request.path = std::move(parsed.path);
  request.query = std::move(parsed.query);
  request.headers = std::move(parsed.headers);
  request.body = std::move(parsed.body);
  request.remote = remote_;
  core_->Dispatch(shared_from_this(), seq_, request);
}

void ServerConnection::OnAnswer(std::uint64_t seq, ServerResponse response, Answer how) {
  if (phase_ != Phase::handler || seq != seq_) {
    core_->Log(LogLevel::debug, "http server: an answer (" + std::to_string(response.status) +
                                    ") came after its request was answered or its connection closed; dropped");
    return;
  }
  if (how == Answer::dropped) core_->Count(&ServerStats::handler_dropped);
  Respond(std::move(response), true);
}

void ServerConnection::Respond(ServerResponse response, bool served) {
  const bool close = close_after_ || !current_.keep_alive || stopping_ || over_capacity_ || WantsClose(response);
  Framing framing{current_.head, close, current_.http10};
  std::string wire;
  std::string problem;
  if (!SerializeResponse(response, framing, wire, problem)) {
    core_->Log(LogLevel::warning, "http server: the answer to " + current_.method + " " + current_.path +
                                      " cannot be sent (" + problem + "); answering 500");
    response = PlainResponse(500, "the request's handler gave an invalid response");
    SerializeResponse(response, framing, wire, problem);
  }
  close_after_ = close;
  phase_ = Phase::writing;
  Arm(core_->options.write_timeout, Wait::write);
  if (served) {
    core_->Count(&ServerStats::requests_served);
    if (core_->context.ShouldLog(LogLevel::debug)) {
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                              current_.started);
      core_->Log(LogLevel::debug, "http server: " + current_.method + " " + current_.path + " " +
                                      std::to_string(response.status) + " in " + Millis(took));
    }
  }
  Send(std::move(wire), true);
}

void ServerConnection::Reject(int status, const std::string& why) {
  switch (status) {
    case 413: core_->Count(&ServerStats::rejected_body_too_large); break;
    case 431: core_->Count(&ServerStats::rejected_headers_too_large); break;
    case 408: core_->Count(&ServerStats::rejected_timeout); break;
    default: core_->Count(&ServerStats::rejected_malformed); break;
  }
  core_->Log(LogLevel::debug, "http server: request from " + remote_ + " refused: " + std::to_string(status) + " " + why);
  current_ = Current{};
  close_after_ = true;  // the rest of what it sent cannot be read as requests
  Respond(PlainResponse(status, why), false);
}

void ServerConnection::Send(std::string bytes, bool final) {
  out_.push_back(Outgoing{std::move(bytes), final});
  if (!write_in_flight_) WriteNext();
}

void ServerConnection::WriteNext() {
  write_in_flight_ = true;
  asio::async_write(socket_, asio::buffer(out_.front().bytes),
                    [self = shared_from_this()](const asio::error_code& ec, std::size_t) { self->OnWritten(ec); });
}

void ServerConnection::OnWritten(const asio::error_code& ec) {
  write_in_flight_ = false;
  const bool final = out_.front().final;
  out_.pop_front();
  if (phase_ == Phase::closed) return;
  if (ec) {
    Close();
    return;
  }
  if (!out_.empty()) WriteNext();
  if (final) AfterResponse();
}

void ServerConnection::AfterResponse() {
  if (close_after_) {
    LingerClose();
    return;
  }
  phase_ = Phase::waiting;
  fresh_ = false;
  // A stop that came while the response was being written: now it is idle.
  if (stopping_) {
    Close();
    return;
  }
  if (!pending_.empty()) {
    std::string next = std::move(pending_);
    pending_.clear();
    Consume(next);
    return;
  }
  Arm(core_->options.idle_timeout, Wait::idle);
  Read();
}

void ServerConnection::Arm(std::chrono::milliseconds after, Wait wait) {
  const std::uint64_t generation = ++timer_generation_;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), generation, wait](const asio::error_code& ec) {
    // A re-armed timer's earlier wait may already be queued as a success: the generation tells.
    if (ec || generation != self->timer_generation_ || self->phase_ == Phase::closed) return;
    self->OnTimer(wait);
  });
}

void ServerConnection::OnTimer(Wait wait) {
  const auto& o = core_->options;
  switch (wait) {
    case Wait::header:
      if (phase_ == Phase::waiting) {
        // Nothing arrived since accept: nobody is waiting for an answer.
        core_->Count(&ServerStats::rejected_timeout);
        Close();
      } else if (phase_ == Phase::headers) {
        Reject(408, "the request's headers did not arrive within " + Millis(o.header_timeout));
      }
      return;
    case Wait::body:
      if (phase_ == Phase::body) Reject(408, "the request's body did not arrive within " + Millis(o.body_timeout));
      return;
    case Wait::handler:
      if (phase_ != Phase::handler) return;
      core_->Count(&ServerStats::handler_timeouts);
      core_->Log(LogLevel::warning, "http server: the handler of " + current_.method + " " + current_.path +
                                        " did not answer within " + Millis(o.handler_timeout) + "; answering 503");
      Respond(PlainResponse(503, "the request's handler did not answer in time"), true);
      return;
    case Wait::idle:
    case Wait::write:
    case Wait::linger:
      Close();
      return;
  }
}

void ServerConnection::LingerClose() {
  phase_ = Phase::lingering;
  pending_.clear();
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  Arm(kLingerTimeout, Wait::linger);
  Read();
}

void ServerConnection::Close() {
  if (phase_ == Phase::closed) return;
  phase_ = Phase::closed;
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  timer_.cancel();
  core_->Unregister(id_);
}

}  // namespace sessionturn::http
