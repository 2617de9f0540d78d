// The Router across restarts: a bot killed with SIGKILL mid-turn delivers the reply after it comes
// back, exactly once and into the same placeholder; a reply the platform kept refusing is delivered
// from the outbox by the next start; a graceful shutdown tells the thread once and leaves the turn
// running for the next start.
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <asio.hpp>
#include <catch2/catch.hpp>

#include "router_rig.hpp"

using namespace router_test;

namespace {

constexpr const char* kChildTest = "router: helper process (a bot that is killed mid-turn)";
constexpr const char* kChildRootEnv = "ST_ROUTER_HELPER_ROOT";
constexpr const char* kChildScriptEnv = "ST_ROUTER_HELPER_SCRIPT";
constexpr const char* kChildWaitEnv = "ST_ROUTER_HELPER_WAIT";  // the text whose message the child reports
constexpr const char* kChildFirstEnv = "ST_ROUTER_HELPER_FIRST";  // optional: a message whose turn ends first

RouterOptions Options(const TempRoot& root) {
  RouterOptions o;
  o.owner_uid = "test-owner";
  o.routes = {RouteConfig{}};
  o.store_path = root.path() + "/router.db";
  o.progress_interval = 20ms;
  return o;
}

// A turn of 1.5 s that replies "reply to <prompt>".
std::string SlowScript(const TempRoot& root) {
  return root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 1500},
      {"type": "message", "text": "reply to {prompt}"}]]})");
}

// One turn in flight at a time: the other threads' messages wait in the router's inbox.
RouterOptions OneSlot(const TempRoot& root) {
  RouterOptions o = Options(root);
  o.max_in_flight = 1;
  return o;
}

LocalBackendOptions Backend(const std::string& root, const std::string& provider, bool in_process) {
  LocalBackendOptions b;
  b.state_dir = root + "/state";
  b.provider = provider;
  b.in_process = in_process;
  if (!in_process) OutOfProcess(b);
  return b;
}

// A bot over the LocalBackend in `root`: its Context, backend, recording adapter and Router, started.
// With `wrap`, the backend the Router gets is what it makes of the LocalBackend.
using WrapBackend = std::function<std::unique_ptr<SessionBackend>(std::unique_ptr<SessionBackend>)>;
struct Bot {
  Bot(const TempRoot& root, const std::string& provider, bool in_process, const std::string& id_prefix,
      const RouterOptions& options, const WrapBackend& wrap = {})
      : context(ContextOptions{2, {}, LogLevel::error}), adapter(context, ThreadedCaps(), id_prefix) {
    auto made = MakeLocalBackend(context, Backend(root.path(), provider, in_process));
    REQUIRE(made);
    backend = wrap ? wrap(std::move(*made)) : std::move(*made);
    auto r = Router::Create(context, *backend, adapter, options);
    REQUIRE(r);
    router = std::move(*r);
    router->Start();
  }
  ~Bot() {
    router.reset();
    backend.reset();
  }
  bool WaitDelivered(std::uint64_t n, std::chrono::milliseconds timeout = 60s) {
    return backend_test::Eventually([&] { return router->Stats().replies_delivered >= n; }, timeout);
  }
  Result<Disposition> Send(InboundMessage m) {
    std::promise<Result<Disposition>> taken;
    router->HandleMessage(std::move(m), [&](Result<Disposition> d) { taken.set_value(std::move(d)); });
    return taken.get_future().get();
  }

  Context context;
  RecordingAdapter adapter;
  std::unique_ptr<SessionBackend> backend;
  std::unique_ptr<Router> router;
};

// The restarted bot delivers the killed one's turn ("finished ...") once, into the placeholder the
// killed bot posted, and nowhere else.
void CheckDeliveredOnceInto(Bot& bot, const std::string& placeholder) {
  REQUIRE(bot.WaitDelivered(1));
  std::this_thread::sleep_for(500ms);
  CHECK(bot.adapter.Text(placeholder).find("finished") != std::string::npos);
  CHECK(bot.adapter.CountMessagesWith("finished") == 1);
  CHECK(Posts(bot.adapter.Ops(), "finished") == 0);
  CHECK(bot.router->Stats().replies_delivered == 1);
}

// The helper child, run until it reports the message that shows `awaited`, then killed: its id. With
// `first`, the same thread's turn of a message with that text ends before the awaited one starts.
std::string KilledBot(const TempRoot& root, const std::string& script, const std::string& awaited,
                      const std::string& first = {}) {
  std::vector<std::pair<std::string, std::string>> env = {
      {kChildRootEnv, root.path()}, {kChildScriptEnv, script}, {kChildWaitEnv, awaited}};
  if (!first.empty()) env.emplace_back(kChildFirstEnv, first);
  backend_test::HelperChild child(env, kChildTest);
  std::string message = child.LineStartingWith("CHILD-READY ");
  child.KillNow();
  return message;
}

}  // namespace

// Run by the tests below as a child process: a bot that takes one message and, once a message of the
// thread shows the awaited text (its turn runs in a runtime process of its own), says which message
// that is and waits to be killed.
namespace {

// One integer from the router's store, read by a connection of the test's own while the router runs
// (WAL: a reader sees what was committed, nothing of a transaction still open).
std::int64_t StoreInt(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
  const std::int64_t v = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return v;
}

// The same from a thread of the Context's (a hook the router calls): no Catch assertion there, -1 when
// the read fails, for the test's thread to check.
std::int64_t StoreIntOffThread(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  std::int64_t v = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW) {
      v = sqlite3_column_int64(stmt, 0);
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return v;
}

// Runs SQL on the router's store from a connection of the test's own (waits for the router's writes).
void StoreExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  INFO(sql << ": " << (error ? error : ""));
  sqlite3_free(error);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

// The LocalBackend, looking at the store whenever the Router waits for a Session, which it does just
// before it submits a turn's prompt: how many turns had committed by then.
class StoreWatchingBackend : public ForwardingBackend {
 public:
  StoreWatchingBackend(std::unique_ptr<SessionBackend> inner, std::string db)
      : ForwardingBackend(std::move(inner)), db_(std::move(db)) {}
  void AsyncWaitReady(std::string name, std::chrono::steady_clock::time_point deadline, ReadyProgress progress,
                      CancellationToken cancel, BackendHandler<ReadyTarget> handler) override {
    turns_at_wait.push_back(StoreIntOffThread(db_, "SELECT count(*) FROM work WHERE request_id IS NOT NULL"));
    inner().AsyncWaitReady(std::move(name), deadline, std::move(progress), std::move(cancel), std::move(handler));
  }

  std::vector<std::int64_t> turns_at_wait;  // on the router's strand only, read after the turn

 private:
  const std::string db_;
};

}  // namespace

TEST_CASE("router: a turn's start is committed before its prompt, and its record stays until its reply is in",
          "[routing][router]") {
  TempRoot root;
  const std::string db = root.path() + "/router.db";
  StoreWatchingBackend* watching = nullptr;
  Rig rig(root, ThreadedCaps(), "echo", {}, {}, [&](std::unique_ptr<SessionBackend> inner) {
    auto w = std::make_unique<StoreWatchingBackend>(std::move(inner), db);
    watching = w.get();
    return std::unique_ptr<SessionBackend>(std::move(w));
  });
  // What another connection sees of the store as each post or edit goes out: the turn's record or
  // its stored reply (a reply of one part goes into its placeholder with the turn's record still there).
  std::mutex mu;
  std::vector<std::pair<std::string, std::int64_t>> outbox_at_send;  // text, turn and outbox rows
  rig.adapter.on_send = [&](const SentOp& op) {
    const auto rows = StoreIntOffThread(
        db, "SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM work WHERE request_id IS NOT NULL)");
    std::lock_guard lock(mu);
    outbox_at_send.emplace_back(op.text, rows);
  };
  REQUIRE(rig.Send(Msg("1", "hello")));
  REQUIRE(rig.WaitDelivered(1));
  rig.router.reset();  // its strand's work done: the watcher's records are complete
  REQUIRE(watching->turns_at_wait.size() == 1);
  CHECK(watching->turns_at_wait[0] == 1);  // the turn's record was in the file before its prompt went out
  std::lock_guard lock(mu);
  // The last send showing the reply is the reply itself (progress edits before it show its tail).
  std::optional<std::int64_t> rows_at_reply;
  for (const auto& [text, rows] : outbox_at_send) {
    if (text.find("echo #1:") != std::string::npos) rows_at_reply = rows;
  }
  REQUIRE(rows_at_reply.has_value());
  CHECK(*rows_at_reply == 1);  // the turn (or its stored reply) was in the file while its reply was sent
}

namespace {

// A commit that holds a write `when` fires on (a trigger's timing and event) fails: the trigger
// inserts a row breaking a deferred foreign key, which SQLite checks at COMMIT.
void BreakCommitsOn(const std::string& db, const std::string& when) {
  StoreExec(db, "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
                "CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);"
                "CREATE TRIGGER break_commits " + when + " BEGIN INSERT INTO child VALUES (42); END;");
}

}  // namespace

TEST_CASE("router: a failed commit of written-behind records removes a delivered reply's outbox row again",
          "[routing][router]") {
  TempRoot root;
  const std::string db = root.path() + "/router.db";
  Rig rig(root);
  // The delivered reply's records fail their commit: indexing the reply (posted as a message of its
  // own, since its placeholder's post failed) writes a row that breaks a deferred foreign key, which
  // SQLite checks at COMMIT. The removal of the outbox row, run again on its own, does not touch that
  // table, and commits.
  BreakCommitsOn(db, "AFTER INSERT ON bot_messages WHEN NEW.kind = 'reply'");
  rig.adapter.fail_posts = 1;  // the placeholder
  REQUIRE(rig.Send(Msg("1", "hello")));
  REQUIRE(rig.WaitDelivered(1));
  CHECK(Posts(rig.adapter.Ops(), "echo #1:") == 1);  // a message of its own: indexed, the trigger fired
  rig.router.reset();
  CHECK(StoreInt(db, "SELECT count(*) FROM outbox") == 0);
  CHECK(StoreInt(db, "SELECT count(*) FROM child") == 0);
  CHECK(StoreInt(db, "SELECT count(*) FROM bot_messages WHERE kind = 'reply'") == 0);  // that record was lost
}

TEST_CASE("router: a reply whose storing cannot commit goes out once, and its turn's record goes once it is in",
          "[routing][router]") {
  TempRoot root;
  const std::string db = root.path() + "/router.db";
  Rig rig(root);
  // Every commit that stores a reply fails (a deferred foreign key its outbox row breaks): the pass's,
  // and the store's second try on its own. The reply then goes out unstored; its turn's record must go
  // once it is in, or a restart would re-attach to the turn and send the reply a second time.
  BreakCommitsOn(db, "AFTER INSERT ON outbox");
  rig.adapter.fail_posts = 1;  // the placeholder: the reply is stored before it is posted
  REQUIRE(rig.Send(Msg("1", "hello")));
  REQUIRE(rig.WaitDelivered(1));
  CHECK(Posts(rig.adapter.Ops(), "echo #1:") == 1);
  CHECK(rig.LoggedWith("could not be stored") == 1);
  rig.router.reset();
  CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE request_id IS NOT NULL") == 0);
  CHECK(StoreInt(db, "SELECT count(*) FROM outbox") == 0);
  CHECK(StoreInt(db, "SELECT count(*) FROM child") == 0);
}

TEST_CASE("router: what it writes behind (a placeholder's ids, a delivered reply) commits while it runs",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  REQUIRE(rig.Send(Msg("1", "hello")));
  REQUIRE(rig.WaitDelivered(1));
  // The delivered reply's records (its index entry, the outbox row's removal) were the turn's last
  // writes, written behind: the pass's own commit makes them durable, with no stop and no later write.
  const std::string db = root.path() + "/router.db";
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (StoreInt(db, "SELECT count(*) FROM outbox") != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(StoreInt(db, "SELECT count(*) FROM outbox") == 0);
  CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE request_id IS NOT NULL") == 0);
  // The placeholder became the reply: indexed once, as the turn's message.
  CHECK(StoreInt(db, "SELECT count(*) FROM bot_messages WHERE kind = 'placeholder'") == 1);
  CHECK(StoreInt(db, "SELECT count(*) FROM bot_messages") == 1);
}

TEST_CASE("router: helper process (a bot that is killed mid-turn)", "[.][routing][router]") {
  const char* root = std::getenv(kChildRootEnv);
  const char* script = std::getenv(kChildScriptEnv);
  const char* wait = std::getenv(kChildWaitEnv);
  if (root == nullptr || script == nullptr || wait == nullptr) return;  // run only as the helper
  const std::string awaited = wait;
  Context context(ContextOptions{2, {}, LogLevel::warning});
  auto backend = MakeLocalBackend(context, Backend(root, std::string("script:") + script, false));
  REQUIRE(backend);
  RecordingAdapter adapter(context, ThreadedCaps(), "child-");
  RouterOptions o;
  o.owner_uid = "test-owner";
  o.routes = {RouteConfig{}};
  o.store_path = std::string(root) + "/router.db";
  o.progress_interval = 20ms;
  auto router = Router::Create(context, **backend, adapter, o);
  REQUIRE(router);
  (*router)->Start();
  if (const char* first = std::getenv(kChildFirstEnv)) {
    (*router)->HandleMessage(Msg("0", first));
    REQUIRE(backend_test::Eventually([&] { return (*router)->Stats().replies_delivered >= 1; }, 60s));
  }
  (*router)->HandleMessage(Msg("1", "the long job"));
  // A delta comes after turn.started: the runtime accepted the turn, and the router recorded it. A
  // question is recorded once its post's handler ran, just after the adapter saw it.
  REQUIRE(adapter.WaitFor([&](const std::vector<SentOp>& ops) { return Sent(ops, awaited); }));
  std::this_thread::sleep_for(200ms);
  std::printf("CHILD-READY %s\n", adapter.FindMessage(awaited).c_str());
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::minutes(5));  // killed long before
}

TEST_CASE("router: a bot killed with SIGKILL mid-turn delivers the reply after its restart, exactly once",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", backend_test::kSlowScript);
  const std::string placeholder = KilledBot(root, script, "working on");
  REQUIRE_FALSE(placeholder.empty());
  // The runtime process outlived the bot; its turn goes on. The bot comes back.
  Bot bot(root, "script:" + script, false, "p", Options(root));
  CheckDeliveredOnceInto(bot, placeholder);
}

// The turn's record names where the Session's journal stood when it began (the end of the turn before
// it), not the turn itself (no write when the runtime accepts it): the restart finds it from there by
// its request id.
TEST_CASE("router: a bot killed mid-turn re-attaches from where the journal stood before the turn, exactly once",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("two.json", R"json({"turns":[[{"type":"message","text":"quick {prompt}"}],
    [{"type":"delta","text":"working on {prompt}"},{"type":"sleep","ms":2500},
     {"type":"message","text":"finished {prompt} (#{n})"}]]})json");
  const std::string placeholder = KilledBot(root, script, "working on", "warm up");
  REQUIRE_FALSE(placeholder.empty());
  const std::string db = root.path() + "/router.db";
  REQUIRE(StoreInt(db, "SELECT count(*) FROM work WHERE request_id IS NOT NULL") == 1);
  CHECK(StoreInt(db, "SELECT last_event_id FROM work WHERE request_id IS NOT NULL") > 0);  // the first turn's end
  CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE request_id IS NOT NULL AND journal_id <> '' AND turn_id = ''") == 1);
  // A request id is "rt-" and 16 hex digits.
  CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE length(request_id) = 19 AND request_id GLOB "
                     "'rt-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]"
                     "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'") == 1);
  Bot bot(root, "script:" + script, false, "p", Options(root));
  CheckDeliveredOnceInto(bot, placeholder);
  CHECK(bot.adapter.CountMessagesWith("quick warm up") == 0);  // the earlier turn is not delivered again
}

TEST_CASE("router: a question open when the bot was killed is answered in the chat after the restart",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  const std::string question = KilledBot(root, script, "Which language?");
  REQUIRE_FALSE(question.empty());
  Bot bot(root, "script:" + script, false, "p", Options(root));
  // The question is still open, in the message the killed bot posted: a reply to it answers it.
  auto answer = Msg("2", "2");
  answer.reply_to_message_id = question;
  auto taken = bot.Send(answer);
  REQUIRE(taken);
  CHECK(*taken == Disposition::accepted);
  REQUIRE(bot.WaitDelivered(1));
  CHECK(bot.adapter.WaitForText("Answers: lang=Python"));
  CHECK(bot.adapter.Text(question).find("Answered by Ada U1: Python") != std::string::npos);
  std::this_thread::sleep_for(300ms);
  // Not asked a second time.
  CHECK(Posts(bot.adapter.Ops(), "Which language?") == 0);
  CHECK(bot.adapter.CountMessagesWith("Answers: lang=Python") == 1);
}

namespace {

// The LocalBackend, whose WaitReady calls are held until Release(): after a restart, the re-attached
// turn waits until then before it asks its question again (and an answer, until then, to reach it).
class ReadyHeld : public ForwardingBackend {
 public:
  explicit ReadyHeld(std::unique_ptr<SessionBackend> inner) : ForwardingBackend(std::move(inner)) {}
  ~ReadyHeld() override { Release(); }
  void AsyncWaitReady(std::string name, std::chrono::steady_clock::time_point deadline, ReadyProgress progress,
                      CancellationToken cancel, BackendHandler<ReadyTarget> handler) override {
    auto call = [this, name = std::move(name), deadline, progress = std::move(progress), cancel = std::move(cancel),
                 handler = std::move(handler)]() mutable {
      inner().AsyncWaitReady(std::move(name), deadline, std::move(progress), std::move(cancel), std::move(handler));
    };
    {
      std::lock_guard lock(mu_);
      if (holding_) {
        held_.push_back(std::move(call));
        return;
      }
    }
    call();
  }
  void Release() {
    std::vector<std::function<void()>> held;
    {
      std::lock_guard lock(mu_);
      holding_ = false;
      held.swap(held_);
    }
    for (auto& call : held) asio::post(GetContext().io(), std::move(call));
  }

 private:
  std::mutex mu_;
  bool holding_ = true;
  std::vector<std::function<void()>> held_;
};

}  // namespace

// Who may answer a question kept over a restart, before its re-attached turn asks again: the rules of
// the route of the question's Session (here: its admins), not the first route's.
TEST_CASE("router: a question kept over a restart is answered under its own route's rules before its turn asks again",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  RouterOptions options = Options(root);
  RouteConfig elsewhere;
  elsewhere.name = "elsewhere";
  elsewhere.chats = {"C0"};
  RouteConfig here;
  here.name = "here";
  here.chats = {"C1"};  // Msg's chat
  here.admins = {"U9"};
  options.routes = {elsewhere, here};
  const std::string db = root.path() + "/router.db";
  std::string question;
  {
    Bot first(root, "script:" + script, false, "first-", options);
    REQUIRE(*first.Send(Msg("1", "pick a language")) == Disposition::accepted);
    REQUIRE(first.adapter.WaitForText("Which language?"));
    question = first.adapter.FindMessage("Which language?");
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (StoreInt(db, "SELECT count(*) FROM questions") == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(5ms);
    }
    REQUIRE(first.router->ShutdownAndWait());
  }
  REQUIRE(StoreInt(db, "SELECT count(*) FROM questions") == 1);
  ReadyHeld* held = nullptr;
  Bot second(root, "script:" + script, false, "second-", options, [&held](std::unique_ptr<SessionBackend> inner) {
    auto b = std::make_unique<ReadyHeld>(std::move(inner));
    held = b.get();
    return b;
  });
  // The route's admin, not the turn's author, answers while the re-attached turn still waits.
  auto answer = Msg("2", "2", "T1", "U9");
  answer.reply_to_message_id = question;
  REQUIRE(*second.Send(answer) == Disposition::accepted);
  REQUIRE(second.adapter.WaitForText("Answered by Ada U9: Python"));
  held->Release();  // answered while its turn waited for the Session: the turn is back only now
  REQUIRE(second.WaitDelivered(1));
  INFO(second.adapter.Dump());
  CHECK(second.adapter.WaitForText("Answers: lang=Python"));
  CHECK(second.adapter.CountMessagesWith("Only the person") == 0);
}

TEST_CASE("router: a reply the platform kept refusing is delivered from the outbox after a restart",
          "[routing][router]") {
  TempRoot root;
  RouterOptions o = Options(root);
  o.delivery_attempts = 1;
  {
    Bot down(root, "echo", true, "down-", o);
    down.adapter.fail_posts = 1000;
    REQUIRE(*down.Send(Msg("1", "hello")) == Disposition::accepted);
    // The placeholder, the reply and the note about it all fail.
    REQUIRE(down.adapter.WaitFor([](const std::vector<SentOp>& ops) {
      for (const auto& op : ops) {
        if (op.kind == "post" && !op.ok && op.text.find("could not be delivered") != std::string::npos) return true;
      }
      return false;
    }));
    CHECK(down.router->Stats().replies_delivered == 0);
  }
  Bot up(root, "echo", true, "up-", o);
  REQUIRE(up.WaitDelivered(1));
  std::this_thread::sleep_for(300ms);
  CHECK(Posts(up.adapter.Ops(), "echo #1:") == 1);
  CHECK(up.adapter.CountMessagesWith("hello") == 1);
  CHECK(up.router->Stats().replies_delivered == 1);
}

// A reply of one part goes into its placeholder before anything is stored; the turn's record goes after.
// Should it stay (here: its removal fails), a restart re-attaches to the ended turn and edits the same
// reply in again: still one reply, in the same message.
TEST_CASE("router: a reply in its placeholder whose turn's record stayed is edited in again after a restart, once",
          "[routing][router]") {
  TempRoot root;
  const std::string db = root.path() + "/router.db";
  std::string placeholder;
  {
    // The runtimes are processes of their own: they outlive the first bot.
    Bot first(root, "echo", false, "first-", Options(root));
    StoreExec(db, R"sql(
      CREATE TRIGGER keep_turns BEFORE DELETE ON work WHEN OLD.request_id IS NOT NULL
      BEGIN SELECT RAISE(ABORT, 'kept by the test'); END;)sql");
    REQUIRE(*first.Send(Msg("1", "hello")) == Disposition::accepted);
    REQUIRE(first.WaitDelivered(1));
    placeholder = first.adapter.FindMessage("echo #1:");
    REQUIRE_FALSE(placeholder.empty());
    CHECK(Posts(first.adapter.Ops(), "echo #1:") == 0);  // edited into its placeholder
  }
  CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE request_id IS NOT NULL") == 1);
  CHECK(StoreInt(db, "SELECT count(*) FROM outbox") == 0);
  StoreExec(db, "DROP TRIGGER keep_turns;");
  Bot second(root, "echo", false, "second-", Options(root));
  REQUIRE(second.WaitDelivered(1));
  CHECK(second.adapter.Text(placeholder).find("echo #1:") != std::string::npos);
  CHECK(Posts(second.adapter.Ops(), "echo #1:") == 0);
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (StoreInt(db, "SELECT count(*) FROM work") != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(StoreInt(db, "SELECT count(*) FROM work") == 0);
}

TEST_CASE("router: a graceful shutdown tells the thread once and the next start delivers the reply",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 1500},
      {"type": "message", "text": "finished after the restart"}]]})");
  std::string placeholder;
  {
    // The runtimes are processes of their own: they outlive the first bot.
    Bot first(root, "script:" + script, false, "first-", Options(root));
    REQUIRE(*first.Send(Msg("1", "long job")) == Disposition::accepted);
    REQUIRE(first.adapter.WaitForText("Working"));
    placeholder = first.adapter.FindMessage("Working");
    std::this_thread::sleep_for(300ms);  // the turn is running in the Session
    REQUIRE(first.router->ShutdownAndWait());
    CHECK(first.adapter.CountMessagesWith("The bot is restarting") == 1);
    auto late = first.Send(Msg("2", "too late"));
    REQUIRE_FALSE(late);
    CHECK(late.error().code == Errc::unavailable);
    CHECK(first.adapter.CountMessagesWith("finished after the restart") == 0);
  }
  Bot second(root, "script:" + script, false, "second-", Options(root));
  REQUIRE(second.WaitDelivered(1));
  std::this_thread::sleep_for(300ms);
  CHECK(second.adapter.CountMessagesWith("finished after the restart") == 1);
  // Into the first run's placeholder, not a new message.
  CHECK(second.adapter.Text(placeholder).find("finished after the restart") != std::string::npos);
  CHECK(Posts(second.adapter.Ops(), "finished after the restart") == 0);
}

namespace {

// A request of two questions, the first secret or not.
std::string TwoQuestions(const TempRoot& root, bool first_secret) {
  return root.File(first_secret ? "two-secret.json" : "two.json", std::string(R"({"turns": [[
    {"type": "question", "inputId": "pick", "questions": [
      {"id": "lang", "header": "Language", "question": "Which language?", "secret": )") +
                                                   (first_secret ? "true" : "false") + R"(,
       "options": [{"label": "C++"}, {"label": "Python"}]},
      {"id": "db", "header": "Database", "question": "Which database?",
       "options": [{"label": "Postgres"}, {"label": "SQLite"}]}]}]]})");
}

// The first bot asks both questions, takes the answer to the first and stops; the second is started.
void AnswerFirstThenRestart(const TempRoot& root, const std::string& script) {
  Bot first(root, "script:" + script, false, "first-", Options(root));
  REQUIRE(*first.Send(Msg("1", "start")) == Disposition::accepted);
  REQUIRE(first.adapter.WaitForText("Which database?"));
  REQUIRE(*first.Send(Msg("2", "2")) == Disposition::accepted);
  REQUIRE(first.adapter.WaitForText("Now question 2 of 2"));
  REQUIRE(first.router->ShutdownAndWait());
}

}  // namespace

TEST_CASE("router: a request of several questions answered in part before a restart goes on with the next one",
          "[routing][router]") {
  TempRoot root;
  const std::string script = TwoQuestions(root, false);
  AnswerFirstThenRestart(root, script);
  CHECK(StoreInt(root.path() + "/router.db", "SELECT count(*) FROM questions WHERE progress LIKE '%Python%'") == 1);
  Bot second(root, "script:" + script, false, "second-", Options(root));
  // The thread was told "Now question 2 of 2": the next reply answers the database question.
  REQUIRE(*second.Send(Msg("3", "1")) == Disposition::accepted);
  REQUIRE(second.adapter.WaitForText("Answers: db=Postgres lang=Python"));
  CHECK(second.adapter.CountMessagesWith("Now question 2 of 2") == 0);
}

TEST_CASE("router: a request whose secret answer was given before a restart is asked again from its first question",
          "[routing][router]") {
  TempRoot root;
  const std::string script = TwoQuestions(root, true);
  AnswerFirstThenRestart(root, script);
  // The store knows one answer was given, and not what it was.
  const std::string db = root.path() + "/router.db";
  CHECK(StoreInt(db, "SELECT count(*) FROM questions WHERE progress LIKE '%\"answered\":1%'") == 1);
  CHECK(StoreInt(db, "SELECT count(*) FROM questions WHERE progress LIKE '%Python%'") == 0);
  Bot second(root, "script:" + script, false, "second-", Options(root));
  REQUIRE(second.adapter.WaitForText("please answer them again, from question 1"));
  REQUIRE(*second.Send(Msg("3", "1")) == Disposition::accepted);
  REQUIRE(second.adapter.WaitForText("Now question 2 of 2"));
  REQUIRE(*second.Send(Msg("4", "2")) == Disposition::accepted);
  REQUIRE(second.adapter.WaitForText("Answers: db=SQLite lang=C++"));
}

TEST_CASE("router: a graceful shutdown waits for a reply's part on its way, so the next start does not post it again",
          "[routing][router]") {
  TempRoot root;
  std::string words;
  for (int i = 0; i < 1300; ++i) words += "word" + std::to_string(i % 10) + " ";  // a reply of two parts
  {
    Bot first(root, "echo", true, "first-", Options(root));
    first.adapter.hold_posts_with = "(2/2)";
    REQUIRE(*first.Send(Msg("1", words)) == Disposition::accepted);
    REQUIRE(first.adapter.WaitFor([](const std::vector<SentOp>& ops) {
      for (const auto& op : ops) {
        if (op.kind == "post" && op.text.find("(2/2)") != std::string::npos) return true;
      }
      return false;
    }));
    auto stopped = std::async(std::launch::async, [&first] { return first.router->ShutdownAndWait(); });
    // The part is on the platform; the shutdown waits for its post to come back (within its budget).
    CHECK(stopped.wait_for(300ms) == std::future_status::timeout);
    first.adapter.ReleaseHeld();
    REQUIRE(stopped.wait_for(10s) == std::future_status::ready);
    REQUIRE(stopped.get());
    CHECK(first.router->Stats().replies_delivered == 1);
  }
  Bot second(root, "echo", true, "second-", Options(root));
  // Its start looked at the outbox before it takes this message in.
  REQUIRE(*second.Send(Msg("2", "after the restart")) == Disposition::accepted);
  REQUIRE(second.adapter.WaitForText("after the restart"));
  CHECK(Posts(second.adapter.Ops(), "(2/2)") == 0);
  CHECK(Posts(second.adapter.Ops(), "(1/2)") == 0);
}

TEST_CASE("router: a message still waiting for a slot when the bot stops runs after the restart, into its receipt",
          "[routing][router]") {
  TempRoot root;
  const std::string script = SlowScript(root);
  const RouterOptions options = OneSlot(root);
  std::string receipt;
  {
    Bot first(root, "script:" + script, false, "first-", options);
    REQUIRE(*first.Send(Msg("1", "the long job", "T1")) == Disposition::accepted);
    REQUIRE(first.adapter.WaitForText("Working"));
    REQUIRE(*first.Send(Msg("2", "the waiting job", "T2")) == Disposition::accepted);
    REQUIRE(first.adapter.WaitForText("free slot"));
    receipt = first.adapter.FindMessage("free slot");
    REQUIRE(first.router->ShutdownAndWait());
    CHECK(first.adapter.CountMessagesWith("the waiting job") == 0);
  }
  Bot second(root, "script:" + script, false, "second-", options);
  REQUIRE(second.WaitDelivered(2));
  std::this_thread::sleep_for(300ms);
  INFO(second.adapter.Dump());
  // The waiting message ran once, its reply edited into the receipt the first bot posted.
  CHECK(second.adapter.Text(receipt).find("the waiting job") != std::string::npos);
  CHECK(second.adapter.CountMessagesWith("the waiting job") == 1);
  CHECK(Posts(second.adapter.Ops(), "the waiting job") == 0);
  CHECK(second.adapter.CountMessagesWith("the long job") == 1);
  CHECK(second.router->Stats().replies_delivered == 2);
}

// Rows the state file cannot give back (damage from outside: only the store writes their JSON): each
// is logged and its thread told, and the rest of what the last run left goes on. A turn whose stored
// message is damaged is re-attached all the same, so its reply still arrives.
TEST_CASE("router: rows the state file cannot give back are told in their threads, and the rest go on after a restart",
          "[routing][router]") {
  TempRoot root;
  const std::string script = SlowScript(root);
  const RouterOptions options = OneSlot(root);
  const std::string db = root.path() + "/router.db";
  std::string placeholder;
  {
    Bot first(root, "script:" + script, false, "first-", options);
    REQUIRE(*first.Send(Msg("1", "the long job", "T1")) == Disposition::accepted);
    // Running in its Session (the progress, not the placeholder's first "Working on it"): the runtime has it.
    REQUIRE(first.adapter.WaitForText("\u2699\uFE0F Working"));
    placeholder = first.adapter.FindMessage("\u2699\uFE0F Working");
    REQUIRE(*first.Send(Msg("2", "the damaged job", "T2")) == Disposition::accepted);
    REQUIRE(*first.Send(Msg("3", "the sound job", "T3")) == Disposition::accepted);
    REQUIRE(first.adapter.WaitFor([](const std::vector<SentOp>& ops) {
      return std::count_if(ops.begin(), ops.end(), [](const SentOp& op) {
               return op.text.find("free slot") != std::string::npos;
             }) >= 2;
    }));
    REQUIRE(first.router->ShutdownAndWait());
  }
  StoreExec(db, "UPDATE work SET message = 'not json' WHERE request_id IS NOT NULL");
  StoreExec(db, "UPDATE work SET message = '{\"text\": 7}' WHERE thread = 'T2'");
  StoreExec(db, R"sql(
    INSERT INTO outbox (platform, workspace, chat, thread, session, request_id, parts)
      VALUES ('slack', 'W1', 'C1', 'T4', 's4', '', '[1, 2]'), ('slack', 'W1', 'C1', 'T5', 's5', '', '["a kept note"]');
    INSERT INTO questions (id, session, request_id, input_id, platform, workspace, chat, thread, message_id,
                           questions, asker_id, deadline_ms)
      VALUES ('qbad', 's1', 'r-gone', 'in-1', 'slack', 'W1', 'C1', 'T1', 'm9', '{', 'U1', 0);)sql");

  Bot second(root, "script:" + script, false, "second-", options);
  // The turn whose message is damaged still delivers its reply, into its placeholder; the sound
  // message runs; the damaged message and reply are told in their threads; the kept note is delivered.
  REQUIRE(second.WaitDelivered(3));
  REQUIRE(second.adapter.WaitForText("Please send it again."));
  REQUIRE(second.adapter.WaitForText("cannot be delivered"));
  std::this_thread::sleep_for(300ms);
  INFO(second.adapter.Dump());
  CHECK(second.adapter.Text(placeholder).find("reply to") != std::string::npos);
  CHECK(second.adapter.CountMessagesWith("the sound job") == 1);
  CHECK(second.adapter.CountMessagesWith("the damaged job") == 0);
  CHECK(second.adapter.CountMessagesWith("a kept note") == 1);
  const auto ops = second.adapter.Ops();
  const auto told = [&ops](const std::string& thread, const std::string& text) {
    return std::count_if(ops.begin(), ops.end(), [&](const SentOp& op) {
      return op.kind == "post" && op.where.thread == thread && op.text.find(text) != std::string::npos;
    });
  };
  CHECK(told("T2", "could not be read back") == 1);
  CHECK(told("T4", "could not be read back") == 1);
  // Told once: the damaged rows are gone (the question's is asked again by its turn, were it open).
  CHECK(StoreInt(db, "SELECT count(*) FROM questions") == 0);
  CHECK(StoreInt(db, "SELECT count(*) FROM outbox") == 0);
  CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE thread = 'T2'") == 0);
}

namespace {

// A message for an idle Session, changed in the chat (`change`: its edit or deletion) between its
// acceptance and its turn's start: the change is handed over as the message's placeholder goes out,
// inside the burst that accepted it, so the router takes it in before that burst's turns start. By
// then the message's turn is recorded (it was accepted as a turn in flight: `recorded_at_post`).
struct ChangedBeforeStart {
  ChangedBeforeStart(const TempRoot& root, const std::string& script, InboundMessage change)
      : db(root.path() + "/router.db"), bot(root, "script:" + script, false, "first-", Options(root)) {
    bot.adapter.on_send = [this, change = std::move(change)](const SentOp& op) {
      if (op.kind != "post" || handed_over) return;
      handed_over = true;  // the first post is message 1's placeholder, sent from the router's strand
      recorded_at_post = StoreIntOffThread(db, "SELECT count(*) FROM work WHERE request_id IS NOT NULL");
      bot.router->HandleMessage(change, [this](Result<Disposition> d) { disposition.set_value(std::move(d)); });
    };
  }
  // Sends `message` and waits until the change was taken in: accepted, and the message's turn was
  // recorded with its acceptance, before its placeholder went out.
  void SendAndChange(InboundMessage message) {
    REQUIRE(*bot.Send(std::move(message)) == Disposition::accepted);
    auto changed = disposition.get_future();
    REQUIRE(changed.wait_for(30s) == std::future_status::ready);
    CHECK(*changed.get() == Disposition::accepted);
    CHECK(recorded_at_post == 1);
  }
  const std::string db;
  Bot bot;
  bool handed_over = false;  // on the router's strand only
  std::int64_t recorded_at_post = -1;
  std::promise<Result<Disposition>> disposition;
};

// The store holds nothing of the first bot's work: the next start neither re-attaches to a turn nor
// sends a message.
void CheckNothingLeft(const TempRoot& root, const std::string& script) {
  CHECK(StoreInt(root.path() + "/router.db", "SELECT count(*) FROM work") == 0);
  Bot second(root, "script:" + script, false, "second-", Options(root));
  std::this_thread::sleep_for(500ms);
  INFO(second.adapter.Dump());
  CHECK(second.adapter.Ops().empty());
  CHECK(second.router->Stats().turns_in_flight == 0);
}

InboundMessage Changed(const std::string& id, MessageKind kind, const std::string& text) {
  InboundMessage m = Msg(id, text);
  m.kind = kind;
  m.event_id = "ev-change-" + id;
  return m;
}

}  // namespace

TEST_CASE("router: a message deleted between its acceptance and its turn's start is withdrawn, also from the store",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("reply.json", R"({"turns": [[{"type": "message", "text": "reply to {prompt}"}]]})");
  {
    ChangedBeforeStart first(root, script, Changed("1", MessageKind::deleted, ""));
    first.SendAndChange(Msg("1", "the deleted job"));
    REQUIRE(first.bot.adapter.WaitForText("Withdrawn: the message was deleted"));
    std::this_thread::sleep_for(300ms);
    INFO(first.bot.adapter.Dump());
    CHECK(first.bot.adapter.CountMessagesWith("the deleted job") == 0);
    CHECK(first.bot.router->Stats().turns_in_flight == 0);
    REQUIRE(first.bot.router->ShutdownAndWait());
  }
  CheckNothingLeft(root, script);
}

TEST_CASE("router: a message edited between its acceptance and its turn's start runs as edited, once",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("reply.json", R"({"turns": [[{"type": "message", "text": "reply to {prompt}"}]]})");
  {
    ChangedBeforeStart first(root, script, Changed("1", MessageKind::edited, "the edited job"));
    first.SendAndChange(Msg("1", "the first draft"));
    REQUIRE(first.bot.WaitDelivered(1));
    std::this_thread::sleep_for(300ms);
    INFO(first.bot.adapter.Dump());
    CHECK(first.bot.adapter.CountMessagesWith("the edited job") == 1);
    CHECK(first.bot.adapter.CountMessagesWith("the first draft") == 0);
    REQUIRE(first.bot.router->ShutdownAndWait());
  }
  CheckNothingLeft(root, script);
}

TEST_CASE("router: messages accepted as turns whose start a stop came before run after the restart, once each",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("reply.json", R"({"turns": [[{"type": "message", "text": "reply to {prompt}"}]]})");
  const std::string db = root.path() + "/router.db";
  {
    Bot first(root, "script:" + script, false, "first-", Options(root));
    // As message 1's placeholder goes out (inside the burst that accepted it), message 2 and a stop
    // are handed over: message 2 is taken in before the stop, and both turns' starts come after it.
    bool handed_over = false;  // on the router's strand only
    std::promise<void> stopped;
    first.adapter.on_send = [&](const SentOp& op) {
      if (op.kind != "post" || handed_over) return;
      handed_over = true;
      first.router->HandleMessage(Msg("2", "the second job", "T2"), [](Result<Disposition>) {});
      first.router->Shutdown([&stopped] { stopped.set_value(); });
    };
    REQUIRE(*first.Send(Msg("1", "the first job")) == Disposition::accepted);
    REQUIRE(stopped.get_future().wait_for(30s) == std::future_status::ready);
    INFO(first.adapter.Dump());
    CHECK(first.adapter.CountMessagesWith("reply to") == 0);
    CHECK(first.router->Stats().turns_in_flight == 0);
    first.router.reset();
    // Both were recorded as turns with their acceptance; neither was sent.
    CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE request_id IS NOT NULL") == 2);
  }
  SECTION("as stored") {
    Bot second(root, "script:" + script, false, "second-", Options(root));
    REQUIRE(second.WaitDelivered(2));
    std::this_thread::sleep_for(300ms);
    INFO(second.adapter.Dump());
    // Re-attached, not found in their Sessions, and sent: each reply once.
    CHECK(second.adapter.CountMessagesWith("the first job") == 1);
    CHECK(second.adapter.CountMessagesWith("the second job") == 1);
    CHECK(second.router->Stats().replies_delivered == 2);
    second.router.reset();
    CHECK(StoreInt(db, "SELECT count(*) FROM work") == 0);
  }
  SECTION("one of them damaged in the state file") {
    // Nothing to send for it: its turn fails in its thread and asks for the message again.
    StoreExec(db, "UPDATE work SET message = 'not json' WHERE thread = 'T2'");
    Bot second(root, "script:" + script, false, "second-", Options(root));
    REQUIRE(second.adapter.WaitForText("please send it again"));
    REQUIRE(second.WaitDelivered(1));
    std::this_thread::sleep_for(300ms);
    INFO(second.adapter.Dump());
    CHECK(second.adapter.CountMessagesWith("the first job") == 1);
    CHECK(second.adapter.CountMessagesWith("the second job") == 0);
    const auto ops = second.adapter.Ops();
    CHECK(std::count_if(ops.begin(), ops.end(), [](const SentOp& op) {
            return op.where.thread == "T2" && op.text.find("please send it again") != std::string::npos;
          }) == 1);
    second.router.reset();
    CHECK(StoreInt(db, "SELECT count(*) FROM work") == 0);
  }
}

TEST_CASE("router: a message is accepted as its turn's start only when a slot is surely its own", "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 1000},
      {"type": "message", "text": "reply to {prompt}"}]]})");
  const std::string db = root.path() + "/router.db";
  RouterOptions options = Options(root);
  options.max_in_flight = 1;
  Bot bot(root, "script:" + script, false, "first-", options);
  // Message 2 (another thread, its Session idle) is handed over as message 1's placeholder goes out,
  // and taken in before message 1's turn starts: message 1, accepted as its turn's start, has the one
  // slot, and message 2 waits for it in the inbox.
  bool handed_over = false;  // on the router's strand only
  bot.adapter.on_send = [&](const SentOp& op) {
    if (op.kind != "post" || handed_over) return;
    handed_over = true;
    bot.router->HandleMessage(Msg("2", "the second job", "T2"), [](Result<Disposition>) {});
  };
  REQUIRE(*bot.Send(Msg("1", "the first job")) == Disposition::accepted);
  REQUIRE(bot.adapter.WaitForText("free slot"));
  CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE request_id IS NOT NULL") == 1);
  CHECK(StoreInt(db, "SELECT count(*) FROM work WHERE request_id IS NULL") == 1);
  REQUIRE(bot.WaitDelivered(2));
  INFO(bot.adapter.Dump());
  CHECK(bot.adapter.CountMessagesWith("the first job") == 1);
  CHECK(bot.adapter.CountMessagesWith("the second job") == 1);
}
