// The Router's facade (router.hpp), its construction and the helpers every part uses.
#include "sessionturn/router.hpp"

#include <future>

#include "blocking.hpp"
#include "routing/join_key.hpp"
#include "routing/router_impl.hpp"

namespace sessionturn {

std::string_view ToString(Disposition d) noexcept {
  switch (d) {
    case Disposition::accepted: return "accepted";
    case Disposition::duplicate: return "duplicate";
    case Disposition::ignored: return "ignored";
    case Disposition::refused: return "refused";
  }
  return "unknown";
}

Router::Impl::Impl(Context& c, SessionBackend& b, ChatAdapter& a, RouterOptions o, routing::RouteMatcher m,
                   std::unique_ptr<routing::RouterStore> s)
    : context(c),
      backend(b),
      adapter(a),
      options(std::move(o)),
      caps(a.Capabilities()),
      matcher(std::move(m)),
      store(std::move(s)),
      strand(asio::make_strand(c.io())) {}

Router::Impl::~Impl() {
  // Not logged: the Context may be going too.
  if (store && pass_open) (void)store->CommitBatch();
}

void Router::Impl::Log(LogLevel level, const std::string& text) const {
  if (context.ShouldLog(level)) context.Log(level, "router: " + text);
}

void Router::Impl::OpenPass() {
  if (!pass_open) {
    if (store->InBatch() || shutting_down) return;  // the caller's batch; or each write commits itself
    if (auto st = store->BeginBatch("recording the router's progress"); !st) {
      Log(LogLevel::warning, "the router's progress is written record by record: " + st.error().ToString());
      return;
    }
    pass_open = true;
    Run([](Impl& r) { r.ClosePass(); });
  }
  ++behind_writes;
}

void Router::Impl::ClosePass() {
  if (pass_open) (void)CommitOpen();  // a failure is logged there
}

Status Router::Impl::CommitOpen() {
  const bool pass = pass_open;
  pass_open = false;
  Status st = store->CommitBatch();
  if (pass) {
    if (!st) {
      Log(LogLevel::error, "the commit of " + std::to_string(behind_writes) +
                               " records written behind (and of any write that joined them) failed, so a restart "
                               "may post a placeholder's reply as a new message or a delivered part again: " +
                               st.error().ToString());
      // A delivered reply's outbox row must go, or a restart delivers the reply twice.
      for (std::int64_t id : behind_removals) {
        if (auto removed = store->RemoveOutbox(id); !removed) {
          Log(LogLevel::error, "outbox entry " + std::to_string(id) +
                                   " of a delivered reply could not be removed again; a restart will deliver that "
                                   "reply a second time: " + removed.error().ToString());
        }
      }
      // A turn whose reply is in its placeholder: left, a restart would re-attach and edit it in again.
      for (const std::string& request_id : behind_finishes) {
        if (auto finished = store->FinishTurn(request_id); !finished) {
          Log(LogLevel::error, "turn " + request_id + ", whose reply is in, could not be finished again; a restart "
                               "will edit that reply in a second time: " + finished.error().ToString());
        }
      }
    }
    behind_removals.clear();
    behind_finishes.clear();
    behind_writes = 0;
    if (torn_down) {
      pass_waiters.clear();  // what they wait for is in the store (or not): the next start takes it from there
    } else if (!pass_waiters.empty()) {
      // In a job of their own: this commit may be a Durably's in the middle of another operation.
      Run([waiters = std::move(pass_waiters), st](Impl& r) {
        for (const auto& then : waiters) then(r, st);
      });
      pass_waiters.clear();
    }
  }
  return st;
}

void Router::Impl::After(std::chrono::milliseconds delay, std::function<void(Impl&)> fn) {
  auto timer = std::make_shared<asio::steady_timer>(context.io(), delay);
  timer->async_wait(asio::bind_executor(strand, [self = shared_from_this(), timer, fn = std::move(fn)](
                                                    const asio::error_code& ec) {
    if (!ec && !self->torn_down) fn(*self);
  }));
}

void Router::Impl::Bump(std::uint64_t RouterStats::*counter, std::uint64_t by) {
  std::lock_guard lock(stats_mu);
  stats.*counter += by;
}

std::string Router::Impl::ChatKey(const ThreadRef& where) {
  return routing::JoinKey({where.platform, where.workspace, where.chat});
}

routing::SessionRun& Router::Impl::SessionFor(const std::string& name, std::size_t route) {
  auto& slot = sessions[name];
  if (!slot) {
    slot = std::make_shared<routing::SessionRun>();
    slot->name = name;
    slot->route = route;
  }
  return *slot;
}

namespace {

Status CheckOptions(const RouterOptions& o, const ChatCapabilities& caps) {
  if (o.routes.empty()) return Fail(Errc::invalid_argument, "RouterOptions.routes is empty: no message would match");
  if (o.max_queued == 0) return Fail(Errc::invalid_argument, "RouterOptions.max_queued must be at least 1");
  if (o.max_in_flight == 0) return Fail(Errc::invalid_argument, "RouterOptions.max_in_flight must be at least 1");
  if (o.session_prefix.empty()) return Fail(Errc::invalid_argument, "RouterOptions.session_prefix is empty");
  if (o.turn_timeout.count() <= 0 || o.wait_ready_timeout.count() <= 0 || o.answer_timeout.count() <= 0) {
    return Fail(Errc::invalid_argument,
                "RouterOptions.turn_timeout, wait_ready_timeout and answer_timeout must be positive");
  }
  if (o.delivery_attempts < 1) return Fail(Errc::invalid_argument, "RouterOptions.delivery_attempts must be at least 1");
  if (caps.max_length < kMinPartLength) {
    return Fail(Errc::invalid_argument, "the adapter's max_length " + std::to_string(caps.max_length) +
                                            " is below the smallest part the router can send (" +
                                            std::to_string(kMinPartLength) + ")");
  }
  if (caps.soft_length != 0 && caps.soft_length < kMinPartLength) {
    return Fail(Errc::invalid_argument, "the adapter's soft_length " + std::to_string(caps.soft_length) +
                                            " must be 0 (none) or at least " + std::to_string(kMinPartLength));
  }
  if (caps.edits_per_interval < 1 || caps.edit_interval.count() < 0) {
    return Fail(Errc::invalid_argument, "the adapter's edit rate must be at least one edit per interval");
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Router>> Router::Create(Context& context, SessionBackend& backend, ChatAdapter& adapter,
                                               RouterOptions options) {
  if (auto ok = CheckOptions(options, adapter.Capabilities()); !ok) return Fail(ok.error());
  auto matcher = routing::RouteMatcher::Compile(options.routes);
  if (!matcher) return Fail(matcher.error());
  if (options.store_path.empty()) options.store_path = DefaultStateDir() + "/router.db";
  auto store = routing::RouterStore::Open(options.store_path);
  if (!store) return Fail(store.error());
  auto impl = std::make_shared<Impl>(context, backend, adapter, std::move(options), std::move(*matcher),
                                     std::move(*store));
  return std::unique_ptr<Router>(new Router(std::move(impl)));
}

Router::Router(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

void Router::Impl::Teardown() {
  if (torn_down) return;
  // A Shutdown still sending its notices is done now (it detaches the drivers, and says so).
  if (finish_shutdown) {
    auto finish = std::move(finish_shutdown);
    finish_shutdown = nullptr;
    finish();
  }
  shutting_down = true;
  torn_down = true;
  // Messages handed over but not taken yet are not acknowledged: the platform delivers them again.
  std::deque<PendingMessage> pending;
  {
    std::lock_guard lock(intake_mu);
    pending.swap(intake);
  }
  for (auto& p : pending) {
    if (p.done) p.done(Fail(Errc::unavailable, "the router was destroyed before it took the message"));
  }
  // The turns stay in their Sessions (as after a crash): the next start re-attaches to them.
  for (auto& [name, s] : sessions) {
    if (s->driver) {
      s->driver->DetachTurns();
    } else if (s->running) {
      s->running->cancel.Cancel();  // still waiting for its Session: stop waiting (nothing was sent)
    }
    auto quiet = [](const std::shared_ptr<routing::LiveMessage>& live) {
      if (live && live->timer) live->timer->cancel();
    };
    if (s->running) quiet(s->running->live);
    for (auto& w : s->queue) quiet(w->receipt);
  }
  for (auto& [id, q] : questions) {
    if (q->timeout) q->timeout->cancel();
  }
  if (outbox_timer) outbox_timer->cancel();
  if (ticker) ticker->cancel();
  for (auto& turn : ticking) turn->tick_slot = routing::TurnRun::kNotTicking;
  ticking.clear();
  ClosePass();  // what was written behind is committed before the store closes
  // What held the router through its own state (drivers whose handlers hold it, timers) goes now.
  // The store closes (and lets go of its lock) though handlers may still hold the Impl: they land
  // after torn_down and touch nothing.
  store.reset();
  for (auto& [name, s] : sessions) s->gone = true;  // a turn or a start still holding one finds it gone
  sessions.clear();
  questions.clear();
  pickers.clear();
  admission.clear();
}

Router::~Router() {
  // Work still in flight holds the Impl and finds it torn down when it lands.
  auto impl = impl_;
  if (impl->context.Joined()) {
    impl->Teardown();  // nothing runs any more
    return;
  }
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  impl->Run([done](Impl& r) {
    r.Teardown();
    done->set_value();
  });
  if (!impl->context.InWorkerThread()) finished.wait_for(std::chrono::seconds(5));
}

void Router::Start() {
  impl_->Run([](Impl& r) {
    if (r.started) return;
    r.started = true;
    r.Resume();
    r.DrainIntake();  // messages handed over before Start
  });
}

void Router::HandleMessage(InboundMessage message, std::function<void(Result<Disposition>)> done) {
  if (!done) done = [](Result<Disposition>) {};
  if (impl_->context.Stopped()) return done(Fail(blocking::StoppedContextError("Router::HandleMessage")));
  if (auto st = Impl::CheckInbound(message); !st) {
    // Refused at once, before Start or not; `done` still runs on a worker, as always.
    return impl_->context.Post([done = std::move(done), e = st.error()]() { done(Fail(e)); });
  }
  bool post = false;
  {
    std::lock_guard lock(impl_->intake_mu);
    impl_->intake.emplace_back(std::move(message), std::move(done));
    post = !impl_->intake_posted;
    impl_->intake_posted = true;
  }
  if (post) impl_->Run([](Impl& r) { r.DrainIntake(); });
}

void Router::HandleAction(InboundAction action) {
  impl_->Run([action = std::move(action)](Impl& r) mutable { r.Action(std::move(action)); });
}

void Router::Shutdown(std::function<void()> done) {
  if (!done) done = [] {};
  impl_->Run([done = std::move(done)](Impl& r) mutable { r.BeginShutdown(std::move(done)); });
}

Status Router::ShutdownAndWait() {
  if (impl_->context.InWorkerThread()) {
    return Fail(Errc::would_block, "Router::ShutdownAndWait blocks; call it from your own thread");
  }
  auto finished = std::make_shared<std::promise<void>>();
  auto future = finished->get_future();
  Shutdown([finished] { finished->set_value(); });
  const auto bound = impl_->options.shutdown_budget + std::chrono::seconds(5);
  if (future.wait_for(bound) != std::future_status::ready) {
    return Fail(Errc::timeout, "Router::ShutdownAndWait: the shutdown did not finish within its budget");
  }
  return {};
}

void Router::LoadCursor(std::string name, std::function<void(Result<std::optional<std::string>>)> done) {
  asio::post(impl_->strand, [self = impl_, name = std::move(name), done = std::move(done)] {
    Result<std::optional<std::string>> value =
        self->torn_down ? Result<std::optional<std::string>>(Fail(Errc::unavailable, "the router is closed"))
                        : self->store->Cursor(name);
    asio::post(self->context.io(), [done, value = std::move(value)]() mutable { done(std::move(value)); });
  });
}

void Router::SaveCursor(std::string name, std::string value, std::function<void(Status)> done) {
  if (!done) done = [](Status) {};
  asio::post(impl_->strand, [self = impl_, name = std::move(name), value = std::move(value), done = std::move(done)] {
    // Durable when `done` hears of it: the adapter confirms deliveries up to this cursor next.
    Status st = Fail(Errc::unavailable, "the router is closed");
    if (!self->torn_down) {
      Status saved;
      Status committed = self->Durably("saving a delivery cursor",
                                       [&] { saved = self->store->SetCursor(name, value, routing::StoreClock::now()); });
      st = !saved ? saved : committed;
    }
    asio::post(self->context.io(), [done, st = std::move(st)]() mutable { done(std::move(st)); });
  });
}

RouterStats Router::Stats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->stats;
}

}  // namespace sessionturn
