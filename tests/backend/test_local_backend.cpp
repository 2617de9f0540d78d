// LocalBackend with child-process runtimes: create, turns, the idle policy and resume (the Session
// remembers), the connector starting an idle-exited runtime again, owner suspension, delete, list with
// a selector, ownership, parameters, a corrupt session.json, delete_after, a long state root.
#include <atomic>
#include <future>
#include <signal.h>
#include <sys/stat.h>

#include "backend/local_backend.hpp"
#include "backend/local_backend_support.hpp"

using namespace backend_test;

namespace {

long PidOf(const SessionInfo& info) {
  auto it = info.details.find("pid");
  return it == info.details.end() ? 0 : std::stol(it->second);
}

}  // namespace

TEST_CASE("local backend: create then turn then idle suspension then resume and the Session remembers",
          "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto o = Options(root);
  o.suspend_after = 1s;
  auto backend = MakeBackend(ctx, o);
  REQUIRE(backend->Describe() == "local (" + root.path() + ")");

  auto created = backend->Ensure("chat-1", SessionSpec{{{"team", "core"}}, {{"note", "first"}}, {}});
  REQUIRE(created.has_value());
  CHECK(created->created);
  CHECK(created->info.phase == SessionPhase::pending);
  CHECK(created->info.labels.at("team") == "core");
  CHECK(created->info.annotations.at("note") == "first");
  CHECK(created->info.details.at("workdir") == root.Session("chat-1") + "/workspace");
  auto again = backend->Ensure("chat-1", SessionSpec{});
  REQUIRE(again.has_value());
  CHECK_FALSE(again->created);

  Stages stages;
  ReadyTarget first = Ready(*backend, "chat-1", &stages);
  CHECK(stages.Joined() == "starting,ready");
  CHECK_FALSE(first.resumed);
  CHECK(first.info.phase == SessionPhase::ready);
  const long pid1 = PidOf(first.info);
  REQUIRE(pid1 > 0);
  CHECK(Alive(static_cast<pid_t>(pid1)));
  // Detached: its own session, not a child of ours.
  CHECK(::getsid(static_cast<pid_t>(pid1)) == static_cast<pid_t>(pid1));
  CHECK(::getppid() != static_cast<pid_t>(pid1));

  auto t1 = Turn(ctx, first.connector, "hello");
  CHECK(t1.status == TurnStatus::completed);
  CHECK(t1.text == "echo #1: hello");
  const auto created_at = GetInfo(*backend, "chat-1").created;

  // The runtime suspends itself after suspend_after without turns, and records why.
  REQUIRE(Eventually([&] { return IdleSuspended(*backend, "chat-1"); }));
  auto suspended = GetInfo(*backend, "chat-1");
  CHECK(suspended.last_activity > created_at);
  CHECK(suspended.details.count("pid") == 0);
  CHECK(Eventually([&] { return !Alive(static_cast<pid_t>(pid1)); }, 5s));
  CHECK(ReadFile(root.Session("chat-1") + "/runtime.json").find("\"exit\":\"idle\"") != std::string::npos);
  CHECK(ReadFile(root.Session("chat-1") + "/session.json").find("\"suspendReason\": \"idle\"") != std::string::npos);

  Stages resume;
  ReadyTarget second = Ready(*backend, "chat-1", &resume);
  CHECK(second.resumed);
  CHECK(resume.Joined() == "resuming,ready");
  CHECK(PidOf(second.info) != pid1);
  auto t2 = Turn(ctx, second.connector, "again");
  CHECK(t2.text == "echo #2: again");  // the journal was reloaded: turn 2 of the same Session

  // A connector kept from an earlier WaitReady starts the runtime again when it has idle-exited since.
  REQUIRE(Eventually([&] { return IdleSuspended(*backend, "chat-1"); }));
  auto t3 = Turn(ctx, first.connector, "later");
  CHECK(t3.text == "echo #3: later");
  CHECK(GetInfo(*backend, "chat-1").phase == SessionPhase::ready);
}

TEST_CASE("local backend: a runtime that went idle before WaitReady saw it serving is started again",
          "[backend][local]") {
  StateRoot root;
  Context ctx;  // one worker: the wait's looks run on it
  auto o = Options(root);
  o.suspend_after = 1s;
  auto backend = MakeBackend(ctx, o);
  REQUIRE(backend->Ensure("slow-look", {}).has_value());
  // Once the wait has started the runtime, the worker is held (a loaded machine) until that runtime
  // has served its suspend_after and gone idle: the wait's next look finds it gone.
  struct Hold {
    std::string runtime_json;
    std::atomic<bool> posted{false};
    std::promise<bool> went_idle;
  };
  auto hold = std::make_shared<Hold>();
  hold->runtime_json = root.Session("slow-look") + "/runtime.json";
  auto released = hold->went_idle.get_future();
  Stages stages;
  ReadyProgress record = stages.Callback();
  ReadyProgress progress = [&ctx, hold, record](const SessionInfo& info, std::string_view stage) {
    record(info, stage);
    if (stage != "starting" || hold->posted.exchange(true)) return;
    ctx.Post([hold] {
      hold->went_idle.set_value(Eventually(
          [&] { return ReadFile(hold->runtime_json).find("\"exit\":\"idle\"") != std::string::npos; }, 20s));
    });
  };
  auto ready = backend->WaitReady("slow-look", std::chrono::steady_clock::now() + kWait, progress);
  INFO((ready ? std::string() : ready.error().ToString()));
  INFO(stages.Joined());
  REQUIRE(ready.has_value());
  REQUIRE(hold->posted);
  REQUIRE(released.wait_for(30s) == std::future_status::ready);
  const bool went_idle = released.get();
  if (stages.Joined() == "starting,ready") {
    // The runtime served already when the wait looked right after starting it (the look is in the
    // same job as the start): there was no later look to hold back. Seen under the address sanitizer.
    WARN("the runtime served before the held look: the idle restart was not exercised in this run");
  } else {
    CHECK(went_idle);
    CHECK(stages.Joined() == "starting,resuming,ready");
  }
  CHECK(Turn(ctx, ready->connector, "still here").text == "echo #1: still here");
}

TEST_CASE("local backend: handlers run on a Context worker and blocking forms refuse there", "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto backend = MakeBackend(ctx, Options(root));
  std::promise<std::pair<bool, Errc>> seen;
  backend->AsyncEnsure("w", {}, [&](Result<EnsureResult> r) {
    auto blocked = backend->Get("w");
    seen.set_value({ctx.InWorkerThread() && r.has_value(), blocked ? Errc::ok : blocked.error().code});
  });
  auto f = seen.get_future();
  REQUIRE(f.wait_for(kWait) == std::future_status::ready);
  auto [on_worker, code] = f.get();
  CHECK(on_worker);
  CHECK(code == Errc::would_block);
}

TEST_CASE("local backend: owner suspension is refused by WaitReady until Resume", "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto backend = MakeBackend(ctx, Options(root));
  REQUIRE(backend->Ensure("own", {}).has_value());
  ReadyTarget target = Ready(*backend, "own");
  CHECK(Turn(ctx, target.connector, "one").text == "echo #1: one");
  const long pid = PidOf(target.info);

  auto suspended = backend->Suspend("own");
  REQUIRE(suspended.has_value());
  CHECK(suspended->phase == SessionPhase::suspended);
  CHECK(suspended->suspended == SuspendReason::owner);
  CHECK_FALSE(Alive(static_cast<pid_t>(pid)));  // Suspend returns once the runtime has gone

  auto refused = backend->WaitReady("own", std::chrono::steady_clock::now() + 5s);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == Errc::unavailable);
  CHECK_THAT(refused.error().message, Catch::Contains("suspended by its owner"));
  // The connector does not start it either, and a turn says why at once (no retries).
  Driver driver(ctx, target.connector);
  TurnOptions t;
  t.timeout = 20s;
  const auto before = std::chrono::steady_clock::now();
  auto turn = driver.SubmitTurn("blocked", t);
  REQUIRE_FALSE(turn.has_value());
  CHECK(turn.error().code == Errc::connection_failed);
  CHECK_THAT(turn.error().message, Catch::Contains("suspended by its owner"));
  CHECK(std::chrono::steady_clock::now() - before < 5s);
  CHECK(root.Runtimes().empty());

  auto resumed = backend->Resume("own");
  REQUIRE(resumed.has_value());
  CHECK(resumed->phase == SessionPhase::pending);
  CHECK(Turn(ctx, Ready(*backend, "own").connector, "two").text == "echo #2: two");
}

TEST_CASE("local backend: list by selector with annotations and ownership and parameters and delete",
          "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto o = Options(root);
  o.owner = "alice";
  auto backend = MakeBackend(ctx, o);
  REQUIRE(backend->Ensure("a", SessionSpec{{{"team", "x"}}, {}, {}}).has_value());
  REQUIRE(backend->Ensure("b", SessionSpec{{{"team", "y"}}, {}, {}}).has_value());
  REQUIRE(backend->Ensure("c", SessionSpec{{{"team", "x"}, {"tier", "1"}}, {}, {}}).has_value());

  auto all = backend->List();
  REQUIRE(all.has_value());
  REQUIRE(all->size() == 3);
  CHECK(all->at(0).labels.at(std::string(kLocalOwnerLabel)) == "alice");
  auto x = backend->List("team=x");
  REQUIRE(x.has_value());
  REQUIRE(x->size() == 2);
  CHECK(x->at(0).name == "a");
  CHECK(x->at(1).name == "c");
  CHECK(backend->List("team=x,tier=1")->size() == 1);
  CHECK(backend->List("team=z")->empty());
  auto bad = backend->List("team!=x");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == Errc::invalid_argument);

  auto annotated = backend->Annotate("a", {{"topic", std::string("release")}, {"gone", std::nullopt}});
  REQUIRE(annotated.has_value());
  CHECK(annotated->annotations.at("topic") == "release");
  CHECK(backend->Annotate("a", {{"topic", std::nullopt}})->annotations.count("topic") == 0);

  // Another owner's backend on the same root may list them but not adopt them.
  auto o2 = Options(root);
  o2.owner = "bob";
  auto other = MakeBackend(ctx, o2);
  auto forbidden = other->Ensure("a", {});
  REQUIRE_FALSE(forbidden.has_value());
  CHECK(forbidden.error().code == Errc::forbidden);
  CHECK_THAT(forbidden.error().message, Catch::Contains("alice"));

  auto unknown = backend->Ensure("d", SessionSpec{{}, {}, {{"image", "x"}}});
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().code == Errc::invalid_argument);
  CHECK_THAT(unknown.error().message, Catch::Contains("image"));
  CHECK(backend->Ensure("d", SessionSpec{{}, {}, {{"provider", "nonsense"}}}).error().code == Errc::invalid_argument);
  CHECK(backend->Ensure("d", SessionSpec{{}, {}, {{"workdir", "relative/dir"}}}).error().code ==
        Errc::invalid_argument);
  CHECK(backend->Ensure("Bad_Name", {}).error().code == Errc::invalid_argument);
  CHECK_FALSE(std::filesystem::exists(root.Session("d")));

  // A Session working in a directory of the caller's, with its own provider.
  const std::string checkout = root.path() + "/checkout";
  std::filesystem::create_directories(checkout);
  auto e = backend->Ensure("e", SessionSpec{{}, {}, {{"workdir", checkout}, {"provider", "command:pwd"}}});
  REQUIRE(e.has_value());
  CHECK(e->info.details.at("workdir") == checkout);
  CHECK(Turn(ctx, Ready(*backend, "e").connector, "where").text == checkout);

  // Delete stops the runtime and removes the directory.
  ReadyTarget a = Ready(*backend, "a");
  const long pid = PidOf(a.info);
  REQUIRE(backend->Delete("a").has_value());
  CHECK_FALSE(Alive(static_cast<pid_t>(pid)));
  CHECK_FALSE(std::filesystem::exists(root.Session("a")));
  CHECK(backend->Get("a").error().code == Errc::not_found);
  CHECK(backend->Delete("a").error().code == Errc::not_found);
  CHECK(backend->List()->size() == 3);  // b, c, e
}

TEST_CASE("local backend: a corrupt session.json is a clear error naming the file and nothing else is touched",
          "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto backend = MakeBackend(ctx, Options(root));
  REQUIRE(backend->Ensure("broken", {}).has_value());
  REQUIRE(backend->Ensure("fine", SessionSpec{{{"k", "v"}}, {}, {}}).has_value());
  const std::string file = root.Session("broken") + "/session.json";
  WriteFile(file, "{\"version\": 1, \"name\": \"broken\", \"labels\": [tru");
  const std::string fine_before = ReadFile(root.Session("fine") + "/session.json");
  auto listing = [&](const std::string& dir) {
    std::vector<std::string> names;
    for (auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto broken_files = listing(root.Session("broken"));

  auto get = backend->Get("broken");
  REQUIRE_FALSE(get.has_value());
  CHECK(get.error().code == Errc::io_error);
  CHECK_THAT(get.error().message, Catch::Contains(file));
  auto wait = backend->WaitReady("broken", std::chrono::steady_clock::now() + 5s);
  REQUIRE_FALSE(wait.has_value());
  CHECK_THAT(wait.error().message, Catch::Contains(file));
  auto ensure = backend->Ensure("broken", {});
  REQUIRE_FALSE(ensure.has_value());
  CHECK_THAT(ensure.error().message, Catch::Contains(file));
  CHECK(backend->Suspend("broken").error().code == Errc::io_error);

  // A field of the wrong type is named too.
  WriteFile(file, R"({"version":1,"name":"broken","provider":"echo","workdir":"/tmp","labels":{"a":1}})");
  CHECK_THAT(backend->Get("broken").error().message, Catch::Contains("labels.a"));
  WriteFile(file, "{\"version\": 1, \"name\": \"broken\", \"labels\": [tru");

  // List still lists: the broken one as Failed, saying why; the other as it is.
  auto all = backend->List();
  REQUIRE(all.has_value());
  REQUIRE(all->size() == 2);
  CHECK(all->at(0).name == "broken");
  CHECK(all->at(0).phase == SessionPhase::failed);
  CHECK_THAT(all->at(0).message, Catch::Contains(file));
  CHECK(all->at(1).name == "fine");
  CHECK(all->at(1).labels.at("k") == "v");

  CHECK(ReadFile(file) == "{\"version\": 1, \"name\": \"broken\", \"labels\": [tru");
  CHECK(listing(root.Session("broken")) == broken_files);
  CHECK(ReadFile(root.Session("fine") + "/session.json") == fine_before);
  CHECK(root.Runtimes().empty());

  // Delete is the way out.
  REQUIRE(backend->Delete("broken").has_value());
  CHECK_FALSE(std::filesystem::exists(root.Session("broken")));
}

TEST_CASE("local backend: delete_after removes Sessions idle-suspended that long", "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto o = Options(root);
  o.suspend_after = 1s;
  o.delete_after = 1s;
  auto backend = MakeBackend(ctx, o);
  REQUIRE(backend->Ensure("old", {}).has_value());
  REQUIRE(backend->Ensure("never-started", {}).has_value());
  CHECK(Turn(ctx, Ready(*backend, "old").connector, "hi").text == "echo #1: hi");
  REQUIRE(Eventually([&] { return !backend->List()->empty() && !std::filesystem::exists(root.Session("old")); }));
  // Only idle-suspended ones: a Session that never ran is not idle-suspended.
  auto left = backend->List();
  REQUIRE(left->size() == 1);
  CHECK(left->at(0).name == "never-started");
}

TEST_CASE("local backend: a state root too long for a unix socket path still works", "[backend][local]") {
  StateRoot root("/" + std::string(60, 'r'));
  Context ctx;
  auto backend = MakeBackend(ctx, Options(root));
  const std::string name(63, 'n');
  REQUIRE((root.Session(name) + "/runtime.sock").size() > 107);
  REQUIRE(backend->Ensure(name, {}).has_value());
  ReadyTarget target = Ready(*backend, name);
  CHECK(Turn(ctx, target.connector, "long").text == "echo #1: long");
  CHECK(std::filesystem::exists(root.Session(name) + "/runtime.sock"));
}

TEST_CASE("local backend: WaitReady for a Session that never appears ends with not_found", "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto backend = MakeBackend(ctx, Options(root));
  Stages stages;
  auto r = backend->WaitReady("missing", std::chrono::steady_clock::now() + 300ms, stages.Callback());
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::not_found);
  CHECK(stages.Joined() == "pending");
  CancellationSource cancel;
  std::promise<Errc> code;
  backend->AsyncWaitReady("missing", std::chrono::steady_clock::now() + kWait, {}, cancel.Token(),
                          [&](Result<ReadyTarget> t) { code.set_value(t ? Errc::ok : t.error().code); });
  cancel.Cancel();
  auto f = code.get_future();
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  CHECK(f.get() == Errc::cancelled);
}

TEST_CASE("local backend: in-process mode hosts the runtimes here behind the same interface", "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto o = Options(root);
  o.in_process = true;
  o.runtime_program.clear();
  o.suspend_after = 1s;
  {
    auto backend = MakeBackend(ctx, o);
    REQUIRE(backend->Describe() == "local in-process (" + root.path() + ")");
    REQUIRE(backend->Ensure("inproc", {}).has_value());
    Stages stages;
    ReadyTarget target = Ready(*backend, "inproc", &stages);
    CHECK(PidOf(target.info) == static_cast<long>(::getpid()));
    CHECK(Turn(ctx, target.connector, "one").text == "echo #1: one");
    CHECK(root.Runtimes().empty());
    CHECK_FALSE(std::filesystem::exists(root.Session("inproc") + "/runtime.pid"));

    REQUIRE(Eventually([&] { return IdleSuspended(*backend, "inproc"); }));
    CHECK_FALSE(std::filesystem::exists(root.Session("inproc") + "/runtime.sock"));
    Stages resume;
    ReadyTarget again = Ready(*backend, "inproc", &resume);
    CHECK(again.resumed);
    CHECK(resume.Has("resuming"));
    CHECK(Turn(ctx, again.connector, "two").text == "echo #2: two");

    REQUIRE(backend->Suspend("inproc")->suspended == SuspendReason::owner);
    CHECK(backend->WaitReady("inproc", std::chrono::steady_clock::now() + 2s).error().code == Errc::unavailable);
    REQUIRE(backend->Resume("inproc").has_value());
    CHECK(Turn(ctx, Ready(*backend, "inproc").connector, "three").text == "echo #3: three");
  }
  // The backend is gone: its runtimes stopped with it, and said so.
  CHECK(ReadFile(root.Session("inproc") + "/runtime.json").find("\"exit\":\"stopped\"") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(root.Session("inproc") + "/runtime.sock"));
}

TEST_CASE("local backend: in-process mode reports a turn's activity at once and records it when the runtime stops",
          "[backend][local]") {
  StateRoot root;
  Context ctx;
  auto o = Options(root);
  o.in_process = true;
  o.runtime_program.clear();
  const std::string record = root.Session("busy") + "/runtime.json";
  std::chrono::system_clock::time_point before_two;
  {
    auto backend = MakeBackend(ctx, o);
    REQUIRE(backend->Ensure("busy", {}).has_value());
    ReadyTarget target = Ready(*backend, "busy");
    const auto before_one = std::chrono::system_clock::now();
    CHECK(Turn(ctx, target.connector, "one").text == "echo #1: one");
    // The host's next look records the first turn's activity ...
    REQUIRE(Eventually([&] {
      auto r = local::ReadRuntimeRecord(record);
      return r && r->last_activity > before_one - 1ms;
    }));
    before_two = std::chrono::system_clock::now();
    CHECK(Turn(ctx, target.connector, "two").text == "echo #2: two");
    std::this_thread::sleep_for(2 * local::kInProcessTick);
    // ... but not the second's, so soon after (kActivityRecordEvery); a look asks the host, which knows.
    CHECK(local::ReadRuntimeRecord(record)->last_activity < before_two - 1ms);
    CHECK(GetInfo(*backend, "busy").last_activity > before_two - 1ms);
  }
  // The backend is gone and its runtime stopped: the record has the last turn's activity.
  auto stopped = local::ReadRuntimeRecord(record);
  REQUIRE(stopped.has_value());
  CHECK(stopped->exit == "stopped");
  CHECK(stopped->last_activity > before_two - 1ms);
}

// The host's look (idle policy, runtime records) runs on a thread of its own, as each runtime program's
// does: a Context worker held by other work neither delays it nor pays for its file writes.
TEST_CASE("local backend: in-process mode's idle policy runs while the Context's worker is held",
          "[backend][local]") {
  StateRoot root;
  Context ctx(ContextOptions{1, {}, LogLevel::warning});
  auto o = Options(root);
  o.in_process = true;
  o.runtime_program.clear();
  o.suspend_after = 1s;
  const std::string record = root.Session("held") + "/runtime.json";
  auto backend = MakeBackend(ctx, o);
  REQUIRE(backend->Ensure("held", {}).has_value());
  CHECK(Turn(ctx, Ready(*backend, "held").connector, "one").text == "echo #1: one");
  // The one worker waits here until the runtime's record says the idle policy stopped it (or 10 s).
  std::promise<bool> stopped_while_held;
  auto held = stopped_while_held.get_future();
  ctx.Post([&] {
    stopped_while_held.set_value(Eventually(
        [&] {
          auto r = local::ReadRuntimeRecord(record);
          return r && r->exit == local::kExitIdle;
        },
        10s));
  });
  CHECK(held.get());
  CHECK_FALSE(std::filesystem::exists(root.Session("held") + "/runtime.sock"));
  REQUIRE(Eventually([&] { return IdleSuspended(*backend, "held"); }));
}
