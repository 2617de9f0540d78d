// The local runtime's state and behaviour, shared by its three parts: local_runtime.cpp (the socket,
// the public API and fault hooks), core_requests.cpp (fan-out and what each client request does)
// and core_turns.cpp (running turns, provider events, recovery).
//
// Everything that touches Session state runs on the runtime's own I/O thread (one io_context, one
// thread), so there are no data races by construction; the public hooks hop onto that thread and
// wait (bounded) for the result. Readers of the journal on other threads (JournalEvents,
// WaitForEvent) hold `mu`, which the I/O thread takes to append.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "runtime/connection.hpp"
#include "runtime/journal.hpp"
#include "runtime/provider.hpp"
#include "sessionturn/testing/local_runtime.hpp"

namespace sessionturn::testing::local_runtime_detail {

using runtime::Conn;

struct Core;

// The runtime's side of one turn (see runtime::TurnHost). Dead once the turn is over or killed.
class ActiveHost : public runtime::TurnHost {
 public:
  ActiveHost(Core& rt, std::string turn_id) : rt_(rt), turn_id_(std::move(turn_id)) {}
  void Emit(Event event) override;
  std::string Ask(std::string input_id, std::vector<InputQuestion> questions) override;
  void CancelInputs() override;
  void Done(std::string status, std::string error) override;
  bool Paused() const override;
  void WhenResumed(std::function<void()> fn) override;
  asio::io_context& io() override;
  std::size_t Backlog() const override;
  std::size_t BacklogBound() const override;

  bool alive = true;
  const std::string& turn_id() const { return turn_id_; }

 private:
  Core& rt_;
  std::string turn_id_;
};

Event MakeEvent(std::string_view type);

struct Core : runtime::ConnOwner {
  LocalRuntimeOptions opt;
  asio::io_context io{1};
  // After io: a provider's I/O objects (claude-code's pipes) go before the io_context.
  std::shared_ptr<runtime::Provider> provider;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  std::atomic<std::thread::id> io_thread_id{};
  std::atomic<bool> stopped{false};

  std::optional<asio::local::stream_protocol::acceptor> acceptor;
  std::unique_ptr<runtime::Journal> journal;  // appended on the I/O thread under `mu`
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::vector<ClientRequest> requests;  // under mu; only with opt.record_requests
  std::atomic<std::size_t> conn_count{0};

  std::set<std::shared_ptr<Conn>> conns;
  std::vector<Conn*> subscribers;
  RuntimeStatus status;

  std::shared_ptr<ActiveHost> host;
  std::shared_ptr<runtime::TurnRun> run;
  std::map<std::string, std::map<std::string, std::vector<std::string>>> partial_answers;
  asio::steady_timer interrupt_timer{io};
  asio::steady_timer restart_timer{io};
  bool interrupt_armed = false;
  bool paused = false;
  bool draining = false;
  bool restarting = false;
  bool stopping = false;
  std::vector<std::function<void()>> resume_waiters;
  std::int64_t pending_drop = 0;
  // The idle policy's inputs (LocalRuntime::Activity), under mu: busy while a turn runs or is queued
  // or a question is open; `stirred` is the last request, connection or end of a busy stretch.
  bool busy = false;
  std::chrono::steady_clock::time_point stirred = std::chrono::steady_clock::now();
  std::chrono::system_clock::time_point last_turn{};

  explicit Core(LocalRuntimeOptions o) : opt(std::move(o)) {}

  // runtime::ConnOwner
  void OnRequestLine(Conn& c, std::string_view line) override;
  void OnClosed(const std::shared_ptr<Conn>& c) override;
  void Log(LogLevel level, const std::string& message) const override;
  std::size_t SubscriberBound() const override { return opt.subscriber_buffer; }

  // local_runtime.cpp: the socket.
  void RunOnIo(const std::function<void()>& fn);
  Status Listen();
  void Accept();
  void CloseListener();
  void CloseAll();
  void Shutdown();

  // core_requests.cpp: fan-out and requests.
  void Stir();  // a request or a connection: the idle clock starts again
  void NoteActivity(const std::string& type);  // after each append, under mu
  Status Append(Event e);  // journals and broadcasts; the error when the journal could not be written
  void BroadcastUnjournaled(const Event& e);
  void SendTo(Conn& c, const Event& e);  // to one connection, not counted as live, no timestamp
  void Reject(Conn& c, const ClientRequest& r, std::string reason, bool with_turn = false);
  Event StatusEvent() const;
  void Handle(Conn& c, const ClientRequest& r);
  void Subscribe(Conn& c, const ClientRequest& r);
  void History(Conn& c, const ClientRequest& r);
  void Prompts(Conn& c, const ClientRequest& r);
  void OnMessage(Conn& c, const ClientRequest& r);
  void OnEdit(Conn& c, const ClientRequest& r);
  void OnRemove(Conn& c, const ClientRequest& r);
  void OnInterrupt(Conn& c, const ClientRequest& r);
  void OnInput(Conn& c, const ClientRequest& r);

  // core_turns.cpp: turns, provider events, recovery.
  void MaybeStartNext();
  void CancelOpenInputs(const std::string& turn_id);
  void KillRun();
  void TurnDone(const std::string& turn_id, std::string status_text, std::string error);
  void ProviderEmit(const std::string& turn_id, Event e);
  std::string Ask(const std::string& turn_id, std::string input_id, std::vector<InputQuestion> questions);
  void Recover();
};

}  // namespace sessionturn::testing::local_runtime_detail
