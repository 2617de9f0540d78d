// The commands of `sessionturn`, one file each (cmd_*.cpp). Each registers its CLI11 subcommand
// (options bound to the shared Args), checks what CLI11 cannot once the line is parsed (throwing
// UsageError), and runs, returning the exit code.
#pragma once

#include <CLI/CLI.hpp>

#include "args.hpp"

namespace sessionturn_cli {

CLI::App* AddTurn(CLI::App& app, Args& args);
void CheckTurn(Args& args);
int RunTurn(const Args& args);

CLI::App* AddWatch(CLI::App& app, Args& args);
int RunWatch(const Args& args);

CLI::App* AddInterrupt(CLI::App& app, Args& args);
int RunInterrupt(const Args& args);

// `sessions` and its actions (list, get, suspend, resume, delete): args.sessions_action names the one given.
CLI::App* AddSessions(CLI::App& app, Args& args);
void CheckSessions(Args& args);
int RunSessions(const Args& args);

CLI::App* AddWait(CLI::App& app, Args& args);
void CheckWait(Args& args);
int RunWait(const Args& args);

}  // namespace sessionturn_cli
