// The final reply: rendered and split for the platform, stored in the outbox with the turn's end
// (one transaction; a reply of one part with a placeholder to edit is edited in first, EditReplyIn),
// then delivered part by part: the first edited into the placeholder (two
// attempts, then a new post), the rest posted in order. A 429 waits its retry_after and costs no
// attempt; a part that keeps failing is reported in the thread and stays in the outbox, retried
// later and after a restart. Nothing here drops a reply.
#include "routing/router_impl.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn {

using routing::OutboxEntry;
using routing::TurnRun;

namespace {

constexpr int kPlaceholderEditAttempts = 2;
constexpr std::chrono::milliseconds kRetryBackoff{500};
constexpr std::chrono::minutes kOutboxRetry{1};

}  // namespace

std::vector<std::string> Router::Impl::RenderParts(std::string_view markdown) const {
  RenderOptions o;
  o.dialect = caps.dialect;
  o.max_length = caps.max_length;
  o.unit = caps.unit;
  o.soft_length = caps.soft_length;
  std::vector<std::string> out;
  auto parts = RenderReply(markdown, o);
  if (parts) {
    for (auto& p : *parts) out.push_back(std::move(p.text));
    return out;
  }
  // Options were checked when the router was made; should the renderer refuse anyway, the text goes
  // out as it is, in pieces that surely fit (a quarter of the limit in bytes fits any unit).
  Log(LogLevel::error, "rendering a reply failed (" + parts.error().ToString() + "): sending it unformatted");
  const std::size_t step = std::max<std::size_t>(1, caps.max_length / 4);
  for (std::size_t at = 0; at < markdown.size();) {
    std::size_t len = std::min(step, markdown.size() - at);
    while (at + len < markdown.size() && len > 0 && (static_cast<unsigned char>(markdown[at + len]) & 0xC0) == 0x80) --len;
    if (len == 0) len = std::min(step, markdown.size() - at);
    out.emplace_back(markdown.substr(at, len));
    at += len;
  }
  if (out.empty()) out.emplace_back();
  return out;
}

void Router::Impl::Deliver(OutboxEntry entry, int edit_attempts, std::chrono::milliseconds delay) {
  if (entry.id != 0 && !delivering.insert(entry.id).second) return;  // already on its way
  auto e = std::make_shared<OutboxEntry>(std::move(entry));
  if (delay.count() > 0) return After(delay, [e, edit_attempts](Impl& r) { r.DeliverPart(e, edit_attempts); });
  DeliverPart(std::move(e), edit_attempts);
}

// A reply its placeholder takes whole goes in before anything is stored: the turn's row stays in the
// store until the reply is in, so a restart before then re-attaches to the turn (its events are in
// the Session's journal) and edits the same reply in again, which changes nothing a user saw. That is
// the window a crash in the middle of a turn has anyway, one edit longer; the outbox's two writes (the
// reply stored, then removed) are saved. Anything but a first edit that lands (a failure, a rate
// limit) stores the reply and goes on as every other reply does: a post, unlike an edit, must not be
// repeated by a restart.
void Router::Impl::EditReplyIn(const std::shared_ptr<TurnRun>& turn, std::shared_ptr<OutboxEntry> e) {
  OutboundMessage out{e->parts.front(), {}, {}};
  adapter.AsyncEdit(
      e->thread, e->placeholder_id, std::move(out), OnStrand<Status>([turn = turn, e](Impl& r, Status st) {
        if (!st) {
          r.Log(LogLevel::info, "editing the reply into the placeholder failed: " + st.error().ToString());
          // A rate limit is a wait, not a failed attempt.
          const auto wait = st.error().retry_after;
          if (wait.count() > 0) return r.StoreReply(turn, std::move(e), 0, wait);
          return r.StoreReply(turn, std::move(e), 1, kRetryBackoff);
        }
        r.WriteBehind([&] {
          auto finished = r.store->FinishTurn(e->request_id);
          if (!finished) {
            r.Log(LogLevel::warning, "turn " + e->request_id + ": its reply is in, but its record stays (a restart "
                                     "will edit the reply in again): " + finished.error().ToString());
          } else if (!*finished) {
            r.Log(LogLevel::warning, "turn " + e->request_id + ": its reply is in, and its record was gone already");
          } else if (r.pass_open) {
            r.behind_finishes.push_back(e->request_id);
          }
        });
        r.Bump(&RouterStats::replies_delivered);
        r.PublishGauges();
      }));
}

void Router::Impl::DeliverPart(std::shared_ptr<OutboxEntry> e, int edit_attempts) {
  if (e->next_part >= e->parts.size()) {
    if (e->id != 0) {
      delivering.erase(e->id);
      if (auto st = store->RemoveOutbox(e->id); !st) Log(LogLevel::warning, st.error().ToString());
    } else if (unstored_turns.erase(e->request_id) > 0) {
      // A reply that went out unstored is in: its turn's record goes, or a restart would send it again.
      WriteBehind([&] {
        if (auto finished = store->FinishTurn(e->request_id); !finished) {
          Log(LogLevel::error, "turn " + e->request_id + ": its reply is in, but its record stays (a restart will "
                               "deliver the reply again): " + finished.error().ToString());
        } else if (*finished && pass_open) {
          behind_finishes.push_back(e->request_id);
        }
      });
    }
    Bump(&RouterStats::replies_delivered);
    PublishGauges();
    return;
  }
  // The part's index entry and the outbox's progress, written behind; after the last part, the
  // entry's removal instead of its update (DeliverPart then has nothing left to remove, unless that
  // removal failed: then it tries again on its own; a failed commit of the pass removes it again).
  auto delivered = [e](Impl& r, const std::string& message_id) {
    ++e->next_part;
    e->attempts = 0;
    bool removed = false;
    r.WriteBehind([&] {
      // The placeholder is in the index already (written with its id in the turn's record), as this
      // Session's: a part edited into it changes nothing there.
      if (message_id != e->placeholder_id) {
        if (auto st = r.store->IndexBotMessage({routing::ChatRef::Of(e->thread), message_id, e->session,
                                                routing::BotMessageKind::reply});
            !st) {
          r.Log(LogLevel::warning, st.error().ToString());
        }
      }
      if (e->id == 0) return;
      if (e->next_part < e->parts.size()) {
        if (auto st = r.store->UpdateOutbox(e->id, e->next_part, 0, {}, {}); !st)
          r.Log(LogLevel::warning, st.error().ToString());
        return;
      }
      if (auto st = r.store->RemoveOutbox(e->id); !st) {
        r.Log(LogLevel::warning, st.error().ToString());
      } else {
        removed = true;
      }
    });
    if (removed) {
      if (r.pass_open) r.behind_removals.push_back(e->id);
      r.delivering.erase(e->id);
      e->id = 0;
    }
    r.DeliverPart(e, 0);
  };
  OutboundMessage out{e->parts[e->next_part], {}, {}};
  if (e->next_part == 0 && !e->placeholder_id.empty() && edit_attempts < kPlaceholderEditAttempts) {
    adapter.AsyncEdit(e->thread, e->placeholder_id, std::move(out),
                      OnStrand<Status>([e, edit_attempts, delivered](Impl& r, Status st) {
                        if (st) return delivered(r, e->placeholder_id);
                        const auto wait = st.error().retry_after;
                        r.Log(LogLevel::info, "editing the reply into the placeholder failed: " + st.error().ToString());
                        // A rate limit is a wait, not a failed attempt.
                        if (wait.count() > 0) return r.After(wait, [e, edit_attempts](Impl& r2) { r2.DeliverPart(e, edit_attempts); });
                        r.After(kRetryBackoff, [e, edit_attempts](Impl& r2) { r2.DeliverPart(e, edit_attempts + 1); });
                      }));
    return;
  }
  adapter.AsyncPost(e->thread, std::move(out),
                    OnStrand<Result<std::string>>([e, edit_attempts, delivered](Impl& r, Result<std::string> id) {
                      if (id) return delivered(r, *id);
                      const auto wait = id.error().retry_after;
                      if (wait.count() > 0) return r.After(wait, [e, edit_attempts](Impl& r2) { r2.DeliverPart(e, edit_attempts); });
                      if (++e->attempts < r.options.delivery_attempts) {
                        return r.After(kRetryBackoff * (1 << std::min(e->attempts, 6)),
                                       [e, edit_attempts](Impl& r2) { r2.DeliverPart(e, edit_attempts); });
                      }
                      r.OnPartFailed(e, id.error());
                    }));
}

void Router::Impl::OnPartFailed(std::shared_ptr<OutboxEntry> e, const Error& error) {
  const std::string which = e->parts.size() > 1 ? "Part " + std::to_string(e->next_part + 1) + " of " +
                                                      std::to_string(e->parts.size()) + " of the reply"
                                                : "The reply";
  Log(LogLevel::warning, which + " to chat " + e->thread.chat + " could not be delivered: " + error.ToString());
  // Unstored (SendStored), it has no outbox row to retry from: its turn's record brings it back at the
  // next start.
  const bool unstored = e->id == 0 && unstored_turns.erase(e->request_id) > 0;
  Note(e->thread, "\u26A0\uFE0F " + which + " could not be delivered (" + EscapeMarkdown(error.message) + "). " +
                      (unstored ? "It could not be stored either; it will be sent again when the bot restarts."
                                : "It is kept and will be sent again."),
       e->session);
  const auto next = std::chrono::system_clock::now() + kOutboxRetry;
  if (e->id != 0) {
    delivering.erase(e->id);
    if (auto st = store->UpdateOutbox(e->id, e->next_part, e->attempts, next, error.ToString()); !st) {
      Log(LogLevel::warning, st.error().ToString());
    }
  }
  ScheduleOutboxRetry(kOutboxRetry);
  PublishGauges();
}

void Router::Impl::ScheduleOutboxRetry(std::chrono::milliseconds after) {
  if (outbox_timer) return;  // one is due already (sooner or as soon)
  outbox_timer = std::make_unique<asio::steady_timer>(context.io(), after);
  outbox_timer->async_wait(asio::bind_executor(strand, [self = shared_from_this()](const asio::error_code& ec) {
    if (self->torn_down) return;
    self->outbox_timer.reset();
    if (!ec) self->RetryOutbox();
  }));
}

void Router::Impl::RetryOutbox(bool all) {
  if (shutting_down) return;
  std::vector<routing::DamagedRow> damaged;
  auto entries = store->ListOutbox(&damaged);
  for (const auto& d : damaged) {
    Log(LogLevel::error, d.error.ToString() + "; it is removed and its thread told");
    if (auto gone = store->RemoveOutbox(d.id); !gone) Log(LogLevel::warning, gone.error().ToString());
    Note(d.thread, "\u26A0\uFE0F A reply meant for this thread could not be read back from the bot's state "
                   "file, so it cannot be delivered. `status` shows what the Session is doing.", d.session);
  }
  if (!entries) {
    // Tried again later: the replies it holds wait for it.
    Log(LogLevel::error, "reading the outbox failed (tried again in " + std::to_string(std::chrono::seconds(kOutboxRetry).count()) +
                             " s): " + entries.error().ToString());
    return ScheduleOutboxRetry(kOutboxRetry);
  }
  const auto now = std::chrono::system_clock::now();
  std::optional<std::chrono::system_clock::time_point> soonest;
  for (OutboxEntry& e : *entries) {
    if (delivering.count(e.id) != 0) continue;
    if (!all && e.next_attempt > now) {
      if (!soonest || e.next_attempt < *soonest) soonest = e.next_attempt;
      continue;
    }
    e.attempts = 0;
    Deliver(std::move(e));
  }
  if (soonest) {
    ScheduleOutboxRetry(std::chrono::duration_cast<std::chrono::milliseconds>(*soonest - now) +
                        std::chrono::milliseconds(10));
  }
  std::lock_guard lock(stats_mu);
  stats.outbox = entries->size();
}

}  // namespace sessionturn
