#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "sessionturn/context.hpp"

using namespace sessionturn;

TEST_CASE("Context runs posted work on its workers", "[context]") {
  Context ctx(ContextOptions{.threads = 3, .log_sink = {}, .min_level = LogLevel::warning});
  CHECK(ctx.threads() == 3);
  CHECK_FALSE(ctx.InWorkerThread());
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::set<std::thread::id> seen;
  bool all_in_worker = true;
  for (int i = 0; i < 100; ++i) {
    ctx.Post([&] {
      std::lock_guard<std::mutex> l(mu);
      seen.insert(std::this_thread::get_id());
      all_in_worker = all_in_worker && ctx.InWorkerThread();
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> l(mu);
  REQUIRE(cv.wait_for(l, std::chrono::seconds(10), [&] { return done == 100; }));
  CHECK(all_in_worker);
  CHECK(seen.count(std::this_thread::get_id()) == 0);
}

TEST_CASE("Context log sink filters by level and survives a throwing sink", "[context]") {
  std::vector<std::string> lines;
  std::mutex mu;
  ContextOptions o;
  o.min_level = LogLevel::info;
  o.log_sink = [&](LogLevel lv, std::string_view m) {
    std::lock_guard<std::mutex> l(mu);
    if (m == "boom") throw std::runtime_error("sink failed");
    lines.push_back(std::string(ToString(lv)) + ":" + std::string(m));
  };
  Context ctx(o);
  ctx.Log(LogLevel::debug, "hidden");
  ctx.Log(LogLevel::info, "shown");
  ctx.Log(LogLevel::error, "boom");
  ctx.Log(LogLevel::error, "after");
  CHECK(lines == std::vector<std::string>{"info:shown", "error:after"});
  CHECK_FALSE(ctx.ShouldLog(LogLevel::debug));
}

TEST_CASE("Context keeps serving after a handler throws, and Stop is idempotent", "[context]") {
  std::atomic<int> errors{0};
  ContextOptions o;
  o.log_sink = [&](LogLevel, std::string_view) { ++errors; };
  Context ctx(o);
  std::atomic<bool> ran{false};
  ctx.Post([] { throw std::runtime_error("handler bug"); });
  ctx.Post([&] { ran = true; });
  for (int i = 0; i < 1000 && !ran; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(ran);
  CHECK(errors == 1);
  ctx.Stop();
  ctx.Stop();
}

TEST_CASE("Context::Stop from a worker only requests the stop", "[context]") {
  auto ctx = std::make_unique<Context>();
  std::atomic<bool> ran{false};
  ctx->Post([&] {
    ctx->Stop();
    ran = true;
  });
  for (int i = 0; i < 1000 && !ran; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(ran);
  ctx.reset();  // joins the worker
}
