// Test support: starts tests/fakes/kube_apiserver.py in a fresh temp dir, waits until it listens,
// writes kubeconfigs for it, talks to its /_fake/ control endpoints, and stops it at scope exit.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sessionturn/kube.hpp"

extern char** environ;

namespace sessionturn::testing_kube {

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/st-kube-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name, const std::string& content) const {
    std::string p = path_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  std::string path_;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command line, returns {exit code, stdout+stderr}.
inline std::pair<int, std::string> Shell(const std::string& command) {
  std::string full = command + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The fake API server, running for the lifetime of this object.
class FakeKube {
 public:
  static constexpr const char* kToken = "test-token";
  // The server generates its CA and certificates with openssl and starts a Python interpreter:
  // generous on a loaded machine.
  static constexpr std::chrono::seconds kStartTimeout{60};

  explicit FakeKube(double ready_delay = 0.3) {
    std::string script = std::string(SESSIONTURN_SOURCE_DIR) + "/tests/fakes/kube_apiserver.py";
    std::string delay = std::to_string(ready_delay);
    std::vector<std::string> args = {SESSIONTURN_PYTHON, script, "--dir", dir_.path() + "/server",
                                     "--token", kToken, "--ready-delay", delay};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    std::string log = dir_.path() + "/server.log";
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    int rc = posix_spawn(&pid_, SESSIONTURN_PYTHON, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start the fake API server");
    auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    std::string ready = dir_.path() + "/server/ready.json";
    while (!std::filesystem::exists(ready)) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("the fake API server exited: " + Slurp(log));
      }
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("the fake API server did not start");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    port_ = nlohmann::json::parse(Slurp(ready))["port"].get<int>();
    ca_pem_ = Slurp(CaPath());
  }

  ~FakeKube() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  FakeKube(const FakeKube&) = delete;
  FakeKube& operator=(const FakeKube&) = delete;

  int port() const { return port_; }
  std::string Server() const { return "https://127.0.0.1:" + std::to_string(port_); }
  std::string CaPath() const { return dir_.path() + "/server/ca.crt"; }
  std::string ClientCertPath() const { return dir_.path() + "/server/client.crt"; }
  std::string ClientKeyPath() const { return dir_.path() + "/server/client.key"; }
  const std::string& CaPem() const { return ca_pem_; }
  const TempDir& dir() const { return dir_; }
  std::string Log() const { return Slurp(dir_.path() + "/server.log"); }

  KubeConfig Config(std::string token = kToken) const {
    KubeTls tls;
    tls.ca_pem = ca_pem_;
    return KubeConfig::FromParts(Server(), tls, std::move(token), "default");
  }

  // A kubeconfig file with a bearer token (and the CA by path); returns its path.
  std::string WriteKubeconfig(const std::string& name = "kubeconfig", const std::string& token = kToken) const {
    std::string text = "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: " + Server() +
                       "\n    certificate-authority: " + CaPath() +
                       "\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: u\n    namespace: default\n"
                       "current-context: fake\nusers:\n- name: u\n  user:\n    token: " + token + "\n";
    return dir_.File(name, text);
  }

  // POST /_fake/<path> with a JSON body; throws on failure (tests want loud setup errors).
  nlohmann::json Control(const std::string& path, const nlohmann::json& body = nlohmann::json::object()) {
    KubeClientOptions o;
    o.max_attempts = 1;
    KubeClient c(Config(), o);
    auto r = path == "log" ? c.Get("/_fake/log") : c.Post("/_fake/" + path, body);
    if (!r) throw std::runtime_error("fake control " + path + ": " + r.error().ToString());
    return *r;
  }
  nlohmann::json RequestLog() { return Control("log"); }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string ca_pem_;
};

}  // namespace sessionturn::testing_kube
