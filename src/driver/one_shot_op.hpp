// Interrupt / Answer / Decline on a connection of their own: subscribe (bounded, so no replay), send
// the request, and wait for the runtime's word on it.
#pragma once

#include <memory>

#include "driver/driver_impl.hpp"

namespace sessionturn::driver_detail {

class OneShotOp : public std::enable_shared_from_this<OneShotOp> {
 public:
  OneShotOp(std::shared_ptr<DriverState> driver, ClientRequest request, std::chrono::milliseconds timeout,
            Driver::StatusHandler handler);
  void Start();

 private:
  void OnConnect(Result<std::shared_ptr<Connection>> result);
  void Read();
  void OnLine(Result<std::string> line);
  void End(Status status);

  std::shared_ptr<DriverState> driver_;
  Strand strand_;
  ClientRequest request_;
  std::chrono::milliseconds timeout_;
  Driver::StatusHandler handler_;
  asio::steady_timer timer_;
  std::shared_ptr<Connection> conn_;
  bool done_ = false;
};

}  // namespace sessionturn::driver_detail
