#include "runtime/services.hpp"

#include <algorithm>

namespace changeflow::runtime {

workflow::poll_schedule poll_schedule_from(const config::poll_settings& poll) {
  workflow::poll_schedule polls;
  polls.short_interval_ms = poll.short_interval_ms;
  polls.short_attempts = static_cast<int>(poll.short_attempts);
  polls.long_interval_ms = poll.long_interval_ms;
  polls.timeout_ms = poll.timeout_ms;
  polls.first_interval_ms = poll.first_interval_ms;
  return polls;
}

workflow::settings workflow_settings_from(const config::snapshot& snap) {
  workflow::settings s;
  s.polls = poll_schedule_from(snap.poll());
  s.merge_max_attempts = static_cast<int>(snap.merge().max_attempts);
  s.approval_wait_ms = snap.timeouts().approval_wait_seconds * 1000;
  s.batch_enabled = snap.batch().enabled;
  return s;
}

void apply_webhook_interval(workflow::poll_schedule& polls, const config::snapshot& snap,
                            const std::string& repository) {
  const auto interval = snap.poll().webhook_interval_ms;
  if (interval <= 0) return;
  const auto* repo = snap.repositories().find(repository);
  if (!repo || repo->webhook_secret.empty()) return;
  polls.short_interval_ms = std::max(polls.short_interval_ms, interval);
  polls.long_interval_ms = std::max(polls.long_interval_ms, interval);
  // The hook ends the wait; an early poll would only add GitLab requests.
  polls.first_interval_ms = 0;
}

workflow::settings workflow_settings_from(const config::snapshot& snap, const std::string& repository) {
  auto s = workflow_settings_from(snap);
  apply_webhook_interval(s.polls, snap, repository);
  return s;
}

}  // namespace changeflow::runtime
