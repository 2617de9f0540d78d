// What every `sessionturn` command shares: the exit codes (the CLI's contract with scripts), the
// parsed arguments, and the two ways a command ends early (a usage error, an outcome decided deep
// inside). The CLI11 side (option groups, validators) is options.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sessionturn/error.hpp>

namespace sessionturn_cli {

namespace st = sessionturn;
using namespace std::chrono_literals;

// Exit codes (docs/cli.md).
inline constexpr int kExitCompleted = 0;
inline constexpr int kExitTurnFailed = 1;   // failed, interrupted, removed (and cancelled by Ctrl-C)
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;  // could not reach or lost the runtime
inline constexpr int kExitTimeout = 4;
inline constexpr int kExitRejected = 5;

// How often a live status line is redrawn: often enough for a ticking clock, rarely enough to be
// cheap over a slow terminal link.
inline constexpr auto kStatusRefresh = 250ms;

// How long `turn`, `watch`, `interrupt` with --session and `wait` wait for the Session by default
// (PROTOCOL.md §6: a Session resuming from idle needs its Pod scheduled and its workspace mounted).
inline constexpr double kDefaultWaitSeconds = 600;

// A usage error found after CLI11 parsed the line (a missing connection, an empty prompt): main
// prints it as one line with a pointer to the command's --help and exits kExitUsage.
struct UsageError {
  std::string message;
};

// An outcome decided deep inside a command (a bad kubeconfig, a Session that failed): main prints
// "sessionturn: <message>" and exits with `code`.
struct ExitWith {
  int code;
  std::string message;
};

struct Args {
  std::string command;          // turn | watch | interrupt | sessions | wait
  std::string sessions_action;  // list | get | create | suspend | resume | delete
  std::string name;             // NAME of `sessions get ...` and `wait`

  // Connection of turn, watch and interrupt (exactly one).
  std::string socket;
  std::string session;  // --session NAME
  std::vector<std::string> exec;
  bool exec_given = false;  // --exec was on the line (possibly with nothing after it)

  // Kubernetes.
  std::string namespace_name;
  std::string kubeconfig;
  std::string kube_context;
  bool kube_options_given = false;  // -n, --kubeconfig or --context
  double wait_timeout_seconds = kDefaultWaitSeconds;
  bool wait_timeout_given = false;  // --wait-timeout

  // The local backend (--local), instead of a cluster.
  bool local = false;
  std::string state_dir;        // --state-dir (default: DefaultStateDir())
  std::string runtime_program;  // --runtime (default: next to this program, else on PATH)
  std::string agent_bin;        // --agent-bin (claude-code Sessions; default: claude on PATH)
  std::optional<std::int64_t> idle_suspend_seconds;  // --idle-suspend (default: the backend's)
  bool local_options_given = false;  // --state-dir, --runtime, --agent-bin or --idle-suspend

  // sessions create.
  std::string provider;  // --provider (local)
  std::string workdir;   // --workdir (local)
  std::string spawner;        // --spawner (cluster)
  std::string template_file;  // --template (cluster)
  std::vector<std::string> labels;       // --label KEY=VALUE
  std::vector<std::string> annotations;  // --annotation KEY=VALUE

  // sessions list.
  std::string selector;  // -l/--selector

  // turn.
  double timeout_seconds = 0;  // 0: the driver's default
  bool ask = false;
  bool no_reconnect = false;
  bool allow_commands = false;
  std::vector<std::string> prompt_args;  // the positional PROMPT (more than one is a usage error)
  std::optional<std::string> prompt;

  // watch.
  std::optional<std::int64_t> since;

  bool json = false;
};

}  // namespace sessionturn_cli
