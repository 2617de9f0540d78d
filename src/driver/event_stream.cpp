#include "driver/event_stream.hpp"

#include <algorithm>

#include "conn/operation_strand.hpp"

namespace sessionturn::driver_detail {
namespace {

// A first connect that failed because the runtime is busy (Errc::unavailable: its listen backlog is
// full, EAGAIN on a unix socket, or ENOBUFS; typical when thousands of turns start at once) or did not
// answer in time is worth retrying under the reconnect policy; one that failed because nothing listens
// (ENOENT, ECONNREFUSED: Errc::connection_failed) is reported at once.
bool TransientConnectFailure(const Error& error) {
  return error.code == Errc::unavailable || error.code == Errc::timeout;
}

std::chrono::milliseconds Backoff(const ReconnectPolicy& policy, int attempt) {
  auto delay = policy.initial_backoff;
  for (int i = 0; i < attempt && delay < policy.max_backoff; ++i) delay *= 2;
  return std::min(delay, policy.max_backoff);
}

}  // namespace

EventStream::EventStream(std::shared_ptr<DriverState> driver, PrivateLoop loop, Strand strand,
                         std::shared_ptr<OpTimers> timers, ReconnectPolicy policy, std::string who)
    : loop_(std::move(loop)),
      driver_(std::move(driver)),
      strand_(std::move(strand)),
      policy_(policy),
      who_(std::move(who)),
      timers_(std::move(timers)) {}

void EventStream::Start(std::weak_ptr<Owner> owner) {
  owner_ = std::move(owner);
  Connect();
}

std::shared_ptr<EventStream::Owner> EventStream::LockOwner() {
  if (closed_) return nullptr;
  auto owner = owner_.lock();
  if (!owner) Close();
  return owner;
}

void EventStream::ReconnectNow() {
  if (closed_ || conn_ || connecting_) return;
  timers_->Cancel(backoff_);
  Connect();
}

void EventStream::Connect() {
  if (closed_) return;
  connecting_ = true;
  // On our strand: a connector that can runs the connection on it too (one strand per operation). The
  // report may come from another thread after a blocking caller stopped running its loop (see
  // ReportConnectTo).
  ConnectOnStrand(*this, weak_from_this(), loop_, strand_, *driver_->connector);
}

void EventStream::OnConnect(Result<std::shared_ptr<Connection>> result) {
  connecting_ = false;
  auto owner = LockOwner();
  if (!owner) {
    if (result) (*result)->Close();
    return;
  }
  if (!result) {
    if (!ever_connected_ && !(policy_.enabled && TransientConnectFailure(result.error()))) {
      Fail(Error(Errc::connection_failed, "could not reach the runtime at " + driver_->connector->Describe() + ": " +
                                              result.error().message));
      return;
    }
    last_drop_ = result.error().message;
    ScheduleReconnect();
    return;
  }
  const bool reconnected = ever_connected_;
  if (reconnected) ++reconnects_;
  ever_connected_ = true;
  conn_ = std::move(*result);
  ++generation_;
  timers_->Cancel(handshake_);
  handshake_ = timers_->After(policy_.handshake_timeout, [self = shared_from_this(), gen = generation_] {
    self->handshake_ = 0;
    if (self->closed_ || gen != self->generation_ || !self->conn_) return;
    self->OnDrop(Error(Errc::timeout, "no history.end within " + Seconds(self->policy_.handshake_timeout) +
                                          " of connecting"));
  });
  // The requests a (re)connect starts with, written together (one send for a turn's subscribe and
  // message).
  std::vector<std::string> lines;
  for (const auto& request : owner->OnStreamUp(reconnected)) lines.push_back(EncodeRequest(request));
  if (!lines.empty()) conn_->AsyncWriteLines(std::move(lines));
  if (conn_) Read();
}

void EventStream::Read() {
  in_read_call_ = true;
  conn_->AsyncReadLine([self = shared_from_this(), gen = generation_](Result<std::string> line) {
    // Delivered from a job of the connection's own on our strand (not from inside the call above):
    // go on at once, without a second trip through the strand's queue. A connection that answers
    // inside AsyncReadLine itself is posted to, or lines would recurse through OnLine.
    if (self->strand_.running_in_this_thread() && !self->in_read_call_) return self->OnLine(gen, std::move(line));
    asio::post(self->strand_, [self, gen, line = std::move(line)]() mutable { self->OnLine(gen, std::move(line)); });
  });
  in_read_call_ = false;
}

void EventStream::OnLine(std::uint64_t gen, Result<std::string> line) {
  if (closed_ || gen != generation_ || !conn_) return;
  if (!line) {
    OnDrop(line.error());
    return;
  }
  // The lines one socket read brought, in one go (a connection on our strand hands them over).
  for (std::optional<std::string> next = std::move(*line); next; next = conn_->TryReadLine()) {
    if (!HandleLine(*next)) return;
    if (closed_ || gen != generation_ || !conn_) return;  // the owner finished or the stream dropped
  }
  Read();
}

bool EventStream::HandleLine(std::string_view line) {
  if (!DecodeStreamLine(*driver_, line, who_, event_)) return true;
  // Progress (a new journaled event, or a complete replay) proves the stream works: the reconnect
  // budget is for consecutive failures, and a stream that drops before any progress must not
  // reconnect forever.
  const bool end_of_replay = event_.Is(event_type::kHistoryEnd);
  if (end_of_replay) timers_->Cancel(handshake_);
  if (end_of_replay || event_.id > max_event_id_) attempts_ = 0;
  max_event_id_ = std::max(max_event_id_, event_.id);
  auto owner = LockOwner();
  if (!owner) return false;
  owner->OnStreamEvent(event_);
  return true;
}

void EventStream::Send(const ClientRequest& request, Connection::WriteHandler done) {
  if (!conn_) {
    if (done) done(sessionturn::Fail(Errc::connection_lost, "no connection to the runtime"));
    return;
  }
  // Without `done`, a failed write is the connection's to log: it means a broken stream, whose read
  // fails too, and the reconnect takes over. A write nobody waits for can go out at once.
  conn_->AsyncWrite(EncodeRequest(request), std::move(done));
}

void EventStream::OnDrop(const Error& error) {
  const std::string describe = conn_->Describe();
  const std::string diagnostics = conn_->Diagnostics();
  conn_->Close();
  conn_.reset();
  ++generation_;
  timers_->Cancel(handshake_);
  last_drop_ = "the stream from " + describe + " ended: " + error.message +
               (diagnostics.empty() ? "" : " (" + diagnostics + ")");
  auto owner = LockOwner();
  if (!owner) return;
  owner->OnStreamDown(error);
  if (closed_) return;
  if (error.code == Errc::too_large) {
    Fail(Error(Errc::too_large, last_drop_));
    return;
  }
  if (!policy_.enabled) {
    Fail(Error(Errc::connection_lost, last_drop_ + "; reconnecting is disabled"));
    return;
  }
  ScheduleReconnect();
}

void EventStream::ScheduleReconnect() {
  if (attempts_ >= policy_.max_attempts) {
    if (!ever_connected_) {
      Fail(Error(Errc::connection_failed, "could not reach the runtime at " + driver_->connector->Describe() + " in " +
                                              std::to_string(attempts_ + 1) + " attempts: " + last_drop_));
    } else {
      Fail(Error(Errc::connection_lost,
                 "lost the runtime after " + std::to_string(attempts_) + " reconnect attempts: " + last_drop_));
    }
    return;
  }
  const auto delay = Backoff(policy_, attempts_);
  ++attempts_;
  driver_->Log(LogLevel::info, who_ + ": " + last_drop_ + "; reconnecting in " + Seconds(delay));
  timers_->Cancel(backoff_);
  backoff_ = timers_->After(delay, [self = shared_from_this()] {
    self->backoff_ = 0;
    if (self->closed_ || self->conn_ || self->connecting_) return;
    self->Connect();
  });
}

void EventStream::Fail(Error error) {
  auto owner = LockOwner();
  Close();
  if (owner) owner->OnStreamFailed(std::move(error));
}

void EventStream::Close() {
  if (closed_) return;
  closed_ = true;
  timers_->Cancel(backoff_);
  timers_->Cancel(handshake_);
  if (conn_) {
    conn_->Close();
    conn_.reset();
  }
  ++generation_;
}

}  // namespace sessionturn::driver_detail
