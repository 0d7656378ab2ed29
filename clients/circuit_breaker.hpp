#pragma once
// One breaker per external system (gitlab, approval, permission), shared by every worker thread.
//
//   closed --N consecutive failures--> open --cool-down passed--> half_open
//     ^                                  ^                           |
//     +---------- trial succeeds --------+---- trial fails ----------+
//
// While open, calls are answered with `breaker_open` without touching the network, so a dead system
// costs nothing and the callers' own retry/backoff decides when to come back. In half_open exactly
// one trial call is let through; the others are refused until it reports.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace changeflow::clients {

enum class breaker_state : int { closed = 0, open = 1, half_open = 2 };

struct breaker_settings {
  int failure_threshold = 5;  // external.breaker_failures; <= 0 -> 5
  std::chrono::milliseconds cooldown{10000};
};

class circuit_breaker {
 public:
  using clock = std::chrono::steady_clock;
  explicit circuit_breaker(std::string system) : system_(std::move(system)) {}

  /// True when the call may go out. In half_open the first caller becomes the trial.
  bool allow(const breaker_settings& s, clock::time_point now = clock::now());
  void record_success();
  void record_failure(const breaker_settings& s, clock::time_point now = clock::now());

  breaker_state state() const;
  /// For the metric: 0 closed, 1 open, 2 half-open.
  int state_value() const { return static_cast<int>(state()); }
  std::uint64_t times_opened() const;
  const std::string& system() const { return system_; }

 private:
  static int threshold(const breaker_settings& s) { return s.failure_threshold > 0 ? s.failure_threshold : 5; }

  std::string system_;
  mutable std::mutex mutex_;
  breaker_state state_ = breaker_state::closed;
  int consecutive_failures_ = 0;
  clock::time_point opened_at_{};
  bool trial_in_flight_ = false;
  std::uint64_t times_opened_ = 0;
};

}  // namespace changeflow::clients
