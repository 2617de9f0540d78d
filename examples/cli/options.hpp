// The CLI11 side of the arguments: option groups several commands take (connection, Kubernetes,
// --json), validators with the messages the CLI has always given, the checks CLI11 cannot express,
// and the help layout (a synopsis instead of CLI11's generic usage line).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "args.hpp"

namespace sessionturn_cli {

// --socket, --session and --wait-timeout (with --session), plus the Kubernetes flags. --exec is
// not a CLI11 option: it takes every argument after it (main splits it off before parsing).
void AddConnectionOptions(CLI::App& command, Args& args);
// -n/--namespace, --kubeconfig, --context.
void AddKubeOptions(CLI::App& command, Args& args);
// --local, --state-dir, --runtime and, for the commands that may start a runtime (`starts_runtimes`:
// turn, watch, interrupt, wait), --idle-suspend.
void AddLocalOptions(CLI::App& command, Args& args, bool starts_runtimes);
void AddJsonFlag(CLI::App& command, Args& args, const std::string& what);

// "--timeout wants a positive number of seconds, not \"soon\"" (CLI11 puts the option's name first).
CLI::Validator PositiveSeconds();
// Whole seconds, 0 or more ("--idle-suspend wants a whole number of seconds (0: never), not ...").
CLI::Validator NonNegativeWholeSeconds();
// KEY=VALUE with a non-empty key.
CLI::Validator KeyValue();
// "--socket needs a path" for an empty value.
CLI::Validator NonEmpty(const std::string& what);

// The checks of turn/watch/interrupt CLI11 cannot express: exactly one connection, the backend flags
// and --wait-timeout only with --session, then CheckBackendFlags. Throws UsageError.
void CheckConnection(const Args& args);
// --local and the Kubernetes flags exclude each other; --state-dir, --runtime and --idle-suspend need
// --local. Throws UsageError.
void CheckBackendFlags(const Args& args);

// Sets `synopsis` as `command`'s usage line(s) in its --help (see HelpFormatter).
void SetSynopsis(CLI::App& command, std::string synopsis);

// CLI11's layout with our usage lines ("usage: sessionturn turn (--socket PATH | ...) PROMPT") and
// option descriptions wrapped to a terminal's width (CLI11 2.1 prints each on one line).
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override;
  std::string make_option_desc(const CLI::Option* option) const override;
};

}  // namespace sessionturn_cli
