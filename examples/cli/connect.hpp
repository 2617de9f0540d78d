// The connection of turn, watch and interrupt from the flags: a unix socket, a child process
// (--exec), or a Session (waited for until it is ready, then its runtime).
#pragma once

#include <memory>
#include <string>

#include <sessionturn/connection.hpp>
#include <sessionturn/context.hpp>

#include "args.hpp"

namespace sessionturn_cli {

// For --session, waits until the Session is ready first (with progress on stderr) and throws
// ExitWith when it does not become ready.
std::shared_ptr<sessionturn::Connector> MakeConnector(sessionturn::Context& context, const Args& args);

// "unix:/tmp/s.sock", "Session chat", the --exec program: for the status line.
std::string ConnectionName(const Args& args);

}  // namespace sessionturn_cli
