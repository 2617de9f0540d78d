// The router tests' rig: a temp root, adapter capabilities, messages, and a Router over an
// in-process LocalBackend with a recording adapter.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "backend/local_backend_support.hpp"
#include "recording_adapter.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/router.hpp"

namespace router_test {
// A temp directory for the store and the Sessions' state; on the way out it kills the runtime
// processes started under it (out-of-process runtimes outlive their starter) and removes it.
class TempRoot {
 public:
  const std::string& path() const { return root_.path(); }
  std::string File(const std::string& name, const std::string& text) const {
    std::string p = path() + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  void KillRuntimes() const { root_.KillRuntimes(); }

 private:
  backend_test::StateRoot root_;
};

// Backend options for runtimes in processes of their own (the built runtime program).
inline void OutOfProcess(LocalBackendOptions& b) {
  b.in_process = false;
  b.runtime_program = backend_test::kRuntimeProgram;
}

inline ChatCapabilities ThreadedCaps() {
  ChatCapabilities c;
  c.max_length = 4096;
  c.unit = LengthUnit::utf16;
  c.dialect = MarkupDialect::plain;
  c.threads = true;
  c.buttons = true;
  c.edit_interval = 10ms;
  return c;
}

inline ChatCapabilities PrivateChatCaps() {
  ChatCapabilities c = ThreadedCaps();
  c.threads = false;
  c.command_prefix = "/";
  return c;
}

inline InboundMessage Msg(const std::string& id, const std::string& text, const std::string& thread = "T1",
                          const std::string& author = "U1") {
  InboundMessage m;
  m.platform = "slack";
  m.workspace = "W1";
  m.chat = "C1";
  m.thread = thread;
  m.message_id = id;
  m.event_id = "ev-" + id;
  m.author_id = author;
  m.author_name = "Ada " + author;
  m.text = text;
  m.mentions_bot = true;
  m.is_private_chat = thread.empty();
  return m;
}

// A SessionBackend that hands every call to `inner`: a test's wrapper overrides the calls it watches
// or slows down, and nothing else.
class ForwardingBackend : public SessionBackend {
 public:
  explicit ForwardingBackend(std::unique_ptr<SessionBackend> inner) : inner_(std::move(inner)) {}
  Context& GetContext() const noexcept override { return inner_->GetContext(); }
  std::string Describe() const override { return inner_->Describe(); }
  std::chrono::milliseconds IdleGrace() const noexcept override { return inner_->IdleGrace(); }
  void AsyncEnsure(std::string name, SessionSpec spec, BackendHandler<EnsureResult> handler) override {
    inner_->AsyncEnsure(std::move(name), std::move(spec), std::move(handler));
  }
  void AsyncWaitReady(std::string name, std::chrono::steady_clock::time_point deadline, ReadyProgress progress,
                      CancellationToken cancel, BackendHandler<ReadyTarget> handler) override {
    inner_->AsyncWaitReady(std::move(name), deadline, std::move(progress), std::move(cancel), std::move(handler));
  }
  void AsyncGet(std::string name, BackendHandler<SessionInfo> handler) override {
    inner_->AsyncGet(std::move(name), std::move(handler));
  }
  void AsyncList(std::string selector, BackendHandler<std::vector<SessionInfo>> handler) override {
    inner_->AsyncList(std::move(selector), std::move(handler));
  }
  void AsyncSuspend(std::string name, BackendHandler<SessionInfo> handler) override {
    inner_->AsyncSuspend(std::move(name), std::move(handler));
  }
  void AsyncResume(std::string name, BackendHandler<SessionInfo> handler) override {
    inner_->AsyncResume(std::move(name), std::move(handler));
  }
  void AsyncDelete(std::string name, BackendStatusHandler handler) override {
    inner_->AsyncDelete(std::move(name), std::move(handler));
  }
  void AsyncAnnotate(std::string name, std::map<std::string, std::optional<std::string>> annotations,
                     BackendHandler<SessionInfo> handler) override {
    inner_->AsyncAnnotate(std::move(name), std::move(annotations), std::move(handler));
  }

 protected:
  SessionBackend& inner() { return *inner_; }

 private:
  std::unique_ptr<SessionBackend> inner_;
};

// An edit of message `id` to `text`, delivered as event `event`.
inline InboundMessage Edited(const std::string& id, const std::string& text, const std::string& event) {
  InboundMessage m = Msg(id, text);
  m.kind = MessageKind::edited;
  m.event_id = event;
  return m;
}

// The deletion of message `id`, delivered as event `event`.
inline InboundMessage Deleted(const std::string& id, const std::string& event) {
  InboundMessage m = Msg(id, "");
  m.kind = MessageKind::deleted;
  m.event_id = event;
  return m;
}

// A router over an in-process LocalBackend in `root`.
struct Rig {
  explicit Rig(const TempRoot& root, ChatCapabilities caps = ThreadedCaps(), std::string provider = "echo",
               std::function<void(RouterOptions&)> tweak = {},
               std::function<void(LocalBackendOptions&)> tweak_backend = {},
               std::function<std::unique_ptr<SessionBackend>(std::unique_ptr<SessionBackend>)> wrap_backend = {})
      : context(ContextOptions{2, CaptureLog(), LogLevel::warning}), adapter(context, std::move(caps)) {
    LocalBackendOptions b;
    b.state_dir = root.path() + "/state";
    b.provider = std::move(provider);
    b.in_process = true;
    b.suspend_after = std::chrono::seconds(0);
    if (tweak_backend) tweak_backend(b);
    auto made = MakeLocalBackend(context, b);
    REQUIRE(made);
    backend = std::move(*made);
    if (wrap_backend) backend = wrap_backend(std::move(backend));
    options.owner_uid = "test-owner";
    options.routes = {RouteConfig{}};
    options.routes[0].name = "all";
    options.routes[0].admins = {"admin"};
    options.store_path = root.path() + "/router.db";
    options.progress_interval = 20ms;
    if (tweak) tweak(options);
    auto r = Router::Create(context, *backend, adapter, options);
    REQUIRE(r);
    router = std::move(*r);
    router->Start();
  }
  ~Rig() {
    router.reset();
    backend.reset();
  }

  // Waits until `n` replies were delivered whole (a progress edit may show a reply's start before).
  bool WaitDelivered(std::uint64_t n, std::chrono::milliseconds timeout = 60s) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (router->Stats().replies_delivered < n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  LogSink CaptureLog() {
    return [log = log, stderr_sink = StderrLogSink()](LogLevel level, std::string_view message) {
      std::function<void(std::string_view)> hook;
      {
        std::lock_guard lock(log->mu);
        log->lines.emplace_back(message);
        hook = log->hook;
      }
      stderr_sink(level, message);
      if (hook) hook(message);
    };
  }

  // Log lines at warning and above that hold `needle` (every line still goes to stderr too).
  // Calls `hook` with each line logged from now on (on the logging thread); empty: no more calls.
  void OnLog(std::function<void(std::string_view)> hook) {
    std::lock_guard lock(log->mu);
    log->hook = std::move(hook);
  }

  int LoggedWith(const std::string& needle) {
    std::lock_guard lock(log->mu);
    int n = 0;
    for (const auto& line : log->lines) n += line.find(needle) != std::string::npos;
    return n;
  }

  Result<Disposition> Send(InboundMessage m) {
    auto p = std::make_shared<std::promise<Result<Disposition>>>();
    auto f = p->get_future();
    router->HandleMessage(std::move(m), [p](Result<Disposition> d) { p->set_value(std::move(d)); });
    REQUIRE(f.wait_for(30s) == std::future_status::ready);
    return f.get();
  }

  struct Log {
    std::mutex mu;
    std::vector<std::string> lines;
    // Called with each line as it is logged, on the logging thread (the router's strand: what it
    // does happens before the router's next step).
    std::function<void(std::string_view)> hook;
  };
  // Declared before the Context, whose sink writes here.
  std::shared_ptr<Log> log = std::make_shared<Log>();
  Context context;
  RecordingAdapter adapter;
  std::unique_ptr<SessionBackend> backend;
  RouterOptions options;
  std::unique_ptr<Router> router;
};

// Hands messages over to a rig's router together, as a platform that redelivers after an outage
// does: all in one job of the router's strand (at the post of a trigger message's placeholder), so
// that one burst takes them in. Takes the adapter's on_send: make it before the first message, and
// keep the rig's router while it lives.
class Together {
 public:
  explicit Together(Rig& rig) : rig_(rig) {
    rig.adapter.on_send = [state = state_, router = rig.router.get()](const SentOp& op) {
      std::vector<Handed> handed;
      std::function<void()> at_handover;
      {
        std::lock_guard lock(state->mu);
        if (op.kind != "post" || !(op.where == state->trigger)) return;
        handed.swap(state->next);
        at_handover = std::exchange(state->at_handover, nullptr);
      }
      if (at_handover) at_handover();
      for (Handed& h : handed) {
        router->HandleMessage(std::move(h.message),
                              [p = h.outcome](Result<Disposition> d) { p->set_value(std::move(d)); });
      }
    };
  }

  // Hands `messages` over at the router's next post in `trigger`'s thread (a new message it accepts,
  // alone in that thread: its placeholder); their outcomes, in order.
  // `at_handover`, when given, runs just before they are handed over (on the adapter's caller's thread).
  std::vector<Result<Disposition>> Send(InboundMessage trigger, std::vector<InboundMessage> messages,
                                        std::function<void()> at_handover = {}) {
    std::vector<std::future<Result<Disposition>>> outcomes;
    {
      std::lock_guard lock(state_->mu);
      state_->trigger = trigger.Where();
      state_->at_handover = std::move(at_handover);
      for (InboundMessage& m : messages) {
        auto p = std::make_shared<std::promise<Result<Disposition>>>();
        outcomes.push_back(p->get_future());
        state_->next.push_back(Handed{std::move(m), std::move(p)});
      }
    }
    REQUIRE(*rig_.Send(std::move(trigger)) == Disposition::accepted);
    std::vector<Result<Disposition>> out;
    for (auto& f : outcomes) {
      REQUIRE(f.wait_for(30s) == std::future_status::ready);
      out.push_back(f.get());
    }
    return out;
  }

 private:
  struct Handed {
    InboundMessage message;
    std::shared_ptr<std::promise<Result<Disposition>>> outcome;
  };
  struct State {
    std::mutex mu;
    ThreadRef trigger;         // where the post they wait for goes
    std::vector<Handed> next;  // handed over at that post
    std::function<void()> at_handover;
  };
  Rig& rig_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// A script turn that asks one question with two options; the script provider then replies
// "Answers: lang=<the answer>".
inline constexpr const char* kLanguageQuestion = R"({"turns": [[
    {"type": "question", "inputId": "pick", "questions": [
      {"id": "lang", "header": "Language", "question": "Which language?",
       "options": [{"label": "C++"}, {"label": "Python"}]}]}]]})";

// Successful posts whose text contains `needle`.
inline int Posts(const std::vector<SentOp>& ops, const std::string& needle) {
  int n = 0;
  for (const auto& op : ops) n += op.kind == "post" && op.ok && op.text.find(needle) != std::string::npos;
  return n;
}

// Successful posts and edits whose text contains `needle`.
inline bool Sent(const std::vector<SentOp>& ops, const std::string& needle) {
  for (const auto& op : ops) {
    if (op.ok && op.text.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace router_test
