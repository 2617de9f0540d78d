// Shared by the LocalBackend tests: a state root that kills every runtime started under it when it
// goes, backend options pointing at the built runtime program, turns through a ReadyTarget, and a
// helper child (this test binary re-run on a hidden test case) that plays "the embedding process".
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "sessionturn/backend.hpp"
#include "sessionturn/driver.hpp"

extern char** environ;

namespace backend_test {

using namespace sessionturn;
using namespace std::chrono_literals;

// Generous: the machine is a loaded 2-core box, slower still under sanitizers.
inline constexpr auto kWait = 30s;
inline const std::string kRuntimeProgram = std::string(SESSIONTURN_BINARY_DIR) + "/sessionturn-local-runtime";

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Pids of the processes whose command line has an argument starting with `prefix`.
inline std::vector<pid_t> ProcessesUnder(const std::string& prefix) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string base = it->path().filename().string();
    if (base.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(base));
    if (pid == ::getpid()) continue;
    std::string cmdline = ReadFile(it->path().string() + "/cmdline");
    std::string stat = ReadFile(it->path().string() + "/stat");
    auto paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') continue;
    std::string_view args(cmdline);
    while (!args.empty()) {
      auto nul = args.find('\0');
      if (args.substr(0, nul).rfind(prefix, 0) == 0) {
        out.push_back(pid);
        break;
      }
      if (nul == std::string_view::npos) break;
      args.remove_prefix(nul + 1);
    }
  }
  return out;
}

inline bool Alive(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// Waits until `pred` holds (polled every 20 ms) or `timeout` passes.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// A state root under /tmp (short, so socket paths fit). Its runtimes are detached (they outlive
// whoever started them), so on the way out it SIGKILLs every process whose command line names a
// path under it, then removes it.
class StateRoot {
 public:
  explicit StateRoot(const std::string& extra = {}) {
    char tmpl[] = "/tmp/st-bk-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    base_ = tmpl;
    path_ = base_ + extra;
  }
  ~StateRoot() {
    KillRuntimes();
    std::error_code ec;
    std::filesystem::remove_all(base_, ec);
  }
  StateRoot(const StateRoot&) = delete;
  StateRoot& operator=(const StateRoot&) = delete;

  const std::string& path() const { return path_; }
  std::string Session(const std::string& name) const { return path_ + "/sessions/" + name; }
  std::vector<pid_t> Runtimes() const { return ProcessesUnder(base_ + "/"); }
  void KillRuntimes() const {
    for (pid_t pid : Runtimes()) ::kill(pid, SIGKILL);
    Eventually([&] { return Runtimes().empty(); }, 10s);
  }

 private:
  std::string base_;
  std::string path_;
};

inline LocalBackendOptions Options(const StateRoot& root) {
  LocalBackendOptions o;
  o.state_dir = root.path();
  o.runtime_program = kRuntimeProgram;
  return o;
}

inline std::unique_ptr<SessionBackend> MakeBackend(Context& ctx, LocalBackendOptions o) {
  auto backend = MakeLocalBackend(ctx, std::move(o));
  INFO((backend ? std::string() : backend.error().ToString()));
  REQUIRE(backend.has_value());
  return std::move(*backend);
}

// The stages a WaitReady reported, in order.
struct Stages {
  std::mutex mu;
  std::vector<std::string> seen;
  ReadyProgress Callback() {
    return [this](const SessionInfo&, std::string_view stage) {
      std::lock_guard lock(mu);
      seen.emplace_back(stage);
    };
  }
  bool Has(const std::string& stage) {
    std::lock_guard lock(mu);
    return std::find(seen.begin(), seen.end(), stage) != seen.end();
  }
  std::string Joined() {
    std::lock_guard lock(mu);
    std::string out;
    for (const auto& s : seen) out += (out.empty() ? "" : ",") + s;
    return out;
  }
};

inline ReadyTarget Ready(SessionBackend& backend, const std::string& name, Stages* stages = nullptr) {
  auto ready =
      backend.WaitReady(name, std::chrono::steady_clock::now() + kWait, stages ? stages->Callback() : ReadyProgress{});
  INFO((ready ? std::string() : ready.error().ToString()));
  REQUIRE(ready.has_value());
  return std::move(*ready);
}

inline TurnResult Turn(Context& ctx, const std::shared_ptr<Connector>& connector, const std::string& prompt,
                       TurnOptions options = {}) {
  Driver driver(ctx, connector);
  options.timeout = kWait;
  auto result = driver.SubmitTurn(prompt, std::move(options));
  INFO((result ? std::string() : result.error().ToString()));
  REQUIRE(result.has_value());
  return std::move(*result);
}

// The Session's runtime stopped itself under the idle policy (phase Suspended, reason idle).
inline bool IdleSuspended(SessionBackend& backend, const std::string& name) {
  auto info = backend.Get(name);
  return info && info->phase == SessionPhase::suspended && info->suspended == SuspendReason::idle;
}

inline SessionInfo GetInfo(SessionBackend& backend, const std::string& name) {
  auto info = backend.Get(name);
  INFO((info ? std::string() : info.error().ToString()));
  REQUIRE(info.has_value());
  return *info;
}

// One turn per script turn: a delta, a pause long enough to kill someone in, the reply.
inline const char* kSlowScript = R"json({"turns":[[{"type":"delta","text":"working on {prompt}"},
  {"type":"sleep","ms":2500},{"type":"message","text":"finished {prompt} (#{n})"}]]})json";

// ---- the helper child ------------------------------------------------------------------------------

// The hidden test case the helper child runs (test_local_backend_processes.cpp), and its inputs.
inline constexpr const char* kHelperTest = "local backend: helper process";
inline constexpr const char* kHelperModeEnv = "ST_BACKEND_HELPER";       // "turn" or "race"
inline constexpr const char* kHelperRootEnv = "ST_BACKEND_HELPER_ROOT";  // the state root
inline constexpr const char* kHelperNameEnv = "ST_BACKEND_HELPER_NAME";  // the Session
inline constexpr const char* kHelperProviderEnv = "ST_BACKEND_HELPER_PROVIDER";
inline constexpr const char* kHelperGoEnv = "ST_BACKEND_HELPER_GO";  // race: start once this file exists

// This test binary, re-run on a hidden helper test (by default kHelperTest) with the given
// environment; stdout is a pipe we read.
struct HelperChild {
  pid_t pid = -1;
  int out = -1;
  std::string buffered;

  explicit HelperChild(const std::vector<std::pair<std::string, std::string>>& env,
                       std::string test = kHelperTest) {
    int pipe_fds[2];
    REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipe_fds[1], 1);
    std::vector<std::string> envs;
    for (char** e = environ; e && *e; ++e) envs.emplace_back(*e);
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> cenv;
    for (auto& e : envs) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::vector<char*> argv = {self.data(), test.data(), nullptr};
    const int rc = ::posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(pipe_fds[1]);
    out = pipe_fds[0];
    REQUIRE(rc == 0);
  }
  ~HelperChild() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out >= 0) ::close(out);
  }
  HelperChild(const HelperChild&) = delete;
  HelperChild& operator=(const HelperChild&) = delete;

  // The rest of the first stdout line starting with `prefix`, or "" at EOF or after the timeout.
  std::string LineStartingWith(const std::string& prefix, std::chrono::milliseconds timeout = kWait) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (auto nl = buffered.find('\n'); nl != std::string::npos; nl = buffered.find('\n')) {
        std::string line = buffered.substr(0, nl);
        buffered.erase(0, nl + 1);
        if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return {};
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return {};
      char buf[4096];
      ssize_t n = ::read(out, buf, sizeof buf);
      if (n <= 0) return {};
      buffered.append(buf, static_cast<std::size_t>(n));
    }
  }
  // Exit status (or 128 + signal); -1 if it did not end in time.
  int Wait(std::chrono::milliseconds timeout = kWait) {
    int status = 0;
    if (!Eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout)) return -1;
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void KillNow() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
};

}  // namespace backend_test
