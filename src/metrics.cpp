#include "sessionturn/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

#include <prometheus/check_names.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace sessionturn {

namespace {

enum class Kind { counter, gauge, histogram };

std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::counter: return "counter";
    case Kind::gauge: return "gauge";
    case Kind::histogram: return "histogram";
  }
  return "metric";
}

// prometheus-cpp 1.0 writes HELP text as given, so a newline in it would end the line and break the
// exposition; the format escapes backslash and newline there (label values it escapes itself).
std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out = "{";
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + "}";
}

}  // namespace

struct Metrics::Impl {
  struct Family {
    Kind kind;
    std::string help;
    std::vector<std::string> label_names;  // sorted
    std::vector<double> buckets;
    void* family;  // prometheus::Family<T>, owned by the registry
  };

  mutable std::mutex mu;
  prometheus::Registry registry;
  std::map<std::string, Family> families;
  // Handles by the prometheus metric they wrap: one per series, so a reference stays valid.
  std::map<void*, std::unique_ptr<Counter>> counters;
  std::map<void*, std::unique_ptr<Gauge>> gauges;
  std::map<void*, std::unique_ptr<Histogram>> histograms;

  // Checks the labels' names (sorted, unique, valid) and returns them with the values as prometheus wants.
  static Result<prometheus::Labels> CheckLabels(const std::string& name, const MetricLabels& labels,
                                                std::vector<std::string>& names) {
    prometheus::Labels out;
    for (const auto& [label, value] : labels) {
      if (!prometheus::CheckLabelName(label)) {
        return Fail(Errc::invalid_argument, "metric " + name + ": invalid label name '" + label + "'");
      }
      if (!out.emplace(label, value).second) {
        return Fail(Errc::invalid_argument, "metric " + name + ": label '" + label + "' given twice");
      }
    }
    for (const auto& entry : out) names.push_back(entry.first);
    return out;
  }

  // The family's prometheus metric for these labels, creating the family and the series as needed.
  template <typename Metric, typename Build>
  Result<Metric*> Series(Kind kind, const std::string& name, const std::string& help, const MetricLabels& labels,
                         const std::vector<double>& buckets, Build build) {
    std::vector<std::string> names;
    auto checked = CheckLabels(name, labels, names);
    if (!checked) return Fail(checked.error());
    auto it = families.find(name);
    if (it == families.end()) {
      if (!prometheus::CheckMetricName(name)) {
        return Fail(Errc::invalid_argument, "invalid metric name '" + name + "'");
      }
      if (kind == Kind::histogram &&
          std::adjacent_find(buckets.begin(), buckets.end(), std::greater_equal<>()) != buckets.end()) {
        return Fail(Errc::invalid_argument, "histogram " + name + ": bucket bounds must be strictly increasing");
      }
      try {
        auto& family = build().Name(name).Help(EscapeHelp(help)).Register(registry);
        it = families.emplace(name, Family{kind, help, names, buckets, &family}).first;
      } catch (const std::exception& e) {
        return Fail(Errc::invalid_argument, "metric " + name + ": " + e.what());
      }
    }
    const Family& family = it->second;
    if (family.kind != kind) {
      return Fail(Errc::invalid_argument, "metric " + name + " is a " + std::string(KindName(family.kind)) +
                                              ", not a " + std::string(KindName(kind)));
    }
    if (family.label_names != names) {
      return Fail(Errc::invalid_argument, "metric " + name + " has the labels " + JoinNames(family.label_names) +
                                              ", not " + JoinNames(names));
    }
    if (family.help != help) {
      return Fail(Errc::invalid_argument, "metric " + name + " was defined with another help text");
    }
    if (family.buckets != buckets) {
      return Fail(Errc::invalid_argument, "histogram " + name + " was defined with other buckets");
    }
    try {
      auto* typed = static_cast<prometheus::Family<Metric>*>(family.family);
      if constexpr (std::is_same_v<Metric, prometheus::Histogram>) {
        return &typed->Add(*checked, prometheus::Histogram::BucketBoundaries(buckets));
      } else {
        return &typed->Add(*checked);
      }
    } catch (const std::exception& e) {
      return Fail(Errc::invalid_argument, "metric " + name + ": " + e.what());
    }
  }

  template <typename Handle>
  static Handle* HandleOf(std::map<void*, std::unique_ptr<Handle>>& handles, void* metric,
                          std::unique_ptr<Handle> (*make)(void*)) {
    auto& slot = handles[metric];
    if (!slot) slot = make(metric);
    return slot.get();
  }
};

Metrics::Metrics() : impl_(std::make_unique<Impl>()) {}
Metrics::~Metrics() = default;

Result<Metrics::Counter*> Metrics::GetCounter(const std::string& name, const std::string& help,
                                              const MetricLabels& labels) {
  std::lock_guard lock(impl_->mu);
  auto metric = impl_->Series<prometheus::Counter>(Kind::counter, name, help, labels, {}, prometheus::BuildCounter);
  if (!metric) return Fail(metric.error());
  return Impl::HandleOf<Counter>(impl_->counters, *metric,
                                 [](void* m) { return std::unique_ptr<Counter>(new Counter(m)); });
}

Result<Metrics::Gauge*> Metrics::GetGauge(const std::string& name, const std::string& help,
                                          const MetricLabels& labels) {
  std::lock_guard lock(impl_->mu);
  auto metric = impl_->Series<prometheus::Gauge>(Kind::gauge, name, help, labels, {}, prometheus::BuildGauge);
  if (!metric) return Fail(metric.error());
  return Impl::HandleOf<Gauge>(impl_->gauges, *metric, [](void* m) { return std::unique_ptr<Gauge>(new Gauge(m)); });
}

Result<Metrics::Histogram*> Metrics::GetHistogram(const std::string& name, const std::string& help,
                                                  const std::vector<double>& buckets, const MetricLabels& labels) {
  std::lock_guard lock(impl_->mu);
  auto metric =
      impl_->Series<prometheus::Histogram>(Kind::histogram, name, help, labels, buckets, prometheus::BuildHistogram);
  if (!metric) return Fail(metric.error());
  return Impl::HandleOf<Histogram>(impl_->histograms, *metric,
                                   [](void* m) { return std::unique_ptr<Histogram>(new Histogram(m)); });
}

std::string Metrics::Serialize() const {
  // Collect locks each family itself; our lock only keeps a family from being added meanwhile.
  std::lock_guard lock(impl_->mu);
  return prometheus::TextSerializer().Serialize(impl_->registry.Collect());
}

void Metrics::Counter::Increment(double by) {
  if (!(by >= 0)) return;  // NaN too
  static_cast<prometheus::Counter*>(metric_)->Increment(by);
}
double Metrics::Counter::Value() const { return static_cast<prometheus::Counter*>(metric_)->Value(); }

void Metrics::Gauge::Set(double value) { static_cast<prometheus::Gauge*>(metric_)->Set(value); }
void Metrics::Gauge::Increment(double by) { static_cast<prometheus::Gauge*>(metric_)->Increment(by); }
void Metrics::Gauge::Decrement(double by) { static_cast<prometheus::Gauge*>(metric_)->Decrement(by); }
double Metrics::Gauge::Value() const { return static_cast<prometheus::Gauge*>(metric_)->Value(); }

void Metrics::Histogram::Observe(double value) { static_cast<prometheus::Histogram*>(metric_)->Observe(value); }

}  // namespace sessionturn
