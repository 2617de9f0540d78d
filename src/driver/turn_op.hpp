// One turn in flight: a TurnTracker bound to an EventStream, the turn's deadline, the caller's
// cancellation, the questions surfaced to the caller and the abandon grace, all timed by one timer. Serialized on its own
// strand: every handler (stream, timers, cancellation, responders) runs there, so the state below is
// touched by one thread at a time with no lock.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/driver_impl.hpp"
#include "driver/event_stream.hpp"

namespace sessionturn {

struct Responder::Impl {
  std::weak_ptr<driver_detail::TurnOp> op;
  std::string input_id;
  std::atomic<bool> used{false};  // answered, declined, timed out, resolved elsewhere, or the turn ended
};

namespace driver_detail {

class TurnOp : public std::enable_shared_from_this<TurnOp>, public EventStream::Owner {
 public:
  // A new turn for `prompt`, or (options.attach in `tracker`) one submitted before.
  // `loop`: a blocking call's private loop, or null to run on the Context.
  TurnOp(std::shared_ptr<DriverState> driver, PrivateLoop loop, std::string prompt, TurnTrackerOptions tracker,
         TurnOptions options, TurnHandler handler);

  void Start();
  // From any thread.
  void Cancel(Error error);
  // Ends the turn with Errc::cancelled and closes its connection, writing nothing (Driver::DetachTurns).
  void Detach();
  void Respond(std::string input_id, std::optional<std::map<std::string, std::vector<std::string>>> answers);
  bool finished() const noexcept { return finished_.load(); }
  // Only once the Context's workers are joined (nothing runs concurrently): drops the stream.
  void ReleaseStopped();

  // EventStream::Owner
  std::vector<ClientRequest> OnStreamUp(bool reconnected) override;
  void OnStreamEvent(const Event& event) override;
  void OnStreamDown(const Error& why) override;
  void OnStreamFailed(Error error) override;

 private:
  Context& ctx() const { return driver_->context; }
  void OnStart();
  void OnDetach();
  Error DetachedError() const;
  void HandleStep(const Event& event, TurnStep step);
  void SendAll(std::vector<ClientRequest> requests);
  void AbandonWith(Error error);
  void StartGrace(std::chrono::milliseconds grace);
  void WithdrawThenFinish(std::vector<ClientRequest> requests, Error error);
  void SurfaceQuestion(const Event& event);
  void CloseQuestion(const std::string& input_id);
  void OnRespond(const std::string& input_id, std::optional<std::map<std::string, std::vector<std::string>>> answers);
  TurnResult MakeResult(TurnOutcome outcome) const;
  void Finish(Result<TurnResult> result);

  PrivateLoop loop_;  // first: destroyed after everything below that uses it
  std::shared_ptr<DriverState> driver_;
  Strand strand_;
  TurnTracker tracker_;
  TurnOptions options_;
  TurnHandler handler_;
  bool attached_;
  bool shared_told_ = false;  // on_shared was called
  // One timer for the turn (OpTimers): its deadline, the abandon grace, the answer timeouts and the
  // stream's handshake and backoff.
  std::shared_ptr<OpTimers> timers_;
  OpTimers::Key deadline_ = 0;
  OpTimers::Key grace_ = 0;
  std::shared_ptr<EventStream> stream_;
  std::uint64_t cancel_id_ = 0;
  bool done_ = false;
  std::atomic<bool> finished_{false};
  std::map<std::string, std::shared_ptr<Responder::Impl>> responders_;
  std::map<std::string, OpTimers::Key> answer_timers_;
  std::chrono::steady_clock::time_point started_at_;
  std::optional<std::chrono::steady_clock::time_point> message_written_at_;
  std::optional<std::chrono::steady_clock::time_point> accepted_at_, started_at_turn_, completed_at_;
};

}  // namespace driver_detail
}  // namespace sessionturn
