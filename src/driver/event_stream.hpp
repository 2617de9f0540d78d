// One logical event stream to a runtime across reconnects, shared by turns and watches so both get
// the same rules: connect through the Connector; retry a transient first-connect failure (a busy
// runtime, a timeout) and every drop under the ReconnectPolicy with backoff; count a stream that does
// not finish its replay (history.end) within the handshake timeout as dropped; restart the budget on
// progress; decode lines and hand events to the owner. Everything runs on the owner's strand.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/driver_impl.hpp"
#include "driver/op_timers.hpp"

namespace sessionturn::driver_detail {

class EventStream : public std::enable_shared_from_this<EventStream> {
 public:
  // The operation the stream serves. Called on the strand; the stream holds it weakly.
  class Owner {
   public:
    virtual ~Owner() = default;
    // A stream is up (the first one or a reconnect): the requests to write first (the subscribe).
    virtual std::vector<ClientRequest> OnStreamUp(bool reconnected) = 0;
    virtual void OnStreamEvent(const Event& event) = 0;
    // The stream dropped; unless the owner closes the EventStream here, it reconnects after a backoff.
    virtual void OnStreamDown(const Error& why) = 0;
    // Gave up (first connect refused, budget spent, reconnecting disabled, a line too large). Final.
    virtual void OnStreamFailed(Error error) = 0;
  };

  // `loop`: the operation's private loop (or null on the Context), kept alive by a connect that may
  // complete on another thread (the local backend's connector starts a stopped runtime on the Context).
  // `timers`: the operation's (on `strand`), for the handshake bound and the reconnect backoff.
  EventStream(std::shared_ptr<DriverState> driver, PrivateLoop loop, Strand strand, std::shared_ptr<OpTimers> timers,
              ReconnectPolicy policy, std::string who);

  // Connects for the first time. `owner` must outlive every call into it (the stream checks).
  void Start(std::weak_ptr<Owner> owner);
  // Between connections: connect now instead of after the backoff (an abandoned turn that must reach
  // the runtime to withdraw). No effect while connected or connecting.
  void ReconnectNow();
  // Writes on the current connection; `done` gets connection_lost when there is none.
  void Send(const ClientRequest& request, Connection::WriteHandler done = {});
  // Closes the connection and stops reconnecting. Idempotent; no owner call after it.
  void Close();

  bool connected() const noexcept { return conn_ != nullptr; }

  // A connect's report waiting for the strand (ReportConnectTo).
  ConnectPark connect_park;
  void OnConnect(Result<std::shared_ptr<Connection>> result);
  bool connecting() const noexcept { return connecting_; }
  bool ever_connected() const noexcept { return ever_connected_; }
  int reconnects() const noexcept { return reconnects_; }

 private:
  void Connect();
  void Read();
  void OnLine(std::uint64_t gen, Result<std::string> line);
  // Decodes one line and hands its event to the owner; false when the owner is gone.
  bool HandleLine(std::string_view line);
  void OnDrop(const Error& error);
  void ScheduleReconnect();
  void Fail(Error error);
  std::shared_ptr<Owner> LockOwner();

  PrivateLoop loop_;
  std::shared_ptr<DriverState> driver_;
  Strand strand_;
  ReconnectPolicy policy_;
  std::string who_;  // "turn", "watch": for log lines
  std::weak_ptr<Owner> owner_;
  std::shared_ptr<OpTimers> timers_;
  OpTimers::Key backoff_ = 0;
  OpTimers::Key handshake_ = 0;
  std::shared_ptr<Connection> conn_;
  std::uint64_t generation_ = 0;  // handlers of an older connection are ignored
  bool connecting_ = false;
  bool ever_connected_ = false;
  bool closed_ = false;
  bool in_read_call_ = false;  // inside conn_->AsyncReadLine (Read)
  int attempts_ = 0;  // consecutive failed attempts since the last progress
  int reconnects_ = 0;
  std::int64_t max_event_id_ = 0;  // the highest journaled id seen: a higher one is progress
  std::string last_drop_;
  Event event_;  // decoded into line after line (OnLine runs on the strand, never nested)
};

}  // namespace sessionturn::driver_detail
