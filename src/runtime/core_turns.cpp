// Running turns (one at a time, in order), what providers emit, and restart recovery, as the real
// runtime's runTurn, turnSink and recoverJournal do it.
#include <algorithm>

#include "runtime/core.hpp"
#include "runtime/text.hpp"

namespace sessionturn::testing::local_runtime_detail {

using runtime::SessionCommand;
using runtime::TurnRecord;

namespace {

constexpr std::size_t kMaxToolOutputBytes = 512 * 1024;  // what a tool.completed may carry

std::int64_t TurnNumber(const std::string& id) {
  if (id.rfind("turn-", 0) != 0) return 0;
  try {
    return std::stoll(id.substr(5));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

void Core::MaybeStartNext() {
  const auto& st = journal->state();
  if (stopping || paused || restarting || run || st.active || st.queued.empty()) return;
  const TurnRecord q = st.queued.front();
  Event e = MakeEvent(event_type::kTurnStarted);
  e.turn_id = q.id;
  e.status = std::string(status_value::kRunning);
  if (!Append(std::move(e))) return;
  BroadcastUnjournaled(StatusEvent());  // the real runtime re-sends its status as each turn starts
  runtime::TurnInput in;
  in.turn_id = q.id;
  in.text = q.text;
  in.number = journal->state().turns_started;
  in.session_name = opt.session_name;
  in.state_dir = opt.state_dir;
  in.working_dir = opt.working_dir;
  in.echo_delay = opt.echo_delay;
  host = std::make_shared<ActiveHost>(*this, q.id);
  switch (q.kind) {
    case SessionCommand::Kind::shell: {
      std::string command = runtime::ParseSessionCommand(q.text).shell;
      run = opt.allow_shell ? runtime::NewShellRun(host, std::move(in), std::move(command))
                            : runtime::NewDisabledShellRun(host, std::move(in), std::move(command));
      break;
    }
    case SessionCommand::Kind::goal:
      // Only reachable from a journal written elsewhere: the runtime fails such a turn when it runs.
      asio::post(io, [h = host] { h->Done(std::string(status_value::kFailed), std::string(reject_reason::kGoalUnsupported)); });
      return;
    case SessionCommand::Kind::message:
      run = provider->NewRun(host, std::move(in));
      break;
  }
  run->Start();
}

void Core::CancelOpenInputs(const std::string& turn_id) {
  std::vector<std::string> open;
  for (const auto& in : journal->state().open_inputs)
    if (in.turn_id == turn_id) open.push_back(in.input_id);
  for (const auto& id : open) {
    // A question the turn stops waiting for: cancelled, with neither turn nor request id.
    Event e = MakeEvent(event_type::kInputResolved);
    e.input_id = id;
    e.status = std::string(status_value::kCancelled);
    (void)Append(std::move(e));
    partial_answers.erase(id);
  }
}

void Core::KillRun() {
  interrupt_timer.cancel();
  interrupt_armed = false;
  if (host) host->alive = false;
  auto old_run = std::move(run);
  host.reset();
  if (old_run) old_run->Kill();
  resume_waiters.clear();
}

void Core::TurnDone(const std::string& turn_id, std::string status_text, std::string error) {
  if (journal->state().interrupting) status_text = std::string(status_value::kInterrupted);
  interrupt_timer.cancel();
  interrupt_armed = false;
  if (host) host->alive = false;
  CancelOpenInputs(turn_id);
  if (status_text == status_value::kFailed && !error.empty()) {
    Event e = MakeEvent(event_type::kError);
    e.turn_id = turn_id;
    e.text = std::move(error);
    e.status = std::string(status_value::kFailed);
    (void)Append(std::move(e));
  }
  Event done = MakeEvent(event_type::kTurnCompleted);
  done.turn_id = turn_id;
  done.status = status_text;
  (void)Append(std::move(done));
  // The run may be on the stack below us: release it from a later handler.
  asio::post(io, [old_run = std::move(run), old_host = std::move(host)] {});
  asio::post(io, [this] { MaybeStartNext(); });
}

void Core::ProviderEmit(const std::string& turn_id, Event e) {
  if (e.type == event_type::kRuntimeStatus) {
    // Never journaled: it updates the status every subscriber gets, live and on subscribe.
    if (e.runtime) {
      const RuntimeStatus& rs = *e.runtime;
      if (!rs.model.empty()) status.model = rs.model;
      if (!rs.agent_type.empty()) status.agent_type = rs.agent_type;
      if (!rs.working_dir.empty()) status.working_dir = rs.working_dir;
      if (!rs.home_dir.empty()) status.home_dir = rs.home_dir;
      if (!rs.branch.empty()) status.branch = rs.branch;
      if (rs.usage) status.usage = rs.usage;
      if (rs.extra.is_object())
        for (auto it = rs.extra.begin(); it != rs.extra.end(); ++it) status.extra[it.key()] = it.value();
    }
    BroadcastUnjournaled(StatusEvent());
    return;
  }
  if (e.turn_id.empty()) e.turn_id = turn_id;
  if (e.type == event_type::kToolCompleted)
    e.output = runtime::Bounded(e.output, kMaxToolOutputBytes, runtime::kToolOutputMarker);
  (void)Append(std::move(e));
}

std::string Core::Ask(const std::string& turn_id, std::string input_id, std::vector<InputQuestion> questions) {
  if (input_id.empty()) input_id = "input-" + std::to_string(journal->state().next_input_number);
  Event e = MakeEvent(event_type::kInputRequested);
  e.turn_id = turn_id;
  e.input_id = input_id;
  e.questions = std::move(questions);
  e.status = "pending";
  (void)Append(std::move(e));
  return input_id;
}

void Core::Recover() {
  if (journal->empty()) return;
  const runtime::SessionState st = journal->state();
  const bool unfinished = !st.open_inputs.empty() || st.active.has_value();
  Event recovered = MakeEvent(event_type::kRuntimeRecovered);
  recovered.text = unfinished ? "Session runtime restarted; unfinished work was interrupted" : "Session runtime restarted";
  recovered.status = "recovered";
  (void)Append(std::move(recovered));
  for (const auto& in : st.open_inputs) {
    Event e = MakeEvent(event_type::kInputResolved);
    e.turn_id = in.turn_id;  // recovery names the turn, unlike a live cancellation
    e.input_id = in.input_id;
    e.status = std::string(status_value::kCancelled);
    (void)Append(std::move(e));
  }
  if (st.active) {
    Event e = MakeEvent(event_type::kTurnCompleted);
    e.turn_id = st.active->id;
    e.status = std::string(status_value::kInterrupted);
    (void)Append(std::move(e));
  }
  if (st.queued.size() > 1) {
    // Unstarted turns fold into the earliest: the others complete `merged`, then it carries the texts.
    std::vector<TurnRecord> queued(st.queued.begin(), st.queued.end());
    std::stable_sort(queued.begin(), queued.end(),
                     [](const TurnRecord& a, const TurnRecord& b) { return TurnNumber(a.id) < TurnNumber(b.id); });
    std::string text = queued.front().text;
    for (std::size_t i = 1; i < queued.size(); ++i) {
      text = runtime::MergePendingText(text, queued[i].text);
      Event e = MakeEvent(event_type::kTurnCompleted);
      e.turn_id = queued[i].id;
      e.status = std::string(status_value::kMerged);
      (void)Append(std::move(e));
    }
    Event up = MakeEvent(event_type::kUserMessageUpdated);
    up.turn_id = queued.front().id;
    up.text = std::move(text);
    up.revision = std::max<std::int64_t>(1, queued.front().revision) + 1;
    up.session_command = queued.front().command();
    (void)Append(std::move(up));
  }
  MaybeStartNext();
}

// ---- ActiveHost ------------------------------------------------------------------------------------

void ActiveHost::Emit(Event event) {
  if (alive) rt_.ProviderEmit(turn_id_, std::move(event));
}

std::string ActiveHost::Ask(std::string input_id, std::vector<InputQuestion> questions) {
  if (!alive) return input_id;
  return rt_.Ask(turn_id_, std::move(input_id), std::move(questions));
}

void ActiveHost::CancelInputs() {
  if (alive) rt_.CancelOpenInputs(turn_id_);
}

void ActiveHost::Done(std::string status, std::string error) {
  if (!alive) return;
  alive = false;
  rt_.TurnDone(turn_id_, std::move(status), std::move(error));
}

bool ActiveHost::Paused() const { return rt_.paused; }

void ActiveHost::WhenResumed(std::function<void()> fn) {
  if (!alive) return;
  if (!rt_.paused) {
    asio::post(rt_.io, std::move(fn));
    return;
  }
  rt_.resume_waiters.push_back(std::move(fn));
}

asio::io_context& ActiveHost::io() { return rt_.io; }

std::size_t ActiveHost::Backlog() const {
  std::size_t most = 0;
  for (const Conn* c : rt_.subscribers)
    if (!c->closed()) most = std::max(most, c->live_queued());
  return most;
}

std::size_t ActiveHost::BacklogBound() const { return rt_.opt.subscriber_buffer; }

}  // namespace sessionturn::testing::local_runtime_detail
