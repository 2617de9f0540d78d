// OpTimers: an operation's deadlines on one asio timer (src/driver/op_timers.hpp).
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <asio.hpp>

#include "driver/op_timers.hpp"

using sessionturn::driver_detail::OpTimers;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  asio::io_context io{1};
  OpTimers::Strand strand{asio::make_strand(io)};
  std::shared_ptr<OpTimers> timers = std::make_shared<OpTimers>(strand);
  std::vector<std::string> fired;

  // Runs the loop until it has nothing left, bounded.
  void Run(std::chrono::milliseconds bound = 2s) {
    io.restart();
    io.run_for(bound);
  }
  // Schedules on the strand, as the operations do.
  template <typename Fn>
  void On(Fn fn) {
    asio::post(strand, std::move(fn));
  }
};

}  // namespace

TEST_CASE("OpTimers runs due functions earliest first, whatever the order they were added in", "[op_timers]") {
  Fixture f;
  f.On([&] {
    f.timers->After(60ms, [&] { f.fired.push_back("c"); });
    f.timers->After(20ms, [&] { f.fired.push_back("a"); });
    f.timers->After(40ms, [&] { f.fired.push_back("b"); });
  });
  const auto start = std::chrono::steady_clock::now();
  f.Run();
  CHECK(f.fired == std::vector<std::string>{"a", "b", "c"});
  CHECK(std::chrono::steady_clock::now() - start >= 60ms);
  CHECK(f.timers->Pending() == 0);
}

TEST_CASE("OpTimers: a cancelled function never runs, and cancelling twice or key 0 is harmless", "[op_timers]") {
  Fixture f;
  OpTimers::Key early = 0;
  OpTimers::Key never = 0;
  f.On([&] {
    early = f.timers->After(10ms, [&] { f.fired.push_back("early"); });
    never = f.timers->After(30ms, [&] { f.fired.push_back("never"); });
    f.timers->After(50ms, [&] { f.fired.push_back("late"); });
    f.timers->Cancel(never);
    CHECK(never == 0);
    f.timers->Cancel(never);
  });
  f.Run();
  CHECK(f.fired == std::vector<std::string>{"early", "late"});
  // A key that already ran, and key 0, cancel nothing: the pending one still runs.
  OpTimers::Key zero = 0;
  f.On([&] {
    f.timers->After(20ms, [&] { f.fired.push_back("pending"); });
    f.timers->Cancel(early);
    f.timers->Cancel(zero);
    CHECK(f.timers->Pending() == 1);
  });
  f.Run();
  CHECK(f.fired == std::vector<std::string>{"early", "late", "pending"});
}

TEST_CASE("OpTimers: a function may add, cancel or cancel everything while due ones are running", "[op_timers]") {
  Fixture f;
  OpTimers::Key second = 0;
  f.On([&] {
    // Both due in the same wake-up: the first cancels the second, which must not run.
    f.timers->After(10ms, [&] {
      f.fired.push_back("first");
      f.timers->Cancel(second);
      f.timers->After(20ms, [&] { f.fired.push_back("added"); });
    });
    second = f.timers->After(10ms, [&] { f.fired.push_back("second"); });
    // Far enough behind "added" (20 ms after "first" ran) for a loaded machine.
    f.timers->After(1500ms, [&] {
      f.fired.push_back("all");
      f.timers->CancelAll();
    });
    f.timers->After(1500ms, [&] { f.fired.push_back("after-all"); });
  });
  f.Run(5s);
  CHECK(f.fired == std::vector<std::string>{"first", "added", "all"});
  CHECK(f.timers->Pending() == 0);
  // Usable after CancelAll.
  f.On([&] { f.timers->After(5ms, [&] { f.fired.push_back("again"); }); });
  f.Run();
  CHECK(f.fired.back() == "again");
}

TEST_CASE("OpTimers: an earlier deadline re-arms the wait, a later one or ExpectBy's does not delay it", "[op_timers]") {
  Fixture f;
  std::chrono::steady_clock::time_point at;
  const auto start = std::chrono::steady_clock::now();
  f.On([&] {
    f.timers->ExpectBy(std::chrono::steady_clock::now() + 30ms);  // wakes early, finds nothing, waits on
    f.timers->After(2s, [&] { f.fired.push_back("late"); });
    f.timers->After(80ms, [&] {
      f.fired.push_back("earlier");
      at = std::chrono::steady_clock::now();
      f.timers->CancelAll();
    });
  });
  f.Run(5s);
  REQUIRE(f.fired == std::vector<std::string>{"earlier"});
  CHECK(at - start >= 80ms);
  CHECK(at - start < 1500ms);
}

TEST_CASE("OpTimers: cancelling the last function ends the wait, so the loop runs dry", "[op_timers]") {
  Fixture f;
  f.On([&] {
    auto key = f.timers->After(10s, [&] { f.fired.push_back("never"); });
    f.timers->Cancel(key);
  });
  const auto start = std::chrono::steady_clock::now();
  f.Run(20s);
  CHECK(std::chrono::steady_clock::now() - start < 5s);  // run() returned: no wait was left behind
  CHECK(f.fired.empty());
}

TEST_CASE("OpTimers: a loop destroyed with a wait pending releases what the functions hold", "[op_timers]") {
  // An operation holds its OpTimers and the functions hold the operation: the pending wait's handler,
  // destroyed unrun, must break that cycle.
  struct Op {
    std::shared_ptr<OpTimers> timers;
  };
  std::weak_ptr<Op> weak;
  auto io = std::make_unique<asio::io_context>(1);
  {
    auto strand = asio::make_strand(*io);
    auto op = std::make_shared<Op>();
    op->timers = std::make_shared<OpTimers>(strand);
    weak = op;
    asio::post(strand, [op] { op->timers->After(1h, [op] {}); });
  }
  io->run_for(50ms);
  REQUIRE_FALSE(weak.expired());  // the pending deadline keeps its operation
  io.reset();
  CHECK(weak.expired());
}
