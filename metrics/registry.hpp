#pragma once
// The service's Prometheus registry and the rules every emission follows:
// metric code never throws into a caller (every call is wrapped), label values are normalized and
// truncated to 128 characters, and an emission with an empty or invalid label value is skipped.
// Business-outcome counters are emitted by callers only after commit and only when state flipped.

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::metrics {

using labels = std::map<std::string, std::string>;

/// Returns the labels normalized (control characters dropped, truncated to 128 bytes), or nullopt
/// when a value is empty after normalization.
std::optional<labels> normalize(const labels& in);

class registry;

/// A counter of one label set, resolved once for an emission on a hot path: no label map,
/// normalization or family lookup per emission, and the same rules (never throws; the fault hook
/// applies). Empty (emits nothing) when its labels were invalid.
class counter_handle {
 public:
  counter_handle() = default;
  void inc(double by = 1.0) const noexcept;
  explicit operator bool() const { return counter_ != nullptr; }

 private:
  friend class registry;
  const registry* owner_ = nullptr;
  prometheus::Counter* counter_ = nullptr;
};

/// A histogram of one label set, resolved once (as counter_handle).
class histogram_handle {
 public:
  histogram_handle() = default;
  void observe(double value) const noexcept;
  explicit operator bool() const { return histogram_ != nullptr; }

 private:
  friend class registry;
  const registry* owner_ = nullptr;
  prometheus::Histogram* histogram_ = nullptr;
};

class registry {
 public:
  registry();
  std::shared_ptr<prometheus::Registry> prometheus_registry() const { return registry_; }

  void inc(const std::string& name, const std::string& help, const labels& l = {}, double by = 1.0) noexcept;
  void set(const std::string& name, const std::string& help, const labels& l, double value) noexcept;
  void observe(const std::string& name, const std::string& help, const labels& l, double value,
               const std::vector<double>& buckets = default_latency_buckets()) noexcept;

  /// The counter or histogram of `l`, registered now (a counter at 0, a histogram empty) and emitted
  /// through the handle from then on. The registry must outlive the handle.
  counter_handle counter(const std::string& name, const std::string& help, const labels& l = {}) noexcept;
  histogram_handle histogram(const std::string& name, const std::string& help, const labels& l,
                             const std::vector<double>& buckets = default_latency_buckets()) noexcept;

  /// Current value of a counter (0 when absent); for tests and the console.
  double counter_value(const std::string& name, const labels& l = {}) const noexcept;

  /// Prometheus text exposition of everything registered, plus the pull-time collectors.
  std::string serialize() const;
  /// Callbacks run right before serialization (gauges such as pool depth, live actors).
  void on_collect(std::function<void(registry&)> fn);

  static const std::vector<double>& default_latency_buckets();

  /// Test hook: make every emission throw inside the wrapper (proves it cannot escape).
  void set_fault_injection(bool on) { fault_ = on; }

 private:
  friend class counter_handle;
  friend class histogram_handle;
  /// The fault hook for handles: true (after logging, as the wrapper does) when emissions must fail.
  bool faulted(const char* what) const noexcept;
  /// The series of normalized labels `safe`, its family registered on first use (may throw).
  prometheus::Counter& counter_of(const std::string& name, const std::string& help, const labels& safe);
  prometheus::Histogram& histogram_of(const std::string& name, const std::string& help, const labels& safe,
                                      const std::vector<double>& buckets);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  mutable std::mutex mutex_;
  std::map<std::string, prometheus::Family<prometheus::Counter>*> counters_;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> gauges_;
  std::map<std::string, prometheus::Family<prometheus::Histogram>*> histograms_;
  std::vector<std::function<void(registry&)>> collectors_;
  std::atomic<bool> fault_{false};
};

}  // namespace changeflow::metrics
