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

CLI::Validator NonNegativeWholeSeconds() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno != 0 || v < 0 || v > 10'000'000) {
          return "wants a whole number of seconds (0: never), not \"" + value + "\"";
        }
        return {};
      },
      "");
}

CLI::Validator KeyValue() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const auto eq = value.find('=');
        if (eq == std::string::npos || eq == 0) return "wants KEY=VALUE, not \"" + value + "\"";
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

void AddLocalOptions(CLI::App& command, Args& args, bool starts_runtimes) {
  auto given = [&args](const std::string&) { args.local_options_given = true; };
  command.add_flag("--local", args.local,
                   "the Session lives on this machine (the local backend: one sessionturn-local-runtime per "
                   "Session, state under --state-dir) instead of in a cluster")
      ->group("Local backend");
  command.add_option("--state-dir", args.state_dir,
                     "the local backend's state root (default: $XDG_STATE_HOME/sessionturn, else "
                     "~/.local/state/sessionturn)")
      ->type_name("DIR")
      ->check(NonEmpty("a directory"))
      ->each(given)
      ->group("Local backend");
  command.add_option("--runtime", args.runtime_program,
                     "the runtime program to start (default: sessionturn-local-runtime next to this program, "
                     "else on PATH)")
      ->type_name("PROGRAM")
      ->check(NonEmpty("a program"))
      ->each(given)
      ->group("Local backend");
  command.add_option("--agent-bin", args.agent_bin,
                     "the agent program of claude-code Sessions (default: claude, looked up on PATH)")
      ->type_name("PATH")
      ->check(NonEmpty("a program"))
      ->each(given)
      ->group("Local backend");
  if (!starts_runtimes) return;
  command.add_option_function<std::int64_t>(
          "--idle-suspend", [&args](std::int64_t seconds) { args.idle_suspend_seconds = seconds; },
          "a runtime this command starts stops itself after this long without a turn (phase Suspended, "
          "reason idle; the next turn starts it again); 0: never (default 1800)")
      ->check(NonNegativeWholeSeconds())
      ->type_name("SECONDS")
      ->each(given)
      ->group("Local backend");
}

void AddConnectionOptions(CLI::App& command, Args& args) {
  command.add_option("--socket", args.socket, "the runtime's unix socket")
      ->type_name("PATH")
      ->check(NonEmpty("a path"))
      ->group("Connection (one of)");
  command.add_option("--session", args.session,
                     "the Session NAME, a Kelos Session in a cluster (or on this machine with --local): wait until "
                     "it is ready (waking it when its idle policy suspended it), then talk to its runtime (its Pod "
                     "over pods/exec, or its socket)")
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
  AddLocalOptions(command, args, true);
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
  if ((args.local || args.local_options_given) && args.session.empty()) {
    throw UsageError{"--local, --state-dir, --runtime and --idle-suspend go with --session"};
  }
  CheckBackendFlags(args);
}

void CheckBackendFlags(const Args& args) {
  if (args.local && args.kube_options_given) {
    throw UsageError{"--local and the Kubernetes flags (-n, --kubeconfig, --context) exclude each other"};
  }
  if (args.local_options_given && !args.local) throw UsageError{"--state-dir, --runtime, --agent-bin and --idle-suspend go with --local"};
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
