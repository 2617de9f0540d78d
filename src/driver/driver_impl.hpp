// Internals shared by the driver's operations (turn, watch, one-shot): the Driver's shared state,
// the line decoding every stream uses, and small helpers. Not a public header.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <asio.hpp>

#include "sessionturn/driver.hpp"
#include "blocking.hpp"
#include "conn/operation_strand.hpp"

namespace sessionturn::driver_detail {

using Strand = asio::strand<asio::io_context::executor_type>;

// A blocking call's private loop (driver/caller_loop.hpp), or null for an operation on the Context.
// An operation holds it as its first member, so the loop outlives the operation's strand and timers,
// and a late Cancel from another thread never posts into a destroyed loop.
using PrivateLoop = std::shared_ptr<asio::io_context>;

class TurnOp;
class WatchOp;

// On top of the abandon grace in ~Driver: time for the close to run once the grace has fired.
inline constexpr std::chrono::milliseconds kDestructorWaitMargin = std::chrono::seconds(1);

// How many of its own message.edit request ids a Driver remembers (DriverState::own_edits). An edit's
// user.message.updated reaches the edited turn's stream moments after it is written, and edits are
// rare (a person changing a queued message), so the last few hundred cover every one still in transit.
inline constexpr std::size_t kOwnEditMemory = 256;

// What every operation of one Driver shares.
struct DriverState {
  Context& context;
  std::shared_ptr<Connector> connector;
  FieldMismatchMemo mismatches;  // a drifting runtime's mistyped fields, logged once per field
  mutable std::mutex mu;
  std::condition_variable idle;  // signalled when an operation ends (the destructor waits on it)
  std::unordered_map<const void*, std::weak_ptr<TurnOp>> turns;
  std::unordered_map<const void*, std::weak_ptr<WatchOp>> watches;
  std::size_t one_shots = 0;
  // Request ids of this Driver's recent edits (EditQueued), oldest first: a turn of ours edited
  // through its own Driver stays ours (not shared), so abandoning it still withdraws it.
  std::deque<std::string> own_edits;

  DriverState(Context& c, std::shared_ptr<Connector> conn) : context(c), connector(std::move(conn)) {}
  bool Idle() const { return turns.empty() && watches.empty() && one_shots == 0; }
  void NoteOwnEdit(std::string request_id) {
    std::lock_guard lock(mu);
    own_edits.push_back(std::move(request_id));
    if (own_edits.size() > kOwnEditMemory) own_edits.pop_front();
  }
  bool IsOwnEdit(const std::string& request_id) const {
    std::lock_guard lock(mu);
    return std::find(own_edits.begin(), own_edits.end(), request_id) != own_edits.end();
  }
  void Log(LogLevel level, const std::string& message) const {
    if (context.ShouldLog(level)) context.Log(level, message);
  }
};

// The strand of a new operation: on its private loop, or on the Context.
inline Strand MakeOperationStrand(DriverState& driver, const PrivateLoop& loop) {
  return asio::make_strand(loop ? *loop : driver.context.io());
}

// A connect's report on its way to an operation on `strand`, which may be a blocking caller's private
// loop. The connection is parked here and the job posted to the strand only says "take it": a job a
// caller no longer runs (it returned, and its thread keeps the loop) then never owns a connection,
// which might be bound to the Context and would be freed after it. An operation already gone has its
// connection closed at once, on the reporting thread. `Op` has OnConnect(Result) and a ConnectPark.
struct ConnectPark {
  std::mutex mu;
  std::optional<Result<std::shared_ptr<Connection>>> parked;
  // Strand only: the operation is inside the connector's call (ConnectOnStrand), which takes a report
  // made meanwhile on the strand itself when the connector returns.
  bool in_connect_call = false;
};

template <typename Op>
Connector::ConnectHandler ReportConnectTo(std::weak_ptr<Op> weak, PrivateLoop loop, Strand strand) {
  // `loop` keeps a private loop alive to post into, whatever thread reports.
  return [weak = std::move(weak), loop = std::move(loop), strand](Result<std::shared_ptr<Connection>> result) {
    auto op = weak.lock();
    if (!op) {
      if (result) (*result)->Close();
      return;
    }
    {
      std::lock_guard lock(op->connect_park.mu);
      op->connect_park.parked = std::move(result);
    }
    // in_connect_call is the strand's: read only on it.
    const bool taken_on_return = strand.running_in_this_thread() && op->connect_park.in_connect_call;
    op.reset();
    if (taken_on_return) return;
    asio::post(strand, [weak] {
      auto taken = weak.lock();
      if (!taken) return;
      std::optional<Result<std::shared_ptr<Connection>>> report;
      {
        std::lock_guard lock(taken->connect_park.mu);
        report.swap(taken->connect_park.parked);
      }
      if (report) taken->OnConnect(std::move(*report));
    });
  };
}

// Connects `op` (on its strand: called there) through `connector`. A connector that connects on the
// strand reports before it returns (a unix socket connects at once): that report is taken when it
// returns, with no job of its own; any other goes through ReportConnectTo.
template <typename Op>
void ConnectOnStrand(Op& op, std::weak_ptr<Op> weak, const PrivateLoop& loop, const Strand& strand,
                     Connector& connector) {
  struct InCall {
    ConnectPark& park;
    explicit InCall(ConnectPark& p) : park(p) { park.in_connect_call = true; }
    ~InCall() { park.in_connect_call = false; }
  };
  {
    InCall in_call(op.connect_park);
    connector.AsyncConnectOn(OperationStrand{strand}, ReportConnectTo(std::move(weak), loop, strand));
  }
  std::optional<Result<std::shared_ptr<Connection>>> report;
  {
    std::lock_guard lock(op.connect_park.mu);
    report.swap(op.connect_park.parked);
  }
  if (report) op.OnConnect(std::move(*report));
}

// "5s" or "250ms".
std::string Seconds(std::chrono::milliseconds ms);

// Decodes one line from a runtime stream. Lines that are not JSON objects are skipped (PROTOCOL.md
// §2: the exec path can interleave other text) with a trace in the log; a mistyped field keeps the
// event and is logged once per field. Decodes into `into` (reused line after line: its strings keep
// their capacity); false for a skipped line.
bool DecodeStreamLine(DriverState& state, std::string_view line, std::string_view who, Event& into);

// Runs a caller's callback. An exception from it must not unwind through our handlers (it would
// leave the operation without a pending read, stuck until its deadline): log it and carry on.
template <typename Fn>
void CallUser(const Context& context, const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    context.Log(LogLevel::error, std::string(what) + " threw an exception (ignored): " + e.what());
  } catch (...) {
    context.Log(LogLevel::error, std::string(what) + " threw a non-standard exception (ignored)");
  }
}

// The error for an operation started on a Context that was stopped: nothing would ever run it.
using blocking::StoppedContextError;

}  // namespace sessionturn::driver_detail

namespace sessionturn {
struct Driver::Impl : driver_detail::DriverState {
  using DriverState::DriverState;
};
}  // namespace sessionturn
