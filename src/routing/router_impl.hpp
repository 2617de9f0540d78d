// The Router's insides (router.hpp): one strand on the Context runs all of it, so nothing here has a
// lock except the stats. The files split it by job:
//   router.cpp            the public facade, Create, Stats
//   router_intake.cpp     a delivered message: validate, match, route to a Session, dedupe, accept
//   router_turns.cpp      a Session's queue, the admission limit, one turn's life, its result
//   router_live.cpp       messages edited in place (receipts, progress) under the platform's rate
//   router_delivery.cpp   the final reply: rendered, split, delivered from the outbox
//   router_questions.cpp  the agent's questions in the thread, and button presses
//   router_commands.cpp   chat commands
//   router_restart.cpp    Start (re-attach after a restart) and Shutdown
#pragma once
#include <asio.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "routing/match.hpp"
#include "routing/store.hpp"
#include "routing/string_map.hpp"
#include "sessionturn/router.hpp"

namespace sessionturn {

namespace routing {

using Strand = asio::strand<asio::io_context::executor_type>;
using SteadyTime = std::chrono::steady_clock::time_point;

struct ChatPace;
struct SessionRun;

// A message the router keeps editing (a receipt, a turn's progress): the newest text wins, sent no
// more often than the chat's edit budget allows. Progress is droppable; the final reply is not and
// does not go through here (router_delivery.cpp), but waits for an edit in flight to land first.
struct LiveMessage {
  ThreadRef where;
  std::string message_id;  // empty until the post landed
  std::string wanted;      // the Markdown it should show (rendered when an edit goes out)
  std::string shown;       // the Markdown it shows (as far as we know)
  // Progress: `wanted` is stale and `progress` makes it, when the next edit goes out (a turn's events
  // come much more often than its edits). An explicit text (SetLive) replaces it.
  std::function<std::string()> progress;
  bool stale = false;
  bool posting = false;    // the post is in flight
  bool editing = false;    // an edit is in flight
  bool retired = false;    // the final reply took over: no more progress
  // The work row the post is for (a waiting message's receipt, which becomes its turn's placeholder):
  // indexed with it once it lands, so a restart edits the same message, not a new one. 0: none.
  std::int64_t inbox_id = 0;
  std::unique_ptr<asio::steady_timer> timer;  // the next paced edit, when one is due
  std::vector<std::function<void()>> on_idle;  // run once no post or edit is in flight
  ChatPace* pace = nullptr;  // its chat's, in Router::Impl::paces (never erased), found at the first use
};

// One chat's edit budget (DESIGN.md §6: never more than the adapter allows, by default one per second).
struct ChatPace {
  SteadyTime next_edit{};  // no edit in this chat before this
};

// An accepted message waiting in its Session's queue (the router's; the runtime has its own).
struct Waiting {
  std::int64_t inbox_id = 0;  // its Session is the one whose queue holds it
  InboundMessage message;
  ThreadRef where;  // where the reply goes
  std::size_t route = 0;
  std::shared_ptr<LiveMessage> receipt;  // "Queued — position 2", later the turn's placeholder
  // Set: the message's turn was recorded with its acceptance (its idle Session was to run it at once,
  // a slot free), under this request id: in the store it is a turn in flight, not in the inbox.
  std::string request_id;
};

struct QuestionRun;

// What one of a turn's events changes in its thread: taken out of the Event on the driver's side, so
// the router's strand is handed a few strings, not a copy of every event (its raw line, its JSON
// members). Events that change nothing shown are not handed over at all.
struct TurnSignal {
  enum class Kind { started, ours_queued, updated, tool_started, tool_completed, delta, message, usage };
  Kind kind = Kind::started;
  std::string text;  // delta and message: the text; tool_started: the first line of its input (<= 80 bytes)
  std::string tool_name;
  std::string turn_id;  // ours_queued, updated
  std::int64_t revision = 0;
  // usage only. Held apart so that a signal is 120 bytes: the eight a turn's first read usually brings
  // fit one small allocation (TurnRun::signals), which malloc serves from its per-thread cache.
  std::unique_ptr<Usage> usage;
  // Nothing for the events the thread is not shown (another client's messages, output, history...).
  static std::optional<TurnSignal> Of(const Event& e, std::string_view request_id);
};

// Where a turn is before its reply streams: shown in its progress, and whether an edit can still reach it.
enum class TurnStage : std::uint8_t { starting, waking, queued, running };

// What the thread asked to change about a turn that had not started (an edit, a deletion, `stop`):
// held apart from TurnRun, as few turns have one.
struct TurnChange {
  // Came while the prompt was on its way to the runtime, or while another change was: the latest
  // one, applied once the runtime has the message or the change before it came back.
  std::unique_ptr<InboundMessage> pending;
  bool in_flight = false;  // an edit or removal is on its way to the runtime (one at a time)
  // Withdrawn before its prompt was sent (deleted, `stop`): what its placeholder says. The turn then
  // ends without sending it.
  std::string withdrawn;
};

// One turn in flight.
// Kept to 1,016 bytes (checked below): make_shared's one block then stays within the sizes glibc's
// malloc serves from its per-thread cache, and a burst of turn starts does not take its slow path for
// large blocks (the bools are together, and what few turns use is held apart).
struct TurnRun {
  std::string session;
  // Its Session's state, held weakly (the Session holds its running turn): looked up by name only
  // when it is gone (SessionRun::gone) or was never set (a turn re-attached after a restart).
  std::weak_ptr<SessionRun> run;
  TurnStage stage = TurnStage::starting;
  bool direct = false;    // sent to the Session's Driver without a WaitReady first (SessionRun::ready_until)
  bool accepted = false;
  bool attached = false;  // re-attached after a restart
  bool message_lost = false;  // re-attached, its stored message damaged: it cannot be submitted again
  bool done = false;
  bool with_context = false;  // the thread's earlier messages were fetched for the prompt (maybe none)
  bool signals_posted = false;  // under signals_mu: a job to take `signals` is queued
  bool submitted = false;  // its prompt went to the Driver (AsyncSubmitTurn): a change then goes to the runtime
  bool shared = false;  // merged with another client's prompt (Driver's on_shared): not changed or withdrawn
  std::string request_id;
  std::int64_t inbox_id = 0;
  ThreadRef where;
  InboundMessage message;
  std::size_t route = 0;
  std::shared_ptr<LiveMessage> live;  // the placeholder: progress, then the reply
  SteadyTime started{};
  std::chrono::milliseconds wake{0};  // waiting for the Session to be ready (waking it)
  std::string tool;                 // the running tool and its short input
  std::string tail;                 // the end of the streamed reply
  std::unique_ptr<Usage> usage;     // the runtime's latest report, if any (a TurnSignal's, moved)
  TurnRef ref;                      // where it is in the runtime's journal
  std::string open_question;        // the QuestionRun id while the agent waits for an answer
  std::vector<ThreadHistoryMessage> context;  // the earlier messages (an edit rebuilds the prompt with them)
  std::unique_ptr<TurnChange> change;  // made by the first edit, deletion or `stop` before it started
  std::string prompt;               // what was (or will be) submitted
  CancellationSource cancel;
  // Its place in Router::Impl::ticking while it runs (the router's one ticker shows its elapsed time
  // and renews the chat's "typing..." at next_tick, every 5 s from its start); kNotTicking otherwise.
  static constexpr std::size_t kNotTicking = static_cast<std::size_t>(-1);
  std::size_t tick_slot = kNotTicking;
  SteadyTime next_tick{};
  // Signals from the driver's on_event, on their way to the strand: the events of one read (a reply's
  // deltas, its message, the turn's end) become one strand job (OnSignals), not one each. The driver
  // calls from its own strand, so under a lock; `signals_posted` while a job to take them is queued.
  std::mutex signals_mu;
  std::vector<TurnSignal> signals;
};

#if defined(__GLIBCXX__) && !defined(_GLIBCXX_DEBUG) && UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
// glibc's malloc serves blocks of up to 1,032 bytes from its per-thread cache (tcache); larger ones take
// its slow path, and a burst frees them into bins it then consolidates. make_shared adds 16 bytes.
static_assert(sizeof(TurnRun) + 16 <= 1032, "TurnRun grew past 1,016 bytes: hold a rarely used member apart");
static_assert(8 * sizeof(TurnSignal) <= 1032, "TurnSignal grew past 129 bytes: eight no longer fit one small block");
#endif

// A Session with state in this process.
struct SessionRun : std::enable_shared_from_this<SessionRun> {
  std::string name;
  // Erased from Router::Impl::sessions (deleted): a turn or a pending start that still holds it looks
  // the name up instead.
  bool gone = false;
  std::size_t route = 0;
  bool ensured = false;                 // Ensure ran in this process
  std::shared_ptr<Driver> driver;       // once WaitReady handed a connector; dropped when it failed
  // Until then the next turn goes to `driver` at once, without a WaitReady: its runtime completed a
  // turn moments ago. A turn that then cannot connect waits for the Session and is sent after all.
  SteadyTime ready_until{};
  // Each held apart: a message moves through intake, this queue and its turn's start by pointer, not
  // as its many strings.
  std::deque<std::unique_ptr<Waiting>> queue;
  std::shared_ptr<TurnRun> running;
  // Its journal as of the end of its last turn here (last event id, journal id): a new turn's stored
  // cursor, from which a re-attach after a restart finds it by its request id. Unset until a turn
  // here ends in this process: a turn then starts from the journal's beginning (a longer replay).
  TurnCursor journal;
  bool in_admission = false;            // waiting for a slot under max_in_flight
  bool starting = false;                // between admission and the turn's start
  std::size_t accepting = 0;            // accepted in the batch being drained, not queued yet
};

// A question of the agent, asked in a thread.
struct QuestionRun {
  OpenQuestion stored;
  Responder responder;                  // empty after a restart until the re-attached turn asks again
  std::weak_ptr<TurnRun> turn;
  // Every answer given so far, a secret one's too (`stored` keeps how many, and the others' answers).
  std::map<std::string, std::vector<std::string>> answers;
  std::unique_ptr<asio::steady_timer> timeout;
  bool resolved = false;
  // Resolved (answered, expired, its turn ended) before its post came back with the message id: the
  // text the question's message is edited to once the id is known.
  std::string closing_text;
};

}  // namespace routing

struct Router::Impl : std::enable_shared_from_this<Router::Impl> {
  Impl(Context& c, SessionBackend& b, ChatAdapter& a, RouterOptions o, routing::RouteMatcher m,
       std::unique_ptr<routing::RouterStore> s);
  // Commits what was written behind when no Teardown ran (a Stop from a worker, a Stop racing
  // ~Router): the store's close would otherwise roll it back.
  ~Impl();

  Context& context;
  SessionBackend& backend;
  ChatAdapter& adapter;
  const RouterOptions options;
  const ChatCapabilities caps;
  const routing::RouteMatcher matcher;
  std::unique_ptr<routing::RouterStore> store;
  routing::Strand strand;

  // Strand only.
  bool started = false;
  bool shutting_down = false;
  // Teardown ran (~Router): the store is closed and every handler still in flight is dropped when it
  // lands (Run, OnStrand, After and the timers check this first).
  bool torn_down = false;
  bool gauges_due = false;  // a PublishGauges count is posted
  // The gauges' sums over all Sessions, kept where a queue or a running turn changes (a count over
  // every Session at each pass was a large share of a burst's strand time at 1,000 Sessions).
  std::size_t waiting_total = 0;  // messages in the Sessions' queues
  std::size_t running_total = 0;  // Sessions with a running turn
  void SetRunning(routing::SessionRun& s, std::shared_ptr<routing::TurnRun> turn);
  // Rendered router texts (receipts, notes) by their Markdown: the same few, rendered once each.
  mutable routing::StringMap<std::string> rendered;
  std::function<void()> finish_shutdown;  // set while a Shutdown's notices are going out
  std::unordered_map<std::string, std::shared_ptr<routing::SessionRun>> sessions;
  std::deque<std::string> admission;  // Sessions waiting for a slot, in order
  std::size_t in_flight = 0;
  std::unordered_map<std::string, routing::ChatPace> paces;  // by chat key
  std::unordered_map<std::string, std::shared_ptr<routing::QuestionRun>> questions;  // by id
  // Questions resolved here (request id + '\x1f' + input id) while their turn runs: a re-attached
  // turn's replay may show one again, and it must not be asked twice.
  std::unordered_set<std::string> resolved_inputs;
  std::unique_ptr<asio::steady_timer> outbox_timer;
  std::unique_ptr<asio::steady_timer> ticker;  // StartTicking; re-armed while `ticking` has a turn
  bool ticker_armed = false;
  std::vector<std::shared_ptr<routing::TurnRun>> ticking;  // running turns, each at its tick_slot
  std::unordered_set<std::int64_t> delivering;  // outbox entries with a delivery running
  // Turns whose reply goes out without having been stored (SendStored): their record stays, so that a
  // restart before the reply is in delivers it again, and is finished once it is.
  std::unordered_set<std::string> unstored_turns;
  bool pass_open = false;  // the store's batch holds writes behind, and a ClosePass is posted
  std::size_t behind_writes = 0;  // in the open pass: what a failed commit loses, for its log line
  std::vector<std::int64_t> behind_removals;  // outbox rows removed in the open pass
  std::vector<std::string> behind_finishes;   // turns (request ids) whose reply went into its placeholder
  // What waits for the open pass's commit (DurablyInPass), run after it with its outcome.
  std::vector<std::function<void(Impl&, Status)>> pass_waiters;
  std::uint64_t next_question = 0;
  std::mt19937_64 rng{std::random_device{}()};
  // chat key + session + admin: the admin confirms within kDeleteConfirmWindow of asking.
  std::map<std::string, routing::SteadyTime> pending_deletes;
  // A `sessions` picker: where it was posted, the Sessions in the order their buttons show, and until
  // when its buttons act (forgotten on restart).
  struct Picker {
    ThreadRef where;
    std::vector<std::string> sessions;
    routing::SteadyTime expires{};
  };
  std::unordered_map<std::string, Picker> pickers;
  void KeepPicker(const std::string& id, Picker picker);  // the expired go, and the oldest past kMaxPickers

  mutable std::mutex stats_mu;
  RouterStats stats;

  // ---- helpers (router.cpp) ----
  template <typename Fn>
  void Run(Fn&& fn) {
    asio::post(strand, [self = shared_from_this(), fn = std::forward<Fn>(fn)]() mutable {
      if (!self->torn_down) fn(*self);
    });
  }
  // Whether a completion came already, safe to ask from any thread; a copy starts where its original
  // stands (a std::function copied before its call is a completion of its own).
  struct Once {
    std::atomic<bool> done{false};
    Once() = default;
    Once(const Once& o) : done(o.done.load()) {}
    Once& operator=(const Once& o) {
      done = o.done.load();
      return *this;
    }
    bool First() { return !done.exchange(true); }
  };
  // Wraps a completion handler so it runs on the strand, holding the router. A completion comes once:
  // the handler moves to the strand (no copy of what it captured), and a second call (an adapter's
  // or a backend's bug) is logged and runs nothing.
  // A handler is moved several times on its way (into the std::function, the strand's job): capture a
  // const reference parameter with an init-capture (`[turn = turn]`), since a plain `[turn]` makes a
  // const member, which each of those moves copies (a shared_ptr's atomic count, a string's bytes).
  template <typename... Args, typename Fn>
  std::function<void(Args...)> OnStrand(Fn&& fn) {
    return [self = shared_from_this(), fn = std::forward<Fn>(fn), once = Once()](Args... args) mutable {
      if (!once.First()) {
        asio::post(self->strand, [self] { self->Log(LogLevel::error, kCompletedTwice); });
        return;
      }
      asio::post(self->strand, [self, fn = std::move(fn), tup = std::make_tuple(std::move(args)...)]() mutable {
        if (self->torn_down) return;
        std::apply([&](auto&&... a) { fn(*self, std::move(a)...); }, std::move(tup));
      });
    };
  }
  static constexpr const char* kCompletedTwice =
      "a completion handler the router gave an adapter or a backend was called a second time: the second call was "
      "ignored (each Async call completes once)";
  void Log(LogLevel level, const std::string& text) const;
  // ---- the store's commits (router.cpp) ----
  // Records whose loss costs a restart only a convenience (a placeholder's ids, a turn's cursor, a
  // delivered part's index entry and outbox progress) are written behind: they join one transaction
  // per pass of the strand, opened at the first of them and committed by a job posted then (it runs
  // after everything queued before it) or sooner, with the next write that must be durable at once
  // (Durably). A failed commit is logged with what it lost; an outbox row it should have removed is
  // removed again (behind_removals), and so is a turn whose reply is in (behind_finishes).
  template <typename Fn>
  void WriteBehind(Fn&& writes) {
    OpenPass();
    writes();
  }
  // Runs `writes` and commits them before it returns, with whatever was written behind before them:
  // one transaction. Inside a batch of the caller's own (a burst's intake), they join it instead. A
  // call that fails before it writes leaves the rest as it was (RouterStore::BeginBatch); a failed
  // commit undoes them all, is logged, and is returned (so that what is in memory does not move past
  // it).
  template <typename Fn>
  Status Durably(std::string_view op, Fn&& writes) {
    const bool joined = pass_open;
    const bool own = !joined && !store->InBatch() && store->BeginBatch(op).has_value();
    writes();
    if (!own && !joined) return {};
    Status st = CommitOpen();
    if (!st) Log(LogLevel::warning, std::string(op) + ": " + st.error().ToString());
    return st;
  }
  // Like Durably, but committed with the strand's pass (WriteBehind), and `then` runs after that
  // commit (in a job of its own) with its outcome: the replies of many turns that end in one pass of
  // a busy strand cost one commit, not one each. What must not happen before the writes are in the
  // file (a reply going out) belongs in `then`. Where no pass can open (inside a batch of the
  // caller's, while shutting down), it is Durably, and `then` runs in the next job.
  template <typename Fn>
  void DurablyInPass(std::string_view op, Fn&& writes, std::function<void(Impl&, Status)> then) {
    OpenPass();
    if (!pass_open) {
      // Inside a caller's batch Durably commits nothing yet: `then` waits for that job to end.
      Status st = Durably(op, std::forward<Fn>(writes));
      Run([then = std::move(then), st = std::move(st)](Impl& r) { then(r, st); });
      return;
    }
    writes();
    pass_waiters.push_back(std::move(then));
  }
  void OpenPass();
  void ClosePass();  // the posted job: commits the pass's writes unless a durable write did
  // Commits the open batch (the pass's, the caller's, or both in one). What a failure lost of the
  // pass's is logged here; the caller's own, by the caller.
  Status CommitOpen();
  // Detaches the drivers (the turns go on in their Sessions), cancels the timers, closes the store
  // (so the next router may open it at once) and drops the state that holds the router: for
  // ~Router. Strand, or once nothing runs.
  void Teardown();
  // Runs `fn` on the strand after `delay`.
  void After(std::chrono::milliseconds delay, std::function<void(Impl&)> fn);
  void Bump(std::uint64_t RouterStats::*counter, std::uint64_t by = 1);
  const RouteConfig& Route(std::size_t index) const { return matcher.routes().at(index); }
  routing::SessionRun& SessionFor(const std::string& name, std::size_t route);
  static std::string ChatKey(const ThreadRef& where);

  // ---- intake (router_intake.cpp) ----
  // Messages handed to HandleMessage wait here (any thread) until the strand drains them, all of
  // them at once: a burst is accepted in one store transaction and its placeholders go out before
  // any of its turns starts.
  struct PendingMessage {
    // A constructor, not an aggregate: emplace_back moves the message in once (clang before 16 has no
    // aggregate initialization from parentheses).
    PendingMessage(InboundMessage&& m, std::function<void(Result<Disposition>)>&& d)
        : message(std::move(m)), done(std::move(d)) {}
    InboundMessage message;
    std::function<void(Result<Disposition>)> done;
    bool alone = false;  // a command, an answer or a refusal: taken in outside any batch (Take)
  };
  std::mutex intake_mu;
  std::deque<PendingMessage> intake;  // guarded by intake_mu (a deque: a push never moves the others)
  bool intake_posted = false;         // guarded by intake_mu: a DrainIntake is on its way
  void DrainIntake();
  // A burst of messages taken in together: a run of the drained messages (left where they are, not
  // moved), each one's outcome, its waiting entry once accepted (with its Session), and which of them
  // are edits or deletions (taken in after the rest are queued).
  struct Burst {
    Burst(std::deque<PendingMessage>& drained, std::size_t from) : all(drained), first(from) {}
    std::deque<PendingMessage>& all;  // what DrainIntake took; the burst's are all[first, first + size())
    std::size_t first;
    std::vector<Result<Disposition>> results;
    std::vector<std::unique_ptr<routing::Waiting>> accepted;
    std::vector<std::shared_ptr<routing::SessionRun>> runs;
    std::vector<std::size_t> changes;  // ascending
    std::size_t size() const { return results.size(); }
    PendingMessage& at(std::size_t i) { return all[first + i]; }
    std::size_t left() const { return all.size() - first - size(); }  // drained, after the burst
  };
  // Takes the drained messages from `burst.first` on, in one transaction, up to (not with) the first
  // that must be taken in alone, or that one alone when it comes first; commits them. A failed commit
  // refuses the burst (the platform delivers it again) and is returned, as is the failure of a
  // message taken in alone: the caller refuses the rest.
  Status TakeBurst(Burst& burst);
  // After the burst's commit: its outcomes answered, its accepted messages queued (their placeholders
  // posted), its edits and deletions taken in, and its turns started (or posted, when `more` of the
  // intake waits).
  void QueueBurst(Burst& burst, bool more);
  // The fields every message needs (HandleMessage refuses it at once without them, Start or not).
  static Status CheckInbound(const InboundMessage& m);
  // One message: its disposition, and the waiting entry to queue once the batch is committed.
  // An accepted message moves out of `message` into `accepted`, with its Session in `run`; any other
  // outcome leaves `message` as it was.
  // Inside a burst's batch, `alone` is given: a message whose effects go out at once
  // (a command, an answer, a refusal) then sets it and does nothing, to be taken in again outside it.
  Result<Disposition> Intake(InboundMessage&& message, std::unique_ptr<routing::Waiting>* accepted,
                             std::shared_ptr<routing::SessionRun>* run, bool* alone);
  // Intake's part once the message matched `route`.
  Result<Disposition> Take(InboundMessage& message, std::size_t route, std::unique_ptr<routing::Waiting>* accepted,
                           std::shared_ptr<routing::SessionRun>* run, bool* alone);
  std::size_t burst_accepted = 0;  // messages the DrainIntake under way accepted so far
  // Whether a message accepted now for `s` will surely take a slot at its burst's StartQueued (its
  // Session idle with nothing ahead of it, every message waiting or accepted before it fits in the
  // slots left): then its turn is recorded with its acceptance, and its start writes nothing.
  bool StartsWithAcceptance(const routing::SessionRun& s) const;
  // The store forgets a waiting message: its inbox entry, or the turn recorded with its acceptance.
  Status Withdraw(const routing::Waiting& w);
  Result<std::string> SessionOf(const InboundMessage& message, const ThreadRef& where);
  Result<Disposition> OnEdited(const InboundMessage& message);
  // The author edited or deleted the message of a turn in flight: changed in the runtime while it is
  // queued there (message.edit / message.remove with the revision), else a note that it runs as sent.
  void ChangeRunning(const std::shared_ptr<routing::TurnRun>& turn, const InboundMessage& message);
  // ChangeRunning once the runtime has the turn (accepted, not started): one change at a time.
  void ChangeQueued(const std::shared_ptr<routing::TurnRun>& turn, const InboundMessage& message);
  // The change that waited (for the runtime's acceptance, or for the change before it), if any.
  void ApplyPendingChange(const std::shared_ptr<routing::TurnRun>& turn);
  // Ends a turn whose prompt was not sent: its placeholder says `why`, and its prompt never goes.
  void WithdrawUnsent(const std::shared_ptr<routing::TurnRun>& turn, std::string why);
  // `stop`: interrupts the running turn, withdraws one that waits in the Session's queue or has not
  // been sent, and says which in `where`.
  void StopTurn(routing::SessionRun& s, const ThreadRef& where, const std::string& reply_to);
  // The name a chat gave `session` (`new NAME`), else the Session's own name.
  std::string DisplayName(const routing::ChatRef& chat, const std::string& session);
  std::string Render(std::string_view markdown) const;  // one message's worth, for the router's notes
  std::string RenderOne(std::string_view markdown) const;
  void Note(const ThreadRef& where, std::string_view markdown, const std::string& session = {},
            const std::string& reply_to = {});

  // ---- turns (router_turns.cpp) ----
  // Queues `w` with its receipt; `pump`: start it now if the Session and a slot are free.
  void Enqueue(routing::SessionRun& s, std::unique_ptr<routing::Waiting> w, bool pump = true);
  // The Session's next waiting message, counted in flight, when it may start now; otherwise nothing
  // (busy, empty, shutting down, or put in line for admission).
  std::unique_ptr<routing::Waiting> TakeNext(routing::SessionRun& s);
  void Pump(routing::SessionRun& s);
  void Admit();
  bool IntakeWaiting();  // messages handed over and not taken yet (a DrainIntake is on its way)
  // Starts what these Sessions have waiting, a slice of them per strand job.
  using SessionRuns = std::vector<std::shared_ptr<routing::SessionRun>>;
  // The first slice now; the rest in jobs of their own (start_lists' head), before any later list.
  void StartQueued(std::shared_ptr<const SessionRuns> runs);
  // The same, all of it behind the lists queued before: slots are taken in the order messages came
  // (StartsWithAcceptance counts on it: a later burst's turns never start before an earlier one's).
  void PostStartQueued(std::shared_ptr<const SessionRuns> runs);
  // Starts what these Sessions have waiting, a slice of them from `from` on: the index after it.
  std::size_t StartSlice(const SessionRuns& runs, std::size_t from);
  struct StartList {
    std::shared_ptr<const SessionRuns> runs;
    std::size_t from = 0;
  };
  std::deque<StartList> start_lists;  // turns still to start, oldest first, a slice per strand job
  bool starts_posted = false;         // a job of PostStarts is on its way
  void PostStarts();
  void StartOldestSlice();  // a slice of start_lists' head; a job for the rest
  std::string NewRequestId();
  // The turn's start in the store (not committed: the caller's Durably commits it).
  Status RecordTurn(const routing::SessionRun& s, const routing::Waiting& w, const std::string& request_id);
  void StartTurn(routing::SessionRun& s, std::unique_ptr<routing::Waiting> w);
  // Runs a recorded turn; one that could not be recorded is reported in its placeholder instead.
  // `w` is taken apart (a Waiting is a message and more: moved once, into the turn).
  void LaunchTurn(routing::SessionRun& s, std::unique_ptr<routing::Waiting> w, std::string request_id, Status record);
  // The turn's prompt (a platform thread's first turn to its Session carries the thread's earlier
  // messages, fetched first), then submitted once its Session is ready.
  void Compose(const std::shared_ptr<routing::TurnRun>& turn);
  void ReadyThenRun(const std::shared_ptr<routing::TurnRun>& turn, std::function<void(Driver&)> run);
  void Submit(const std::shared_ptr<routing::TurnRun>& turn, Driver& driver);
  std::string PromptOf(const InboundMessage& message, const std::vector<ThreadHistoryMessage>& context) const;
  // A running turn's progress shows its elapsed time, and the chat's "typing..." is renewed, every
  // kTickEvery from its start: one timer for all of them (`ticking`), not one per turn. It fires every
  // second while any turn runs (and once more after the last has ended), ticking the turns due.
  void StartTicking(const std::shared_ptr<routing::TurnRun>& turn);
  void StopTicking(routing::TurnRun& turn);
  void ArmTicker();
  void TickAll();
  void Typing(const routing::TurnRun& turn);  // the chat's "typing..." while the turn runs
  void PublishGauges();  // coalesced: one count of every Session per burst of changes
  void CountGauges();
  void Attach(const std::shared_ptr<routing::TurnRun>& turn, Driver& driver);
  TurnOptions OptionsFor(const std::shared_ptr<routing::TurnRun>& turn);
  // The signals queued for the turn (TurnRun::signals), in order, then its progress once.
  void OnSignals(const std::shared_ptr<routing::TurnRun>& turn);
  // One signal applied to the turn; true when the progress shown may have changed.
  bool OnEvent(const std::shared_ptr<routing::TurnRun>& turn, routing::TurnSignal& signal);  // may move from it
  routing::ChatPace& PaceOf(routing::LiveMessage& live);
  void OnResult(const std::shared_ptr<routing::TurnRun>& turn, Result<TurnResult> result);
  // A turn's Session state: its own while `sessions` holds it, else found by name (or none).
  routing::SessionRun* RunOf(const routing::TurnRun& turn);
  // The Session's next turn waits for it (WaitReady) again; `drop_driver`: with a new connector.
  void ForgetReady(const std::string& session, bool drop_driver);
  void EndTurn(const std::shared_ptr<routing::TurnRun>& turn, std::string reply_markdown);
  // The turn's end and its reply in the outbox, committed with the pass; then delivered (SendStored),
  // its first part's next edit being attempt `edit_attempts`, after `delay`.
  void StoreReply(const std::shared_ptr<routing::TurnRun>& turn, std::shared_ptr<routing::OutboxEntry> entry,
                  int edit_attempts, std::chrono::milliseconds delay);
  // After the reply's commit (`committed`): delivers it, with its outbox id when it was stored.
  void SendStored(const std::shared_ptr<routing::TurnRun>& turn, routing::OutboxEntry e, Result<std::int64_t> id,
                  const Status& committed, int edit_attempts, std::chrono::milliseconds delay);
  void UpdateReceipts(routing::SessionRun& s);
  std::string ProgressText(const routing::TurnRun& turn) const;
  void ShowProgress(const std::shared_ptr<routing::TurnRun>& turn);

  // ---- live messages (router_live.cpp) ----
  std::shared_ptr<routing::LiveMessage> PostLive(const ThreadRef& where, std::string markdown,
                                                 const std::string& session, const std::string& reply_to);
  void SetLive(const std::shared_ptr<routing::LiveMessage>& live, std::string markdown);
  // The live message shows its progress maker's text from its next edit on, made only then.
  void MarkStale(const std::shared_ptr<routing::LiveMessage>& live);
  void PaceLive(const std::shared_ptr<routing::LiveMessage>& live);
  void SendLive(const std::shared_ptr<routing::LiveMessage>& live);
  void WhenIdle(const std::shared_ptr<routing::LiveMessage>& live, std::function<void()> fn);
  std::chrono::milliseconds EditSpacing() const;

  // ---- delivery (router_delivery.cpp) ----
  std::vector<std::string> RenderParts(std::string_view markdown) const;
  void Deliver(routing::OutboxEntry entry, int edit_attempts = 0, std::chrono::milliseconds delay = {});
  // A reply its placeholder takes whole, edited in before anything is stored (router_delivery.cpp).
  void EditReplyIn(const std::shared_ptr<routing::TurnRun>& turn, std::shared_ptr<routing::OutboxEntry> entry);
  void DeliverPart(std::shared_ptr<routing::OutboxEntry> entry, int edit_attempts);
  void OnPartFailed(std::shared_ptr<routing::OutboxEntry> entry, const Error& error);
  void ScheduleOutboxRetry(std::chrono::milliseconds after);
  // Delivers the outbox entries that are due (`all`: every one, as on a start: the failures that
  // pushed them back were the last process's).
  void RetryOutbox(bool all = false);

  // ---- questions (router_questions.cpp) ----
  void OnQuestion(const std::shared_ptr<routing::TurnRun>& turn, const Event& event, Responder responder);
  // The open question `message` answers: a reply to its message, or the next message in its thread
  // from someone who may answer it. Null: it is no answer (it queues as a message).
  // The open question `message` answers, if any. `ambiguous`: it names none, and more than one in its
  // thread waits for its author (AnswerFromChat then asks for a reply to the one meant).
  std::shared_ptr<routing::QuestionRun> QuestionFor(const InboundMessage& message, std::size_t route, bool* ambiguous);
  void AnswerFromChat(routing::QuestionRun& q, const InboundMessage& message, bool ambiguous);
  // A restored question goes on from the answers it stored (router_restart.cpp).
  void ResumeAnswers(routing::QuestionRun& q);
  void Answer(routing::QuestionRun& q, std::vector<std::string> choice, const std::string& who_id,
              const std::string& who_name);
  bool MayAnswer(const routing::QuestionRun& q, const std::string& user) const;
  void ExpireQuestion(std::string id);
  // Edits the question's message to `markdown` (how it ended), or when its post has not come back yet,
  // once it does.
  void MarkQuestionMessage(routing::QuestionRun& q, const std::string& markdown);
  // Answers (or, with null `answers`, declines) the question in the runtime.
  void Resolve(routing::QuestionRun& q, const std::map<std::string, std::vector<std::string>>* answers);
  void ForgetQuestionsOf(const routing::TurnRun& turn);
  void Action(InboundAction action);

  // ---- commands (router_commands.cpp) ----
  void TryCommand(const InboundMessage& message, std::size_t route, const std::string& session);
  bool PickerAction(const InboundAction& action);
  bool MayManage(const ThreadRef& where, const std::string& user) const;  // a picker's buttons
  void ListSessions(const InboundMessage& message, const std::string& current);
  void SwitchTo(const ThreadRef& where, const std::string& session, const std::string& reply_to);
  // Refuses (in `where`) a suspension of a Session with a turn running or messages queued.
  bool Busy(const std::string& session, const ThreadRef& where, const std::string& reply_to, std::string_view what);

  // ---- restart (router_restart.cpp) ----
  void Resume();
  void BeginShutdown(std::function<void()> done);
};

}  // namespace sessionturn
