// Test support: starts tests/fakes/http_server.py (HTTP, HTTPS and a silent port on 127.0.0.1) in a
// fresh temp dir, waits until it listens, and stops it at scope exit.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/kube_support.hpp"  // TempDir, Slurp
#include "sessionturn/http.hpp"

namespace sessionturn::testing_http {

using testing_kube::Slurp;
using testing_kube::TempDir;

class TestServer {
 public:
  // openssl generates the certificates and a Python interpreter starts: generous on a loaded machine.
  static constexpr std::chrono::seconds kStartTimeout{60};

  TestServer() {
    std::string script = std::string(SESSIONTURN_SOURCE_DIR) + "/tests/fakes/http_server.py";
    std::vector<std::string> args = {SESSIONTURN_PYTHON, script, "--dir", dir_.path() + "/server"};
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
    if (rc != 0) throw std::runtime_error("cannot start the test HTTP server");
    auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    std::string ready = dir_.path() + "/server/ready.json";
    while (!std::filesystem::exists(ready)) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("the test HTTP server exited: " + Slurp(log));
      }
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("the test HTTP server did not start");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto ports = nlohmann::json::parse(Slurp(ready));
    http_port_ = ports["http"].get<int>();
    https_port_ = ports["https"].get<int>();
    silent_port_ = ports["silent"].get<int>();
    ca_pem_ = Slurp(dir_.path() + "/server/ca.crt");
  }

  ~TestServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  std::string Http(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(http_port_) + path; }
  std::string Https(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(https_port_) + path;
  }
  std::string Silent(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(silent_port_) + path;
  }
  const std::string& CaPem() const { return ca_pem_; }
  HttpTls Tls() const {
    HttpTls tls;
    tls.ca_pem = ca_pem_;
    return tls;
  }

  // GET /_stats with a throwaway client of its own (plain easy libcurl would do; ours is under test,
  // but a fresh one per call cannot share state with the client being tested).
  nlohmann::json Stats(Context& context) const {
    HttpClient stats(context);
    HttpRequest r;
    r.url = Http("/_stats");
    auto response = stats.Request(r);
    if (!response || response->status != 200) throw std::runtime_error("GET /_stats failed");
    return nlohmann::json::parse(response->body);
  }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  int http_port_ = 0, https_port_ = 0, silent_port_ = 0;
  std::string ca_pem_;
};

}  // namespace sessionturn::testing_http
