// The KubeConfig side of KubeExecConnector, in its own file so that programs using the exec
// connector with a hand-made KubeExecEndpoint do not link the kubeconfig machinery.
#include "sessionturn/kube.hpp"
#include "sessionturn/kube_exec.hpp"

namespace sessionturn {

KubeExecConnector::KubeExecConnector(Context& context, const KubeConfig& kube, std::string namespace_name,
                                     std::string pod, std::string container, std::vector<std::string> command,
                                     ConnectionLimits limits)
    : KubeExecConnector(context, ExecEndpointFromConfig(kube), std::move(namespace_name), std::move(pod),
                        std::move(container), std::move(command), limits) {}

KubeExecEndpoint ExecEndpointFromConfig(const KubeConfig& kube) {
  KubeExecEndpoint endpoint;
  endpoint.server = kube.Server();
  endpoint.ca_pem = kube.Tls().ca_pem;
  endpoint.client_cert_pem = kube.Tls().client_cert_pem;
  endpoint.client_key_pem = kube.Tls().client_key_pem;
  endpoint.tls_server_name = kube.Tls().server_name;
  endpoint.insecure_skip_tls_verify = kube.Tls().insecure_skip_verify;
  endpoint.proxy_url = kube.ProxyUrl();
  // The configuration's: every connector made from it (one per Session) shares its TLS contexts.
  endpoint.tls_contexts = kube.ExecTlsContexts();
  endpoint.async_bearer_token = [kube](Context& context, std::function<void(Result<std::string>)> done) {
    kube.AsyncBearerToken(context, std::move(done));
  };
  endpoint.invalidate_token = [kube]() { return kube.InvalidateToken(); };
  return endpoint;
}

std::shared_ptr<Connector> MakeKubeExecConnector(Context& context, const KubeConfig& kube, std::string namespace_name,
                                                 std::string pod, std::string container,
                                                 std::vector<std::string> command, ConnectionLimits limits) {
  return std::make_shared<KubeExecConnector>(context, kube, std::move(namespace_name), std::move(pod),
                                             std::move(container), std::move(command), limits);
}

}  // namespace sessionturn
