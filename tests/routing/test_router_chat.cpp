// The Router in the chat: stop, questions answered by a reply (and refused from someone else), long
// replies split within the platform's limit and unit, hostile texts, edits and deletions of waiting
// messages (in the router's queue, and queued inside the runtime), and an idle Session woken.
#include <asio.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "router_rig.hpp"
#include "sessionturn/render.hpp"
#include "test_store_support.hpp"

using namespace router_test;

namespace {

// The texts the thread shows now, for every message that carries `needle`.
std::vector<std::string> TextsWith(RecordingAdapter& adapter, const std::string& needle) {
  std::vector<std::string> out;
  std::set<std::string> ids;
  for (const auto& op : adapter.Ops()) {
    if (!op.message_id.empty()) ids.insert(op.message_id);
  }
  for (const auto& id : ids) {
    std::string text = adapter.Text(id);
    if (text.find(needle) != std::string::npos) out.push_back(text);
  }
  return out;
}

}  // namespace

TEST_CASE("router: stop interrupts the running turn and its message says it ended", "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("long.json", R"({"turns": [[{"type": "delta", "text": "begun"},
      {"type": "sleep", "ms": 60000}, {"type": "message", "text": "never"}]]})");
  Rig rig(root, ThreadedCaps(), "script:" + script);
  REQUIRE(*rig.Send(Msg("1", "a long job")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitFor([](const std::vector<SentOp>& ops) { return Sent(ops, "begun"); }));
  REQUIRE(*rig.Send(Msg("2", "stop")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1, 30s));
  CHECK(rig.adapter.WaitForText("The turn was interrupted"));
  CHECK(rig.adapter.WaitForText("Stopping the running turn"));
  CHECK(rig.adapter.FindMessage("never").empty());
  // `stop` was a command: it never reached the Session as a prompt.
  REQUIRE(*rig.Send(Msg("3", "status")) == Disposition::accepted);
  CHECK(rig.adapter.WaitForText("No turn is running."));
}

TEST_CASE("router: a reply to the question answers it, and someone else's reply is refused", "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  Rig rig(root, ThreadedCaps(), "script:" + script);
  REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Which language?"));
  // The adapter shows the question before the router has its message id back: a reply that lands in
  // between is a plain message (nobody can reply to a message they have not seen yet).
  std::this_thread::sleep_for(200ms);
  const std::string question = rig.adapter.FindMessage("Which language?");
  REQUIRE_FALSE(question.empty());
  auto stranger = Msg("2", "C++", "T1", "U9");
  stranger.reply_to_message_id = question;
  REQUIRE(*rig.Send(stranger) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Only the person whose message started this turn"));
  auto bad = Msg("3", "Rust");
  bad.reply_to_message_id = question;
  // Any text answers a question with options (kelos's resolveInput takes free text too).
  REQUIRE(*rig.Send(bad) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  CHECK(rig.adapter.WaitForText("Answers: lang=Rust"));
  CHECK(rig.adapter.WaitForText("Answered by Ada U1: Rust"));
  CHECK(rig.adapter.FindMessage("lang=C++").empty());
}

TEST_CASE("router: a long reply with a code block is split into labelled parts, each within the limit",
          "[routing][router]") {
  TempRoot root;
  std::string code;
  for (int i = 0; i < 40; ++i) code += "int value_" + std::to_string(i) + " = " + std::to_string(i * 7) + ";\\n";
  const std::string script = root.File("long.json", R"({"turns": [[{"type": "message", "text":
      "Here is the code:\n\n```cpp\n)" + code + R"(```\n\nThat is all."}]]})");
  ChatCapabilities caps = ThreadedCaps();
  caps.dialect = MarkupDialect::slack_mrkdwn;
  caps.unit = LengthUnit::bytes;
  caps.max_length = 300;
  Rig rig(root, caps, "script:" + script);
  REQUIRE(*rig.Send(Msg("1", "show me")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  const auto parts = TextsWith(rig.adapter, "/");
  std::vector<std::string> labelled;
  for (const auto& p : parts) {
    if (p.find("int value_") != std::string::npos || p.find("That is all.") != std::string::npos) labelled.push_back(p);
  }
  REQUIRE(labelled.size() >= 3);
  const std::string n = std::to_string(labelled.size());
  std::string all;
  for (const auto& p : labelled) {
    INFO(p);
    CHECK(p.size() <= 300);
    CHECK(p.find("/" + n + ")") != std::string::npos);
    // Every part that holds code opens and closes its fence.
    std::size_t fences = 0;
    for (auto at = p.find("```"); at != std::string::npos; at = p.find("```", at + 3)) ++fences;
    CHECK(fences % 2 == 0);
    all += p;
  }
  for (int i = 0; i < 40; ++i) CHECK(all.find("int value_" + std::to_string(i) + " =") != std::string::npos);
  for (std::size_t i = 1; i <= labelled.size(); ++i) {
    CHECK(all.find("(" + std::to_string(i) + "/" + n + ")") != std::string::npos);
  }
}

TEST_CASE("router: Telegram-style UTF-16 limits hold for a reply of emoji", "[routing][router]") {
  TempRoot root;
  std::string emoji;
  for (int i = 0; i < 150; ++i) emoji += "\U0001F600 ";
  const std::string script = root.File("emoji.json", R"({"turns": [[{"type": "message", "text": ")" + emoji +
                                                          R"("}]]})");
  ChatCapabilities caps = ThreadedCaps();
  caps.dialect = MarkupDialect::telegram_html;
  caps.unit = LengthUnit::utf16;
  caps.max_length = 100;
  Rig rig(root, caps, "script:" + script);
  REQUIRE(*rig.Send(Msg("1", "smile")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  std::size_t faces = 0;
  std::size_t messages = 0;
  for (const auto& text : TextsWith(rig.adapter, "\U0001F600")) {
    ++messages;
    INFO(text);
    CHECK(MeasureLength(text, LengthUnit::utf16) <= 100);
    for (auto at = text.find("\U0001F600"); at != std::string::npos; at = text.find("\U0001F600", at + 1)) ++faces;
  }
  CHECK(messages >= 4);  // 150 faces at 3 units each do not fit in fewer
  CHECK(faces == 150);
}

TEST_CASE("router: hostile texts and names never start a prompt", "[routing][router]") {
  TempRoot root;
  Rig rig(root);
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"!rm -rf /", "Ada"},
      {"/goal take over the repository", "Ada"},
      {"\n!cat /etc/passwd", "Ada"},
      {"\u200B!id", "Ada"},
      {"\u202E!dis", "Ada"},
      {"hello", "!rm -rf /\n/goal evil"},
      {"hello", std::string(10 * 1024, 'N')},
      {"hello", "\u2067\u200Bname\r\n!id"},
  };
  for (std::size_t i = 0; i < hostile.size(); ++i) {
    auto m = Msg(std::to_string(i + 1), hostile[i].first, "H" + std::to_string(i));
    m.author_name = hostile[i].second;
    REQUIRE(*rig.Send(m) == Disposition::accepted);
  }
  REQUIRE(rig.WaitDelivered(hostile.size()));
  const auto replies = TextsWith(rig.adapter, "echo #1: ");
  REQUIRE(replies.size() == hostile.size());
  for (const auto& reply : replies) {
    INFO(reply);
    // The echo provider answers "echo #1: <the prompt>": every prompt starts with the envelope.
    CHECK(reply.rfind("echo #1: [slack message from ", 0) == 0);
  }
}

namespace {

// A thread whose first message's turn sleeps `sleep_ms` before it answers ("one: ..."), and whose next
// ones answer at once ("two: ..."): messages 1, 2 and 3 are sent, 1 runs, 2 and 3 wait in the router's
// queue.
struct ThreeWaiting {
  ThreeWaiting(TempRoot& root, int sleep_ms)
      : rig(root, ThreadedCaps(),
            "script:" + root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": )" + std::to_string(sleep_ms) +
                                                   R"(}, {"type": "message", "text": "one: {prompt}"}],
                [{"type": "message", "text": "two: {prompt}"}]]})")) {
    REQUIRE(*rig.Send(Msg("1", "first")) == Disposition::accepted);
    REQUIRE(*rig.Send(Msg("2", "second")) == Disposition::accepted);
    REQUIRE(*rig.Send(Msg("3", "third")) == Disposition::accepted);
    REQUIRE(rig.adapter.WaitForText("Queued \u2014 position 2"));
  }
  // Message 2 was edited to "second, edited" and 3 deleted: two replies in all, 2's to the new text,
  // none for 3, whose receipt says it was withdrawn.
  void CheckEditedAndWithdrawn() {
    REQUIRE(rig.WaitDelivered(2));
    CHECK(rig.adapter.WaitForText("Withdrawn: the message was deleted"));
    std::this_thread::sleep_for(300ms);
    CHECK(rig.router->Stats().replies_delivered == 2);
    const std::string two = rig.adapter.FindMessage("two: ");
    REQUIRE_FALSE(two.empty());
    CHECK(rig.adapter.Text(two).find("second, edited") != std::string::npos);
    CHECK(rig.adapter.FindMessage("third").empty());
  }
  Rig rig;
};

}  // namespace

TEST_CASE("router: a waiting message edited or deleted in the chat is changed or withdrawn in the router's queue",
          "[routing][router]") {
  TempRoot root;
  ThreeWaiting t(root, 1500);
  REQUIRE(*t.rig.Send(Edited("2", "second, edited", "ev-e2")) == Disposition::accepted);
  REQUIRE(*t.rig.Send(Deleted("3", "ev-d3")) == Disposition::accepted);
  // The redelivered edit is a duplicate; an edit of a message we never had is ignored.
  CHECK(*t.rig.Send(Edited("2", "again", "ev-e2")) == Disposition::duplicate);
  CHECK(*t.rig.Send(Edited("99", "unknown", "ev-e99")) == Disposition::ignored);
  t.CheckEditedAndWithdrawn();
}

TEST_CASE("router: an edit or a deletion whose store write fails changes nothing, and its redelivery does",
          "[routing][router]") {
  TempRoot root;
  ThreeWaiting t(root, 3000);
  const std::string file = root.path() + "/router.db";
  {
    // The waiting messages' rows refuse the change (the running turn's own writes go through).
    store_test::RawDb raw(file);
    raw.Exec("CREATE TRIGGER fail_edit BEFORE UPDATE OF edited_text ON work "
             "BEGIN SELECT RAISE(ABORT, 'injected edit failure'); END");
    raw.Exec("CREATE TRIGGER fail_withdraw BEFORE DELETE ON work WHEN OLD.request_id IS NULL "
             "BEGIN SELECT RAISE(ABORT, 'injected deletion failure'); END");
  }
  // Refused with the reason, so the platform delivers them again; nothing of them is kept (not their
  // dedupe keys either: the redeliveries below are not duplicates).
  auto edit = t.rig.Send(Edited("2", "second, edited", "ev-e2"));
  REQUIRE_FALSE(edit);
  CHECK_THAT(edit.error().message, Catch::Contains("injected edit failure"));
  auto deletion = t.rig.Send(Deleted("3", "ev-d3"));
  REQUIRE_FALSE(deletion);
  CHECK_THAT(deletion.error().message, Catch::Contains("injected deletion failure"));
  CHECK(TextsWith(t.rig.adapter, "Withdrawn").empty());
  CHECK(TextsWith(t.rig.adapter, "Queued \u2014 position 2").size() == 1);  // message 3 still waits
  {
    store_test::RawDb raw(file);
    raw.Exec("DROP TRIGGER fail_edit");
    raw.Exec("DROP TRIGGER fail_withdraw");
  }
  REQUIRE(*t.rig.Send(Edited("2", "second, edited", "ev-e2")) == Disposition::accepted);
  REQUIRE(*t.rig.Send(Deleted("3", "ev-d3")) == Disposition::accepted);
  t.CheckEditedAndWithdrawn();
}

namespace {

// The LocalBackend, with a wake that takes as long as a cluster's: a WaitReady that reported
// "resuming" (or, with `always`, every WaitReady) hands its target over half a second later. (A local
// runtime starts in milliseconds, before the chat's next edit is due; a Pod takes seconds.)
class SlowWake : public ForwardingBackend {
 public:
  explicit SlowWake(std::unique_ptr<SessionBackend> inner, bool always = false,
                    std::chrono::milliseconds delay = std::chrono::milliseconds(500))
      : ForwardingBackend(std::move(inner)), always_(always), delay_(delay) {}
  void AsyncWaitReady(std::string name, std::chrono::steady_clock::time_point deadline, ReadyProgress progress,
                      CancellationToken cancel, BackendHandler<ReadyTarget> handler) override {
    auto resumed = std::make_shared<std::atomic<bool>>(always_);
    ReadyProgress seen = [progress, resumed](const SessionInfo& info, std::string_view stage) {
      if (stage == "resuming") resumed->store(true);
      if (progress) progress(info, stage);
    };
    inner().AsyncWaitReady(std::move(name), deadline, std::move(seen), std::move(cancel),
                           [this, resumed, handler = std::move(handler)](Result<ReadyTarget> target) mutable {
                             if (!resumed->load()) return handler(std::move(target));
                             auto timer = std::make_shared<asio::steady_timer>(GetContext().io(), delay_);
                             timer->async_wait([timer, handler = std::move(handler), target = std::move(target)](
                                                   const asio::error_code&) mutable { handler(std::move(target)); });
                           });
  }

 private:
  const bool always_;
  const std::chrono::milliseconds delay_;
};

}  // namespace

namespace {

// Runs a long turn of another client in the thread's Session (the Router's turn then waits behind it
// inside the runtime), through a Driver of its own, until Finish() interrupts it.
struct OtherClient {
  OtherClient(Rig& rig, const std::string& session) {
    auto ready = rig.backend->WaitReady(session, std::chrono::steady_clock::now() + 30s);
    REQUIRE(ready);
    driver = std::make_unique<Driver>(rig.context, ready->connector);
    TurnOptions o;
    o.timeout = 180s;
    o.on_event = [this](const Event& e) {
      if (e.Is(event_type::kTurnStarted)) running = true;
    };
    driver->AsyncSubmitTurn("another client's turn", o, [this](Result<TurnResult> r) { done.set_value(std::move(r)); });
    REQUIRE(backend_test::Eventually([this] { return running.load(); }));
  }
  ~OtherClient() { Finish(); }
  void Finish() {
    if (finished) return;
    finished = true;
    (void)driver->Interrupt();
    ended.wait_for(30s);
  }
  bool finished = false;
  std::atomic<bool> running{false};
  std::unique_ptr<Driver> driver;
  std::promise<Result<TurnResult>> done;
  std::future<Result<TurnResult>> ended = done.get_future();
};

// Waits until the newest placeholder (the message just sent) says its turn waits inside the runtime.
bool QueuedInRuntime(RecordingAdapter& adapter) {
  return adapter.WaitFor([](const std::vector<SentOp>& ops) {
    std::string newest;
    for (const auto& op : ops) {
      if (op.kind == "post" && op.ok) newest = op.message_id;
    }
    for (const auto& op : ops) {
      if (op.kind == "edit" && op.ok && op.message_id == newest &&
          op.text.find("Queued in the Session behind") != std::string::npos) {
        return true;
      }
    }
    return false;
  });
}

// Edits message 2 in the chat: the runtime has it changed before its turn starts, and the reply
// (once the other client's turn is interrupted) answers the new text.
void EditAndCheck(Rig& rig, OtherClient& other) {
  REQUIRE(*rig.Send(Edited("2", "edited text", "ev-e2")) == Disposition::accepted);
  const bool edited = rig.adapter.WaitForText("Edited before its turn started");
  INFO(rig.adapter.Dump());
  REQUIRE(edited);
  other.Finish();  // our turn runs now
  REQUIRE(rig.WaitDelivered(2));
  const std::string reply = rig.adapter.FindMessage("final: ");
  REQUIRE_FALSE(reply.empty());
  CHECK(rig.adapter.Text(reply).find("edited text") != std::string::npos);
  CHECK(rig.adapter.Text(reply).find("original text") == std::string::npos);
}

const char* kBehindScript = R"({"turns": [[{"type": "message", "text": "first: {prompt}"}],
    [{"type": "sleep", "ms": 120000}, {"type": "message", "text": "slow"}],
    [{"type": "message", "text": "final: {prompt}"}]]})";

// Message 2 of thread T1 (`text`) waits inside the runtime behind another client's running turn.
struct QueuedBehind {
  explicit QueuedBehind(const std::string& text) {
    REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
    REQUIRE(rig.WaitDelivered(1));
    other = std::make_unique<OtherClient>(rig, SessionName("chat", "slack", "test-owner", "C1", "T1"));
    REQUIRE(*rig.Send(Msg("2", text)) == Disposition::accepted);
    REQUIRE(QueuedInRuntime(rig.adapter));
  }
  TempRoot root;
  Rig rig{root, ThreadedCaps(), "script:" + root.File("behind.json", kBehindScript)};
  std::unique_ptr<OtherClient> other;
};

}  // namespace

TEST_CASE("router: a message queued inside the runtime is edited there with its revision", "[routing][router]") {
  QueuedBehind q("original text");
  EditAndCheck(q.rig, *q.other);
}

TEST_CASE("router: a message edited while its turn waits for the Session is sent as edited",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "script:" + root.File("behind.json", kBehindScript), {}, {},
          [](std::unique_ptr<SessionBackend> inner) { return std::make_unique<SlowWake>(std::move(inner), true); });
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  OtherClient other(rig, SessionName("chat", "slack", "test-owner", "C1", "T1"));
  REQUIRE(*rig.Send(Msg("2", "original text")) == Disposition::accepted);
  // Once its turn has left the router's queue (an edit there is applied there) and within the half
  // second its WaitReady takes: the message has not reached the runtime yet.
  REQUIRE(backend_test::Eventually([&] {
    const RouterStats st = rig.router->Stats();
    return st.turns_in_flight == 1 && st.turns_waiting == 0;
  }));
  EditAndCheck(rig, other);
}

TEST_CASE("router: a message queued inside the runtime and deleted in the chat is withdrawn there",
          "[routing][router]") {
  QueuedBehind q("never mind this");
  Rig& rig = q.rig;
  REQUIRE(*rig.Send(Deleted("2", "ev-d2")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2));
  const bool withdrawn = rig.adapter.WaitForText("The message was withdrawn before it ran.");
  INFO(rig.adapter.Dump());
  CHECK(withdrawn);
  CHECK(rig.adapter.FindMessage("final: ").empty());
}

// `stop` while the message waits in the Session's queue behind another client's turn withdraws it
// there: the other client's turn runs on.
TEST_CASE("router: stop withdraws a message queued inside the runtime, not another client's running turn",
          "[routing][router]") {
  QueuedBehind q("a job to stop");
  Rig& rig = q.rig;
  REQUIRE(*rig.Send(Msg("3", "stop")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Withdrawn from the Session's queue"));
  REQUIRE(rig.WaitDelivered(2));
  INFO(rig.adapter.Dump());
  CHECK(rig.adapter.WaitForText("The message was withdrawn before it ran."));
  CHECK(rig.adapter.CountMessagesWith("Stopping the running turn") == 0);
  // The other client's turn was not interrupted.
  CHECK(q.other->ended.wait_for(300ms) == std::future_status::timeout);
  CHECK(rig.adapter.FindMessage("final: ").empty());
}

// Before its prompt is sent (its Session wakes), `stop` and a deletion end the turn there: the prompt
// never goes.
TEST_CASE("router: stop or a deletion while the Session wakes ends the turn before its prompt is sent",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("reply.json", R"({"turns": [[{"type": "message", "text": "ran: {prompt}"}]]})");
  Rig rig(root, ThreadedCaps(), "script:" + script, {}, {}, [](std::unique_ptr<SessionBackend> inner) {
    return std::make_unique<SlowWake>(std::move(inner), true, 3s);
  });
  const bool stop = GENERATE(true, false);
  INFO((stop ? "stop" : "deletion"));
  REQUIRE(*rig.Send(Msg("1", "not wanted after all")) == Disposition::accepted);
  REQUIRE(backend_test::Eventually([&] { return rig.router->Stats().turns_in_flight == 1; }));
  REQUIRE(*rig.Send(stop ? Msg("2", "stop") : Deleted("1", "ev-d1")) == Disposition::accepted);
  const std::string said = stop ? "Stopped before it reached the agent." : "deleted before its turn started: withdrawn";
  REQUIRE(rig.adapter.WaitForText(said));
  REQUIRE(rig.WaitDelivered(1, 10s));
  std::this_thread::sleep_for(500ms);
  INFO(rig.adapter.Dump());
  CHECK(rig.adapter.FindMessage("ran: ").empty());
  CHECK(rig.router->Stats().turns_in_flight == 0);
  // The Session's runtime never had it: the next message is its first turn.
  REQUIRE(*rig.Send(Msg("3", "this one")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2, 30s));
  CHECK(rig.adapter.CountMessagesWith("ran: ") == 1);
  CHECK(rig.adapter.CountMessagesWith("not wanted") == 0);
}

// A message merged into another client's queued turn carries their prompt too: an edit or a deletion
// of it would change theirs, so it is refused, and the turn runs as sent.
TEST_CASE("router: a message merged with another client's queued message is not changed by an edit",
          "[routing][router]") {
  TempRoot root;
  Rig rig(root, ThreadedCaps(), "script:" + root.File("behind.json", kBehindScript));
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  const std::string session = SessionName("chat", "slack", "test-owner", "C1", "T1");
  OtherClient other(rig, session);
  // A third client's prompt waits in the Session's queue: ours is merged into it.
  auto ready = rig.backend->WaitReady(session, std::chrono::steady_clock::now() + 30s);
  REQUIRE(ready);
  Driver third(rig.context, ready->connector);
  std::promise<Result<TurnResult>> theirs;
  std::atomic<bool> queued{false};
  TurnOptions o;
  o.timeout = 180s;
  o.on_accepted = [&queued](const TurnRef&) { queued = true; };
  third.AsyncSubmitTurn("their prompt", o, [&theirs](Result<TurnResult> r) { theirs.set_value(std::move(r)); });
  REQUIRE(backend_test::Eventually([&] { return queued.load(); }));
  REQUIRE(*rig.Send(Msg("2", "our prompt")) == Disposition::accepted);
  REQUIRE(QueuedInRuntime(rig.adapter));
  REQUIRE(*rig.Send(Edited("2", "our edited prompt", "ev-e2")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("merged with another client's message"));
  other.Finish();
  REQUIRE(rig.WaitDelivered(2));
  auto their_result = theirs.get_future().get();
  REQUIRE(their_result);
  INFO(rig.adapter.Dump());
  CHECK(their_result->shared);
  CHECK(their_result->text.find("their prompt") != std::string::npos);
  CHECK(their_result->text.find("our prompt") != std::string::npos);
  CHECK(their_result->text.find("edited") == std::string::npos);
}

// `suspend` would stop the runtime under the running turn and fail every queued message: refused.
TEST_CASE("router: suspend is refused while a turn runs", "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "delta", "text": "begun"},
      {"type": "sleep", "ms": 1500}, {"type": "message", "text": "done anyway"}]]})");
  Rig rig(root, ThreadedCaps(), "script:" + script);
  REQUIRE(*rig.Send(Msg("1", "a job")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitFor([](const std::vector<SentOp>& ops) { return Sent(ops, "begun"); }));
  REQUIRE(*rig.Send(Msg("2", "suspend")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("has a turn running or messages queued"));
  REQUIRE(rig.WaitDelivered(1, 30s));
  CHECK_FALSE(rig.adapter.FindMessage("done anyway").empty());
  CHECK(rig.adapter.CountMessagesWith("Suspended") == 0);
}

TEST_CASE("router: a message for an idle-suspended Session wakes it and says so", "[routing][router]") {
  TempRoot root;
  Rig rig(
      root, ThreadedCaps(), "echo", {},
      [](LocalBackendOptions& b) {
        OutOfProcess(b);
        b.suspend_after = std::chrono::seconds(1);
      },
      [](std::unique_ptr<SessionBackend> inner) { return std::make_unique<SlowWake>(std::move(inner)); });
  REQUIRE(*rig.Send(Msg("1", "hello")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  const std::string session = SessionName("chat", "slack", "test-owner", "C1", "T1");
  REQUIRE(backend_test::Eventually([&] {
    auto info = rig.backend->Get(session);
    return info && info->suspended == SuspendReason::idle;
  }));
  REQUIRE(*rig.Send(Msg("2", "are you there")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2));
  CHECK(Sent(rig.adapter.Ops(), "Waking the Session"));
  CHECK_FALSE(rig.adapter.FindMessage("are you there").empty());
}

namespace {

// Counts the WaitReady calls that reach the backend.
class CountingWaits : public ForwardingBackend {
 public:
  CountingWaits(std::unique_ptr<SessionBackend> inner, std::shared_ptr<std::atomic<int>> waits)
      : ForwardingBackend(std::move(inner)), waits_(std::move(waits)) {}
  void AsyncWaitReady(std::string name, std::chrono::steady_clock::time_point deadline, ReadyProgress progress,
                      CancellationToken cancel, BackendHandler<ReadyTarget> handler) override {
    ++*waits_;
    inner().AsyncWaitReady(std::move(name), deadline, std::move(progress), std::move(cancel), std::move(handler));
  }

 private:
  std::shared_ptr<std::atomic<int>> waits_;
};

}  // namespace

TEST_CASE("router: a turn right after the Session's last one skips WaitReady, and one whose runtime is gone waits for it",
          "[routing][router]") {
  TempRoot root;
  auto waits = std::make_shared<std::atomic<int>>(0);
  Rig rig(root, ThreadedCaps(), "echo", {}, {}, [waits](std::unique_ptr<SessionBackend> inner) {
    return std::make_unique<CountingWaits>(std::move(inner), waits);
  });
  REQUIRE(rig.backend->IdleGrace() > std::chrono::hours(1));  // suspend_after 0: never idle-suspended
  REQUIRE(*rig.Send(Msg("1", "one")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  CHECK(waits->load() == 1);
  REQUIRE(*rig.Send(Msg("2", "two")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2));
  CHECK(waits->load() == 1);  // straight to the runtime that answered "one"
  CHECK_FALSE(rig.adapter.FindMessage("echo #2:").empty());

  // Stopped behind the router's back: the next turn cannot connect, so it waits for the Session,
  // which says why it will not serve; the thread is told, nothing hangs.
  const std::string session = SessionName("chat", "slack", "test-owner", "C1", "T1");
  REQUIRE(rig.backend->Suspend(session));
  REQUIRE(*rig.Send(Msg("3", "three")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(3));
  CHECK(waits->load() == 2);
  const bool told = rig.adapter.WaitForText("suspended by its owner");
  INFO(rig.adapter.Dump());
  CHECK(told);

  // Resumed: the next turn waits for it (no runtime has served since) and runs.
  REQUIRE(rig.backend->Resume(session));
  REQUIRE(*rig.Send(Msg("4", "four")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(4));
  CHECK(waits->load() == 3);
  CHECK_FALSE(rig.adapter.FindMessage("four").empty());
}

TEST_CASE("router: with a short idle window every turn waits for its Session", "[routing][router]") {
  TempRoot root;
  auto waits = std::make_shared<std::atomic<int>>(0);
  Rig rig(
      root, ThreadedCaps(), "echo", {}, [](LocalBackendOptions& b) { b.suspend_after = std::chrono::seconds(1); },
      [waits](std::unique_ptr<SessionBackend> inner) { return std::make_unique<CountingWaits>(std::move(inner), waits); });
  REQUIRE(*rig.Send(Msg("1", "one")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  std::this_thread::sleep_for(600ms);  // past half the idle window: the runtime may be stopping
  REQUIRE(*rig.Send(Msg("2", "two")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2));
  CHECK(waits->load() == 2);
}

TEST_CASE("router: decline_questions declines the agent's question with a note, and the turn goes on",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("ask.json", kLanguageQuestion);
  Rig rig(root, ThreadedCaps(), "script:" + script, [](RouterOptions& o) { o.decline_questions = true; });
  REQUIRE(*rig.Send(Msg("1", "start")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  CHECK(rig.adapter.WaitForText("this bot declines questions"));
  CHECK_FALSE(rig.adapter.FindMessage("The question was declined.").empty());  // the script's reply to a decline
  CHECK(rig.adapter.FindMessage("Which language?").empty());                    // never asked in the chat
  CHECK(rig.router->Stats().open_questions == 0);
}

TEST_CASE("router: on_turn_finished reports each turn's status, duration and wake time", "[routing][router]") {
  TempRoot root;
  std::mutex mu;
  std::vector<RouterTurnOutcome> outcomes;
  Rig rig(root, ThreadedCaps(), "echo", [&](RouterOptions& o) {
    o.on_turn_finished = [&](const RouterTurnOutcome& t) {
      std::lock_guard lock(mu);
      outcomes.push_back(t);
    };
  });
  REQUIRE(*rig.Send(Msg("1", "one")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  REQUIRE(*rig.Send(Msg("2", "two")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(2));
  std::lock_guard lock(mu);
  REQUIRE(outcomes.size() == 2);
  for (const auto& t : outcomes) {
    CHECK(t.status == "completed");
    CHECK(t.session == SessionName("chat", "slack", "test-owner", "C1", "T1"));
    CHECK(t.wake <= t.duration);
    CHECK(t.duration.count() >= 0);
  }
}

// A backend whose deletes wait until the test lets them finish.
class HeldDelete : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void AsyncDelete(std::string name, BackendStatusHandler handler) override {
    std::lock_guard lock(mu);
    held.emplace_back(std::move(name), std::move(handler));
  }
  bool WaitHeld(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard lock(mu);
        if (!held.empty()) return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  void Release() {
    std::vector<std::pair<std::string, BackendStatusHandler>> now;
    {
      std::lock_guard lock(mu);
      now.swap(held);
    }
    for (auto& [name, handler] : now) ForwardingBackend::AsyncDelete(std::move(name), std::move(handler));
  }

  std::mutex mu;
  std::vector<std::pair<std::string, BackendStatusHandler>> held;
};

TEST_CASE("router: delete is for admins, asks to confirm, and withdraws a message that came for the Session meanwhile",
          "[routing][router]") {
  TempRoot root;
  const std::string script = root.File("slow.json", R"({"turns": [[{"type": "sleep", "ms": 1500},
      {"type": "message", "text": "slow reply"}]]})");
  HeldDelete* held = nullptr;
  Rig rig(root, PrivateChatCaps(), "script:" + script, [](RouterOptions& o) { o.max_in_flight = 1; }, {},
          [&](std::unique_ptr<SessionBackend> inner) {
            auto b = std::make_unique<HeldDelete>(std::move(inner));
            held = b.get();
            return b;
          });
  REQUIRE(*rig.Send(Msg("1", "first", "")) == Disposition::accepted);
  REQUIRE(rig.WaitDelivered(1));
  const std::string first_reply = rig.adapter.FindMessage("slow reply");
  REQUIRE(*rig.Send(Msg("2", "/new doomed", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Now talking to"));
  // Not an admin: refused.
  REQUIRE(*rig.Send(Msg("3", "/delete doomed", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Only an admin"));
  // The first Session takes the one slot with a slow turn (a reply to its message routes there).
  auto busy = Msg("4", "keep busy", "");
  busy.reply_to_message_id = first_reply;
  REQUIRE(*rig.Send(busy) == Disposition::accepted);
  REQUIRE(*rig.Send(Msg("5", "/delete doomed", "", "admin")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("again within a minute"));
  REQUIRE(*rig.Send(Msg("6", "/delete doomed", "", "admin")) == Disposition::accepted);
  REQUIRE(held->WaitHeld(10s));
  // While the delete is on its way, a message for the current Session (still "doomed") waits for the slot.
  REQUIRE(*rig.Send(Msg("7", "too late", "")) == Disposition::accepted);
  REQUIRE(rig.adapter.WaitForText("Queued"));
  held->Release();
  REQUIRE(rig.adapter.WaitForText("Deleted "));
  CHECK(rig.adapter.WaitForText("was deleted before its turn started."));
  INFO(rig.adapter.Dump());
  CHECK(rig.adapter.Text(rig.adapter.FindMessage("was deleted before its turn started")).find("doomed") !=
        std::string::npos);
  REQUIRE(rig.WaitDelivered(2));  // the busy turn's reply
  std::this_thread::sleep_for(300ms);
  const RouterStats stats = rig.router->Stats();
  CHECK(stats.turns_waiting == 0);
  CHECK(stats.turns_in_flight == 0);
  CHECK(stats.turns_completed == 2);  // the withdrawn message never ran
  auto listed = rig.backend->List();
  REQUIRE(listed);
  for (const auto& s : *listed) CHECK(s.name.find("doomed") == std::string::npos);
}

