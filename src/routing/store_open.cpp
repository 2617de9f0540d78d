// Opening and closing the router's store (store.hpp): its directory and file, the one-process lock,
// SQLite's settings, the integrity check and the schema.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "routing/store.hpp"
#include "routing/store_schema.hpp"
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {
namespace {

constexpr const char* kMoveAway = "move it and its -wal file away to start with an empty store";
// The WAL size (pages) at which a commit checkpoints it: SQLite's default, set at open so that
// CommitBatch(Checkpoint::later) restores the value it suspends.
constexpr int kAutoCheckpointPages = 1000;

std::string Errno(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// Creates the missing directories of `dir` 0700 (the store holds chat text); existing ones keep
// their mode, which is their owner's choice.
Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return {};
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return Fail(Errc::io_error, "router store directory " + dir + " is not a directory");
  }
  const auto slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto parent = MakeDirs(dir.substr(0, slash)); !parent) return parent;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Fail(Errc::io_error, Errno("cannot create router store directory " + dir, errno));
  return {};
}

// The one-process rule. flock on <path>.lock rather than SQLite's locking_mode=EXCLUSIVE: the lock is
// taken before the file is read or migrated, a second router is told at once and in words (not a
// "database is locked" after the busy timeout), the lock goes with the process however it ends, and
// an operator's `sqlite3` shell can still read the store while the router runs. flock is per open
// file, so a second RouterStore in this process is refused as well.
Result<int> LockStore(const std::string& path) {
  const std::string lock_path = path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Fail(Errc::io_error, Errno("cannot open the router store's lock " + lock_path, errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return Fail(Errc::io_error, Errno("cannot lock the router store's lock " + lock_path, err));
    std::string pid = n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    const std::string who = pid.empty() ? "" : " (process " + pid + ")";
    return Fail(Errc::conflict, "router store " + path + " is in use by another router" + who +
                                    ": two routers on one store would deliver every message twice");
  }
  // The holder's pid, for the message above and for an operator; the lock itself is the flock.
  const std::string pid = std::to_string(::getpid()) + "\n";
  const bool wrote = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) == ssize_t(pid.size());
  (void)wrote;  // when it did not, only that message lacks the pid: the lock holds
  return fd;
}

// SQLite creates a new file 0644 and gives its -wal and -shm files the database file's mode, so the
// file is made 0600 first and all three stay private.
Status CreateFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Fail(Errc::io_error, Errno("cannot create router store " + path, errno));
  ::close(fd);
  return {};
}

// WAL with synchronous=NORMAL: a commit appends to the WAL without an fsync (the WAL is synced at
// checkpoints). That survives any crash of the process, SIGKILL included, since what was written
// is in the kernel's page cache; a power loss or kernel crash may lose the last transactions
// before a checkpoint, never the file's consistency. FULL would fsync every commit, and a turn's
// cursor moves at every event.
Status Configure(Db& db, const StoreLimits& limits) {
  if (sqlite3_busy_timeout(db.handle(), static_cast<int>(limits.busy_timeout.count())) != SQLITE_OK)
    return Fail(db.Failure("set the busy timeout"));
  std::string journal_mode;
  {
    auto mode = db.Query("switch to WAL", "PRAGMA journal_mode = WAL");
    if (!mode) return Fail(mode.error());
    auto row = mode->Step();
    if (!row) return Fail(row.error());
    if (*row) journal_mode = mode->Text(0);
  }
  if (journal_mode != "wal") {
    return Fail(Errc::io_error, "router store " + db.path() + ": the file system refused WAL mode (journal mode \"" +
                                    journal_mode + "\"): put the store on a local disk");
  }
  if (auto st = db.Exec("set synchronous", "PRAGMA synchronous = NORMAL"); !st) return st;
  // A statement inside a batch keeps its statement journal in memory, not in a temp file.
  if (auto st = db.Exec("keep temporary data in memory", "PRAGMA temp_store = MEMORY"); !st) return st;
  // A big batch grows the WAL past the checkpoint size; after the checkpoint it shrinks back to 4 MiB.
  if (auto st = db.Exec("bound the WAL", "PRAGMA journal_size_limit = 4194304"); !st) return st;
  sqlite3_wal_autocheckpoint(db.handle(), kAutoCheckpointPages);
  return db.Exec("enable foreign keys", "PRAGMA foreign_keys = ON");
}

// A page-level check (not of indexes against tables) at every open: a damaged file is found at
// start, with its path, rather than in the middle of a turn.
Status CheckIntegrity(Db& db) {
  auto check = db.Query("check integrity", "PRAGMA quick_check(1)");
  if (!check) return Fail(check.error());
  auto row = check->Step();
  if (!row) return Fail(row.error());
  if (!*row || check->Text(0) == "ok") return {};
  std::string problem = check->Text(0);
  for (char& c : problem)
    if (c == '\n') c = ' ';
  return Fail(Errc::io_error, "router store " + db.path() + " is damaged (" + problem + "): " + kMoveAway);
}

// SQLite says "file is not a database" and "database disk image is malformed": say what to do too.
Error Explained(Db& db, Error error) {
  const int code = sqlite3_errcode(db.handle()) & 0xff;
  if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) {
    error.message += " (" + db.path() + " is not a router store, or it is damaged: " + kMoveAway + ")";
  }
  return error;
}

}  // namespace

Result<std::unique_ptr<RouterStore>> RouterStore::Open(std::string path, StoreLimits limits) {
  if (path.empty()) return Fail(Errc::invalid_argument, "router store path is empty");
  if (limits.bot_messages == 0) return Fail(Errc::invalid_argument, "router store limit bot_messages must be > 0");
  if (limits.dedupe_per_kind == 0)
    return Fail(Errc::invalid_argument, "router store limit dedupe_per_kind must be > 0");
  if (limits.busy_timeout.count() < 0)
    return Fail(Errc::invalid_argument, "router store busy_timeout must not be negative");
  const auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto st = MakeDirs(path.substr(0, slash)); !st) return Fail(st.error());
  }
  auto lock = LockStore(path);
  if (!lock) return Fail(lock.error());
  // From here the lock is released on every way out until the store owns it.
  struct LockGuard {
    int fd;
    ~LockGuard() {
      if (fd >= 0) ::close(fd);
    }
  } guard{*lock};

  if (auto st = CreateFile(path); !st) return Fail(st.error());
  auto db = Db::Open(path);
  if (!db) return Fail(db.error());
  Status ready = Configure(**db, limits);
  if (ready) ready = CheckIntegrity(**db);
  if (ready) ready = Migrate(**db, SchemaSteps());
  if (!ready) return Fail(Explained(**db, ready.error()));

  guard.fd = -1;
  return std::unique_ptr<RouterStore>(new RouterStore(std::move(path), limits, std::move(*db), *lock));
}

RouterStore::RouterStore(std::string path, StoreLimits limits, std::unique_ptr<Db> db, int lock_fd)
    : path_(std::move(path)), limits_(limits), db_(std::move(db)), lock_fd_(lock_fd) {
}

RouterStore::~RouterStore() {
  batch_.reset();  // an open batch is rolled back
  db_.reset();     // closed (and checkpointed) before another router may take the lock
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status RouterStore::BeginBatch(std::string_view op) {
  if (batch_) return Fail(Errc::invalid_argument, "router store " + path_ + ": a batch is open already");
  auto tx = Transaction::Begin(*db_, op);
  if (!tx) return Fail(tx.error());
  batch_ = std::make_unique<Transaction>(std::move(*tx));
  return {};
}

Status RouterStore::CommitBatch(Checkpoint checkpoint) {
  if (!batch_) return Fail(Errc::invalid_argument, "router store " + path_ + ": no batch is open");
  auto tx = std::move(batch_);
  // The batch's evictions, in it: a failure here rolls all of it back (tx's destructor). A spoiled
  // batch evicts nothing: its commit rolls it back and says why.
  if (db_->spoiled()) {
    DropDeferredEvictions();
    return tx->Commit();
  }
  if (auto st = EvictDedupeAtCommit(); !st) return st;
  if (std::exchange(evict_bots_at_commit_, false)) {
    if (auto st = EvictBotMessages(); !st) return st;
  }
  if (checkpoint == Checkpoint::as_due) return tx->Commit();  // on failure its destructor rolls it back
  // The automatic checkpoint is the WAL hook sqlite3_wal_autocheckpoint installs, run after each
  // commit that leaves the WAL at or past its threshold: off for this commit only.
  sqlite3_wal_autocheckpoint(db_->handle(), 0);
  Status st = tx->Commit();
  tx.reset();  // a failed commit is rolled back before the checkpoint comes back
  sqlite3_wal_autocheckpoint(db_->handle(), kAutoCheckpointPages);
  return st;
}

void RouterStore::AbortBatch() {
  batch_.reset();
  DropDeferredEvictions();
}

void RouterStore::DropDeferredEvictions() noexcept {
  dedupe_.evict_at_commit[0] = dedupe_.evict_at_commit[1] = false;
  evict_bots_at_commit_ = false;
}

}  // namespace sessionturn::routing
