// Shared by the RouterStore tests: a scratch directory, an opened store in it, sample values and a
// raw SQLite connection to the same file (to look under the store, or to break it on purpose).
#pragma once

#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "routing/store.hpp"

namespace store_test {

using namespace sessionturn;
using namespace sessionturn::routing;
using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "st-store-XXXXXX").string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::unique_ptr<RouterStore> OpenStore(const std::string& path, StoreLimits limits = {}) {
  auto store = RouterStore::Open(path, limits);
  INFO((store ? std::string() : store.error().ToString()));
  REQUIRE(store.has_value());
  return std::move(*store);
}

// A scratch directory with a store in it.
struct Fixture {
  TempDir dir;
  std::string path = dir.File("router.db");
  std::unique_ptr<RouterStore> store = OpenStore(path);
};

inline StoreTime At(std::int64_t ms) {
  return StoreTime(std::chrono::duration_cast<StoreTime::duration>(std::chrono::milliseconds(ms)));
}

inline ThreadRef Thread(std::string thread = "1790000000.000100", std::string chat = "C123") {
  return ThreadRef{"slack", "T1", std::move(chat), std::move(thread)};
}

inline InboundMessage Message(std::string text, std::string id = "1790000001.000200") {
  InboundMessage m;
  m.platform = "slack";
  m.workspace = "T1";
  m.chat = "C123";
  m.thread = "1790000000.000100";
  m.message_id = std::move(id);
  m.author_id = "U1";
  m.author_name = "Ada";
  m.text = std::move(text);
  m.event_id = "Ev1";
  m.received = At(1'790'000'001'000);
  return m;
}

// A second connection to the store's file, outside the store (its lock is the store's own flock, not
// SQLite's, so this one may read and write).
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    REQUIRE(sqlite3_open(path.c_str(), &db_) == SQLITE_OK);
    sqlite3_busy_timeout(db_, 10000);  // a store in use (a Router's) may hold the write lock a moment
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void Exec(const std::string& sql) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    INFO(sql << ": " << (error ? error : ""));
    sqlite3_free(error);
    REQUIRE(rc == SQLITE_OK);
  }
  // Whether `sql` ran (a constraint it breaks makes it fail).
  bool TryExec(const std::string& sql) { return sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK; }
  std::int64_t Int(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
    const std::int64_t v = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    return v;
  }
  std::string Text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    std::string v = text ? std::string(text, static_cast<std::size_t>(sqlite3_column_bytes(stmt, 0))) : std::string();
    sqlite3_finalize(stmt);
    return v;
  }

 private:
  sqlite3* db_ = nullptr;
};

// A message's two dedupe keys, as AcceptMessage takes them.
inline std::vector<DedupeKey> Keys(const std::string& event, const std::string& message) {
  return {DedupeKey{DedupeKind::event, event}, DedupeKey{DedupeKind::message, message}};
}

}  // namespace store_test
