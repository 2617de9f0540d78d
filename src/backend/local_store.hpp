// The local backend's state on disk (docs/backends.md, "The state root"): where a Session's files are,
// the two records (session.json, written by backends under the Session's lock; runtime.json, written by
// the Session's runtime only), atomic writes, the Session lock and the log's tail. Shared by the
// backend and the sessionturn-local-runtime program, so both read and write the same shapes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "files.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/error.hpp"

namespace sessionturn::local {

using WallClock = std::chrono::system_clock;

// The record's version; a newer one is refused (an older backend must not rewrite what it cannot read).
inline constexpr int kSessionRecordVersion = 1;
// session.json and runtime.json are a few hundred bytes; a bigger one is not ours.
inline constexpr std::size_t kMaxRecordBytes = 1u << 20;
// What a Failed Session's message quotes of its runtime's log.
inline constexpr std::size_t kLogTailLines = 10;
inline constexpr std::size_t kLogTailBytes = 2048;
// runtime.log is appended to by every start; past this size a start moves it to runtime.log.1 first.
inline constexpr std::size_t kLogRotateBytes = 1u << 20;

// The files of one Session, <root>/sessions/<name>/...
struct SessionPaths {
  std::string dir;
  std::string session_file;  // session.json
  std::string lock_file;     // session.lock (the backends' flock; the runtime's journal has its own, "lock")
  std::string pid_file;      // runtime.pid (written by the program when it detaches)
  std::string status_file;   // runtime.json
  std::string socket;        // runtime.sock
  std::string log;           // runtime.log (the runtime's stdout and stderr)
  std::string workspace;     // workspace/ (the default working directory)
};
SessionPaths PathsFor(const std::string& root, const std::string& name);
std::string SessionsDir(const std::string& root);  // <root>/sessions

// session.json. Only backends write it, under the Session's lock; phase, reason, message and
// last_activity are what a backend last saw (the runtime's own record is runtime.json, and its
// last activity is the current one: session.json's is rewritten only with a change of phase).
struct SessionRecord {
  std::string name;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> parameters;  // the SessionSpec's, as given
  std::string provider;                           // resolved: the spec's or the backend's
  std::string workdir;                            // resolved, absolute
  WallClock::time_point created{};
  WallClock::time_point last_activity{};
  SessionPhase phase = SessionPhase::pending;
  SuspendReason suspended = SuspendReason::none;
  std::string message;
};
// Errc::not_found when the file is missing; Errc::io_error naming the file and what is wrong with it
// when it cannot be read or is not a Session record.
Result<SessionRecord> ReadSessionRecord(const std::string& path);
// `durable` as for WriteFileAtomic: what a caller changed is; a backend's fold of what it observed (the
// phase, last activity) need not be, since it is derived again from the files at every look.
Status WriteSessionRecord(const std::string& path, const SessionRecord& record, bool durable = true);

// runtime.json: the runtime's own account (pid, start, last turn, how it ended). Written only by the
// runtime that owns the Session's journal (the program, or the in-process host for its runtimes).
struct RuntimeRecord {
  long pid = 0;
  bool in_process = false;  // hosted inside another program (LocalBackendOptions::in_process)
  WallClock::time_point started{};
  WallClock::time_point last_activity{};  // the last turn event; epoch when none in this run
  std::string exit;                       // "" while it runs; kExitIdle or kExitStopped once it ended cleanly
  WallClock::time_point exited{};
};
inline constexpr std::string_view kExitIdle = "idle";        // --idle-exit: the idle policy stopped it
inline constexpr std::string_view kExitStopped = "stopped";  // SIGTERM/SIGINT, or the host stopped it
// Errc::not_found when missing, Errc::io_error naming the file when unreadable or malformed.
Result<RuntimeRecord> ReadRuntimeRecord(const std::string& path);
// `durable` as for WriteFileAtomic: the start and the exit are; last-activity updates need not be.
Status WriteRuntimeRecord(const std::string& path, const RuntimeRecord& record, bool durable = true);

// Atomic replacement of a record (files.hpp); `durable` for what must survive a machine crash
// (records; not needed for a pid, which a reboot makes stale anyway).
using files::WriteFileAtomic;
// The file's text, bounded; Errc::not_found when missing.
Result<std::string> ReadSmallFile(const std::string& path, std::size_t max_bytes = kMaxRecordBytes);

// What stat(2) says of a file's content: a record is replaced by rename (a new inode), and an edit in
// place changes its size or times.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

// session.json as last read, per path, kept while the file's stamp stays the same: a look at a
// Session (every WaitReady) then costs a stat(2) instead of a parse. A file changed in the last
// kSettle is not kept (a change within the file system's timestamp granularity would not show in
// its stamp; kSettleCoarse where the times are whole seconds). Thread-safe.
class SessionRecordCache {
 public:
  static constexpr std::chrono::milliseconds kSettle{100};
  static constexpr std::chrono::milliseconds kSettleCoarse{2'100};
  // Past this many Sessions kept, the cache starts over (a bound, not an expected size).
  static constexpr std::size_t kMaxEntries = 16384;
  // As ReadSessionRecord.
  Result<SessionRecord> Read(const std::string& path);
  // Drops what is kept for `path` (its Session was deleted).
  void Forget(const std::string& path);

 private:
  struct Entry {
    FileStamp stamp;
    SessionRecord record;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
};

// "2026-08-08T12:00:00.123Z" (UTC, milliseconds) and back; nullopt for anything else.
std::string FormatTime(WallClock::time_point t);
std::optional<WallClock::time_point> ParseTime(std::string_view text);

// The last lines of the runtime's log, for a Failed Session's message ("" when there is none).
std::string LogTail(const std::string& path, std::size_t max_lines = kLogTailLines,
                    std::size_t max_bytes = kLogTailBytes);

// A Session's lock: flock(LOCK_EX) on its session.lock, which every start, stop and change of
// session.json holds. It is per open file, so it also orders threads of one process. Never held across
// a wait: only file operations and a spawn happen under it.
class SessionLock {
 public:
  SessionLock() = default;
  ~SessionLock();
  SessionLock(SessionLock&& other) noexcept;
  SessionLock& operator=(SessionLock&& other) noexcept;
  SessionLock(const SessionLock&) = delete;
  SessionLock& operator=(const SessionLock&) = delete;

  // Tries once. Held: the lock. Busy: an empty lock (held() false). Errors: Errc::not_found when the
  // Session's directory is gone, Errc::io_error otherwise.
  static Result<SessionLock> TryAcquire(const std::string& lock_file);
  bool held() const noexcept { return fd_ >= 0; }
  void Release();

 private:
  int fd_ = -1;
};

// Creates <root>/sessions/<name>/ with session.json, session.lock and workspace/ as one step: they are
// made in a hidden temp directory and renamed into place, so no one ever sees a half-made Session.
// Returns false (and creates nothing) when the Session exists already.
Result<bool> CreateSessionDir(const std::string& root, const SessionRecord& record, bool make_workspace);
// Moves the Session's directory out of the way (<root>/sessions/.deleted-<name>-<random>) so it is gone
// for every reader at once, and returns where it went. Errc::not_found when there is none.
Result<std::string> RetireSessionDir(const std::string& root, const std::string& name);
// Removes a retired directory (or any leftover hidden temp directory) with its contents.
void RemoveTree(const std::string& dir);
// The names of the Sessions under the root (hidden entries are skipped), sorted.
Result<std::vector<std::string>> ListSessionNames(const std::string& root);

}  // namespace sessionturn::local
