#include "config/settings.hpp"

#include <algorithm>

namespace changeflow::config {

std::int64_t db_settings::reserved_for_callbacks() const {
  return std::max<std::int64_t>(0, callback_reserve.value_or(std::max<std::int64_t>(1, queue_capacity / 10)));
}

void finish_settings(settings& s) {
  s.http.handler_timeout_ms = std::max<std::int64_t>(1, s.http.handler_timeout_ms);
  s.http.status_wait_recheck_ms = std::max<std::int64_t>(1, s.http.status_wait_recheck_ms);
  s.http.status_wait_max = std::max<std::int64_t>(0, s.http.status_wait_max);
  s.http.status_cache_ms = std::max<std::int64_t>(0, s.http.status_cache_ms);
  s.instance.lease_seconds = std::max<std::int64_t>(1, s.instance.lease_seconds);
  s.console.poll_ms = std::max<std::int64_t>(1000, s.console.poll_ms);
  s.ops.attention_late_after_s = std::max<std::int64_t>(0, s.ops.attention_late_after_s);
  s.ops.attention_approval_after_s = std::max<std::int64_t>(0, s.ops.attention_approval_after_s);
  s.actors.threads = std::max<std::int64_t>(1, s.actors.threads);
  s.db.read_pool_size = std::max<std::int64_t>(1, s.db.read_pool_size);
  s.db.transition_group_max = std::max<std::int64_t>(1, s.db.transition_group_max);
  s.db.transition_committers = std::max<std::int64_t>(1, s.db.transition_committers);
  s.gitlab.mr_read_reuse_ms = std::max<std::int64_t>(0, s.gitlab.mr_read_reuse_ms);
  s.approval.max_retries = std::max<std::int64_t>(0, s.approval.max_retries);
  s.approval.backoff_base_ms = std::max<std::int64_t>(0, s.approval.backoff_base_ms);
  s.poll.short_interval_ms = std::max<std::int64_t>(1, s.poll.short_interval_ms);
  s.poll.short_attempts = std::max<std::int64_t>(0, s.poll.short_attempts);
  s.poll.first_interval_ms = std::max<std::int64_t>(0, s.poll.first_interval_ms);
  s.poll.long_interval_ms = std::max<std::int64_t>(1, s.poll.long_interval_ms);
  s.poll.timeout_ms = std::max<std::int64_t>(1, s.poll.timeout_ms);
  s.merge.max_attempts = std::max<std::int64_t>(1, s.merge.max_attempts);
  s.timeouts.approval_wait_seconds = std::max<std::int64_t>(1, s.timeouts.approval_wait_seconds);
  s.rehydrate.page_size = std::max<std::int64_t>(1, s.rehydrate.page_size);
  s.durability.shutdown_deadline_ms = std::max<std::int64_t>(0, s.durability.shutdown_deadline_ms);
  s.durability.passivate_beyond_seconds = std::max<std::int64_t>(0, s.durability.passivate_beyond_seconds);
  s.batch.max_members = std::max<std::int64_t>(1, s.batch.max_members);
  s.notifications.batch = std::clamp<std::int64_t>(s.notifications.batch, 1, 1000);
  s.notifications.retry_cap_ms = std::max(s.notifications.retry_base_ms, s.notifications.retry_cap_ms);
  s.faults.hold_after_idempotency_begin_ms =
      std::clamp<std::int64_t>(s.faults.hold_after_idempotency_begin_ms, 0, 60000);
  s.faults.hold_after_deploy_record_ms = std::clamp<std::int64_t>(s.faults.hold_after_deploy_record_ms, 0, 60000);
  s.faults.lose_group_answer_every = std::clamp<std::int64_t>(s.faults.lose_group_answer_every, 0, 1000000);
}

}  // namespace changeflow::config
