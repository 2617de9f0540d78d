// `sessionturn`: one turn, a watch or an interrupt against a Session runtime, from a shell, and the
// Sessions of a backend, a cluster or this machine (list, get, create, suspend, resume, delete, wait).
// A thin layer over driver.hpp, backend.hpp, sessions.hpp and session_driver.hpp. This file is the
// wiring: the CLI11 command tree (one file per command, cmd_*.cpp), usage errors as one line with a
// pointer to --help, signals, and the dispatch.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "signals.hpp"

namespace sc = sessionturn_cli;

namespace {

constexpr const char* kDescription =
    "sessionturn: one turn, a watch or an interrupt against a Session runtime, and the Sessions of a backend: "
    "Kelos Sessions in a cluster, or Sessions on this machine (--local).";

constexpr const char* kSynopsis =
    "sessionturn turn (--socket PATH | --session NAME [BACKEND] | --exec CMD [ARG...]) [options] PROMPT\n"
    "sessionturn watch (--socket PATH | --session NAME [BACKEND] | --exec CMD [ARG...]) [--since ID] [--json]\n"
    "sessionturn interrupt (--socket PATH | --session NAME [BACKEND] | --exec CMD [ARG...])\n"
    "sessionturn sessions list [BACKEND] [-l SELECTOR] [--json]\n"
    "sessionturn sessions create NAME [BACKEND] [options] [--json]\n"
    "sessionturn sessions (get | suspend | resume | delete) NAME [BACKEND] [--json]\n"
    "sessionturn wait NAME [BACKEND] [--timeout SECONDS]\n"
    "sessionturn COMMAND --help";

constexpr const char* kKube = R"(
BACKEND: where the Session lives, one of
  KUBE   (the default) a Kelos Session in a cluster: -n/--namespace NS, --kubeconfig FILE,
         --context NAME (kubeconfig from $KUBECONFIG, else ~/.kube/config, else the in-cluster
         service account)
  --local  this machine: --state-dir DIR (default $XDG_STATE_HOME/sessionturn, else
         ~/.local/state/sessionturn), --runtime PROGRAM, and for commands that start runtimes
         --idle-suspend SECONDS
  With --session, --wait-timeout SECONDS bounds the wait for the Session (default 600).

A local start in two lines:
  sessionturn sessions create chat --local
  sessionturn turn --session chat --local "hi"
)";

constexpr const char* kExitCodes = R"(
Exit codes: 0 completed; 1 the turn failed, was interrupted or removed (sessions: the API refused,
e.g. no such Session); 2 usage error or a bad kubeconfig; 3 could not reach or lost the runtime or
the cluster, or the Session failed or is suspended by its owner; 4 timed out (a turn, or waiting
for the Session); 5 rejected by the runtime.
)";

// The command line with --exec and everything after it set aside: --exec takes the rest of the
// line as the program to run, options and all, which no option parser does. `--` ends the options
// first (a prompt may be "--exec").
std::vector<std::string> SplitExec(std::vector<std::string> line, sc::Args& args) {
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == "--") break;
    if (line[i] == "--exec") {
      args.exec_given = true;
      args.exec.assign(line.begin() + static_cast<std::ptrdiff_t>(i) + 1, line.end());
      line.resize(i);
      break;
    }
  }
  return line;
}

// The command the parse reached: "sessionturn sessions get" and its deepest CLI11 app.
const CLI::App* Deepest(const CLI::App& app, std::string& path) {
  path = "sessionturn";
  const CLI::App* at = &app;
  for (;;) {
    auto parsed = at->get_subcommands();
    if (parsed.empty()) return at;
    at = parsed.front();
    path += " " + at->get_name();
  }
}

bool KnowsOption(const CLI::App& app, const std::string& name) {
  if (app.get_option_no_throw(name) != nullptr) return true;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (KnowsOption(*sub, name)) return true;
  }
  return false;
}

// CLI11's "The following argument was not expected: b" in the CLI's words.
std::string DescribeExtra(const CLI::App& top, const CLI::App& at, const std::string& path) {
  const std::vector<std::string> extras = at.remaining();
  if (extras.empty()) return "unexpected arguments";
  const std::string& extra = extras.front();
  if (extra.size() > 1 && extra[0] == '-') {
    const std::string name = extra.substr(0, extra.find('='));
    if (KnowsOption(top, name)) return name + " is not an option of `" + path + "`";
    return "unknown option " + name;
  }
  if (&at == &top) return "unknown command \"" + extra + "\" (expected turn, watch, interrupt, sessions or wait)";
  if (at.get_name() == "sessions") {
    return "unknown sessions action \"" + extra + "\" (expected list, get, create, suspend, resume or delete)";
  }
  if (at.get_name() == "turn") return "more than one PROMPT given (quote the prompt as one argument)";
  return "unexpected argument \"" + extra + "\"";
}

void SetFooters(CLI::App& app, const char* footer) {
  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    sub->footer(footer);
    SetFooters(*sub, footer);
  }
}

// One line: what is wrong, and where the whole story is.
int UsageFailure(const std::string& message, const std::string& path) {
  std::fprintf(stderr, "sessionturn: %s (usage: %s --help)\n", message.c_str(), path.c_str());
  return sc::kExitUsage;
}

// Runs the checks CLI11 cannot express for the command the line named.
void CheckCommand(sc::Args& args) {
  if (args.exec_given && args.command != "turn" && args.command != "watch" && args.command != "interrupt") {
    throw sc::UsageError{"--exec is only for `sessionturn turn`, `sessionturn watch` or `sessionturn interrupt`"};
  }
  if (args.command == "turn") sc::CheckTurn(args);
  else if (args.command == "watch" || args.command == "interrupt") sc::CheckConnection(args);
  else if (args.command == "sessions") sc::CheckSessions(args);
  else if (args.command == "wait") sc::CheckWait(args);
}

int Dispatch(const sc::Args& args) {
  if (args.command == "turn") return sc::RunTurn(args);
  if (args.command == "watch") return sc::RunWatch(args);
  if (args.command == "sessions") return sc::RunSessions(args);
  if (args.command == "wait") return sc::RunWait(args);
  return sc::RunInterrupt(args);
}

}  // namespace

int main(int argc, char** argv) {
  sc::Args args;
  std::vector<std::string> line(argv + 1, argv + argc);
  // `sessionturn help [COMMAND...]` is `sessionturn [COMMAND...] --help`.
  if (!line.empty() && line.front() == "help") {
    line.erase(line.begin());
    line.push_back("--help");
  }
  line = SplitExec(std::move(line), args);

  CLI::App app(kDescription, "sessionturn");
  app.formatter(std::make_shared<sc::HelpFormatter>());
  sc::SetSynopsis(app, kSynopsis);
  sc::AddTurn(app, args);
  sc::AddWatch(app, args);
  sc::AddInterrupt(app, args);
  sc::AddSessions(app, args);
  sc::AddWait(app, args);
  // After the commands: CLI11 hands a parent's footer down to the subcommands added after it.
  app.footer(std::string(kKube) + kExitCodes);
  SetFooters(app, kExitCodes);

  std::string path;
  try {
    std::vector<std::string> reversed(line.rbegin(), line.rend());  // CLI11 takes the line back to front
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return sc::kExitCompleted;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return sc::kExitCompleted;
  } catch (const CLI::ExtrasError&) {
    const CLI::App* at = Deepest(app, path);
    return UsageFailure(DescribeExtra(app, *at, path), path);
  } catch (const CLI::ArgumentMismatch& e) {
    Deepest(app, path);
    const std::string what = e.what();
    // "--socket: 1 required PATH missing": the option is named before the colon.
    if (what.find("missing") != std::string::npos && what.rfind("-", 0) == 0) {
      return UsageFailure(what.substr(0, what.find(':')) + " needs a value", path);
    }
    return UsageFailure(what, path);
  } catch (const CLI::ParseError& e) {
    Deepest(app, path);
    return UsageFailure(e.what(), path);
  }
  const CLI::App* at = Deepest(app, path);
  if (at == &app) return UsageFailure("no command given", path);
  args.command = at->get_parent() == &app ? at->get_name() : at->get_parent()->get_name();
  if (args.command == "sessions" && at->get_parent() != &app) args.sessions_action = at->get_name();
  try {
    CheckCommand(args);
  } catch (const sc::UsageError& e) {
    return UsageFailure(e.message, path);
  }

  // Before any thread exists, so every thread inherits the mask and only the watcher takes signals.
  sc::BlockTerminationSignals();
  sc::StartSignalWatcher();
  try {
    return Dispatch(args);
  } catch (const sc::ExitWith& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "sessionturn: %s\n", e.message.c_str());
    return e.code;
  } catch (const sc::UsageError& e) {
    return UsageFailure(e.message, path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sessionturn: internal error: %s\n", e.what());
    return sc::kExitTurnFailed;
  }
}
