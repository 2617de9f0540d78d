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
void AddJsonFlag(CLI::App& command, Args& args, const std::string& what);

// "--timeout wants a positive number of seconds, not \"soon\"" (CLI11 puts the option's name first).
CLI::Validator PositiveSeconds();
// "--socket needs a path" for an empty value.
CLI::Validator NonEmpty(const std::string& what);

// The checks of turn/watch/interrupt CLI11 cannot express: exactly one connection, the Kubernetes
// flags and --wait-timeout only with --session. Throws UsageError.
void CheckConnection(const Args& args);

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
