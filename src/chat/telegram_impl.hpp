// The Telegram adapter's insides (chat/telegram.hpp): the Bot API call layer and per-chat pacing
// (telegram_adapter.cpp), inbound polling and webhooks (telegram_inbound.cpp).
#pragma once
#include <asio.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "sessionturn/chat/telegram.hpp"
#include "sessionturn/http.hpp"
#include "chat/pacer.hpp"

namespace sessionturn {

struct TelegramAdapter::Impl : std::enable_shared_from_this<Impl> {
  using Clock = std::chrono::steady_clock;
  using JsonHandler = std::function<void(Result<nlohmann::json>)>;

  Impl(Context& c, TelegramOptions o);

  Context& context;
  const TelegramOptions options;
  asio::strand<asio::io_context::executor_type> strand;  // pacing and polling state

  mutable std::mutex mu;  // guards everything below up to the strand-only part
  std::shared_ptr<HttpClient> http;  // reset by Close
  bool closed = false;
  TelegramBotInfo bot;
  TelegramStats stats;
  std::set<std::string> unsupported_logged;  // methods the server lacks, logged once each
  std::string webhook_secret;

  chat::Pacer pacer;  // per-chat pacing, on the strand

  // ---- strand only ----
  bool polling = false;
  Router* router = nullptr;
  std::function<void(Error)> on_fatal;
  std::int64_t offset = 0;
  int poll_failures = 0;
  // The next getUpdates answers at once (timeout 0): the first after a (re)start or a failure, so
  // readiness shows within a round trip rather than a long poll.
  bool quick_poll = true;
  HttpCall poll_call;
  std::shared_ptr<asio::steady_timer> poll_timer;
  std::atomic<bool> poll_ok{false};

  // Calls `method` with JSON `params`; `done` gets "result" or the mapped error (token redacted), on
  // a worker. Failures before the server saw the call, and 5xx of calls safe to repeat, are tried
  // again (options.max_attempts in all).
  // Returns the first attempt's call (a default handle when the adapter is closed).
  HttpCall Call(std::string method, nlohmann::json params, JsonHandler done, std::chrono::milliseconds timeout = {},
                int attempt = 1);
  // Calls `method` with `html`; when Telegram cannot parse its entities, once more with `plain`.
  void CallWithPlainFallback(std::string method, nlohmann::json html, nlohmann::json plain, JsonHandler done);
  // Runs `send` (on the strand) when `chat`'s pace allows another message.
  void Paced(const std::string& chat, std::function<void()> send);
  void Penalize(const std::string& chat, std::chrono::milliseconds retry_after);
  void Bump(std::uint64_t TelegramStats::*counter);
  void Log(LogLevel level, const std::string& text) const;
  std::string Redacted(std::string text) const;
  void Close();

  // telegram_inbound.cpp
  void Poll();
  void PollAfter(std::chrono::milliseconds delay);
  void PollFailed(const Error& error);
  void Dispatch(nlohmann::json updates);
  std::function<void(std::string_view)> AckFor(std::string callback_query_id);
};

}  // namespace sessionturn
