// Where the Sessions of `--session`, `sessions` and `wait` live, from the flags: the one place that
// makes a SessionBackend. Today --local goes through the LocalBackend and the Kubernetes flags keep
// SessionClient (kube_flags.cpp, kube_sessions.cpp); once KubernetesBackend exists, MakeBackend makes
// it for the Kubernetes flags, UsesBackend is always true, and the kube_* files go.
#pragma once

#include <memory>
#include <string>

#include <sessionturn/backend.hpp>
#include <sessionturn/context.hpp>

#include "args.hpp"

namespace sessionturn_cli {

// True when the command's Sessions go through MakeBackend.
bool UsesBackend(const Args& args);

// The backend the flags name. Throws ExitWith: kExitUsage for flags it cannot use (a runtime program
// that is not executable), kExitUnreachable for a state root it cannot create.
std::unique_ptr<sessionturn::SessionBackend> MakeBackend(sessionturn::Context& context, const Args& args);

// The Session `name` as it is now. Throws ExitWith (SessionExitCode) when the backend cannot say;
// a Session that does not exist says how to create one.
sessionturn::SessionInfo GetSession(sessionturn::SessionBackend& backend, const Args& args, const std::string& name);

// SessionBackend::WaitReady with progress: a live status line when stderr is a terminal, else one
// plain line per change of what is awaited (nothing when it is ready at once or only has to be
// started). Ctrl-C cancels the wait. Throws ExitWith for every outcome but ready.
sessionturn::ReadyTarget WaitForBackendSession(sessionturn::SessionBackend& backend, const Args& args,
                                               const std::string& name);

}  // namespace sessionturn_cli
