// The Router at scale: 1,000 chat threads at once, each its own Session of an in-process LocalBackend,
// every message answered exactly once, in its own thread, under the admission limit.
#include <map>
#include <string>

#include <catch2/catch.hpp>

#include "router_rig.hpp"

using namespace router_test;

TEST_CASE("router: 1,000 threads at once each get their own Session and exactly one reply", "[routing][router]") {
  constexpr int kThreads = 1000;
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "echo", [](RouterOptions& o) {
    o.max_in_flight = 64;
    o.progress_interval = 1000ms;
  });
  for (int i = 0; i < kThreads; ++i) {
    auto m = Msg(std::to_string(i), "question " + std::to_string(i), "T" + std::to_string(i));
    rig.router->HandleMessage(std::move(m));
  }
  REQUIRE(rig.WaitDelivered(kThreads, 300s));
  std::this_thread::sleep_for(300ms);
  const RouterStats stats = rig.router->Stats();
  CHECK(stats.replies_delivered == kThreads);
  CHECK(stats.turns_completed == kThreads);
  CHECK(stats.messages_accepted == kThreads);
  CHECK(stats.turns_in_flight == 0);
  CHECK(stats.turns_waiting == 0);
  // Each thread's placeholder became the reply to that thread's message, and nothing else says it.
  std::map<std::string, int> replies;  // thread -> messages holding its reply
  for (const auto& op : rig.adapter.Ops()) {
    if (op.kind != "post" || !op.ok) continue;
    const std::string expected = "echo #1: [slack message from Ada U1 (U1)]\nquestion " + op.where.thread.substr(1);
    if (rig.adapter.Text(op.message_id) == expected) ++replies[op.where.thread];
  }
  int exact = 0;
  for (const auto& [thread, n] : replies) exact += n == 1 ? 1 : 0;
  CHECK(replies.size() == static_cast<std::size_t>(kThreads));
  CHECK(exact == kThreads);
  auto sessions = rig.backend->List();
  REQUIRE(sessions);
  CHECK(sessions->size() == static_cast<std::size_t>(kThreads));
}
