// Runtime processes and socket paths of the local backend (local_process.hpp).
#include "backend/local_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backend/local_store.hpp"
#include "chat_secrets.hpp"
#include "files.hpp"

extern char** environ;

namespace sessionturn::local {
namespace {

namespace fs = std::filesystem;

using files::Errno;

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

void RotateLog(const std::string& log) {
  struct stat st {};
  if (::stat(log.c_str(), &st) == 0 && static_cast<std::size_t>(st.st_size) > kLogRotateBytes)
    ::rename(log.c_str(), (log + ".1").c_str());
}

}  // namespace

Result<std::string> FindRuntimeProgram(const std::string& configured) {
  if (!configured.empty()) {
    if (files::IsExecutableFile(configured)) return configured;
    return Fail(Errc::invalid_argument,
                "LocalBackendOptions.runtime_program " + configured + " is not an executable file");
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  std::string beside;
  if (!ec) {
    beside = (self.parent_path() / kRuntimeProgramName).string();
    if (files::IsExecutableFile(beside)) return beside;
  }
  if (auto found = files::FindOnPath(kRuntimeProgramName)) return *found;
  return Fail(Errc::not_found, std::string(kRuntimeProgramName) + " was not found " +
                                   (beside.empty() ? std::string() : "next to this program (" + beside + ") nor ") +
                                   "on PATH; install it or set LocalBackendOptions.runtime_program");
}

Result<long> StartDetached(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log,
                           const std::string& pid_file) {
  RotateLog(log);
  // Opened here with O_CLOEXEC and dup2'ed onto 0-2 in the child: only those three are inherited.
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) return Fail(Errc::io_error, Errno("cannot open /dev/null", errno));
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    const int err = errno;
    ::close(devnull);
    return Fail(err == ENOENT ? Errc::not_found : Errc::io_error, Errno("cannot open " + log, err));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, devnull, 0);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
  posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // The embedding process's environment, without the chat bridges' secrets (the runtime's agent runs tools).
  std::vector<std::string> env = WithoutChatSecrets(environ);
  std::vector<char*> cenv;
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t launcher = 0;
  const int rc = ::posix_spawn(&launcher, args[0].c_str(), &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(devnull);
  ::close(log_fd);
  if (rc != 0) return Fail(Errc::failed, Errno("cannot start " + args[0] + " in " + cwd, rc));
  int status = 0;
  while (::waitpid(launcher, &status, 0) < 0) {
    if (errno == EINTR) continue;
    if (errno == ECHILD) {
      // SIGCHLD set to SIG_IGN: the kernel reaps children itself and nothing can be waited for.
      return Fail(Errc::failed, "cannot wait for " + args[0] +
                                    ": SIGCHLD is ignored in this process (SIG_IGN); restore its default disposition");
    }
    return Fail(Errc::internal, Errno("waitpid on the runtime launcher", errno));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string tail = LogTail(log, 3);
    return Fail(Errc::failed, args[0] + " " + DescribeWait(status) + " before it detached" +
                                  (tail.empty() ? std::string() : ": " + tail));
  }
  auto pid = ReadPidFile(pid_file);
  if (!pid)
    return Fail(Errc::failed, args[0] + " detached but left no pid in " + pid_file + ": " + pid.error().message);
  return *pid;
}

Result<long> ReadPidFile(const std::string& path) {
  auto text = ReadSmallFile(path, 64);
  if (!text) return Fail(text.error());
  char* end = nullptr;
  const long pid = std::strtol(text->c_str(), &end, 10);
  if (pid <= 0 || end == text->c_str()) return Fail(Errc::io_error, path + " does not hold a pid");
  return pid;
}

bool RuntimeAlive(long pid, const std::string& marker) {
  if (pid <= 0) return false;
  const std::string proc = "/proc/" + std::to_string(pid);
  // A zombie (reaped by nobody yet) answers kill(pid, 0) but is not running: read its state.
  auto stat = ReadSmallFile(proc + "/stat", 4096);
  if (!stat) return false;
  const auto paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat->size()) return false;
  const char state = (*stat)[paren + 2];
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  auto cmdline = ReadSmallFile(proc + "/cmdline", 1u << 16);
  if (!cmdline) return false;
  // Empty while it exits (its memory is gone, its threads and descriptors, the journal's lock among
  // them, not yet): still there, for whoever waits to start the next one.
  if (cmdline->empty()) return true;
  std::string_view args(*cmdline);
  while (!args.empty()) {
    auto nul = args.find('\0');
    if (args.substr(0, nul) == marker) return true;
    if (nul == std::string_view::npos) break;
    args.remove_prefix(nul + 1);
  }
  return false;
}

bool SignalRuntime(long pid, const std::string& marker, int sig) {
  if (!RuntimeAlive(pid, marker)) return false;
  return ::kill(static_cast<pid_t>(pid), sig) == 0;
}

// ---- SocketPath ------------------------------------------------------------------------------------

SocketPath::~SocketPath() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

SocketPath::SocketPath(SocketPath&& other) noexcept : dir_fd_(other.dir_fd_), usable_(std::move(other.usable_)) {
  other.dir_fd_ = -1;
}

SocketPath& SocketPath::operator=(SocketPath&& other) noexcept {
  if (this != &other) {
    if (dir_fd_ >= 0) ::close(dir_fd_);
    dir_fd_ = other.dir_fd_;
    usable_ = std::move(other.usable_);
    other.dir_fd_ = -1;
  }
  return *this;
}

Result<SocketPath> SocketPath::For(const std::string& path) {
  SocketPath out;
  if (path.size() < sizeof(sockaddr_un::sun_path)) {
    out.usable_ = path;
    return out;
  }
  const fs::path p(path);
  const std::string dir = p.parent_path().string();
  out.dir_fd_ = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (out.dir_fd_ < 0) {
    const int err = errno;
    return Fail(err == ENOENT ? Errc::not_found : Errc::io_error, Errno("cannot open " + dir, err));
  }
  out.usable_ = "/proc/self/fd/" + std::to_string(out.dir_fd_) + "/" + p.filename().string();
  if (out.usable_.size() >= sizeof(sockaddr_un::sun_path))
    return Fail(Errc::invalid_argument, "socket file name is too long for a unix socket: " + path);
  return out;
}

}  // namespace sessionturn::local
