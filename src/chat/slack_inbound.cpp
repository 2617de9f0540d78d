// The Slack adapter's inbound side shared by both modes: parsed deliveries handed to the Router
// (authors' names from users.info, cached), button presses acknowledged, and the Events API's HTTP
// requests verified and answered (chat/slack.hpp). Socket Mode's connections are in slack_socket.cpp.
#include "chat/slack_impl.hpp"
#include "chat/slack_wire.hpp"
#include "sessionturn/router.hpp"

namespace sessionturn {

using nlohmann::json;

void SlackAdapter::Impl::NameOf(const std::string& user, std::function<void(std::string)> then) {
  {
    std::lock_guard lock(mu);
    auto it = users.find(user);
    if (it != users.end() && it->second.expires > Clock::now()) {
      asio::post(strand, [then = std::move(then), name = it->second.name]() mutable { then(std::move(name)); });
      return;
    }
  }
  asio::post(strand, [self = shared_from_this(), user, then = std::move(then)]() mutable {
    auto& waiting = self->lookups[user];
    waiting.push_back(std::move(then));
    if (waiting.size() > 1) return;  // a lookup for this user is in flight: it answers all
    self->CallOnce(
        "users.info", {{"user", user}},
        [self, user](Result<json> r) {
          std::string name = user;
          auto ttl = std::chrono::duration_cast<Clock::duration>(kFailedLookupTtl);
          if (r && r->contains("user")) {
            name = slack::DisplayNameOf((*r)["user"]);
            ttl = std::chrono::duration_cast<Clock::duration>(self->options.user_cache_ttl);
          } else if (!r) {
            self->Log(LogLevel::debug, "users.info " + user + ": " + r.error().message + "; using the id as the name");
          }
          {
            std::lock_guard lock(self->mu);
            if (self->users.size() >= kMaxCachedUsers) {
              const auto now = Clock::now();
              std::erase_if(self->users, [&](const auto& kv) { return kv.second.expires <= now; });
              if (self->users.size() >= kMaxCachedUsers) self->users.clear();
            }
            self->users[user] = CachedUser{name, Clock::now() + ttl};
          }
          asio::post(self->strand, [self, user, name] {
            auto waiting = std::move(self->lookups[user]);
            self->lookups.erase(user);
            for (auto& then : waiting) then(name);
          });
        },
        kUserLookupTimeout);
  });
}

void SlackAdapter::Impl::CheckThread(const std::string& chat, const std::string& thread,
                                     std::function<void(Result<bool>)> then) {
  asio::post(strand, [self = shared_from_this(), chat, thread, then = std::move(then)]() mutable {
    const std::string key = chat + "/" + thread;
    const auto now = Clock::now();
    if (auto it = self->foreign_threads.find(key); it != self->foreign_threads.end()) {
      if (it->second > now) return then(false);
      self->foreign_threads.erase(it);
    }
    auto& waiting = self->thread_checks[key];
    waiting.push_back(std::move(then));
    if (waiting.size() > 1) return;
    json params = {{"channel", chat}, {"ts", thread}, {"limit", 200}};
    self->CallOnce(
        "conversations.replies", std::move(params),
        [self, chat, thread, key](Result<json> r) {
          Result<bool> in_thread = false;
          if (r) {
            const SlackBotInfo me = self->Bot();
            const json& messages = r->contains("messages") ? (*r)["messages"] : json();
            for (const json& m : messages.is_array() ? messages : json::array()) {
              if ((!me.bot_id.empty() && json_fields::String(m, "bot_id") == me.bot_id) ||
                  (!me.user_id.empty() && json_fields::String(m, "user") == me.user_id)) {
                in_thread = true;
                break;
              }
            }
          } else {
            in_thread = Fail(r.error());
          }
          if (in_thread && *in_thread) self->RememberThread(ThreadRef{"slack", "", chat, thread});
          asio::post(self->strand, [self, key, in_thread] {
            if (in_thread && !*in_thread) {
              if (self->foreign_threads.size() > kMaxBotThreads) self->foreign_threads.clear();
              self->foreign_threads[key] = Clock::now() + kForeignThreadTtl;
            }
            auto waiting = std::move(self->thread_checks[key]);
            self->thread_checks.erase(key);
            for (auto& then : waiting) then(in_thread);
          });
        },
        kUserLookupTimeout);
  });
}

std::function<void(std::string_view)> SlackAdapter::Impl::AckFor(const InboundAction& action) {
  // The press itself was acknowledged on arrival (Slack wants that within 3 s); a note for the presser
  // ("already answered") goes as an ephemeral message only they see.
  return [self = shared_from_this(), chat = action.chat, thread = action.thread,
          user = action.author_id](std::string_view text) {
    if (text.empty()) return;
    json params = {{"channel", chat}, {"user", user}, {"text", std::string(text)}};
    if (!thread.empty()) params["thread_ts"] = thread;
    self->Call("chat.postEphemeral", std::move(params), [self, chat](Result<json> r) {
      if (!r) self->Log(LogLevel::warning, "a note on a button press in " + chat + ": " + r.error().message);
    });
  };
}

void SlackAdapter::Impl::Deliver(slack::ParsedEvent parsed, Router& router, std::function<bool()> live,
                                 DoneHandler done) {
  if (parsed.action) {
    parsed.action->ack = AckFor(*parsed.action);
    router.HandleAction(std::move(*parsed.action));
    return done(Disposition::accepted);
  }
  if (!parsed.message) {
    Bump(&SlackStats::events_ignored);
    Log(LogLevel::debug, "ignored: " + parsed.ignored);
    return done(Disposition::ignored);
  }
  InboundMessage message = std::move(*parsed.message);
  // A reply in a thread the bot posted into is addressed to it, as a reply to the bot is on Telegram.
  if (!message.mentions_bot && !message.is_private_chat && !message.is_bot && !message.thread.empty() &&
      message.thread != message.message_id && message.kind != MessageKind::deleted) {
    if (BotInThread(message.chat, message.thread)) {
      message.mentions_bot = true;
    } else {
      const std::string chat = message.chat, thread = message.thread;
      CheckThread(chat, thread, [self = shared_from_this(), message = std::move(message), router = &router,
                                 live = std::move(live), done = std::move(done)](Result<bool> in_thread) mutable {
        if (!in_thread) {
          // Not knowing whether it was addressed to the bot, it is neither taken nor dropped: Slack
          // delivers it again (Socket Mode: unacknowledged; Events API: 503).
          return done(Fail(Errc::unavailable, "could not tell whether the bot is in thread " + message.thread +
                                                  " of " + message.chat + " (" + in_thread.error().message + ")"));
        }
        message.mentions_bot = *in_thread;
        self->DeliverMessage(std::move(message), *router, std::move(live), std::move(done));
      });
      return;
    }
  }
  DeliverMessage(std::move(message), router, std::move(live), std::move(done));
}

void SlackAdapter::Impl::DeliverMessage(InboundMessage message, Router& router, std::function<bool()> live,
                                        DoneHandler done) {
  if (context.ShouldLog(LogLevel::debug)) {
    Log(LogLevel::debug, std::string(ToString(message.kind)) + " message " + message.message_id + " from user " +
                             message.author_id + " in " + message.chat +
                             (message.thread.empty() ? "" : " thread " + message.thread));
  }
  auto hand_over = [self = shared_from_this(), router = &router, live = std::move(live),
                    done = std::move(done)](InboundMessage message) mutable {
    if (!live()) return done(Fail(Errc::unavailable, "Slack: inbound stopped before the message was handed over"));
    router->HandleMessage(std::move(message), std::move(done));
  };
  if (!message.author_name.empty() || message.is_bot || message.author_id.empty() ||
      message.kind == MessageKind::deleted) {
    return asio::post(strand, [hand_over = std::move(hand_over), message = std::move(message)]() mutable {
      hand_over(std::move(message));
    });
  }
  const std::string user = message.author_id;
  NameOf(user, [hand_over = std::move(hand_over), message = std::move(message)](std::string name) mutable {
    message.author_name = std::move(name);
    hand_over(std::move(message));
  });
}

void SlackAdapter::HandleEvents(const SlackEventsRequest& request, Router& router,
                                std::function<void(int, std::string, std::string)> respond) {
  auto self = impl_;
  std::string secret;
  {
    std::lock_guard lock(self->mu);
    secret = self->options.signing_secret;
  }
  if (auto ok = slack::VerifySignature(secret, request.timestamp, request.signature, request.body,
                                       std::chrono::system_clock::now(), self->options.max_request_age);
      !ok) {
    self->Bump(&SlackStats::requests_refused);
    self->Log(LogLevel::warning, "an Events API request was refused: " + ok.error().message);
    return respond(401, "text/plain", "unauthorized\n");
  }
  auto parsed = slack::ParseEventsRequestBody(request.content_type, request.body, self->Bot());
  if (!parsed) {
    self->Log(LogLevel::warning, "an Events API request Slack would not send: " + parsed.error().message);
    return respond(400, "text/plain", parsed.error().message + "\n");
  }
  if (parsed->challenge) return respond(200, "text/plain", *parsed->challenge);
  self->Bump(&SlackStats::events_received);
  if (!request.retry_num.empty()) {
    self->Bump(&SlackStats::redeliveries);
    self->Log(LogLevel::debug, "Slack redelivers an event (retry " + request.retry_num + ", " +
                                   request.retry_reason + ")");
  }
  // Checked on the strand before the router is called: once StopInbound ran, a delivery still
  // waiting for a lookup is answered 503 (Slack retries) instead of reaching a router being destroyed.
  self->Deliver(std::move(*parsed), router, [self] { return !self->inbound_stopped; },
                [respond = std::move(respond)](Result<Disposition> d) {
                  if (d) return respond(200, "text/plain", "");
                  // 503: Slack retries; the router dedupes what it had.
                  respond(d.error().code == Errc::unavailable ? 503 : 500, "text/plain", d.error().message + "\n");
                });
}

}  // namespace sessionturn
