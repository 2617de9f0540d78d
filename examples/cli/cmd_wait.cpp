// `sessionturn wait NAME`: until the Session is ready (waking it when its idle policy suspended it,
// starting its runtime on --local), then print where it runs: its Pod, or its runtime's socket.
#include <cstdio>

#include <sessionturn/context.hpp>

#include "backend_flags.hpp"
#include "commands.hpp"
#include "options.hpp"

namespace sessionturn_cli {

CLI::App* AddWait(CLI::App& app, Args& args) {
  CLI::App* wait = app.add_subcommand("wait", "Wait until a Session is ready and print its Pod (--local: its socket)");
  SetSynopsis(*wait, "sessionturn wait NAME [BACKEND] [--timeout SECONDS]");
  wait->add_option("NAME", args.name, "the Session")->type_name("");
  AddKubeOptions(*wait, args);
  AddLocalOptions(*wait, args, true);
  wait->add_option("--timeout", args.wait_timeout_seconds,
                   "how long to wait (default 600); prints the Pod name (--local: the runtime's socket) once the "
                   "Session is ready, waking it when its idle policy suspended it")
      ->check(PositiveSeconds())
      ->type_name("SECONDS");
  return wait;
}

void CheckWait(Args& args) {
  if (args.name.empty()) throw UsageError{"`sessionturn wait` needs a Session NAME"};
  CheckBackendFlags(args);
}

int RunWait(const Args& args) {
  st::Context context;
  auto backend = MakeBackend(context, args);
  // A local Session that is missing fails now; on a cluster a controller may be creating it.
  if (args.local) GetSession(*backend, args, args.name);
  const st::ReadyTarget ready = WaitForBackendSession(*backend, args, args.name);
  auto where = ready.info.details.find(args.local ? "socket" : "pod");
  std::fprintf(stdout, "%s\n", where == ready.info.details.end() ? ready.info.name.c_str() : where->second.c_str());
  return kExitCompleted;
}

}  // namespace sessionturn_cli
