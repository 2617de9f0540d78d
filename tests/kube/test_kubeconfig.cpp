// KubeConfig::Load: merging, relative paths, data vs files, errors, in-cluster, exec plugins.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <thread>

#include "kube/kube_util.hpp"
#include "kube_support.hpp"
#include "sessionturn/kube.hpp"

using namespace sessionturn;
using sessionturn::testing_kube::Slurp;
using sessionturn::testing_kube::TempDir;

namespace {

// Sets (or unsets) an environment variable for one scope. Tests in this binary run sequentially.
class EnvGuard {
 public:
  EnvGuard(const char* name, std::optional<std::string> value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvGuard() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

const char* kPem = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

std::string Kubeconfig(const std::string& clusters, const std::string& users, const std::string& contexts,
                       const std::string& current) {
  return "apiVersion: v1\nkind: Config\nclusters:\n" + clusters + "users:\n" + users + "contexts:\n" + contexts +
         (current.empty() ? "" : "current-context: " + current + "\n");
}

KubeConfigOptions Opts(const std::string& path) {
  KubeConfigOptions o;
  o.kubeconfig = path;
  o.allow_in_cluster = false;
  return o;
}

}  // namespace

TEST_CASE("kubeconfig: KUBECONFIG files merge with kubectl's precedence", "[kube][kubeconfig]") {
  TempDir dir;
  std::string a = dir.File("a.yaml", Kubeconfig("- name: c1\n  cluster:\n    server: https://first.example:6443\n",
                                                "- name: u1\n  user:\n    token: tok-first\n",
                                                "- name: ctx1\n  context: {cluster: c1, user: u1, namespace: ns1}\n",
                                                "ctx1"));
  std::string b = dir.File("b.yaml", Kubeconfig("- name: c1\n  cluster:\n    server: https://second.example\n"
                                                "- name: c2\n  cluster:\n    server: https://c2.example/\n",
                                                "- name: u1\n  user:\n    token: tok-second\n"
                                                "- name: u2\n  user:\n    token: tok-u2\n",
                                                "- name: ctx2\n  context: {cluster: c2, user: u2}\n"
                                                "- name: ctx3\n  context: {cluster: c1, user: u1}\n",
                                                "ctx2"));
  EnvGuard env("KUBECONFIG", a + ":" + dir.path() + "/missing.yaml:" + b);
  KubeConfigOptions o;
  o.allow_in_cluster = false;
  auto cfg = KubeConfig::Load(o);
  REQUIRE(cfg);
  CHECK(cfg->ContextName() == "ctx1");  // current-context from the first file that sets it
  CHECK(cfg->Server() == "https://first.example:6443");
  CHECK(cfg->Namespace() == "ns1");
  CHECK(*cfg->BearerToken() == "tok-first");
  CHECK(cfg->AuthKind() == KubeAuthKind::token);

  o.context = "ctx3";  // defined only in b, but c1 and u1 come from a (first file wins per name)
  auto c3 = KubeConfig::Load(o);
  REQUIRE(c3);
  CHECK(c3->Server() == "https://first.example:6443");
  CHECK(*c3->BearerToken() == "tok-first");
  CHECK(c3->Namespace() == "default");

  o.context = "ctx2";
  o.namespace_name = "override";
  auto c2 = KubeConfig::Load(o);
  REQUIRE(c2);
  CHECK(c2->Server() == "https://c2.example");  // trailing slash dropped
  CHECK(c2->Namespace() == "override");
  CHECK(*c2->BearerToken() == "tok-u2");
}

TEST_CASE("kubeconfig: relative paths resolve against the file's directory and data wins over files",
          "[kube][kubeconfig]") {
  TempDir dir;
  dir.File("conf/certs/ca.pem", kPem);
  dir.File("conf/certs/client.crt", "-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n");
  dir.File("conf/certs/client.key", "-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n");
  dir.File("conf/token.txt", "file-token\n");
  std::string path = dir.File(
      "conf/config",
      Kubeconfig("- name: c\n  cluster:\n    server: https://k.example\n    certificate-authority: certs/ca.pem\n"
                 "    tls-server-name: kube.internal\n    proxy-url: http://proxy.example:3128\n"
                 "- name: d\n  cluster:\n    server: https://d.example\n    certificate-authority: certs/missing.pem\n"
                 "    certificate-authority-data: " +
                     kube_internal::Base64Encode("-----BEGIN CERTIFICATE-----\ndata\n-----END CERTIFICATE-----\n") +
                     "\n    insecure-skip-tls-verify: true\n",
                 "- name: certs\n  user:\n    client-certificate: certs/client.crt\n    client-key: certs/client.key\n"
                 "- name: tf\n  user:\n    tokenFile: token.txt\n",
                 "- name: a\n  context: {cluster: c, user: certs}\n- name: b\n  context: {cluster: d, user: tf}\n",
                 "a"));
  auto cfg = KubeConfig::Load(Opts(path));
  REQUIRE(cfg);
  CHECK(cfg->Tls().ca_pem == kPem);
  CHECK(cfg->Tls().client_cert_pem.find("client") != std::string::npos);
  CHECK(cfg->Tls().client_key_pem.find("PRIVATE KEY") != std::string::npos);
  CHECK(cfg->Tls().server_name == "kube.internal");
  CHECK_FALSE(cfg->Tls().insecure_skip_verify);
  CHECK(cfg->ProxyUrl() == "http://proxy.example:3128");
  CHECK(cfg->AuthKind() == KubeAuthKind::client_certificate);
  CHECK(cfg->BearerToken()->empty());

  auto o = Opts(path);
  o.context = "b";
  auto b = KubeConfig::Load(o);
  REQUIRE(b);  // the data field wins, so the missing file is never read
  CHECK(b->Tls().ca_pem.find("data") != std::string::npos);
  CHECK(b->Tls().insecure_skip_verify);
  CHECK(*b->BearerToken() == "file-token");

  // The token file rotates: the next call sees the new token.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  dir.File("conf/token.txt", "rotated-token-longer\n");
  CHECK(*b->BearerToken() == "rotated-token-longer");
}

TEST_CASE("kubeconfig: errors name the file, the context and the field", "[kube][kubeconfig]") {
  TempDir dir;
  std::string path = dir.File(
      "config",
      Kubeconfig("- name: badb64\n  cluster:\n    server: https://x\n    certificate-authority-data: '@@not base64@@'\n"
                 "- name: noca\n  cluster:\n    server: https://x\n    certificate-authority: /nonexistent/ca.crt\n"
                 "- name: ok\n  cluster:\n    server: https://x\n",
                 "- name: u\n  user:\n    token: t\n",
                 "- name: b64\n  context: {cluster: badb64, user: u}\n"
                 "- name: ca\n  context: {cluster: noca, user: u}\n"
                 "- name: ghost\n  context: {cluster: ok, user: ghost}\n"
                 "- name: nocluster\n  context: {cluster: nowhere, user: u}\n",
                 "missing-context"));
  auto load = [&](const std::string& ctx) {
    auto o = Opts(path);
    o.context = ctx;
    return KubeConfig::Load(o);
  };
  auto missing = load("");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);
  CHECK_THAT(missing.error().message, Catch::Contains(path) && Catch::Contains("context \"missing-context\""));

  auto b64 = load("b64");
  REQUIRE_FALSE(b64);
  CHECK(b64.error().code == Errc::invalid_argument);
  CHECK_THAT(b64.error().message, Catch::Contains(path) && Catch::Contains("context \"b64\"") &&
                                      Catch::Contains("certificate-authority-data") && Catch::Contains("base64"));

  auto ca = load("ca");
  REQUIRE_FALSE(ca);
  CHECK(ca.error().code == Errc::io_error);
  CHECK_THAT(ca.error().message, Catch::Contains("field certificate-authority") && Catch::Contains("/nonexistent/ca.crt"));

  auto ghost = load("ghost");
  REQUIRE_FALSE(ghost);
  CHECK_THAT(ghost.error().message, Catch::Contains("user \"ghost\" is not defined") && Catch::Contains(path));

  auto nocluster = load("nocluster");
  REQUIRE_FALSE(nocluster);
  CHECK_THAT(nocluster.error().message, Catch::Contains("cluster \"nowhere\""));

  auto bad_yaml = KubeConfig::Load(Opts(dir.File("broken", "clusters: [unclosed\n")));
  REQUIRE_FALSE(bad_yaml);
  CHECK_THAT(bad_yaml.error().message, Catch::Contains("broken") && Catch::Contains("YAML"));

  auto nofile = KubeConfig::Load(Opts(dir.path() + "/none"));
  REQUIRE_FALSE(nofile);
  CHECK(nofile.error().code == Errc::not_found);
}

TEST_CASE("kubeconfig: in-cluster service account with a temp root", "[kube][kubeconfig]") {
  TempDir dir;
  dir.File("sa/token", "sa-token-1\n");
  dir.File("sa/ca.crt", kPem);
  dir.File("sa/namespace", "team-a\n");
  EnvGuard kc("KUBECONFIG", std::nullopt);
  EnvGuard host("KUBERNETES_SERVICE_HOST", std::string("10.0.0.1"));
  EnvGuard port("KUBERNETES_SERVICE_PORT", std::string("443"));
  KubeConfigOptions o;
  o.home = dir.path();  // no .kube/config there
  o.service_account_dir = dir.path() + "/sa";
  auto cfg = KubeConfig::Load(o);
  REQUIRE(cfg);
  CHECK(cfg->Server() == "https://10.0.0.1:443");
  CHECK(cfg->Namespace() == "team-a");
  CHECK(cfg->Tls().ca_pem == kPem);
  CHECK(*cfg->BearerToken() == "sa-token-1");
  CHECK_THAT(cfg->Describe(), Catch::Contains("in-cluster"));
  // kubelet rotates the projected token in place.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  dir.File("sa/token", "sa-token-2-rotated\n");
  CHECK(*cfg->BearerToken() == "sa-token-2-rotated");

  {
    EnvGuard v6("KUBERNETES_SERVICE_HOST", std::string("fd00::1"));
    auto c6 = KubeConfig::Load(o);
    REQUIRE(c6);
    CHECK(c6->Server() == "https://[fd00::1]:443");
  }
  std::filesystem::remove(dir.path() + "/sa/ca.crt");
  auto noca = KubeConfig::Load(o);
  REQUIRE_FALSE(noca);
  CHECK_THAT(noca.error().message, Catch::Contains("in-cluster") && Catch::Contains("ca.crt"));

  EnvGuard nohost("KUBERNETES_SERVICE_HOST", std::nullopt);
  auto none = KubeConfig::Load(o);
  REQUIRE_FALSE(none);
  CHECK(none.error().code == Errc::not_found);
}

namespace {

// A plugin script: counts its runs in `dir/runs`, records KUBERNETES_EXEC_INFO and MY_VAR, and
// prints an ExecCredential whose token is "tok-<run>" and whose expiry is `expiry_cmd`'s output.
std::string WritePlugin(TempDir& dir, const std::string& api_version, const std::string& expiry_expr) {
  std::string script =
      "#!/bin/sh\n"
      "d=$(dirname \"$0\")\n"
      "n=$(cat \"$d/runs\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$d/runs\"\n"
      "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$d/info.json\"\n"
      "printf '%s %s' \"$MY_VAR\" \"$1\" > \"$d/env.txt\"\n"
      "exp=" + expiry_expr + "\n"
      "printf '{\"apiVersion\":\"" + api_version +
      "\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"tok-%s\"%s}}' $n \"$exp\"\n";
  std::string p = dir.File("bin/plugin.sh", script);
  ::chmod(p.c_str(), 0755);
  return p;
}

std::string ExecKubeconfig(TempDir& dir, const std::string& api_version, const std::string& mode,
                           const std::string& command = "./bin/plugin.sh") {
  return dir.File("config",
                  Kubeconfig("- name: c\n  cluster:\n    server: https://127.0.0.1:1\n",
                             "- name: u\n  user:\n    exec:\n      apiVersion: " + api_version + "\n      command: " +
                                 command + "\n      args: [first-arg]\n      env:\n      - name: MY_VAR\n        value: "
                                 "hello\n" +
                                 (mode.empty() ? "" : "      interactiveMode: " + mode + "\n") +
                                 "      provideClusterInfo: true\n",
                             "- name: x\n  context: {cluster: c, user: u}\n", "x"));
}

int Runs(TempDir& dir) { return std::atoi(Slurp(dir.path() + "/bin/runs").c_str()); }

}  // namespace

TEST_CASE("kubeconfig: exec plugin caches until expiry, re-runs after invalidation", "[kube][kubeconfig][exec]") {
  for (std::string api : {"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"}) {
    DYNAMIC_SECTION(api) {
      TempDir dir;
      WritePlugin(dir, api, "',\"expirationTimestamp\":\"'$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)'\"'");
      auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "Never")));
      REQUIRE(cfg);
      CHECK(cfg->AuthKind() == KubeAuthKind::exec_plugin);
      CHECK(Runs(dir) == 0);  // plugins run on first use, not at load
      CHECK(*cfg->BearerToken() == "tok-1");
      CHECK(*cfg->BearerToken() == "tok-1");  // cached: valid for an hour
      CHECK(Runs(dir) == 1);
      auto info = nlohmann::json::parse(Slurp(dir.path() + "/bin/info.json"));
      CHECK(info["kind"] == "ExecCredential");
      CHECK(info["apiVersion"] == api);
      CHECK(info["spec"]["interactive"] == false);
      CHECK(info["spec"]["cluster"]["server"] == "https://127.0.0.1:1");
      CHECK(Slurp(dir.path() + "/bin/env.txt") == "hello first-arg");
      CHECK(cfg->InvalidateToken());  // what a 401 does
      CHECK(*cfg->BearerToken() == "tok-2");
      CHECK(Runs(dir) == 2);
    }
  }
}

TEST_CASE("kubeconfig: exec plugin credentials near expiry are refreshed and expired ones are errors",
          "[kube][kubeconfig][exec]") {
  const std::string api = "client.authentication.k8s.io/v1";
  SECTION("expires within the refresh slack: every call runs the plugin") {
    TempDir dir;
    WritePlugin(dir, api, "',\"expirationTimestamp\":\"'$(date -u -d '+3 seconds' +%Y-%m-%dT%H:%M:%SZ)'\"'");
    auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "Never")));
    REQUIRE(cfg);
    CHECK(*cfg->BearerToken() == "tok-1");
    CHECK(*cfg->BearerToken() == "tok-2");
  }
  SECTION("no expiry: cached for good") {
    TempDir dir;
    WritePlugin(dir, api, "''");
    auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "IfAvailable")));
    REQUIRE(cfg);
    CHECK(*cfg->BearerToken() == "tok-1");
    CHECK(*cfg->BearerToken() == "tok-1");
  }
  SECTION("already expired") {
    TempDir dir;
    WritePlugin(dir, api, "',\"expirationTimestamp\":\"2001-01-01T00:00:00Z\"'");
    auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "Never")));
    REQUIRE(cfg);
    auto t = cfg->BearerToken();
    REQUIRE_FALSE(t);
    CHECK(t.error().code == Errc::unauthorized);
    CHECK_THAT(t.error().message, Catch::Contains("expired") && Catch::Contains("user \"u\""));
  }
}

TEST_CASE("kubeconfig: exec plugin failures and refusals", "[kube][kubeconfig][exec]") {
  const std::string api = "client.authentication.k8s.io/v1";
  SECTION("exit code and stderr tail") {
    TempDir dir;
    std::string p = dir.File("bin/plugin.sh",
                             "#!/bin/sh\necho 'lots of noise' >&2\necho 'error: login required for cluster' >&2\nexit 3\n");
    ::chmod(p.c_str(), 0755);
    auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "Never")));
    REQUIRE(cfg);
    auto t = cfg->BearerToken();
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().message, Catch::Contains("exited with code 3") &&
                                      Catch::Contains("error: login required for cluster") &&
                                      Catch::Contains(dir.path() + "/config"));
  }
  SECTION("interactiveMode Always is refused") {
    TempDir dir;
    auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "Always")));
    REQUIRE_FALSE(cfg);
    CHECK_THAT(cfg.error().message, Catch::Contains("interactiveMode") && Catch::Contains("Always"));
  }
  SECTION("v1 requires interactiveMode") {
    TempDir dir;
    auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "")));
    REQUIRE_FALSE(cfg);
    CHECK_THAT(cfg.error().message, Catch::Contains("interactiveMode"));
  }
  SECTION("a command that does not exist") {
    TempDir dir;
    auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "Never", "no-such-plugin-xyz")));
    REQUIRE(cfg);
    auto t = cfg->BearerToken();
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().message, Catch::Contains("no-such-plugin-xyz"));
  }
  SECTION("output that is not an ExecCredential") {
    TempDir dir;
    std::string p = dir.File("bin/plugin.sh", "#!/bin/sh\necho '{\"kind\":\"Other\"}'\n");
    ::chmod(p.c_str(), 0755);
    auto cfg = KubeConfig::Load(Opts(ExecKubeconfig(dir, api, "Never")));
    REQUIRE(cfg);
    auto t = cfg->BearerToken();
    REQUIRE_FALSE(t);
    CHECK(t.error().code == Errc::protocol_error);
  }
}

TEST_CASE("kube util: base64 and RFC 3339", "[kube][kubeconfig]") {
  using namespace kube_internal;
  CHECK(*Base64Decode("aGVsbG8=") == "hello");
  CHECK(*Base64Decode("aGVs\nbG8") == "hello");
  CHECK_FALSE(Base64Decode("aGVsbG8=x"));
  CHECK_FALSE(Base64Decode("a"));
  CHECK_FALSE(Base64Decode("a$bc"));
  CHECK(Base64Encode("hello") == "aGVsbG8=");
  CHECK(*ParseRfc3339("1970-01-01T00:01:00Z") == 60);
  CHECK(*ParseRfc3339("1970-01-01T01:00:00.123+01:00") == 0);
  CHECK_FALSE(ParseRfc3339("yesterday"));
  CHECK_FALSE(ParseRfc3339("1970-01-01T00:00:00"));
}
