// The Slack adapter's insides (chat/slack.hpp): the Web API call layer, pacing and the outbound side
// (slack_adapter.cpp), what both inbound modes share: parsed deliveries handed to the router, names
// from users.info (slack_inbound.cpp), and Socket Mode's connections (slack_socket.cpp).
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
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/pacer.hpp"
#include "chat/slack_wire.hpp"
#include "sessionturn/chat/slack.hpp"
#include "sessionturn/http.hpp"
#include "sessionturn/router.hpp"
#include "ws/websocket.hpp"

namespace sessionturn {

struct SlackAdapter::Impl : std::enable_shared_from_this<Impl> {
  using Clock = std::chrono::steady_clock;
  using JsonHandler = std::function<void(Result<nlohmann::json>)>;
  using DoneHandler = std::function<void(Result<Disposition>)>;

  // Threads the bot has posted into, remembered so that a reply there counts as addressed to it.
  static constexpr std::size_t kMaxBotThreads = 10000;
  // Users whose names are cached at most (a bot in a huge workspace must not grow without end).
  static constexpr std::size_t kMaxCachedUsers = 10000;
  // users.info is asked before the router takes a message, and Slack wants an acknowledgement within
  // 3 s: the lookup gets this long, else the user's id stands for the name.
  // Both lookups (the author's name, whether the bot is in a thread) may come before one message is
  // handed over, each tried once: 2 x 1.2 s stays inside the 3 s.
  static constexpr std::chrono::milliseconds kUserLookupTimeout{1200};
  // A failed lookup is not repeated for this long (a 429 storm must not turn into one call per message).
  static constexpr std::chrono::seconds kFailedLookupTtl{60};
  // A thread found without the bot is not asked about again for this long (a busy channel's threads
  // must not cost a call per message).
  static constexpr std::chrono::minutes kForeignThreadTtl{10};

  Impl(Context& c, SlackOptions o);

  Context& context;
  const SlackOptions options;
  asio::strand<asio::io_context::executor_type> strand;

  mutable std::mutex mu;  // guards everything below up to the strand-only part
  std::shared_ptr<HttpClient> http;  // reset by Close
  bool closed = false;
  SlackBotInfo bot;
  SlackStats stats;
  std::set<std::string> unsupported_logged;
  struct CachedUser {
    std::string name;
    Clock::time_point expires;
  };
  std::unordered_map<std::string, CachedUser> users;
  std::unordered_set<std::string> bot_threads;  // "channel/thread_ts"
  std::deque<std::string> bot_threads_order;

  chat::Pacer pacer;

  // ---- strand only ----
  std::unordered_map<std::string, std::vector<std::function<void(std::string)>>> lookups;  // in flight
  // Threads found (through conversations.replies) not to hold a message of the bot: not asked again
  // until the entry expires. "channel/thread_ts".
  std::unordered_map<std::string, Clock::time_point> foreign_threads;
  std::unordered_map<std::string, std::vector<std::function<void(Result<bool>)>>> thread_checks;  // in flight
  bool status_disabled = false;
  std::unordered_map<std::string, Clock::time_point> status_sent;  // "channel/thread_ts"
  // Socket Mode.
  struct Conn {
    std::uint64_t id = 0;
    std::shared_ptr<ws::WebSocket> socket;
    bool hello = false;
    bool retiring = false;  // Slack said disconnect: replaced once the next connection says hello
    std::shared_ptr<asio::steady_timer> hello_timer;
  };
  bool socket_running = false;
  bool inbound_stopped = false;  // StopInbound: no delivery reaches a router any more
  Router* router = nullptr;
  std::function<void(Error)> on_fatal;
  std::vector<std::shared_ptr<Conn>> conns;
  bool opening = false;
  int connect_failures = 0;
  std::uint64_t next_conn_id = 1;
  std::shared_ptr<asio::steady_timer> reconnect_timer;
  std::atomic<bool> socket_ok{false};

  // Calls `method`: JSON body, or a form for the methods Slack reads only as forms; the bot token, or
  // the app token. `done` gets the answer object or the mapped error, on a worker. Failures before
  // Slack saw the call, and 5xx of calls safe to repeat, are tried again (options.max_attempts).
  HttpCall Call(std::string method, nlohmann::json params, JsonHandler done, std::chrono::milliseconds timeout = {},
                bool app_token = false, int attempt = 1);
  // Calls `method` with `with_blocks`; when Slack refuses the blocks, once more with `text_only`.
  void CallWithTextFallback(std::string method, nlohmann::json with_blocks, nlohmann::json text_only,
                            JsonHandler done);
  // Call, tried once (the lookups inbound messages wait for: a retry would outlast Slack's 3 s).
  HttpCall CallOnce(std::string method, nlohmann::json params, JsonHandler done, std::chrono::milliseconds timeout) {
    return Call(std::move(method), std::move(params), std::move(done), timeout, false, options.max_attempts);
  }
  void Bump(std::uint64_t SlackStats::*counter);
  void Log(LogLevel level, const std::string& text) const;
  std::string Redacted(std::string text) const;
  void RememberThread(const ThreadRef& where);
  bool BotInThread(const std::string& chat, const std::string& thread) const;
  SlackBotInfo Bot() const;
  void Close();

  // slack_inbound.cpp
  // The display name of `user` (cache, else users.info), then `then` on the strand; the id itself
  // when the lookup fails.
  void NameOf(const std::string& user, std::function<void(std::string)> then);
  // Hands one parsed delivery to `router`; `done` runs once it was stored (or found a duplicate,
  // ignored, refused) or failed. `live` (checked on the strand before the router is called) says the
  // router may still be used.
  // Whether the bot has posted in a channel thread it does not remember (it forgets them when it
  // restarts): conversations.replies tells, once per thread; then `then(in_thread)` on the strand, or
  // the error when Slack could not tell (the message is then left for Slack to deliver again).
  void CheckThread(const std::string& chat, const std::string& thread, std::function<void(Result<bool>)> then);
  void Deliver(slack::ParsedEvent parsed, Router& router, std::function<bool()> live, DoneHandler done);
  // The message part of Deliver, once its thread is known: the author's name, then the router.
  void DeliverMessage(InboundMessage message, Router& router, std::function<bool()> live, DoneHandler done);
  std::function<void(std::string_view)> AckFor(const InboundAction& action);

  // slack_socket.cpp
  void OpenConnection();
  void OnConnected(Result<std::shared_ptr<ws::WebSocket>> socket);
  void OnFrame(const std::shared_ptr<Conn>& conn, Result<ws::WebSocket::Message> frame);
  void OnEnvelope(const std::shared_ptr<Conn>& conn, slack::Envelope envelope);
  void OnClosed(const std::shared_ptr<Conn>& conn, const Error& error);
  void ConnectFailed(const Error& error);
  void Fatal(Error error);
  void CloseConnections();
  void UpdateSocketOk();
};

}  // namespace sessionturn
