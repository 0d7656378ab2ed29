#include "runtime/services.hpp"

#include <algorithm>

namespace changeflow::runtime {

workflow::settings workflow_settings_from(const config::snapshot& snap) {
  workflow::settings s;
  s.polls.short_interval_ms = std::max<std::int64_t>(1, snap.integer("poll.short_interval_ms"));
  s.polls.short_attempts = static_cast<int>(std::max<std::int64_t>(0, snap.integer("poll.short_attempts")));
  s.polls.long_interval_ms = std::max<std::int64_t>(1, snap.integer("poll.long_interval_ms"));
  s.polls.timeout_ms = std::max<std::int64_t>(1, snap.integer("poll.timeout_ms"));
  s.merge_max_attempts = static_cast<int>(std::max<std::int64_t>(1, snap.integer("merge.max_attempts")));
  s.approval_wait_ms = std::max<std::int64_t>(1, snap.integer("timeouts.approval_wait_seconds")) * 1000;
  s.batch_enabled = snap.flag("batch.enabled");
  return s;
}

void apply_webhook_interval(workflow::poll_schedule& polls, const config::snapshot& snap,
                            const std::string& repository) {
  const auto interval = snap.integer("poll.webhook_interval_ms");
  if (interval <= 0) return;
  const auto* repo = snap.repositories().find(repository);
  if (!repo || repo->webhook_secret.empty()) return;
  polls.short_interval_ms = std::max(polls.short_interval_ms, interval);
  polls.long_interval_ms = std::max(polls.long_interval_ms, interval);
}

workflow::settings workflow_settings_from(const config::snapshot& snap, const std::string& repository) {
  auto s = workflow_settings_from(snap);
  apply_webhook_interval(s.polls, snap, repository);
  return s;
}

}  // namespace changeflow::runtime
