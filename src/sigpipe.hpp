// Writes to a pipe whose reader exited raise SIGPIPE, which kills the process by default.
#pragma once

namespace sessionturn {

// Ignores SIGPIPE process-wide, once, unless the program installed a handler of its own (then a
// write to a closed pipe is EPIPE). Children get the default back (posix_spawn SETSIGDEF).
void IgnoreSigpipeOnce();

}  // namespace sessionturn
