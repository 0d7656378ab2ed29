#include "http/middleware/route_meters.hpp"

namespace changeflow::http::middleware {

namespace {
constexpr const char* received_name = "changeflow_http_requests_received_total";
constexpr const char* received_help = "Requests admitted past rate limit and authorization";
constexpr const char* duration_name = "changeflow_http_request_duration_seconds";
constexpr const char* duration_help = "HTTP request latency by route and status";
constexpr const char* commit_name = "changeflow_callback_commit_seconds";
constexpr const char* commit_help = "Callback request arrival to the reply sent after its commit, by route and status";
}  // namespace

route_meters::route_meters(metrics::registry& registry, std::string route, std::string method, bool callback)
    : registry_(registry), route_(std::move(route)), method_(std::move(method)), callback_(callback) {}

const std::vector<double>& route_meters::callback_commit_buckets() {
  static const std::vector<double> b = {0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03,
                                        0.05,   0.075, 0.1,   0.15,  0.2,   0.3,   0.5,    1,    2,     5};
  return b;
}

void route_meters::received() noexcept {
  const auto* h = received_.load(std::memory_order_acquire);
  if (!h) {
    try {
      std::lock_guard lock(mutex_);
      h = received_.load(std::memory_order_relaxed);
      if (!h) {
        h = &counter_.emplace(
            registry_.counter(received_name, received_help, {{"route", route_}, {"method", method_}}));
        received_.store(h, std::memory_order_release);
      }
    } catch (...) {
      return;  // allocation only: observability never changes the outcome
    }
  }
  h->inc();
}

const metrics::histogram_handle* route_meters::resolve(slots& table, unsigned status, bool commit) noexcept {
  const auto* h = table[status].load(std::memory_order_acquire);
  if (h) return h;
  try {
    std::lock_guard lock(mutex_);
    h = table[status].load(std::memory_order_relaxed);
    if (h) return h;
    auto code = std::to_string(status);
    h = &histograms_.emplace_back(
        commit ? registry_.histogram(commit_name, commit_help, {{"route", route_}, {"status", code}},
                                     callback_commit_buckets())
               : registry_.histogram(duration_name, duration_help,
                                     {{"route", route_}, {"method", method_}, {"status", code}}));
    table[status].store(h, std::memory_order_release);
    return h;
  } catch (...) {
    return nullptr;
  }
}

void route_meters::replied(unsigned status, double seconds, double since_arrival) noexcept {
  if (status >= status_slots) {
    // Outside the table (a handler inventing a status): the registry's general path.
    registry_.observe(duration_name, duration_help,
                      {{"route", route_}, {"method", method_}, {"status", std::to_string(status)}}, seconds);
    if (callback_)
      registry_.observe(commit_name, commit_help, {{"route", route_}, {"status", std::to_string(status)}},
                        since_arrival, callback_commit_buckets());
    return;
  }
  if (const auto* h = resolve(duration_, status, false)) h->observe(seconds);
  if (callback_) {
    if (const auto* h = resolve(commit_, status, true)) h->observe(since_arrival);
  }
}

}  // namespace changeflow::http::middleware
