// The unix-socket and child-process connections against real sockets and real processes: framing,
// the continuous reader and its byte bound, close and destruction with operations pending, the
// child's exit status, stderr tail and reaping.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "conn/line_queue.hpp"
#include "sessionturn/connection.hpp"

using namespace sessionturn;
using namespace std::chrono_literals;

namespace {

// Generous: the machine is shared and slow under sanitizers; waits end as soon as their condition holds.
constexpr auto kWait = 20s;

struct TempDir {
  std::string path;
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "st-conn-XXXXXX").string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads one '\n'-terminated line (blocking, with a deadline). Empty optional on EOF/timeout.
std::optional<std::string> RecvLine(int fd, std::string& buffer) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  for (;;) {
    const auto nl = buffer.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char chunk[4096];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return std::nullopt;
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

// A unix-socket server for one connection, run by a test-owned thread: `session` gets the accepted fd.
class UnixServer {
 public:
  UnixServer(const std::string& dir, std::function<void(int fd)> session) : path_(dir + "/s.sock") {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listen_fd_, 4) == 0);
    thread_ = std::thread([this, session = std::move(session)] {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kWait).count())) == 1) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          session(fd);
          ::close(fd);
        }
      }
      done_ = true;
    });
  }
  ~UnixServer() {
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
  }
  const std::string& path() const { return path_; }
  bool done() const { return done_; }

 private:
  std::string path_;
  int listen_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> done_{false};
};

Result<std::shared_ptr<Connection>> ConnectNow(Connector& connector) {
  auto promise = std::make_shared<std::promise<Result<std::shared_ptr<Connection>>>>();
  auto future = promise->get_future();
  connector.AsyncConnect([promise](Result<std::shared_ptr<Connection>> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(kWait) != std::future_status::ready) return Fail(Errc::timeout, "connect did not finish");
  return future.get();
}

Result<std::string> ReadLine(Connection& connection) {
  auto promise = std::make_shared<std::promise<Result<std::string>>>();
  auto future = promise->get_future();
  connection.AsyncReadLine([promise](Result<std::string> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(kWait) != std::future_status::ready) return Fail(Errc::timeout, "no line within the test's wait");
  return future.get();
}

Status WriteLine(Connection& connection, std::string line) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  connection.AsyncWrite(std::move(line), [promise](Status s) { promise->set_value(std::move(s)); });
  if (future.wait_for(kWait) != std::future_status::ready) return Fail(Errc::timeout, "write did not finish");
  return future.get();
}

// Reads until the stream ends, chaining reads in the handler (no thread hop per line). Returns the
// lines and the end.
struct Drained {
  std::vector<std::string> lines;
  std::optional<Error> end;
};
Drained ReadToEnd(Connection& connection) {
  // The caller's Connection lives on the caller's stack: once the caller gave up waiting (and is
  // unwinding, destroying it), a handler must not touch it. `abandoned` is set under `mu`, which
  // every handler holds while it reads the next line.
  struct State {
    Drained drained;
    std::promise<void> done;
    std::function<void(Result<std::string>)> next;
    Connection* connection;
    std::mutex mu;
    bool abandoned = false;
  };
  auto state = std::make_shared<State>();
  state->connection = &connection;
  state->next = [weak = std::weak_ptr<State>(state)](Result<std::string> r) {
    auto raw = weak.lock();
    if (!raw) return;  // the test already gave up
    std::lock_guard lock(raw->mu);
    if (raw->abandoned) return;
    if (!r) {
      raw->drained.end = r.error();
      raw->done.set_value();
      return;
    }
    raw->drained.lines.push_back(std::move(*r));
    raw->connection->AsyncReadLine(raw->next);
  };
  connection.AsyncReadLine(state->next);
  auto future = state->done.get_future();
  if (future.wait_for(kWait) != std::future_status::ready) {
    {
      std::lock_guard lock(state->mu);
      state->abandoned = true;
    }
    FAIL("the stream did not end within the test's wait");
  }
  std::lock_guard lock(state->mu);
  return std::move(state->drained);
}

// Waits for `condition` (polled) until the test's wait runs out.
bool WaitFor(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

// True once `pid` no longer exists at all: neither running nor a zombie waiting to be reaped.
bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

ContextOptions QuietOptions(int threads) {
  ContextOptions options;
  options.threads = threads;
  options.log_sink = [](LogLevel, std::string_view) {};
  return options;
}

}  // namespace

TEST_CASE("LineQueue serves queued lines in order, then the end", "[connection]") {
  conn::LineQueue queue(ConnectionLimits{}, "test:", nullptr);
  std::vector<std::string> got;
  std::optional<Error> end;
  std::function<void(Result<std::string>)> reader = [&](Result<std::string> r) {
    if (r) got.push_back(*r);
    else end = r.error();
  };
  REQUIRE(queue.Feed("a\n\n  \nb\nparti"));
  REQUIRE(queue.QueuedLines() == 2);
  queue.Finish(Error(Errc::connection_lost, "gone"));
  queue.Read(reader);
  queue.Read(reader);
  REQUIRE(got == std::vector<std::string>{"a", "b"});
  REQUIRE_FALSE(end);
  queue.Read(reader);
  REQUIRE(end);
  REQUIRE(end->code == Errc::connection_lost);
  REQUIRE_FALSE(queue.Feed("late\n"));
}

TEST_CASE("LineQueue fails with too_large when the queued bytes exceed the bound", "[connection]") {
  ConnectionLimits limits;
  limits.max_queued_bytes = 10;
  conn::LineQueue queue(limits, "test:x", nullptr);
  REQUIRE(queue.Feed("12345\n"));
  REQUIRE_FALSE(queue.Feed("678901\n"));
  std::optional<Error> end;
  queue.Read([&](Result<std::string> r) {
    REQUIRE_FALSE(r);
    end = r.error();
  });
  REQUIRE(end);
  REQUIRE(end->code == Errc::too_large);
  REQUIRE(end->message.find("queued bytes exceed") != std::string::npos);
}

TEST_CASE("LineQueue rejects a second outstanding read", "[connection]") {
  conn::LineQueue queue(ConnectionLimits{}, "test:", nullptr);
  bool first_called = false;
  std::optional<Error> second;
  queue.Read([&](Result<std::string>) { first_called = true; });
  queue.Read([&](Result<std::string> r) { second = r.error(); });
  REQUIRE_FALSE(first_called);
  REQUIRE(second);
  REQUIRE(second->code == Errc::invalid_argument);
  REQUIRE(queue.Feed("x\n"));
  REQUIRE(first_called);
}

TEST_CASE("WriteQueue keeps order and fails the rest", "[connection]") {
  conn::WriteQueue queue;
  std::vector<std::string> done;
  queue.Push("one", [&](Status s) { done.push_back(s ? "one ok" : "one failed"); });
  queue.Push("two", [&](Status s) { done.push_back(s ? "two ok" : "two failed"); });
  REQUIRE(queue.Front() == "one\n");
  REQUIRE_FALSE(queue.Advance(2));
  REQUIRE(queue.Front() == "e\n");
  REQUIRE(queue.Advance(2));
  queue.Complete({});
  queue.FailAll(Error(Errc::connection_lost, "x"));
  REQUIRE(done == std::vector<std::string>{"one ok", "two failed"});
  REQUIRE(queue.Empty());
  REQUIRE(queue.PendingBytes() == 0);
}

TEST_CASE("unix connection: lines both ways, blank lines skipped, EOF reported", "[connection]") {
  TempDir dir;
  UnixServer server(dir.path, [](int fd) {
    std::string buffer;
    for (int i = 0; i < 3; ++i) {
      auto line = RecvLine(fd, buffer);
      if (!line) return;
      SendAll(fd, "echo:" + *line + "\n\n   \r\n");
    }
  });
  Context context(QuietOptions(2));
  auto connector = MakeUnixConnector(context, server.path());
  REQUIRE(connector->Describe() == "unix:" + server.path());
  auto connection = ConnectNow(*connector);
  REQUIRE(connection);
  auto& c = **connection;
  REQUIRE(c.Describe() == "unix:" + server.path());
  for (const char* text : {"a", "bb", "ccc"}) REQUIRE(WriteLine(c, text));
  for (const char* text : {"echo:a", "echo:bb", "echo:ccc"}) {
    auto line = ReadLine(c);
    REQUIRE(line);
    REQUIRE(*line == text);
  }
  auto end = ReadLine(c);
  REQUIRE_FALSE(end);
  REQUIRE(end.error().code == Errc::connection_lost);
  REQUIRE(end.error().message.find("closed the connection") != std::string::npos);
}

TEST_CASE("unix connector: a missing socket names the path and the reason", "[connection]") {
  TempDir dir;
  Context context(QuietOptions(1));
  const std::string path = dir.path + "/nothing.sock";
  auto connection = ConnectNow(*MakeUnixConnector(context, path));
  REQUIRE_FALSE(connection);
  REQUIRE(connection.error().code == Errc::connection_failed);
  REQUIRE(connection.error().message == "connect unix:" + path + ": No such file or directory");

  auto too_long = ConnectNow(*MakeUnixConnector(context, "/" + std::string(200, 'x')));
  REQUIRE_FALSE(too_long);
  REQUIRE(too_long.error().code == Errc::invalid_argument);
}

TEST_CASE("unix connection: the reader drains the socket while the consumer is slow", "[connection]") {
  // The peer writes far more than any socket buffer holds and then closes. Its writes can only
  // finish if our side keeps reading while nobody asks for a line: that is what keeps the
  // runtime's 256-event subscriber bound from disconnecting a slow caller.
  constexpr int kLines = 40000;
  const std::string pad(200, 'p');
  TempDir dir;
  UnixServer server(dir.path, [&](int fd) {
    std::string chunk;
    for (int i = 0; i < kLines; ++i) {
      chunk += std::to_string(i) + ":" + pad + "\n";
      if (chunk.size() > 64 * 1024) {
        if (!SendAll(fd, chunk)) return;
        chunk.clear();
      }
    }
    SendAll(fd, chunk);
  });
  Context context(QuietOptions(2));
  auto connection = ConnectNow(*MakeUnixConnector(context, server.path()));
  REQUIRE(connection);
  // ~8 MB written: only possible if the connection read it all without a single AsyncReadLine.
  REQUIRE(WaitFor([&] { return server.done(); }));
  Drained drained = ReadToEnd(**connection);
  REQUIRE(drained.lines.size() == static_cast<std::size_t>(kLines));
  for (int i = 0; i < kLines; ++i) {
    if (drained.lines[static_cast<std::size_t>(i)] != std::to_string(i) + ":" + pad) FAIL("line " << i << " out of order");
  }
  REQUIRE(drained.end);
  REQUIRE(drained.end->code == Errc::connection_lost);
}

TEST_CASE("unix connection: exceeding the queue bound fails with too_large", "[connection]") {
  TempDir dir;
  UnixServer server(dir.path, [](int fd) {
    const std::string line(1000, 'q');
    for (int i = 0; i < 2000; ++i) {
      if (!SendAll(fd, line + "\n")) return;  // our side closes once the bound is exceeded
    }
  });
  Context context(QuietOptions(1));
  ConnectionLimits limits;
  limits.max_queued_bytes = 256 * 1024;
  auto connection = ConnectNow(*MakeUnixConnector(context, server.path(), limits));
  REQUIRE(connection);
  REQUIRE(WaitFor([&] { return server.done(); }));
  auto line = ReadLine(**connection);
  REQUIRE_FALSE(line);
  REQUIRE(line.error().code == Errc::too_large);
  REQUIRE(line.error().message.find("queued bytes exceed") != std::string::npos);
  auto write = WriteLine(**connection, "x");
  REQUIRE_FALSE(write);
  REQUIRE(write.error().code == Errc::too_large);
}

TEST_CASE("unix connection: a line over 8 MiB is skipped, the lines around it arrive", "[connection]") {
  TempDir dir;
  UnixServer server(dir.path, [](int fd) {
    SendAll(fd, "before\n");
    SendAll(fd, std::string(kMaxLineBytes + 1024, 'z') + "\n");
    SendAll(fd, "after\n");
    SendAll(fd, std::string(kMaxLineBytes + 1, 'y') + "\nlast\n");
  });
  std::atomic<int> warnings{0};
  ContextOptions options;
  options.log_sink = [&](LogLevel level, std::string_view message) {
    if (level == LogLevel::warning && message.find("skipped a line") != std::string_view::npos) ++warnings;
  };
  Context context(options);
  auto connection = ConnectNow(*MakeUnixConnector(context, server.path()));
  REQUIRE(connection);
  for (const char* expected : {"before", "after", "last"}) {
    auto line = ReadLine(**connection);
    REQUIRE(line);
    REQUIRE(*line == expected);
  }
  REQUIRE(warnings == 1);  // logged once, not once per oversized line
}

TEST_CASE("unix connection: Close completes a pending read and later calls with cancelled", "[connection]") {
  TempDir dir;
  std::atomic<bool> release{false};
  UnixServer server(dir.path, [&](int) { WaitFor([&] { return release.load(); }); });
  Context context(QuietOptions(2));
  auto connection = ConnectNow(*MakeUnixConnector(context, server.path()));
  REQUIRE(connection);
  auto& c = **connection;
  auto promise = std::make_shared<std::promise<Result<std::string>>>();
  auto future = promise->get_future();
  c.AsyncReadLine([promise](Result<std::string> r) { promise->set_value(std::move(r)); });
  c.Close();
  c.Close();  // idempotent
  REQUIRE(future.wait_for(kWait) == std::future_status::ready);
  auto pending = future.get();
  REQUIRE_FALSE(pending);
  REQUIRE(pending.error().code == Errc::cancelled);
  auto later = ReadLine(c);
  REQUIRE_FALSE(later);
  REQUIRE(later.error().code == Errc::cancelled);
  auto write = WriteLine(c, "x");
  REQUIRE_FALSE(write);
  REQUIRE(write.error().code == Errc::cancelled);
  release = true;
}

// A server that sends "go" and records every line it receives until EOF, and a connection to it whose
// read of "go" runs `on_go` on the connection's strand.
struct GoServer {
  TempDir dir;
  std::vector<std::string> received;
  UnixServer server{dir.path, [this](int fd) {
                      SendAll(fd, "go\n");
                      std::string buffer;
                      while (auto line = RecvLine(fd, buffer)) received.push_back(*line);
                    }};

  std::shared_ptr<Connection> Connect(Context& context, std::function<void(Connection&)> on_go) {
    auto connection = ConnectNow(*MakeUnixConnector(context, server.path()));
    REQUIRE(connection);
    std::shared_ptr<Connection> c = *connection;
    c->AsyncReadLine([c, on_go = std::move(on_go)](Result<std::string> line) {
      if (line) on_go(*c);
    });
    return c;
  }
};

TEST_CASE("unix connection: writes from its strand keep their order, a partly written one too", "[connection]") {
  // On the connection's strand (inside a read handler) a write nobody waits for is written at once, one
  // with a handler is queued: neither may overtake the other, also when the first one is too large for
  // the socket buffer and its rest goes through the queue.
  GoServer go;
  const std::string big(600000, 'x');
  Context context(QuietOptions(2));
  auto written = std::make_shared<std::promise<Status>>();
  auto future = written->get_future();
  auto c = go.Connect(context, [written, &big](Connection& conn) {
    conn.AsyncWrite(big, {});
    conn.AsyncWrite("b", {});
    conn.AsyncWrite("c", [written](Status s) { written->set_value(s); });
  });
  REQUIRE(future.wait_for(kWait) == std::future_status::ready);
  CHECK(future.get());
  c->Close();
  REQUIRE(WaitFor([&] { return go.server.done(); }));
  REQUIRE(go.received.size() == 3);
  CHECK(go.received[0] == big);
  CHECK(go.received[1] == "b");
  CHECK(go.received[2] == "c");
}

TEST_CASE("unix connection: a write from its strand after Close is not written", "[connection]") {
  GoServer go;
  Context context(QuietOptions(2));
  auto after = std::make_shared<std::promise<Status>>();
  auto future = after->get_future();
  auto c = go.Connect(context, [after](Connection& conn) {
    conn.AsyncWrite("a", {});
    conn.Close();
    conn.AsyncWrite("after-unwaited", {});
    conn.AsyncWrite("after", [after](Status s) { after->set_value(s); });
  });
  REQUIRE(future.wait_for(kWait) == std::future_status::ready);
  auto status = future.get();
  REQUIRE_FALSE(status);
  CHECK(status.error().code == Errc::cancelled);
  REQUIRE(WaitFor([&] { return go.server.done(); }));
  CHECK(go.received == std::vector<std::string>{"a"});
}

TEST_CASE("unix connection: AsyncWriteLines writes its lines in order with the writes around it", "[connection]") {
  // From the strand (joined into one write) and from another thread (queued), each line whole.
  GoServer go;
  Context context(QuietOptions(2));
  auto written = std::make_shared<std::promise<Status>>();
  auto future = written->get_future();
  auto c = go.Connect(context, [written](Connection& conn) {
    conn.AsyncWrite("a", {});
    conn.AsyncWriteLines({"b", "c", "{\"json\":1}"});
    conn.AsyncWriteLines({});
    conn.AsyncWriteLines({"d"});
    conn.AsyncWrite("e", [written](Status s) { written->set_value(s); });
  });
  REQUIRE(future.wait_for(kWait) == std::future_status::ready);
  CHECK(future.get());
  c->AsyncWriteLines({"f", "g"});
  REQUIRE(WriteLine(*c, "h"));
  c->Close();
  REQUIRE(WaitFor([&] { return go.server.done(); }));
  CHECK(go.received == std::vector<std::string>{"a", "b", "c", "{\"json\":1}", "d", "e", "f", "g", "h"});
}

TEST_CASE("Connection::AsyncWriteLines by default makes one AsyncWrite per line", "[connection]") {
  // A wrapper that only overrides AsyncWrite (a fault injector, a logger) still sees every line.
  struct Recording : Connection {
    std::vector<std::string> writes;
    void AsyncReadLine(LineHandler) override {}
    void AsyncWrite(std::string line, WriteHandler done) override {
      CHECK_FALSE(done);
      writes.push_back(std::move(line));
    }
    void Close() override {}
    std::string Diagnostics() const override { return {}; }
    std::string Describe() const override { return "recording"; }
  } recording;
  recording.AsyncWriteLines({"one", "two"});
  CHECK(recording.writes == std::vector<std::string>{"one", "two"});
}

TEST_CASE("unix connection: Close from its read handler ends it before the handler's job returns", "[connection]") {
  // The close is done when the read's job returns (not posted): a read asked for after it and a
  // write queued after it are cancelled, the lines read with it are not delivered, the peer sees
  // the end.
  TempDir dir;
  std::atomic<bool> peer_saw_end{false};
  UnixServer server(dir.path, [&](int fd) {
    SendAll(fd, "one\ntwo\nthree\n");
    char byte;
    peer_saw_end = ::recv(fd, &byte, 1, 0) == 0;
  });
  Context context(QuietOptions(2));
  auto connection = ConnectNow(*MakeUnixConnector(context, server.path()));
  REQUIRE(connection);
  std::shared_ptr<Connection> c = *connection;
  auto read_after = std::make_shared<std::promise<Errc>>();
  auto write_after = std::make_shared<std::promise<Errc>>();
  auto read_future = read_after->get_future();
  auto write_future = write_after->get_future();
  c->AsyncReadLine([c, read_after, write_after](Result<std::string> line) {
    REQUIRE(line);
    CHECK(*line == "one");
    c->Close();
    c->AsyncReadLine([read_after](Result<std::string> next) {
      read_after->set_value(next ? Errc::ok : next.error().code);
    });
    c->AsyncWrite("after", [write_after](Status s) { write_after->set_value(s ? Errc::ok : s.error().code); });
  });
  REQUIRE(read_future.wait_for(kWait) == std::future_status::ready);
  REQUIRE(write_future.wait_for(kWait) == std::future_status::ready);
  CHECK(read_future.get() == Errc::cancelled);  // not "two": the queued lines went with the close
  CHECK(write_future.get() == Errc::cancelled);
  REQUIRE(WaitFor([&] { return server.done(); }));
  CHECK(peer_saw_end);
}

TEST_CASE("unix connection: a write queued before a Close from the read handler still goes out", "[connection]") {
  // A write with a handler is queued (not written inside the call); the Close after it lets it go out
  // first, as a Close from anywhere else does (its handler may still hear "cancelled": the close
  // came while it was in flight). A write after the Close is not written, queued writes or not.
  GoServer go;
  Context context(QuietOptions(2));
  auto written = std::make_shared<std::promise<Status>>();
  auto after = std::make_shared<std::promise<Status>>();
  auto future = written->get_future();
  auto after_future = after->get_future();
  auto c = go.Connect(context, [written, after](Connection& conn) {
    conn.AsyncWrite("before-close", [written](Status s) { written->set_value(s); });
    conn.Close();
    conn.AsyncWrite("after-close", {});
    conn.AsyncWriteLines({"after-close-1", "after-close-2"});
    conn.AsyncWrite("after-close-waited", [after](Status s) { after->set_value(s); });
  });
  REQUIRE(future.wait_for(kWait) == std::future_status::ready);
  auto status = future.get();
  CHECK((status || status.error().code == Errc::cancelled));
  REQUIRE(after_future.wait_for(kWait) == std::future_status::ready);
  auto after_status = after_future.get();
  REQUIRE_FALSE(after_status);
  CHECK(after_status.error().code == Errc::cancelled);
  REQUIRE(WaitFor([&] { return go.server.done(); }));
  CHECK(go.received == std::vector<std::string>{"before-close"});
}

TEST_CASE("unix connection: destroying it with operations pending cancels them safely", "[connection]") {
  TempDir dir;
  std::atomic<bool> release{false};
  UnixServer server(dir.path, [&](int) { WaitFor([&] { return release.load(); }); });
  Context context(QuietOptions(2));
  auto connection = ConnectNow(*MakeUnixConnector(context, server.path()));
  REQUIRE(connection);
  auto read_done = std::make_shared<std::promise<Errc>>();
  auto write_done = std::make_shared<std::promise<bool>>();
  (*connection)->AsyncReadLine([read_done](Result<std::string> r) {
    read_done->set_value(r ? Errc::ok : r.error().code);
  });
  (*connection)->AsyncWrite(std::string(4 << 20, 'w'), [write_done](Status) { write_done->set_value(true); });
  connection->reset();  // the last user reference
  auto read_future = read_done->get_future();
  REQUIRE(read_future.wait_for(kWait) == std::future_status::ready);
  REQUIRE(read_future.get() == Errc::cancelled);
  REQUIRE(write_done->get_future().wait_for(kWait) == std::future_status::ready);
  release = true;
}

TEST_CASE("process connection: /bin/cat echoes lines", "[connection]") {
  Context context(QuietOptions(2));
  auto connector = MakeProcessConnector(context, {"/bin/cat"});
  REQUIRE(connector->Describe() == "exec:/bin/cat");
  auto connection = ConnectNow(*connector);
  REQUIRE(connection);
  auto& c = **connection;
  for (int i = 0; i < 100; ++i) c.AsyncWrite("line " + std::to_string(i), nullptr);
  for (int i = 0; i < 100; ++i) {
    auto line = ReadLine(c);
    REQUIRE(line);
    REQUIRE(*line == "line " + std::to_string(i));
  }
  c.Close();
}

TEST_CASE("process connection: exit status and stderr tail end the stream", "[connection]") {
  Context context(QuietOptions(1));
  auto connection = ConnectNow(*MakeProcessConnector(
      context, {"/bin/sh", "-c", "echo hello; echo 'something went wrong' >&2; exit 3"}));
  REQUIRE(connection);
  auto line = ReadLine(**connection);
  REQUIRE(line);
  REQUIRE(*line == "hello");
  auto end = ReadLine(**connection);
  REQUIRE_FALSE(end);
  INFO(end.error().message);
  REQUIRE(end.error().code == Errc::connection_lost);
  REQUIRE(end.error().message.find("exited with status 3") != std::string::npos);
  REQUIRE(end.error().message.find("something went wrong") != std::string::npos);
  REQUIRE((*connection)->Diagnostics().find("something went wrong") != std::string::npos);
}

TEST_CASE("process connection: the stderr tail keeps only the last 4 KiB", "[connection]") {
  Context context(QuietOptions(1));
  auto connection = ConnectNow(*MakeProcessConnector(
      context, {"/bin/sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo noise-$i >&2; i=$((i+1)); done; echo THE-END >&2"}));
  REQUIRE(connection);
  auto end = ReadLine(**connection);
  REQUIRE_FALSE(end);
  const std::string diagnostics = (*connection)->Diagnostics();
  REQUIRE(diagnostics.size() == kDiagnosticsTailBytes);
  REQUIRE(diagnostics.find("THE-END") != std::string::npos);
  REQUIRE(diagnostics.find("noise-0\n") == std::string::npos);
}

TEST_CASE("process connection: a missing program is a clear connection_failed", "[connection]") {
  Context context(QuietOptions(1));
  auto connection = ConnectNow(*MakeProcessConnector(context, {"/nonexistent/sessionturn-no-such-program", "x"}));
  REQUIRE_FALSE(connection);
  REQUIRE(connection.error().code == Errc::connection_failed);
  INFO(connection.error().message);
  REQUIRE(connection.error().message.find("sessionturn-no-such-program") != std::string::npos);
  REQUIRE(connection.error().message.find("No such file or directory") != std::string::npos);

  auto empty = ConnectNow(*MakeProcessConnector(context, {}));
  REQUIRE_FALSE(empty);
  REQUIRE(empty.error().code == Errc::invalid_argument);
}

TEST_CASE("process connection: the reader drains stdout while the consumer is slow", "[connection]") {
  Context context(QuietOptions(2));
  // ~1.3 MB through a 64 KiB pipe; "finished" on stderr proves the child could write it all before
  // we asked for a single line.
  auto connection = ConnectNow(*MakeProcessConnector(context, {"/bin/sh", "-c", "seq 1 200000; echo finished >&2"}));
  REQUIRE(connection);
  auto& c = **connection;
  REQUIRE(WaitFor([&] { return c.Diagnostics().find("finished") != std::string::npos; }));
  Drained drained = ReadToEnd(c);
  REQUIRE(drained.lines.size() == 200000u);
  for (std::size_t i = 0; i < drained.lines.size(); ++i) {
    if (drained.lines[i] != std::to_string(i + 1)) FAIL("expected " << i + 1 << ", got " << drained.lines[i]);
  }
  REQUIRE(drained.end);
  REQUIRE(drained.end->message.find("exited with status 0") != std::string::npos);
}

TEST_CASE("process connection: Close stops and reaps the child, even one that ignores SIGTERM", "[connection]") {
  Context context(QuietOptions(2));
  SECTION("a child that exits on SIGTERM") {
    auto connection = ConnectNow(*MakeProcessConnector(context, {"/bin/sh", "-c", "echo $$; exec sleep 100"}));
    REQUIRE(connection);
    auto pid_line = ReadLine(**connection);
    REQUIRE(pid_line);
    const pid_t pid = std::stoi(*pid_line);
    REQUIRE_FALSE(ProcessGone(pid));
    (*connection)->Close();
    REQUIRE(WaitFor([&] { return ProcessGone(pid); }));  // not even a zombie
  }
  SECTION("a child that ignores SIGTERM gets SIGKILL after the grace") {
    auto connection = ConnectNow(*MakeProcessConnector(
        context, {"/bin/sh", "-c", "trap '' TERM; echo $$; while :; do sleep 1; done"}));
    REQUIRE(connection);
    auto pid_line = ReadLine(**connection);
    REQUIRE(pid_line);
    const pid_t pid = std::stoi(*pid_line);
    connection->reset();  // dropping the last reference closes too
    REQUIRE(WaitFor([&] { return ProcessGone(pid); }));
  }
}

TEST_CASE("process connection: writing to a child that exited fails without SIGPIPE", "[connection]") {
  Context context(QuietOptions(1));
  auto connection = ConnectNow(*MakeProcessConnector(context, {"/bin/sh", "-c", "exec 0<&-; sleep 0.2; exit 7"}));
  REQUIRE(connection);
  auto& c = **connection;
  // Large enough to need the reader that is gone; the process must survive the EPIPE.
  auto write = WriteLine(c, std::string(1 << 20, 'x'));
  REQUIRE_FALSE(write);
  REQUIRE(write.error().code == Errc::connection_lost);
  auto end = ReadLine(c);
  REQUIRE_FALSE(end);
  REQUIRE(end.error().message.find("exited with status 7") != std::string::npos);
}

TEST_CASE("process connection: destroying the Context's users with a child running leaves no zombie",
          "[connection]") {
  pid_t pid = 0;
  {
    Context context(QuietOptions(1));
    auto connection = ConnectNow(*MakeProcessConnector(context, {"/bin/sh", "-c", "echo $$; exec sleep 100"}));
    REQUIRE(connection);
    auto pid_line = ReadLine(**connection);
    REQUIRE(pid_line);
    pid = std::stoi(*pid_line);
    (*connection)->AsyncReadLine([](Result<std::string>) {});
    // The Context stops with a read pending and before any close ran: no handler will run again,
    // so the engine's destructor must still kill and reap the child.
    context.Stop();
  }
  REQUIRE(pid > 0);
  REQUIRE(WaitFor([&] { return ProcessGone(pid); }));
}

TEST_CASE("process connection: the child inherits no descriptors beyond stdin, stdout and stderr", "[connection]") {
  // A descriptor without O_CLOEXEC, as a careless library would leave one.
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  // Moved up high so that it cannot be mistaken for the descriptor `ls` opens itself.
  const int leak[2] = {::fcntl(pipe_fds[0], F_DUPFD, 100), ::fcntl(pipe_fds[1], F_DUPFD, 100)};
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  REQUIRE(leak[0] >= 100);
  Context context(QuietOptions(1));
  auto connection = ConnectNow(*MakeProcessConnector(context, {"/bin/sh", "-c", "ls /proc/self/fd"}));
  REQUIRE(connection);
  Drained drained = ReadToEnd(**connection);
  ::close(leak[0]);
  ::close(leak[1]);
  std::vector<std::string> fds = drained.lines;
  // `ls` itself opens one descriptor for the directory it lists.
  INFO(nlohmann::json(fds).dump());
  REQUIRE(fds.size() <= 4u);
  for (const char* fd : {"0", "1", "2"}) REQUIRE(std::find(fds.begin(), fds.end(), fd) != fds.end());
  REQUIRE(std::find(fds.begin(), fds.end(), std::to_string(leak[0])) == fds.end());
}
