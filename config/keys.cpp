// Every configuration key: type, default, reload kind, and what happens when it is missing or wrong.
// The fallback direction follows the seeds' rule: look at the main consequence of misconfiguration
// and default toward the less harmful outcome. docs/configuration.md is generated from this table
// (changeflowd --describe-config).

#include "config/snapshot.hpp"

#include <algorithm>

namespace changeflow::config {
namespace {
using J = nlohmann::json;
constexpr auto I = value_type::integer;
[[maybe_unused]] constexpr auto N = value_type::number;  // no number key yet (clang: unused)
constexpr auto B = value_type::boolean;
constexpr auto S = value_type::string;
constexpr auto L = value_type::string_list;
constexpr auto O = value_type::object;
constexpr auto R = reload_kind::restart;
constexpr auto H = reload_kind::hot;

std::vector<key_spec> make_keys() {
  std::vector<key_spec> keys = {
      // -- process and HTTP server (restart)
      {"http.address", S, "127.0.0.1", R, "Listen address of the HTTP API."},
      {"http.port", I, 8080, R, "Listen port; 0 picks a free port (written to --port-file)."},
      {"http.threads", I, 2, R, "I/O threads of the HTTP server."},
      {"http.body_limit_bytes", I, 1048576, R, "Largest accepted request body; larger -> 413."},
      {"http.header_limit_bytes", I, 16384, R, "Largest accepted request header block; larger -> 431."},
      {"http.read_timeout_ms", I, 10000, R, "Time a client has to send a complete request."},
      {"http.handler_timeout_ms", I, 30000, R,
       "Time a request may take to be handled; past it the client gets 503 HANDLER_TIMEOUT and the connection is "
       "closed."},
      {"instance.id", S, J(), R, "This instance's id; missing -> hostname-pid-random."},
      {"instance.lease_seconds", I, 30, R, "Lease an instance holds on its operations; renewed by heartbeat."},
      {"actors.threads", I, 2, R, "CAF scheduler threads."},
      {"actors.scheduler", S, "sharing", R,
       "CAF scheduler policy: sharing (one queue, idle threads block: no CPU when idle) | stealing (CAF's "
       "polling work stealing: idle threads spin and nap, which costs CPU at moderate load); unknown -> sharing."},
      {"log.level", S, "info", H, "debug|info|warn|error; unknown -> info."},
      {"console.dir", S, J(), R, "Directory of the built console; missing -> console served as 404."},
      {"console.poll_ms", I, 5000, H,
       "How often a console page refreshes (one ops read per refresh); <1000 -> 1000, missing -> 5000."},
      {"ops.attention_late_after_s", I, 60, H,
       "The attention view lists a wait whose stored wake (next try or deadline) passed this long ago without the "
       "change moving; <0 -> 0."},
      {"ops.attention_approval_after_s", I, 86400, H,
       "The attention view lists an approval request unanswered this long (before its hard deadline); <0 -> 0."},

      // -- database (restart)
      {"db.host", S, "127.0.0.1", R, "MariaDB/MySQL host (ignored when db.socket is set)."},
      {"db.port", I, 3306, R, "MariaDB/MySQL port."},
      {"db.socket", S, J(), R, "Unix socket path; preferred over host/port when set."},
      {"db.user", S, "changeflow", R, "Database user."},
      {"db.password", S, "", R, "Database password."},
      {"db.name", S, "changeflow", R, "Database (schema) name."},
      {"db.pool_size", I, 4, R, "Database worker threads, one connection each."},
      {"db.callback_reserve", I, J(), R,
       "Queue slots of the database pool only callbacks may use, so a burst of submits cannot make "
       "external systems' callbacks fail; missing -> db.queue_capacity / 10."},
      {"db.read_pool_size", I, 2, R,
       "Database threads for status reads (GET /api/v1/changes...), apart from the transition pool; <1 -> 1."},
      {"db.queue_capacity", I, 20000, R, "Pending database jobs before new ones are rejected."},
      {"db.connect_timeout_ms", I, 2000, R, "Connect timeout for each database connection."},
      {"db.read_timeout_ms", I, 10000, R, "Read/write timeout for each database round trip."},

      // -- external systems (restart: addresses and credentials)
      {"external.pool_size", I, 16, R, "Threads for outbound HTTP calls."},
      {"external.queue_capacity", I, 20000, R, "Pending outbound calls before new ones are rejected."},
      {"external.connect_timeout_ms", I, 2000, H, "Connect timeout of every outbound call."},
      {"external.request_timeout_ms", I, 10000, H, "Total timeout of every outbound call."},
      {"external.breaker_failures", I, 5, H, "Consecutive failures that open a circuit breaker; <=0 -> 5."},
      {"external.breaker_cooldown_ms", I, 10000, H, "Time an open breaker waits before a trial call."},
      {"external.ca_file", S, "", R,
       "PEM bundle of CA certificates trusted for https:// calls (GitLab, approval, permission, notifications) in "
       "addition to the system CAs; empty -> system CAs only. Unreadable -> every https call fails (protocol "
       "error naming the file)."},
      {"gitlab.base_url", S, "http://127.0.0.1:9090/api/v4", R, "GitLab REST v4 base URL."},
      {"gitlab.project", S, "config/changes", R,
       "Project path (URL-encoded when used): the one repository when `repositories` is missing or empty, and the "
       "repository of changes stored before repositories existed."},
      {"gitlab.target_branch", S, "main", H,
       "Branch the changes are merged into when `repositories` is missing or empty, and the branches of a "
       "repository entry without its own."},
      {"gitlab.author_token", S, J(), R, "PRIVATE-TOKEN of the bot that commits and opens MRs. Required.", true},
      {"gitlab.approver_tokens", L, J(), R,
       "PRIVATE-TOKENs of the approval bots; each approves every MR. Required (at least one).", true},
      {"gitlab.approver_user_ids", L, J::array({"101", "102"}), R,
       "GitLab user ids of the approval bots, same order as gitlab.approver_tokens."},
      {"repositories", O, J::object(), H,
       "GitLab repositories: project path -> {branches, author_token, approver_tokens, approver_user_ids, "
       "webhook_secret}. Each change names one repository and one of its branches. Missing fields fall back to "
       "gitlab.target_branch, gitlab.author_token and gitlab.approver_tokens/approver_user_ids; webhook_secret has "
       "none. Missing or empty -> gitlab.project with gitlab.target_branch is the one repository. A malformed "
       "section is refused at load (a reload keeps the last good snapshot)."},
      {"gitlab.use_check_items", B, false, H,
       "Approve with check_items (the extended approver); missing -> plain approve."},
      {"approval.base_url", S, "http://127.0.0.1:9090", R, "Approval system base URL."},
      {"approval.callback_url", S, "http://127.0.0.1:8080/api/v1/callbacks/approval", H,
       "URL the approval system calls back."},
      {"approval.max_retries", I, 3, H, "Bot approval retries per account; negative -> 0."},
      {"approval.backoff_base_ms", I, 200, H, "First backoff between approval retries, doubled each time."},
      {"permission.base_url", S, "http://127.0.0.1:9090", R, "Permission service base URL."},

      // -- callbacks
      {"callbacks.approval_secret", S, J(), H,
       "Shared secret of approval callbacks (HMAC-SHA256 of the body in X-Signature, or the secret in "
       "X-Callback-Token). Required at start; cleared by a reload -> every callback is refused with 401.",
       true},
      {"callbacks.deploy_secret", S, J(), H,
       "Shared secret of deploy callbacks (X-Gitlab-Token). Required at start; cleared by a reload -> "
       "refused with 401.",
       true},

      // -- workflow (hot)
      {"flow.default", S, "approve_then_create", H,
       "Step order of NEW operations: approve_then_create | create_then_approve; unknown -> "
       "approve_then_create."},
      {"poll.short_interval_ms", I, 2000, H, "Poll interval for the first poll.short_attempts polls."},
      {"poll.short_attempts", I, 10, H, "Number of short-interval polls."},
      {"poll.long_interval_ms", I, 15000, H, "Poll interval after the short ones."},
      {"poll.timeout_ms", I, 3600000, H, "Polling gives up after this long: outcome 'timed out'."},
      {"poll.webhook_interval_ms", I, 60000, H,
       "Poll interval of changes and batches whose repository has a webhook_secret: GitLab's hooks end their waits, "
       "so polling is only the fallback for a lost hook; <=0 -> the normal tiered intervals."},
      {"merge.max_attempts", I, 5, H, "Merge attempts (each may rebase) before HANDLE_FAILED."},
      {"timeouts.approval_wait_seconds", I, 604800, H,
       "Longest wait for the approval callback before APPROVAL_TIMEOUT."},
      {"timeouts.deploy_wait_seconds", I, 86400, H, "Longest wait in MERGED before the sweep flags it."},

      // -- durability: rehydration, leases, timeout sweeps
      {"rehydrate.rate_per_second", I, 200, H, "Actors resumed per second after start or takeover; <=0 -> 200."},
      {"rehydrate.page_size", I, 500, R, "Rows read per page while loading the operations to resume."},
      {"durability.sweep_interval_ms", I, 5000, H, "Interval of the timeout sweep; <=0 -> 5000."},
      {"durability.inbox_poll_ms", I, 500, H,
       "Interval of the owner's poll for rows changed elsewhere (callbacks at a peer); <=0 -> 500."},
      {"durability.stuck_after_seconds", I, 60, H,
       "An owned operation unchanged this long with no live actor gets a new actor."},
      {"durability.approval_grace_seconds", I, 30, H,
       "APPROVAL_SENT past its stored deadline by this much is timed out by the sweep."},
      {"durability.shutdown_deadline_ms", I, 5000, R, "Graceful stop: time in-flight steps get to finish."},

      // -- batch path (hot)
      {"batch.enabled", B, false, H, "Send approved changes through the batch coordinator."},
      {"batch.round_interval_ms", I, 5000, H, "Interval of scheduled batch rounds."},
      {"batch.max_members", I, 50, H, "Most operations claimed into one batch."},
      {"batch.max_splits", I, 6, H, "Bisection depth limit for a failing batch."},
      {"batch.max_attempts", I, 3, H,
       "A member claimed this many times whose batch fails again (not a pipeline failure) leaves the "
       "batch path as BATCH_FAILED; <=0 -> 3."},
      {"batch.running_timeout_seconds", I, 3600, H, "A RUNNING batch older than this is settled by the sweep."},

      // -- reconciliation (hot)
      {"reconcile.interval_ms", I, 60000, H, "Interval of the reconciliation job; <=0 -> disabled."},
      {"reconcile.min_age_seconds", I, 300, H, "Skip MERGED records changed more recently than this."},
      {"reconcile.max_age_seconds", I, 86400, H, "Skip MERGED records changed longer ago than this."},

      // -- notifications (hot)
      {"notifications.dispatch_interval_ms", I, 1000, H,
       "Interval of the notification dispatcher's passes when the previous pass delivered nothing (a pass that "
       "delivered something is followed at once); <=0 -> paused (events stay in the outbox)."},
      {"notifications.batch", I, 50, H, "Deliveries claimed per pass (1-1000); <=0 -> 50."},
      {"notifications.timeout_ms", I, 5000, H,
       "Deadline of one notification POST (connect within min(this, 2000)); <=0 -> 5000. A claim lasts twice this "
       "plus 5 s, then another pass (or instance) may send the delivery again."},
      {"notifications.retry_base_ms", I, 1000, H,
       "Wait after a delivery's first failed attempt; doubled after each further failure; <=0 -> 1000."},
      {"notifications.retry_cap_ms", I, 300000, H,
       "Longest wait between two attempts of one delivery; <=0 -> 300000; below retry_base_ms -> retry_base_ms."},
      {"notifications.max_age_seconds", I, 259200, H,
       "A delivery still failing this long after its event is marked FAILED (the next events of its stream then "
       "go out); <=0 -> 259200 (3 days)."},

      // -- HTTP cross-cutting concerns (hot)
      {"rate_limit.window_ms", I, 60000, H, "Sliding window of every rate limit; <=0 -> 60000."},
      {"rate_limit.submit", I, 600, H, "Submissions per window per subject; missing or <=0 -> no limiting."},
      {"rate_limit.callbacks", I, J(), H, "Callbacks per window per sender; missing or <=0 -> no limiting."},
      {"rate_limit.ops", I, 120, H, "Ops actions per window per operator; missing or <=0 -> no limiting."},
      {"rate_limit.ops_read", I, 1200, H,
       "Ops reads (console polling) per window per operator, counted apart from actions; missing or <=0 -> no "
       "limiting."},
      {"access.mode", S, "TEST_WINDOW", H,
       "OPEN | TEST_WINDOW | CLOSED for user writes; missing or blank -> TEST_WINDOW, unknown -> CLOSED."},
      {"access.window", S, J(), H, "TEST_WINDOW hours 'HH:MM-HH:MM'; missing or unparsable -> closed."},
      {"access.time_zone_offset_minutes", I, 0, H, "Fixed UTC offset the window is read in (not the host's)."},
      {"auth.jwt_secret", S, J(), H,
       "HS256 secret of bearer tokens. Required at start; cleared by a reload -> no identity (401).", true},
      {"auth.jwt_audience", S, J(), H, "Required 'aud' of bearer tokens; missing -> not checked."},
      {"auth.aliases", O, J::object(), H, "Employee id -> account map; both resolve to one identity."},
      {"auth.trusted_proxies", L, J::array(), H, "Peers whose X-Forwarded-For hop and identity header are trusted."},
      {"auth.gateway_header", S, J(), H, "Identity header set by a trusted gateway; missing -> header mode off."},
      {"auth.ops_rules", L, J::array({"changeflow.ops", "changeflow.admin"}), H,
       "Rule codes of which any grants the ops API; empty -> nobody."},
      {"auth.required", B, true, H,
       "Require an identity on the user API; missing or cleared -> required. false -> callers without a "
       "token are served as 'anonymous' with no per-caller checks (demo and tests only)."},
      {"auth.subject_rule", S, "subject:{subject}", H,
       "Rule code (asked of the permission service) that permits a requester to submit for and read a "
       "subject; {subject} is replaced by the subject. Cleared -> no one is permitted by subject (only "
       "requesters see their own changes, operators see all)."},
      {"idempotency.ttl_seconds", I, 86400, H, "Lifetime of idempotency records; <=0 -> 86400."},
      // -- HTTP cross-cutting concerns, wiring (api area)
      {"idempotency.cleanup_interval_ms", I, 60000, H,
       "Interval of the expired idempotency record cleanup; <=0 -> paused (records still expire)."},
      {"idempotency.cleanup_batch", I, 500, H, "Rows deleted per cleanup statement; <=0 -> 500."},
      {"idempotency.in_flight_timeout_ms", I, 30000, H,
       "Longest a request may hold its idempotency key IN_FLIGHT; after it (or at once when the "
       "owning instance is dead) a retry with the same body takes the key over and runs again. "
       "<=0 -> 30000."},
      {"faults.hold_after_idempotency_begin_ms", I, 0, H,
       "TEST HOOK: a submit waits this long (capped at 60000) between taking its idempotency key and "
       "creating the operation, so a test can kill the process there. <=0 -> off. Never enable in "
       "production."},
      {"auth.permission_timeout_ms", I, 2000, H,
       "Longest wait for the permission service per request; then 403 (deny). <=0 -> 2000."},
      {"faults.hold_after_deploy_record_ms", I, 0, H,
       "TEST HOOK: a deploy delivery waits this long (at most 60000) between being recorded and being "
       "applied, so a crash test can kill the process in between. 0 = off. Never set in production."},
      {"metrics.fault_injection", B, false, H,
       "TEST HOOK: every metric emission throws inside the registry wrapper (responses must not "
       "change). Never enable in production."},
      {"metrics.user_labels", B, false, H, "Allow user ids as metric labels (bounded cardinality risk)."},
  };
  std::sort(keys.begin(), keys.end(), [](const key_spec& a, const key_spec& b) { return a.name < b.name; });
  return keys;
}
}  // namespace

const std::vector<key_spec>& all_keys() {
  static const std::vector<key_spec> keys = make_keys();
  return keys;
}

}  // namespace changeflow::config
