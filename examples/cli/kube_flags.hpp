// The Kubernetes side of the CLI: the kubeconfig from the flags, and `sessions` on a cluster.
#pragma once

#include <sessionturn/kube.hpp>
#include <sessionturn/sessions.hpp>

#include "args.hpp"

namespace sessionturn_cli {

// The kubeconfig the flags name. One that cannot be used is the user's to fix, like a usage error:
// throws ExitWith{kExitUsage} with the loader's message (it names the file, the context, the field).
sessionturn::KubeConfig LoadKube(const Args& args);

// `sessionturn sessions ACTION` on a cluster (kube_sessions.cpp).
int RunKubeSessions(const Args& args);

}  // namespace sessionturn_cli
