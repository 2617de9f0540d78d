// Connections from the flags (connect.hpp).
#include "connect.hpp"

#include <sessionturn/session_driver.hpp>

#include "kube_flags.hpp"

namespace sessionturn_cli {

std::shared_ptr<st::Connector> MakeConnector(st::Context& context, const Args& args) {
  if (!args.exec.empty()) return st::MakeProcessConnector(context, args.exec);
  if (!args.session.empty()) {
    WaitedSession waited = WaitForKubeSession(args, args.session);
    // Acknowledges an idle resume after the first history.end (PROTOCOL.md §5).
    return st::MakeSessionConnector(context, waited.kube, waited.namespace_name, args.session, waited.ready);
  }
  return st::MakeUnixConnector(context, args.socket);
}

std::string ConnectionName(const Args& args) {
  if (!args.session.empty()) return "Session " + args.session;
  return args.exec.empty() ? "unix:" + args.socket : args.exec[0];
}

}  // namespace sessionturn_cli
