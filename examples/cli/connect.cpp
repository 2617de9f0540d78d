// Connections from the flags (connect.hpp).
#include "connect.hpp"

#include <sessionturn/session_driver.hpp>

#include "backend_flags.hpp"
#include "kube_flags.hpp"

namespace sessionturn_cli {

Connection Connect(st::Context& context, const Args& args) {
  Connection out;
  if (!args.exec.empty()) {
    out.connector = st::MakeProcessConnector(context, args.exec);
  } else if (!args.session.empty() && UsesBackend(args)) {
    out.backend = MakeBackend(context, args);
    // A Session that is not there fails now: WaitReady would wait for it to appear until its deadline.
    GetSession(*out.backend, args, args.session);
    out.connector = WaitForBackendSession(*out.backend, args, args.session).connector;
  } else if (!args.session.empty()) {
    WaitedSession waited = WaitForKubeSession(args, args.session);
    // Acknowledges an idle resume after the first history.end (PROTOCOL.md §5).
    out.connector = st::MakeSessionConnector(context, waited.kube, waited.namespace_name, args.session, waited.ready);
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
