#include "sessionturn/session_driver.hpp"

#include <atomic>
#include <mutex>
#include <thread>

namespace sessionturn {
namespace {

// Shared by the decorating connector and its connections: fires `on_replayed` once.
struct ReplayNotice {
  Context* context = nullptr;
  std::function<void()> on_replayed;
  std::atomic<bool> fired{false};
  std::mutex mu;
  std::thread worker;

  void Fire() {
    if (fired.exchange(true)) return;
    std::lock_guard<std::mutex> lock(mu);
    // A thread, not a Context handler: the callback makes blocking REST calls.
    worker = std::thread([this] {
      try {
        on_replayed();
      } catch (const std::exception& e) {
        context->Log(LogLevel::warning, std::string("after the first replay: ") + e.what());
      }
    });
  }

  ~ReplayNotice() {
    std::lock_guard<std::mutex> lock(mu);
    if (!worker.joinable()) return;
    if (worker.get_id() == std::this_thread::get_id()) {
      worker.detach();
    } else {
      worker.join();
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

std::shared_ptr<Connector> MakeSessionConnector(Context& context, const KubeConfig& kube,
                                                const std::string& namespace_name, const std::string& name,
                                                const ReadySession& ready, const SessionDriverOptions& options) {
  std::shared_ptr<Connector> connector = MakeKubeExecConnector(context, kube, namespace_name, ready.pod_name,
                                                               options.container, options.command, options.limits);
  if (ready.resume_request.empty()) return connector;
  // The acknowledgement runs on its own client: the caller's objects may be gone by then.
  return NotifyOnFirstReplay(
      context, std::move(connector),
      [&context, kube, client_options = options.client, namespace_name, name, request = ready.resume_request] {
        KubeClientOptions o = client_options;
        o.context = nullptr;  // this is our own thread
        KubeClient ack_client(kube, o);
        SessionClient ack_sessions(ack_client, namespace_name);
        if (auto st = ack_sessions.AcknowledgeResume(name, request); !st) {
          context.Log(LogLevel::warning, "acknowledging the resume of Session " + namespace_name + "/" + name +
                                             " failed: " + st.error().ToString());
        }
      });
}

Result<SessionDriver> ForSession(Context& context, const KubeConfig& kube, std::string namespace_name,
                                 std::string name, SessionDriverOptions options) {
  if (context.InWorkerThread()) {
    return Fail(Errc::would_block, "ForSession blocks; call it from your own thread, not a Context worker");
  }
  if (name.empty()) return Fail(Errc::invalid_argument, "ForSession: the Session name is empty");
  if (namespace_name.empty()) namespace_name = kube.Namespace();
  options.client.context = &context;
  KubeClient client(kube, options.client);
  SessionClient sessions(client, namespace_name);
  auto ready = sessions.WaitReady(name, std::chrono::steady_clock::now() + options.wait_ready_timeout, options.wait);
  if (!ready) return Fail(ready.error());

  std::shared_ptr<Connector> connector = MakeSessionConnector(context, kube, namespace_name, name, *ready, options);
  SessionDriver out;
  out.driver = std::make_unique<Driver>(context, std::move(connector));
  out.session = std::move(ready->session);
  out.pod_name = std::move(ready->pod_name);
  out.resume_request = std::move(ready->resume_request);
  return out;
}

}  // namespace sessionturn
