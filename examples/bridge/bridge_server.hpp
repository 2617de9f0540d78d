// The bridges' HTTP side: /healthz (the process is up), /readyz (the platform is connected and the
// backend answers), /metrics
// (Prometheus text: the router's and the adapter's figures, read at each scrape), and the webhook
// routes a bridge adds. Nothing is served when --listen is not given.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <sessionturn/backend.hpp>
#include <sessionturn/context.hpp>
#include <sessionturn/http_server.hpp>
#include <sessionturn/metrics.hpp>
#include <sessionturn/router.hpp>

namespace sessionturn_bridge {

// Figures a bridge reports at each scrape: counters given as totals so far.
class MetricsSink {
 public:
  explicit MetricsSink(sessionturn::Metrics& metrics, std::map<std::string, double>& last)
      : metrics_(metrics), last_(last) {}
  void Counter(const std::string& name, const std::string& help, double total,
               const sessionturn::MetricLabels& labels = {});
  // One labelled series per key of `totals` (an error code, say), under label `label`.
  template <typename Map>
  void CountersBy(const std::string& name, const std::string& help, const std::string& label, const Map& totals) {
    for (const auto& [key, total] : totals) Counter(name, help, static_cast<double>(total), {{label, key}});
  }
  void Gauge(const std::string& name, const std::string& help, double value);

 private:
  sessionturn::Metrics& metrics_;
  std::map<std::string, double>& last_;  // the totals of the previous scrape
};

class BridgeServer {
 public:
  BridgeServer(sessionturn::Context& context, std::string listen, sessionturn::SessionBackend& backend);
  ~BridgeServer();
  void SetReady(std::function<bool()> ready);
  void SetMetrics(std::function<void(MetricsSink&)> collect);
  void SetRouter(sessionturn::Router* router);
  // For RouterOptions::on_turn_finished: turns by status, and the wake and duration histograms.
  std::function<void(const sessionturn::RouterTurnOutcome&)> TurnObserver();
  void Handle(std::string method, std::string path, sessionturn::RouteHandler handler);
  // Listens (when --listen was given): the address, "" when not listening. Throws ExitWith.
  std::string Start();
  void Stop();  // graceful; idempotent

 private:
  struct BackendProbe {
    std::mutex mu;
    bool running = false;
    bool have = false;
    bool ok = false;
    std::string error;
    std::chrono::steady_clock::time_point at;
    std::vector<sessionturn::HttpRespond> waiting;  // probes before the first answer
  };
  void Collect();
  void ProbeBackend(sessionturn::HttpRespond respond);

  sessionturn::Context& context_;
  std::string listen_;
  sessionturn::SessionBackend& backend_;
  std::shared_ptr<BackendProbe> probe_;  // shared with a List in flight, which may outlive a stop
  std::unique_ptr<sessionturn::HttpServer> server_;
  std::function<bool()> ready_;
  std::function<void(MetricsSink&)> collect_;
  sessionturn::Router* router_ = nullptr;
  bool stopped_ = false;
  std::mutex mu_;
  sessionturn::Metrics metrics_;
  std::map<std::string, double> last_;
};

}  // namespace sessionturn_bridge
