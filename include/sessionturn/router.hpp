// The Router: chat threads as persistent conversations with Sessions (DESIGN.md §6, docs/routing.md).
// A bot's adapter feeds it what the platform delivers (HandleMessage, HandleAction); the Router
// matches routes, dedupes redeliveries, keeps one serial queue per Session with receipts, posts a
// placeholder and edits live progress into it, asks the agent's questions in the thread, runs chat
// commands, and edits the reply into the placeholder. Everything it must not lose is in its store
// (SQLite under the state root): a bot killed mid-turn delivers the reply after it comes back.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sessionturn/backend.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn {

// Who may answer an agent's question in the chat.
enum class AnswerPolicy {
  turn_author,    // the author of the turn that asked (and the route's admins)
  allowed_users,  // anyone the route lets talk (and the route's admins)
};

// How a turn ended, for metrics (RouterOptions::on_turn_finished).
struct RouterTurnOutcome {
  std::string session;
  // "completed", "failed", "interrupted", "removed", or the error that ended it ("timeout",
  // "unavailable", ...: the Errc's name).
  std::string status;
  std::chrono::milliseconds duration{0};  // from its start (Ensure included) to its end
  std::chrono::milliseconds wake{0};      // of that, waiting for the Session to be ready (waking it)
};

struct RouterOptions {
  // Session names: SessionName(session_prefix, platform, owner_uid, chat, thread). owner_uid names
  // the bot (the spawner's UID in a cluster) so two bots never share a Session.
  std::string session_prefix = "chat";
  std::string owner_uid;
  std::vector<RouteConfig> routes;  // at least one; the first that matches a message handles it
  // The store (SQLite). Empty: <DefaultStateDir()>/router.db.
  std::string store_path;
  // Waiting turns per Session (beyond the running one); more get a "too many queued" reply.
  std::size_t max_queued = 8;
  // Turns in flight across all Sessions; the rest wait in order, with receipts.
  std::size_t max_in_flight = 64;
  // Progress edits: at most one per this interval per chat (and never more often than the adapter's
  // edit rate allows); a placeholder's post counts as one.
  std::chrono::milliseconds progress_interval{1000};
  std::chrono::milliseconds turn_timeout = kDefaultTurnTimeout;
  std::chrono::milliseconds wait_ready_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds answer_timeout{std::chrono::minutes(10)};
  AnswerPolicy answerers = AnswerPolicy::turn_author;
  // Decline every question the agent asks instead of asking it in the chat (the thread gets a note
  // saying so, and the agent goes on without the answer).
  bool decline_questions = false;
  // Called on the router's strand when a turn ends (not for one left running at shutdown): keep it
  // quick (count, observe) and do not call the Router's blocking methods from it.
  std::function<void(const RouterTurnOutcome&)> on_turn_finished;
  // The first turn of a platform thread carries up to this many earlier messages (when the adapter
  // can fetch them). 0: none.
  std::size_t thread_context_messages = 20;
  bool show_usage = true;  // a token-usage footer when the runtime reported usage
  // The bot's user name, for Telegram's "/cmd@bot" commands.
  std::string bot_username;
  // Graceful shutdown: the notices ("the bot is restarting...") go out with this many in flight at
  // once, and the shutdown waits this long for them at most.
  std::size_t shutdown_notice_concurrency = 8;
  std::chrono::milliseconds shutdown_budget{10'000};
  // Failed deliveries of a reply part: attempts before the thread is told and the part is left in the
  // outbox (retried later, and after a restart).
  int delivery_attempts = 3;
};

// What HandleMessage did with a message. The adapter acknowledges the platform's delivery once the
// handler ran (the message is in the store by then when it was accepted).
enum class Disposition {
  accepted,    // queued for its Session (or answered a question, or ran a command)
  duplicate,   // a redelivery of one already handled
  ignored,     // no route takes it (or it is the bot's own): nothing was sent
  refused,     // a route took it but it was turned away (queue full): the thread was told
};
std::string_view ToString(Disposition d) noexcept;  // "accepted", "duplicate", "ignored", "refused"

struct RouterStats {
  std::size_t sessions = 0;        // Sessions with state in this process
  std::size_t turns_in_flight = 0;
  std::size_t turns_waiting = 0;   // queued behind a Session's running turn or the admission limit
  std::size_t open_questions = 0;
  std::size_t outbox = 0;          // reply parts not delivered yet
  std::uint64_t turns_completed = 0;
  std::uint64_t replies_delivered = 0;  // replies whose every part reached the chat
  std::uint64_t messages_accepted = 0;
  std::uint64_t edits_sent = 0;
  std::uint64_t edits_dropped = 0;  // progress edits skipped by rate limits (never a final reply)
};

// Thread-safety: every method may be called from any thread; the Router's work runs on its strand on
// the Context. The backend, the adapter and the Context must outlive the Router.
class Router {
 public:
  // Opens the store and compiles the routes. Errc::invalid_argument for unusable options (no routes,
  // a bad regex, max_queued 0...), naming them; the store's errors (Errc::io_error, Errc::conflict
  // when another router holds it).
  static Result<std::unique_ptr<Router>> Create(Context& context, SessionBackend& backend, ChatAdapter& adapter,
                                                RouterOptions options);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Picks up where the last run stopped: re-attaches to every turn that was in flight, queues the
  // accepted messages that had not run, re-binds open questions and retries undelivered replies.
  // Call once, before or after the first HandleMessage.
  void Start();

  // Takes a message the platform delivered. `done` runs once (on a worker) when the message is
  // durably accepted, or was found a duplicate, ignored or refused; acknowledge the delivery then.
  // Errors: Errc::invalid_argument (no platform, chat or message id), Errc::unavailable (shutting
  // down: do not acknowledge, the platform will redeliver), the store's Errc::io_error.
  void HandleMessage(InboundMessage message, std::function<void(Result<Disposition>)> done = {});
  // A button press; acknowledged through action.ack (with a note when the button expired).
  void HandleAction(InboundAction action);

  // Stops accepting, tells every thread with a running or queued turn once that the bot is
  // restarting (its turn keeps running; the reply comes after the restart), and leaves the turns
  // running in their Sessions. `done` runs once when the notices went out or the budget ran out.
  void Shutdown(std::function<void()> done = {});
  // Blocks until Shutdown is done (not on a Context worker: Errc::would_block).
  Status ShutdownAndWait();

  RouterStats Stats() const;

  // A named cursor kept in the router's store beside its state: an adapter's delivery position
  // (Telegram's getUpdates offset), saved after the messages before it were accepted, so a restart
  // neither loses nor repeats a delivery. `done` runs once, on a worker: the value, or nullopt when it
  // was never saved. Errc::unavailable once the router is being destroyed; the store's Errc::io_error.
  void LoadCursor(std::string name, std::function<void(Result<std::optional<std::string>>)> done);
  void SaveCursor(std::string name, std::string value, std::function<void(Status)> done = {});

  struct Impl;

 private:
  explicit Router(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace sessionturn
