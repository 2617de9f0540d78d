// `sessionturn interrupt`: stop the turn the runtime is running (exit 5 when there is none).
#include <cstdio>

#include <sessionturn/context.hpp>
#include <sessionturn/driver.hpp>

#include "backend_flags.hpp"
#include "commands.hpp"
#include "connect.hpp"
#include "options.hpp"
#include "output.hpp"

namespace sessionturn_cli {

CLI::App* AddInterrupt(CLI::App& app, Args& args) {
  CLI::App* interrupt = app.add_subcommand("interrupt", "Interrupt the turn the Session is running");
  SetSynopsis(*interrupt, "sessionturn interrupt (--socket PATH | --session NAME [BACKEND] | --exec CMD [ARG...])");
  AddConnectionOptions(*interrupt, args);
  return interrupt;
}

int RunInterrupt(const Args& args) {
  if (!args.session.empty()) {
    // An idle-suspended Session runs no turn: waking it (a Pod scheduled, a workspace mounted, a
    // runtime started) only to interrupt nothing would be waste. Its own Context: the one below
    // would outlive this backend.
    st::Context context;
    auto backend = MakeBackend(context, args);
    const st::SessionInfo info = GetSession(*backend, args, args.session);
    if (info.phase == st::SessionPhase::suspended && info.suspended == st::SuspendReason::idle) {
      std::fprintf(stderr, "sessionturn: Session %s is suspended by its idle policy: no turn is running\n",
                   args.session.c_str());
      return kExitCompleted;
    }
  }
  st::Context context;
  Connection connection = Connect(context, args);
  st::Driver driver(context, connection.connector);
  auto status = driver.Interrupt();
  if (status) return kExitCompleted;
  std::fprintf(stderr, "sessionturn: interrupt: %s\n", status.error().ToString().c_str());
  return ExitCodeFor(status.error());
}

}  // namespace sessionturn_cli
