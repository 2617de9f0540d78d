// RouterStore's file: reopening keeps everything, modes, the one-router lock (in this process and in
// another), a child killed with SIGKILL mid-writes loses no committed write, and files it must refuse
// (a newer schema, garbage, a damaged store) are refused naming the path.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "routing/store_schema.hpp"
#include "test_store_support.hpp"

using namespace store_test;

namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Runs `child` in a forked process and returns its exit status (the child never returns to Catch).
template <typename F>
int InChild(F child) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(child());
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("store: everything written is there after closing and opening again", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("state/router.db");
  const ChatRef chat{"slack", "T1", "C123"};
  {
    auto s = OpenStore(path);
    REQUIRE(s->BindThread(Binding{Thread(), "sess", At(1), true}));
    REQUIRE(s->AddChatSession(ChatSession{chat, "sess", At(2), "main"}));
    REQUIRE(s->SetCurrent(chat, "sess"));
    REQUIRE(s->IndexBotMessage(BotMessage{chat, "m1", "sess", BotMessageKind::question}));
    REQUIRE(s->AcceptMessage(Thread(), "sess", Message("queued"), std::vector<DedupeKey>{{DedupeKind::event, "E1"}},
                             At(3)));
    const auto started = *s->AddInbox(Thread(), "sess", Message("running"), At(4));
    REQUIRE(s->BeginTurn(started, "req-1", At(5), "ph"));
    REQUIRE(s->UpdateTurnCursor("req-1", TurnCursor{7, "j1", "turn-1", 2}));
    OutboxEntry reply;
    reply.thread = Thread();
    reply.session = "sess";
    reply.request_id = "req-0";
    reply.parts = {"done"};
    REQUIRE(s->AddOutbox(reply));
    OpenQuestion q;
    q.id = "q1";
    q.session = "sess";
    q.thread = Thread();
    q.message_id = "m1";
    q.questions = {InputQuestion{"a", "", "Why?", {}, false, false}};
    REQUIRE(s->AddQuestion(q));
  }
  auto s = OpenStore(path);
  CHECK(**s->FindBinding(Thread()) == Binding{Thread(), "sess", At(1), true});
  CHECK(s->ListChatSessions(chat)->at(0) == ChatSession{chat, "sess", At(2), "main"});
  CHECK(**s->Current(chat) == "sess");
  CHECK((*s->FindBotMessage(chat, "m1"))->kind == BotMessageKind::question);
  CHECK(*s->SeenOrRemember(DedupeKind::event, "E1"));
  REQUIRE(s->ListInbox()->size() == 1);
  CHECK(s->ListInbox()->at(0).message.text == "queued");
  REQUIRE(s->ListTurns()->size() == 1);
  CHECK(s->ListTurns()->at(0).cursor == TurnCursor{7, "j1", "turn-1", 2});
  CHECK(s->ListTurns()->at(0).placeholder_id == "ph");
  CHECK(s->ListOutbox()->at(0).parts == std::vector<std::string>{"done"});
  CHECK((*s->FindQuestion("q1"))->questions.at(0).question == "Why?");
}

TEST_CASE("store: the file is 0600 in a directory created 0700", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("a/b/router.db");
  auto s = OpenStore(path);
  CHECK(ModeOf(dir.File("a")) == 0700);
  CHECK(ModeOf(dir.File("a/b")) == 0700);
  CHECK(ModeOf(path) == 0600);
  CHECK(ModeOf(path + ".lock") == 0600);
  REQUIRE(s->SeenOrRemember(DedupeKind::event, "x"));
  CHECK(ModeOf(path + "-wal") == 0600);  // SQLite gives its side files the database's mode
  // An existing directory keeps its owner's mode.
  CHECK(ModeOf(dir.path()) == 0700);  // mkdtemp's
  REQUIRE(::chmod(dir.File("a").c_str(), 0750) == 0);
  s.reset();
  OpenStore(dir.File("a/other.db"));
  CHECK(ModeOf(dir.File("a")) == 0750);
}

TEST_CASE("store: a second Open of the same file is refused while the first is open", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  auto first = OpenStore(path);
  REQUIRE(first->SeenOrRemember(DedupeKind::event, "held"));

  auto second = RouterStore::Open(path);
  REQUIRE_FALSE(second);
  CHECK(second.error().code == Errc::conflict);
  CHECK_THAT(second.error().message, Catch::Contains("router store " + path + " is in use by another router (process " +
                                                     std::to_string(::getpid()) + ")"));

  // Another process is refused the same way, and the first store is untouched by the attempt.
  const int refused = InChild([&] {
    auto other = RouterStore::Open(path);
    return !other && other.error().code == Errc::conflict ? 0 : 1;
  });
  CHECK(refused == 0);
  CHECK(*first->SeenOrRemember(DedupeKind::event, "held"));

  first.reset();
  const int opened = InChild([&] {
    auto other = RouterStore::Open(path);
    return other && (*other)->SeenOrRemember(DedupeKind::event, "held").value_or(false) ? 0 : 1;
  });
  CHECK(opened == 0);
  auto again = OpenStore(path);
  CHECK(*again->SeenOrRemember(DedupeKind::event, "held"));
}

TEST_CASE("store: a child killed with SIGKILL mid-writes leaves every committed write", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    auto store = RouterStore::Open(path);
    if (!store) ::_exit(2);
    // Each message is one transaction of three rows (two keys, the entry); its number goes to the
    // parent only after it committed. Writes go on until the kill lands, mid-transaction or not.
    for (std::int64_t i = 1;; ++i) {
      const std::string n = std::to_string(i);
      std::vector<DedupeKey> keys{{DedupeKind::event, "E" + n}, {DedupeKind::message, "M" + n}};
      auto id = (*store)->AcceptMessage(Thread(), "sess", Message("message " + n), keys, At(i));
      if (!id || !*id) ::_exit(3);
      if (::write(pipe_fds[1], &i, sizeof i) != sizeof i) ::_exit(4);
    }
  }
  ::close(pipe_fds[1]);
  std::int64_t committed = 0;
  while (committed < 300) {
    std::int64_t n = 0;
    REQUIRE(::read(pipe_fds[0], &n, sizeof n) == sizeof n);
    committed = n;
  }
  REQUIRE(::kill(pid, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  ::close(pipe_fds[0]);

  auto s = OpenStore(path);
  auto inbox = s->ListInbox();
  REQUIRE(inbox.has_value());
  INFO("committed " << committed << ", found " << inbox->size());
  CHECK(static_cast<std::int64_t>(inbox->size()) >= committed);
  for (std::size_t i = 0; i < inbox->size(); ++i) {
    REQUIRE(inbox->at(i).id == static_cast<std::int64_t>(i) + 1);
    REQUIRE(inbox->at(i).message.text == "message " + std::to_string(i + 1));
  }
  // No transaction is half there: every entry has both its keys, and there are no other keys.
  s.reset();
  RawDb raw(path);
  const auto entries = static_cast<std::int64_t>(inbox->size());
  CHECK(raw.Int("SELECT count(*) FROM dedupe_event") == entries);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_message") == entries);
  CHECK(raw.Int("SELECT count(*) FROM (SELECT key FROM dedupe_event UNION ALL SELECT key FROM dedupe_message) WHERE key = 'M" + std::to_string(entries) + "'") == 1);
}

TEST_CASE("store: a store of a newer schema version is refused naming both versions", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  OpenStore(path).reset();
  {
    RawDb raw(path);
    raw.Exec("PRAGMA user_version = " + std::to_string(SchemaVersion() + 1));
  }
  auto s = RouterStore::Open(path);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::io_error);
  CHECK_THAT(s.error().message, Catch::Contains("router store " + path + " has schema version " + std::to_string(SchemaVersion() + 1) +
                                                ", newer than this build's " + std::to_string(SchemaVersion())));
  // Refused without a change: the file still says so, and the lock is free again.
  RawDb raw(path);
  CHECK(raw.Int("PRAGMA user_version") == SchemaVersion() + 1);
  CHECK(RouterStore::Open(path).error().code == Errc::io_error);
}

TEST_CASE("store: a file that is not a database is refused naming the path", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  std::string garbage = "this is not a SQLite database, only some text in a file called router.db\n";
  for (int i = 0; i < 6; ++i) garbage += garbage;
  WriteFile(path, garbage);
  auto s = RouterStore::Open(path);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::io_error);
  CHECK_THAT(s.error().message, Catch::Contains("router store " + path));
  CHECK_THAT(s.error().message, Catch::Contains("not a router store, or it is damaged"));
  // The file is left as it was for its owner to look at.
  std::ifstream in(path, std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == garbage);
}

TEST_CASE("store: a damaged store is refused naming the path", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  {
    auto s = OpenStore(path);
    for (int i = 0; i < 200; ++i) REQUIRE(s->AddInbox(Thread(), "sess", Message(std::string(500, 'x')), At(i)));
  }
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  const auto size = static_cast<std::size_t>(st.st_size);
  REQUIRE(size > 16 * 4096);
  // Past the first page (the header, the schema's start) or in the last quarter (the inbox's rows, found
  // by the integrity check at open): pages overwritten with noise.
  std::size_t from = 4096;
  SECTION("the schema") {
  }
  SECTION("the rows") {
    from = size - size / 4;
  }
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  const std::string noise(size - from, '\x5a');
  REQUIRE(::pwrite(fd, noise.data(), noise.size(), static_cast<off_t>(from)) == static_cast<ssize_t>(noise.size()));
  ::close(fd);

  auto s = RouterStore::Open(path);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::io_error);
  CHECK_THAT(s.error().message, Catch::Contains("router store " + path));
  CHECK_THAT(s.error().message, Catch::Contains("damaged") || Catch::Contains("corrupted"));
}

TEST_CASE("store: Open refuses an empty path and zero bounds", "[routing][store]") {
  TempDir dir;
  auto empty = RouterStore::Open("");
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == Errc::invalid_argument);
  StoreLimits no_bots;
  no_bots.bot_messages = 0;
  auto bots = RouterStore::Open(dir.File("a.db"), no_bots);
  REQUIRE_FALSE(bots);
  CHECK_THAT(bots.error().message, Catch::Contains("bot_messages"));
  StoreLimits no_keys;
  no_keys.dedupe_per_kind = 0;
  auto keys = RouterStore::Open(dir.File("a.db"), no_keys);
  REQUIRE_FALSE(keys);
  CHECK_THAT(keys.error().message, Catch::Contains("dedupe_per_kind"));
  // A directory where the file's directory should be.
  WriteFile(dir.File("file"), "x");
  auto not_dir = RouterStore::Open(dir.File("file/router.db"));
  REQUIRE_FALSE(not_dir);
  CHECK(not_dir.error().code == Errc::io_error);
  CHECK_THAT(not_dir.error().message, Catch::Contains(dir.File("file") + " is not a directory"));
}

TEST_CASE("store: a batch committed with Checkpoint::later leaves the WAL's checkpoint to the next commit",
          "[routing][store]") {
  // A checkpoint copies the WAL's pages into the database file: the file's size tells whether one ran.
  auto file_size = [](const std::string& p) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(p, ec);
    return ec ? std::uintmax_t{0} : n;
  };
  for (const bool later : {true, false}) {
    INFO((later ? "Checkpoint::later" : "Checkpoint::as_due"));
    Fixture f;
    const auto empty = file_size(f.path);
    // About 6 MB of messages: past SQLite's 1,000-page threshold (4 MB) in one commit.
    REQUIRE(f.store->BeginBatch("test"));
    for (int i = 0; i < 300; ++i) {
      REQUIRE(f.store->AddInbox(Thread(), "sess", Message(std::string(20000, 'x'), std::to_string(i)), At(i)));
    }
    REQUIRE(f.store->CommitBatch(later ? RouterStore::Checkpoint::later : RouterStore::Checkpoint::as_due));
    if (later) {
      CHECK(file_size(f.path) < empty + 1024 * 1024);
      CHECK(file_size(f.path + "-wal") > 4 * 1024 * 1024);
      // The next commit, however small, runs the checkpoint that is due.
      REQUIRE(f.store->BeginBatch("test"));
      REQUIRE(f.store->AddInbox(Thread(), "sess", Message("small", "next"), At(1000)));
      REQUIRE(f.store->CommitBatch());
    }
    CHECK(file_size(f.path) > empty + 5 * 1024 * 1024);
  }
}
