// The Session runtime wire protocol (PROTOCOL.md §2-4): typed events and requests, their JSON
// codec and a bounded line framer. No sockets, no threads: everything above builds on these values.
// Decoding is tolerant (unknown fields and types pass through); encoding emits one line with empty
// fields omitted, exactly as the runtime does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sessionturn/error.hpp"

namespace sessionturn {

using Json = nlohmann::json;

// Limits of the wire (PROTOCOL.md §6).
inline constexpr std::size_t kMaxLineBytes = 8u << 20;  // clients must accept lines up to 8 MiB

// Event types (PROTOCOL.md §4). Unknown types are accepted and passed through.
namespace event_type {
inline constexpr std::string_view kHistoryStart = "history.start";
inline constexpr std::string_view kHistoryEnd = "history.end";
inline constexpr std::string_view kRuntimeStatus = "runtime.status";
inline constexpr std::string_view kRuntimeRecovered = "runtime.recovered";
inline constexpr std::string_view kRequestAccepted = "request.accepted";
inline constexpr std::string_view kUserMessage = "user.message";
inline constexpr std::string_view kUserMessageUpdated = "user.message.updated";
inline constexpr std::string_view kUserMessageRemoved = "user.message.removed";
inline constexpr std::string_view kTurnStarted = "turn.started";
inline constexpr std::string_view kTurnInterrupting = "turn.interrupting";
inline constexpr std::string_view kTurnCompleted = "turn.completed";
inline constexpr std::string_view kAssistantDelta = "assistant.delta";
inline constexpr std::string_view kAssistantMessage = "assistant.message";
inline constexpr std::string_view kToolStarted = "tool.started";
inline constexpr std::string_view kToolDelta = "tool.delta";
inline constexpr std::string_view kToolCompleted = "tool.completed";
inline constexpr std::string_view kGoalUpdated = "goal.updated";
inline constexpr std::string_view kInputRequested = "input.requested";
inline constexpr std::string_view kInputResolved = "input.resolved";
inline constexpr std::string_view kFileDiff = "file.diff";
inline constexpr std::string_view kError = "error";
}  // namespace event_type

// Request types (PROTOCOL.md §3).
namespace request_type {
inline constexpr std::string_view kSubscribe = "subscribe";
inline constexpr std::string_view kMessage = "message";
inline constexpr std::string_view kMessageEdit = "message.edit";
inline constexpr std::string_view kMessageRemove = "message.remove";
inline constexpr std::string_view kInput = "input";
inline constexpr std::string_view kInterrupt = "interrupt";
inline constexpr std::string_view kHistory = "history";
}  // namespace request_type

// Values of the `status` field.
namespace status_value {
inline constexpr std::string_view kRunning = "running";
inline constexpr std::string_view kCompleted = "completed";
inline constexpr std::string_view kFailed = "failed";
inline constexpr std::string_view kInterrupted = "interrupted";
inline constexpr std::string_view kMerged = "merged";
inline constexpr std::string_view kRemoved = "removed";
inline constexpr std::string_view kRejected = "rejected";
inline constexpr std::string_view kAnswered = "answered";
inline constexpr std::string_view kCancelled = "cancelled";
}  // namespace status_value

struct InputOption {
  std::string label;
  std::string description;
  bool operator==(const InputOption&) const = default;
};

struct InputQuestion {
  std::string id;
  std::string header;
  std::string question;
  std::vector<InputOption> options;
  bool multi_select = false;
  bool secret = false;
  bool operator==(const InputQuestion&) const = default;
};

struct PendingTurn {
  std::string turn_id;
  std::string text;
  std::int64_t revision = 0;
  bool operator==(const PendingTurn&) const = default;
};

struct HistoryState {
  std::string active_turn_id;
  // When the active turn started (RFC 3339 text, as the runtime wrote it); empty when no turn is
  // running. The real runtime sends a timestamp here, never a boolean.
  std::string active_turn_started;
  bool turn_interrupting = false;
  bool waiting_for_input = false;
  std::optional<PendingTurn> pending_turn;
  Json file_diff;  // null when absent
  bool operator==(const HistoryState&) const = default;
};

struct Usage {
  std::int64_t input_tokens = 0;
  std::int64_t output_tokens = 0;
  std::int64_t total_tokens = 0;
  std::int64_t context_tokens = 0;
  std::int64_t context_window = 0;
  bool operator==(const Usage&) const = default;
};

// The runtime's self-description. Fields we do not model stay in `extra` and are re-encoded.
struct RuntimeStatus {
  std::string session_name;
  std::string agent_type;
  std::string model;
  std::string working_dir;
  std::string home_dir;
  std::string branch;
  std::optional<Usage> usage;
  Json extra = Json::object();
  bool operator==(const RuntimeStatus&) const = default;
};

// One event from the runtime. Absent fields take their zero value (PROTOCOL.md §2).
struct Event {
  std::int64_t id = 0;  // journal sequence number; 0 for unjournaled events
  std::string type;
  std::string timestamp;
  std::string request_id;
  std::string turn_id;
  std::string text;
  std::int64_t revision = 0;
  std::string status;
  bool session_command = false;  // the prompt was a runtime command (`!` shell or `/goal`)
  std::string tool_id;
  std::string tool_name;
  std::string output;
  std::string input_id;
  std::vector<InputQuestion> questions;
  Json diff;  // null when absent
  std::int64_t first_event_id = 0;
  std::int64_t last_event_id = 0;
  std::string journal_id;
  bool reset = false;
  bool history_limited = false;
  bool history_page = false;
  std::string history_cursor;  // opaque, echoed back in `history` requests; empty when absent
  std::optional<HistoryState> history_state;
  std::optional<RuntimeStatus> runtime;
  Json goal;         // null when absent
  Json attachments;  // null when absent, kept raw

  // The line this event was decoded from (empty for events built in code). Use Raw() for fields we
  // do not model; it parses on demand so the common path pays nothing for it.
  std::string line;
  Json Raw() const;

  bool Is(std::string_view t) const noexcept { return type == t; }

  // Empties every field but keeps the strings' capacity (up to 1 MiB each: a rare huge value is
  // freed), so that an Event refilled line after line (DecodeEventInto) allocates nothing once it
  // has seen lines of the stream's usual sizes.
  void Reset() noexcept;
};

// Equality over the modelled fields (ignores `line`).
bool SameEvent(const Event& a, const Event& b);

// One request to the runtime (PROTOCOL.md §3). Only the fields of its type matter; zero fields are omitted.
struct ClientRequest {
  std::string type;
  std::string request_id;
  // subscribe
  std::int64_t since = 0;
  std::string journal_id;
  bool history_bounds = false;
  std::int64_t history_items = 0;
  std::int64_t history_bytes = 0;
  // message / message.edit / message.remove
  std::string text;
  std::vector<std::string> attachment_ids;
  std::string turn_id;
  std::int64_t expected_revision = 0;
  // input
  std::string input_id;
  std::map<std::string, std::vector<std::string>> answers;
  bool cancel = false;
  // history
  std::string history_cursor;  // the opaque cursor of a history.start

  static ClientRequest Subscribe(std::int64_t since, std::string journal_id, bool history_bounds,
                                 std::int64_t history_items, std::int64_t history_bytes);
  static ClientRequest Message(std::string request_id, std::string text);
  static ClientRequest Edit(std::string request_id, std::string turn_id, std::string text,
                            std::int64_t expected_revision);
  static ClientRequest Remove(std::string request_id, std::string turn_id, std::int64_t expected_revision);
  static ClientRequest Answer(std::string request_id, std::string input_id,
                              std::map<std::string, std::vector<std::string>> answers);
  static ClientRequest Decline(std::string request_id, std::string input_id);
  static ClientRequest Interrupt(std::string request_id);

  bool operator==(const ClientRequest&) const = default;
};

// A field of an event whose JSON type is not the one the protocol gives it ("activeTurnStarted":
// true where the runtime writes a timestamp). The event is kept; the field is left at its zero value.
struct FieldMismatch {
  std::string field;     // its path: "sessionCommand", "historyState.activeTurnStarted", "questions[0].id"
  std::string expected;  // "a string", "an integer", ...
  bool operator==(const FieldMismatch&) const = default;
};

// Decodes one line (without its newline). Never throws. Only a line that is not a JSON object fails
// ("not a JSON object", "invalid JSON: ..."): a field of an unexpected type never drops the event.
// Such a field is left empty, `line` keeps the bytes intact, and the field is listed in `mismatches`
// (when given) so the caller can report it (see FieldMismatchMemo).
Result<Event> DecodeEvent(std::string_view line, std::vector<FieldMismatch>* mismatches = nullptr);

// As DecodeEvent, into `event`, which is Reset first and reuses its strings' capacity: a consumer
// of a long stream decodes into one Event without an allocation per line. The line is copied once,
// into `event.line`, and parsed there. On failure `event` is left Reset. `line` may view one of
// `event`'s own top-level strings (it is copied first), not a string nested in its questions,
// historyState or runtime.
Status DecodeEventInto(std::string_view line, Event& event, std::vector<FieldMismatch>* mismatches = nullptr);
// Requests decode strictly, as the runtime's own decoder does: a field of the wrong type is an error
// naming it ("\"text\" must be a string"); the runtime closes a connection that sends one.
Result<ClientRequest> DecodeRequest(std::string_view line);

// Remembers which mismatched fields were reported, so a drifting runtime is logged once per field
// and not once per event. Thread-safe.
class FieldMismatchMemo {
 public:
  // The messages to log for the fields of `mismatches` not reported before (empty when all were).
  std::vector<std::string> Note(std::string_view event_type, const std::vector<FieldMismatch>& mismatches);

 private:
  std::mutex mu_;
  std::set<std::string> reported_;
};

// Encodes as one line without the trailing newline; empty/zero fields omitted. Events are written as
// the runtime's Go encoder writes them: keys in its struct's field order, `<` `>` `&` U+2028 U+2029
// escaped as \u003c \u003e \u0026 \u2028 \u2029, invalid UTF-8 replaced by \ufffd.
std::string EncodeEvent(const Event& event);
std::string EncodeRequest(const ClientRequest& request);
Json EventToJson(const Event& event);
Json RequestToJson(const ClientRequest& request);

// A fresh random request id (UUID v4 text).
std::string NewRequestId();
// A random UUID v4 (also used for journal ids and resume requests).
std::string NewUuid();

// Would the runtime treat `text` as a command (PROTOCOL.md §3)? After trimming Unicode whitespace,
// text starting with '!' runs a shell; "/goal" followed by whitespace or end of text drives a goal.
bool IsRuntimeCommand(std::string_view text);
// Trims Unicode white space (as Go's strings.TrimSpace does) from both ends of UTF-8 text.
std::string_view TrimUnicodeSpace(std::string_view text);

// Splits a byte stream into lines. Lines are bounded (default 8 MiB): a longer line is skipped up
// to its end and reported once through the overflow callback; the stream then continues. Blank
// lines are skipped and a trailing '\r' is removed.
class LineFramer {
 public:
  using LineFn = std::function<void(std::string_view line)>;
  using OverflowFn = std::function<void(std::size_t bytes_skipped)>;

  explicit LineFramer(std::size_t max_line = kMaxLineBytes) : max_line_(max_line) {}

  // Feeds bytes; calls `on_line` for each complete line, in order. `on_overflow` is called once per
  // oversized line, when its end is seen (with the number of bytes skipped).
  void Feed(std::string_view bytes, const LineFn& on_line, const OverflowFn& on_overflow = {});

  // Bytes of an incomplete line buffered so far.
  std::size_t Buffered() const noexcept { return partial_.size(); }
  // True while inside an oversized line that is being skipped.
  bool Skipping() const noexcept { return skipping_; }
  // Drops any partial line (after a reconnect).
  void Reset() noexcept {
    partial_.clear();
    skipping_ = false;
    skipped_ = 0;
  }

 private:
  void Emit(std::string_view line, const LineFn& on_line);

  std::size_t max_line_;
  std::string partial_;
  bool skipping_ = false;
  std::size_t skipped_ = 0;
};

}  // namespace sessionturn
