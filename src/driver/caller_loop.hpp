// The Driver's blocking verbs do their I/O on the calling thread (issue 14): the same operation the
// asynchronous form starts, run on a private loop by the caller (blocking_loop.hpp). The turn, its
// connection and its timers then share one strand on that loop, and a blocking turn has no
// cross-thread wake-up at all. Used only when the connector runs connections on the caller's strand
// (Connector::ConnectsOnStrand); otherwise the blocking verb waits for the operation on the Context
// as before (blocking.hpp).
#pragma once

#include "blocking_loop.hpp"
#include "driver/driver_impl.hpp"

namespace sessionturn::driver_detail {

using blocking::caller_loop_depth;
using blocking::KeepWaiting;
using blocking::RunOnCallerLoop;

}  // namespace sessionturn::driver_detail
