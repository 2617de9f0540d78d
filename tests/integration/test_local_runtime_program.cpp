// The sessionturn-local-runtime program: serve until SIGTERM (socket removed), client bridging
// stdio to the socket, --help, and exit status 2 with one line for bad usage.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include <catch2/catch.hpp>

#include "integration/runtime_support.hpp"

extern char** environ;

using namespace sessionturn;
using namespace sessionturn::test;

namespace {

const std::string kProgram = std::string(SESSIONTURN_BINARY_DIR) + "/sessionturn-local-runtime";

// A child with pipes on stdin, stdout and stderr; killed and reaped when it goes out of scope.
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;

  explicit Child(std::vector<std::string> args) {
    args.insert(args.begin(), kProgram);
    int pin[2], pout[2], perr[2];
    REQUIRE(::pipe2(pin, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(pout, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(perr, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
    posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = ::posix_spawn(&pid, kProgram.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pin[0]);
    ::close(pout[1]);
    ::close(perr[1]);
    in = pin[1];
    out = pout[0];
    err = perr[0];
    REQUIRE(rc == 0);
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    for (int fd : {in, out, err})
      if (fd >= 0) ::close(fd);
  }
  void CloseStdin() {
    ::close(in);
    in = -1;
  }
  // Exit status, or -1 if it did not exit before the deadline.
  int Wait(std::chrono::milliseconds timeout = kTestDeadline) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(10ms);
    }
  }
  // Everything on `fd` until EOF (bounded by the deadline).
  static std::string ReadAll(int fd, std::chrono::milliseconds timeout = kTestDeadline) {
    std::string s;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return s;
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) return s;
      s.append(buf, static_cast<std::size_t>(n));
    }
  }
};

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("program: serve answers on the socket and shuts down cleanly on SIGTERM", "[runtime]") {
  TempDir dir;
  const std::string sock = dir / "rt.sock";
  Child serve({"serve", "--socket", sock, "--state-dir", dir / "state", "--session-name", "prog"});
  TestClient c;
  REQUIRE(c.Connect(sock));
  REQUIRE(c.Send(ClientRequest::Message("r1", "hi there")));
  std::vector<Event> seen;
  REQUIRE(c.WaitType(event_type::kTurnCompleted, kTestDeadline, &seen));
  bool replied = false;
  for (const auto& e : seen) {
    if (e.type == event_type::kRuntimeStatus) CHECK(e.runtime->session_name == "prog");
    replied = replied || (e.type == event_type::kAssistantMessage && e.text == "echo #1: hi there");
  }
  std::string trace;
  for (const auto& e : seen) trace += e.type + " " + e.text + "\n";
  INFO("events seen:\n" << trace);
  CHECK(replied);
  REQUIRE(::kill(serve.pid, SIGTERM) == 0);
  CHECK(serve.Wait() == 0);
  CHECK_FALSE(Exists(sock));
  CHECK(Exists(dir / "state/events.jsonl"));
  CHECK(c.WaitClosed());
}

TEST_CASE("program: client bridges stdin and stdout to the socket", "[runtime]") {
  TempDir dir;
  const std::string sock = dir / "rt.sock";
  Child serve({"serve", "--socket", sock});
  {
    TestClient probe;
    REQUIRE(probe.Connect(sock));  // wait until it listens
  }
  Child client({"client", "--socket", sock});
  std::string requests = EncodeRequest(ClientRequest::Subscribe(0, {}, false, 0, 0)) + "\n" +
                         EncodeRequest(ClientRequest::Message("r1", "bridged")) + "\n";
  REQUIRE(::write(client.in, requests.data(), requests.size()) == static_cast<ssize_t>(requests.size()));
  // Read the client's stdout until the turn completes, then half-close: the runtime ends the
  // connection and the client exits 0.
  std::string out;
  LineFramer framer;
  bool completed = false;
  auto deadline = std::chrono::steady_clock::now() + kTestDeadline;
  while (!completed && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{client.out, POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(client.out, buf, sizeof buf);
    if (n <= 0) break;
    framer.Feed(std::string_view(buf, static_cast<std::size_t>(n)), [&](std::string_view line) {
      auto e = DecodeEvent(line);
      if (e && e->type == event_type::kAssistantMessage) CHECK(e->text == "echo #1: bridged");
      if (e && e->type == event_type::kTurnCompleted) completed = true;
    });
  }
  CHECK(completed);
  client.CloseStdin();
  CHECK(client.Wait() == 0);
  ::kill(serve.pid, SIGTERM);
  CHECK(serve.Wait() == 0);
}

TEST_CASE("program: --help, bad flags and unreadable scripts", "[runtime]") {
  {
    Child help({"--help"});
    std::string text = Child::ReadAll(help.out);
    CHECK(help.Wait() == 0);
    for (const char* flag : {"--socket", "--state-dir", "--provider", "--allow-shell", "--session-name", "serve",
                             "client", "script:FILE", "command:CMD"})
      CHECK(text.find(flag) != std::string::npos);
  }
  auto one_line_exit_2 = [](std::vector<std::string> args, const std::string& needle) {
    Child bad(std::move(args));
    std::string err = Child::ReadAll(bad.err);
    CHECK(bad.Wait() == 2);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK(err.find(needle) != std::string::npos);
  };
  TempDir dir;
  one_line_exit_2({"serve", "--socket", dir / "s.sock", "--bogus"}, "unknown flag --bogus");
  one_line_exit_2({"serve"}, "--socket PATH is required");
  one_line_exit_2({"serve", "--socket"}, "--socket needs a value");
  one_line_exit_2({"launch"}, "unknown command launch");
  one_line_exit_2({"serve", "--socket", dir / "s.sock", "--provider", "script:" + (dir / "missing.json")},
                  "cannot read script");
  one_line_exit_2({"serve", "--socket", dir / "s.sock", "--provider=nope"}, "unknown provider");
  CHECK_FALSE(Exists(dir / "s.sock"));
}
