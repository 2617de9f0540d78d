// Where the Sessions of `--session`, `wait`, `interrupt` and `sessions` live, from the flags: the one
// place that makes a SessionBackend (--local: the LocalBackend; else the KubernetesBackend of the
// kubeconfig flags). `sessions` on a cluster reads the objects themselves (kube_sessions.cpp): its
// tables and --json are the cluster's own fields, as kubectl shows them.
#pragma once

#include <memory>
#include <string>

#include <sessionturn/backend.hpp>
#include <sessionturn/context.hpp>

#include "args.hpp"

namespace sessionturn_cli {

// The backend the flags name. Throws ExitWith: kExitUsage for flags it cannot use (a runtime program
// that is not executable, a kubeconfig that cannot be loaded), kExitUnreachable for a state root it
// cannot create.
std::unique_ptr<sessionturn::SessionBackend> MakeBackend(sessionturn::Context& context, const Args& args);

// The Session `name` as it is now. Throws ExitWith (SessionExitCode) when the backend cannot say;
// a Session that does not exist says how to create one.
sessionturn::SessionInfo GetSession(sessionturn::SessionBackend& backend, const Args& args, const std::string& name);

// SessionBackend::WaitReady with progress: a live status line when stderr is a terminal, else one
// plain line per change of what is awaited (nothing when it is ready at once or only has to be
// started). Ctrl-C cancels the wait. Throws ExitWith for every outcome but ready (on a cluster, a
// Session that did not appear before the deadline exits as a timeout).
sessionturn::ReadyTarget WaitForBackendSession(sessionturn::SessionBackend& backend, const Args& args,
                                               const std::string& name);

}  // namespace sessionturn_cli
