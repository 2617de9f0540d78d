// The Telegram adapter: the Bot API (https://core.telegram.org/bots/api) as a ChatAdapter for the
// Router. Inbound by getUpdates long polling (the offset kept in the router's store, saved only after
// the updates before it were accepted) or by webhook (the secret token checked in constant time);
// outbound sendMessage / editMessageText in HTML parse mode with a plain-text retry when Telegram
// cannot parse the entities, inline keyboards for the agent's questions, typing actions, per-chat
// pacing and 429 retry_after honoured. docs/bridges.md shows a bot set up end to end.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/http.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn {

class Router;

struct TelegramCommand {
  std::string command;      // 1-32 characters of [a-z0-9_], without the '/'
  std::string description;  // 1-256 characters
};

// The chat commands the Router understands, for setMyCommands.
std::vector<TelegramCommand> DefaultTelegramCommands();

struct TelegramOptions {
  std::string token;  // the bot token from BotFather; never logged (error messages show "<redacted>")
  // The Bot API base: requests go to <api_url>/bot<token>/<method>. http:// is accepted (tests, proxies).
  std::string api_url = "https://api.telegram.org";
  HttpTls tls;        // verification on by default
  std::string proxy;  // as HttpRequest::proxy
  // getUpdates long-poll timeout (the server answers at once when updates are waiting).
  std::chrono::seconds poll_timeout{50};
  std::chrono::milliseconds request_timeout{30'000};  // every other call
  // Pacing (Telegram's limits): one message per this interval per chat, and in groups at most
  // group_messages_per_minute per minute. Edits count; typing actions and callback answers do not.
  std::chrono::milliseconds chat_interval{1000};
  int group_messages_per_minute = 20;
  // A call that failed before the server saw it, or with a 5xx, is tried this many times in all.
  int max_attempts = 3;
};

// What getMe says about the bot.
struct TelegramBotInfo {
  std::int64_t id = 0;
  std::string username;  // without '@'
  std::string first_name;
  bool can_read_all_group_messages = false;  // privacy mode off
};

struct TelegramStats {
  std::uint64_t updates_received = 0;
  std::uint64_t updates_ignored = 0;    // not for the router (stickers, service messages): logged at debug
  std::uint64_t calls = 0;              // Bot API calls made
  std::uint64_t call_errors = 0;        // calls that ended in an error
  // call_errors by the Bot API's error_code ("429", "400", ...), or the Errc's name when no answer
  // came ("timeout", "connection_failed").
  std::map<std::string, std::uint64_t> errors_by_code;
  std::uint64_t rate_limited = 0;       // 429s
  std::uint64_t plain_text_retries = 0; // HTML refused, sent again as plain text
  std::uint64_t pacing_waits = 0;       // sends that waited for their chat's pace
  std::uint64_t webhook_refused = 0;    // webhook requests with a missing or wrong secret
};

// Thread-safety: every method may be called from any thread; the adapter's work runs on the Context.
// The Context (and the Router passed to StartPolling / HandleWebhook) must outlive the adapter.
class TelegramAdapter : public ChatAdapter {
 public:
  // Errc::invalid_argument for an empty token, a token with characters a URL path cannot carry, or
  // an api_url that is not http(s).
  static Result<std::unique_ptr<TelegramAdapter>> Create(Context& context, TelegramOptions options);
  ~TelegramAdapter() override;
  TelegramAdapter(const TelegramAdapter&) = delete;
  TelegramAdapter& operator=(const TelegramAdapter&) = delete;

  // getMe. Errc::unauthorized when Telegram refused the token (its description in the message, the
  // token never). Must succeed before polling or webhooks: the bot's id and name decide mentions.
  void AsyncConnect(std::function<void(Result<TelegramBotInfo>)> done);
  Result<TelegramBotInfo> Connect();  // blocking; not on a Context worker (Errc::would_block)
  // setMyCommands.
  void AsyncSetCommands(std::vector<TelegramCommand> commands, std::function<void(Status)> done);
  // setWebhook with the secret (Telegram sends it back in X-Telegram-Bot-Api-Secret-Token), or
  // deleteWebhook when `url` is empty (polling needs that).
  void AsyncSetWebhook(std::string url, std::string secret, std::function<void(Status)> done);

  // Long polling into `router`: updates are handed over in order and the offset saved once the router
  // took them; a delivery the router could not store is fetched again. `on_fatal` runs once when
  // polling cannot go on: another poller on the token (Errc::conflict, named as such), a webhook set
  // (Errc::conflict), the token revoked (Errc::unauthorized). Transient failures are retried with
  // backoff. Connect first.
  void StartPolling(Router& router, std::function<void(Error)> on_fatal);
  // The poll in flight is cancelled; idempotent. Off a Context worker it returns once no update can
  // reach the router any more (so the router may be destroyed next); on a worker it only requests that.
  void StopPolling();
  // The poll loop has had a successful answer since it (re)started (for /readyz).
  bool Polling() const noexcept;

  // One webhook request: `secret_header` is X-Telegram-Bot-Api-Secret-Token as received (nullopt
  // when absent). `respond(status, body)` runs once: 401 when the secret is missing or wrong
  // (compared in constant time; nothing routed), 400 for a body that is not an update, 503 when the
  // router could not take it now (Telegram delivers it again), 200 once it was accepted.
  void HandleWebhook(std::optional<std::string_view> secret_header, std::string_view body, Router& router,
                     std::function<void(int status, std::string body)> respond);
  // The secret HandleWebhook checks; empty refuses every request (fails closed).
  void SetWebhookSecret(std::string secret);

  // ChatAdapter.
  ChatCapabilities Capabilities() const override;
  void AsyncPost(const ThreadRef& where, OutboundMessage message, ChatHandler<std::string> handler) override;
  void AsyncEdit(const ThreadRef& where, const std::string& message_id, OutboundMessage message,
                 ChatStatusHandler handler) override;
  void AsyncTyping(const ThreadRef& where, ChatStatusHandler handler) override;

  TelegramStats Stats() const;
  const TelegramBotInfo& bot() const noexcept;  // after Connect

  struct Impl;

 private:
  explicit TelegramAdapter(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Constant-time equality of a received secret and the expected one (both hashed first, so neither
// the contents nor the length leak through timing). An empty expected secret matches nothing.
bool SecretEquals(std::string_view expected, std::string_view received);

}  // namespace sessionturn
