#include "actors/services.hpp"

#include <algorithm>

namespace changeflow::actors {

workflow::settings workflow_settings_from(const config::snapshot& snap) {
  workflow::settings s;
  s.polls.short_interval_ms = std::max<std::int64_t>(1, snap.int_or("poll.short_interval_ms", 2000));
  s.polls.short_attempts = static_cast<int>(std::max<std::int64_t>(0, snap.int_or("poll.short_attempts", 10)));
  s.polls.long_interval_ms = std::max<std::int64_t>(1, snap.int_or("poll.long_interval_ms", 15000));
  s.polls.timeout_ms = std::max<std::int64_t>(1, snap.int_or("poll.timeout_ms", 3600000));
  s.merge_max_attempts = static_cast<int>(std::max<std::int64_t>(1, snap.int_or("merge.max_attempts", 5)));
  s.approval_wait_ms = std::max<std::int64_t>(1, snap.int_or("timeouts.approval_wait_seconds", 604800)) * 1000;
  s.batch_enabled = snap.bool_or("batch.enabled", false);
  return s;
}

}  // namespace changeflow::actors
