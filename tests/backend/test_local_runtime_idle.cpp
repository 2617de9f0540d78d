// What the LocalBackend's idle policy stands on: LocalRuntime::Activity/StopIfIdle, and the program's
// --idle-exit, --status-file and --detach/--pid-file (its wire behaviour is tested in tests/integration).
#include <signal.h>
#include <sys/wait.h>

#include "backend/local_backend_support.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace backend_test;

namespace {

// The program in the foreground (no --detach), stdout/stderr to a file; killed at the end.
struct Serve {
  pid_t pid = -1;
  // `leak`: a file opened as descriptor 9 without close-on-exec, as a careless embedder might leave one.
  Serve(std::vector<std::string> args, const std::string& log, const std::string& leak = {}) {
    args.insert(args.begin(), {kRuntimeProgram, "serve"});
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (!leak.empty()) posix_spawn_file_actions_addopen(&fa, 9, leak.c_str(), O_RDONLY | O_CREAT, 0600);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid, kRuntimeProgram.c_str(), &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Serve() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  int Wait(std::chrono::milliseconds timeout = kWait) {
    int status = 0;
    if (!Eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout)) return -1;
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

}  // namespace

TEST_CASE("local runtime: Activity is busy while a turn runs and StopIfIdle waits for the idle period",
          "[backend][idle]") {
  StateRoot root;
  std::filesystem::create_directories(root.path());
  const std::string script = root.path() + "/slow.json";
  WriteFile(script, kSlowScript);
  testing::LocalRuntimeOptions o;
  o.socket_path = root.path() + "/rt.sock";
  o.state_dir = root.path() + "/state";
  o.provider = "script:" + script;
  o.working_dir = root.path();
  auto rt = testing::LocalRuntime::Start(o);
  REQUIRE(rt.has_value());
  auto a0 = (*rt)->Activity();
  CHECK_FALSE(a0.busy);
  CHECK(a0.last_turn == std::chrono::system_clock::time_point{});

  Context ctx;
  Driver driver(ctx, MakeUnixConnector(ctx, o.socket_path));
  std::promise<Result<TurnResult>> done;
  TurnOptions t;
  t.timeout = kWait;
  driver.AsyncSubmitTurn("slow", t, [&](Result<TurnResult> r) { done.set_value(std::move(r)); });
  REQUIRE(Eventually([&] { return (*rt)->Activity().busy; }));
  CHECK((*rt)->Activity().idle_for == std::chrono::steady_clock::duration::zero());
  CHECK((*rt)->Activity().last_turn > std::chrono::system_clock::now() - 30s);
  CHECK_FALSE((*rt)->StopIfIdle(0ms));  // busy: not even a zero idle period stops it
  auto f = done.get_future();
  REQUIRE(f.wait_for(kWait) == std::future_status::ready);
  auto result = f.get();
  REQUIRE(result.has_value());
  CHECK(result->text == "finished slow (#1)");
  CHECK(result->status == TurnStatus::completed);
  const auto after = (*rt)->Activity();
  CHECK_FALSE(after.busy);
  CHECK(after.idle_for < 5s);
  CHECK_FALSE((*rt)->StopIfIdle(10s));
  std::this_thread::sleep_for(300ms);
  CHECK((*rt)->Activity().idle_for >= 300ms);
  REQUIRE((*rt)->StopIfIdle(200ms));
  CHECK_FALSE(std::filesystem::exists(o.socket_path));  // stopped as Stop() does
  CHECK((*rt)->StopIfIdle(200ms));                      // and stays stopped

  // The working directory is where commands run and what runtime.status says.
  testing::LocalRuntimeOptions c = o;
  c.provider = "command:pwd";
  c.state_dir = root.path() + "/state2";
  c.working_dir = root.path() + "/state";
  auto cmd = testing::LocalRuntime::Start(c);
  REQUIRE(cmd.has_value());
  Driver cd(ctx, MakeUnixConnector(ctx, c.socket_path));
  auto pwd = cd.SubmitTurn("where", t);
  REQUIRE(pwd.has_value());
  CHECK(pwd->text == c.working_dir);
}

TEST_CASE("local runtime program: --idle-exit records the suspension and exits 0", "[backend][idle]") {
  StateRoot root;
  std::filesystem::create_directories(root.path());
  const std::string status = root.path() + "/runtime.json";
  const std::string log = root.path() + "/log";
  Serve serve({"--socket", root.path() + "/rt.sock", "--state-dir", root.path() + "/state", "--status-file", status,
               "--idle-exit", "1"},
              log);
  REQUIRE(
      Eventually([&] { return ReadFile(status).find("\"pid\":" + std::to_string(serve.pid)) != std::string::npos; }));
  CHECK(ReadFile(status).find("\"exit\":null") != std::string::npos);
  {
    Context ctx;
    Driver driver(ctx, MakeUnixConnector(ctx, root.path() + "/rt.sock"));
    TurnOptions t;
    t.timeout = kWait;
    auto r = driver.SubmitTurn("hi", t);
    REQUIRE(r.has_value());
    CHECK(r->text == "echo #1: hi");
  }
  const auto before = std::chrono::steady_clock::now();
  CHECK(serve.Wait() == 0);
  CHECK(std::chrono::steady_clock::now() - before >= 700ms);  // a second after the turn, give or take a tick
  const std::string record = ReadFile(status);
  INFO(record);
  CHECK(record.find("\"exit\":\"idle\"") != std::string::npos);
  CHECK(record.find("\"lastActivity\":\"20") != std::string::npos);
  CHECK_THAT(ReadFile(log), Catch::Contains("idle for 1s: suspended"));
  CHECK_FALSE(std::filesystem::exists(root.path() + "/rt.sock"));
}

TEST_CASE("local runtime program: SIGTERM records a clean stop, and bad flags are usage errors", "[backend][idle]") {
  StateRoot root;
  std::filesystem::create_directories(root.path());
  const std::string status = root.path() + "/runtime.json";
  Serve serve({"--socket", root.path() + "/rt.sock", "--status-file", status}, root.path() + "/log");
  REQUIRE(Eventually([&] { return ReadFile(status).find("\"exit\":null") != std::string::npos; }));
  ::kill(serve.pid, SIGTERM);
  CHECK(serve.Wait() == 0);
  CHECK(ReadFile(status).find("\"exit\":\"stopped\"") != std::string::npos);

  for (const auto& bad :
       std::vector<std::vector<std::string>>{{"--socket", root.path() + "/x.sock", "--idle-exit", "soon"},
                                             {"--socket", root.path() + "/x.sock", "--idle-exit", "-1"},
                                             {"--socket", root.path() + "/x.sock", "--detach"}}) {
    Serve s(bad, root.path() + "/bad.log");
    CHECK(s.Wait() == 2);
  }
  const std::string bad_log = ReadFile(root.path() + "/bad.log");
  CHECK_THAT(bad_log, Catch::Contains("--idle-exit needs a number of seconds"));
  CHECK_THAT(bad_log, Catch::Contains("--detach needs --pid-file FILE"));
}

TEST_CASE("local runtime program: --detach leaves a runtime in its own session and writes its pid", "[backend][idle]") {
  StateRoot root;
  std::filesystem::create_directories(root.path());
  const std::string pid_file = root.path() + "/runtime.pid";
  const std::string leak = root.path() + "/leaked";
  Serve launcher(
      {"--socket", root.path() + "/rt.sock", "--state-dir", root.path() + "/state", "--detach", "--pid-file", pid_file},
      root.path() + "/log", leak);
  CHECK(launcher.Wait() == 0);  // at once: the runtime goes on alone
  const pid_t pid = static_cast<pid_t>(std::stol(ReadFile(pid_file)));
  CHECK(pid != launcher.pid);
  CHECK(Alive(pid));
  CHECK(::getsid(pid) == pid);
  REQUIRE(Eventually([&] { return std::filesystem::exists(root.path() + "/rt.sock"); }));
  // Only 0-2 were kept of what it was given: the leaked descriptor is closed.
  int fds = 0;
  for (auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    CHECK(std::filesystem::read_symlink(fd.path(), ec).string() != leak);
    ++fds;
  }
  CHECK(fds >= 3);
  ::kill(pid, SIGTERM);
  CHECK(Eventually([&] { return !Alive(pid); }));
}
