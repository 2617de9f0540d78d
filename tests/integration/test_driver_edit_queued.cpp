// Driver::EditQueued / RemoveQueued against the local runtime: a first turn keeps the runtime busy,
// a second Driver's turn queues behind it, and a third Driver (or the second itself) edits or removes
// it. The queued turn's own submitter must see the change: an edit keeps it waiting and its reply
// answers the new text; a removal ends it as removed. Rejections carry the runtime's reason; bad
// arguments are refused before any I/O.
#include "driver_support.hpp"

using namespace driver_test;

namespace {

// The first turn runs until it is interrupted; later turns reply to their prompt at once.
const char* kLongThenQuick = R"({"turns":[[{"type":"delta","text":"working"},{"type":"sleep","ms":15000},
  {"type":"message","text":"first done"}],[{"type":"message","text":"reply to {prompt}"}]]})";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A runtime busy with A's turn and B's turn queued behind it, submitted through Driver `b`.
struct Queue {
  Fixture f{"", kLongThenQuick};
  Recorder events;  // what B's turn delivered (declared before `b`: it outlives B's callbacks)
  CancellationSource cancel_b;
  std::future<Result<TurnResult>> a;
  Driver b{f.ctx, f.connector};
  std::future<Result<TurnResult>> queued;
  TurnRef ref;  // B's turn at acceptance

  Queue() {
    a = f.Async("A");
    f.WaitEvent([](const Event& e) { return e.Is("turn.started"); });
    auto accepted = std::make_shared<std::promise<TurnRef>>();
    auto accepted_future = accepted->get_future();
    TurnOptions o;
    o.on_event = events.Callback();
    o.on_accepted = [accepted](const TurnRef& r) { accepted->set_value(r); };
    o.cancel = cancel_b.Token();
    auto done = std::make_shared<std::promise<Result<TurnResult>>>();
    queued = done->get_future();
    b.AsyncSubmitTurn("B", std::move(o), [done](Result<TurnResult> r) { done->set_value(std::move(r)); });
    REQUIRE(accepted_future.wait_for(kWait) == std::future_status::ready);
    ref = accepted_future.get();
  }

  // Ends A's turn, so that B's (if it is still queued) runs; returns B's result.
  Result<TurnResult> Finish() {
    REQUIRE(f.driver->Interrupt().has_value());
    REQUIRE(Get(a).has_value());
    return Get(queued);
  }

  // Waits until B's turn delivered an event matching `pred`.
  Event WaitDelivered(const std::function<bool(const Event&)>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    for (;;) {
      {
        std::lock_guard lock(events.mu);
        for (const auto& e : events.events)
          if (pred(e)) return e;
      }
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(5ms);
    }
  }

  std::vector<std::string> Types() {
    std::lock_guard lock(events.mu);
    std::vector<std::string> out;
    for (const auto& e : events.events) out.push_back(e.type);
    return out;
  }
};

}  // namespace

TEST_CASE("edit queued: another Driver's edit, the queued turn replies to the new text", "[driver][edit]") {
  Queue q;
  CHECK(q.ref.revision == 1);
  Driver c(q.f.ctx, q.f.connector);
  auto revision = c.EditQueued(q.ref.turn_id, "B, edited", 1);
  REQUIRE(revision.has_value());
  CHECK(*revision == 2);
  auto edits = q.f.Requests("message.edit");
  REQUIRE(edits.size() == 1);
  CHECK(edits[0].turn_id == q.ref.turn_id);
  CHECK(edits[0].text == "B, edited");
  CHECK(edits[0].expected_revision == 1);
  auto updated = q.WaitDelivered([](const Event& e) { return e.Is("user.message.updated"); });
  CHECK(updated.text == "B, edited");
  CHECK(updated.revision == 2);
  CHECK(q.queued.wait_for(0s) != std::future_status::ready);  // still waiting in the queue
  auto rb = q.Finish();
  REQUIRE(rb.has_value());
  CHECK(rb->status == TurnStatus::completed);
  CHECK(rb->turn_id == q.ref.turn_id);
  CHECK(rb->text == "reply to B, edited");
  CHECK(rb->shared);  // its prompt is someone else's now: abandoning it would withdraw nothing
  CHECK(q.Types() == std::vector<std::string>{"user.message", "user.message.updated", "turn.started",
                                              "assistant.message", "turn.completed"});
}

TEST_CASE("edit queued: edits through the submitting Driver keep the turn its own, so a cancel removes it",
          "[driver][edit]") {
  Queue q;
  auto second = q.b.EditQueued(q.ref.turn_id, "B, edited", 1);
  REQUIRE(second.has_value());
  CHECK(*second == 2);
  auto third = q.b.EditQueued(q.ref.turn_id, "B, edited again", *second);
  REQUIRE(third.has_value());
  CHECK(*third == 3);
  q.WaitDelivered([](const Event& e) { return e.Is("user.message.updated") && e.revision == 3; });
  q.cancel_b.Cancel();
  auto rb = Get(q.queued);
  REQUIRE_FALSE(rb.has_value());
  CHECK(rb.error().code == Errc::cancelled);
  // Withdrawn at the revision its edits left it at.
  auto removes = q.f.Requests("message.remove");
  REQUIRE(removes.size() == 1);
  CHECK(removes[0].turn_id == q.ref.turn_id);
  CHECK(removes[0].expected_revision == 3);
  auto removed = q.f.WaitEvent([](const Event& e) { return e.Is("user.message.removed"); });
  CHECK(removed.revision == 4);
  REQUIRE(q.f.driver->Interrupt().has_value());
  REQUIRE(Get(q.a).has_value());
}

TEST_CASE("edit queued: an edit through the submitting Driver leaves the result unshared", "[driver][edit]") {
  Queue q;
  REQUIRE(q.b.EditQueued(q.ref.turn_id, "B, mine", 1).has_value());
  q.WaitDelivered([](const Event& e) { return e.Is("user.message.updated"); });
  auto rb = q.Finish();
  REQUIRE(rb.has_value());
  CHECK(rb->text == "reply to B, mine");
  CHECK_FALSE(rb->shared);
}

TEST_CASE("remove queued: another Driver's removal ends the queued turn as removed at once", "[driver][edit]") {
  Queue q;
  Driver c(q.f.ctx, q.f.connector);
  REQUIRE(c.RemoveQueued(q.ref.turn_id, 1).has_value());
  auto removes = q.f.Requests("message.remove");
  REQUIRE(removes.size() == 1);
  CHECK(removes[0].turn_id == q.ref.turn_id);
  CHECK(removes[0].expected_revision == 1);
  auto rb = Get(q.queued);
  REQUIRE(rb.has_value());
  CHECK(rb->status == TurnStatus::removed);
  CHECK(rb->turn_id == q.ref.turn_id);
  CHECK(rb->text.empty());
  CHECK(q.Types() == std::vector<std::string>{"user.message", "user.message.removed"});
  CHECK(q.a.wait_for(0s) != std::future_status::ready);  // A runs on
  // Removed, never run: no turn.started or turn.completed for it.
  REQUIRE(q.f.driver->Interrupt().has_value());
  REQUIRE(Get(q.a).has_value());
  for (const auto& e : q.f.runtime->JournalEvents()) {
    if (e.turn_id == q.ref.turn_id) CHECK_FALSE((e.Is("turn.started") || e.Is("turn.completed")));
  }
}

TEST_CASE("edit and remove queued: the runtime's rejections carry its reason", "[driver][edit]") {
  Queue q;
  Driver c(q.f.ctx, q.f.connector);
  const std::string quoted = "\"" + q.ref.turn_id + "\"";

  auto stale_edit = c.EditQueued(q.ref.turn_id, "B?", 2);
  REQUIRE_FALSE(stale_edit.has_value());
  CHECK(stale_edit.error().code == Errc::rejected);
  CHECK(Contains(stale_edit.error().message, "message.edit"));
  CHECK(Contains(stale_edit.error().message, "editing Session turn " + quoted + ": revision is 1, not 2"));

  auto stale_remove = c.RemoveQueued(q.ref.turn_id, 2);
  REQUIRE_FALSE(stale_remove.has_value());
  CHECK(stale_remove.error().code == Errc::rejected);
  CHECK(Contains(stale_remove.error().message, "removing Session turn " + quoted + ": revision is 1, not 2"));

  // A's turn runs: it is not the queued one.
  auto running = c.EditQueued("turn-1", "A?", 1);
  REQUIRE_FALSE(running.has_value());
  CHECK(running.error().code == Errc::rejected);
  CHECK(Contains(running.error().message, "Session turn \"turn-1\" is no longer pending"));
  auto unknown = c.RemoveQueued("turn-99", 1);
  REQUIRE_FALSE(unknown.has_value());
  CHECK(Contains(unknown.error().message, "Session turn \"turn-99\" is no longer pending"));

  // Nothing above changed B's turn; once removed, it cannot be edited or removed again.
  CHECK(q.queued.wait_for(0s) != std::future_status::ready);
  REQUIRE(c.RemoveQueued(q.ref.turn_id, 1).has_value());
  auto gone = c.EditQueued(q.ref.turn_id, "B?", 2);
  REQUIRE_FALSE(gone.has_value());
  CHECK(Contains(gone.error().message, "Session turn " + quoted + " is no longer pending"));
  auto rb = Get(q.queued);
  REQUIRE(rb.has_value());
  CHECK(rb->status == TurnStatus::removed);
  REQUIRE(q.f.driver->Interrupt().has_value());
  REQUIRE(Get(q.a).has_value());
}

TEST_CASE("edit queued: a command text needs allow_commands, and then the runtime takes it", "[driver][edit]") {
  Queue q;
  Driver c(q.f.ctx, q.f.connector);
  for (const char* text : {"!rm -rf /", "  /goal ship it", "\u3000!ls"}) {
    auto refused = c.EditQueued(q.ref.turn_id, text, 1);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == Errc::invalid_argument);
    CHECK(Contains(refused.error().message, "the edited text would run as a runtime command"));
    CHECK(Contains(refused.error().message, "allow_commands"));
  }
  CHECK(q.f.Requests("message.edit").empty());
  EditOptions allowed;
  allowed.allow_commands = true;
  auto revision = c.EditQueued(q.ref.turn_id, "!echo hi", 1, allowed);
  REQUIRE(revision.has_value());
  auto updated = q.f.WaitEvent([](const Event& e) { return e.Is("user.message.updated"); });
  CHECK(updated.session_command);
  // Do not let it run: withdraw it at its new revision.
  REQUIRE(c.RemoveQueued(q.ref.turn_id, *revision).has_value());
  auto rb = Get(q.queued);
  REQUIRE(rb.has_value());
  CHECK(rb->status == TurnStatus::removed);
  REQUIRE(q.f.driver->Interrupt().has_value());
  REQUIRE(Get(q.a).has_value());
}

TEST_CASE("edit and remove queued: bad arguments are refused before any I/O, naming the problem", "[driver][edit]") {
  Fixture f;
  auto expect = [](const Status& s, const std::string& part) {
    REQUIRE_FALSE(s.has_value());
    CHECK(s.error().code == Errc::invalid_argument);
    CHECK(Contains(s.error().message, part));
  };
  auto edit = [&](const std::string& turn, const std::string& text, std::int64_t revision, EditOptions o = {}) {
    auto r = f.driver->EditQueued(turn, text, revision, o);
    return r ? Status{} : Status(Fail(r.error()));
  };
  expect(edit("", "x", 1), "EditQueued needs the queued turn's id");
  expect(edit("turn-1", "x", 0), "EditQueued: expected_revision must be positive");
  expect(edit("turn-1", "x", -3), "expected_revision must be positive");
  expect(edit("turn-1", " \n\t", 1), "the edited text is empty");
  EditOptions no_time;
  no_time.timeout = 0ms;
  expect(edit("turn-1", "x", 1, no_time), "EditQueued: the timeout must be positive");
  expect(f.driver->RemoveQueued("", 1), "RemoveQueued needs the queued turn's id");
  expect(f.driver->RemoveQueued("turn-1", 0), "RemoveQueued: expected_revision must be positive");
  expect(f.driver->RemoveQueued("turn-1", 1, -1ms), "RemoveQueued: the timeout must be positive");
  // The other one-shots take the same view of a deadline.
  expect(f.driver->Interrupt(0ms), "Interrupt: the timeout must be positive");
  CHECK(f.runtime->ReceivedRequests().empty());
}

TEST_CASE("edit and remove queued: async handlers run once on a worker, stopped Context and workers refused",
          "[driver][edit]") {
  Fixture f;
  auto on_worker = std::make_shared<std::promise<bool>>();
  auto calls = std::make_shared<std::atomic<int>>(0);
  f.driver->AsyncEditQueued("turn-1", "x", 0, [&f, on_worker, calls](Result<std::int64_t> r) {
    CHECK_FALSE(r.has_value());
    if (++*calls == 1) on_worker->set_value(f.ctx.InWorkerThread());
  });
  auto worker = on_worker->get_future();
  REQUIRE(worker.wait_for(kWait) == std::future_status::ready);
  CHECK(worker.get());
  // A blocking form on a worker would wait for the very thread it holds.
  auto refused = std::make_shared<std::promise<Errc>>();
  f.ctx.Post([&f, refused] {
    auto r = f.driver->EditQueued("turn-1", "x", 1);
    refused->set_value(r ? Errc::ok : r.error().code);
  });
  auto refused_code = refused->get_future();
  REQUIRE(refused_code.wait_for(kWait) == std::future_status::ready);
  CHECK(refused_code.get() == Errc::would_block);
  CHECK(calls->load() == 1);

  Context stopped;
  stopped.Stop();
  Driver d(stopped, MakeUnixConnector(stopped, f.socket()));
  std::optional<Errc> edit_code, remove_code;
  d.AsyncEditQueued("turn-1", "x", 1, [&](Result<std::int64_t> r) { edit_code = r ? Errc::ok : r.error().code; });
  d.AsyncRemoveQueued("turn-1", 1, [&](Status s) { remove_code = s ? Errc::ok : s.error().code; });
  CHECK(edit_code == Errc::unavailable);  // called here and now: no worker would ever run it
  CHECK(remove_code == Errc::unavailable);
}

TEST_CASE("edit queued: an unreachable runtime is connection_failed", "[driver][edit]") {
  TempDir dir;
  Context ctx;
  Driver d(ctx, MakeUnixConnector(ctx, dir.path + "/nobody.sock"));
  auto r = d.EditQueued("turn-1", "x", 1);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::connection_failed);
  auto s = d.RemoveQueued("turn-1", 1);
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().code == Errc::connection_failed);
}
