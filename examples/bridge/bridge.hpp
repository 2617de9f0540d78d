// What sessionturn-telegram and sessionturn-slack share: the command line both take (flags, or a YAML
// file with the same keys), secrets from the environment or files, the backend and the Router's
// options from the flags, and the wait for SIGTERM/SIGINT. Exit statuses: 0 clean shutdown, 1 the
// platform or the backend failed while running, 2 bad configuration (the message names the flag or
// key), 3 the platform refused the token at start.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <sessionturn/backend.hpp>
#include <sessionturn/context.hpp>
#include <sessionturn/router.hpp>

namespace sessionturn_bridge {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitConfig = 2;
inline constexpr int kExitToken = 3;

// Thrown to end the program with `code`, after printing "<program>: <message>" on stderr.
struct ExitWith {
  int code;
  std::string message;
};

struct CommonFlags {
  std::string api_url;
  std::string backend = "local";
  std::string state_dir;
  std::string provider = "echo";
  std::string agent_bin;
  std::int64_t idle_suspend = 1800;
  std::string namespace_name, kubeconfig, kube_context, spawner, template_file;
  std::string session_prefix;  // empty: "chat" (names are chat-<platform>-<hash>)
  std::vector<std::string> allow_users, allow_chats, admins;
  std::string questions = "ask";
  std::int64_t answer_timeout = 600;
  std::int64_t turn_timeout = 3600;
  std::int64_t max_queued = 8;
  std::string listen;
  std::string log_level = "info";
  std::string mode;
  std::string runtime_program;  // hidden: the local runtime program (tests)
};

// Adds the shared flags and --config FILE (YAML: the long flags' names as keys; flags win).
void AddCommonFlags(CLI::App& app, CommonFlags& flags);

// Parses the command line. Throws ExitWith: kExitOk after --help, kExitConfig for anything unusable
// (naming the flag or the config key).
void Parse(CLI::App& app, int argc, char** argv);

// A secret from $env_name, else from the file `file` (one line; a trailing newline dropped), else
// nullopt. Throws ExitWith{kExitConfig} when the file cannot be read or is empty, naming `file_flag`.
std::optional<std::string> ReadSecret(const char* env_name, const std::string& file, const char* file_flag);

sessionturn::LogLevel LogLevelOf(const std::string& name);  // throws ExitWith{kExitConfig}

// "<state-dir>": the flag, or DefaultStateDir().
std::string StateDir(const CommonFlags& flags);

// The backend the flags name. Throws ExitWith{kExitConfig} for unusable flags.
std::unique_ptr<sessionturn::SessionBackend> MakeBackend(sessionturn::Context& context, const CommonFlags& flags);
// Where the backend is, for the ready line: "local (DIR)", "kubernetes (namespace NS)".
std::string DescribeBackend(const CommonFlags& flags);

// The Router's options: one route for `platform` with the allow-lists, the timeouts, the store under
// the state dir (router-<platform>-<bot id>.db).
sessionturn::RouterOptions MakeRouterOptions(const CommonFlags& flags, const std::string& platform,
                                             const std::string& bot_id, const std::string& bot_username);

// Prints the start-up warnings (anyone may talk when the allow-lists are empty).
void WarnOpenAccess(const char* program, const CommonFlags& flags);

// The Router for a bridge. Throws ExitWith: kExitConfig for unusable options, kExitRuntime for the
// store's errors (another bridge holds it, say).
std::unique_ptr<sessionturn::Router> MakeRouter(sessionturn::Context& context, sessionturn::SessionBackend& backend,
                                                sessionturn::ChatAdapter& adapter, sessionturn::RouterOptions options);

// The first fatal error an adapter reports while the bridge runs (its on_fatal), for the main thread.
class FatalError {
 public:
  std::function<void(sessionturn::Error)> Handler();
  bool Raised() const { return raised_.load(); }
  sessionturn::Error Get() const;

 private:
  std::atomic<bool> raised_{false};
  mutable std::mutex mu_;
  sessionturn::Error error_;
};

// Waits for SIGTERM/SIGINT or a fatal error; then `stop_inbound()`, the router's graceful shutdown,
// and the exit status: kExitOk after a signal, else `exit_for(error)` with the error's message thrown
// as ExitWith.
int RunUntilStopped(const char* program, sessionturn::Router& router, const FatalError& fatal,
                    const std::function<void()>& stop_inbound,
                    const std::function<int(const sessionturn::Error&)>& exit_for);

// SIGINT/SIGTERM: blocked in every thread (call BlockSignals before any thread starts); WaitForStop
// returns when one arrives (true) or when `stop_requested` returns true (false), checked every 100 ms.
void BlockSignals();
bool WaitForStop(const std::function<bool()>& stop_requested);

}  // namespace sessionturn_bridge
