// The bridges' health, readiness and metrics endpoints (bridge_server.hpp).
#include "bridge_server.hpp"

#include "bridge.hpp"

namespace sessionturn_bridge {
namespace st = sessionturn;

void MetricsSink::Counter(const std::string& name, const std::string& help, double total,
                          const st::MetricLabels& labels) {
  auto c = metrics_.GetCounter(name, help, labels);
  if (!c) return;
  std::string key = name;
  for (const auto& [k, v] : labels) key += '\x1f' + k + '=' + v;
  double& last = last_[key];
  if (total > last) (*c)->Increment(total - last);
  last = total;
}

void MetricsSink::Gauge(const std::string& name, const std::string& help, double value) {
  if (auto g = metrics_.GetGauge(name, help)) (*g)->Set(value);
}

BridgeServer::BridgeServer(st::Context& context, std::string listen, st::SessionBackend& backend)
    : context_(context), listen_(std::move(listen)), backend_(backend), probe_(std::make_shared<BackendProbe>()) {
  if (listen_.empty()) return;
  st::HttpServerOptions options;
  options.listen = listen_;
  server_ = std::make_unique<st::HttpServer>(context_, options);
  Handle("GET", "/healthz", [](const st::ServerRequest&, st::HttpRespond respond) {
    respond({200, {{"Content-Type", "text/plain"}}, "ok\n"});
  });
  Handle("GET", "/readyz", [this](const st::ServerRequest&, st::HttpRespond respond) {
    if (!ready_ || !ready_()) {
      return respond({503, {{"Content-Type", "text/plain"}}, "the platform is not connected\n"});
    }
    ProbeBackend(std::move(respond));
  });
  Handle("GET", "/metrics", [this](const st::ServerRequest&, st::HttpRespond respond) {
    std::string body;
    {
      std::lock_guard lock(mu_);
      Collect();
      body = metrics_.Serialize();
    }
    respond({200, {{"Content-Type", std::string(st::Metrics::kContentType)}}, std::move(body)});
  });
}

BridgeServer::~BridgeServer() = default;

void BridgeServer::SetReady(std::function<bool()> ready) { ready_ = std::move(ready); }

namespace {
st::ServerResponse BackendAnswer(bool ok, const std::string& error) {
  if (ok) return {200, {{"Content-Type", "text/plain"}}, "ready\n"};
  return {503, {{"Content-Type", "text/plain"}}, "the backend is not reachable: " + error + "\n"};
}
}  // namespace

// Probes come every few seconds from every kubelet and load balancer: the backend is asked at most
// once per kProbeTtl (a List, the cheapest call every backend has), and a probe meanwhile gets the
// last answer at once. Only the very first probe waits for the backend.
void BridgeServer::ProbeBackend(st::HttpRespond respond) {
  static constexpr std::chrono::seconds kProbeTtl{10};
  auto probe = probe_;
  bool start = false;
  std::optional<st::ServerResponse> answer;
  {
    std::lock_guard lock(probe->mu);
    const auto now = std::chrono::steady_clock::now();
    if (!probe->running && (!probe->have || now - probe->at >= kProbeTtl)) start = probe->running = true;
    if (probe->have) {
      answer = BackendAnswer(probe->ok, probe->error);
    } else {
      probe->waiting.push_back(std::move(respond));
    }
  }
  if (answer) respond(std::move(*answer));
  if (!start) return;
  backend_.AsyncList("", [probe](st::Result<std::vector<st::SessionInfo>> sessions) {
    std::vector<st::HttpRespond> waiting;
    {
      std::lock_guard lock(probe->mu);
      probe->running = false;
      probe->have = true;
      probe->at = std::chrono::steady_clock::now();
      probe->ok = sessions.has_value();
      probe->error = sessions ? std::string() : sessions.error().ToString();
      waiting.swap(probe->waiting);
    }
    for (auto& r : waiting) r(BackendAnswer(sessions.has_value(), sessions ? "" : sessions.error().ToString()));
  });
}
void BridgeServer::SetMetrics(std::function<void(MetricsSink&)> collect) { collect_ = std::move(collect); }
void BridgeServer::SetRouter(st::Router* router) { router_ = router; }

std::function<void(const st::RouterTurnOutcome&)> BridgeServer::TurnObserver() {
  return [this](const st::RouterTurnOutcome& outcome) {
    // Seconds, as Prometheus wants; buckets from a ready Session's instant answer to a long agent turn.
    static const std::vector<double> kWake{0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300};
    static const std::vector<double> kTurn{0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600};
    if (auto c = metrics_.GetCounter("sessionturn_turns_total", "turns that ended, by status",
                                     {{"status", outcome.status}})) {
      (*c)->Increment();
    }
    if (auto h = metrics_.GetHistogram("sessionturn_wake_seconds", "time a turn waited for its Session to be ready",
                                       kWake)) {
      (*h)->Observe(std::chrono::duration<double>(outcome.wake).count());
    }
    if (auto h = metrics_.GetHistogram("sessionturn_turn_duration_seconds", "a turn's time from start to end", kTurn)) {
      (*h)->Observe(std::chrono::duration<double>(outcome.duration).count());
    }
  };
}

void BridgeServer::Handle(std::string method, std::string path, st::RouteHandler handler) {
  if (!server_) return;
  if (auto s = server_->Handle(std::move(method), std::move(path), std::move(handler)); !s) {
    throw ExitWith{kExitRuntime, s.error().message};
  }
}

void BridgeServer::Collect() {
  MetricsSink sink(metrics_, last_);
  if (router_ != nullptr) {
    const st::RouterStats s = router_->Stats();
    sink.Gauge("sessionturn_turns_in_flight", "turns running in their Sessions", double(s.turns_in_flight));
    sink.Gauge("sessionturn_turns_queued", "messages waiting for their Session", double(s.turns_waiting));
    sink.Gauge("sessionturn_sessions", "Sessions with state in this process", double(s.sessions));
    sink.Gauge("sessionturn_open_questions", "the agent's questions waiting for an answer", double(s.open_questions));
    sink.Gauge("sessionturn_outbox", "reply parts not delivered yet", double(s.outbox));
    sink.Counter("sessionturn_turns_completed_total", "turns that ended", double(s.turns_completed));
    sink.Counter("sessionturn_replies_delivered_total", "replies whose every part reached the chat",
                 double(s.replies_delivered));
    sink.Counter("sessionturn_messages_accepted_total", "chat messages accepted", double(s.messages_accepted));
    sink.Counter("sessionturn_progress_edits_dropped_total", "progress edits skipped by rate limits",
                 double(s.edits_dropped));
  }
  if (collect_) collect_(sink);
}

std::string BridgeServer::Start() {
  if (!server_) return "";
  auto port = server_->Start();
  if (!port) throw ExitWith{kExitConfig, "--listen " + listen_ + ": " + port.error().message};
  return server_->LocalAddress();
}

void BridgeServer::Stop() {
  if (server_ && !stopped_) (void)server_->StopAndWait();
  stopped_ = true;
}

}  // namespace sessionturn_bridge
