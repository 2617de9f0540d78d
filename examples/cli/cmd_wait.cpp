// `sessionturn wait NAME`: until the Session is ready (waking it when its idle policy suspended it),
// then print its Pod.
#include <cstdio>

#include "commands.hpp"
#include "kube_flags.hpp"
#include "options.hpp"

namespace sessionturn_cli {

CLI::App* AddWait(CLI::App& app, Args& args) {
  CLI::App* wait = app.add_subcommand("wait", "Wait until a Session is ready and print its Pod");
  SetSynopsis(*wait, "sessionturn wait NAME [KUBE] [--timeout SECONDS]");
  wait->add_option("NAME", args.name, "the Session")->type_name("");
  AddKubeOptions(*wait, args);
  wait->add_option("--timeout", args.wait_timeout_seconds,
                   "how long to wait (default 600); prints the Pod name once the Session is ready, waking it "
                   "when its idle policy suspended it")
      ->check(PositiveSeconds())
      ->type_name("SECONDS");
  return wait;
}

void CheckWait(Args& args) {
  if (args.name.empty()) throw UsageError{"`sessionturn wait` needs a Session NAME"};
}

int RunWait(const Args& args) {
  WaitedSession waited = WaitForKubeSession(args, args.name);
  std::fprintf(stdout, "%s\n", waited.ready.pod_name.c_str());
  return kExitCompleted;
}

}  // namespace sessionturn_cli
