// The LocalBackend's record files: session.json as the SessionRecordCache gives it back (kept while
// the file's stamp stays the same, read again after an atomic rewrite or an edit in place), and
// ReadSmallFile's bounds.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "backend/local_store.hpp"
#include "local_backend_support.hpp"

namespace {

using namespace sessionturn;
using namespace sessionturn::local;
using backend_test::ReadFile;
using backend_test::WriteFile;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/st-records-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

SessionRecord Record(const std::string& message) {
  SessionRecord r;
  r.name = "s1";
  r.provider = "echo";
  r.workdir = "/tmp";
  r.created = WallClock::now();
  r.phase = SessionPhase::ready;
  r.message = message;
  return r;
}

void Settle() {
  std::this_thread::sleep_for(SessionRecordCache::kSettle + std::chrono::milliseconds(50));
}

// Rewrites the file's bytes in place (same inode), as an editor writing through the file would.
void EditInPlace(const std::string& path, const std::string& from, const std::string& to) {
  std::string text = ReadFile(path);
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);
  WriteFile(path, text);
  struct stat after {};
  REQUIRE(::stat(path.c_str(), &after) == 0);
  REQUIRE(after.st_ino == before.st_ino);
}

}  // namespace

TEST_CASE("session record cache: an atomic rewrite is seen at once, settled or not", "[backend][records]") {
  TempDir dir;
  const std::string path = dir.path + "/session.json";
  SessionRecordCache cache;
  REQUIRE(WriteSessionRecord(path, Record("first"), false));
  CHECK(cache.Read(path)->message == "first");
  Settle();
  CHECK(cache.Read(path)->message == "first");  // kept now
  REQUIRE(WriteSessionRecord(path, Record("second"), false));
  CHECK(cache.Read(path)->message == "second");  // a new inode: read again though just written
  REQUIRE(WriteSessionRecord(path, Record("third!"), false));
  CHECK(cache.Read(path)->message == "third!");
}

TEST_CASE("session record cache: an edit in place of the same size is seen", "[backend][records]") {
  TempDir dir;
  const std::string path = dir.path + "/session.json";
  SessionRecordCache cache;
  REQUIRE(WriteSessionRecord(path, Record("aaaa"), false));
  Settle();
  CHECK(cache.Read(path)->message == "aaaa");
  CHECK(cache.Read(path)->message == "aaaa");
  EditInPlace(path, "aaaa", "bbbb");
  CHECK(cache.Read(path)->message == "bbbb");
  Settle();
  CHECK(cache.Read(path)->message == "bbbb");
  EditInPlace(path, "bbbb", "cccc");
  CHECK(cache.Read(path)->message == "cccc");
}

TEST_CASE("session record cache: a missing or damaged file is the same error as ReadSessionRecord's, and not kept",
          "[backend][records]") {
  TempDir dir;
  const std::string path = dir.path + "/session.json";
  SessionRecordCache cache;
  auto missing = cache.Read(path);
  REQUIRE(!missing);
  CHECK(missing.error().code == Errc::not_found);

  REQUIRE(WriteSessionRecord(path, Record("fine"), false));
  Settle();
  CHECK(cache.Read(path)->message == "fine");
  WriteFile(path, "{not json");
  auto damaged = cache.Read(path);
  REQUIRE(!damaged);
  CHECK(damaged.error().code == Errc::io_error);
  CHECK(damaged.error().message == ReadSessionRecord(path).error().message);
  CHECK_THAT(damaged.error().message, Catch::Contains(path));

  REQUIRE(WriteSessionRecord(path, Record("mended"), false));
  CHECK(cache.Read(path)->message == "mended");
  std::filesystem::remove(path);
  auto gone = cache.Read(path);
  REQUIRE(!gone);
  CHECK(gone.error().code == Errc::not_found);
}

TEST_CASE("session record cache: Forget drops what is kept, and a recreated file is read", "[backend][records]") {
  TempDir dir;
  const std::string path = dir.path + "/session.json";
  SessionRecordCache cache;
  REQUIRE(WriteSessionRecord(path, Record("one"), false));
  Settle();
  CHECK(cache.Read(path)->message == "one");
  cache.Forget(path);
  cache.Forget(path);  // twice is fine
  std::filesystem::remove(path);
  REQUIRE(WriteSessionRecord(path, Record("two"), false));
  CHECK(cache.Read(path)->message == "two");
}

TEST_CASE("record files: a field of another type or out of range is an io_error naming it, not an exception",
          "[backend][records]") {
  TempDir dir;
  const std::string session = dir.path + "/session.json";
  REQUIRE(WriteSessionRecord(session, Record("fine"), false));
  const std::string good = ReadFile(session);
  // 2^32 + 1 would read as version 1 if narrowed to an int.
  for (const char* version : {"4294967297", "\"1\"", "1.0"}) {
    std::string text = good;
    const auto at = text.find("\"version\": ");
    REQUIRE(at != std::string::npos);
    const auto end = text.find_first_of(",\n}", at);
    text.replace(at, end - at, std::string("\"version\": ") + version);
    WriteFile(session, text);
    INFO(text);
    auto bad = ReadSessionRecord(session);
    REQUIRE(!bad);
    CHECK(bad.error().code == Errc::io_error);
    CHECK_THAT(bad.error().message, Catch::Contains(session) && Catch::Contains("version"));
  }

  const std::string runtime = dir.path + "/runtime.json";
  WriteFile(runtime, R"({"pid":12,"inProcess":true})");
  auto read = ReadRuntimeRecord(runtime);
  REQUIRE(read);
  CHECK(read->in_process);
  WriteFile(runtime, R"({"pid":12})");
  CHECK_FALSE(ReadRuntimeRecord(runtime)->in_process);
  for (const char* odd : {R"({"pid":12,"inProcess":"true"})", R"({"pid":12,"inProcess":1})"}) {
    WriteFile(runtime, odd);
    INFO(odd);
    auto bad = ReadRuntimeRecord(runtime);
    REQUIRE(!bad);
    CHECK(bad.error().code == Errc::io_error);
    CHECK_THAT(bad.error().message, Catch::Contains(runtime) && Catch::Contains("\"inProcess\" is not a boolean"));
  }
}
