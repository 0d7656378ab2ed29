#pragma once
// The request metrics of one route (its template and method): the received counter and the latency
// histograms by status. Each label set is resolved in the registry on its first request and emitted
// through a handle from then on, so a request costs no label map, normalization or family lookup.
// The same rules as every emission: nothing throws, invalid labels emit nothing, and the
// registry's fault hook applies.

#include "metrics/registry.hpp"

#include <array>
#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::http::middleware {

class route_meters {
 public:
  /// `callback`: the route also records arrival -> reply (changeflow_callback_commit_seconds).
  route_meters(metrics::registry& registry, std::string route, std::string method, bool callback);
  route_meters(const route_meters&) = delete;
  route_meters& operator=(const route_meters&) = delete;

  /// changeflow_http_requests_received_total{route,method}
  void received() noexcept;
  /// changeflow_http_request_duration_seconds{route,method,status}, and for a callback route
  /// changeflow_callback_commit_seconds{route,status} with `since_arrival`.
  void replied(unsigned status, double seconds, double since_arrival) noexcept;

  static const std::vector<double>& callback_commit_buckets();

 private:
  static constexpr unsigned status_slots = 600;  // HTTP statuses 0-599; others take the slow path
  using slots = std::array<std::atomic<const metrics::histogram_handle*>, status_slots>;
  const metrics::histogram_handle* resolve(slots& table, unsigned status, bool commit) noexcept;

  metrics::registry& registry_;
  const std::string route_;
  const std::string method_;
  const bool callback_;
  std::atomic<const metrics::counter_handle*> received_{nullptr};
  slots duration_{};
  slots commit_{};
  std::mutex mutex_;                                  // the slow path: a label set's first request
  std::optional<metrics::counter_handle> counter_;    // received_ points here once resolved
  std::deque<metrics::histogram_handle> histograms_;  // stable addresses for the slots
};

}  // namespace changeflow::http::middleware
