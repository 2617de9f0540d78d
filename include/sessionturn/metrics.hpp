// Prometheus metrics for the bridges' /metrics: counters, gauges and histograms in families with a
// fixed set of label names, serialized in the text exposition format 0.0.4. A thin facade over
// prometheus-cpp (core), so none of its headers reach ours.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sessionturn/error.hpp"

namespace sessionturn {

// Label names and values of one series: {{"platform", "telegram"}, {"status", "ok"}}. Order does
// not matter; the names must be the family's, each once.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A registry of metric families. A family is created on first use (name, help, label names, and for
// a histogram its buckets); every later use must repeat the same definition, else
// Errc::invalid_argument says what differs. Names follow Prometheus's rules ([a-zA-Z_:][a-zA-Z0-9_:]*,
// label names without ':' and not starting with "__"); one name is one type.
//
// Thread-safety: every method, and every method of the handles, may be called from any thread. A
// handle (Counter&, Gauge&, Histogram&) stays valid for the Metrics' lifetime: look it up once and
// keep it rather than looking it up per event.
class Metrics {
 public:
  // What GET /metrics answers with in its Content-Type.
  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

  class Counter {
   public:
    // Adds `by`; a negative or NaN `by` is ignored (a counter only goes up).
    void Increment(double by = 1);
    double Value() const;

   private:
    friend class Metrics;
    explicit Counter(void* metric) : metric_(metric) {}
    void* metric_;  // prometheus::Counter, owned by the registry
  };

  class Gauge {
   public:
    void Set(double value);
    void Increment(double by = 1);
    void Decrement(double by = 1);
    double Value() const;

   private:
    friend class Metrics;
    explicit Gauge(void* metric) : metric_(metric) {}
    void* metric_;  // prometheus::Gauge
  };

  class Histogram {
   public:
    void Observe(double value);

   private:
    friend class Metrics;
    explicit Histogram(void* metric) : metric_(metric) {}
    void* metric_;  // prometheus::Histogram
  };

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The series of family `name` with these labels, created (at 0) on first use. A counter's name
  // should end in "_total", as Prometheus expects; it is not enforced.
  Result<Counter*> GetCounter(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Result<Gauge*> GetGauge(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  // `buckets`: the upper bounds, strictly increasing (the +Inf bucket is implied); they are part of
  // the family's definition.
  Result<Histogram*> GetHistogram(const std::string& name, const std::string& help, const std::vector<double>& buckets,
                                  const MetricLabels& labels = {});

  // Every family in the text exposition format 0.0.4 (kContentType).
  std::string Serialize() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sessionturn
