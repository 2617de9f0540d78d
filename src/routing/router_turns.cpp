// A Session's queue and one turn's life: the router's serial queue per Session (receipts with the
// position), the global admission limit, Ensure and WaitReady ("waking the Session..."), the prompt
// envelope, the driver's events as progress, and the result turned into the reply.
#include <cassert>
#include <cstdio>
#include <utility>

#include "routing/envelope.hpp"
#include "routing/router_impl.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn {

using routing::SessionRun;
using routing::TurnRun;
using routing::TurnSignal;
using routing::TurnStage;
using routing::Waiting;

namespace {

// The streamed reply's end shown in the progress: a line or two.
constexpr std::size_t kTailBytes = 280;
// Elapsed time in the progress moves on without events too.
constexpr std::chrono::seconds kTickEvery{5};
// How often the router's ticker looks for a turn due a tick: each turn keeps its own phase (ticks 5 s
// apart from its start, within this), so many turns' typing renewals do not all go out at once.
constexpr std::chrono::seconds kTickerPeriod{1};
// A Session whose runtime completed a turn this recently (and within half the backend's IdleGrace)
// gets its next turn without a WaitReady first (the backend's look at its files or its API object):
// when its runtime is gone after all (stopped by its owner, crashed), the turn cannot connect and
// waits for the Session then.
constexpr std::chrono::seconds kReadyReuse{30};

std::string Seconds(std::chrono::steady_clock::duration d) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  if (s < 60) return std::to_string(s) + " s";
  return std::to_string(s / 60) + " min " + std::to_string(s % 60) + " s";
}

// Keeps the last kTailBytes of `text` (less, to start on a whole UTF-8 sequence), in place.
void KeepTail(std::string& text) {
  if (text.size() <= kTailBytes) return;
  std::size_t cut = text.size() - kTailBytes;
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
  text.erase(0, cut);
}

// The tail as shown: inside emphasis, which Markdown only closes after a non-space.
std::string Trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

std::string DescribeFailure(const Error& e) {
  switch (e.code) {
    case Errc::timeout: return "The turn timed out: " + e.message;
    case Errc::cancelled: return "The turn was cancelled: " + e.message;
    case Errc::rejected: return "The Session refused the message: " + e.message;
    case Errc::connection_failed:
    case Errc::connection_lost: return "The connection to the Session was lost: " + e.message;
    default: return "The turn did not finish (" + std::string(ToString(e.code)) + "): " + e.message;
  }
}

}  // namespace

void Router::Impl::PublishGauges() {
  if (gauges_due) return;
  gauges_due = true;
  asio::post(strand, [self = shared_from_this()] {
    self->gauges_due = false;
    if (!self->torn_down) self->CountGauges();
  });
}

void Router::Impl::CountGauges() {
#ifndef NDEBUG
  std::size_t waiting = 0;
  std::size_t running = 0;
  for (const auto& [name, s] : sessions) {
    waiting += s->queue.size();
    running += s->running ? 1 : 0;
  }
  assert(waiting == waiting_total && running == running_total);
#endif
  std::lock_guard lock(stats_mu);
  stats.sessions = sessions.size();
  stats.turns_in_flight = running_total;
  stats.turns_waiting = waiting_total;
  stats.open_questions = questions.size();
}

void Router::Impl::SetRunning(SessionRun& s, std::shared_ptr<TurnRun> turn) {
  running_total = running_total - (s.running ? 1 : 0) + (turn ? 1 : 0);
  s.running = std::move(turn);
}

void Router::Impl::Enqueue(SessionRun& s, std::unique_ptr<Waiting> w, bool pump) {
  // Its place in line: behind the running turn, or behind the first of an idle Session's messages,
  // which is about to start.
  const std::size_t ahead = s.queue.size() + ((s.running || s.starting) ? 1 : 0);
  const std::string text = ahead == 0 && in_flight < options.max_in_flight
                               ? "\u23F3 Working on it\u2026"
                               : "\u23F3 Queued \u2014 position " + std::to_string(std::max<std::size_t>(ahead, 1));
  if (!w->receipt) {
    w->receipt = PostLive(w->where, text, s.name, w->message.message_id);
    w->receipt->inbox_id = w->inbox_id;
  }
  s.queue.push_back(std::move(w));
  ++waiting_total;
  if (!pump) return;
  Pump(s);
  UpdateReceipts(s);  // a receipt kept from before a restart shows its position now
  PublishGauges();
}

std::unique_ptr<Waiting> Router::Impl::TakeNext(SessionRun& s) {
  if (s.running || s.starting || s.queue.empty() || shutting_down) return nullptr;
  if (in_flight >= options.max_in_flight) {
    if (!s.in_admission) {
      s.in_admission = true;
      admission.push_back(s.name);
    }
    UpdateReceipts(s);
    return nullptr;
  }
  std::unique_ptr<Waiting> w = std::move(s.queue.front());
  s.queue.pop_front();
  --waiting_total;
  ++in_flight;
  s.starting = true;  // until LaunchTurn: a Session named twice in one slice of StartQueued takes one
  return w;
}

void Router::Impl::Pump(SessionRun& s) {
  if (auto w = TakeNext(s)) StartTurn(s, std::move(w));
}

std::size_t Router::Impl::StartSlice(const SessionRuns& runs, std::size_t from) {
  // A slice of Sessions per strand job: a burst's turn starts (a store write, Ensure, WaitReady each)
  // never keep the next burst's intake, and so its placeholders, waiting for more than one slice.
  constexpr std::size_t kSlice = 32;
  struct Start {
    Start(std::shared_ptr<SessionRun> s, std::unique_ptr<Waiting> w)
        : session(std::move(s)), waiting(std::move(w)), at_acceptance(!waiting->request_id.empty()) {
      if (!at_acceptance) return;
      request_id = std::move(waiting->request_id);
      waiting->request_id.clear();
      record = {};
    }
    std::shared_ptr<SessionRun> session;
    std::unique_ptr<Waiting> waiting;
    bool at_acceptance;  // recorded with its message's acceptance: nothing to write now
    std::string request_id;
    Status record = Fail(Errc::internal, "the turn was not recorded");
  };
  std::vector<Start> starts;
  starts.reserve(kSlice);
  std::size_t unrecorded = 0;
  std::size_t next = from;
  for (; next < runs.size() && starts.size() < kSlice; ++next) {
    const std::shared_ptr<SessionRun>& run = runs[next];
    if (run->gone) continue;  // deleted since its message was queued
    auto w = TakeNext(*run);
    if (!w) {
      UpdateReceipts(*run);
      continue;
    }
    Start& st = starts.emplace_back(run, std::move(w));
    if (!st.at_acceptance) {
      st.request_id = NewRequestId();
      ++unrecorded;
    }
  }
  // The slice's other turn starts are one commit, made before any of their prompts can go out.
  if (!starts.empty()) {
    Status committed;
    if (unrecorded > 0) {
      committed = Durably("starting turns", [&] {
        for (Start& st : starts) {
          if (!st.at_acceptance) st.record = RecordTurn(*st.session, *st.waiting, st.request_id);
        }
      });
    }
    for (Start& st : starts) {
      if (!committed && !st.at_acceptance && st.record) st.record = Fail(committed.error());
      LaunchTurn(*st.session, std::move(st.waiting), std::move(st.request_id), std::move(st.record));
      UpdateReceipts(*st.session);
    }
  }
  return next;
}

void Router::Impl::StartQueued(std::shared_ptr<const SessionRuns> runs) {
  // Nothing is queued before it (DrainIntake posts behind the lists when one is): its first slice now.
  start_lists.push_front(StartList{std::move(runs), 0});
  StartOldestSlice();
  PublishGauges();
}

void Router::Impl::PostStartQueued(std::shared_ptr<const SessionRuns> runs) {
  start_lists.push_back(StartList{std::move(runs), 0});
  PostStarts();
}

void Router::Impl::StartOldestSlice() {
  // One slice of the oldest list: its rest stays first, so slots go in the order messages came.
  StartList head = std::move(start_lists.front());
  start_lists.pop_front();
  head.from = StartSlice(*head.runs, head.from);
  if (head.from < head.runs->size()) start_lists.push_front(std::move(head));
  if (!start_lists.empty()) PostStarts();
}

void Router::Impl::PostStarts() {
  if (starts_posted) return;
  starts_posted = true;
  Run([](Impl& r) {
    r.starts_posted = false;
    if (r.start_lists.empty()) return;
    r.StartOldestSlice();
    r.PublishGauges();
  });
}

void Router::Impl::Admit() {
  while (in_flight < options.max_in_flight && !admission.empty()) {
    const std::string name = std::move(admission.front());
    admission.pop_front();
    auto it = sessions.find(name);
    if (it == sessions.end()) continue;
    it->second->in_admission = false;
    Pump(*it->second);
  }
}

void Router::Impl::UpdateReceipts(SessionRun& s) {
  std::size_t position = 0;
  for (const std::unique_ptr<Waiting>& w : s.queue) {
    ++position;
    std::string text = "\u23F3 Queued \u2014 position " + std::to_string(position);
    if (position == 1 && !s.running && s.in_admission) text += " (waiting for a free slot: many conversations are busy)";
    SetLive(w->receipt, text);
  }
}

std::string Router::Impl::PromptOf(const InboundMessage& m, const std::vector<ThreadHistoryMessage>& context) const {
  return routing::FormatPrompt(
      routing::PromptParts{m.platform, m.author_name, m.author_id, m.text, m.attachments_text, context});
}

std::string Router::Impl::NewRequestId() {
  // "rt-" and 16 hex digits (snprintf was a thousand instructions of every turn's start).
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "rt-0000000000000000";
  std::uint64_t bits = rng();
  for (std::size_t i = id.size(); i-- > 3; bits >>= 4) id[i] = kHex[bits & 0xF];
  return id;
}

Status Router::Impl::RecordTurn(const SessionRun& s, const Waiting& w, const std::string& request_id) {
  return store->MoveToTurns(w.inbox_id, request_id, std::chrono::system_clock::now(),
                            w.receipt ? w.receipt->message_id : std::string(), s.journal);
}

void Router::Impl::StartTurn(SessionRun& s, std::unique_ptr<Waiting> w) {
  if (!w->request_id.empty()) {  // recorded with its acceptance
    std::string id = std::move(w->request_id);
    return LaunchTurn(s, std::move(w), std::move(id), Status{});
  }
  std::string id = NewRequestId();
  // Durable before the prompt goes out: a restart then attaches to the turn instead of sending the
  // message a second time.
  Status record = Fail(Errc::internal, "the turn was not recorded");
  if (Status committed = Durably("starting a turn", [&] { record = RecordTurn(s, *w, id); }); !committed && record) {
    record = Fail(committed.error());
  }
  LaunchTurn(s, std::move(w), std::move(id), std::move(record));
}

void Router::Impl::LaunchTurn(SessionRun& s, std::unique_ptr<Waiting> w, std::string id, Status record) {
  s.starting = false;
  if (!record) {
    Log(LogLevel::warning, "message " + w->message.message_id + " could not start: " + record.error().ToString());
    SetLive(w->receipt, "\u26A0\uFE0F This message could not be sent to the agent: " +
                           EscapeMarkdown(record.error().message));
    --in_flight;
    Pump(s);
    Admit();
    return;
  }
  auto turn = std::make_shared<TurnRun>();
  turn->session = s.name;
  turn->run = s.weak_from_this();
  turn->request_id = std::move(id);
  turn->inbox_id = w->inbox_id;
  turn->where = std::move(w->where);
  turn->message = std::move(w->message);
  turn->route = w->route;
  turn->live = std::move(w->receipt);
  turn->started = std::chrono::steady_clock::now();
  SetRunning(s, turn);
  UpdateReceipts(s);
  ShowProgress(turn);
  StartTicking(turn);
  PublishGauges();
  Compose(turn);
}

void Router::Impl::Compose(const std::shared_ptr<TurnRun>& turn) {
  // `fetched`: the thread's earlier messages were read for this prompt (even when there were none, as
  // for a thread the message itself starts): once its turn completes, no later turn carries them.
  auto submit = [turn](Impl& r, std::vector<ThreadHistoryMessage> context, bool fetched) {
    if (turn->done) return;  // withdrawn while the history was fetched
    turn->with_context = fetched;
    turn->prompt = r.PromptOf(turn->message, context);
    turn->context = std::move(context);
    r.ReadyThenRun(turn, [turn, &r](Driver& d) { r.Submit(turn, d); });
  };
  // The first turn a platform thread gives a Session carries the thread's earlier messages.
  bool want_context = !turn->where.thread.empty() && caps.fetch_thread && options.thread_context_messages > 0;
  if (want_context) {
    auto bound = store->FindBinding(turn->where);
    want_context = bound && *bound && !(*bound)->context_sent;
  }
  if (!want_context) return submit(*this, {}, false);
  adapter.AsyncFetchThread(
      turn->where, turn->message.message_id, options.thread_context_messages,
      OnStrand<Result<std::vector<ThreadHistoryMessage>>>(
          [submit](Impl& r, Result<std::vector<ThreadHistoryMessage>> history) {
            if (!history) {
              r.Log(LogLevel::info, "the thread's earlier messages could not be fetched (the turn goes without them): " +
                                        history.error().ToString());
              return submit(r, {}, false);
            }
            submit(r, std::move(*history), true);
          }));
}

void Router::Impl::ReadyThenRun(const std::shared_ptr<TurnRun>& turn, std::function<void(Driver&)> run) {
  SessionRun* const session = RunOf(*turn);
  if (session == nullptr) return OnResult(turn, Fail(Errc::internal, "the Session's state is gone"));
  SessionRun& s = *session;
  // A turn waits for its Session: it may have been idle-suspended since the last one (and is woken
  // now, the thread told so), suspended by its owner, or gone. A ready one answers at once. Right
  // after a turn completed on it the look is skipped (ready_until; Submit falls back to it).
  if (s.ensured && s.driver && std::chrono::steady_clock::now() < s.ready_until) {
    turn->direct = true;
    return run(*s.driver);
  }
  turn->direct = false;
  auto wait = [turn, run = std::move(run)](Impl& r) {
    std::weak_ptr<Impl> weak = r.shared_from_this();
    ReadyProgress progress = [weak, turn](const SessionInfo&, std::string_view stage) {
      auto self = weak.lock();
      if (!self) return;
      std::string now(stage);
      self->Run([turn, now](Impl& r) {
        if (turn->done || turn->accepted) return;
        turn->stage = now == "resuming" ? TurnStage::waking : now == "ready" ? turn->stage : TurnStage::starting;
        r.ShowProgress(turn);
      });
    };
    const auto wait_started = std::chrono::steady_clock::now();
    r.backend.AsyncWaitReady(turn->session, wait_started + r.options.wait_ready_timeout,
                             std::move(progress), turn->cancel.Token(),
                             r.OnStrand<Result<ReadyTarget>>([turn, run, wait_started](Impl& r2, Result<ReadyTarget> target) {
                               turn->wake += std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - wait_started);
                               if (turn->done) return;
                               if (!target) {
                                 return r2.OnResult(turn, Fail(Errc::unavailable, "the Session " + turn->session +
                                                                                      " did not become ready: " +
                                                                                      target.error().ToString()));
                               }
                               auto& session = r2.SessionFor(turn->session, turn->route);
                               // A resumed Session may serve elsewhere now (a new Pod): a new connector.
                               if (!session.driver || target->resumed) {
                                 session.driver = std::make_shared<Driver>(r2.context, target->connector);
                               }
                               run(*session.driver);
                             }));
  };
  if (s.ensured) return wait(*this);
  backend.AsyncEnsure(turn->session, Route(turn->route).session,
                      OnStrand<Result<EnsureResult>>([turn, wait](Impl& r, Result<EnsureResult> ensured) {
                        if (turn->done) return;
                        if (!ensured) {
                          return r.OnResult(turn, Fail(ensured.error().code,
                                                       "the Session " + turn->session +
                                                           " could not be created: " + ensured.error().message));
                        }
                        r.SessionFor(turn->session, turn->route).ensured = true;
                        wait(r);
                      }));
}

TurnOptions Router::Impl::OptionsFor(const std::shared_ptr<TurnRun>& turn) {
  TurnOptions o;
  o.timeout = options.turn_timeout;
  o.cancel = turn->cancel.Token();
  o.request_id = turn->request_id;
  o.questions = QuestionPolicy::ask;
  // The router declines an unanswered question first, and says so in the thread; the driver's own
  // deadline is the backstop.
  o.answer_timeout = options.answer_timeout + std::chrono::seconds(30);
  std::weak_ptr<Impl> weak = shared_from_this();
  o.on_question = [weak, turn = turn](const Event& event, Responder responder) {
    if (auto self = weak.lock()) {
      self->Run([turn, event, responder](Impl& r) { r.OnQuestion(turn, event, responder); });
    } else {
      responder.Decline();
    }
  };
  o.on_event = [weak, turn = turn](const Event& event) {
    auto signal = TurnSignal::Of(event, turn->request_id);  // request_id never changes: safe to read here
    if (!signal) return;
    bool post = false;
    {
      std::lock_guard lock(turn->signals_mu);
      if (turn->signals.capacity() == 0) turn->signals.reserve(8);  // a turn's first events come together
      turn->signals.push_back(std::move(*signal));
      post = !std::exchange(turn->signals_posted, true);
    }
    // Queued before anything the driver hands over after this event (a question, the result), so
    // the strand sees them in the driver's order.
    if (!post) return;
    if (auto self = weak.lock()) self->Run([turn](Impl& r) { r.OnSignals(turn); });
  };
  // Its place in the journal is not written: the stored cursor (where the Session's journal stood
  // when the turn began) is enough for a re-attach to find it by its request id.
  o.on_accepted = [weak, turn = turn](const TurnRef& ref) {
    if (auto self = weak.lock()) {
      // A copy of its own, not const (as a capture of the const reference would be): moved, not copied.
      self->Run([turn, ref = TurnRef(ref)](Impl& r) mutable {
        turn->ref = std::move(ref);
        turn->accepted = true;
        // Queued until its turn.started (an idle runtime sends that right after): merged into another
        // client's queued turn, no user.message of its own says so.
        if (turn->stage == TurnStage::starting || turn->stage == TurnStage::waking) turn->stage = TurnStage::queued;
        r.ApplyPendingChange(turn);
      });
    }
  };
  o.on_shared = [weak, turn = turn] {
    if (auto self = weak.lock()) self->Run([turn](Impl&) { turn->shared = true; });
  };
  return o;
}

void Router::Impl::Submit(const std::shared_ptr<TurnRun>& turn, Driver& driver) {
  if (turn->done) return;  // ended (withdrawn) while it waited
  turn->submitted = true;
  driver.AsyncSubmitTurn(turn->prompt, OptionsFor(turn),
                         OnStrand<Result<TurnResult>>([turn = turn](Impl& r, Result<TurnResult> result) {
                           if (!result && result.error().code == Errc::connection_failed && turn->direct &&
                               !turn->done && r.shutting_down) {
                             // Nothing was sent, and no Session is woken now: the next start submits it.
                             return r.OnResult(turn, Fail(Errc::cancelled, "the router is shutting down"));
                           }
                           if (!result && result.error().code == Errc::connection_failed && turn->direct &&
                               !turn->done) {
                             // Sent straight to the runtime of the Session's last turn, which is not
                             // there any more (idle-suspended, stopped, moved): never connected, so
                             // nothing was sent. Wait for the Session (waking it) and send it then.
                             r.Log(LogLevel::debug, "turn " + turn->request_id + ": the Session " + turn->session +
                                                        " did not answer (" + result.error().message +
                                                        "); waiting for it");
                             r.ForgetReady(turn->session, /*drop_driver=*/true);
                             turn->submitted = false;  // nothing went: a change until it does is made in place
                             return r.ReadyThenRun(turn, [turn, &r](Driver& d) { r.Submit(turn, d); });
                           }
                           r.OnResult(turn, std::move(result));
                         }));
}

SessionRun* Router::Impl::RunOf(const TurnRun& turn) {
  if (auto run = turn.run.lock(); run && !run->gone) return run.get();  // `sessions` holds it
  auto it = sessions.find(turn.session);
  return it == sessions.end() ? nullptr : it->second.get();
}

void Router::Impl::ForgetReady(const std::string& session, bool drop_driver) {
  auto it = sessions.find(session);
  if (it == sessions.end()) return;
  it->second->ready_until = {};
  if (drop_driver) it->second->driver.reset();
}

void Router::Impl::Attach(const std::shared_ptr<TurnRun>& turn, Driver& driver) {
  driver.AsyncAttachTurn(turn->ref, OptionsFor(turn),
                         OnStrand<Result<TurnResult>>([turn = turn](Impl& r, Result<TurnResult> result) {
                           if (!result && result.error().code == Errc::not_found && !turn->done) {
                             // The runtime never got the message (the bot died before it was written):
                             // submitted now, under the same request id, as a turn's start composes
                             // it (a platform thread's first turn with the thread's earlier
                             // messages). Unless its stored message was damaged: then it failed.
                             if (turn->message_lost) {
                               result = Fail(Errc::not_found,
                                             "the bot restarted before this message reached the Session, and it "
                                             "could not be read back from the bot's state file; please send it again");
                             } else if (SessionRun* s = r.RunOf(*turn); s != nullptr && s->driver) {
                               r.Log(LogLevel::info, "turn " + turn->request_id + " was not in the Session " +
                                                         turn->session + ": submitting it again");
                               turn->attached = false;
                               return r.Compose(turn);
                             }
                           }
                           r.OnResult(turn, std::move(result));
                         }));
}

namespace routing {

std::optional<TurnSignal> TurnSignal::Of(const Event& e, std::string_view request_id) {
  // Most events change nothing shown: a signal is made (in place) only for those that do.
  std::optional<TurnSignal> s;
  const auto make = [&s](Kind kind) -> TurnSignal& {
    s.emplace().kind = kind;
    return *s;
  };
  if (e.Is(event_type::kAssistantDelta) || e.Is(event_type::kAssistantMessage)) {
    make(e.Is(event_type::kAssistantDelta) ? Kind::delta : Kind::message).text = e.text;
  } else if (e.Is(event_type::kTurnStarted)) {
    make(Kind::started);
  } else if (e.Is(event_type::kUserMessage)) {
    if (e.request_id != request_id) return s;  // another client's message
    TurnSignal& t = make(Kind::ours_queued);
    t.turn_id = e.turn_id;
    t.revision = e.revision;
  } else if (e.Is(event_type::kUserMessageUpdated)) {
    TurnSignal& t = make(Kind::updated);
    t.turn_id = e.turn_id;
    t.revision = e.revision;
  } else if (e.Is(event_type::kToolStarted)) {
    TurnSignal& t = make(Kind::tool_started);
    t.tool_name = e.tool_name;
    t.text = e.text.substr(0, std::min<std::size_t>(e.text.find('\n'), 80));
  } else if (e.Is(event_type::kToolCompleted)) {
    make(Kind::tool_completed);
  } else if (e.Is(event_type::kRuntimeStatus) && e.runtime && e.runtime->usage) {
    make(Kind::usage).usage = std::make_unique<Usage>(*e.runtime->usage);
  }
  return s;
}

}  // namespace routing

void Router::Impl::OnSignals(const std::shared_ptr<TurnRun>& turn) {
  std::vector<TurnSignal> batch;
  {
    std::lock_guard lock(turn->signals_mu);
    batch.swap(turn->signals);
    turn->signals_posted = false;
  }
  bool changed = false;
  for (TurnSignal& signal : batch) changed = OnEvent(turn, signal) || changed;
  if (changed) ShowProgress(turn);
  // Handed back, empty, for the turn's next events: its room is not allocated again.
  batch.clear();
  std::lock_guard lock(turn->signals_mu);
  if (turn->signals.empty()) turn->signals.swap(batch);
}

bool Router::Impl::OnEvent(const std::shared_ptr<TurnRun>& turn, TurnSignal& e) {
  if (turn->done) return false;
  switch (e.kind) {
    case TurnSignal::Kind::started: turn->stage = TurnStage::running; break;
    case TurnSignal::Kind::ours_queued:
      turn->stage = TurnStage::queued;  // accepted; waiting behind another client's turn until turn.started
      // The turn's id and revision, for an edit or removal that comes before on_accepted lands.
      if (turn->ref.turn_id.empty()) {
        turn->ref.turn_id = e.turn_id;
        turn->ref.revision = e.revision;
      }
      ApplyPendingChange(turn);
      break;
    case TurnSignal::Kind::updated:
      // Edited (by us or by another client): a later edit or removal must name this revision.
      if (!turn->ref.turn_id.empty() && e.turn_id == turn->ref.turn_id) turn->ref.revision = e.revision;
      return false;
    case TurnSignal::Kind::tool_started:
      turn->tool = e.tool_name.empty() ? std::string("a tool") : e.tool_name;
      if (!e.text.empty()) turn->tool += ": " + e.text;
      break;
    case TurnSignal::Kind::tool_completed: turn->tool.clear(); break;
    case TurnSignal::Kind::delta:
      turn->tail += e.text;
      KeepTail(turn->tail);
      break;
    case TurnSignal::Kind::message:
      turn->tail = std::move(e.text);  // the signal is this call's to take from
      KeepTail(turn->tail);
      break;
    case TurnSignal::Kind::usage:
      if (e.usage) turn->usage = std::move(e.usage);
      return false;
  }
  return true;
}

std::string Router::Impl::ProgressText(const TurnRun& turn) const {
  const std::string elapsed = Seconds(std::chrono::steady_clock::now() - turn.started);
  if (turn.stage == TurnStage::waking) return "\u23F3 Waking the Session\u2026 (" + elapsed + ")";
  if (turn.stage == TurnStage::starting) return "\u23F3 Starting\u2026 (" + elapsed + ")";
  if (turn.stage == TurnStage::queued) return "\u23F3 Queued in the Session behind another turn (" + elapsed + ")";
  std::string text = "\u2699\uFE0F Working\u2026 " + elapsed;
  if (!turn.tool.empty()) text += " \u00B7 running " + EscapeMarkdown(turn.tool);
  if (!turn.open_question.empty()) text += " \u00B7 waiting for an answer to its question";
  if (const std::string tail = Trimmed(turn.tail); !tail.empty()) text += "\n\n_\u2026" + EscapeMarkdown(tail) + "_";
  return text;
}

void Router::Impl::ShowProgress(const std::shared_ptr<TurnRun>& turn) {
  if (turn->done) return;
  // Made when the edit goes out (the live message is the turn's: it goes with it, or is retired first).
  // The maker is set once per live message, not at every event.
  if (turn->live && !turn->live->progress) {
    turn->live->progress = [this, weak = std::weak_ptr<TurnRun>(turn)] {
      const auto t = weak.lock();
      return t && !t->done ? ProgressText(*t) : std::string();
    };
  }
  MarkStale(turn->live);
}

void Router::Impl::Typing(const TurnRun& turn) {
  if (!caps.typing) return;
  adapter.AsyncTyping(turn.where, OnStrand<Status>([](Impl& r, Status st) {
    if (!st) r.Log(LogLevel::debug, "a typing indicator failed: " + st.error().ToString());
  }));
}

void Router::Impl::StartTicking(const std::shared_ptr<TurnRun>& turn) {
  Typing(*turn);  // a platform's "typing..." lasts a few seconds: renewed with every tick
  if (turn->tick_slot != TurnRun::kNotTicking) return;
  turn->next_tick = std::chrono::steady_clock::now() + kTickEvery;
  turn->tick_slot = ticking.size();
  ticking.push_back(turn);
  ArmTicker();
}

void Router::Impl::StopTicking(TurnRun& turn) {
  if (turn.tick_slot == TurnRun::kNotTicking) return;
  // The last one takes its place: no turn moves but that one, and nothing is allocated.
  const std::size_t slot = turn.tick_slot;
  turn.tick_slot = TurnRun::kNotTicking;
  if (slot + 1 != ticking.size()) {
    ticking[slot] = std::move(ticking.back());
    ticking[slot]->tick_slot = slot;
  }
  ticking.pop_back();
}

void Router::Impl::ArmTicker() {
  if (ticker_armed || ticking.empty() || torn_down) return;
  if (!ticker) ticker = std::make_unique<asio::steady_timer>(context.io());
  ticker_armed = true;
  ticker->expires_after(kTickerPeriod);
  ticker->async_wait(asio::bind_executor(strand, [self = shared_from_this()](const asio::error_code& ec) {
    self->ticker_armed = false;
    if (ec || self->torn_down) return;
    self->TickAll();
    self->ArmTicker();  // not once the last turn has ended
  }));
}

void Router::Impl::TickAll() {
  const auto now = std::chrono::steady_clock::now();
  // By index, each due turn held while it is ticked: a tick ends no turn (OnResult is a job of its
  // own), and should one ever leave `ticking` meanwhile, the walk only misses a tick.
  for (std::size_t i = 0; i < ticking.size(); ++i) {
    if (ticking[i]->done || now < ticking[i]->next_tick) continue;
    const std::shared_ptr<TurnRun> turn = ticking[i];
    turn->next_tick = now + kTickEvery;
    Typing(*turn);
    ShowProgress(turn);
  }
}

void Router::Impl::OnResult(const std::shared_ptr<TurnRun>& turn, Result<TurnResult> result) {
  if (turn->done) return;
  turn->done = true;
  StopTicking(*turn);
  SessionRun* const run = RunOf(*turn);
  if (!result && shutting_down && result.error().code == Errc::cancelled) {
    // Detached by the shutdown: the turn goes on in its Session and the next start re-attaches to it
    // (its record stays in the store).
    if (run && run->running == turn) SetRunning(*run, nullptr);
    --in_flight;
    return;
  }
  if (options.on_turn_finished) {
    RouterTurnOutcome outcome;
    outcome.session = turn->session;
    outcome.status = result ? std::string(ToString(result->status)) : std::string(ToString(result.error().code));
    outcome.duration =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - turn->started);
    outcome.wake = turn->wake;
    options.on_turn_finished(outcome);
  }
  if (run && result && !result->journal_id.empty()) {
    run->journal = {result->last_event_id, result->journal_id, {}, 0};
  }
  if (run && result && run->driver) {
    // Its runtime just served a turn: the next one within kReadyReuse (and well inside the backend's
    // idle window) skips the WaitReady.
    run->ready_until = std::chrono::steady_clock::now() +
                       std::min<std::chrono::steady_clock::duration>(kReadyReuse, backend.IdleGrace() / 2);
  }
  std::string reply;
  if (!result) {
    const Errc code = result.error().code;
    if (run && (code == Errc::connection_failed || code == Errc::connection_lost || code == Errc::unavailable ||
                code == Errc::not_found)) {
      run->driver.reset();  // the next turn waits for the Session again
      run->ready_until = {};
      run->ensured = run->ensured && code != Errc::not_found;
    }
    reply = "\u26A0\uFE0F " + EscapeMarkdown(DescribeFailure(result.error()));
  } else {
    TurnResult& t = *result;
    switch (t.status) {
      case TurnStatus::completed:
        // The result is this call's own: its text becomes the reply, not copied.
        reply = t.text.empty() ? std::string("_(The agent finished without a reply.)_") : std::move(t.text);
        break;
      case TurnStatus::failed:
        reply = "\u26A0\uFE0F The turn failed: " + EscapeMarkdown(t.error_message.empty() ? "no reason given" : t.error_message);
        if (!t.text.empty()) reply += "\n\n" + t.text;
        break;
      case TurnStatus::interrupted:
        reply = "\u23F9 The turn was interrupted" +
                (t.error_message.empty() ? std::string(".") : ": " + EscapeMarkdown(t.error_message));
        if (!t.text.empty()) reply += "\n\n" + t.text;
        break;
      case TurnStatus::removed:
        reply = turn->change && !turn->change->withdrawn.empty() ? turn->change->withdrawn
                                                                 : std::string("The message was withdrawn before it ran.");
        break;
    }
    if (t.status == TurnStatus::completed && turn->with_context) {
      WriteBehind([&] {
        if (auto st = store->SetContextSent(turn->where); !st) Log(LogLevel::warning, st.error().ToString());
      });
    }
  }
  if (options.show_usage && turn->usage && turn->usage->total_tokens > 0) {
    reply += "\n\n_tokens: " + std::to_string(turn->usage->input_tokens) + " in \u00B7 " +
             std::to_string(turn->usage->output_tokens) + " out_";
  }
  EndTurn(turn, std::move(reply));
}

void Router::Impl::EndTurn(const std::shared_ptr<TurnRun>& turn, std::string reply_markdown) {
  ForgetQuestionsOf(*turn);
  // Made once and handed on by pointer: a reply's entry (its thread, parts...) is not moved string by
  // string through the handlers below.
  auto entry = std::make_shared<routing::OutboxEntry>();
  entry->thread = turn->where;
  entry->session = turn->session;
  entry->request_id = turn->request_id;
  entry->parts = RenderParts(reply_markdown);
  auto finish = [turn = turn](Impl& r, std::shared_ptr<routing::OutboxEntry> entry) {
    entry->placeholder_id = turn->live ? turn->live->message_id : std::string();
    // One part into its placeholder: an edit, which a restart may repeat. Anything else is stored first.
    if (entry->parts.size() == 1 && !entry->placeholder_id.empty()) return r.EditReplyIn(turn, std::move(entry));
    r.StoreReply(turn, std::move(entry), 0, {});
  };
  if (turn->live) {
    WhenIdle(turn->live, [self = shared_from_this(), finish = std::move(finish), entry = std::move(entry)]() mutable {
      finish(*self, std::move(entry));
    });
  } else {
    finish(*this, std::move(entry));
  }
  Bump(&RouterStats::turns_completed);
  SessionRun* const run = RunOf(*turn);
  if (run && run->running == turn) SetRunning(*run, nullptr);
  --in_flight;
  if (run) Pump(*run);
  Admit();
  PublishGauges();
}

void Router::Impl::StoreReply(const std::shared_ptr<TurnRun>& turn, std::shared_ptr<routing::OutboxEntry> e,
                              int edit_attempts, std::chrono::milliseconds delay) {
  auto stored = std::make_shared<Result<std::int64_t>>(Fail(Errc::internal, "the reply was not stored"));
  // Durable before the reply goes out (with the pass's commit): a restart then delivers it from the
  // outbox, once.
  DurablyInPass(
      "storing a reply",
      [&] {
        *stored = store->CompleteTurn(*e);
        // Claimed at once: the outbox pass (RetryOutbox) reads through this connection, so it sees
        // the row before its commit, and must not send it too.
        if (*stored) delivering.insert(**stored);
      },
      [turn = turn, e, stored, edit_attempts, delay](Impl& r, Status committed) {
        r.SendStored(turn, std::move(*e), *stored, committed, edit_attempts, delay);
      });
}

void Router::Impl::SendStored(const std::shared_ptr<TurnRun>& turn, routing::OutboxEntry e, Result<std::int64_t> id,
                              const Status& committed, int edit_attempts, std::chrono::milliseconds delay) {
  if (id) delivering.erase(*id);  // claimed when it was written; Deliver claims it again
  if (!committed && id) {
    // The pass's commit failed and took the reply's storing back with it (the turn's record is there
    // again, the outbox row gone): stored once more, on its own.
    Result<std::int64_t> again = Fail(committed.error());
    const Status st = Durably("storing a reply again", [&] { again = store->CompleteTurn(e); });
    id = st ? std::move(again) : Result<std::int64_t>(Fail(st.error()));
  }
  if (!id && id.error().code == Errc::not_found) {
    // The turn's record is gone: its reply was stored (and queued) already. Another copy would post
    // the reply twice.
    Log(LogLevel::error, "turn " + turn->request_id + " ended again after its reply was stored; not sending it twice");
    return;
  }
  if (!id) {
    // Not stored: it goes out now. Its turn's record stays until it is in (DeliverPart finishes it), so
    // a restart before then delivers it again rather than losing it.
    Log(LogLevel::error, "the reply of turn " + turn->request_id + " could not be stored (it goes out now): " +
                             id.error().ToString());
    unstored_turns.insert(turn->request_id);
  } else {
    e.id = *id;
  }
  Deliver(std::move(e), edit_attempts, delay);
}

}  // namespace sessionturn
