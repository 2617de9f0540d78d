// The local backend's files (local_store.hpp): records, atomic writes, the Session lock.
#include "backend/local_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "files.hpp"
#include "json_fields.hpp"

namespace sessionturn::local {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using files::Errno;
using files::FsyncDir;
using files::RandomSuffix;

Json TimeJson(WallClock::time_point t) {
  return t == WallClock::time_point{} ? Json(nullptr) : Json(FormatTime(t));
}

// A field that must be a string map; absent is empty.
bool ReadMap(const Json& j, const char* key, std::map<std::string, std::string>& out, std::string& why) {
  if (!j.contains(key) || j[key].is_null()) return true;
  if (!j[key].is_object()) {
    why = std::string("\"") + key + "\" is not an object";
    return false;
  }
  for (auto it = j[key].begin(); it != j[key].end(); ++it) {
    if (!it.value().is_string()) {
      why = std::string("\"") + key + "." + it.key() + "\" is not a string";
      return false;
    }
    out[it.key()] = it.value().get<std::string>();
  }
  return true;
}

bool ReadString(const Json& j, const char* key, std::string& out, std::string& why) {
  if (!j.contains(key) || j[key].is_null()) return true;
  if (!j[key].is_string()) {
    why = std::string("\"") + key + "\" is not a string";
    return false;
  }
  out = j[key].get<std::string>();
  return true;
}

bool ReadTime(const Json& j, const char* key, WallClock::time_point& out, std::string& why) {
  std::string text;
  if (!ReadString(j, key, text, why)) return false;
  if (text.empty()) return true;
  auto t = ParseTime(text);
  if (!t) {
    why = std::string("\"") + key + "\" is not a time like 2026-08-08T12:00:00.000Z";
    return false;
  }
  out = *t;
  return true;
}

Result<Json> ParseJsonRecord(const std::string& path, const std::string& body, const char* what) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Fail(Errc::io_error, path + " is not a valid " + what + " (not a JSON object)");
  }
  return j;
}

Result<Json> ReadJsonFile(const std::string& path, const char* what) {
  auto body = ReadSmallFile(path);
  if (!body) return Fail(body.error());
  return ParseJsonRecord(path, *body, what);
}

std::int64_t Nanos(const timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

FileStamp StampOf(const struct stat& st) {
  return FileStamp{st.st_dev, st.st_ino, st.st_size, Nanos(st.st_mtim), Nanos(st.st_ctim)};
}

// ReadSmallFile, with the stamp of the file read (fstat of the descriptor read from, so that a
// rename between a stat and the read cannot pair one file's stamp with another's text).
Result<std::string> ReadStampedFile(const std::string& path, std::size_t max_bytes, FileStamp* stamp) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Fail(err == ENOENT || err == ENOTDIR ? Errc::not_found : Errc::io_error, Errno("cannot open " + path, err));
  }
  if (stamp != nullptr) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return Fail(Errc::io_error, Errno("cannot stat " + path, err));
    }
    *stamp = StampOf(st);
  }
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Fail(Errc::io_error, Errno("cannot read " + path, err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_bytes) {
      ::close(fd);
      return Fail(Errc::io_error,
                  path + " is larger than " + std::to_string(max_bytes) + " bytes: not a record of ours");
    }
  }
  ::close(fd);
  return out;
}

std::optional<SessionPhase> PhaseFrom(const std::string& s) {
  for (auto p : {SessionPhase::pending, SessionPhase::ready, SessionPhase::suspended, SessionPhase::failed})
    if (ToString(p) == s) return p;
  return std::nullopt;
}

std::optional<SuspendReason> ReasonFrom(const std::string& s) {
  for (auto r : {SuspendReason::none, SuspendReason::idle, SuspendReason::owner})
    if (ToString(r) == s) return r;
  return std::nullopt;
}

}  // namespace

std::string SessionsDir(const std::string& root) {
  return root + "/sessions";
}

SessionPaths PathsFor(const std::string& root, const std::string& name) {
  SessionPaths p;
  p.dir = SessionsDir(root) + "/" + name;
  p.session_file = p.dir + "/session.json";
  p.lock_file = p.dir + "/session.lock";
  p.pid_file = p.dir + "/runtime.pid";
  p.status_file = p.dir + "/runtime.json";
  p.socket = p.dir + "/runtime.sock";
  p.log = p.dir + "/runtime.log";
  p.workspace = p.dir + "/workspace";
  return p;
}

std::string FormatTime(WallClock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  long frac = static_cast<long>(ms % 1000);
  if (frac < 0) {
    frac += 1000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03ldZ", frac);
  return buf;
}

std::optional<WallClock::time_point> ParseTime(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS[.fraction]Z
  auto digits = [&](std::size_t pos, std::size_t n, int& out) {
    if (pos + n > text.size()) return false;
    out = 0;
    for (std::size_t i = pos; i < pos + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      out = out * 10 + (text[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, s;
  if (!digits(0, 4, y) || text.size() < 20 || text[4] != '-' || !digits(5, 2, mo) || text[7] != '-' ||
      !digits(8, 2, d) || text[10] != 'T' || !digits(11, 2, h) || text[13] != ':' || !digits(14, 2, mi) ||
      text[16] != ':' || !digits(17, 2, s))
    return std::nullopt;
  std::size_t pos = 19;
  long ms = 0;
  if (text[pos] == '.') {
    ++pos;
    int scale = 100;
    std::size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      ms += (text[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return std::nullopt;
  }
  if (pos + 1 != text.size() || text[pos] != 'Z') return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  const std::time_t secs = ::timegm(&tm);
  return WallClock::time_point(std::chrono::seconds(secs) + std::chrono::milliseconds(ms));
}

Result<std::string> ReadSmallFile(const std::string& path, std::size_t max_bytes) {
  return ReadStampedFile(path, max_bytes, nullptr);
}

namespace {

Result<SessionRecord> ParseSessionRecord(const std::string& path, const std::string& body) {
  auto j = ParseJsonRecord(path, body, "Session record");
  if (!j) return Fail(j.error());
  auto bad = [&](const std::string& why) {
    return Fail(Errc::io_error,
                path + " is not a valid Session record: " + why + " (fix or remove the file; nothing was changed)");
  };
  const auto version = json_fields::Int(*j, "version");
  if (!version) return bad("\"version\" is missing or not an integer");
  if (*version < 1 || *version > kSessionRecordVersion)
    return bad("version " + std::to_string(*version) + " is not one this sessionturn knows (" +
               std::to_string(kSessionRecordVersion) + ")");
  SessionRecord r;
  std::string why, phase, reason;
  if (!ReadString(*j, "name", r.name, why) || !ReadMap(*j, "labels", r.labels, why) ||
      !ReadMap(*j, "annotations", r.annotations, why) || !ReadMap(*j, "parameters", r.parameters, why) ||
      !ReadString(*j, "provider", r.provider, why) || !ReadString(*j, "workdir", r.workdir, why) ||
      !ReadTime(*j, "created", r.created, why) || !ReadTime(*j, "lastActivity", r.last_activity, why) ||
      !ReadString(*j, "phase", phase, why) || !ReadString(*j, "suspendReason", reason, why) ||
      !ReadString(*j, "message", r.message, why))
    return bad(why);
  if (r.name.empty()) return bad("\"name\" is missing");
  if (r.provider.empty()) return bad("\"provider\" is missing");
  if (r.workdir.empty()) return bad("\"workdir\" is missing");
  auto p = PhaseFrom(phase.empty() ? "Pending" : phase);
  if (!p) return bad("\"phase\" is \"" + phase + "\", not Pending, Ready, Suspended or Failed");
  auto s = ReasonFrom(reason);
  if (!s) return bad("\"suspendReason\" is \"" + reason + "\", not idle or owner");
  r.phase = *p;
  r.suspended = *s;
  return r;
}

}  // namespace

Result<SessionRecord> ReadSessionRecord(const std::string& path) {
  auto body = ReadSmallFile(path);
  if (!body) return Fail(body.error());
  return ParseSessionRecord(path, *body);
}

Result<SessionRecord> SessionRecordCache::Read(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(path);
    if (it != entries_.end() && it->second.stamp == StampOf(st)) return it->second.record;
  }
  FileStamp stamp;
  auto body = ReadStampedFile(path, kMaxRecordBytes, &stamp);
  Result<SessionRecord> record = body ? ParseSessionRecord(path, *body) : Result<SessionRecord>(Fail(body.error()));
  timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  // A file system that keeps whole seconds (ext4 with small inodes, some NFS) shows a change within the
  // same second in no time: such a file must have been left alone for longer.
  constexpr std::int64_t kSecond = 1'000'000'000;
  const bool whole_seconds = stamp.mtime_ns % kSecond == 0 && stamp.ctime_ns % kSecond == 0;
  const std::int64_t settle =
      whole_seconds ? std::chrono::nanoseconds(kSettleCoarse).count() : std::chrono::nanoseconds(kSettle).count();
  const bool settled = Nanos(now) - stamp.mtime_ns >= settle && Nanos(now) - stamp.ctime_ns >= settle;
  std::lock_guard lock(mu_);
  if (record && settled) {
    if (entries_.size() >= kMaxEntries && entries_.count(path) == 0) entries_.clear();
    entries_[path] = Entry{stamp, *record};
  } else {
    entries_.erase(path);  // gone, damaged or just changed: read it again next time
  }
  return record;
}

void SessionRecordCache::Forget(const std::string& path) {
  std::lock_guard lock(mu_);
  entries_.erase(path);
}

Status WriteSessionRecord(const std::string& path, const SessionRecord& r, bool durable) {
  Json j = {{"version", kSessionRecordVersion},
            {"name", r.name},
            {"labels", r.labels},
            {"annotations", r.annotations},
            {"parameters", r.parameters},
            {"provider", r.provider},
            {"workdir", r.workdir},
            {"created", TimeJson(r.created)},
            {"lastActivity", TimeJson(r.last_activity)},
            {"phase", std::string(ToString(r.phase))},
            {"suspendReason", std::string(ToString(r.suspended))},
            {"message", r.message}};
  return WriteFileAtomic(path, j.dump(2) + "\n", durable);
}

Result<RuntimeRecord> ReadRuntimeRecord(const std::string& path) {
  auto j = ReadJsonFile(path, "runtime record");
  if (!j) return Fail(j.error());
  RuntimeRecord r;
  std::string why;
  if (!j->contains("pid") || !(*j)["pid"].is_number_integer())
    return Fail(Errc::io_error, path + " is not a valid runtime record: \"pid\" is missing");
  r.pid = (*j)["pid"].get<long>();
  if (const auto* in_process = json_fields::Field(*j, "inProcess"); in_process != nullptr) {
    if (!in_process->is_boolean())
      return Fail(Errc::io_error, path + " is not a valid runtime record: \"inProcess\" is not a boolean");
    r.in_process = in_process->get<bool>();
  }
  if (!ReadTime(*j, "started", r.started, why) || !ReadTime(*j, "lastActivity", r.last_activity, why) ||
      !ReadString(*j, "exit", r.exit, why) || !ReadTime(*j, "exited", r.exited, why))
    return Fail(Errc::io_error, path + " is not a valid runtime record: " + why);
  return r;
}

Status WriteRuntimeRecord(const std::string& path, const RuntimeRecord& r, bool durable) {
  Json j = {{"pid", r.pid},
            {"inProcess", r.in_process},
            {"started", TimeJson(r.started)},
            {"lastActivity", TimeJson(r.last_activity)},
            {"exit", r.exit.empty() ? Json(nullptr) : Json(r.exit)},
            {"exited", TimeJson(r.exited)}};
  return WriteFileAtomic(path, j.dump() + "\n", durable);
}

std::string LogTail(const std::string& path, std::size_t max_lines, std::size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const off_t size = st.st_size;
    const off_t start = size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
    out.resize(static_cast<std::size_t>(size - start));
    ssize_t n = ::pread(fd, out.data(), out.size(), start);
    out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    if (start > 0) {
      auto nl = out.find('\n');  // drop the partial first line
      out.erase(0, nl == std::string::npos ? 0 : nl + 1);
    }
  }
  ::close(fd);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  std::size_t lines = 0;
  for (std::size_t i = out.size(); i > 0; --i) {
    if (out[i - 1] == '\n' && ++lines == max_lines) {
      out.erase(0, i);
      break;
    }
  }
  return out;
}

// ---- SessionLock -----------------------------------------------------------------------------------

SessionLock::~SessionLock() {
  Release();
}

SessionLock::SessionLock(SessionLock&& other) noexcept : fd_(other.fd_) {
  other.fd_ = -1;
}

SessionLock& SessionLock::operator=(SessionLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

Result<SessionLock> SessionLock::TryAcquire(const std::string& lock_file) {
  // Never O_CREAT: the lock file is made with the Session, so a Session deleted meanwhile is not
  // brought back as an empty directory holding a lock file.
  int fd = ::open(lock_file.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Fail(err == ENOENT ? Errc::not_found : Errc::io_error, Errno("cannot open " + lock_file, err));
  }
  SessionLock lock;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK || err == EINTR) return lock;
    return Fail(Errc::io_error, Errno("cannot lock " + lock_file, err));
  }
  lock.fd_ = fd;
  return lock;
}

void SessionLock::Release() {
  if (fd_ >= 0) {
    ::close(fd_);  // releases the flock
    fd_ = -1;
  }
}

// ---- directories -----------------------------------------------------------------------------------

Result<bool> CreateSessionDir(const std::string& root, const SessionRecord& record, bool make_workspace) {
  const std::string sessions = SessionsDir(root);
  std::error_code ec;
  fs::create_directories(sessions, ec);
  if (ec) return Fail(Errc::io_error, "cannot create " + sessions + ": " + ec.message());
  const SessionPaths final_paths = PathsFor(root, record.name);
  if (::access(final_paths.dir.c_str(), F_OK) == 0) return false;
  const std::string temp = sessions + "/.creating-" + record.name + "-" + RandomSuffix();
  if (::mkdir(temp.c_str(), 0700) != 0) return Fail(Errc::io_error, Errno("cannot create " + temp, errno));
  auto cleanup = [&](Error e) -> Result<bool> {
    RemoveTree(temp);
    return Fail(std::move(e));
  };
  int lock_fd = ::open((temp + "/session.lock").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (lock_fd < 0) return cleanup(Error(Errc::io_error, Errno("cannot create " + temp + "/session.lock", errno)));
  ::close(lock_fd);
  if (make_workspace && ::mkdir((temp + "/workspace").c_str(), 0700) != 0)
    return cleanup(Error(Errc::io_error, Errno("cannot create " + temp + "/workspace", errno)));
  if (auto st = WriteSessionRecord(temp + "/session.json", record); !st) return cleanup(st.error());
  // rename(2) of a directory onto an existing non-empty one fails: two creators race safely.
  if (::rename(temp.c_str(), final_paths.dir.c_str()) != 0) {
    const int err = errno;
    RemoveTree(temp);
    if (err == EEXIST || err == ENOTEMPTY) return false;
    return Fail(Errc::io_error, Errno("cannot create " + final_paths.dir, err));
  }
  FsyncDir(sessions);
  return true;
}

Result<std::string> RetireSessionDir(const std::string& root, const std::string& name) {
  const SessionPaths p = PathsFor(root, name);
  const std::string to = SessionsDir(root) + "/.deleted-" + name + "-" + RandomSuffix();
  if (::rename(p.dir.c_str(), to.c_str()) != 0) {
    const int err = errno;
    if (err == ENOENT) return Fail(Errc::not_found, "there is no Session " + name + " (" + p.dir + ")");
    return Fail(Errc::io_error, Errno("cannot remove " + p.dir, err));
  }
  return to;
}

void RemoveTree(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

Result<std::vector<std::string>> ListSessionNames(const std::string& root) {
  const std::string sessions = SessionsDir(root);
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(sessions, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return names;
    return Fail(Errc::io_error, "cannot list " + sessions + ": " + ec.message());
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Fail(Errc::io_error, "cannot list " + sessions + ": " + ec.message());
    const std::string name = it->path().filename().string();
    if (name.empty() || name.front() == '.') continue;
    std::error_code dec;
    if (!it->is_directory(dec)) continue;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace sessionturn::local
