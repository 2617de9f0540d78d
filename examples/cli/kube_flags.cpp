// The kubeconfig from the flags (kube_flags.hpp).
#include "kube_flags.hpp"

#include "output.hpp"

namespace sessionturn_cli {

st::KubeConfig LoadKube(const Args& args) {
  st::KubeConfigOptions options;
  options.kubeconfig = args.kubeconfig;
  options.context = args.kube_context;
  options.namespace_name = args.namespace_name;
  auto kube = st::KubeConfig::Load(options);
  if (!kube) throw ExitWith{kExitUsage, kube.error().ToString()};
  return std::move(*kube);
}

}  // namespace sessionturn_cli
