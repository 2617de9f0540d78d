// Messages the router edits in place (receipts, progress): the newest text wins and goes out no more
// often than the chat's edit budget (the adapter's edit rate, and RouterOptions::progress_interval;
// posting a placeholder spends it too);
// a 429 pushes the chat's next edit back by its retry_after. Intermediate texts are dropped freely:
// only the last one matters, and the final reply does not come through here.
#include "routing/router_impl.hpp"

namespace sessionturn {

using routing::LiveMessage;

std::chrono::milliseconds Router::Impl::EditSpacing() const {
  const auto per_edit = caps.edit_interval / std::max(1, caps.edits_per_interval);
  return std::max<std::chrono::milliseconds>(options.progress_interval,
                                             std::chrono::duration_cast<std::chrono::milliseconds>(per_edit));
}

namespace {

void RunIdle(LiveMessage& live) {
  if (live.posting || live.editing) return;
  auto waiting = std::move(live.on_idle);
  live.on_idle.clear();
  for (auto& fn : waiting) fn();
}

}  // namespace

std::shared_ptr<LiveMessage> Router::Impl::PostLive(const ThreadRef& where, std::string markdown,
                                                    const std::string& session, const std::string& reply_to) {
  auto live = std::make_shared<LiveMessage>();
  live->where = where;
  live->wanted = markdown;
  live->posting = true;
  OutboundMessage post{Render(markdown), {}, reply_to};
  adapter.AsyncPost(where, std::move(post),
                    OnStrand<Result<std::string>>([live, markdown = std::move(markdown), session = session](
                                                      Impl& r, Result<std::string> id) mutable {
                      live->posting = false;
                      if (!id) {
                        // The reply is then posted as a new message (one, never two).
                        r.Log(LogLevel::warning, "posting a placeholder in chat " + live->where.chat +
                                                     " failed: " + id.error().ToString());
                      } else {
                        live->message_id = *id;
                        // The handler's own copy (a copy of the handler has its own), not read after.
                        live->shown.swap(markdown);
                        // Indexed with its waiting message's (or turn's) work row: after a restart the
                        // reply still lands here (RouterStore::ListTurns, ListInbox read it from the
                        // index), with no second write to that row.
                        r.WriteBehind([&] {
                          // The call's id and the handler's copy of the Session's name move into the entry.
                          routing::BotMessage posted{routing::ChatRef::Of(live->where), std::move(*id),
                                                     std::move(session), routing::BotMessageKind::placeholder,
                                                     live->inbox_id};
                          if (auto st = r.store->IndexBotMessage(std::move(posted)); !st) {
                            r.Log(LogLevel::warning, st.error().ToString());
                          }
                        });
                        // The post spent the chat's budget like an edit: the first progress edit comes
                        // an edit spacing later, and a turn done by then goes straight to its reply.
                        auto& pace = r.PaceOf(*live);
                        pace.next_edit = std::max(pace.next_edit, std::chrono::steady_clock::now() + r.EditSpacing());
                        r.PaceLive(live);
                      }
                      RunIdle(*live);
                    }));
  return live;
}

routing::ChatPace& Router::Impl::PaceOf(LiveMessage& live) {
  if (live.pace == nullptr) live.pace = &paces[ChatKey(live.where)];
  return *live.pace;
}

void Router::Impl::SetLive(const std::shared_ptr<LiveMessage>& live, std::string markdown) {
  if (!live || live->retired) return;
  live->wanted = std::move(markdown);
  live->stale = false;
  PaceLive(live);
}

void Router::Impl::MarkStale(const std::shared_ptr<LiveMessage>& live) {
  if (!live || live->retired || !live->progress) return;
  live->stale = true;
  PaceLive(live);
}

namespace {

// Makes a stale progress text now (an edit is about to go out).
void Refresh(LiveMessage& live) {
  if (!live.stale) return;
  live.stale = false;
  if (std::string text = live.progress(); !text.empty()) live.wanted = std::move(text);
}

}  // namespace

void Router::Impl::PaceLive(const std::shared_ptr<LiveMessage>& live) {
  if (live->retired || live->posting || live->editing || live->message_id.empty()) return;
  if ((!live->stale && live->wanted == live->shown) || live->timer) return;  // nothing new, or an edit is due
  const auto now = std::chrono::steady_clock::now();
  const auto at = PaceOf(*live).next_edit;
  if (at <= now) return SendLive(live);
  live->timer = std::make_unique<asio::steady_timer>(context.io(), at);
  live->timer->async_wait(asio::bind_executor(strand, [self = shared_from_this(), live = live](const asio::error_code& ec) {
    if (self->torn_down) return;
    live->timer.reset();
    if (ec) return;
    self->SendLive(live);
  }));
}

void Router::Impl::SendLive(const std::shared_ptr<LiveMessage>& live) {
  if (live->retired || live->posting || live->editing) return RunIdle(*live);
  const auto now = std::chrono::steady_clock::now();
  auto& pace = PaceOf(*live);
  if (pace.next_edit > now) return PaceLive(live);  // another message of the chat took the slot
  Refresh(*live);
  if (live->wanted == live->shown) return RunIdle(*live);
  pace.next_edit = now + EditSpacing();
  live->editing = true;
  std::string markdown = live->wanted;  // not const: its capture below is then moved with the handler
  adapter.AsyncEdit(live->where, live->message_id, OutboundMessage{Render(markdown), {}, {}},
                    OnStrand<Status>([live = live, markdown](Impl& r, Status st) {
                      live->editing = false;
                      if (st) {
                        live->shown = markdown;
                        r.Bump(&RouterStats::edits_sent);
                      } else {
                        r.Bump(&RouterStats::edits_dropped);
                        if (st.error().retry_after.count() > 0) {
                          auto& p = r.PaceOf(*live);
                          p.next_edit = std::max(p.next_edit, std::chrono::steady_clock::now() + st.error().retry_after);
                        }
                        r.Log(LogLevel::debug, "a progress edit in chat " + live->where.chat +
                                                   " failed (the next one carries its text): " + st.error().ToString());
                      }
                      r.PaceLive(live);
                      RunIdle(*live);
                    }));
}

void Router::Impl::WhenIdle(const std::shared_ptr<LiveMessage>& live, std::function<void()> fn) {
  live->retired = true;
  if (live->timer) {
    live->timer->cancel();
    live->timer.reset();
  }
  if (!live->posting && !live->editing) return fn();
  live->on_idle.push_back(std::move(fn));
}

}  // namespace sessionturn
