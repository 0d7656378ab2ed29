#pragma once
// Tiered polling: short intervals for the first N polls, longer ones afterwards, and a timeout
// once the budget is spent. The short tier may start with a ramp: the first poll after
// `first_interval_ms` (a wait's first two polls are both attempt 0), each later one twice as late,
// up to the short interval, so a pipeline that is done early is seen early and a long one is still
// read at the short interval. Three outcomes for a wait: passed, failed, timed out. Failure is
// deterministic; a timeout means "unknown" and keeps the phase (step *_PENDING, hint KEEP_WAITING).

#include <cstdint>
#include <optional>

namespace changeflow::workflow {

struct poll_schedule {
  std::int64_t short_interval_ms = 2000;
  int short_attempts = 10;
  std::int64_t long_interval_ms = 15000;
  std::int64_t timeout_ms = 3600000;
  /// Delay of the first poll of a wait; 0 (or >= short_interval_ms) -> no ramp.
  std::int64_t first_interval_ms = 0;

  /// Delay before poll number `attempt` (0-based) of a wait that started `elapsed_ms` ago;
  /// nullopt when the wait has timed out. The delay never overshoots the timeout by more than
  /// one poll, so a timeout is decided by a final read, not by the clock alone.
  std::optional<std::int64_t> next_delay(int attempt, std::int64_t elapsed_ms) const;
  /// Interval of the slow re-check that continues after a timeout (pending states).
  std::int64_t pending_recheck_ms() const { return long_interval_ms * 4; }
};

enum class poll_outcome { passed, failed, still_running };

}  // namespace changeflow::workflow
