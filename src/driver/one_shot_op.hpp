// Interrupt / Answer / Decline / EditQueued / RemoveQueued on a connection of their own: subscribe
// (bounded, so no replay), send the request, and wait for the runtime's word on it.
#pragma once

#include <functional>
#include <memory>

#include "driver/driver_impl.hpp"

namespace sessionturn::driver_detail {

// The runtime's word on a one-shot request: the event that settled it (turn.interrupting,
// request.accepted, input.resolved, user.message.updated, user.message.removed...), or why it did not.
using OneShotHandler = std::function<void(Result<Event> settled)>;

class OneShotOp : public std::enable_shared_from_this<OneShotOp> {
 public:
  // `loop`: a blocking call's private loop, or null to run on the Context.
  OneShotOp(std::shared_ptr<DriverState> driver, PrivateLoop loop, ClientRequest request,
            std::chrono::milliseconds timeout, OneShotHandler handler);
  // From any thread: ends the request with `error` (its Context was stopped under a blocking call).
  void Cancel(Error error);
  void Start();

  // A connect's report waiting for the strand (ReportConnectTo).
  ConnectPark connect_park;
  void OnConnect(Result<std::shared_ptr<Connection>> result);

 private:
  void Read();
  void OnLine(Result<std::string> line);
  void End(Result<Event> result);

  PrivateLoop loop_;  // first: destroyed after everything below that uses it
  std::shared_ptr<DriverState> driver_;
  Strand strand_;
  ClientRequest request_;
  std::chrono::milliseconds timeout_;
  OneShotHandler handler_;
  asio::steady_timer timer_;
  std::shared_ptr<Connection> conn_;
  bool done_ = false;
};

}  // namespace sessionturn::driver_detail
