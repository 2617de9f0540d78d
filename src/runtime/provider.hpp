// Providers of the local runtime: what produces a turn's events. A provider spec ("echo",
// "script:FILE", "command:CMD", "flood:N", "claude-code[:...]") is parsed once; each turn gets a
// TurnRun that talks to the runtime only through a TurnHost, on the runtime's I/O thread. A provider
// may keep state between turns (claude-code keeps its agent process).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

namespace asio {
class io_context;
}

namespace sessionturn::runtime {

// The runtime's side of one turn. Every call is ignored once the turn is over (or was killed), so a
// late callback of a provider can never touch the next turn.
class TurnHost {
 public:
  virtual ~TurnHost() = default;
  // Journals an event of this turn (turnId filled in). `runtime.status` is broadcast unjournaled.
  virtual void Emit(Event event) = 0;
  // Journals input.requested {status: pending} and returns the input id: `input_id`, or when that is
  // empty one the runtime picks ("input-N"). The run hears back through TurnRun::InputResolved.
  virtual std::string Ask(std::string input_id, std::vector<InputQuestion> questions) = 0;
  // Journals every open question of this turn as cancelled (input.resolved), as a turn's end does: for a
  // provider that told its agent the questions are gone before the turn ends (an interrupt).
  virtual void CancelInputs() = 0;
  // The turn is over: "completed", "failed" (error, when given, is journaled first) or "interrupted".
  virtual void Done(std::string status, std::string error) = 0;
  virtual bool Paused() const = 0;
  // Runs `fn` once the provider is resumed (at once if it is not paused).
  virtual void WhenResumed(std::function<void()> fn) = 0;
  virtual asio::io_context& io() = 0;
  // Live events queued to the slowest subscriber, and the bound at which it is dropped. Only the
  // benchmark flood looks at them (a real provider cannot see its readers).
  virtual std::size_t Backlog() const = 0;
  virtual std::size_t BacklogBound() const = 0;
};

struct TurnInput {
  std::string turn_id;
  std::string text;
  std::int64_t number = 0;  // this is the Session's number-th turn (from the journal)
  std::string session_name;
  std::string state_dir;
  std::string working_dir;  // where commands run; empty: the process's current directory
  std::chrono::milliseconds echo_delay{20};
};

class TurnRun {
 public:
  virtual ~TurnRun() = default;
  virtual void Start() = 0;
  // Asks the run to stop; it calls Done("interrupted") when it has (a hung one never does).
  virtual void Interrupt() = 0;
  // Stops at once (kills a process group); no more host calls afterwards.
  virtual void Kill() = 0;
  virtual void InputResolved(const std::string& input_id, bool cancelled,
                             const std::map<std::string, std::vector<std::string>>& answers) = 0;
};

// What a provider needs besides its spec.
struct ProviderOptions {
  // The agent program of agent providers (claude-code): a path, or a name looked up on PATH. Empty:
  // the provider's default ("claude").
  std::string agent_bin;
  // Where the provider logs (the runtime's log). Called on the runtime's I/O thread only.
  std::function<void(LogLevel, const std::string&)> log;
};

class Provider {
 public:
  virtual ~Provider() = default;
  // "echo", "script:FILE", "command:CMD", "flood:N", "claude-code[:model=M,effort=E,permissions=skip|ask]".
  // Errors name the spec and what is wrong with it (for claude-code also a missing agent binary).
  static Result<std::shared_ptr<Provider>> Parse(const std::string& spec, const ProviderOptions& options = {});
  virtual std::string Kind() const = 0;  // for runtime.status agentType
  // What runtime.status says about the agent before it reports anything (model; extras such as effort).
  virtual void Describe(RuntimeStatus& status) const { status.model = Kind(); }
  virtual std::shared_ptr<TurnRun> NewRun(std::shared_ptr<TurnHost> host, TurnInput input) = 0;
  // The runtime stops (graceful) or crashes (a simulated restart): whatever the provider keeps between
  // turns goes, on the I/O thread, while it still runs. No turn is active (the run was killed first).
  virtual void Stop(bool graceful) { (void)graceful; }
};

// The claude-code provider (claude_provider.cpp): `options` is what follows "claude-code:" in the spec.
Result<std::shared_ptr<Provider>> NewClaudeProvider(std::string_view options, const ProviderOptions& provider_options);

// A `!` command turn as the real runtime runs it: `/bin/sh -lc COMMAND` in its own process group,
// stdout and stderr merged into one `<turn>-shell` tool (tool.started, tool.delta per chunk read,
// tool.completed with the whole output bounded to 512 KiB); a non-zero exit fails the tool, not the
// turn; an interrupt kills the process group.
std::shared_ptr<TurnRun> NewShellRun(std::shared_ptr<TurnHost> host, TurnInput input, std::string command);
// The same turn when shell commands are disabled: a failed tool event saying so, and a failed turn.
std::shared_ptr<TurnRun> NewDisabledShellRun(std::shared_ptr<TurnHost> host, TurnInput input, std::string command);

// Starts argv[0] (a path) in a new process group with the given stdin/stdout/stderr, environment,
// default signal dispositions and nothing blocked, in `cwd` (empty: ours). Returns its pid.
Result<int> SpawnInGroup(const std::vector<std::string>& argv, int in, int out, int err,
                         const std::vector<std::string>& env, const std::string& cwd = {});

// The text a shell turn records when shell commands are disabled.
inline constexpr std::string_view kShellDisabledText =
    "shell commands are disabled: start the runtime with --allow-shell to run them";

}  // namespace sessionturn::runtime
