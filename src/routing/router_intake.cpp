// A delivered message: validated, matched to a route, routed to its Session (reply-to, platform
// thread, the chat's current Session), deduped and accepted into the store before the adapter
// acknowledges it; commands and answers are taken out before any of it reaches a Session.
#include <array>

#include "routing/answers.hpp"
#include "routing/commands.hpp"
#include "routing/join_key.hpp"
#include "routing/router_impl.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn {

using routing::DedupeKey;
using routing::DedupeKind;
using routing::JoinKey;
using routing::TurnStage;

namespace {

std::array<DedupeKey, 2> KeysOf(const InboundMessage& m) {
  return {DedupeKey{DedupeKind::message, JoinKey({m.platform, m.workspace, m.chat, m.message_id})},
          DedupeKey{DedupeKind::event, m.event_id.empty() ? std::string() : JoinKey({m.platform, m.event_id})}};
}

std::span<const DedupeKey> Present(const std::array<DedupeKey, 2>& keys) {
  return std::span<const DedupeKey>(keys.data(), keys[1].key.empty() ? 1 : 2);
}

}  // namespace

std::string Router::Impl::Render(std::string_view markdown) const {
  // The router's own short texts repeat ("Working on it…", "Queued — position 2"): rendered once.
  constexpr std::size_t kCachedBelow = 160;
  constexpr std::size_t kCacheEntries = 512;
  const bool cacheable = markdown.size() < kCachedBelow;
  if (cacheable) {
    if (auto hit = rendered.find(markdown); hit != rendered.end()) return hit->second;
  }
  std::string text = RenderOne(markdown);
  if (cacheable) {
    if (rendered.size() >= kCacheEntries) rendered.clear();
    rendered.emplace(std::string(markdown), text);
  }
  return text;
}

std::string Router::Impl::RenderOne(std::string_view markdown) const {
  RenderOptions o;
  o.dialect = caps.dialect;
  o.max_length = caps.max_length;
  o.unit = caps.unit;
  o.soft_length = caps.soft_length;
  auto parts = RenderReply(markdown, o);
  if (!parts || parts->empty()) return std::string(markdown.substr(0, caps.max_length / 4));
  return std::move(parts->front().text);
}

void Router::Impl::Note(const ThreadRef& where, std::string_view markdown, const std::string& session,
                        const std::string& reply_to) {
  OutboundMessage out{Render(markdown), {}, reply_to};
  adapter.AsyncPost(where, std::move(out),
                    OnStrand<Result<std::string>>([where, session](Impl& r, Result<std::string> id) {
                      if (!id) {
                        r.Log(LogLevel::warning, "posting a note in chat " + where.chat + " failed: " + id.error().ToString());
                        return;
                      }
                      if (session.empty()) return;
                      if (auto st = r.store->IndexBotMessage({routing::ChatRef::Of(where), *id, session,
                                                              routing::BotMessageKind::note});
                          !st) {
                        r.Log(LogLevel::warning, st.error().ToString());
                      }
                    }));
}

void Router::Impl::DrainIntake() {
  // Not before Start has resumed what the store holds from before: a message accepted first would be
  // found there as work of a previous run, and run twice. Start drains what waits.
  if (!started) return;
  std::deque<PendingMessage> pending;
  {
    std::lock_guard lock(intake_mu);
    pending.swap(intake);
    intake_posted = false;
  }
  if (pending.empty()) return;
  // The messages in bursts, each committed before the next is taken in: a burst ends before a
  // message whose effects go out at once (a command, an answer, a refusal), which is taken in on its
  // own. So nothing that went out to the chat or into memory can be rolled back with a burst's commit
  // (to run a second time when the platform delivers it again), and each message finds the chat as
  // the messages before it left it (a `new` switches the next message's Session).
  for (std::size_t next = 0; next < pending.size();) {
    Burst burst(pending, next);
    const Status taken = TakeBurst(burst);
    next += burst.size();
    QueueBurst(burst, /*more=*/taken && next < pending.size());
    if (taken || next == pending.size()) continue;
    // A failed commit, or a failed message taken in alone, refuses the rest unseen: the platform
    // delivers them again, in their order (a command's redelivery never lands behind the messages
    // that came after it).
    Log(LogLevel::warning, std::to_string(pending.size() - next) + " message(s) handed over after it were refused "
                           "too, unseen, for the platform to deliver again in their order");
    for (; next < pending.size(); ++next) {
      if (pending[next].done) {
        pending[next].done(Fail(taken.error().code, "not taken in, so that the platform delivers it again in its "
                                                    "order: a message before it failed: " + taken.error().message));
      }
    }
  }
}

Status Router::Impl::TakeBurst(Burst& burst) {
  // What was written behind goes first, on its own: a message's acceptance (and a command's or an
  // answer's dedupe key, whose effects go out at once) never waits for, or fails with, that commit.
  ClosePass();
  // One transaction for the burst; a single message, or one taken in alone, needs none of its own
  // beyond the store's. A burst of several ends before a message that must be taken in alone, batch
  // or not (without one, what came before it must still be queued before it runs).
  const bool several = burst.left() > 1 && !burst.at(0).alone && !shutting_down;
  bool batched = false;
  if (several) {
    if (auto st = store->BeginBatch("accepting messages"); st) {
      batched = true;
    } else {
      Log(LogLevel::warning, "accepting messages one by one: " + st.error().ToString());
    }
  }
  Status failed;  // the message taken in alone (never in a batch)
  burst_accepted = 0;
  burst.results.reserve(burst.left());
  burst.accepted.reserve(burst.left());
  burst.runs.reserve(burst.left());
  while (burst.left() > 0) {
    const std::size_t i = burst.size();
    PendingMessage& p = burst.at(i);
    burst.accepted.emplace_back();
    burst.runs.emplace_back();
    if (p.message.kind != MessageKind::new_message && !shutting_down) {
      // Edits and deletions are taken in last, once the burst's new messages are queued: one of a
      // message accepted in this burst then finds it (a platform redelivering after an outage hands
      // both over at once).
      burst.changes.push_back(i);
      burst.results.push_back(Disposition::ignored);  // decided in QueueBurst
    } else {
      const bool alone = p.alone;
      Result<Disposition> result =
          Intake(std::move(p.message), &burst.accepted[i], &burst.runs[i], several ? &p.alone : nullptr);
      if (p.alone && !alone) {
        // Its effects go out at once: it is taken in on its own, once the batch is committed.
        burst.accepted.pop_back();
        burst.runs.pop_back();
        break;
      }
      burst.results.push_back(std::move(result));
    }
    if (p.alone) {
      // The rest in a batch of their own; none of them when this one failed.
      if (const auto& r = burst.results.back(); !r) failed = Fail(r.error());
      break;
    }
  }
  const std::size_t n = burst.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (burst.accepted[i] && !burst.runs[i]->gone && burst.runs[i]->accepting > 0) --burst.runs[i]->accepting;
  }
  if (!batched) return failed;
  // The placeholders wait for this commit; a checkpoint due now waits for the next one.
  if (auto st = store->CommitBatch(routing::RouterStore::Checkpoint::later); !st) {
    // Nothing of the burst is in the store: nothing is acknowledged, the platform delivers it again.
    Log(LogLevel::error, "accepting " + std::to_string(n) + " message(s) failed: " + st.error().ToString());
    for (std::size_t i = 0; i < n; ++i) {
      burst.accepted[i].reset();
      burst.results[i] = Fail(st.error());
    }
    burst.changes.clear();  // failed with the rest
    return st;
  }
  return {};
}

void Router::Impl::QueueBurst(Burst& burst, bool more) {
  const std::size_t n = burst.size();
  for (std::size_t i = 0, c = 0; i < n; ++i) {
    if (c < burst.changes.size() && burst.changes[c] == i) {
      ++c;  // answered once taken in, below
      continue;
    }
    if (burst.accepted[i]) Bump(&RouterStats::messages_accepted);
    if (burst.at(i).done) burst.at(i).done(std::move(burst.results[i]));
  }
  // Every placeholder first, then the turns: a turn's start (its store write, Ensure, WaitReady)
  // never holds up the next message's placeholder. When more messages wait by then (the rest of this
  // intake, or a burst handed over while this one was taken in), the turns start behind their intake:
  // once (their DrainIntake is queued already), so a steady stream of messages cannot hold them back.
  auto touched = std::make_shared<std::vector<std::shared_ptr<routing::SessionRun>>>();
  for (std::size_t i = 0; i < n; ++i) {
    if (!burst.accepted[i] || burst.runs[i]->gone) continue;
    Enqueue(*burst.runs[i], std::move(burst.accepted[i]), /*pump=*/false);
    touched->push_back(std::move(burst.runs[i]));
  }
  for (std::size_t i : burst.changes) {
    burst.results[i] = OnEdited(burst.at(i).message);
    if (burst.at(i).done) burst.at(i).done(std::move(burst.results[i]));
  }
  if (!touched->empty()) {
    // Behind turn starts posted before (a deferred burst's, or the rest of a big one): slots are
    // taken in the order the messages came.
    if (more || IntakeWaiting() || !start_lists.empty()) {
      PostStartQueued(std::move(touched));
    } else {
      StartQueued(std::move(touched));
    }
  }
  PublishGauges();
}

bool Router::Impl::IntakeWaiting() {
  std::lock_guard lock(intake_mu);
  return !intake.empty();
}

Status Router::Impl::CheckInbound(const InboundMessage& m) {
  if (m.platform.empty() || m.chat.empty() || m.message_id.empty()) {
    return Fail(Errc::invalid_argument, "an InboundMessage needs a platform, a chat and a message id (got '" +
                                            m.platform + "', '" + m.chat + "', '" + m.message_id + "')");
  }
  return {};
}

Result<Disposition> Router::Impl::Intake(InboundMessage&& m, std::unique_ptr<routing::Waiting>* accepted,
                                         std::shared_ptr<routing::SessionRun>* run, bool* alone) {
  if (shutting_down) {
    return Fail(Errc::unavailable, "the router is shutting down; the platform should deliver the message again");
  }
  // CheckInbound ran in HandleMessage, the only way in.
  // Edits and deletions never come here: QueueBurst takes them in (OnEdited).
  const routing::RouteMatch match = matcher.Match(m);
  if (match.route == nullptr) {
    if (!match.warning.empty()) Log(LogLevel::warning, match.warning);
    Log(LogLevel::debug, "message " + m.message_id + " in chat " + m.chat + " matched no route: " + match.reason);
    return Disposition::ignored;
  }
  Result<Disposition> out = Take(m, match.index, accepted, run, alone);
  // Once, by the call that takes it in (not by one that sends it back to be taken in alone).
  if (!match.warning.empty() && (alone == nullptr || !*alone)) Log(LogLevel::warning, match.warning);
  return out;
}

Result<Disposition> Router::Impl::Take(InboundMessage& m, std::size_t route,
                                       std::unique_ptr<routing::Waiting>* accepted,
                                       std::shared_ptr<routing::SessionRun>* run, bool* alone) {
  const auto keys = KeysOf(m);
  // Commands, answers and refusals never reach a Session; a redelivered one must not run twice. Their
  // effects go out at once, so none is taken in inside a batch that holds other messages, whose
  // commit could still fail (and the platform deliver it again, to run a second time): that batch
  // sends it back (`alone`), to be taken in on its own once the batch is committed.
  auto seen = [&] { return store->SeenOrRemember(Present(keys)); };  // both keys, or neither
  auto send_back = [&] {
    *alone = true;
    return Disposition::ignored;  // not an outcome: it is taken in again
  };
  ThreadRef where = m.Where();
  auto session = SessionOf(m, where);
  if (!session) return Fail(session.error());
  bool ambiguous = false;
  auto question = QuestionFor(m, route, &ambiguous);
  // A command comes first, except where a command is a bare word (no prefix) and the message replies
  // to the question's own message or names one of its options: "stop" to "Stop or continue?" answers it.
  const bool answer_first = question != nullptr && caps.command_prefix.empty() && MayAnswer(*question, m.author_id) &&
                            ((!m.reply_to_message_id.empty() && m.reply_to_message_id == question->stored.message_id) ||
                             routing::NamesOption(m.text, question->stored.questions.at(question->stored.answered)));
  if (!answer_first && routing::ParseCommand(m.text, caps, options.bot_username)) {
    if (alone != nullptr) return send_back();
    auto dup = seen();
    if (!dup) return Fail(dup.error());
    if (*dup) return Disposition::duplicate;
    TryCommand(m, route, *session);
    return Disposition::accepted;
  }
  if (question) {
    if (alone != nullptr) return send_back();
    auto dup = seen();
    if (!dup) return Fail(dup.error());
    if (*dup) return Disposition::duplicate;
    AnswerFromChat(*question, m, ambiguous);
    return Disposition::accepted;
  }
  routing::SessionRun& s = SessionFor(*session, route);
  // What waits behind a turn: of an idle Session's messages the first is about to start (its start may
  // be behind this intake), and does not count against the bound.
  const std::size_t ahead = s.queue.size() + s.accepting;
  const bool idle = !s.running && !s.starting;
  if ((idle && ahead > 0 ? ahead - 1 : ahead) >= options.max_queued) {
    if (alone != nullptr) return send_back();
    auto dup = seen();
    if (!dup) return Fail(dup.error());
    if (*dup) return Disposition::duplicate;
    Note(m.Where(),
         "Too many messages are queued for this conversation (" + std::to_string(options.max_queued) +
             "). This one was not sent to the agent; send it again once the queue is shorter.",
         s.name, m.message_id);
    return Disposition::refused;
  }
  auto w = std::make_unique<routing::Waiting>();
  w->where = std::move(where);
  // A message its idle Session runs at once is accepted as a turn in flight: its start then writes
  // nothing (one UPDATE of its row less, the largest store cost of a turn's start).
  std::optional<routing::TurnStart> start;
  if (StartsWithAcceptance(s)) {
    w->request_id = NewRequestId();
    start.emplace(routing::TurnStart{w->request_id, s.journal});
  }
  auto id = store->AcceptMessage(w->where, s.name, m, Present(keys), std::chrono::system_clock::now(),
                                 start ? &*start : nullptr);
  if (!id) return Fail(id.error());
  if (!*id) return Disposition::duplicate;
  ++s.accepting;  // counts against the queue bound until the batch is queued
  ++burst_accepted;
  w->inbox_id = **id;
  w->route = route;
  w->message = std::move(m);
  *accepted = std::move(w);
  *run = s.shared_from_this();
  return Disposition::accepted;
}

bool Router::Impl::StartsWithAcceptance(const routing::SessionRun& s) const {
  // Counted with the turns in flight, every waiting message may take a slot before this one (a
  // waiting message's start moves it from one count to the other): what is left is this one's.
  return !s.running && !s.starting && s.queue.empty() && s.accepting == 0 && admission.empty() && !shutting_down &&
         in_flight + waiting_total + burst_accepted < options.max_in_flight;
}

Status Router::Impl::Withdraw(const routing::Waiting& w) {
  if (w.request_id.empty()) {
    auto removed = store->RemoveInbox(w.inbox_id);
    return removed ? Status{} : Fail(removed.error());
  }
  auto finished = store->FinishTurn(w.request_id);
  return finished ? Status{} : Fail(finished.error());
}

Result<std::string> Router::Impl::SessionOf(const InboundMessage& m, const ThreadRef& where) {
  const routing::ChatRef chat = routing::ChatRef::Of(where);
  if (!m.reply_to_message_id.empty()) {
    auto bot = store->FindBotMessage(chat, m.reply_to_message_id);
    if (!bot) return Fail(bot.error());
    if (*bot) return std::move((*bot)->session);
  }
  if (!where.thread.empty()) {
    auto bound = store->BoundSession(where);
    if (!bound) return Fail(bound.error());
    if (*bound) return std::move(**bound);
    std::string name = SessionName(options.session_prefix, where.platform, options.owner_uid, where.chat, where.thread);
    routing::Binding b{where, name, std::chrono::system_clock::now(), false};
    if (auto st = store->BindThread(b); !st) return Fail(st.error());
    if (auto st = store->AddChatSession({chat, name, b.created, {}}); !st) return Fail(st.error());
    return name;
  }
  auto current = store->Current(chat);
  if (!current) return Fail(current.error());
  if (*current) return std::move(**current);
  std::string name = SessionName(options.session_prefix, where.platform, options.owner_uid, where.chat, "");
  if (auto st = store->AddChatSession({chat, name, std::chrono::system_clock::now(), {}}); !st) return Fail(st.error());
  if (auto st = store->SetCurrent(chat, name); !st) return Fail(st.error());
  return name;
}

Result<Disposition> Router::Impl::OnEdited(const InboundMessage& m) {
  const bool deleted = m.kind == MessageKind::deleted;
  // The message it changes: waiting in a Session's queue, or its turn running.
  routing::SessionRun* holder = nullptr;
  std::deque<std::unique_ptr<routing::Waiting>>::iterator waiting;
  std::shared_ptr<routing::TurnRun> running;
  for (auto& [name, s] : sessions) {
    for (auto it = s->queue.begin(); it != s->queue.end() && holder == nullptr; ++it) {
      if ((*it)->message.chat == m.chat && (*it)->message.message_id == m.message_id) {
        holder = s.get();
        waiting = it;
      }
    }
    if (holder != nullptr) break;
    if (s->running && s->running->message.chat == m.chat && s->running->message.message_id == m.message_id) {
      running = s->running;
      break;
    }
  }
  // The store first (the waiting message's change, then the event's dedupe key, one commit), then
  // what is in memory: a failed commit changes nothing, and the platform delivers the event again.
  // The key goes last: a change the store refused leaves no key behind, so that redelivery is taken
  // in, not dropped as a duplicate.
  const std::string key = m.event_id.empty() ? std::string() : m.platform + '\x1f' + m.event_id;
  Result<Disposition> out = Disposition::ignored;  // not one we hold (already answered, or never ours)
  const Status committed = Durably(deleted ? "taking in a deletion" : "taking in an edit", [&] {
    if (!key.empty()) {
      auto seen = store->Seen(DedupeKind::event, key);
      if (!seen) {
        out = Fail(seen.error());
        return;
      }
      if (*seen) {
        out = Disposition::duplicate;
        return;
      }
    }
    if (holder != nullptr) {
      const routing::Waiting& w = **waiting;
      Status st = deleted                 ? Withdraw(w)
                  : w.request_id.empty() ? store->UpdateInboxText(w.inbox_id, m.text)
                                          : store->UpdateUnsentText(w.request_id, m.text);
      if (!st) {
        out = Fail(st.error());  // it wrote nothing: nor does the key
        return;
      }
      out = Disposition::accepted;
    } else if (running) {
      out = Disposition::accepted;
      // An edit of a turn that has not started: what runs if the runtime never had it (a restart
      // sends it again from the store).
      if (!deleted && running->stage != TurnStage::running && !running->shared) {
        if (auto st = store->UpdateUnsentText(running->request_id, m.text); !st) {
          Log(LogLevel::warning, "storing an edit of turn " + running->request_id + " failed: " + st.error().ToString());
        }
      }
    }
    // A key that cannot be remembered (a failed read; a failed write spoils the commit) leaves the
    // change to stand: a redelivery applies it again, which changes nothing more.
    if (!key.empty()) {
      if (auto remembered = store->SeenOrRemember(DedupeKind::event, key); !remembered) {
        Log(LogLevel::warning, "remembering " + std::string(deleted ? "deletion" : "edit") + " event " + m.event_id +
                                   " failed: " + remembered.error().ToString());
      }
    }
  });
  if (!committed) return Fail(committed.error());
  if (!out || *out != Disposition::accepted) return out;
  if (running) {
    ChangeRunning(running, m);
    return out;
  }
  routing::Waiting& w = **waiting;
  if (deleted) {
    SetLive(w.receipt, "Withdrawn: the message was deleted before its turn started.");
    holder->queue.erase(waiting);
    --waiting_total;
  } else {
    w.message.text = m.text;
    w.message.attachments_text = m.attachments_text;
  }
  UpdateReceipts(*holder);
  return out;
}

}  // namespace sessionturn
