// The `sessionturn` CLI as a user runs it: the built binary, spawned against an in-process local
// runtime; exit codes 0-5, the streamed reply, the JSON result, questions answered from stdin,
// watch and interrupt.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sessionturn/testing/local_runtime.hpp"
#include "support/cli_runner.hpp"

using namespace sessionturn;
using namespace std::chrono_literals;
using sessionturn::testing_support::kCli;
using sessionturn::testing_support::Run;
using sessionturn::testing_support::RunCliRaw;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "st-cli-XXXXXX").string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

Run RunCli(const std::vector<std::string>& args, const std::string& input = "",
           const std::function<bool(const std::string&)>& interrupt_when = {}, bool hold_stdin = false) {
  Run run = RunCliRaw(args, input, interrupt_when, hold_stdin);
  if (!run.setup_error.empty()) FAIL(run.setup_error);
  return run;
}

std::unique_ptr<testing::LocalRuntime> StartRuntime(const TempDir& dir, std::string provider = "echo") {
  testing::LocalRuntimeOptions options;
  options.socket_path = dir.path + "/rt.sock";
  options.provider = std::move(provider);
  options.echo_delay = 5ms;
  options.log_sink = [](LogLevel, std::string_view) {};
  options.record_requests = true;  // the tests read ReceivedRequests()/WaitForRequest()
  auto runtime = testing::LocalRuntime::Start(options);
  REQUIRE(runtime);
  return std::move(*runtime);
}

std::string WriteScript(const TempDir& dir, const std::string& json) {
  const std::string path = dir.path + "/script.json";
  std::ofstream(path) << json;
  return "script:" + path;
}

}  // namespace

TEST_CASE("cli: --help, and usage errors exit 2 with one line and a pointer to the command's --help", "[cli]") {
  auto help = RunCli({"--help"});
  REQUIRE(help.exit_code == 0);
  REQUIRE(help.out.find("sessionturn turn") != std::string::npos);
  REQUIRE(help.out.find("Exit codes:") != std::string::npos);
  REQUIRE(RunCli({"help"}).out == help.out);

  struct Bad {
    std::vector<std::string> args;
    std::string says;     // part of the one line
    std::string command;  // the --help it points to
  };
  for (const Bad& bad : std::vector<Bad>{
           {{}, "no command given", "sessionturn"},
           {{"frobnicate"}, "unknown command \"frobnicate\"", "sessionturn"},
           {{"turn", "hello"}, "give --socket PATH, --session NAME or --exec CMD", "sessionturn turn"},
           {{"turn", "--socket", "/tmp/x.sock"}, "no PROMPT given", "sessionturn turn"},
           {{"turn", "--socket", "/tmp/x.sock", "--timeout", "soon", "hi"},
            "--timeout: wants a positive number of seconds, not \"soon\"", "sessionturn turn"},
           {{"turn", "--socket", "/tmp/x.sock", "--questions", "maybe", "hi"},
            "--questions: wants decline or ask, not \"maybe\"", "sessionturn turn"},
           {{"turn", "--socket", "/tmp/x.sock", "--bogus", "hi"}, "unknown option --bogus", "sessionturn turn"},
           {{"turn", "--socket", "/tmp/x.sock", "a", "b"}, "more than one PROMPT given", "sessionturn turn"},
           {{"turn", "--socket", "/tmp/x.sock", "--", "a", "b"}, "more than one PROMPT given", "sessionturn turn"},
           {{"turn", "--socket", "/tmp/x.sock", "hi", "--exec"}, "--exec needs a command", "sessionturn turn"},
           {{"turn", "--socket", "", "hi"}, "--socket: needs a path", "sessionturn turn"},
           {{"turn", "--socket"}, "--socket", "sessionturn turn"},
           {{"watch", "--socket", "/tmp/x.sock", "--since", "-3"}, "--since: wants an event id", "sessionturn watch"},
           {{"interrupt", "--socket", "/tmp/x.sock", "--json"}, "--json is not an option of `sessionturn interrupt`",
            "sessionturn interrupt"},
           {{"interrupt", "--socket", "/tmp/x.sock", "--exec", "x"}, "give one of --socket, --session and --exec",
            "sessionturn interrupt"},
       }) {
    auto run = RunCli(bad.args);
    INFO("args: " << nlohmann::json(bad.args).dump() << " stderr: " << run.err);
    CHECK(run.exit_code == 2);
    CHECK(run.out.empty());
    // One line, not the manual.
    CHECK(run.err.find('\n') == run.err.size() - 1);
    CHECK(run.err.rfind("sessionturn: ", 0) == 0);
    CHECK(run.err.find(bad.says) != std::string::npos);
    CHECK(run.err.find("(usage: " + bad.command + " --help)") != std::string::npos);
  }
}

TEST_CASE("cli: every command has its own --help", "[cli]") {
  for (const std::string command : {"turn", "watch", "interrupt", "sessions", "wait"}) {
    auto run = RunCli({command, "--help"});
    INFO(command << ": " << run.err);
    CHECK(run.exit_code == 0);
    CHECK(run.out.find("\nusage: sessionturn " + command) != std::string::npos);
    CHECK(RunCli({"help", command}).out == run.out);
  }
  auto turn = RunCli({"turn", "--help"});
  for (const char* flag : {"--socket", "--session", "--exec", "--timeout", "--questions", "--no-reconnect",
                           "--allow-commands", "--json", "PROMPT"}) {
    INFO(flag);
    CHECK(turn.out.find(flag) != std::string::npos);
  }
  CHECK(turn.out.find("sessionturn wait") == std::string::npos);  // that command's help only
  auto watch = RunCli({"watch", "--help"});
  CHECK(watch.out.find("--since") != std::string::npos);
  CHECK(watch.out.find("--questions") == std::string::npos);
  auto get = RunCli({"sessions", "get", "--help"});
  CHECK(get.exit_code == 0);
  CHECK(get.out.find("\nusage: sessionturn sessions get NAME") != std::string::npos);
}

TEST_CASE("cli: a turn streams the reply and exits 0, and the Session remembers earlier turns", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir);
  auto first = RunCli({"turn", "--socket", runtime->socket_path(), "hello there"});
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  REQUIRE(first.out == "echo #1: hello there\n");
  auto second = RunCli({"turn", "--socket", runtime->socket_path(), "-"}, "from stdin\n");
  INFO(second.err);
  REQUIRE(second.exit_code == 0);
  REQUIRE(second.out.find("echo #2: from stdin") == 0);
}

TEST_CASE("cli: --json prints one object with the documented keys", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir);
  auto run = RunCli({"turn", "--json", "--socket", runtime->socket_path(), "json please"});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  auto j = nlohmann::json::parse(run.out);
  for (const char* key : {"requestId", "turnId", "lastEventId", "journalId", "status", "text", "message",
                          "declinedQuestions", "answeredQuestions", "shared", "reconnects"}) {
    INFO(key);
    REQUIRE(j.contains(key));
  }
  REQUIRE(j["status"] == "completed");
  REQUIRE(j["text"] == "echo #1: json please");
  REQUIRE(j["turnId"].get<std::string>().rfind("turn-", 0) == 0);
  REQUIRE(j["shared"] == false);
  REQUIRE(j["reconnects"] == 0);
  CHECK(j["journalId"] == runtime->journal_id());
  CHECK(j["lastEventId"] == runtime->last_event_id());
  CHECK(j["requestId"].get<std::string>().size() == 36);
}

TEST_CASE("cli: a failed turn exits 1 with the error text", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(
      dir, WriteScript(dir, R"({"turns": [[{"type": "delta", "text": "trying"}, {"type": "fail", "text": "disk on fire"}]]})"));
  auto run = RunCli({"turn", "--json", "--socket", runtime->socket_path(), "go"});
  INFO(run.err);
  REQUIRE(run.exit_code == 1);
  auto j = nlohmann::json::parse(run.out);
  REQUIRE(j["status"] == "failed");
  REQUIRE(j["message"].get<std::string>().find("disk on fire") != std::string::npos);

  auto plain = RunCli({"turn", "--socket", runtime->socket_path(), "again"});
  REQUIRE(plain.exit_code == 1);
  REQUIRE(plain.err.find("failed") != std::string::npos);
}

TEST_CASE("cli: an unreachable runtime exits 3", "[cli]") {
  TempDir dir;
  auto run = RunCli({"turn", "--socket", dir.path + "/none.sock", "hello"});
  REQUIRE(run.exit_code == 3);
  REQUIRE(run.err.find("none.sock") != std::string::npos);
  auto json = RunCli({"turn", "--json", "--socket", dir.path + "/none.sock", "hello"});
  REQUIRE(json.exit_code == 3);
  auto j = nlohmann::json::parse(json.out);
  REQUIRE(j["status"] == "error");
  REQUIRE(j["message"].get<std::string>().find("none.sock") != std::string::npos);
  auto exec = RunCli({"turn", "hello", "--exec", "/nonexistent/sessionturn-no-such-runtime", "client"});
  REQUIRE(exec.exit_code == 3);
  REQUIRE(exec.err.find("No such file or directory") != std::string::npos);
}

TEST_CASE("cli: a turn that does not finish in time exits 4", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir);
  runtime->PauseProvider(true);
  auto run = RunCli({"turn", "--json", "--timeout", "1", "--socket", runtime->socket_path(), "slow"});
  INFO(run.err);
  REQUIRE(run.exit_code == 4);
  auto j = nlohmann::json::parse(run.out);
  REQUIRE(j["status"] == "timeout");
  // The turn was accepted (queued behind the paused provider): its id and cursor are kept, so a script
  // can follow it later.
  CHECK(j["turnId"] == "turn-1");
  CHECK(j["journalId"] == runtime->journal_id());
  CHECK(j["lastEventId"].get<std::int64_t>() > 0);
  CHECK(j["requestId"].get<std::string>().size() == 36);
  CHECK_THAT(j["message"].get<std::string>(), Catch::Contains("turn-1"));
  runtime->PauseProvider(false);
}

TEST_CASE("cli: a rejected prompt exits 5, and a command prompt without --allow-commands exits 2", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir);
  runtime->SetDraining(true);
  auto run = RunCli({"turn", "--socket", runtime->socket_path(), "hello"});
  REQUIRE(run.exit_code == 5);
  REQUIRE(run.err.find(std::string(testing::reject_reason::kDraining)) != std::string::npos);
  runtime->SetDraining(false);

  auto command = RunCli({"turn", "--socket", runtime->socket_path(), "!rm -rf /"});
  REQUIRE(command.exit_code == 2);
  const auto requests = runtime->ReceivedRequests();
  for (const auto& r : requests) REQUIRE(r.text.find("rm -rf") == std::string::npos);  // never sent
}

TEST_CASE("cli: --questions ask takes answers from stdin, and decline is the default", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir, WriteScript(dir, R"({"turns": [[
      {"type": "question", "questions": [{"id": "color", "question": "Which colour?",
        "options": [{"label": "red"}, {"label": "blue", "description": "calm"}]}]},
      {"type": "message", "text": "done"}]], "repeat": "last"})"));
  auto asked = RunCli({"turn", "--json", "--questions", "ask", "--socket", runtime->socket_path(), "pick"}, "2\n");
  INFO(asked.err);
  REQUIRE(asked.exit_code == 0);
  auto j = nlohmann::json::parse(asked.out);
  REQUIRE(j["answeredQuestions"] == 1);
  REQUIRE(j["declinedQuestions"] == 0);
  REQUIRE(j["text"].get<std::string>().find("color=blue") != std::string::npos);
  REQUIRE(asked.err.find("Which colour?") != std::string::npos);

  auto declined = RunCli({"turn", "--json", "--socket", runtime->socket_path(), "pick again"});
  REQUIRE(declined.exit_code == 0);
  auto d = nlohmann::json::parse(declined.out);
  REQUIRE(d["declinedQuestions"] == 1);
  REQUIRE(d["answeredQuestions"] == 0);
}

TEST_CASE("cli: interrupt stops the running turn, and with none it exits 5", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir, WriteScript(dir, R"({"turns": [[{"type": "delta", "text": "working"},
      {"type": "sleep", "ms": 30000}, {"type": "message", "text": "too late"}]]})"));
  auto idle = RunCli({"interrupt", "--socket", runtime->socket_path()});
  REQUIRE(idle.exit_code == 5);
  REQUIRE(idle.err.find(std::string(testing::reject_reason::kNoActiveTurn)) != std::string::npos);

  std::thread turn_thread;
  Run turn;
  turn_thread = std::thread([&] { turn = RunCliRaw({"turn", "--json", "--socket", runtime->socket_path(), "long"}); });
  auto started = runtime->WaitForEvent([](const Event& e) { return e.Is(event_type::kTurnStarted); }, 30s);
  // No assertion before the join: a failing REQUIRE would leave the thread running.
  Run stop = RunCliRaw({"interrupt", "--socket", runtime->socket_path()});
  turn_thread.join();
  REQUIRE(started);
  INFO(stop.err << turn.err << turn.setup_error);
  REQUIRE(stop.exit_code == 0);
  REQUIRE(turn.exit_code == 1);
  REQUIRE(nlohmann::json::parse(turn.out)["status"] == "interrupted");
}

TEST_CASE("cli: watch prints the Session's events until interrupted", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir);
  REQUIRE(RunCli({"turn", "--socket", runtime->socket_path(), "watch me"}).exit_code == 0);
  auto watch = RunCli({"watch", "--json", "--socket", runtime->socket_path()}, "",
                      [](const std::string& out) { return out.find("turn.completed") != std::string::npos; });
  INFO(watch.err);
  REQUIRE(watch.exit_code == 0);
  REQUIRE(watch.out.find("\"user.message\"") != std::string::npos);
  REQUIRE(watch.out.find("watch me") != std::string::npos);
  auto first_line = watch.out.substr(0, watch.out.find('\n'));
  REQUIRE(nlohmann::json::parse(first_line).is_object());

  auto human = RunCli({"watch", "--since", "1", "--socket", runtime->socket_path()}, "",
                      [](const std::string& out) { return out.find("turn.completed") != std::string::npos; });
  INFO(human.out);
  REQUIRE(human.exit_code == 0);
  REQUIRE(human.out.find("[1]") == std::string::npos);  // since 1: event 1 is not repeated
  REQUIRE(human.out.find("turn.completed") != std::string::npos);
}

TEST_CASE("cli: --exec runs a turn through a child process (the runtime's stdio client)", "[cli]") {
  const std::string client = std::string(SESSIONTURN_BINARY_DIR) + "/sessionturn-local-runtime";
  if (::access(client.c_str(), X_OK) != 0) FAIL("not built: " << client);
  TempDir dir;
  auto runtime = StartRuntime(dir);
  auto run = RunCli({"turn", "--json", "through a pipe", "--exec", client, "client", "--socket", runtime->socket_path()});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  auto j = nlohmann::json::parse(run.out);
  REQUIRE(j["status"] == "completed");
  REQUIRE(j["text"] == "echo #1: through a pipe");
}

TEST_CASE("cli: --questions ask: multi-select numbers, free text, and an empty line declines", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir, WriteScript(dir, R"({"turns": [[
      {"type": "question", "questions": [
        {"id": "langs", "question": "Which languages?", "multiSelect": true,
         "options": [{"label": "C++"}, {"label": "Go"}, {"label": "Rust"}]},
        {"id": "name", "question": "Project name?"}]},
      {"type": "message", "text": "ok"}]], "repeat": "last"})"));
  auto answered = RunCli({"turn", "--json", "--questions", "ask", "--socket", runtime->socket_path(), "q"},
                         "1, 3\nmy project\n");
  INFO(answered.err);
  REQUIRE(answered.exit_code == 0);
  const std::string text = nlohmann::json::parse(answered.out)["text"];
  REQUIRE(text.find("langs=C++,Rust") != std::string::npos);
  REQUIRE(text.find("name=my project") != std::string::npos);

  auto declined = RunCli({"turn", "--json", "--questions", "ask", "--socket", runtime->socket_path(), "q"}, "\n");
  REQUIRE(declined.exit_code == 0);
  auto d = nlohmann::json::parse(declined.out);
  REQUIRE(d["declinedQuestions"] == 1);
  REQUIRE(d["answeredQuestions"] == 0);
}

TEST_CASE("cli: a turn that times out while a question waits for the user still exits 4", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir, WriteScript(dir, R"({"turns": [[
      {"type": "question", "questions": [{"id": "q", "question": "Anyone there?"}]},
      {"type": "message", "text": "ok"}]]})"));
  const auto start = std::chrono::steady_clock::now();
  // stdin stays open and silent: the user never answers.
  auto run = RunCli({"turn", "--json", "--timeout", "2", "--questions", "ask", "--socket", runtime->socket_path(), "q"},
                    "", {}, /*hold_stdin=*/true);
  INFO(run.err);
  REQUIRE(run.exit_code == 4);
  REQUIRE(run.err.find("Anyone there?") != std::string::npos);
  REQUIRE(std::chrono::steady_clock::now() - start < 30s);
}

TEST_CASE("cli: Ctrl-C abandons a running turn (the runtime is told to interrupt) and exits 1", "[cli]") {
  TempDir dir;
  auto runtime = StartRuntime(dir, WriteScript(dir, R"({"turns": [[{"type": "delta", "text": "working"},
      {"type": "sleep", "ms": 30000}, {"type": "message", "text": "too late"}]]})"));
  auto run = RunCli({"turn", "--socket", runtime->socket_path(), "long job"}, "",
                    [](const std::string& out) { return out.find("working") != std::string::npos; });
  INFO(run.err);
  REQUIRE(run.exit_code == 1);
  REQUIRE(run.err.find("cancelled") != std::string::npos);
  REQUIRE(runtime->WaitForRequest([](const ClientRequest& r) { return r.type == request_type::kInterrupt; }, 10s));
}
