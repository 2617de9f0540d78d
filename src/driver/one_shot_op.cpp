#include "driver/one_shot_op.hpp"

#include "conn/operation_strand.hpp"

namespace sessionturn::driver_detail {
namespace {

// Whether `event`, which carries our request's requestId, is the runtime carrying the request out.
bool Settles(const ClientRequest& request, const Event& event) {
  if (request.type == request_type::kMessageEdit) return event.Is(event_type::kUserMessageUpdated);
  if (request.type == request_type::kMessageRemove) return event.Is(event_type::kUserMessageRemoved);
  // turn.interrupting (or the turn's end) for an interrupt; request.accepted or input.resolved for an input.
  return event.Is(event_type::kTurnInterrupting) || event.Is(event_type::kRequestAccepted) ||
         event.Is(event_type::kInputResolved) || event.Is(event_type::kTurnCompleted);
}

}  // namespace

OneShotOp::OneShotOp(std::shared_ptr<DriverState> driver, PrivateLoop loop, ClientRequest request,
                     std::chrono::milliseconds timeout, OneShotHandler handler)
    : loop_(std::move(loop)),
      driver_(std::move(driver)),
      strand_(MakeOperationStrand(*driver_, loop_)),
      request_(std::move(request)),
      timeout_(timeout),
      handler_(std::move(handler)),
      timer_(strand_) {}

void OneShotOp::Start() {
  {
    std::lock_guard lock(driver_->mu);
    ++driver_->one_shots;
  }
  asio::post(strand_, [self = shared_from_this()] {
    self->timer_.expires_after(self->timeout_);
    self->timer_.async_wait([self](const asio::error_code& ec) {
      if (ec) return;
      self->End(Fail(Errc::timeout, "the runtime did not answer the " + self->request_.type + " request within " +
                                        Seconds(self->timeout_)));
    });
    // As EventStream::Connect: the report may come from another thread (ReportConnectTo).
    ConnectOnStrand(*self, self->weak_from_this(), self->loop_, self->strand_, *self->driver_->connector);
  });
}

void OneShotOp::Cancel(Error error) {
  asio::post(strand_, [weak = weak_from_this(), error = std::move(error)]() mutable {
    if (auto self = weak.lock()) self->End(Fail(std::move(error)));
  });
}

void OneShotOp::OnConnect(Result<std::shared_ptr<Connection>> result) {
  if (done_) {
    if (result) (*result)->Close();
    return;
  }
  if (!result) {
    End(Fail(Errc::connection_failed, "could not reach the runtime at " + driver_->connector->Describe() + ": " +
                                          result.error().message));
    return;
  }
  conn_ = std::move(*result);
  std::vector<std::string> lines;
  lines.push_back(EncodeRequest(ClientRequest::Subscribe(0, "", true, kTurnHistoryItems, kTurnHistoryBytes)));
  lines.push_back(EncodeRequest(request_));
  conn_->AsyncWriteLines(std::move(lines));
  Read();
}

void OneShotOp::Read() {
  conn_->AsyncReadLine([self = shared_from_this()](Result<std::string> line) {
    asio::post(self->strand_, [self, line = std::move(line)]() mutable { self->OnLine(std::move(line)); });
  });
}

void OneShotOp::OnLine(Result<std::string> line) {
  if (done_) return;
  if (!line) {
    End(Fail(Errc::connection_lost, "the stream from " + conn_->Describe() + " ended before the runtime answered the " +
                                        request_.type + " request: " + line.error().message));
    return;
  }
  if (Event decoded; DecodeStreamLine(*driver_, *line, request_.type, decoded)) {
    Event* event = &decoded;
    // The runtime's word on our request carries its requestId: a rejection, or the event it caused.
    if (event->request_id == request_.request_id) {
      if (event->Is(event_type::kError)) {
        End(Fail(Errc::rejected, "the runtime rejected the " + request_.type + " request: " + event->text));
        return;
      }
      if (Settles(request_, *event)) {
        End(std::move(*event));
        return;
      }
    }
    // Resolved by someone else at the same moment: the question is settled either way.
    if (!request_.input_id.empty() && event->Is(event_type::kInputResolved) && event->input_id == request_.input_id) {
      End(std::move(*event));
      return;
    }
  }
  Read();
}

void OneShotOp::End(Result<Event> result) {
  if (done_) return;
  done_ = true;
  timer_.cancel();
  if (conn_) conn_->Close();
  conn_.reset();
  auto handler = std::move(handler_);
  if (handler) CallUser(driver_->context, "the request's completion handler", [&] { handler(std::move(result)); });
  {
    std::lock_guard lock(driver_->mu);
    --driver_->one_shots;
  }
  driver_->idle.notify_all();
}

}  // namespace sessionturn::driver_detail
