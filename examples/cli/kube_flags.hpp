// The Kubernetes side of the CLI: the kubeconfig from the flags, and waiting for a Kelos Session
// with progress on the terminal. Kept apart so that moving the commands onto a KubernetesBackend
// (backend.hpp) touches this file and backend_flags.cpp only.
#pragma once

#include <string>

#include <sessionturn/kube.hpp>
#include <sessionturn/sessions.hpp>

#include "args.hpp"

namespace sessionturn_cli {

// The kubeconfig the flags name. One that cannot be used is the user's to fix, like a usage error:
// throws ExitWith{kExitUsage} with the loader's message (it names the file, the context, the field).
sessionturn::KubeConfig LoadKube(const Args& args);

struct WaitedSession {
  sessionturn::KubeConfig kube;
  std::string namespace_name;
  sessionturn::ReadySession ready;
};

// SessionClient::WaitReady with progress: a live status line when stderr is a terminal, else one
// plain line per change of what is awaited (nothing at all when the Session is ready at once).
// Throws ExitWith for every outcome but ready.
WaitedSession WaitForKubeSession(const Args& args, const std::string& name);

// `sessionturn sessions ACTION` on a cluster (kube_sessions.cpp).
int RunKubeSessions(const Args& args);

}  // namespace sessionturn_cli
