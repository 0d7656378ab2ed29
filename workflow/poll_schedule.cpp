#include "workflow/poll_schedule.hpp"

#include <algorithm>

namespace changeflow::workflow {

std::optional<std::int64_t> poll_schedule::next_delay(int attempt, std::int64_t elapsed_ms) const {
  if (elapsed_ms >= timeout_ms) return std::nullopt;
  std::int64_t interval = long_interval_ms;
  if (attempt < std::max(0, short_attempts)) {
    interval = short_interval_ms;
    if (first_interval_ms > 0 && first_interval_ms < short_interval_ms) {
      // Doubling from the first interval up to the short one (no overflow: it stops there).
      interval = first_interval_ms;
      for (int i = 0; i < attempt && interval < short_interval_ms; ++i)
        interval = interval > short_interval_ms / 2 ? short_interval_ms : interval * 2;
    }
  }
  interval = std::max<std::int64_t>(interval, 1);
  return std::min(interval, std::max<std::int64_t>(timeout_ms - elapsed_ms, 1));
}

}  // namespace changeflow::workflow
