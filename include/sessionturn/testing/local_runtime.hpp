// A faithful, embeddable Session runtime: the server side of PROTOCOL.md on a unix socket, byte for
// byte as the real runtime (kelos-session-runtime) writes it, with a journal, replay/reset/condensed
// history, merge/edit/remove, interrupt, questions, back-pressure, restart recovery and pluggable
// providers (echo, script, command). Tests drive it and inject faults.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn::testing {

// Numbers of the real runtime (PROTOCOL.md §6); the options default to them.
inline constexpr std::size_t kRuntimeRetainedEvents = 4096;   // events kept in memory for replay
inline constexpr std::size_t kRuntimeSubscriberBuffer = 256;  // live events queued per subscriber before disconnect
inline constexpr std::chrono::milliseconds kRuntimeInterruptTimeout{10000};  // then the provider is killed
inline constexpr std::size_t kRuntimeCondensedMaxItems = 100;        // cap of a condensed history page
inline constexpr std::size_t kRuntimeCondensedMaxBytes = 1u << 20;   // ditto, in encoded bytes
inline constexpr std::size_t kRuntimeMaxRequestBytes = 4u << 20;     // a request line (= journal record bound)

// Rejection texts (`error` with `status: rejected`, to the requester only), the real runtime's
// words. Tests match on them. Texts that name a turn or an input are built as the runtime builds
// them, with the id Go-quoted: `Session turn "turn-9" is no longer pending`, `editing Session turn
// "turn-2": revision is 2, not 1`, `removing Session turn "turn-2": expectedRevision must be
// positive`, `input request "ID" is not pending`, `input question "q" is not pending`, `input
// question "q" must contain an answer`, `unsupported client request type "T"`.
namespace reject_reason {
inline constexpr std::string_view kEmptyText = "message must not be empty";
inline constexpr std::string_view kEmptyShellCommand = "shell command must not be empty";
// A command onto a queued turn, or a message onto a queued command.
inline constexpr std::string_view kPendingCommand = "Session already has a pending command or message";
inline constexpr std::string_view kGoalUnsupported = "/goal is available only in Codex Sessions";
inline constexpr std::string_view kGoalUsage = "usage: /goal [<objective>|clear|edit <objective>|pause|resume]";
inline constexpr std::string_view kCommandAttachments = "Session commands do not accept attachments";
inline constexpr std::string_view kNoAttachmentStorage = "Session attachment storage is unavailable";
inline constexpr std::string_view kDraining = "Session runtime is draining for an update; retry after it reconnects";
inline constexpr std::string_view kProviderRestarting = "Session provider is restarting; retry after it reconnects";
inline constexpr std::string_view kNoActiveTurn = "Session has no active turn";
inline constexpr std::string_view kEmptyAnswers = "input response must contain at least one answer";
inline constexpr std::string_view kInvalidCursor = "invalid Session history cursor";
inline constexpr std::string_view kExpiredCursor = "Session history cursor expired; reconnect to reload history";
}  // namespace reject_reason

struct LocalRuntimeOptions {
  std::string socket_path;  // required; created 0600, a stale socket is replaced, parent dir created 0700
  std::string state_dir;    // empty: in-memory journal only (it still survives Restart())
  // "echo" | "script:FILE" (JSON, docs/local-runtime.md) | "command:CMD" (run by /bin/sh -c per turn)
  // | "flood:N" (N tiny deltas as fast as the slowest subscriber takes them: it waits while one is over
  //   half its bound, so a subscriber that never reads stalls it; for benchmarks)
  // | "claude-code[:model=M,effort=E,permissions=skip|ask]" (a Claude Code process kept between turns;
  //   docs/local-runtime.md)
  std::string provider = "echo";
  // The agent program of claude-code: a path, or a name looked up on PATH. Empty: "claude" on PATH.
  // Start fails naming it when it is not there.
  std::string agent_bin;
  bool allow_shell = false;  // run `!` commands; otherwise such a turn records a failed tool event
  std::string session_name = "local";
  // Where `!` commands and command providers run, and runtime.status workingDir. Empty: the process's
  // current directory (the program is started in its Session's workspace; in-process hosts name it).
  std::string working_dir;
  LogSink log_sink;  // optional; default: warnings on stderr
  // Keep every decoded request for ReceivedRequests()/WaitForRequest(). Off by default: the log grows
  // with every request for the runtime's lifetime, which a long-running runtime must not do. Tests
  // that inspect requests turn it on.
  bool record_requests = false;

  // Bounds; defaults are the real runtime's numbers. Tests may shorten them.
  std::size_t retained_events = kRuntimeRetainedEvents;
  std::size_t subscriber_buffer = kRuntimeSubscriberBuffer;
  std::chrono::milliseconds interrupt_timeout = kRuntimeInterruptTimeout;
  // How long a killed provider takes to come back; meanwhile messages are rejected "provider is restarting".
  std::chrono::milliseconds provider_restart_delay{200};
  // Pause between the echo provider's deltas (keeps a turn running long enough to be observed).
  std::chrono::milliseconds echo_delay{20};
};

// What an idle policy looks at (sessionturn-local-runtime --idle-exit, the LocalBackend's in-process
// mode). Busy: a turn running or queued, or a question open. Idle time counts from the later of the
// end of the last busy stretch, the last request and the last accepted connection (so a client that
// has just connected to submit a turn is not cut off before its message arrives).
struct RuntimeActivity {
  bool busy = false;
  std::chrono::steady_clock::duration idle_for{};  // zero while busy
  // Wall-clock time of the last turn event (user.message*, turn.started, turn.completed) journaled by
  // this run; the epoch when there was none.
  std::chrono::system_clock::time_point last_turn{};
};

class LocalRuntime {
 public:
  // Binds the socket, loads the journal (state_dir/events.jsonl), runs recovery if the journal shows
  // unfinished work, and starts serving on the runtime's own I/O thread. Fails (Errc::invalid_argument,
  // Errc::io_error) with a message naming the path or the provider spec that is wrong.
  static Result<std::unique_ptr<LocalRuntime>> Start(LocalRuntimeOptions options);

  ~LocalRuntime();  // Stop()
  LocalRuntime(const LocalRuntime&) = delete;
  LocalRuntime& operator=(const LocalRuntime&) = delete;

  // Closes the listener and every connection, kills a running provider, syncs the journal and removes
  // the socket. Idempotent. Blocks until the I/O thread has stopped.
  void Stop();

  // The idle policy's view (thread-safe, cheap: no hop to the I/O thread).
  RuntimeActivity Activity() const;
  // Stops the runtime, as Stop() does, if it has been idle for at least `idle_for`. The decision and
  // the closing of the listener happen together on the I/O thread, so no request lands between them.
  // True when it stopped (or was stopped already).
  bool StopIfIdle(std::chrono::milliseconds idle_for);

  const std::string& socket_path() const;
  std::string journal_id() const;
  std::int64_t last_event_id() const;
  // The retained journal (at most retained_events), ascending ids.
  std::vector<Event> JournalEvents() const;
  // Every request decoded from any connection, in arrival order (including rejected ones).
  // Precondition: LocalRuntimeOptions::record_requests. Without it nothing is recorded: this returns
  // an empty list and logs an error saying recording is off.
  std::vector<ClientRequest> ReceivedRequests() const;
  // Waits until a journaled event matching `pred` exists (already or later), up to `timeout`.
  // Errc::timeout names what was awaited when it does not come.
  Result<Event> WaitForEvent(const std::function<bool(const Event&)>& pred, std::chrono::milliseconds timeout) const;
  // Waits until some request matching `pred` has been received. Precondition: record_requests;
  // without it this fails at once with Errc::invalid_argument saying so.
  Status WaitForRequest(const std::function<bool(const ClientRequest&)>& pred, std::chrono::milliseconds timeout) const;

  // Fault hooks. All thread-safe; they take effect on the I/O thread before they return.
  void DropAllConnections();              // close every client connection now (no marker)
  // One-shot: every connection open now (or, when none is, the next one accepted) is closed once n
  // more events (journaled or not, replay included) have been queued to it and written, counted per
  // connection from this call. Connections accepted later are spared, so a reconnect makes progress.
  // n <= 0 disarms it.
  void DropAfterEvents(std::int64_t n);
  // A paused provider emits nothing and no queued turn starts until resumed; requests are still answered.
  void PauseProvider(bool paused);
  // While draining, every `message` is rejected with reject_reason::kDraining (edits are not).
  void SetDraining(bool draining);
  // Simulates a crash and restart: drops every connection and the provider without finishing the turn,
  // then re-opens the same journal (same journal id; from disk with a state dir, else the in-memory one)
  // and applies PROTOCOL.md §4 recovery: runtime.recovered, started turns -> turn.completed interrupted,
  // open questions -> input.resolved cancelled, unstarted turns folded into the earliest (others
  // turn.completed merged, then its user.message.updated); then the pending turn runs. The socket
  // path stays the same.
  Status Restart();
  std::size_t ConnectionCount() const;

 private:
  struct Impl;
  explicit LocalRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sessionturn::testing
