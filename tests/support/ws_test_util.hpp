// Helpers for the WebSocket and exec tests: temp dirs, Python peers started per test (they print
// "PORT n" when ready and exit when their stdin closes), a per-test PKI made with the openssl CLI.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace wstest {

// Generous: the machine is a loaded 2-core box shared with other builds.
inline constexpr std::chrono::seconds kWait{20};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "st-ws-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A child process whose stdout announces "PORT n" (or "READY ...") as its first line.
class PeerProcess {
 public:
  explicit PeerProcess(std::vector<std::string> argv) {
    int in_pipe[2], out_pipe[2];
    if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(in_pipe[0], 0);
      dup2(out_pipe[1], 1);
      close(in_pipe[0]);
      close(in_pipe[1]);
      close(out_pipe[0]);
      close(out_pipe[1]);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(in_pipe[0]);
    close(out_pipe[1]);
    stdin_fd_ = in_pipe[1];
    stdout_fd_ = out_pipe[0];
    first_line_ = ReadLine();
  }
  ~PeerProcess() {
    if (stdin_fd_ >= 0) close(stdin_fd_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      usleep(20'000);
    }
    if (stdout_fd_ >= 0) close(stdout_fd_);
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  const std::string& FirstLine() const { return first_line_; }
  int Port() const {
    if (first_line_.rfind("PORT ", 0) != 0) return 0;
    return std::atoi(first_line_.c_str() + 5);
  }

 private:
  std::string ReadLine() {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{stdout_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      ssize_t n = read(stdout_fd_, &c, 1);
      if (n <= 0) break;
      if (c == '\n') return line;
      line.push_back(c);
    }
    return line;
  }

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string first_line_;
};

inline std::string Fake(const std::string& name) { return std::string(SESSIONTURN_SOURCE_DIR) + "/tests/fakes/" + name; }

// A CA, a server certificate for localhost/127.0.0.1, a client certificate, and an unrelated CA,
// made with the openssl CLI in `dir` (EC keys: fast to generate).
struct Pki {
  std::string ca_crt, ca_key, server_crt, server_key, client_crt, client_key, other_ca_crt;
  std::string Pem(const std::string& path) const { return ReadFile(path); }
};

inline bool Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

inline Pki MakePki(const TempDir& dir) {
  Pki p;
  p.ca_crt = dir / "ca.crt";
  p.ca_key = dir / "ca.key";
  p.server_crt = dir / "server.crt";
  p.server_key = dir / "server.key";
  p.client_crt = dir / "client.crt";
  p.client_key = dir / "client.key";
  p.other_ca_crt = dir / "other-ca.crt";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
  WriteFile(dir / "server.ext", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  WriteFile(dir / "client.ext", "extendedKeyUsage=clientAuth\n");
  bool ok = Run("openssl req -x509" + ec + "-keyout " + p.ca_key + " -out " + p.ca_crt + " -days 2 -subj /CN=st-test-ca") &&
            Run("openssl req -x509" + ec + "-keyout " + (dir / "other-ca.key") + " -out " + p.other_ca_crt +
                " -days 2 -subj /CN=st-other-ca") &&
            Run("openssl req" + ec + "-keyout " + p.server_key + " -out " + (dir / "server.csr") + " -subj /CN=localhost") &&
            Run("openssl x509 -req -in " + (dir / "server.csr") + " -CA " + p.ca_crt + " -CAkey " + p.ca_key +
                " -CAcreateserial -out " + p.server_crt + " -days 2 -extfile " + (dir / "server.ext")) &&
            Run("openssl req" + ec + "-keyout " + p.client_key + " -out " + (dir / "client.csr") + " -subj /CN=st-client") &&
            Run("openssl x509 -req -in " + (dir / "client.csr") + " -CA " + p.ca_crt + " -CAkey " + p.ca_key +
                " -CAcreateserial -out " + p.client_crt + " -days 2 -extfile " + (dir / "client.ext"));
  if (!ok) throw std::runtime_error("openssl could not make the test PKI");
  return p;
}

// A thread-safe queue a handler fills and the test drains with a deadline.
template <typename T>
class Inbox {
 public:
  void Push(T value) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(std::move(value));
    cv_.notify_all();
  }
  std::optional<T> Pop(std::chrono::milliseconds timeout = kWait) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return !items_.empty(); })) return std::nullopt;
    T value = std::move(items_.front());
    items_.pop_front();
    return value;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<T> items_;
};

}  // namespace wstest
