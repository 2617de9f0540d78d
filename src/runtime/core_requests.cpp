// What the local runtime does with each client request, in the real runtime's order of checks and
// with its words (its handleConnection, submitClientMessage, editMessage, removePendingMessage,
// resolveInput, interruptTurn, loadHistoryPage).
#include <algorithm>

#include "runtime/core.hpp"
#include "runtime/history.hpp"
#include "runtime/requests.hpp"
#include "runtime/text.hpp"

namespace sessionturn::testing::local_runtime_detail {

using runtime::GoQuote;
using runtime::SessionCommand;
using runtime::TurnRecord;

Event MakeEvent(std::string_view type) {
  Event e;
  e.type = std::string(type);
  return e;
}

namespace {

bool IsTurnEvent(const std::string& type) {
  return type == event_type::kUserMessage || type == event_type::kUserMessageUpdated ||
         type == event_type::kTurnStarted || type == event_type::kTurnCompleted;
}

bool IsBoundary(const std::string& type) {
  return type == event_type::kUserMessage || type == event_type::kUserMessageUpdated ||
         type == event_type::kUserMessageRemoved || type == event_type::kTurnStarted ||
         type == event_type::kTurnCompleted || type == event_type::kInputResolved ||
         type == event_type::kRuntimeRecovered;
}

}  // namespace

// ---- fan-out ---------------------------------------------------------------------------------------

void Core::NoteActivity(const std::string& type) {
  const auto& st = journal->state();
  const bool now_busy = st.active.has_value() || !st.queued.empty() || !st.open_inputs.empty();
  if (busy && !now_busy) stirred = std::chrono::steady_clock::now();  // the idle clock starts now
  busy = now_busy;
  if (IsTurnEvent(type)) last_turn = std::chrono::system_clock::now();
}

void Core::Stir() {
  std::lock_guard<std::mutex> lk(mu);
  stirred = std::chrono::steady_clock::now();
}

Status Core::Append(Event e) {
  Result<const runtime::JournalEntry*> r;
  {
    std::lock_guard<std::mutex> lk(mu);
    r = journal->Append(std::move(e));
    if (r) NoteActivity((*r)->event.type);
  }
  if (!r) {
    Log(LogLevel::error, r.error().message);
    return Fail(r.error());
  }
  cv.notify_all();
  const runtime::JournalEntry& entry = **r;
  if (IsBoundary(entry.event.type)) journal->Sync();
  for (Conn* c : subscribers) c->Send(entry.bytes, true);
  return {};
}

void Core::BroadcastUnjournaled(const Event& e) {
  auto bytes = runtime::EncodeShared(e);
  for (Conn* c : subscribers) c->Send(bytes, true);
}

void Core::SendTo(Conn& c, const Event& e) { c.Send(runtime::EncodeShared(e), false); }

void Core::Reject(Conn& c, const ClientRequest& r, std::string reason, bool with_turn) {
  Event e = MakeEvent(event_type::kError);
  e.request_id = r.request_id;
  if (with_turn) e.turn_id = r.turn_id;  // only edit and remove name the turn they were about
  e.text = std::move(reason);
  e.status = std::string(status_value::kRejected);
  SendTo(c, e);
}

Event Core::StatusEvent() const {
  Event e = MakeEvent(event_type::kRuntimeStatus);
  e.runtime = status;
  return e;
}

// ---- requests --------------------------------------------------------------------------------------

void Core::OnRequestLine(Conn& c, std::string_view line) {
  Stir();
  runtime::DecodedLine decoded = runtime::DecodeRequestLine(line);
  for (const ClientRequest& r : decoded.requests) {
    if (c.closed()) return;
    if (opt.record_requests) {
      {
        std::lock_guard<std::mutex> lk(mu);
        requests.push_back(r);
      }
      cv.notify_all();
    }
    Handle(c, r);
  }
  if (!decoded.error.empty() && !c.closed()) {
    // Go's decoder stops at the first value it cannot decode, and the runtime then ends the connection.
    Log(LogLevel::info, "Session client read failed error=" + decoded.error + ": closing the connection");
    c.Close();
  }
}

void Core::Handle(Conn& c, const ClientRequest& r) {
  const std::string& t = r.type;
  if (t == request_type::kSubscribe) {
    if (!c.subscribed) Subscribe(c, r);  // a second subscribe is ignored, silently
    return;
  }
  if (t == request_type::kHistory) return History(c, r);  // answers without subscribing
  if (t == "prompts") return Prompts(c, r);                // ditto
  const bool known = t == request_type::kMessage || t == request_type::kMessageEdit ||
                     t == request_type::kMessageRemove || t == request_type::kInput || t == request_type::kInterrupt;
  if (!known) return Reject(c, r, "unsupported client request type " + GoQuote(t));
  if (!c.subscribed) Subscribe(c, ClientRequest::Subscribe(0, {}, false, 0, 0));
  if (c.closed()) return;
  if (t == request_type::kMessage) OnMessage(c, r);
  else if (t == request_type::kMessageEdit) OnEdit(c, r);
  else if (t == request_type::kMessageRemove) OnRemove(c, r);
  else if (t == request_type::kInput) OnInput(c, r);
  else OnInterrupt(c, r);
}

void Core::Subscribe(Conn& c, const ClientRequest& r) {
  const std::int64_t first = journal->first_id();
  const std::int64_t last = journal->last_id();
  // Resets exist only with historyBounds; a plain subscribe replays whatever is newer than `since`.
  bool reset = false;
  if (r.history_bounds)
    reset = (!r.journal_id.empty() && r.journal_id != journal->id()) || (r.since > 0 && r.journal_id.empty()) ||
            r.since < first - 1 || r.since > last;
  const std::int64_t since = reset ? 0 : r.since;
  const bool condensed = r.history_bounds && r.history_items > 0 && r.history_bytes > 0 && (r.since == 0 || reset);

  runtime::CondensedPage page;
  std::string cursor;
  if (condensed) {
    const auto items = std::min<std::int64_t>(r.history_items, runtime::kHistoryMaxItems);
    const auto bytes = std::min<std::int64_t>(r.history_bytes, runtime::kHistoryMaxBytes);
    page = runtime::BuildCondensedPage(*journal, 0, static_cast<std::size_t>(items), static_cast<std::size_t>(bytes));
    if (page.before > 0) cursor = runtime::EncodeHistoryCursor({journal->id(), page.before, items, bytes});
  }
  if (r.history_bounds) {
    Event hs = MakeEvent(event_type::kHistoryStart);
    hs.first_event_id = first;
    hs.last_event_id = last;
    hs.journal_id = journal->id();
    hs.reset = reset;
    hs.history_limited = !cursor.empty();
    hs.history_cursor = cursor;
    SendTo(c, hs);
  }
  if (condensed) {
    for (auto& line : page.lines) c.Send(std::move(line), false);
    // A question still waiting goes out after every first page, so whoever joins can answer it.
    for (const Event& e : runtime::PendingInputEvents(*journal)) SendTo(c, e);
  } else {
    for (const auto& entry : journal->retained())
      if (entry.event.id > since) c.Send(entry.bytes, false);
  }
  SendTo(c, StatusEvent());
  Event end = MakeEvent(event_type::kHistoryEnd);
  if (condensed) end.history_state = runtime::CurrentHistoryState(*journal);
  SendTo(c, end);
  if (c.closed()) return;
  c.subscribed = true;
  subscribers.push_back(&c);
}

void Core::History(Conn& c, const ClientRequest& r) {
  auto cursor = runtime::DecodeHistoryCursor(r.history_cursor);
  if (!cursor) return Reject(c, r, std::string(reject_reason::kInvalidCursor));
  if (cursor->journal_id != journal->id()) return Reject(c, r, std::string(reject_reason::kExpiredCursor));
  runtime::CondensedPage page =
      runtime::BuildCondensedPage(*journal, cursor->before_event_id, static_cast<std::size_t>(cursor->item_limit),
                                  static_cast<std::size_t>(cursor->byte_limit));
  std::string next;
  if (page.before > 0) {
    runtime::HistoryCursor n = *cursor;
    n.before_event_id = page.before;
    next = runtime::EncodeHistoryCursor(n);
  }
  Event start = MakeEvent(event_type::kHistoryStart);
  start.request_id = r.request_id;
  start.journal_id = journal->id();
  start.history_page = true;
  start.history_limited = !next.empty();
  start.history_cursor = next;
  SendTo(c, start);
  for (auto& line : page.lines) c.Send(std::move(line), false);
  Event end = MakeEvent(event_type::kHistoryEnd);
  end.request_id = r.request_id;
  end.history_page = true;
  SendTo(c, end);
}

void Core::Prompts(Conn& c, const ClientRequest& r) {
  runtime::PromptsAnswer answer = runtime::BuildPrompts(*journal, r.request_id, r.history_cursor);
  if (!answer.error.empty()) return Reject(c, r, answer.error);
  c.Send(std::make_shared<const std::string>(std::move(answer.line)), false);
}

void Core::OnMessage(Conn& c, const ClientRequest& r) {
  const SessionCommand cmd = runtime::ParseSessionCommand(r.text);
  if (!cmd.error.empty()) return Reject(c, r, cmd.error);
  if (cmd.kind != SessionCommand::Kind::message && !r.attachment_ids.empty())
    return Reject(c, r, std::string(reject_reason::kCommandAttachments));
  // The local runtime has no goal-capable provider (the real one: Codex only).
  if (cmd.kind == SessionCommand::Kind::goal) return Reject(c, r, std::string(reject_reason::kGoalUnsupported));
  if (TrimUnicodeSpace(r.text).empty() && r.attachment_ids.empty())
    return Reject(c, r, std::string(reject_reason::kEmptyText));
  if (!r.attachment_ids.empty()) return Reject(c, r, std::string(reject_reason::kNoAttachmentStorage));
  if (draining) return Reject(c, r, std::string(reject_reason::kDraining));
  if (restarting) return Reject(c, r, std::string(reject_reason::kProviderRestarting));
  const auto& st = journal->state();
  if (!st.queued.empty()) {
    const TurnRecord& q = st.queued.back();
    if (cmd.kind != SessionCommand::Kind::message || q.command())
      return Reject(c, r, std::string(reject_reason::kPendingCommand));
    Event e = MakeEvent(event_type::kUserMessageUpdated);
    e.request_id = r.request_id;
    e.turn_id = q.id;
    e.text = runtime::MergePendingText(q.text, r.text);
    e.revision = std::max<std::int64_t>(1, q.revision) + 1;
    if (auto s = Append(std::move(e)); !s) Reject(c, r, "recording pending Session message: " + s.error().message);
    return;
  }
  Event e = MakeEvent(event_type::kUserMessage);
  e.request_id = r.request_id;
  e.turn_id = "turn-" + std::to_string(st.next_turn_number);
  e.text = r.text;
  e.revision = 1;
  e.session_command = cmd.kind != SessionCommand::Kind::message;
  if (auto s = Append(std::move(e)); !s) return Reject(c, r, "recording Session message: " + s.error().message);
  MaybeStartNext();
}

namespace {

// The queued turn an edit or remove may touch: only the one waiting to run.
const TurnRecord* Pending(const runtime::SessionState& st, const std::string& turn_id) {
  if (st.queued.empty() || st.queued.front().id != turn_id) return nullptr;
  return &st.queued.front();
}

}  // namespace

void Core::OnEdit(Conn& c, const ClientRequest& r) {
  const std::string quoted = GoQuote(r.turn_id);
  const TurnRecord* q = Pending(journal->state(), r.turn_id);
  if (!q) return Reject(c, r, "Session turn " + quoted + " is no longer pending", true);
  if (r.expected_revision <= 0)
    return Reject(c, r, "editing Session turn " + quoted + ": expectedRevision must be positive", true);
  const std::int64_t revision = std::max<std::int64_t>(1, q->revision);
  if (r.expected_revision != revision)
    return Reject(c, r,
                  "editing Session turn " + quoted + ": revision is " + std::to_string(revision) + ", not " +
                      std::to_string(r.expected_revision),
                  true);
  if (TrimUnicodeSpace(r.text).empty())
    return Reject(c, r, "editing Session turn " + quoted + ": message must not be empty", true);
  const SessionCommand cmd = runtime::ParseSessionCommand(r.text);
  if (!cmd.error.empty()) return Reject(c, r, cmd.error, true);
  if (cmd.kind == SessionCommand::Kind::goal) return Reject(c, r, std::string(reject_reason::kGoalUnsupported), true);
  Event e = MakeEvent(event_type::kUserMessageUpdated);
  e.request_id = r.request_id;
  e.turn_id = q->id;
  e.text = r.text;
  e.revision = revision + 1;
  e.session_command = cmd.kind != SessionCommand::Kind::message;  // an edit may turn a message into a command
  if (auto s = Append(std::move(e)); !s)
    Reject(c, r, "recording edited Session turn " + quoted + ": " + s.error().message, true);
}

void Core::OnRemove(Conn& c, const ClientRequest& r) {
  const std::string quoted = GoQuote(r.turn_id);
  const TurnRecord* q = Pending(journal->state(), r.turn_id);
  if (!q) return Reject(c, r, "Session turn " + quoted + " is no longer pending", true);
  if (r.expected_revision <= 0)
    return Reject(c, r, "removing Session turn " + quoted + ": expectedRevision must be positive", true);
  const std::int64_t revision = std::max<std::int64_t>(1, q->revision);
  if (r.expected_revision != revision)
    return Reject(c, r,
                  "removing Session turn " + quoted + ": revision is " + std::to_string(revision) + ", not " +
                      std::to_string(r.expected_revision),
                  true);
  Event e = MakeEvent(event_type::kUserMessageRemoved);
  e.request_id = r.request_id;
  e.turn_id = q->id;
  e.revision = revision + 1;
  e.status = std::string(status_value::kRemoved);
  if (auto s = Append(std::move(e)); !s)
    Reject(c, r, "recording removed Session turn " + quoted + ": " + s.error().message, true);
}

void Core::OnInterrupt(Conn& c, const ClientRequest& r) {
  const auto& st = journal->state();
  if (!st.active || !run) return Reject(c, r, std::string(reject_reason::kNoActiveTurn));
  // The runtime serialises interrupts: one that arrives while the turn is already stopping returns
  // without an event once that settles.
  if (interrupt_armed) return;
  const std::string turn_id = st.active->id;
  Event e = MakeEvent(event_type::kTurnInterrupting);
  e.request_id = r.request_id;
  e.turn_id = turn_id;
  e.status = "interrupting";
  if (auto s = Append(std::move(e)); !s) return Reject(c, r, "recording Session interruption: " + s.error().message);
  interrupt_armed = true;
  interrupt_timer.expires_after(opt.interrupt_timeout);
  interrupt_timer.async_wait([this, turn_id](const asio::error_code& ec) {
    if (ec || !host || host->turn_id() != turn_id) return;
    Log(LogLevel::warning, "provider did not stop within the interrupt timeout: killing and restarting it");
    KillRun();
    CancelOpenInputs(turn_id);
    Event done = MakeEvent(event_type::kTurnCompleted);
    done.turn_id = turn_id;
    done.status = std::string(status_value::kInterrupted);
    (void)Append(std::move(done));
    restarting = true;
    restart_timer.expires_after(opt.provider_restart_delay);
    restart_timer.async_wait([this](const asio::error_code& ec2) {
      if (ec2) return;
      restarting = false;
      MaybeStartNext();
    });
  });
  run->Interrupt();
}

void Core::OnInput(Conn& c, const ClientRequest& r) {
  const runtime::OpenInput* in = nullptr;
  for (const auto& o : journal->state().open_inputs)
    if (o.input_id == r.input_id) in = &o;
  if (!in) return Reject(c, r, "input request " + GoQuote(r.input_id) + " is not pending");
  const std::string input_id = in->input_id;
  if (r.cancel) {
    Event e = MakeEvent(event_type::kInputResolved);
    e.request_id = r.request_id;
    e.input_id = input_id;
    e.status = std::string(status_value::kCancelled);
    if (auto s = Append(std::move(e)); !s)
      return Reject(c, r, "recording Session input cancellation: " + s.error().message);
    partial_answers.erase(input_id);
    if (run) run->InputResolved(input_id, true, {});
    return;
  }
  if (r.answers.empty()) return Reject(c, r, std::string(reject_reason::kEmptyAnswers));
  for (const auto& [qid, vals] : r.answers) {
    const bool asked = std::any_of(in->questions.begin(), in->questions.end(),
                                   [&, &qid = qid](const InputQuestion& q) { return q.id == qid; });
    if (!asked) return Reject(c, r, "input question " + GoQuote(qid) + " is not pending");
    if (vals.empty()) return Reject(c, r, "input question " + GoQuote(qid) + " must contain an answer");
  }
  auto collected = partial_answers[input_id];
  for (const auto& [qid, vals] : r.answers) collected[qid] = vals;
  std::set<std::string> asked;
  for (const auto& q : in->questions) asked.insert(q.id);
  const bool complete = collected.size() >= asked.size();
  // Partly answered: request.accepted; every question answered: input.resolved. Neither names the turn.
  Event e = MakeEvent(complete ? event_type::kInputResolved : event_type::kRequestAccepted);
  e.request_id = r.request_id;
  e.input_id = input_id;
  e.status = complete ? std::string(status_value::kAnswered) : std::string("accepted");
  if (auto s = Append(std::move(e)); !s) return Reject(c, r, "recording Session input response: " + s.error().message);
  if (!complete) {
    partial_answers[input_id] = std::move(collected);
    return;
  }
  partial_answers.erase(input_id);
  if (run) run->InputResolved(input_id, false, collected);
}

}  // namespace sessionturn::testing::local_runtime_detail
