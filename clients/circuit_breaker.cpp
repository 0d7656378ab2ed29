#include "clients/circuit_breaker.hpp"

namespace changeflow::clients {

bool circuit_breaker::allow(const breaker_settings& s, clock::time_point now) {
  std::lock_guard lock(mutex_);
  switch (state_) {
    case breaker_state::closed: return true;
    case breaker_state::open:
      if (now - opened_at_ < s.cooldown) return false;
      state_ = breaker_state::half_open;
      trial_in_flight_ = true;
      return true;
    case breaker_state::half_open:
      if (trial_in_flight_) return false;
      trial_in_flight_ = true;
      return true;
  }
  return false;
}

void circuit_breaker::record_success() {
  std::lock_guard lock(mutex_);
  state_ = breaker_state::closed;
  consecutive_failures_ = 0;
  trial_in_flight_ = false;
}

void circuit_breaker::record_failure(const breaker_settings& s, clock::time_point now) {
  std::lock_guard lock(mutex_);
  ++consecutive_failures_;
  if (state_ == breaker_state::half_open || consecutive_failures_ >= threshold(s)) {
    if (state_ != breaker_state::open) ++times_opened_;
    state_ = breaker_state::open;
    opened_at_ = now;
    trial_in_flight_ = false;
  }
}

breaker_state circuit_breaker::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

std::uint64_t circuit_breaker::times_opened() const {
  std::lock_guard lock(mutex_);
  return times_opened_;
}

}  // namespace changeflow::clients
