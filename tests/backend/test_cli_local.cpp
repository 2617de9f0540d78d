// The `sessionturn` CLI on the local backend, as a user runs it: the built binary with --local and a
// state root of the test's own. The two-line start (sessions create, then turn --session), list/get,
// the owner's suspension (turns refused) and resume, delete, the idle suspension and the resume that
// follows, --help per command and one-line usage errors. The runtimes the CLI starts are detached (they
// outlive it by design): the state root kills them, by their pid files, when the test ends.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli_runner.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sessionturn::testing_support::Run;
using sessionturn::testing_support::RunCliRaw;

namespace {

namespace fs = std::filesystem;

const std::string kRuntime = std::string(SESSIONTURN_BINARY_DIR) + "/sessionturn-local-runtime";
// Generous: a loaded 2-core machine, slower still under sanitizers.
constexpr auto kWait = 30s;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Alive and not a zombie (a detached runtime's parent is whoever reaps orphans here).
bool Alive(long pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// A state root under /tmp (short: socket paths must fit sun_path) and the CLI run against it.
class LocalCli {
 public:
  LocalCli() {
    char tmpl[] = "/tmp/st-cli-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root_ = tmpl;
  }
  ~LocalCli() {
    KillRuntimes();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  LocalCli(const LocalCli&) = delete;
  LocalCli& operator=(const LocalCli&) = delete;

  const std::string& root() const { return root_; }

  // The CLI with `args` on this root's local backend.
  Run operator()(std::vector<std::string> args, const std::string& input = "") const {
    args.insert(args.end(), {"--local", "--state-dir", root_, "--runtime", kRuntime});
    return Plain(args, input);
  }
  // The CLI with `args` as they are.
  static Run Plain(const std::vector<std::string>& args, const std::string& input = "") {
    Run run = RunCliRaw(args, input);
    if (!run.setup_error.empty()) FAIL(run.setup_error);
    return run;
  }

  json Get(const std::string& name) const {
    Run run = (*this)({"sessions", "get", name, "--json"});
    INFO("sessions get " << name << ": " << run.err);
    REQUIRE(run.exit_code == 0);
    return json::parse(run.out);
  }

  // The pid in the Session's pid file (0: none). Moved aside with the directory by a delete.
  long Pid(const std::string& name) const {
    const std::string text = ReadFile(root_ + "/sessions/" + name + "/runtime.pid");
    return text.empty() ? 0 : std::atol(text.c_str());
  }

  // Every runtime started under this root, by the pid files of its Sessions (and of deleted ones, moved
  // to hidden directories), checked to be ours: its command line names this root.
  void KillRuntimes() const {
    std::error_code ec;
    for (fs::directory_iterator it(root_ + "/sessions", ec), end; !ec && it != end; it.increment(ec)) {
      const std::string text = ReadFile(it->path().string() + "/runtime.pid");
      const long pid = text.empty() ? 0 : std::atol(text.c_str());
      if (pid <= 0 || !Alive(pid)) continue;
      if (ReadFile("/proc/" + std::to_string(pid) + "/cmdline").find(root_) == std::string::npos) continue;
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      Eventually([pid] { return !Alive(pid); }, 10s);
    }
  }

 private:
  std::string root_;
};

}  // namespace

TEST_CASE("cli --local: sessions create, then turn --session: the two-line start", "[backend][cli]") {
  LocalCli cli;
  auto created = cli({"sessions", "create", "chat"});
  INFO("create: " << created.err);
  REQUIRE(created.exit_code == 0);
  CHECK(created.out == "Session chat created in local (" + cli.root() + ")\n");
  CHECK(fs::is_directory(cli.root() + "/sessions/chat"));

  auto first = cli({"turn", "--session", "chat", "hi"});
  INFO("turn: " << first.err);
  REQUIRE(first.exit_code == 0);
  CHECK(first.out == "echo #1: hi\n");
  CHECK(first.err.empty());  // a cold start is not worth a line on a pipe
  const long pid = cli.Pid("chat");
  CHECK(pid > 0);
  CHECK(Alive(pid));  // left running for the next turn, after the CLI exited

  // The next turn reuses that runtime, and the Session remembers.
  auto second = cli({"turn", "--session", "chat", "--json", "again"});
  INFO("second: " << second.err);
  REQUIRE(second.exit_code == 0);
  auto result = json::parse(second.out);
  CHECK(result["status"] == "completed");
  CHECK(result["text"] == "echo #2: again");
  CHECK(cli.Pid("chat") == pid);

  // Creating it again keeps it as it is.
  auto again = cli({"sessions", "create", "chat"});
  CHECK(again.exit_code == 0);
  CHECK(again.out == "Session chat already exists in local (" + cli.root() + ")\n");
  CHECK(cli({"turn", "--session", "chat", "third"}).out == "echo #3: third\n");

  // wait prints the runtime's socket; watch shows the journal.
  auto wait = cli({"wait", "chat"});
  CHECK(wait.exit_code == 0);
  CHECK(wait.out == cli.root() + "/sessions/chat/runtime.sock\n");
  auto watch = RunCliRaw({"watch", "--session", "chat", "--local", "--state-dir", cli.root(), "--runtime", kRuntime},
                         "", [](const std::string& out) { return out.find("echo #3: third") != std::string::npos; });
  INFO("watch: " << watch.err);
  CHECK(watch.exit_code == 0);
  CHECK(watch.out.find("user.message turn-1: hi") != std::string::npos);
}

TEST_CASE("cli --local: sessions list and get, with labels, a provider and a working directory",
          "[backend][cli]") {
  LocalCli cli;
  const std::string script = cli.root() + "/script.json";
  std::ofstream(script) << R"({"turns": [[{"type": "message", "text": "scripted reply"}]], "repeat": "last"})";
  const std::string workdir = cli.root() + "/checkout";
  fs::create_directories(workdir);
  REQUIRE(cli({"sessions", "create", "alpha", "--label", "team=a", "--annotation", "note=first",
               "--provider", "script:" + script, "--workdir", workdir})
              .exit_code == 0);
  auto beta = cli({"sessions", "create", "beta", "--json"});
  REQUIRE(beta.exit_code == 0);
  CHECK(json::parse(beta.out)["created"] == true);
  CHECK(json::parse(beta.out)["phase"] == "Pending");

  auto turn = cli({"turn", "--session", "alpha", "go"});
  INFO("turn: " << turn.err);
  REQUIRE(turn.exit_code == 0);
  CHECK(turn.out == "scripted reply\n");

  auto list = cli({"sessions", "list"});
  INFO("list: " << list.err);
  REQUIRE(list.exit_code == 0);
  std::istringstream lines(list.out);
  std::string header, row_alpha, row_beta;
  std::getline(lines, header);
  std::getline(lines, row_alpha);
  std::getline(lines, row_beta);
  CHECK(header.rfind("NAME", 0) == 0);
  for (const char* column : {"PHASE", "AGE", "LAST-ACTIVITY", "MESSAGE"}) CHECK(header.find(column) != std::string::npos);
  CHECK(row_alpha.rfind("alpha ", 0) == 0);
  CHECK(row_alpha.find("Ready") != std::string::npos);
  CHECK(row_alpha.find(" ago") != std::string::npos);
  CHECK(row_beta.rfind("beta ", 0) == 0);
  CHECK(row_beta.find("Pending") != std::string::npos);

  auto selected = cli({"sessions", "list", "-l", "team=a", "--json"});
  REQUIRE(selected.exit_code == 0);
  auto items = json::parse(selected.out);
  REQUIRE(items.size() == 1);
  CHECK(items[0]["name"] == "alpha");
  CHECK(items[0]["labels"]["team"] == "a");
  CHECK(items[0]["annotations"]["note"] == "first");
  CHECK(items[0]["details"]["workdir"] == workdir);
  CHECK(items[0]["details"]["provider"] == "script:" + script);
  CHECK(items[0]["details"]["pid"] == std::to_string(cli.Pid("alpha")));
  CHECK(items[0]["created"].is_string());
  CHECK(items[0]["lastActivity"].is_string());

  auto get = cli({"sessions", "get", "alpha"});
  REQUIRE(get.exit_code == 0);
  CHECK(get.out.find("Phase:") != std::string::npos);
  CHECK(get.out.find("Labels:") != std::string::npos);
  CHECK(get.out.find("team=a") != std::string::npos);
  CHECK(get.out.find("Socket:") != std::string::npos);
  CHECK(get.out.find(workdir) != std::string::npos);

  auto missing = cli({"sessions", "get", "nowhere"});
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("not_found") != std::string::npos);
  auto bad_name = cli({"sessions", "create", "Not_A_Label"});
  CHECK(bad_name.exit_code == 2);
  CHECK(bad_name.err.find("DNS label") != std::string::npos);
  auto empty = LocalCli::Plain({"sessions", "list", "--local", "--state-dir", cli.root() + "/empty"});
  CHECK(empty.exit_code == 0);
  CHECK(empty.out.empty());
  CHECK(empty.err.find("no Sessions in local") != std::string::npos);
}

TEST_CASE("cli --local: the owner's suspension stops the runtime and refuses turns until resume", "[backend][cli]") {
  LocalCli cli;
  REQUIRE(cli({"sessions", "create", "chat"}).exit_code == 0);
  REQUIRE(cli({"turn", "--session", "chat", "before"}).exit_code == 0);
  const long pid = cli.Pid("chat");
  REQUIRE(pid > 0);

  auto suspend = cli({"sessions", "suspend", "chat"});
  INFO("suspend: " << suspend.err);
  REQUIRE(suspend.exit_code == 0);
  CHECK(suspend.out == "Session chat suspended\n");
  CHECK(Eventually([&] { return !Alive(pid); }));
  auto info = cli.Get("chat");
  CHECK(info["phase"] == "Suspended");
  CHECK(info["suspendReason"] == "owner");
  CHECK(cli({"sessions", "list"}).out.find("Suspended (owner)") != std::string::npos);

  // Turns, waits and interrupts are refused, with the reason, exit 3 (as a cluster's owner-suspended Session).
  auto refused = cli({"turn", "--session", "chat", "are you there"});
  CHECK(refused.exit_code == 3);
  CHECK(refused.out.empty());
  CHECK(refused.err.find("suspended by its owner") != std::string::npos);
  CHECK(cli({"wait", "chat"}).exit_code == 3);
  CHECK(cli({"interrupt", "--session", "chat"}).exit_code == 3);
  CHECK(cli.Get("chat")["phase"] == "Suspended");  // none of them started it

  auto resume = cli({"sessions", "resume", "chat", "--json"});
  INFO("resume: " << resume.err);
  REQUIRE(resume.exit_code == 0);
  CHECK(json::parse(resume.out)["suspendReason"] != "owner");
  auto after = cli({"turn", "--session", "chat", "after"});
  INFO("after: " << after.err);
  REQUIRE(after.exit_code == 0);
  CHECK(after.out == "echo #2: after\n");  // the journal was kept: it remembers the first turn
}

TEST_CASE("cli --local: sessions delete stops the runtime and removes the Session", "[backend][cli]") {
  LocalCli cli;
  REQUIRE(cli({"sessions", "create", "gone"}).exit_code == 0);
  REQUIRE(cli({"turn", "--session", "gone", "hello"}).exit_code == 0);
  const long pid = cli.Pid("gone");
  REQUIRE(pid > 0);

  auto del = cli({"sessions", "delete", "gone"});
  INFO("delete: " << del.err);
  REQUIRE(del.exit_code == 0);
  CHECK(del.out == "Session gone deleted\n");
  CHECK_FALSE(fs::exists(cli.root() + "/sessions/gone"));
  CHECK(Eventually([&] { return !Alive(pid); }));

  auto again = cli({"sessions", "delete", "gone", "--json"});
  CHECK(again.exit_code == 1);
  CHECK(again.err.find("not_found") != std::string::npos);
  // A turn for a Session that is not there fails at once, and says how to make one.
  const auto start = std::chrono::steady_clock::now();
  auto turn = cli({"turn", "--session", "gone", "anyone"});
  CHECK(turn.exit_code == 1);
  CHECK(turn.err.find("sessionturn sessions create gone --local --state-dir " + cli.root()) != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 20s);
}

TEST_CASE("cli --local: an idle runtime suspends itself, and the next turn resumes the Session, which remembers",
          "[backend][cli]") {
  LocalCli cli;
  REQUIRE(cli({"sessions", "create", "idler"}).exit_code == 0);
  auto first = cli({"turn", "--session", "idler", "--idle-suspend", "1", "one"});
  INFO("first: " << first.err);
  REQUIRE(first.exit_code == 0);
  const long pid = cli.Pid("idler");
  REQUIRE(pid > 0);
  CHECK(Eventually([&] { return !Alive(pid); }));
  json info;
  CHECK(Eventually([&] {
    info = cli.Get("idler");
    return info["phase"] == "Suspended";
  }));
  CHECK(info["suspendReason"] == "idle");
  CHECK(cli({"sessions", "list"}).out.find("Suspended (idle)") != std::string::npos);

  // Nothing runs, so nothing to interrupt: it says so and does not start the runtime for it.
  auto interrupt = cli({"interrupt", "--session", "idler"});
  CHECK(interrupt.exit_code == 0);
  CHECK(interrupt.err.find("no turn is running") != std::string::npos);
  CHECK(cli.Get("idler")["phase"] == "Suspended");

  auto second = cli({"turn", "--session", "idler", "two"});
  INFO("second: " << second.err);
  REQUIRE(second.exit_code == 0);
  CHECK(second.out == "echo #2: two\n");
  // stderr is a pipe: a plain line, no terminal control sequences.
  CHECK(second.err.find("resuming Session idler") != std::string::npos);
  CHECK(second.err.find('\r') == std::string::npos);
  CHECK(cli.Get("idler")["phase"] == "Ready");
}

TEST_CASE("cli --local: --help per command names the local flags", "[backend][cli]") {
  struct Help {
    std::vector<std::string> command;
    std::vector<std::string> has;
    std::vector<std::string> lacks;
  };
  for (const Help& h : std::vector<Help>{
           {{"turn"}, {"--local", "--state-dir", "--runtime", "--idle-suspend", "--session"}, {"--provider"}},
           {{"sessions", "create"}, {"--local", "--state-dir", "--provider", "--workdir", "--label", "--spawner"},
            {"--idle-suspend", "--socket"}},
           {{"sessions", "list"}, {"--local", "--selector", "--json"}, {"--idle-suspend", "--provider"}},
           {{"wait"}, {"--local", "--idle-suspend", "--timeout"}, {"--json"}},
       }) {
    std::vector<std::string> args = h.command;
    args.push_back("--help");
    auto run = LocalCli::Plain(args);
    INFO(json(args).dump() << ": " << run.out);
    CHECK(run.exit_code == 0);
    std::string usage = "\nusage: sessionturn";
    for (const auto& word : h.command) usage += " " + word;
    CHECK(run.out.find(usage) != std::string::npos);
    for (const auto& flag : h.has) CHECK(run.out.find(flag) != std::string::npos);
    for (const auto& flag : h.lacks) CHECK(run.out.find(flag + " ") == std::string::npos);
  }
  auto top = LocalCli::Plain({"--help"});
  CHECK(top.out.find("sessionturn sessions create chat --local") != std::string::npos);
  CHECK(top.out.find("sessionturn turn --session chat --local \"hi\"") != std::string::npos);
}

TEST_CASE("cli --local: usage errors are one line naming the problem and the command's --help", "[backend][cli]") {
  struct Bad {
    std::vector<std::string> args;
    std::string says;
    std::string command;
  };
  for (const Bad& bad : std::vector<Bad>{
           {{"sessions", "create", "chat", "--provider", "echo"}, "--provider and --workdir go with --local",
            "sessionturn sessions create"},
           {{"turn", "--socket", "/tmp/x.sock", "--local", "hi"}, "go with --session", "sessionturn turn"},
           {{"sessions", "list", "--local", "-n", "default"}, "exclude each other", "sessionturn sessions list"},
           {{"sessions", "list", "--state-dir", "/tmp/x"}, "go with --local", "sessionturn sessions list"},
           {{"turn", "--session", "chat", "--local", "--idle-suspend", "soon", "hi"},
            "--idle-suspend: wants a whole number of seconds", "sessionturn turn"},
           {{"sessions", "create", "chat", "--local", "--label", "novalue"}, "--label: wants KEY=VALUE",
            "sessionturn sessions create"},
           {{"sessions", "create", "chat", "--local", "--spawner", "sp"}, "are for a cluster, not --local",
            "sessionturn sessions create"},
           {{"sessions", "create", "chat"}, "needs --spawner NAME or --template FILE", "sessionturn sessions create"},
           {{"sessions", "list", "--local", "--idle-suspend", "5"},
            "--idle-suspend is not an option of `sessionturn sessions list`", "sessionturn sessions list"},
           {{"sessions", "create", "--local"}, "needs a Session NAME", "sessionturn sessions create"},
           {{"sessions", "nuke", "chat"}, "unknown sessions action \"nuke\"", "sessionturn sessions"},
       }) {
    auto run = LocalCli::Plain(bad.args);
    INFO(json(bad.args).dump() << " stderr: " << run.err);
    CHECK(run.exit_code == 2);
    CHECK(run.out.empty());
    CHECK(run.err.find('\n') == run.err.size() - 1);
    CHECK(run.err.find(bad.says) != std::string::npos);
    CHECK(run.err.find("(usage: " + bad.command + " --help)") != std::string::npos);
  }
}
