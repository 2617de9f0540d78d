// The Slack adapter: a Slack app (https://api.slack.com) as a ChatAdapter for the Router. Inbound by
// Socket Mode (apps.connections.open, a WebSocket per connection, every envelope acknowledged once the
// router stored it, `disconnect` refreshes overlapped so nothing is missed) or by the Events API (the
// v0 request signature checked in constant time, stale timestamps refused, fails closed without a
// signing secret). Outbound chat.postMessage / chat.update as Block Kit with a fallback text, question
// options as buttons, per-channel pacing, 429 Retry-After honoured, display names from users.info
// (cached), thread context from conversations.replies, assistant.threads.setStatus while a turn runs
// (best effort). docs/bridges.md shows an app set up end to end.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/http.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn {

class Router;

struct SlackOptions {
  std::string bot_token;       // xoxb-...: every Web API call; never logged
  std::string app_token;       // xapp-...: apps.connections.open (Socket Mode only); never logged
  std::string signing_secret;  // Events API request signatures; empty refuses every request
  // The Web API base: requests go to <api_url>/<method>. http:// is accepted (tests, proxies).
  std::string api_url = "https://slack.com/api";
  HttpTls tls;        // verification on by default (also for the Socket Mode WebSocket)
  std::string proxy;  // as HttpRequest::proxy (Web API calls)
  std::chrono::milliseconds request_timeout{30'000};
  // Pacing: one post or update per this interval per channel (Slack's chat.postMessage allows about
  // one message per second per channel; bursts are tolerated briefly, sustained ones are 429'd).
  std::chrono::milliseconds channel_interval{1000};
  // A call that failed before Slack saw it, or with a 5xx, is tried this many times in all (posts
  // only when they cannot have reached Slack).
  int max_attempts = 3;
  // users.info answers are kept this long (display names change rarely; a lookup per message would
  // cost a Tier 4 call each time).
  std::chrono::seconds user_cache_ttl{3600};
  // assistant.threads.setStatus expires after two minutes: renewed this often while a turn runs.
  std::chrono::seconds status_refresh{90};
  std::string status_text = "is working on it…";
  // Socket Mode liveness: our ping every ping_interval; a connection silent for pong_timeout after a
  // ping is dropped and replaced, so a half-open socket is noticed within a minute.
  std::chrono::milliseconds ping_interval{20'000};
  std::chrono::milliseconds pong_timeout{20'000};
  // A new Socket Mode connection must say hello within this, else it is dropped and tried again.
  std::chrono::milliseconds hello_timeout{30'000};
  // Events API: a request whose X-Slack-Request-Timestamp is further than this from now is refused
  // (Slack's advice: five minutes, against replays).
  std::chrono::seconds max_request_age{300};
};

// What auth.test says about the bot.
struct SlackBotInfo {
  std::string team_id;
  std::string team;     // the workspace's name
  std::string user_id;  // the bot's user: mentions are <@user_id>
  std::string bot_id;   // B...: marks the bot's own messages
  std::string user;     // the bot user's name
  std::string url;      // the workspace URL
};

struct SlackStats {
  std::uint64_t events_received = 0;     // envelopes and Events API requests with something in them
  std::uint64_t events_ignored = 0;      // not for the router (joins, other subtypes): logged at debug
  std::uint64_t redeliveries = 0;        // Socket Mode retry_attempt > 0, Events API X-Slack-Retry-Num
  std::uint64_t calls = 0;               // Web API calls made
  std::uint64_t call_errors = 0;         // calls that ended in an error
  // call_errors by Slack's error code ("ratelimited", "invalid_blocks", ...), "http_<status>" when the
  // answer had none, or the Errc's name when no answer came ("timeout", "connection_failed").
  std::map<std::string, std::uint64_t> errors_by_code;
  std::uint64_t rate_limited = 0;        // 429s
  std::uint64_t pacing_waits = 0;        // sends that waited for their channel's pace
  std::uint64_t plain_text_retries = 0;  // blocks refused, sent again as text only
  std::uint64_t socket_connections = 0;  // Socket Mode connections that said hello
  std::uint64_t socket_disconnects = 0;  // `disconnect` envelopes and dropped connections
  std::uint64_t requests_refused = 0;    // Events API requests with a bad, stale or missing signature
};

// An Events API request as the HTTP server received it (the header values, "" when absent).
struct SlackEventsRequest {
  std::string content_type;
  std::string signature;  // X-Slack-Signature
  std::string timestamp;  // X-Slack-Request-Timestamp
  std::string retry_num;  // X-Slack-Retry-Num
  std::string retry_reason;
  std::string body;  // raw, exactly as received (the signature covers it)
};

// Thread-safety: every method may be called from any thread; the adapter's work runs on the Context.
// The Context (and the Router passed to StartSocketMode / HandleEvents) must outlive the adapter.
class SlackAdapter : public ChatAdapter {
 public:
  // Errc::invalid_argument for an empty bot token, a token with characters a header cannot carry, or
  // an api_url that is not http(s).
  static Result<std::unique_ptr<SlackAdapter>> Create(Context& context, SlackOptions options);
  ~SlackAdapter() override;
  SlackAdapter(const SlackAdapter&) = delete;
  SlackAdapter& operator=(const SlackAdapter&) = delete;

  // auth.test. Errc::unauthorized when Slack refused the token (its error code in the message, the
  // token never). Must succeed before inbound: the bot's user and bot ids decide mentions and self.
  void AsyncConnect(std::function<void(Result<SlackBotInfo>)> done);
  Result<SlackBotInfo> Connect();  // blocking; not on a Context worker (Errc::would_block)

  // Socket Mode into `router`. Each envelope is acknowledged once the router has stored its message
  // (Slack delivers again what is not acknowledged, and the router dedupes); button presses at once.
  // A `disconnect` opens the next connection before the old one closes. `on_fatal` runs once when it
  // cannot go on: the app token refused (Errc::unauthorized), Socket Mode turned off for the app
  // (`link_disabled`, Errc::forbidden). Transient failures reconnect with backoff. Connect first.
  void StartSocketMode(Router& router, std::function<void(Error)> on_fatal);
  // Stops both inbound modes: closes every Socket Mode connection, and Events API deliveries still
  // waiting (for a name or a thread lookup) get 503 instead of reaching the router. Idempotent. Off
  // a Context worker it returns once no delivery can reach the router any more (so the router may be
  // destroyed next); on a worker it only requests that. Envelopes not acknowledged yet are delivered
  // again by Slack to the next start. StartSocketMode opens inbound again.
  void StopInbound();
  // A Socket Mode connection has said hello and is open (for /readyz).
  bool SocketConnected() const noexcept;

  // One Events API request (events, interactivity and slash commands share one URL). `respond(status,
  // content_type, body)` runs once: 401 for a missing, malformed, wrong or stale signature (nothing
  // routed; the signature compared in constant time), 400 for a body that is none of Slack's, the
  // challenge for url_verification, 503 when the router could not take it now (Slack retries), 200
  // once it was accepted. X-Slack-Retry-Num is counted; the router dedupes the redelivery.
  void HandleEvents(const SlackEventsRequest& request, Router& router,
                    std::function<void(int status, std::string content_type, std::string body)> respond);

  // ChatAdapter.
  ChatCapabilities Capabilities() const override;
  void AsyncPost(const ThreadRef& where, OutboundMessage message, ChatHandler<std::string> handler) override;
  void AsyncEdit(const ThreadRef& where, const std::string& message_id, OutboundMessage message,
                 ChatStatusHandler handler) override;
  // assistant.threads.setStatus for a thread (renewed every status_refresh; nothing outside threads).
  // The first refusal (the app is not an assistant app, a missing scope) turns it off, logged once.
  void AsyncTyping(const ThreadRef& where, ChatStatusHandler handler) override;
  void AsyncFetchThread(const ThreadRef& where, const std::string& before_message_id, std::size_t max_messages,
                        ChatHandler<std::vector<ThreadHistoryMessage>> handler) override;

  SlackStats Stats() const;
  SlackBotInfo bot() const;  // after Connect

  struct Impl;

 private:
  explicit SlackAdapter(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// The chat commands' words for `/sessionturn WORD` (Slack's slash command) and `@bot WORD`.
inline constexpr const char* kSlackSlashCommand = "/sessionturn";

}  // namespace sessionturn
