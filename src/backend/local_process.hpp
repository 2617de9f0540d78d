// The local backend's runtime processes and sockets: finding the program, starting a runtime detached
// (its own session, stdin from /dev/null, stdout and stderr to its log, nothing else inherited), telling
// whether a pid is still our runtime, and unix socket paths longer than sun_path allows.
#pragma once

#include <string>
#include <vector>

#include "sessionturn/error.hpp"

namespace sessionturn::local {

inline constexpr std::string_view kRuntimeProgramName = "sessionturn-local-runtime";

// `configured` when given (it must be an executable file: Errc::invalid_argument otherwise), else the
// program next to the running executable (/proc/self/exe), else the first on PATH. Errc::not_found
// saying where it looked when there is none.
Result<std::string> FindRuntimeProgram(const std::string& configured);

// Runs `argv` (argv[0] the program, which must be given --detach --pid-file PID_FILE) in `cwd` with
// stdin from /dev/null and stdout and stderr appended to `log` (moved to LOG.1 first when it has grown
// past kLogRotateBytes), default signal dispositions, nothing blocked. The program forks the runtime
// into its own session, writes its pid to PID_FILE and exits at once; this waits for that (a few
// milliseconds: it is a spawn, not the runtime's start-up) and returns the runtime's pid.
// Errc::failed with the log's tail when the launcher failed.
Result<long> StartDetached(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log,
                           const std::string& pid_file);

// The pid in a pid file; Errc::not_found when there is none.
Result<long> ReadPidFile(const std::string& path);

// True when `pid` runs (not a zombie) and its command line has the argument `marker` (the runtime's
// --state-dir): a pid since reused by another program is not our runtime. A process in the middle of
// exiting (its command line already empty) still counts: its descriptors may still hold locks.
bool RuntimeAlive(long pid, const std::string& marker);

// Sends `sig` to `pid` if it is still our runtime (RuntimeAlive). False when it was not.
bool SignalRuntime(long pid, const std::string& marker, int sig);

// A unix socket path usable with bind/connect: the path itself when it fits sun_path, else
// /proc/self/fd/N/<file> through an O_PATH descriptor of its directory that this object holds (the
// default state root with a 63-character Session name is longer than the 107 bytes a path may have).
class SocketPath {
 public:
  SocketPath() = default;
  ~SocketPath();
  SocketPath(SocketPath&& other) noexcept;
  SocketPath& operator=(SocketPath&& other) noexcept;
  SocketPath(const SocketPath&) = delete;
  SocketPath& operator=(const SocketPath&) = delete;

  // Errc::not_found when the directory is missing, Errc::invalid_argument when even the alias is too long.
  static Result<SocketPath> For(const std::string& path);
  const std::string& path() const noexcept { return usable_; }

 private:
  int dir_fd_ = -1;
  std::string usable_;
};

}  // namespace sessionturn::local
