// KubeConfig: kubeconfig files (merged as kubectl merges them), the in-cluster service account,
// static tokens, token files that rotate, and exec credential plugins.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#ifdef SESSIONTURN_HAVE_YAML_CPP
#include <yaml-cpp/yaml.h>
#endif

#include "kube/kube_util.hpp"
#include "kube/kubeconfig_impl.hpp"
#include "sessionturn/kube.hpp"
#include "ws/websocket_tls.hpp"

namespace sessionturn {

using nlohmann::json;
using namespace kube_internal;
namespace fs = std::filesystem;



namespace {


#ifdef SESSIONTURN_HAVE_YAML_CPP
json NodeToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = NodeToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(NodeToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar:
      // Scalars stay strings; fields that are booleans are interpreted where they are read.
      return node.as<std::string>();
    default:
      return nullptr;
  }
}
#endif

Result<json> ParseKubeconfigText(const std::string& text, const std::string& path) {
#ifdef SESSIONTURN_HAVE_YAML_CPP
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return json::object();
    if (!root.IsMap()) return Fail(Errc::invalid_argument, "kubeconfig " + path + ": the document is not a mapping");
    return NodeToJson(root);
  } catch (const std::exception& e) {
    return Fail(Errc::invalid_argument, "kubeconfig " + path + ": invalid YAML: " + e.what());
  }
#else
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Fail(Errc::invalid_argument, "kubeconfig " + path + ": not JSON (built without yaml-cpp)");
  }
  return j;
#endif
}

bool Truthy(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    auto s = v.get<std::string>();
    return s == "true" || s == "True" || s == "TRUE" || s == "yes" || s == "on";
  }
  return false;
}

// One named entry (cluster, user, context) and the file it came from.
struct Entry {
  json value;
  std::string file;
};

struct Merged {
  std::map<std::string, Entry> clusters, users, contexts;
  std::string current_context;
  std::string current_context_file;
  std::vector<std::string> files;
};

std::string FileList(const Merged& m) {
  std::string out;
  for (const auto& f : m.files) out += (out.empty() ? "" : ":") + f;
  return out;
}

Status MergeFile(Merged& m, const std::string& path) {
  auto text = ReadFile(path);
  if (!text) return Fail(Errc::io_error, "kubeconfig: " + text.error().message);
  auto doc = ParseKubeconfigText(*text, path);
  if (!doc) return Fail(doc.error());
  m.files.push_back(path);
  auto merge_list = [&](const char* key, const char* inner, std::map<std::string, Entry>& into) -> Status {
    auto it = doc->find(key);
    if (it == doc->end() || it->is_null()) return {};
    if (!it->is_array()) return Fail(Errc::invalid_argument, "kubeconfig " + path + ": \"" + key + "\" is not a list");
    for (const auto& item : *it) {
      if (!item.is_object()) continue;
      std::string name = Str(item, "name");
      if (name.empty()) return Fail(Errc::invalid_argument, "kubeconfig " + path + ": an entry of \"" + key + "\" has no name");
      // kubectl's rule: the first file that defines a name wins.
      if (into.count(name) != 0) continue;
      json value = item.contains(inner) && item[inner].is_object() ? item[inner] : json::object();
      into.emplace(name, Entry{value, path});
    }
    return {};
  };
  if (auto s = merge_list("clusters", "cluster", m.clusters); !s) return s;
  if (auto s = merge_list("users", "user", m.users); !s) return s;
  if (auto s = merge_list("contexts", "context", m.contexts); !s) return s;
  std::string cc = Str(*doc, "current-context");
  if (m.current_context.empty() && !cc.empty()) {
    m.current_context = cc;
    m.current_context_file = path;
  }
  return {};
}

std::string Resolve(const std::string& path, const std::string& kubeconfig_file) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(kubeconfig_file).parent_path() / path).lexically_normal().string();
}

// Reads `<field>-data` (base64) or `<field>` (a file), the data winning as in kubectl.
Result<std::string> Material(const json& obj, const std::string& field, const std::string& file,
                             const std::string& where) {
  std::string data = Str(obj, (field + "-data").c_str());
  if (!data.empty()) {
    auto decoded = Base64Decode(data);
    if (!decoded) {
      return Fail(Errc::invalid_argument, "kubeconfig " + file + ", " + where + ": field " + field +
                                              "-data: " + decoded.error().message);
    }
    return *decoded;
  }
  std::string path = Str(obj, field.c_str());
  if (path.empty()) return std::string();
  auto content = ReadFile(Resolve(path, file));
  if (!content) {
    return Fail(Errc::io_error, "kubeconfig " + file + ", " + where + ": field " + field + ": " +
                                    content.error().message);
  }
  return *content;
}

Status RequirePem(const std::string& pem, const std::string& what) {
  if (!pem.empty() && pem.find("-----BEGIN") == std::string::npos) {
    return Fail(Errc::invalid_argument, what + " is not PEM data (no -----BEGIN line)");
  }
  return {};
}

std::vector<std::string> SplitPaths(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Result<std::shared_ptr<KubeConfig::Impl>> FromKubeconfig(const std::vector<std::string>& paths,
                                                          const KubeConfigOptions& options) {
  Merged m;
  for (const auto& p : paths) {
    if (auto s = MergeFile(m, p); !s) return Fail(s.error());
  }
  auto impl = std::make_shared<KubeConfig::Impl>();
  std::string files = FileList(m);
  std::string ctx_name = options.context.empty() ? m.current_context : options.context;
  if (ctx_name.empty()) {
    return Fail(Errc::invalid_argument, "kubeconfig " + files + ": no current-context is set and no context was given");
  }
  auto ctx_it = m.contexts.find(ctx_name);
  if (ctx_it == m.contexts.end()) {
    return Fail(Errc::not_found, "kubeconfig " + files + ": context \"" + ctx_name + "\" is not defined");
  }
  const json& ctx = ctx_it->second.value;
  std::string where_ctx = "context \"" + ctx_name + "\"";
  std::string cluster_name = Str(ctx, "cluster");
  auto cl_it = m.clusters.find(cluster_name);
  if (cluster_name.empty() || cl_it == m.clusters.end()) {
    return Fail(Errc::not_found, "kubeconfig " + ctx_it->second.file + ", " + where_ctx + ": field cluster: cluster \"" +
                                     cluster_name + "\" is not defined");
  }
  const json& cluster = cl_it->second.value;
  const std::string& cluster_file = cl_it->second.file;
  std::string where_cl = where_ctx + ", cluster \"" + cluster_name + "\"";
  impl->context_name = ctx_name;
  impl->server = Str(cluster, "server");
  while (!impl->server.empty() && impl->server.back() == '/') impl->server.pop_back();
  if (impl->server.empty()) {
    return Fail(Errc::invalid_argument, "kubeconfig " + cluster_file + ", " + where_cl + ": field server is empty");
  }
  if (impl->server.rfind("https://", 0) != 0 && impl->server.rfind("http://", 0) != 0) {
    return Fail(Errc::invalid_argument, "kubeconfig " + cluster_file + ", " + where_cl + ": field server \"" +
                                            impl->server + "\" is not an http(s) URL");
  }
  auto ca = Material(cluster, "certificate-authority", cluster_file, where_cl);
  if (!ca) return Fail(ca.error());
  impl->tls.ca_pem = *ca;
  if (auto s = RequirePem(impl->tls.ca_pem, "kubeconfig " + cluster_file + ", " + where_cl + ": field certificate-authority");
      !s) {
    return Fail(s.error());
  }
  impl->tls.insecure_skip_verify = Truthy(cluster.value("insecure-skip-tls-verify", json(false)));
  impl->tls.server_name = Str(cluster, "tls-server-name");
  impl->proxy_url = Str(cluster, "proxy-url");

  std::string user_name = Str(ctx, "user");
  if (!user_name.empty()) {
    auto us_it = m.users.find(user_name);
    if (us_it == m.users.end()) {
      return Fail(Errc::not_found, "kubeconfig " + ctx_it->second.file + ", " + where_ctx + ": field user: user \"" +
                                       user_name + "\" is not defined");
    }
    const json& user = us_it->second.value;
    const std::string& user_file = us_it->second.file;
    std::string where_us = where_ctx + ", user \"" + user_name + "\"";
    auto cert = Material(user, "client-certificate", user_file, where_us);
    if (!cert) return Fail(cert.error());
    auto key = Material(user, "client-key", user_file, where_us);
    if (!key) return Fail(key.error());
    if (cert->empty() != key->empty()) {
      return Fail(Errc::invalid_argument, "kubeconfig " + user_file + ", " + where_us +
                                              ": client-certificate and client-key must be given together");
    }
    impl->tls.client_cert_pem = *cert;
    impl->tls.client_key_pem = *key;
    if (!cert->empty()) impl->auth = KubeAuthKind::client_certificate;
    impl->static_token = Str(user, "token");
    if (!impl->static_token.empty()) impl->auth = KubeAuthKind::token;
    std::string token_file = Str(user, "tokenFile");
    if (impl->static_token.empty() && !token_file.empty()) {
      impl->token_file = Resolve(token_file, user_file);
      impl->auth = KubeAuthKind::token_file;
      auto t = impl->ReadTokenFile();
      if (!t) {
        return Fail(Errc::io_error, "kubeconfig " + user_file + ", " + where_us + ": field tokenFile: " + t.error().message);
      }
    }
    if (user.contains("exec") && user["exec"].is_object() && impl->static_token.empty() && impl->token_file.empty()) {
      const json& e = user["exec"];
      ExecSpec spec;
      spec.where = "kubeconfig " + user_file + ", " + where_us;
      spec.api_version = Str(e, "apiVersion");
      if (spec.api_version != "client.authentication.k8s.io/v1" &&
          spec.api_version != "client.authentication.k8s.io/v1beta1") {
        return Fail(Errc::invalid_argument, spec.where + ": field exec.apiVersion: \"" + spec.api_version +
                                                "\" is not supported (client.authentication.k8s.io/v1 or v1beta1)");
      }
      spec.command = Str(e, "command");
      if (spec.command.empty()) return Fail(Errc::invalid_argument, spec.where + ": field exec.command is empty");
      // kubectl resolves a command with a path separator against the kubeconfig's directory.
      if (spec.command.find('/') != std::string::npos) spec.command = Resolve(spec.command, user_file);
      if (e.contains("args") && e["args"].is_array()) {
        for (const auto& a : e["args"]) spec.args.push_back(a.is_string() ? a.get<std::string>() : a.dump());
      }
      if (e.contains("env") && e["env"].is_array()) {
        for (const auto& kv : e["env"]) {
          if (kv.is_object()) spec.env.emplace_back(Str(kv, "name"), Str(kv, "value"));
        }
      }
      spec.interactive_mode = Str(e, "interactiveMode");
      if (spec.interactive_mode.empty()) {
        // v1 requires the field; v1beta1 defaults to IfAvailable.
        if (spec.api_version == "client.authentication.k8s.io/v1") {
          return Fail(Errc::invalid_argument, spec.where + ": field exec.interactiveMode is required for v1");
        }
        spec.interactive_mode = "IfAvailable";
      }
      if (spec.interactive_mode != "Never" && spec.interactive_mode != "IfAvailable" &&
          spec.interactive_mode != "Always") {
        return Fail(Errc::invalid_argument, spec.where + ": field exec.interactiveMode: \"" + spec.interactive_mode +
                                                "\" is not Never, IfAvailable or Always");
      }
      if (spec.interactive_mode == "Always") {
        // A library has no terminal to give the plugin; kubectl refuses the same way without one.
        return Fail(Errc::invalid_argument, spec.where +
                                                ": field exec.interactiveMode is Always, but sessionturn never has a "
                                                "terminal for the plugin; use a non-interactive credential");
      }
      spec.provide_cluster_info = Truthy(e.value("provideClusterInfo", json(false)));
      impl->exec = std::move(spec);
      impl->auth = KubeAuthKind::exec_plugin;
    }
  }
  std::string ns = options.namespace_name.empty() ? Str(ctx, "namespace") : options.namespace_name;
  impl->namespace_name = ns.empty() ? "default" : ns;
  impl->describe = "kubeconfig " + files + ", context " + ctx_name;
  return impl;
}

Result<std::shared_ptr<KubeConfig::Impl>> FromInCluster(const KubeConfigOptions& options) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return Fail(Errc::not_found,
                "no Kubernetes configuration: KUBECONFIG is unset, ~/.kube/config does not exist, and this is not a "
                "Pod (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are unset)");
  }
  auto impl = std::make_shared<KubeConfig::Impl>();
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  impl->server = "https://" + h + ":" + port;
  const std::string& dir = options.service_account_dir;
  auto ca = ReadFile(dir + "/ca.crt");
  if (!ca) return Fail(Errc::io_error, "in-cluster configuration: CA certificate: " + ca.error().message);
  impl->tls.ca_pem = *ca;
  impl->token_file = dir + "/token";
  impl->auth = KubeAuthKind::token_file;
  if (auto t = impl->ReadTokenFile(); !t) {
    return Fail(Errc::io_error, "in-cluster configuration: service account token: " + t.error().message);
  }
  std::string ns = options.namespace_name;
  if (ns.empty()) {
    auto file_ns = ReadFile(dir + "/namespace");
    if (file_ns) ns = *file_ns;
    while (!ns.empty() && (ns.back() == '\n' || ns.back() == ' ')) ns.pop_back();
  }
  impl->namespace_name = ns.empty() ? "default" : ns;
  impl->describe = "in-cluster service account (" + dir + ")";
  return impl;
}

}  // namespace

KubeConfig::KubeConfig(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<KubeConfig> KubeConfig::Load(const KubeConfigOptions& options) {
  try {
    std::vector<std::string> paths;
    if (!options.kubeconfig.empty()) {
      paths = SplitPaths(options.kubeconfig);
      for (const auto& p : paths) {
        if (!fs::exists(p)) return Fail(Errc::not_found, "kubeconfig " + p + " does not exist");
      }
    } else {
      const char* env = std::getenv("KUBECONFIG");
      if (env != nullptr && *env != '\0') {
        // As kubectl: files of the list that do not exist are skipped.
        for (const auto& p : SplitPaths(env)) {
          if (fs::exists(p)) paths.push_back(p);
        }
      }
      if (paths.empty()) {
        std::string home = options.home;
        if (home.empty()) {
          const char* h = std::getenv("HOME");
          home = h != nullptr ? h : "";
        }
        if (!home.empty() && fs::exists(home + "/.kube/config")) paths.push_back(home + "/.kube/config");
      }
    }
    Result<std::shared_ptr<Impl>> impl = paths.empty() ? (options.allow_in_cluster
                                                              ? FromInCluster(options)
                                                              : Result<std::shared_ptr<Impl>>(Fail(
                                                                    Errc::not_found,
                                                                    "no kubeconfig found (KUBECONFIG unset, no ~/.kube/config)")))
                                                       : FromKubeconfig(paths, options);
    if (!impl) return Fail(impl.error());
    return KubeConfig(std::move(*impl));
  } catch (const std::exception& e) {
    return Fail(Errc::internal, std::string("loading the Kubernetes configuration: ") + e.what());
  }
}

KubeConfig KubeConfig::FromParts(std::string server, KubeTls tls, std::string token, std::string namespace_name) {
  auto impl = std::make_shared<Impl>();
  while (!server.empty() && server.back() == '/') server.pop_back();
  impl->server = std::move(server);
  impl->tls = std::move(tls);
  impl->static_token = std::move(token);
  impl->namespace_name = namespace_name.empty() ? "default" : std::move(namespace_name);
  impl->auth = !impl->static_token.empty()          ? KubeAuthKind::token
               : !impl->tls.client_cert_pem.empty() ? KubeAuthKind::client_certificate
                                                    : KubeAuthKind::none;
  impl->describe = "configuration for " + impl->server;
  return KubeConfig(std::move(impl));
}

const std::string& KubeConfig::Server() const noexcept { return impl_->server; }
const std::string& KubeConfig::Namespace() const noexcept { return impl_->namespace_name; }
const std::string& KubeConfig::ContextName() const noexcept { return impl_->context_name; }
const std::string& KubeConfig::ProxyUrl() const noexcept { return impl_->proxy_url; }
const KubeTls& KubeConfig::Tls() const noexcept { return impl_->tls; }
KubeAuthKind KubeConfig::AuthKind() const noexcept { return impl_->auth; }
std::shared_ptr<ws::TlsContextCache> KubeConfig::ExecTlsContexts() const { return impl_->exec_tls_contexts; }
std::string KubeConfig::Describe() const { return impl_->describe; }

}  // namespace sessionturn
