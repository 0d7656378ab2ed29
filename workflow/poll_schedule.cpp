#include "workflow/poll_schedule.hpp"

#include <algorithm>

namespace changeflow::workflow {

std::optional<std::int64_t> poll_schedule::next_delay(int attempt, std::int64_t elapsed_ms) const {
  if (elapsed_ms >= timeout_ms) return std::nullopt;
  std::int64_t interval = attempt < std::max(0, short_attempts) ? short_interval_ms : long_interval_ms;
  interval = std::max<std::int64_t>(interval, 1);
  return std::min(interval, std::max<std::int64_t>(timeout_ms - elapsed_ms, 1));
}

}  // namespace changeflow::workflow
