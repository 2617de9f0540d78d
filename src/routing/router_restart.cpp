// Restarts: Start() picks up what the last run left in the store (replies to deliver, turns in flight
// to re-attach with since + journalId, accepted messages that had not run, open questions), and
// Shutdown() tells each busy thread once that the bot is restarting and leaves the turns running in
// their Sessions, so the next start delivers their replies.
#include <set>

#include "routing/router_impl.hpp"

namespace sessionturn {

using routing::TurnRun;

namespace {

// How often a shutdown looks whether the replies on their way have landed.
constexpr std::chrono::milliseconds kShutdownDeliveryPoll{20};

std::size_t RouteIndexOf(const routing::RouteMatcher& matcher, const InboundMessage& m) {
  const routing::RouteMatch match = matcher.Match(m);
  return match.route != nullptr ? match.index : 0;
}

}  // namespace

void Router::Impl::ResumeAnswers(routing::QuestionRun& q) {
  routing::OpenQuestion& o = q.stored;
  bool whole = o.answered < o.questions.size();
  for (std::size_t i = 0; whole && i < o.answered; ++i) whole = !o.questions[i].secret && o.answers.count(o.questions[i].id);
  if (whole) {
    q.answers = o.answers;
    return;
  }
  // A secret answer was given (never stored), or the row makes no sense: from the first question.
  if (o.answered == 0) return;
  o.answered = 0;
  o.answers.clear();
  if (auto st = store->SetQuestionProgress(o); !st) Log(LogLevel::warning, st.error().ToString());
  Note(o.thread, "The bot restarted while the agent's questions were being answered. A secret answer is never "
                 "stored, so please answer them again, from question 1.", o.session);
}

void Router::Impl::Resume() {
  RetryOutbox(/*all=*/true);

  std::vector<routing::DamagedRow> damaged;
  auto questions_stored = store->ListQuestions(&damaged);
  for (const auto& d : damaged) {
    // The re-attached turn asks it again (no question stored for its request): it is posted anew.
    Log(LogLevel::error, d.error.ToString() + "; it is removed, and asked again when its turn asks");
    if (auto gone = store->RemoveQuestion(d.key); !gone) Log(LogLevel::warning, gone.error().ToString());
  }
  damaged.clear();
  if (!questions_stored) Log(LogLevel::error, "reading the open questions failed: " + questions_stored.error().ToString());
  for (auto& stored : questions_stored ? *questions_stored : std::vector<routing::OpenQuestion>{}) {
    auto q = std::make_shared<routing::QuestionRun>();
    q->stored = std::move(stored);
    ResumeAnswers(*q);
    // No responder until the re-attached turn asks again (its replay shows the request still open).
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(q->stored.deadline -
                                                                            std::chrono::system_clock::now());
    q->timeout = std::make_unique<asio::steady_timer>(context.io(), std::max(left, std::chrono::milliseconds(0)));
    q->timeout->async_wait(asio::bind_executor(strand, [self = shared_from_this(), id = q->stored.id](
                                                           const asio::error_code& ec) {
      if (!ec && !self->torn_down) self->ExpireQuestion(id);
    }));
    questions[q->stored.id] = q;
  }

  auto turns = store->ListTurns(&damaged);
  for (const auto& d : damaged) {
    Log(LogLevel::error, d.error.ToString() + "; re-attached all the same, so that its reply is delivered");
  }
  damaged.clear();
  if (!turns) Log(LogLevel::error, "reading the turns in flight failed: " + turns.error().ToString());
  for (auto& rec : turns ? *turns : std::vector<routing::TurnRecord>{}) {
    const std::size_t route = RouteIndexOf(matcher, rec.message);
    routing::SessionRun& s = SessionFor(rec.session, route);
    auto turn = std::make_shared<TurnRun>();
    turn->session = rec.session;
    turn->run = s.weak_from_this();
    turn->request_id = rec.request_id;
    turn->inbox_id = rec.inbox_id;
    turn->where = rec.thread;
    turn->message = std::move(rec.message);
    turn->route = route;
    turn->started = std::chrono::steady_clock::now();
    turn->attached = true;
    turn->message_lost = rec.message_lost;
    turn->accepted = !rec.cursor.turn_id.empty();
    turn->ref = TurnRef{rec.request_id, rec.cursor.turn_id, rec.cursor.last_event_id, rec.cursor.journal_id,
                        rec.cursor.revision};
    turn->prompt = PromptOf(turn->message, {});
    if (rec.placeholder_id.empty()) {
      // Its placeholder never landed (or was not recorded before the crash): a new one, recorded.
      turn->live = PostLive(turn->where, "\u23F3 Picking this up again after a restart\u2026", turn->session,
                            turn->message.message_id);
    } else {
      turn->live = std::make_shared<routing::LiveMessage>();
      turn->live->where = turn->where;
      turn->live->message_id = rec.placeholder_id;
    }
    turn->live->inbox_id = turn->inbox_id;
    SetRunning(s, turn);
    ++in_flight;
    Log(LogLevel::info, "re-attaching to turn " + turn->request_id + " of Session " + turn->session);
    ShowProgress(turn);
    StartTicking(turn);
    ReadyThenRun(turn, [turn, this](Driver& d) { Attach(turn, d); });
  }

  auto inbox = store->ListInbox(&damaged);
  if (!inbox) Log(LogLevel::error, "reading the inbox failed: " + inbox.error().ToString());
  for (const auto& d : damaged) {
    Log(LogLevel::error, d.error.ToString() + "; it is removed and its thread told");
    if (auto gone = store->RemoveInbox(d.id); !gone) Log(LogLevel::warning, gone.error().ToString());
    Note(d.thread, "\u26A0\uFE0F A message sent here before the bot restarted could not be read back from the "
                   "bot's state file, so it will not run. Please send it again.", d.session);
  }
  for (auto& entry : inbox ? *inbox : std::vector<routing::InboxEntry>{}) {
    if (entry.deleted) {
      if (auto st = store->RemoveInbox(entry.id); !st) Log(LogLevel::warning, st.error().ToString());
      continue;
    }
    auto w = std::make_unique<routing::Waiting>();
    w->inbox_id = entry.id;
    w->where = entry.thread;
    w->message = std::move(entry.message);
    if (entry.edited_text) w->message.text = *entry.edited_text;
    w->route = RouteIndexOf(matcher, w->message);
    if (!entry.receipt_id.empty()) {
      // Its receipt is in the thread already: edited from here on, not posted again.
      w->receipt = std::make_shared<routing::LiveMessage>();
      w->receipt->where = w->where;
      w->receipt->message_id = entry.receipt_id;
      w->receipt->inbox_id = entry.id;
    }
    const std::size_t route = w->route;  // read before `w` moves: the arguments' order is unspecified
    Enqueue(SessionFor(entry.session, route), std::move(w));
  }
  PublishGauges();
}

void Router::Impl::BeginShutdown(std::function<void()> done) {
  if (shutting_down) return done();
  shutting_down = true;
  // One notice per thread: the running turn's, else the queued one's.
  std::map<std::string, std::pair<ThreadRef, bool>> threads;  // key -> (where, a turn runs there)
  for (auto& [name, s] : sessions) {
    if (s->running) {
      const auto& w = s->running->where;
      threads[ChatKey(w) + '\x1f' + w.thread] = {w, true};
    }
    for (const auto& w : s->queue) {
      auto& slot = threads[ChatKey(w->where) + '\x1f' + w->where.thread];
      if (slot.first.chat.empty()) slot = {w->where, false};
    }
  }
  struct Notices {
    std::deque<std::pair<ThreadRef, bool>> todo;
    std::size_t in_flight = 0;
    bool finished = false;
    std::function<void()> done;
  };
  auto n = std::make_shared<Notices>();
  for (auto& [key, t] : threads) n->todo.push_back(t);
  n->done = std::move(done);
  auto finish = [n](Impl& r) {
    if (n->finished) return;
    n->finished = true;
    r.finish_shutdown = nullptr;
    // The turns keep running in their Sessions: nothing is interrupted or withdrawn.
    for (auto& [name, s] : r.sessions) {
      if (s->driver) s->driver->DetachTurns();
    }
    r.Log(LogLevel::info, "shut down; the next start re-attaches to the turns still running");
    n->done();
  };
  // Then the replies on their way finish (within the budget): a part whose post lands once the Router
  // is gone would not be recorded as delivered, and the next start would post it again. Looked at
  // every kShutdownDeliveryPoll; each look holds the next.
  auto after_deliveries = std::make_shared<std::function<void(Impl&)>>();
  std::weak_ptr<std::function<void(Impl&)>> weak_after = after_deliveries;
  *after_deliveries = [n, finish, weak_after](Impl& r) {
    if (n->finished) return;
    if (r.delivering.empty()) return finish(r);
    if (auto again = weak_after.lock()) r.After(kShutdownDeliveryPoll, [again](Impl& r2) { (*again)(r2); });
  };
  // The posts in flight hold the pump; it holds itself only weakly, so it goes with the last of them.
  auto pump = std::make_shared<std::function<void(Impl&)>>();
  std::weak_ptr<std::function<void(Impl&)>> weak_pump = pump;
  *pump = [n, after_deliveries, weak_pump](Impl& r) {
    auto self = weak_pump.lock();
    while (!n->finished && n->in_flight < std::max<std::size_t>(1, r.options.shutdown_notice_concurrency) &&
           !n->todo.empty()) {
      auto [where, running] = n->todo.front();
      n->todo.pop_front();
      ++n->in_flight;
      const std::string text = running ? "\u23F8 The bot is restarting. The agent keeps working; its reply will "
                                         "come here after the restart."
                                       : "\u23F8 The bot is restarting. Your message is kept and will run after the "
                                         "restart.";
      r.adapter.AsyncPost(where, OutboundMessage{r.Render(text), {}, {}},
                          r.OnStrand<Result<std::string>>([n, self](Impl& r2, Result<std::string> id) {
                            --n->in_flight;
                            if (!id) r2.Log(LogLevel::warning, "a shutdown notice failed: " + id.error().ToString());
                            (*self)(r2);
                          }));
    }
    if (n->todo.empty() && n->in_flight == 0) (*after_deliveries)(r);
  };
  finish_shutdown = [this, finish] { finish(*this); };
  After(options.shutdown_budget, [finish](Impl& r) { finish(r); });
  (*pump)(*this);
}

}  // namespace sessionturn
