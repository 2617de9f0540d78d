// The Telegram adapter's inbound side: getUpdates long polling with the offset in the router's store,
// webhooks with the secret token, and each update handed to the Router (chat/telegram.hpp).
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <charconv>
#include <future>

#include "chat/telegram_impl.hpp"
#include "chat/telegram_wire.hpp"
#include "sessionturn/router.hpp"

namespace sessionturn {

using nlohmann::json;
namespace tg = telegram;

namespace {

constexpr const char* kOffsetCursor = "telegram.offset";
constexpr std::chrono::milliseconds kMaxPollBackoff{30'000};

std::string FatalText(const Error& e) {
  if (e.code == Errc::conflict && e.message.find("webhook") != std::string::npos) {
    return "a webhook is set for this bot, so it cannot poll (" + e.message +
           "); run with --mode webhook, or delete the webhook";
  }
  if (e.code == Errc::conflict) {
    return "another program is polling this bot's updates (" + e.message +
           "); only one bot instance may run per token";
  }
  return "Telegram refused the bot token (" + e.message + ")";
}

struct DispatchState {
  std::mutex mu;
  std::size_t pending = 0;
  std::int64_t next_offset = 0;                 // past every update of the batch
  std::optional<std::int64_t> first_unstored;   // the lowest update the router could not take
  bool router_closed = false;
};

}  // namespace

bool SecretEquals(std::string_view expected, std::string_view received) {
  if (expected.empty()) return false;
  unsigned char a[SHA256_DIGEST_LENGTH];
  unsigned char b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(received.data()), received.size(), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

std::function<void(std::string_view)> TelegramAdapter::Impl::AckFor(std::string callback_query_id) {
  return [self = shared_from_this(), id = std::move(callback_query_id)](std::string_view text) {
    json params = {{"callback_query_id", id}};
    if (!text.empty()) params["text"] = std::string(text);
    self->Call("answerCallbackQuery", std::move(params), [self, id](Result<json> r) {
      if (!r) self->Log(LogLevel::warning, "answering button press " + id + ": " + r.error().message);
    });
  };
}

void TelegramAdapter::Impl::Poll() {
  if (!polling) return;
  json params = {{"timeout", quick_poll ? 0 : options.poll_timeout.count()},
                 {"allowed_updates", {"message", "edited_message", "callback_query"}}};
  if (offset > 0) params["offset"] = offset;
  // The server holds the poll for poll_timeout: the exchange gets that and a margin.
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.poll_timeout) +
                       std::chrono::seconds(15);
  poll_call = Call("getUpdates", std::move(params),
       [self = shared_from_this()](Result<json> r) {
         asio::post(self->strand, [self, r = std::move(r)]() mutable {
           if (!self->polling) return;
           if (!r) return self->PollFailed(r.error());
           if (!r->is_array()) {
             return self->PollFailed(Error(Errc::protocol_error, "Telegram getUpdates: the result is not a list"));
           }
           self->poll_failures = 0;
           self->poll_ok = true;
           self->quick_poll = false;
           if (r->empty()) return self->Poll();
           self->Dispatch(std::move(*r));
         });
       },
       timeout);
}

void TelegramAdapter::Impl::PollAfter(std::chrono::milliseconds delay) {
  poll_timer = std::make_shared<asio::steady_timer>(context.io(), delay);
  poll_timer->async_wait(asio::bind_executor(strand, [self = shared_from_this()](const asio::error_code& ec) {
    if (!ec) self->Poll();
  }));
}

void TelegramAdapter::Impl::PollFailed(const Error& error) {
  if (error.code == Errc::cancelled) return;
  if (error.code == Errc::conflict || error.code == Errc::unauthorized) {
    polling = false;
    poll_ok = false;
    Log(LogLevel::error, "polling stopped: " + FatalText(error));
    if (on_fatal) {
      Error fatal = error;
      fatal.message = FatalText(error);
      asio::post(context.io(), [fatal_handler = std::move(on_fatal), fatal] { fatal_handler(fatal); });
      on_fatal = nullptr;
    }
    return;
  }
  ++poll_failures;
  poll_ok = false;
  quick_poll = true;
  auto delay = std::min(kMaxPollBackoff, std::chrono::milliseconds(500) * (1 << std::min(poll_failures, 6)));
  if (error.retry_after.count() > 0) delay = std::max(delay, error.retry_after);
  // The first failure of a streak is worth a warning; the rest would flood the log.
  Log(poll_failures == 1 ? LogLevel::warning : LogLevel::debug,
      "getUpdates failed (" + error.message + "); polling again in " + std::to_string(delay.count()) + " ms");
  PollAfter(delay);
}

void TelegramAdapter::Impl::Dispatch(json updates) {
  TelegramBotInfo me;
  {
    std::lock_guard lock(mu);
    me = bot;
    stats.updates_received += updates.size();
  }
  auto state = std::make_shared<DispatchState>();
  state->pending = 1;  // this loop's own hold, released at the end
  state->next_offset = offset;
  auto finish = [self = shared_from_this(), state] {
    asio::post(self->strand, [self, state] {
      if (!self->polling) return;
      if (state->router_closed) {
        self->polling = false;  // the router is shutting down: leave the rest to the next start
        return;
      }
      const std::int64_t next = state->first_unstored.value_or(state->next_offset);
      self->offset = next;
      self->router->SaveCursor(kOffsetCursor, std::to_string(next), [self](Status st) {
        if (!st) self->Log(LogLevel::warning, "saving the update offset: " + st.error().message);
      });
      if (state->first_unstored) {
        // The router could not store one: it comes again from the server after a pause.
        self->Log(LogLevel::warning, "update " + std::to_string(*state->first_unstored) +
                                         " was not stored; fetching it again");
        self->PollAfter(std::chrono::seconds(1));
        return;
      }
      self->Poll();
    });
  };
  auto release = [state, finish] {
    bool last = false;
    {
      std::lock_guard lock(state->mu);
      last = --state->pending == 0;
    }
    if (last) finish();
  };
  for (const json& u : updates) {
    auto parsed = tg::ParseUpdate(u, me);
    if (!parsed) {
      Bump(&TelegramStats::updates_ignored);
      Log(LogLevel::warning, "skipped an update that cannot be read: " + parsed.error().message);
      continue;
    }
    state->next_offset = std::max(state->next_offset, parsed->update_id + 1);
    if (parsed->action) {
      parsed->action->ack = AckFor(parsed->callback_query_id);
      router->HandleAction(std::move(*parsed->action));
    } else if (parsed->message) {
      {
        std::lock_guard lock(state->mu);
        ++state->pending;
      }
      const std::int64_t id = parsed->update_id;
      if (context.ShouldLog(LogLevel::debug)) {
        Log(LogLevel::debug, "update " + std::to_string(id) + ": a message from user " + parsed->message->author_id +
                                 " in chat " + parsed->message->chat +
                                 (parsed->message->thread.empty() ? "" : " topic " + parsed->message->thread));
      }
      router->HandleMessage(std::move(*parsed->message), [state, release, id](Result<Disposition> d) {
        if (!d) {
          std::lock_guard lock(state->mu);
          if (d.error().code == Errc::unavailable) state->router_closed = true;
          if (!state->first_unstored || id < *state->first_unstored) state->first_unstored = id;
        }
        release();
      });
    } else {
      Bump(&TelegramStats::updates_ignored);
      Log(LogLevel::debug, parsed->ignored);
    }
  }
  release();
}

void TelegramAdapter::StartPolling(Router& router, std::function<void(Error)> on_fatal) {
  asio::post(impl_->strand, [self = impl_, router = &router, on_fatal = std::move(on_fatal)]() mutable {
    if (self->polling) return;
    self->polling = true;
    self->quick_poll = true;
    self->router = router;
    self->on_fatal = std::move(on_fatal);
    router->LoadCursor(kOffsetCursor, [self](Result<std::optional<std::string>> cursor) {
      asio::post(self->strand, [self, cursor = std::move(cursor)] {
        if (!cursor) {
          // Telegram keeps what was not confirmed, and the router dedupes: polling from the start loses nothing.
          self->Log(LogLevel::warning, "reading the update offset: " + cursor.error().message + "; polling without it");
        } else if (cursor->has_value()) {
          std::int64_t value = 0;
          const std::string& text = **cursor;
          auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
          if (ec == std::errc() && end == text.data() + text.size()) self->offset = value;
        }
        self->Poll();
      });
    });
  });
}

void TelegramAdapter::StopPolling() {
  auto stopped = std::make_shared<std::promise<void>>();
  auto done = stopped->get_future();
  asio::post(impl_->strand, [self = impl_, stopped] {
    self->polling = false;
    self->poll_ok = false;
    self->poll_call.Cancel();  // the updates it would fetch stay unconfirmed: the next start gets them
    if (self->poll_timer) self->poll_timer->cancel();
    stopped->set_value();
  });
  // Every use of the router on the strand checks `polling` first: once this ran, no update reaches the
  // router any more (so it may be destroyed next). A stopped Context runs nothing, and waiting would hang.
  if (impl_->context.InWorkerThread()) return;
  while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (impl_->context.Stopped()) return;
  }
}

bool TelegramAdapter::Polling() const noexcept {
  return impl_->poll_ok.load();
}

void TelegramAdapter::HandleWebhook(std::optional<std::string_view> secret_header, std::string_view body,
                                    Router& router, std::function<void(int, std::string)> respond) {
  TelegramBotInfo me;
  bool allowed = false;
  {
    std::lock_guard lock(impl_->mu);
    allowed = secret_header.has_value() && SecretEquals(impl_->webhook_secret, *secret_header);
    me = impl_->bot;
    if (!allowed) ++impl_->stats.webhook_refused;
  }
  if (!allowed) {
    impl_->Log(LogLevel::warning, secret_header ? "a webhook request with a wrong secret token was refused"
                                                : "a webhook request without the secret token was refused");
    return respond(401, "unauthorized\n");
  }
  auto parsed = telegram::ParseUpdate(body, me);
  if (!parsed) {
    impl_->Log(LogLevel::warning, "a webhook request that is not an update: " + parsed.error().message);
    return respond(400, parsed.error().message + "\n");
  }
  impl_->Bump(&TelegramStats::updates_received);
  if (parsed->action) {
    parsed->action->ack = impl_->AckFor(parsed->callback_query_id);
    router.HandleAction(std::move(*parsed->action));
    return respond(200, "");
  }
  if (!parsed->message) {
    impl_->Bump(&TelegramStats::updates_ignored);
    impl_->Log(LogLevel::debug, parsed->ignored);
    return respond(200, "");
  }
  router.HandleMessage(std::move(*parsed->message), [respond = std::move(respond)](Result<Disposition> d) {
    if (d) return respond(200, "");
    // 503: Telegram delivers it again later; the router dedupes what it had.
    respond(d.error().code == Errc::unavailable ? 503 : 500, d.error().message + "\n");
  });
}

}  // namespace sessionturn
