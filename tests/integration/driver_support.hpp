// Shared by the driver's integration tests: a local runtime with a driver on it, and connections
// that drop, swallow writes or interleave junk at chosen positions.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "sessionturn/connection.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/testing/local_runtime.hpp"

namespace driver_test {

using namespace sessionturn;
using namespace std::chrono_literals;

// Generous: the machine is shared and slow under sanitizers; waits end as soon as their condition holds.
inline constexpr auto kWait = 20s;

struct TempDir {
  std::string path;
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "st-driver-XXXXXX").string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Records what a turn delivered to its on_event callback.
struct Recorder {
  std::mutex mu;
  std::vector<Event> events;
  std::function<void(const Event&)> Callback() {
    return [this](const Event& e) {
      std::lock_guard lock(mu);
      events.push_back(e);
    };
  }
  std::vector<std::string> Signature() {
    std::lock_guard lock(mu);
    std::vector<std::string> out;
    for (const auto& e : events) out.push_back(std::to_string(e.id) + " " + e.type + " " + e.text + e.status);
    return out;
  }
};

// Faults a WrapConnector puts on its first connection (later ones are clean, so a reconnect works).
struct Faults {
  int drop_after_lines = -1;  // drop after delivering this many lines (-1: never)
  bool junk = false;          // interleave lines that are not events (on every connection)
  std::string swallow_write;  // a write containing this text is lost, and the stream drops with it
  int fail_write = -1;        // this write (1-based) fails and drops the stream (-1: none)
  std::vector<std::string> inject;  // lines delivered before the runtime's (on every connection)
};

// A connection that, for testing, drops, loses or fails writes, or interleaves lines.
class WrapConnection : public Connection, public std::enable_shared_from_this<WrapConnection> {
 public:
  WrapConnection(std::shared_ptr<Connection> inner, Faults faults) : inner_(std::move(inner)), faults_(std::move(faults)) {}
  void AsyncReadLine(LineHandler handler) override {
    if (broken_ || (faults_.drop_after_lines >= 0 && delivered_ >= faults_.drop_after_lines)) {
      inner_->Close();
      handler(Fail(Errc::connection_lost, "test: dropped after " + std::to_string(delivered_.load()) + " lines"));
      return;
    }
    if (injected_ < faults_.inject.size()) {
      handler(faults_.inject[injected_++]);
      return;
    }
    if (faults_.junk && (calls_++ % 2 == 0)) {
      static const char* kJunk[] = {"this is not JSON", "   ", "[1,2,3]", "{broken", "Defaulted container \"x\""};
      handler(std::string(kJunk[(calls_ / 2) % 5]));
      return;
    }
    // Weak: the inner connection keeps a pending read's handler, and a Context stopped before the read
    // completes never runs or drops it, so a strong capture would be a cycle (and a leak) through it.
    inner_->AsyncReadLine([weak = weak_from_this(), handler = std::move(handler)](Result<std::string> line) {
      if (auto self = weak.lock(); self && line) ++self->delivered_;
      handler(std::move(line));
    });
  }
  void AsyncWrite(std::string line, WriteHandler done) override {
    const int n = ++writes_;
    const bool swallow = !faults_.swallow_write.empty() && line.find(faults_.swallow_write) != std::string::npos;
    if (swallow || n == faults_.fail_write) {
      // The peer never sees it and the stream is gone: what a cut cable does to a write in flight.
      broken_ = true;
      inner_->Close();
      if (done) done(swallow ? Status{} : Status(Fail(Errc::connection_lost, "test: write " + std::to_string(n) + " failed")));
      return;
    }
    inner_->AsyncWrite(std::move(line), std::move(done));
  }
  void Close() override { inner_->Close(); }
  std::string Diagnostics() const override { return inner_->Diagnostics(); }
  std::string Describe() const override { return "wrap:" + inner_->Describe(); }

 private:
  std::shared_ptr<Connection> inner_;
  Faults faults_;
  std::atomic<int> delivered_{0};
  std::atomic<int> writes_{0};
  std::atomic<bool> broken_{false};
  std::size_t injected_ = 0;
  int calls_ = 0;
};

class WrapConnector : public Connector {
 public:
  WrapConnector(std::shared_ptr<Connector> inner, int drop_first_after, bool junk)
      : WrapConnector(std::move(inner), Faults{drop_first_after, junk, {}, -1, {}}) {}
  WrapConnector(std::shared_ptr<Connector> inner, Faults faults) : inner_(std::move(inner)), faults_(std::move(faults)) {}
  void AsyncConnect(ConnectHandler handler) override { inner_->AsyncConnect(Wrap(std::move(handler))); }
  // Forwarded: with the unix connector inside, a blocking turn runs on its caller's private loop with
  // the faults on it, so the fault tests cover that path (the Async ones cover the Context's).
  void AsyncConnectOn(const OperationStrand& strand, ConnectHandler handler) override {
    inner_->AsyncConnectOn(strand, Wrap(std::move(handler)));
  }
  bool ConnectsOnStrand() const override { return inner_->ConnectsOnStrand(); }
  std::string Describe() const override { return "wrap:" + inner_->Describe(); }
  int connections() const { return connections_.load(); }

 private:
  ConnectHandler Wrap(ConnectHandler handler) {
    return [this, handler = std::move(handler)](Result<std::shared_ptr<Connection>> c) {
      if (!c) {
        handler(std::move(c));
        return;
      }
      const int n = connections_++;
      Faults faults = faults_;
      if (n > 0) {
        faults.drop_after_lines = -1;
        faults.swallow_write.clear();
        faults.fail_write = -1;
      }
      handler(std::shared_ptr<Connection>(std::make_shared<WrapConnection>(std::move(*c), std::move(faults))));
    };
  }

  std::shared_ptr<Connector> inner_;
  Faults faults_;
  std::atomic<int> connections_{0};
};

struct Fixture {
  TempDir dir;
  std::unique_ptr<sessionturn::testing::LocalRuntime> runtime;
  Context ctx;
  std::shared_ptr<Connector> connector;
  std::unique_ptr<Driver> driver;

  explicit Fixture(std::string provider = "echo", std::string script = {},
                   std::function<void(sessionturn::testing::LocalRuntimeOptions&)> tweak = {}) {
    sessionturn::testing::LocalRuntimeOptions o;
    o.socket_path = dir.path + "/rt.sock";
    o.state_dir = dir.path + "/state";
    if (!script.empty()) {
      std::ofstream(dir.path + "/script.json") << script;
      provider = "script:" + dir.path + "/script.json";
    }
    o.provider = provider;
    o.record_requests = true;  // Requests() reads them
    if (tweak) tweak(o);
    auto started = sessionturn::testing::LocalRuntime::Start(o);
    REQUIRE(started.has_value());
    runtime = std::move(*started);
    connector = MakeUnixConnector(ctx, o.socket_path);
    driver = std::make_unique<Driver>(ctx, connector);
  }

  std::string socket() const { return dir.path + "/rt.sock"; }

  std::future<Result<TurnResult>> Async(std::string prompt, TurnOptions options = {}) {
    auto promise = std::make_shared<std::promise<Result<TurnResult>>>();
    auto future = promise->get_future();
    driver->AsyncSubmitTurn(std::move(prompt), std::move(options),
                            [promise](Result<TurnResult> r) { promise->set_value(std::move(r)); });
    return future;
  }

  Event WaitEvent(const std::function<bool(const Event&)>& pred) {
    auto e = runtime->WaitForEvent(pred, kWait);
    REQUIRE(e.has_value());
    return *e;
  }

  std::vector<ClientRequest> Requests(std::string_view type) {
    std::vector<ClientRequest> out;
    for (auto& r : runtime->ReceivedRequests()) {
      if (r.type == type) out.push_back(r);
    }
    return out;
  }
};

inline Result<TurnResult> Get(std::future<Result<TurnResult>>& f) {
  REQUIRE(f.wait_for(kWait) == std::future_status::ready);
  return f.get();
}

inline TurnOptions WithTimeout(std::chrono::milliseconds t) {
  TurnOptions o;
  o.timeout = t;
  return o;
}

// Each turn runs: a delta, a long sleep (the caller interrupts or times out), a message.
inline const char* kLongTurn = R"({"turns":[[{"type":"delta","text":"working"},{"type":"sleep","ms":15000},
  {"type":"message","text":"done {n}"}]],"repeat":"last"})";

}  // namespace driver_test
