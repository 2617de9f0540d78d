#include "sessionturn/session_driver.hpp"

#include "kube/background_writes.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace sessionturn {
namespace {

// Shared by the decorating connector and its connections: fires `on_replayed` once, on the worker
// that delivered the history.end (it must not block: the acknowledgement is an async PATCH).
struct ReplayNotice {
  Context* context = nullptr;
  std::function<void()> on_replayed;
  std::atomic<bool> fired{false};

  void Fire() {
    if (fired.exchange(true)) return;
    try {
      on_replayed();
    } catch (const std::exception& e) {
      context->Log(LogLevel::warning, std::string("after the first replay: ") + e.what());
    }
  }
};

// Passes lines through and fires the notice at the first history.end.
class NotifyingConnection : public Connection, public std::enable_shared_from_this<NotifyingConnection> {
 public:
  NotifyingConnection(std::shared_ptr<Connection> inner, std::shared_ptr<ReplayNotice> notice)
      : inner_(std::move(inner)), notice_(std::move(notice)) {}
  ~NotifyingConnection() override { inner_->Close(); }

  void AsyncReadLine(LineHandler handler) override {
    if (notice_->fired.load()) return inner_->AsyncReadLine(std::move(handler));
    inner_->AsyncReadLine([notice = notice_, handler = std::move(handler)](Result<std::string> line) {
      // A cheap substring test first; decode only lines that may be the one.
      if (line && !notice->fired.load() && line->find("history.end") != std::string::npos) {
        auto event = DecodeEvent(*line);
        if (event && event->Is(event_type::kHistoryEnd)) notice->Fire();
      }
      handler(std::move(line));
    });
  }
  void AsyncWrite(std::string line, WriteHandler done) override { inner_->AsyncWrite(std::move(line), std::move(done)); }
  void AsyncWriteLines(std::vector<std::string> lines) override { inner_->AsyncWriteLines(std::move(lines)); }
  void Close() override { inner_->Close(); }
  std::string Diagnostics() const override { return inner_->Diagnostics(); }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  std::shared_ptr<Connection> inner_;
  std::shared_ptr<ReplayNotice> notice_;
};

class NotifyingConnector : public Connector {
 public:
  NotifyingConnector(std::shared_ptr<Connector> inner, std::shared_ptr<ReplayNotice> notice)
      : inner_(std::move(inner)), notice_(std::move(notice)) {}

  void AsyncConnect(ConnectHandler handler) override {
    inner_->AsyncConnect([notice = notice_, handler = std::move(handler)](Result<std::shared_ptr<Connection>> c) {
      if (!c || notice->fired.load()) return handler(std::move(c));
      handler(std::shared_ptr<Connection>(std::make_shared<NotifyingConnection>(std::move(*c), notice)));
    });
  }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  std::shared_ptr<Connector> inner_;
  std::shared_ptr<ReplayNotice> notice_;
};

}  // namespace

std::shared_ptr<Connector> NotifyOnFirstReplay(Context& context, std::shared_ptr<Connector> inner,
                                               std::function<void()> on_replayed) {
  auto notice = std::make_shared<ReplayNotice>();
  notice->context = &context;
  notice->on_replayed = std::move(on_replayed);
  return std::make_shared<NotifyingConnector>(std::move(inner), std::move(notice));
}

namespace {

// Resolves the Session on every connect (a turn after an idle suspension or a Pod restart reaches
// the new Pod): WaitReady (one list when it is ready, a watch and a resume request when it is not),
// then pods/exec to its Pod, and the resume acknowledgement after that connection's first
// history.end when the wait found one to acknowledge.
class SessionConnector : public Connector, public std::enable_shared_from_this<SessionConnector> {
 public:
  // `writes`: the owner's tally, which the owner waits for; null: the connector's own, waited for by
  // its destructor.
  SessionConnector(Context& context, KubeConfig kube, std::shared_ptr<KubeClient> client, std::string ns,
                   std::string name, SessionDriverOptions options, std::string initial_request,
                   std::shared_ptr<kube::BackgroundWrites> writes)
      : context_(context),
        kube_(std::move(kube)),
        client_(std::move(client)),
        ns_(std::move(ns)),
        name_(std::move(name)),
        options_(std::move(options)),
        pending_request_(std::move(initial_request)),
        owns_writes_(writes == nullptr),
        acks_(writes ? std::move(writes) : std::make_shared<kube::BackgroundWrites>()) {}

  void AsyncConnect(ConnectHandler handler) override {
    auto self = shared_from_this();
    WaitReadyOptions wait = options_.wait;
    SessionClient(*client_, ns_).AsyncWaitReady(
        name_, std::chrono::steady_clock::now() + options_.wait_ready_timeout, std::move(wait),
        [self, handler = std::move(handler)](Result<ReadySession> ready) mutable {
          if (!ready) return handler(Fail(ready.error()));
          self->ConnectTo(std::move(*ready), std::move(handler));
        });
  }

  std::string Describe() const override { return "session:" + ns_ + "/" + name_; }

 private:
  void ConnectTo(ReadySession ready, ConnectHandler handler) {
    std::shared_ptr<Connector> exec;
    std::string request;
    {
      std::lock_guard lock(mu_);
      if (!exec_ || pod_ != ready.pod_name) {
        pod_ = ready.pod_name;
        exec_ = MakeKubeExecConnector(context_, kube_, ns_, pod_, options_.container, options_.command, options_.limits);
      }
      exec = exec_;
      if (!ready.resume_request.empty()) pending_request_ = ready.resume_request;
      request = pending_request_;
    }
    if (request.empty()) return exec->AsyncConnect(std::move(handler));
    std::weak_ptr<SessionConnector> weak = shared_from_this();
    NotifyOnFirstReplay(context_, exec, [weak, request] {
      if (auto self = weak.lock()) self->Acknowledge(request);
    })->AsyncConnect(std::move(handler));
  }

  void Acknowledge(const std::string& request) {
    {
      std::lock_guard lock(mu_);
      if (pending_request_ != request) return;  // acknowledged already, by another connection
      pending_request_.clear();
    }
    acks_->Begin();
    // The handler holds no reference to the client: a call's handler holding its own client would
    // keep the two alive for good if the Context stopped first. The connector's destructor gives the
    // PATCH its time (kBackgroundWriteGrace); a client destroyed before it reported cancels it.
    std::weak_ptr<SessionConnector> weak = shared_from_this();
    SessionClient(*client_, ns_).AsyncAcknowledgeResume(
        name_, request, [weak, acks = acks_, &context = context_, who = ns_ + "/" + name_, request](Status st) {
          if (!st) {
            context.Log(LogLevel::warning, "acknowledging the resume of Session " + who + " failed: " + st.error().ToString());
            if (auto self = weak.lock()) {
              std::lock_guard lock(self->mu_);
              if (self->pending_request_.empty()) self->pending_request_ = request;  // the next connection tries again
            }
          }
          acks->End();
        });
  }

 public:
  ~SessionConnector() override {
    // A short-lived caller (a CLI turn) destroys its driver right after the turn: give an
    // acknowledgement in flight the time to land, as the Driver gives a withdrawal its grace. Not on
    // a worker (it would block the loop the PATCH needs), not on a stopped Context (nothing runs);
    // a backend's connector leaves it to the backend, whose destruction is on the caller's thread.
    if (!owns_writes_ || context_.InWorkerThread() || context_.Stopped()) return;
    acks_->WaitIdle(kube::kBackgroundWriteGrace);
  }

 private:
  Context& context_;
  KubeConfig kube_;
  std::shared_ptr<KubeClient> client_;
  const std::string ns_;
  const std::string name_;
  const SessionDriverOptions options_;
  std::mutex mu_;
  std::string pod_;
  std::shared_ptr<Connector> exec_;
  std::string pending_request_;
  const bool owns_writes_;
  const std::shared_ptr<kube::BackgroundWrites> acks_;  // acknowledgements in flight
};

}  // namespace

std::shared_ptr<Connector> MakeSessionConnector(Context& context, const KubeConfig& kube,
                                                std::shared_ptr<KubeClient> client, const std::string& namespace_name,
                                                const std::string& name, const std::string& resume_request,
                                                const SessionDriverOptions& options) {
  return std::make_shared<SessionConnector>(context, kube, std::move(client),
                                            namespace_name.empty() ? kube.Namespace() : namespace_name, name, options,
                                            resume_request, nullptr);
}

std::shared_ptr<Connector> kube::MakeOwnedSessionConnector(Context& context, const KubeConfig& kube,
                                                           std::shared_ptr<KubeClient> client,
                                                           const std::string& namespace_name, const std::string& name,
                                                           const std::string& resume_request,
                                                           const SessionDriverOptions& options,
                                                           std::shared_ptr<BackgroundWrites> writes) {
  return std::make_shared<SessionConnector>(context, kube, std::move(client),
                                            namespace_name.empty() ? kube.Namespace() : namespace_name, name, options,
                                            resume_request, std::move(writes));
}

std::shared_ptr<Connector> MakeSessionConnector(Context& context, const KubeConfig& kube,
                                                const std::string& namespace_name, const std::string& name,
                                                const ReadySession& ready, const SessionDriverOptions& options) {
  KubeClientOptions client_options = options.client;
  auto client = std::make_shared<KubeClient>(context, kube, client_options);
  return MakeSessionConnector(context, kube, std::move(client), namespace_name, name, ready.resume_request, options);
}

Result<SessionDriver> ForSession(Context& context, const KubeConfig& kube, std::string namespace_name,
                                 std::string name, SessionDriverOptions options) {
  if (context.InWorkerThread()) {
    return Fail(Errc::would_block, "ForSession blocks; call it from your own thread, not a Context worker");
  }
  if (name.empty()) return Fail(Errc::invalid_argument, "ForSession: the Session name is empty");
  if (namespace_name.empty()) namespace_name = kube.Namespace();
  auto client = std::make_shared<KubeClient>(context, kube, options.client);
  SessionClient sessions(*client, namespace_name);
  auto ready = sessions.WaitReady(name, std::chrono::steady_clock::now() + options.wait_ready_timeout, options.wait);
  if (!ready) return Fail(ready.error());

  auto connector = MakeSessionConnector(context, kube, client, namespace_name, name, ready->resume_request, options);
  SessionDriver out;
  out.driver = std::make_unique<Driver>(context, std::move(connector));
  out.session = std::move(ready->session);
  out.pod_name = std::move(ready->pod_name);
  out.resume_request = std::move(ready->resume_request);
  return out;
}

}  // namespace sessionturn
