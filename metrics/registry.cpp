#include "metrics/registry.hpp"

#include "base/log.hpp"
#include "metrics/process_collector.hpp"

#include <prometheus/text_serializer.h>

#include <sstream>

namespace changeflow::metrics {

std::optional<labels> normalize(const labels& in) {
  labels out;
  for (const auto& [k, v] : in) {
    std::string clean;
    clean.reserve(std::min<size_t>(v.size(), 128));
    for (unsigned char c : v) {
      if (clean.size() >= 128) break;
      if (c < 0x20 || c == 0x7f) continue;
      clean.push_back(static_cast<char>(c));
    }
    if (clean.empty() || k.empty()) return std::nullopt;
    out[k] = std::move(clean);
  }
  return out;
}

registry::registry() : registry_(std::make_shared<prometheus::Registry>()) {}

const std::vector<double>& registry::default_latency_buckets() {
  static const std::vector<double> b = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return b;
}

void registry::inc(const std::string& name, const std::string& help, const labels& l, double by) noexcept {
  try {
    if (fault_) throw std::runtime_error("injected metrics fault");
    auto safe = normalize(l);
    if (!safe) {
      log::warn("metrics.skip_invalid_labels", {{"metric", name}});
      return;
    }
    counter_of(name, help, *safe).Increment(by);
  } catch (const std::exception& e) {
    log::error("metrics.emit_failed", {{"metric", name}, {"error", e.what()}});
  } catch (...) {
  }
}

prometheus::Counter& registry::counter_of(const std::string& name, const std::string& help, const labels& safe) {
  std::lock_guard lock(mutex_);
  auto& fam = counters_[name];
  if (!fam) fam = &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
  return fam->Add(safe);
}

prometheus::Histogram& registry::histogram_of(const std::string& name, const std::string& help, const labels& safe,
                                              const std::vector<double>& buckets) {
  std::lock_guard lock(mutex_);
  auto& fam = histograms_[name];
  if (!fam) fam = &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_);
  return fam->Add(safe, prometheus::Histogram::BucketBoundaries(buckets));
}

void registry::set(const std::string& name, const std::string& help, const labels& l, double value) noexcept {
  try {
    if (fault_) throw std::runtime_error("injected metrics fault");
    auto safe = normalize(l);
    if (!safe) return;
    std::lock_guard lock(mutex_);
    auto& fam = gauges_[name];
    if (!fam) fam = &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
    fam->Add(*safe).Set(value);
  } catch (const std::exception& e) {
    log::error("metrics.emit_failed", {{"metric", name}, {"error", e.what()}});
  } catch (...) {
  }
}

void registry::observe(const std::string& name, const std::string& help, const labels& l, double value,
                       const std::vector<double>& buckets) noexcept {
  try {
    if (fault_) throw std::runtime_error("injected metrics fault");
    auto safe = normalize(l);
    if (!safe) return;
    histogram_of(name, help, *safe, buckets).Observe(value);
  } catch (const std::exception& e) {
    log::error("metrics.emit_failed", {{"metric", name}, {"error", e.what()}});
  } catch (...) {
  }
}

counter_handle registry::counter(const std::string& name, const std::string& help, const labels& l) noexcept {
  counter_handle h;
  try {
    auto safe = normalize(l);
    if (!safe) {
      log::warn("metrics.skip_invalid_labels", {{"metric", name}});
      return h;
    }
    h.counter_ = &counter_of(name, help, *safe);
    h.owner_ = this;
  } catch (const std::exception& e) {
    log::error("metrics.emit_failed", {{"metric", name}, {"error", e.what()}});
  } catch (...) {
  }
  return h;
}

histogram_handle registry::histogram(const std::string& name, const std::string& help, const labels& l,
                                     const std::vector<double>& buckets) noexcept {
  histogram_handle h;
  try {
    auto safe = normalize(l);
    if (!safe) return h;
    h.histogram_ = &histogram_of(name, help, *safe, buckets);
    h.owner_ = this;
  } catch (const std::exception& e) {
    log::error("metrics.emit_failed", {{"metric", name}, {"error", e.what()}});
  } catch (...) {
  }
  return h;
}

bool registry::faulted(const char* what) const noexcept {
  if (!fault_) return false;
  try {
    log::error("metrics.emit_failed", {{"metric", what}, {"error", "injected metrics fault"}});
  } catch (...) {
  }
  return true;
}

void counter_handle::inc(double by) const noexcept {
  if (!counter_ || owner_->faulted("counter_handle")) return;
  try {
    counter_->Increment(by);
  } catch (...) {
  }
}

void histogram_handle::observe(double value) const noexcept {
  if (!histogram_ || owner_->faulted("histogram_handle")) return;
  try {
    histogram_->Observe(value);
  } catch (...) {
  }
}

double registry::counter_value(const std::string& name, const labels& l) const noexcept {
  try {
    std::lock_guard lock(mutex_);
    auto it = counters_.find(name);
    if (it == counters_.end()) return 0;
    auto safe = normalize(l);
    if (!safe || !it->second->Has(*safe)) return 0;
    return it->second->Add(*safe).Value();
  } catch (...) {
    return 0;
  }
}

void registry::on_collect(std::function<void(registry&)> fn) {
  std::lock_guard lock(mutex_);
  collectors_.push_back(std::move(fn));
}

std::string registry::serialize() const {
  std::vector<std::function<void(registry&)>> collectors;
  {
    std::lock_guard lock(mutex_);
    collectors = collectors_;
  }
  auto* self = const_cast<registry*>(this);
  for (auto& c : collectors) {
    try {
      c(*self);
    } catch (...) {
    }
  }
  auto families = registry_->Collect();
  auto process = collect_process_metrics();
  families.insert(families.end(), process.begin(), process.end());
  prometheus::TextSerializer serializer;
  std::ostringstream out;
  serializer.Serialize(out, families);
  return out.str();
}

}  // namespace changeflow::metrics
