// The Router across restarts: a bot killed with SIGKILL mid-turn delivers the reply after it comes
// back, exactly once and into the same placeholder; a reply the platform kept refusing is delivered
// from the outbox by the next start; a graceful shutdown tells the thread once and leaves the turn
// running for the next start.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "router_rig.hpp"

using namespace router_test;

namespace {

constexpr const char* kChildTest = "router: helper process (a bot that is killed mid-turn)";
constexpr const char* kChildRootEnv = "ST_ROUTER_HELPER_ROOT";
constexpr const char* kChildScriptEnv = "ST_ROUTER_HELPER_SCRIPT";
constexpr const char* kChildWaitEnv = "ST_ROUTER_HELPER_WAIT";  // the text whose message the child reports

RouterOptions Options(const TempRoot& root) {
  RouterOptions o;
  o.owner_uid = "test-owner";
  o.routes = {RouteConfig{}};
  o.store_path = root.path() + "/router.db";
  o.progress_interval = 20ms;
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

}  // namespace

// Run by the tests below as a child process: a bot that takes one message and, once a message of the
// thread shows the awaited text (its turn runs in a runtime process of its own), says which message
// that is and waits to be killed.
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
  std::string placeholder;
  {
    backend_test::HelperChild child(
        {{kChildRootEnv, root.path()}, {kChildScriptEnv, script}, {kChildWaitEnv, "working on"}}, kChildTest);
    placeholder = child.LineStartingWith("CHILD-READY ");
    REQUIRE_FALSE(placeholder.empty());
    child.KillNow();
  }
  // The runtime process outlived the bot; its turn goes on. The bot comes back.
  Context context(ContextOptions{2, {}, LogLevel::warning});
  auto backend = MakeLocalBackend(context, Backend(root.path(), "script:" + script, false));
  REQUIRE(backend);
  RecordingAdapter adapter(context, ThreadedCaps(), "p");
  auto router = Router::Create(context, **backend, adapter, Options(root));
  REQUIRE(router);
  (*router)->Start();
  const auto until = std::chrono::steady_clock::now() + 60s;
  while ((*router)->Stats().replies_delivered < 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE((*router)->Stats().replies_delivered == 1);
  std::this_thread::sleep_for(500ms);
  // Into the placeholder the killed bot posted, and nowhere else.
  CHECK(adapter.Text(placeholder).find("finished") != std::string::npos);
  CHECK(adapter.CountMessagesWith("finished") == 1);
  CHECK(Posts(adapter.Ops(), "finished") == 0);
  CHECK((*router)->Stats().replies_delivered == 1);
  router->reset();
}

TEST_CASE("router: a question open when the bot was killed is answered in the chat after the restart",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", R"({"turns": [[
      {"type": "question", "inputId": "pick", "questions": [
        {"id": "lang", "header": "Language", "question": "Which language?",
         "options": [{"label": "C++"}, {"label": "Python"}]}]}]]})");
  std::string question;
  {
    backend_test::HelperChild child(
        {{kChildRootEnv, root.path()}, {kChildScriptEnv, script}, {kChildWaitEnv, "Which language?"}}, kChildTest);
    question = child.LineStartingWith("CHILD-READY ");
    REQUIRE_FALSE(question.empty());
    child.KillNow();
  }
  Context context(ContextOptions{2, {}, LogLevel::warning});
  auto backend = MakeLocalBackend(context, Backend(root.path(), "script:" + script, false));
  REQUIRE(backend);
  RecordingAdapter adapter(context, ThreadedCaps(), "p");
  auto router = Router::Create(context, **backend, adapter, Options(root));
  REQUIRE(router);
  (*router)->Start();
  // The question is still open, in the message the killed bot posted: a reply to it answers it.
  auto answer = Msg("2", "2");
  answer.reply_to_message_id = question;
  std::promise<Result<Disposition>> taken;
  (*router)->HandleMessage(answer, [&](Result<Disposition> d) { taken.set_value(std::move(d)); });
  auto d = taken.get_future().get();
  REQUIRE(d);
  CHECK(*d == Disposition::accepted);
  REQUIRE(adapter.WaitForText("Answers: lang=Python", 60s));
  CHECK(adapter.Text(question).find("Answered by Ada U1: Python") != std::string::npos);
  std::this_thread::sleep_for(300ms);
  // Not asked a second time.
  CHECK(Posts(adapter.Ops(), "Which language?") == 0);
  CHECK(adapter.CountMessagesWith("Answers: lang=Python") == 1);
  router->reset();
}

TEST_CASE("router: a reply the platform kept refusing is delivered from the outbox after a restart",
          "[routing][router]") {
  TempRoot root;
  Context context(ContextOptions{2, {}, LogLevel::error});
  auto backend = MakeLocalBackend(context, Backend(root.path(), "echo", true));
  REQUIRE(backend);
  RouterOptions o = Options(root);
  o.delivery_attempts = 1;
  RecordingAdapter down(context, ThreadedCaps(), "down-");
  down.fail_posts = 1000;
  {
    auto router = Router::Create(context, **backend, down, o);
    REQUIRE(router);
    (*router)->Start();
    (*router)->HandleMessage(Msg("1", "hello"));
    // The placeholder, the reply and the note about it all fail.
    REQUIRE(down.WaitFor([](const std::vector<SentOp>& ops) {
      for (const auto& op : ops) {
        if (op.kind == "post" && !op.ok && op.text.find("could not be delivered") != std::string::npos) return true;
      }
      return false;
    }));
    CHECK((*router)->Stats().replies_delivered == 0);
  }
  RecordingAdapter up(context, ThreadedCaps(), "up-");
  auto router = Router::Create(context, **backend, up, o);
  REQUIRE(router);
  (*router)->Start();
  const auto until = std::chrono::steady_clock::now() + 30s;
  while ((*router)->Stats().replies_delivered < 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE((*router)->Stats().replies_delivered == 1);
  std::this_thread::sleep_for(300ms);
  CHECK(Posts(up.Ops(), "echo #1:") == 1);
  CHECK(up.CountMessagesWith("hello") == 1);
  router->reset();
}

TEST_CASE("router: a graceful shutdown tells the thread once and the next start delivers the reply",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 1500},
      {"type": "message", "text": "finished after the restart"}]]})");
  // The backend's runtimes outlive one router: hosted in this process, by one backend for both.
  Context context(ContextOptions{2, {}, LogLevel::warning});
  auto backend = MakeLocalBackend(context, Backend(root.path(), "script:" + script, true));
  REQUIRE(backend);
  const RouterOptions o = Options(root);
  RecordingAdapter first(context, ThreadedCaps(), "first-");
  {
    auto router = Router::Create(context, **backend, first, o);
    REQUIRE(router);
    (*router)->Start();
    std::promise<void> accepted;
    (*router)->HandleMessage(Msg("1", "long job"), [&](Result<Disposition>) { accepted.set_value(); });
    accepted.get_future().wait();
    REQUIRE(first.WaitForText("Working"));
    std::this_thread::sleep_for(300ms);  // the turn is running in the Session
    REQUIRE((*router)->ShutdownAndWait());
    CHECK(first.CountMessagesWith("The bot is restarting") == 1);
    auto refused = std::make_shared<std::promise<Result<Disposition>>>();
    (*router)->HandleMessage(Msg("2", "too late"), [refused](Result<Disposition> d) { refused->set_value(d); });
    auto late = refused->get_future().get();
    REQUIRE_FALSE(late);
    CHECK(late.error().code == Errc::unavailable);
  }
  RecordingAdapter second(context, ThreadedCaps(), "second-");
  auto router = Router::Create(context, **backend, second, o);
  REQUIRE(router);
  (*router)->Start();
  REQUIRE(second.WaitForText("finished after the restart", 60s));
  std::this_thread::sleep_for(300ms);
  CHECK(second.CountMessagesWith("finished after the restart") == 1);
  CHECK(first.CountMessagesWith("finished after the restart") == 0);
  // Into the first run's placeholder, not a new message.
  CHECK(Posts(second.Ops(), "finished after the restart") == 0);
  router->reset();
}
