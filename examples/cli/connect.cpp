// Connections from the flags (connect.hpp).
#include "connect.hpp"

#include "backend_flags.hpp"

namespace sessionturn_cli {

Connection Connect(st::Context& context, const Args& args) {
  Connection out;
  if (!args.exec.empty()) {
    out.connector = st::MakeProcessConnector(context, args.exec);
  } else if (!args.session.empty()) {
    out.backend = MakeBackend(context, args);
    // A local Session that is not there fails now (WaitReady would wait for it to appear until its
    // deadline); on a cluster a controller may be creating it, so the wait is the answer.
    if (args.local) GetSession(*out.backend, args, args.session);
    // The connector acknowledges an idle resume after its first history.end (PROTOCOL.md §5).
    out.connector = WaitForBackendSession(*out.backend, args, args.session).connector;
  } else {
    out.connector = st::MakeUnixConnector(context, args.socket);
  }
  return out;
}

std::string ConnectionName(const Args& args) {
  if (!args.session.empty()) return "Session " + args.session;
  return args.exec.empty() ? "unix:" + args.socket : args.exec[0];
}

}  // namespace sessionturn_cli
