// Option groups, validators and the help layout shared by the commands (options.hpp).
#include "options.hpp"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <sstream>

namespace sessionturn_cli {

namespace {

// Help lines are wrapped to fit a classic 100-column terminal.
constexpr std::size_t kHelpWidth = 100;

// Usage lines by command. CLI11 apps carry no user data, and the commands are built once per run.
std::map<const CLI::App*, std::string>& Synopses() {
  static std::map<const CLI::App*, std::string> synopses;
  return synopses;
}

// Greedy word wrap; CLI11 indents the lines after a '\n' to the description column.
std::string Wrap(const std::string& text, std::size_t width) {
  std::istringstream words(text);
  std::string out;
  std::string word;
  std::size_t column = 0;
  while (words >> word) {
    if (column > 0 && column + 1 + word.size() > width) {
      out += '\n';
      column = 0;
    } else if (column > 0) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
  }
  return out;
}

}  // namespace

CLI::Validator PositiveSeconds() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || end == nullptr || *end != '\0' || errno != 0 || !(v > 0) || v > 1e7) {
          return "wants a positive number of seconds, not \"" + value + "\"";
        }
        return {};
      },
      "");
}

CLI::Validator NonEmpty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& value) -> std::string { return value.empty() ? "needs " + what : std::string(); }, "");
}

void AddKubeOptions(CLI::App& command, Args& args) {
  auto given = [&args](const std::string&) { args.kube_options_given = true; };
  command.add_option("-n,--namespace", args.namespace_name, "the Session's namespace (default: the context's, else \"default\")")
      ->type_name("NS")
      ->check(NonEmpty("a namespace"))
      ->each(given)
      ->group("Kubernetes");
  command.add_option("--kubeconfig", args.kubeconfig,
                     "kubeconfig file(s), colon-separated (default: $KUBECONFIG, else ~/.kube/config, else the "
                     "in-cluster service account)")
      ->type_name("FILE")
      ->check(NonEmpty("a file"))
      ->each(given)
      ->group("Kubernetes");
  command.add_option("--context", args.kube_context, "the kubeconfig context (default: its current-context)")
      ->type_name("NAME")
      ->check(NonEmpty("a context name"))
      ->each(given)
      ->group("Kubernetes");
}

void AddConnectionOptions(CLI::App& command, Args& args) {
  command.add_option("--socket", args.socket, "the runtime's unix socket")
      ->type_name("PATH")
      ->check(NonEmpty("a path"))
      ->group("Connection (one of)");
  command.add_option("--session", args.session,
                     "the Kelos Session NAME in a cluster: wait until it is ready (waking it when its idle policy "
                     "suspended it), then talk to its Pod over pods/exec")
      ->type_name("NAME")
      ->check(NonEmpty("a Session name"))
      ->group("Connection (one of)");
  // Not a CLI11 option (main splits it off): listed for --help only.
  command.add_flag("--exec", args.exec_given,
                   "run CMD (no shell) and talk over its stdin/stdout, e.g. --exec kubectl exec -i POD -c "
                   "kelos-agent -- /kelos/bin/kelos-session-runtime client. --exec takes every argument after it, "
                   "so put it last.")
      ->option_text("CMD [ARG...]")
      ->group("Connection (one of)");
  AddKubeOptions(command, args);
  command.add_option("--wait-timeout", args.wait_timeout_seconds,
                     "with --session: how long to wait for the Session to be ready (default 600)")
      ->check(PositiveSeconds())
      ->type_name("SECONDS")
      ->each([&args](const std::string&) { args.wait_timeout_given = true; })
      ->group("Kubernetes");
}

void AddJsonFlag(CLI::App& command, Args& args, const std::string& what) {
  command.add_flag("--json", args.json, what);
}

void CheckConnection(const Args& args) {
  if (args.exec_given && args.exec.empty()) throw UsageError{"--exec needs a command"};
  const int connections = int(!args.socket.empty()) + int(args.exec_given) + int(!args.session.empty());
  if (connections == 0) throw UsageError{"give --socket PATH, --session NAME or --exec CMD"};
  if (connections > 1) throw UsageError{"give one of --socket, --session and --exec, not several"};
  if ((args.kube_options_given || args.wait_timeout_given) && args.session.empty()) {
    throw UsageError{"-n, --kubeconfig, --context and --wait-timeout go with --session"};
  }
}

void SetSynopsis(CLI::App& command, std::string synopsis) { Synopses()[&command] = std::move(synopsis); }

std::string HelpFormatter::make_option_desc(const CLI::Option* option) const {
  return Wrap(CLI::Formatter::make_option_desc(option), kHelpWidth - get_column_width());
}

std::string HelpFormatter::make_usage(const CLI::App* app, std::string name) const {
  auto it = Synopses().find(app);
  if (it == Synopses().end()) return CLI::Formatter::make_usage(app, std::move(name));
  std::istringstream lines(it->second);
  std::string out;
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    out += (first ? "usage: " : "       ") + line + "\n";
    first = false;
  }
  return out;
}

}  // namespace sessionturn_cli
