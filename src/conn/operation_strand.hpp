// The strand an operation (a turn, a watch, a one-shot request) runs on, handed to
// Connector::AsyncConnectOn so that the connection runs on it too. Its io_context is the Context's,
// or a blocking call's private loop that the calling thread runs.
#pragma once

#include <asio.hpp>

#include "sessionturn/connection.hpp"

namespace sessionturn {

struct OperationStrand {
  asio::strand<asio::io_context::executor_type> strand;
};

}  // namespace sessionturn
