// The connection of turn, watch and interrupt from the flags: a unix socket, a child process
// (--exec), or a Session (waited for until it is ready, then its runtime), on a cluster or on the
// local backend.
#pragma once

#include <memory>
#include <string>

#include <sessionturn/backend.hpp>
#include <sessionturn/connection.hpp>
#include <sessionturn/context.hpp>

#include "args.hpp"

namespace sessionturn_cli {

struct Connection {
  // The backend whose Session this is (--session on a backend): the connector reaches the Session
  // through it, so keep it until the driver is gone. Null otherwise.
  std::unique_ptr<sessionturn::SessionBackend> backend;
  std::shared_ptr<sessionturn::Connector> connector;
};

// For --session, waits until the Session is ready first (with progress on stderr) and throws
// ExitWith when it does not become ready.
Connection Connect(sessionturn::Context& context, const Args& args);

// "unix:/tmp/s.sock", "Session chat", the --exec program: for the status line.
std::string ConnectionName(const Args& args);

}  // namespace sessionturn_cli
