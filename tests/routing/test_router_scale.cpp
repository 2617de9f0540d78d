// The Router at scale: 1,000 chat threads at once, each its own Session of an in-process LocalBackend,
// every message answered exactly once, in its own thread, under the admission limit.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

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

// A backend that logs each Session's Ensure (a turn's start) into the test's log.
class EnsureLog : public ForwardingBackend {
 public:
  EnsureLog(std::unique_ptr<SessionBackend> inner, std::function<void(const std::string&)> log)
      : ForwardingBackend(std::move(inner)), log_(std::move(log)) {}
  void AsyncEnsure(std::string name, SessionSpec spec, BackendHandler<EnsureResult> handler) override {
    log_("ensure " + name);
    ForwardingBackend::AsyncEnsure(std::move(name), std::move(spec), std::move(handler));
  }

 private:
  std::function<void(const std::string&)> log_;
};

// Message 1 goes in; from inside its placeholder post (its drain still running) message 2, in thread
// `second_thread`, is handed over. The log holds each Session's Ensure (its turn's start) and each placeholder post, in order.
struct SecondDuringFirstPlaceholder {
  explicit SecondDuringFirstPlaceholder(std::function<void(RouterOptions&)> tweak = {},
                                        std::string second_thread = "T2")
      : second_thread(std::move(second_thread)),
        rig(root, ThreadedCaps(), "echo", std::move(tweak), {}, [this](std::unique_ptr<SessionBackend> inner) {
          return std::make_unique<EnsureLog>(std::move(inner), [this](const std::string& line) { Note(line); });
        }) {
    rig.adapter.on_send = [this](const SentOp& op) {
      if (op.kind != "post") return;
      Note("placeholder " + op.where.thread);
      if (op.where.thread == "T1" && !second_sent.exchange(true)) {
        rig.router->HandleMessage(Msg("2", "second", this->second_thread),
                                  [this](Result<Disposition> d) { second_disposition = d ? int(*d) : -1; });
      }
    };
  }
  void Note(const std::string& line) {
    std::lock_guard lock(mu);
    log.push_back(line);
  }
  // Sends message 1, waits for both replies, and returns the log.
  std::vector<std::string> Run() {
    REQUIRE(rig.Send(Msg("1", "first", "T1")) == Disposition::accepted);
    REQUIRE(rig.WaitDelivered(2));
    std::lock_guard lock(mu);
    return log;
  }

  TempRoot root;
  std::mutex mu;
  std::vector<std::string> log;
  std::atomic<bool> second_sent{false};
  std::atomic<int> second_disposition{-2};  // -2: not done yet; -1: an error
  std::string second_thread;
  Rig rig;
};

long FirstLineStartingWith(const std::vector<std::string>& lines, const std::string& prefix) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind(prefix, 0) == 0) return static_cast<long>(i);
  }
  return -1L;
}

TEST_CASE("router: messages handed over during a burst's intake get their placeholders before its turns start",
          "[routing][router]") {
  // The second message waits for the next drain, and the first one's turn start must wait with it.
  SecondDuringFirstPlaceholder run;
  const std::vector<std::string> seen = run.Run();
  INFO(run.rig.adapter.Dump());
  for (const auto& line : seen) UNSCOPED_INFO(line);
  const long first_start = FirstLineStartingWith(seen, "ensure ");
  const long second_placeholder = FirstLineStartingWith(seen, "placeholder T2");
  REQUIRE(first_start >= 0);
  REQUIRE(second_placeholder >= 0);
  CHECK(second_placeholder < first_start);
}

TEST_CASE("router: turn starts deferred behind a burst's intake keep the order of the slots", "[routing][router]") {
  // The first message's start waits for the second one's intake; the second one's start must then wait
  // behind it (one slot).
  SecondDuringFirstPlaceholder run([](RouterOptions& o) { o.max_in_flight = 1; });
  std::vector<std::string> ensured;
  for (const auto& line : run.Run()) {
    if (line.rfind("ensure ", 0) == 0) ensured.push_back(line);
  }
  REQUIRE(ensured.size() >= 2);
  CHECK(ensured[0] == "ensure " + SessionName("chat", "slack", "test-owner", "C1", "T1"));
  CHECK(ensured[1] == "ensure " + SessionName("chat", "slack", "test-owner", "C1", "T2"));
}

TEST_CASE("router: a message whose turn start waits behind an intake does not count against the queue bound",
          "[routing][router]") {
  // One message may wait behind a turn. The second one comes while the first one's start waits for
  // its intake: the first is about to start, so the second waits behind it, and is not refused.
  SecondDuringFirstPlaceholder run([](RouterOptions& o) { o.max_queued = 1; }, "T1");
  run.Run();
  INFO(run.rig.adapter.Dump());
  CHECK(run.second_disposition == int(Disposition::accepted));
  CHECK(run.rig.adapter.FindMessage("Too many messages").empty());
}

TEST_CASE("router: the rest of a big burst takes its slots before a later burst's messages", "[routing][router]") {
  // Message 0 goes in; from inside its placeholder post, 40 more (a burst of 40 Sessions, past one
  // slice of 32 starts) are handed over, and from inside the first of their placeholders, message 41.
  // Slots: 41, so message 41 is the one left waiting for a slot (until message 0's turn ends), not one
  // of the burst's last 8, whose turns were recorded with their acceptance, each counting on its slot.
  constexpr int kBurst = 40;
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 1500},
      {"type": "message", "text": "reply to {prompt}"}]]})");
  std::mutex mu;
  std::vector<std::string> ensured;  // each Session's first turn start, in order
  Rig rig(
      root, ThreadedCaps(), "script:" + script, [](RouterOptions& o) { o.max_in_flight = kBurst + 1; }, {},
      [&](std::unique_ptr<SessionBackend> inner) {
        return std::make_unique<EnsureLog>(std::move(inner), [&](const std::string& line) {
          std::lock_guard lock(mu);
          ensured.push_back(line);
        });
      });
  int posts = 0;  // on the router's strand only
  rig.adapter.on_send = [&](const SentOp& op) {
    if (op.kind != "post") return;
    if (++posts == 1) {  // message 0's placeholder
      for (int i = 1; i <= kBurst; ++i) {
        rig.router->HandleMessage(Msg(std::to_string(i), "job " + std::to_string(i), "T" + std::to_string(i)));
      }
    } else if (posts == 2) {  // the burst's first placeholder
      rig.router->HandleMessage(Msg("41", "job 41", "T41"));
    }
  };
  REQUIRE(*rig.Send(Msg("0", "job 0", "T0")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(kBurst + 2, 120s));
  INFO(rig.adapter.Dump());
  std::lock_guard lock(mu);
  for (const auto& line : ensured) UNSCOPED_INFO(line);
  REQUIRE(ensured.size() == static_cast<std::size_t>(kBurst + 2));
  CHECK(ensured.back() == "ensure " + SessionName("chat", "slack", "test-owner", "C1", "T41"));
  CHECK(rig.router->Stats().replies_delivered == kBurst + 2);
}
