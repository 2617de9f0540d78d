// The router store when SQLite itself rolls a batch's transaction back (a full disk, an I/O error):
// nothing after it may run outside the batch, in autocommit, and outlive the batch's rollback.
// RAISE(ROLLBACK) in a trigger is SQLite rolling the whole transaction back from inside a statement,
// as it does on those errors.
#include <string>
#include <vector>

#include "test_store_support.hpp"

using namespace store_test;

namespace {

std::int64_t CountKeys(RawDb& raw, const std::string& in) {
  return raw.Int("SELECT count(*) FROM (SELECT key FROM dedupe_event UNION ALL SELECT key FROM dedupe_message) "
                 "WHERE key IN (" + in + ")");
}

}  // namespace

TEST_CASE("store: a batch SQLite rolled back by itself fails every later call and its commit, and none writes alone",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  {
    RawDb raw(f.path);
    raw.Exec("CREATE TRIGGER rollback_inbox BEFORE INSERT ON work BEGIN SELECT RAISE(ROLLBACK, 'injected rollback'); END");
  }
  REQUIRE(s.BeginBatch("test batch"));
  CHECK_FALSE(*s.SeenOrRemember(DedupeKind::message, "M1"));
  REQUIRE(s.SetCursor("offset", "41", At(1)));

  // The message's row waits in the batch (Db::Append; its keys were written before the read of the
  // next work id); the next statement writes it first, and its insert takes the whole transaction
  // with it.
  auto waiting = s.AcceptMessage(Thread(), "sess", Message("x", "2"), Keys("Ev2", "M2"), At(2));
  REQUIRE(waiting);
  auto failed = s.SetCursor("offset", "42", At(2));
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == Errc::io_error);
  CHECK_THAT(failed.error().message, Catch::Contains("SetCursor: writing the 1 row appended before it: add a "
                                                     "message to the inbox: injected rollback"));

  // A call that would open a transaction of its own, and a single statement, both fail: neither may
  // commit by itself while the batch looks open to its caller.
  auto joined = s.SeenOrRemember(DedupeKind::message, "M3");
  REQUIRE_FALSE(joined);
  CHECK(joined.error().code == Errc::io_error);
  CHECK_THAT(joined.error().message, Catch::Contains("SQLite rolled the transaction back"));
  auto single = s.SetCursor("offset", "42", At(3));
  REQUIRE_FALSE(single);
  CHECK(single.error().code == Errc::io_error);
  CHECK_THAT(single.error().message, Catch::Contains("SetCursor: the open transaction was rolled back by SQLite"));

  auto commit = s.CommitBatch();
  REQUIRE_FALSE(commit);
  CHECK(commit.error().code == Errc::io_error);
  CHECK_THAT(commit.error().message, Catch::Contains("rolled back, not committed"));
  CHECK_FALSE(s.InBatch());

  {
    RawDb raw(f.path);
    CHECK(CountKeys(raw, "'M1', 'M2', 'Ev2', 'M3'") == 0);
    CHECK(raw.Int("SELECT count(*) FROM cursors") == 0);
    CHECK(raw.Int("SELECT count(*) FROM work") == 0);
    raw.Exec("DROP TRIGGER rollback_inbox");
  }
  // The store goes on: the keys the rollback took are unseen again, and the next batch commits.
  REQUIRE(s.BeginBatch("next batch"));
  CHECK_FALSE(*s.SeenOrRemember(DedupeKind::message, "M3"));
  auto accepted = s.AcceptMessage(Thread(), "sess", Message("x", "2"), Keys("Ev2", "M2"), At(4));
  REQUIRE(accepted);
  CHECK(accepted->has_value());
  REQUIRE(s.SetCursor("offset", "42", At(4)));
  REQUIRE(s.CommitBatch());
  CHECK(s.Cursor("offset")->value_or("") == "42");
  CHECK(s.ListInbox()->size() == 1);
  RawDb raw(f.path);
  CHECK(CountKeys(raw, "'M2', 'Ev2', 'M3'") == 3);
}

TEST_CASE("store: a call SQLite rolled back outside a batch leaves nothing and the next call runs", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  RawDb raw(f.path);
  raw.Exec("CREATE TRIGGER rollback_inbox BEFORE INSERT ON work BEGIN SELECT RAISE(ROLLBACK, 'injected rollback'); END");
  auto failed = s.AcceptMessage(Thread(), "sess", Message("x", "5"), Keys("Ev5", "M5"), At(1));
  REQUIRE_FALSE(failed);
  CHECK_THAT(failed.error().message, Catch::Contains("injected rollback"));
  CHECK(CountKeys(raw, "'Ev5', 'M5'") == 0);
  // Its own transaction ended with it: the next calls are not refused.
  REQUIRE(s.SetCursor("offset", "7", At(2)));
  CHECK_FALSE(*s.SeenOrRemember(DedupeKind::message, "M6"));
  raw.Exec("DROP TRIGGER rollback_inbox");
  auto accepted = s.AcceptMessage(Thread(), "sess", Message("x", "5"), Keys("Ev5", "M5"), At(3));
  REQUIRE(accepted);
  CHECK(accepted->has_value());
  CHECK(CountKeys(raw, "'Ev5', 'M5', 'M6'") == 3);
}
