// Every configuration key: type, default, reload kind, and what happens when it is missing or wrong.
// The fallback direction follows the seeds' rule: look at the main consequence of misconfiguration
// and default toward the less harmful outcome. docs/configuration.md is generated from this table
// (changeflowd --describe-config).

#include "config/snapshot.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace changeflow::config {
namespace {
using J = nlohmann::json;
using S = settings;
constexpr auto R = reload_kind::restart;
constexpr auto H = reload_kind::hot;

// Field kinds (settings.hpp): how a key's value, or its declared default, becomes a field value.
template <class T>
constexpr value_type type_of() {
  if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::optional<std::int64_t>>) {
    return value_type::integer;
  } else if constexpr (std::is_same_v<T, bool>) {
    return value_type::boolean;
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::optional<std::string>>) {
    return value_type::string;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return value_type::string_list;
  } else {
    static_assert(std::is_same_v<T, J>, "unsupported settings field type");
    return value_type::object;
  }
}

// A plain scalar: the value, else the declared default (a table without one is a programming error).
template <class T>
T value_or_default(const J& v, const J& def, bool (J::*is)() const noexcept) {
  if ((v.*is)()) return v.get<T>();
  if (!(def.*is)()) throw std::logic_error("config/keys.cpp: a plain settings field needs a default of its type");
  return def.get<T>();
}

template <bool Positive>
void set_field(std::int64_t& out, const J& v, const J& def) {
  out = value_or_default<std::int64_t>(v, def, &J::is_number_integer);
  if (Positive && out <= 0) out = value_or_default<std::int64_t>(J(), def, &J::is_number_integer);
}
template <bool Positive>
void set_field(bool& out, const J& v, const J& def) {
  out = value_or_default<bool>(v, def, &J::is_boolean);
}
template <bool Positive>
void set_field(std::string& out, const J& v, const J& def) {
  const bool cleared = !v.is_string() || v.get_ref<const std::string&>().empty();
  out = value_or_default<std::string>(cleared ? J() : v, def, &J::is_string);
}
template <bool Positive>
void set_field(std::optional<std::int64_t>& out, const J& v, const J&) {
  out.reset();
  if (v.is_number_integer() && (!Positive || v.get<std::int64_t>() > 0)) out = v.get<std::int64_t>();
}
template <bool Positive>
void set_field(std::optional<std::string>& out, const J& v, const J&) {
  out.reset();
  if (v.is_string() && !v.get_ref<const std::string&>().empty()) out = v.get<std::string>();
}
template <bool Positive>
void set_field(std::vector<std::string>& out, const J& v, const J&) {
  out.clear();
  if (!v.is_array()) return;
  for (const auto& item : v) {
    if (item.is_string()) out.push_back(item.get<std::string>());
  }
}
template <bool Positive>
void set_field(J& out, const J& v, const J&) {
  out = v;
}

/// Binds a key to `settings.*Concern.*Member`; the key's type follows from the field's type.
template <auto Concern, auto Member, bool Positive = false>
binding at() {
  using field_t = std::remove_cvref_t<decltype(std::declval<S&>().*Concern.*Member)>;
  static_assert(
      !Positive || std::is_same_v<field_t, std::int64_t> || std::is_same_v<field_t, std::optional<std::int64_t>>,
      "positive applies to integers");
  return {type_of<field_t>(), [](S& s, const J& v, const J& def) { set_field<Positive>(s.*Concern.*Member, v, def); }};
}
/// As at(), and a value <= 0 counts as cleared: the declared default, or nullopt for an optional.
template <auto Concern, auto Member>
binding positive() {
  return at<Concern, Member, true>();
}
/// A key read by config/ itself (not a settings field).
binding unbound(value_type t) {
  return {t, nullptr};
}
constexpr auto O = value_type::object;

std::vector<key_spec> make_keys() {
  std::vector<key_spec> keys = {
      // -- process and HTTP server (restart)
      {"http.address", at<&S::http, &http_settings::address>(), "127.0.0.1", R, "Listen address of the HTTP API."},
      {"http.port", at<&S::http, &http_settings::port>(), 8080, R,
       "Listen port; 0 picks a free port (written to --port-file). A port that cannot be bound ends start-up with "
       "exit status 1 before anything else starts."},
      {"http.threads", at<&S::http, &http_settings::threads>(), 2, R,
       "I/O threads of the HTTP server; each runs its own event loop and serves the connections dealt to it at "
       "accept, in turn."},
      {"http.body_limit_bytes", at<&S::http, &http_settings::body_limit_bytes>(), 1048576, R,
       "Largest accepted request body; larger -> 413."},
      {"http.header_limit_bytes", at<&S::http, &http_settings::header_limit_bytes>(), 16384, R,
       "Largest accepted request header block; larger -> 431."},
      {"http.read_timeout_ms", at<&S::http, &http_settings::read_timeout_ms>(), 10000, R,
       "Time a client has to send a complete request."},
      {"http.handler_timeout_ms", at<&S::http, &http_settings::handler_timeout_ms>(), 30000, R,
       "Time a request may take to be handled; past it the client gets 503 HANDLER_TIMEOUT and the connection is "
       "closed."},
      {"http.status_wait_recheck_ms", at<&S::http, &http_settings::status_wait_recheck_ms>(), 1000, H,
       "GET /api/v1/changes/{id}?wait=: how often the changes being waited for are re-read in one query, so a change "
       "moved by another instance (or by a writer that does not signal) answers its waiters within this bound; "
       "<1 -> 1."},
      {"http.status_cache_ms", at<&S::http, &http_settings::status_cache_ms>(), 1000, H,
       "GET /api/v1/changes/{id} without wait: how long a change's row read from the database answers further reads "
       "of it on this instance. A write through this instance drops it at once; a write through another instance "
       "is seen within this bound. 0 -> every read is a query; <0 -> 0."},
      {"http.status_wait_max", at<&S::http, &http_settings::status_wait_max>(), 10000, H,
       "Waits (?wait=) held at once by this instance; one more is answered 503 OVERLOADED at once; <0 -> 0."},
      {"instance.id", at<&S::instance, &instance_settings::id>(), J(), R,
       "This instance's id; missing -> hostname-pid-random."},
      {"instance.lease_seconds", at<&S::instance, &instance_settings::lease_seconds>(), 30, R,
       "Lease an instance holds on its operations; renewed by heartbeat."},
      {"actors.threads", at<&S::actors, &actors_settings::threads>(), 1, R,
       "CAF scheduler threads: the request actors' decisions, the batch coordinator and the periodic "
       "jobs (their I/O runs on the database and external pools). One measured faster than two on two "
       "cores (fewer hand-offs; docs/performance.md); raise it where the actor threads "
       "(caf.multiplexer) are busy. <1 -> 1."},
      {"actors.scheduler", at<&S::actors, &actors_settings::scheduler>(), "sharing", R,
       "CAF scheduler policy: sharing (one queue, idle threads block: no CPU when idle) | stealing (CAF's "
       "polling work stealing: idle threads spin and nap, which costs CPU at moderate load); unknown -> sharing."},
      {"log.level", at<&S::log, &log_settings::level>(), "info", H, "debug|info|warn|error; unknown -> info."},
      {"console.dir", at<&S::console, &console_settings::dir>(), J(), R,
       "Directory of the built console; missing -> console served as 404."},
      {"console.poll_ms", at<&S::console, &console_settings::poll_ms>(), 5000, H,
       "How often a console page refreshes (one ops read per refresh); <1000 -> 1000, missing -> 5000."},
      {"ops.attention_late_after_s", at<&S::ops, &ops_settings::attention_late_after_s>(), 60, H,
       "The attention view lists a wait whose stored wake (next try or deadline) passed this long ago without the "
       "change moving; <0 -> 0."},
      {"ops.attention_approval_after_s", at<&S::ops, &ops_settings::attention_approval_after_s>(), 86400, H,
       "The attention view lists an approval request unanswered this long (before its hard deadline); <0 -> 0."},

      // -- database (restart)
      {"db.host", at<&S::db, &db_settings::host>(), "127.0.0.1", R,
       "MariaDB/MySQL host (ignored when db.socket is set)."},
      {"db.port", at<&S::db, &db_settings::port>(), 3306, R, "MariaDB/MySQL port."},
      {"db.socket", at<&S::db, &db_settings::socket>(), J(), R, "Unix socket path; preferred over host/port when set."},
      {"db.endpoints", at<&S::db, &db_settings::endpoints>(), J(), R,
       "\"host:port\" of every node of a Galera cluster, in order of preference; a connection goes to the first node "
       "that accepts it and is ready (wsrep_ready), and moves to the next on a connection error or a node that is not "
       "ready (1047). Missing or empty -> db.socket or db.host/db.port."},
      {"db.user", at<&S::db, &db_settings::user>(), "changeflow", R, "Database user."},
      {"db.password", at<&S::db, &db_settings::password>(), "", R, "Database password."},
      {"db.name", at<&S::db, &db_settings::name>(), "changeflow", R, "Database (schema) name."},
      {"db.pool_size", at<&S::db, &db_settings::pool_size>(), 4, R, "Database worker threads, one connection each."},
      {"db.callback_reserve", at<&S::db, &db_settings::callback_reserve>(), J(), R,
       "Queue slots of the database pool only callbacks may use, so a burst of submits cannot make "
       "external systems' callbacks fail; missing -> db.queue_capacity / 10."},
      {"db.read_pool_size", at<&S::db, &db_settings::read_pool_size>(), 2, R,
       "Database threads for status reads (GET /api/v1/changes...), apart from the transition pool; <1 -> 1."},
      {"db.transition_group_max", at<&S::db, &db_settings::transition_group_max>(), 64, R,
       "Group commit: the most members (request-actor transitions, submissions, callbacks) committed together in "
       "one transaction and one round trip (each keeps its own guard and outcome); 1 commits each alone. <1 -> 1."},
      {"db.transition_committers", at<&S::db, &db_settings::transition_committers>(), 1, R,
       "Group commit: how many groups may commit at the same time, each on a thread of the database pool. One "
       "commits the most per group and needs no lock order between groups; more only if one cannot keep up. "
       "<1 -> 1; at most half of db.pool_size is used."},
      {"db.queue_capacity", at<&S::db, &db_settings::queue_capacity>(), 20000, R,
       "Pending database jobs before new ones are rejected."},
      {"db.connect_timeout_ms", at<&S::db, &db_settings::connect_timeout_ms>(), 2000, R,
       "Connect timeout for each database connection."},
      {"db.read_timeout_ms", at<&S::db, &db_settings::read_timeout_ms>(), 10000, R,
       "Read/write timeout for each database round trip."},

      // -- external systems (restart: addresses and credentials)
      {"external.pool_size", at<&S::external, &external_settings::pool_size>(), 16, R,
       "Threads for outbound HTTP calls."},
      {"external.queue_capacity", at<&S::external, &external_settings::queue_capacity>(), 20000, R,
       "Pending outbound calls before new ones are rejected."},
      {"external.connect_timeout_ms", positive<&S::external, &external_settings::connect_timeout_ms>(), 2000, H,
       "Connect timeout of every outbound call."},
      {"external.request_timeout_ms", positive<&S::external, &external_settings::request_timeout_ms>(), 10000, H,
       "Total timeout of every outbound call."},
      {"external.breaker_failures", at<&S::external, &external_settings::breaker_failures>(), 5, H,
       "Consecutive failures that open a circuit breaker; <=0 -> 5."},
      {"external.breaker_cooldown_ms", positive<&S::external, &external_settings::breaker_cooldown_ms>(), 10000, H,
       "Time an open breaker waits before a trial call."},
      {"external.ca_file", at<&S::external, &external_settings::ca_file>(), "", R,
       "PEM bundle of CA certificates trusted for https:// calls (GitLab, approval, permission, notifications) in "
       "addition to the system CAs; empty -> system CAs only. Unreadable -> every https call fails (protocol "
       "error naming the file)."},
      {"gitlab.base_url", at<&S::gitlab, &gitlab_settings::base_url>(), "http://127.0.0.1:9090/api/v4", R,
       "GitLab REST v4 base URL."},
      {"gitlab.project", at<&S::gitlab, &gitlab_settings::project>(), "config/changes", R,
       "Project path (URL-encoded when used): the one repository when `repositories` is missing or empty, and the "
       "repository of changes stored before repositories existed."},
      {"gitlab.target_branch", at<&S::gitlab, &gitlab_settings::target_branch>(), "main", H,
       "Branch the changes are merged into when `repositories` is missing or empty, and the branches of a "
       "repository entry without its own."},
      {"gitlab.author_token", at<&S::gitlab, &gitlab_settings::author_token>(), J(), R,
       "PRIVATE-TOKEN of the bot that commits and opens MRs. Required.", true},
      {"gitlab.approver_tokens", at<&S::gitlab, &gitlab_settings::approver_tokens>(), J(), R,
       "PRIVATE-TOKENs of the approval bots; each approves every MR. Required (at least one).", true},
      {"gitlab.approver_user_ids", at<&S::gitlab, &gitlab_settings::approver_user_ids>(), J::array({"101", "102"}), R,
       "GitLab user ids of the approval bots, same order as gitlab.approver_tokens."},
      {"repositories", unbound(O), J::object(), H,
       "GitLab repositories: project path -> {branches, author_token, approver_tokens, approver_user_ids, "
       "webhook_secret}. Each change names one repository and one of its branches. Missing fields fall back to "
       "gitlab.target_branch, gitlab.author_token and gitlab.approver_tokens/approver_user_ids; webhook_secret has "
       "none. Missing or empty -> gitlab.project with gitlab.target_branch is the one repository. A malformed "
       "section is refused at load (a reload keeps the last good snapshot)."},
      {"gitlab.use_check_items", at<&S::gitlab, &gitlab_settings::use_check_items>(), false, H,
       "Approve with check_items (the extended approver); missing -> plain approve."},
      {"gitlab.mr_read_reuse_ms", at<&S::gitlab, &gitlab_settings::mr_read_reuse_ms>(), 5000, H,
       "How old the MR read that ended the pipeline wait may be for the bot approvals and the first merge "
       "attempt to act on it instead of reading the MR again (approve and merge carry its sha; a moved "
       "head is refused by GitLab and read again); 0 -> always read; negative -> 0."},
      {"approval.base_url", at<&S::approval, &approval_settings::base_url>(), "http://127.0.0.1:9090", R,
       "Approval system base URL."},
      {"approval.callback_url", at<&S::approval, &approval_settings::callback_url>(),
       "http://127.0.0.1:8080/api/v1/callbacks/approval", H, "URL the approval system calls back."},
      {"approval.max_retries", at<&S::approval, &approval_settings::max_retries>(), 3, H,
       "Bot approval retries per account; negative -> 0."},
      {"approval.backoff_base_ms", at<&S::approval, &approval_settings::backoff_base_ms>(), 200, H,
       "First backoff between approval retries, doubled each time."},
      {"permission.base_url", at<&S::permission, &permission_settings::base_url>(), "http://127.0.0.1:9090", R,
       "Permission service base URL."},

      // -- callbacks
      {"callbacks.approval_secret", at<&S::callbacks, &callbacks_settings::approval_secret>(), J(), H,
       "Shared secret of approval callbacks (HMAC-SHA256 of the body in X-Signature, or the secret in "
       "X-Callback-Token). Required at start; cleared by a reload -> every callback is refused with 401.",
       true},
      {"callbacks.deploy_secret", at<&S::callbacks, &callbacks_settings::deploy_secret>(), J(), H,
       "Shared secret of deploy callbacks (X-Gitlab-Token). Required at start; cleared by a reload -> "
       "refused with 401.",
       true},

      // -- workflow (hot)
      {"flow.default", at<&S::flow, &flow_settings::default_order>(), "approve_then_create", H,
       "Step order of NEW operations: approve_then_create | create_then_approve; unknown -> "
       "approve_then_create."},
      {"poll.short_interval_ms", at<&S::poll, &poll_settings::short_interval_ms>(), 2000, H,
       "Poll interval for the first poll.short_attempts polls."},
      {"poll.short_attempts", at<&S::poll, &poll_settings::short_attempts>(), 10, H, "Number of short-interval polls."},
      {"poll.first_interval_ms", at<&S::poll, &poll_settings::first_interval_ms>(), 1000, H,
       "Delay of a wait's first poll (and of the second); each later short poll waits twice as long as the one "
       "before, up to poll.short_interval_ms, so a pipeline that is done early is seen early. 0 or >= "
       "poll.short_interval_ms -> no ramp; off where webhooks end the waits."},
      {"poll.long_interval_ms", at<&S::poll, &poll_settings::long_interval_ms>(), 15000, H,
       "Poll interval after the short ones."},
      {"poll.timeout_ms", at<&S::poll, &poll_settings::timeout_ms>(), 3600000, H,
       "Polling gives up after this long: outcome 'timed out'."},
      {"poll.webhook_interval_ms", at<&S::poll, &poll_settings::webhook_interval_ms>(), 60000, H,
       "Poll interval of changes and batches whose repository has a webhook_secret: GitLab's hooks end their waits, "
       "so polling is only the fallback for a lost hook; <=0 -> the normal tiered intervals."},
      {"merge.max_attempts", at<&S::merge, &merge_settings::max_attempts>(), 5, H,
       "Merge attempts (each may rebase) before HANDLE_FAILED."},
      {"timeouts.approval_wait_seconds", at<&S::timeouts, &timeouts_settings::approval_wait_seconds>(), 604800, H,
       "Longest wait for the approval callback before APPROVAL_TIMEOUT."},
      {"timeouts.deploy_wait_seconds", positive<&S::timeouts, &timeouts_settings::deploy_wait_seconds>(), 86400, H,
       "Longest wait in MERGED before the sweep flags it."},

      // -- durability: rehydration, leases, timeout sweeps
      {"rehydrate.rate_per_second", positive<&S::rehydrate, &rehydrate_settings::rate_per_second>(), 200, H,
       "Actors resumed per second after start or takeover; <=0 -> 200."},
      {"rehydrate.page_size", at<&S::rehydrate, &rehydrate_settings::page_size>(), 500, R,
       "Rows read per page while loading the operations to resume."},
      {"durability.sweep_interval_ms", positive<&S::durability, &durability_settings::sweep_interval_ms>(), 5000, H,
       "Interval of the timeout sweep; <=0 -> 5000."},
      {"durability.inbox_poll_ms", positive<&S::durability, &durability_settings::inbox_poll_ms>(), 500, H,
       "Interval of the owner's poll for rows changed elsewhere (callbacks at a peer); <=0 -> 500."},
      {"durability.stuck_after_seconds", positive<&S::durability, &durability_settings::stuck_after_seconds>(), 60, H,
       "An owned operation unchanged this long with no live actor gets a new actor."},
      {"durability.approval_grace_seconds", positive<&S::durability, &durability_settings::approval_grace_seconds>(),
       30, H, "APPROVAL_SENT past its stored deadline by this much is timed out by the sweep."},
      {"durability.passivate_beyond_seconds", at<&S::durability, &durability_settings::passivate_beyond_seconds>(), 60,
       H,
       "An operation waiting for the approval decision with its stored deadline further away than this has no "
       "live actor: the actor stops once the wait is stored, and the callback, a cancel or operator action, or "
       "the deadline (the sweep) brings one back from the row. 0 -> every wait keeps its actor; <0 -> 0."},
      {"durability.shutdown_deadline_ms", at<&S::durability, &durability_settings::shutdown_deadline_ms>(), 5000, R,
       "Graceful stop: time in-flight steps get to finish."},

      // -- batch path (hot)
      {"batch.enabled", at<&S::batch, &batch_settings::enabled>(), false, H,
       "Send approved changes through the batch coordinator."},
      {"batch.round_interval_ms", at<&S::batch, &batch_settings::round_interval_ms>(), 5000, H,
       "Interval of scheduled batch rounds."},
      {"batch.max_members", at<&S::batch, &batch_settings::max_members>(), 50, H,
       "Most operations claimed into one batch."},
      {"batch.max_splits", at<&S::batch, &batch_settings::max_splits>(), 6, H,
       "Bisection depth limit for a failing batch."},
      {"batch.max_attempts", positive<&S::batch, &batch_settings::max_attempts>(), 3, H,
       "A member claimed this many times whose batch fails again (not a pipeline failure) leaves the "
       "batch path as BATCH_FAILED; <=0 -> 3."},
      {"batch.running_timeout_seconds", at<&S::batch, &batch_settings::running_timeout_seconds>(), 3600, H,
       "A RUNNING batch older than this is settled by the sweep."},

      // -- reconciliation (hot)
      {"reconcile.interval_ms", at<&S::reconcile, &reconcile_settings::interval_ms>(), 60000, H,
       "Interval of the reconciliation job; <=0 -> disabled."},
      {"reconcile.min_age_seconds", at<&S::reconcile, &reconcile_settings::min_age_seconds>(), 300, H,
       "Skip MERGED records changed more recently than this."},
      {"reconcile.max_age_seconds", at<&S::reconcile, &reconcile_settings::max_age_seconds>(), 86400, H,
       "Skip MERGED records changed longer ago than this."},

      // -- notifications (hot)
      {"notifications.dispatch_interval_ms", at<&S::notifications, &notifications_settings::dispatch_interval_ms>(),
       1000, H,
       "Interval of the notification dispatcher's passes when the previous pass delivered nothing (a pass that "
       "delivered something is followed at once); <=0 -> paused (events stay in the outbox)."},
      {"notifications.batch", positive<&S::notifications, &notifications_settings::batch>(), 50, H,
       "Deliveries claimed per pass (1-1000); <=0 -> 50."},
      {"notifications.timeout_ms", positive<&S::notifications, &notifications_settings::timeout_ms>(), 5000, H,
       "Deadline of one notification POST (connect within min(this, 2000)); <=0 -> 5000. A claim lasts twice this "
       "plus 5 s, then another pass (or instance) may send the delivery again."},
      {"notifications.retry_base_ms", positive<&S::notifications, &notifications_settings::retry_base_ms>(), 1000, H,
       "Wait after a delivery's first failed attempt; doubled after each further failure; <=0 -> 1000."},
      {"notifications.retry_cap_ms", positive<&S::notifications, &notifications_settings::retry_cap_ms>(), 300000, H,
       "Longest wait between two attempts of one delivery; <=0 -> 300000; below retry_base_ms -> retry_base_ms."},
      {"notifications.max_age_seconds", positive<&S::notifications, &notifications_settings::max_age_seconds>(), 259200,
       H,
       "A delivery still failing this long after its event is marked FAILED (the next events of its stream then "
       "go out); <=0 -> 259200 (3 days)."},

      // -- HTTP cross-cutting concerns (hot)
      {"rate_limit.window_ms", positive<&S::rate_limit, &rate_limit_settings::window_ms>(), 60000, H,
       "Sliding window of every rate limit; <=0 -> 60000."},
      {"rate_limit.submit", positive<&S::rate_limit, &rate_limit_settings::submit>(), 600, H,
       "Submissions per window per subject; missing or <=0 -> no limiting."},
      {"rate_limit.callbacks", positive<&S::rate_limit, &rate_limit_settings::callbacks>(), J(), H,
       "Callbacks per window per sender; missing or <=0 -> no limiting."},
      {"rate_limit.ops", positive<&S::rate_limit, &rate_limit_settings::ops>(), 120, H,
       "Ops actions per window per operator; missing or <=0 -> no limiting."},
      {"rate_limit.ops_read", positive<&S::rate_limit, &rate_limit_settings::ops_read>(), 1200, H,
       "Ops reads (console polling) per window per operator, counted apart from actions; missing or <=0 -> no "
       "limiting."},
      {"access.mode", at<&S::access, &access_settings::mode>(), "TEST_WINDOW", H,
       "OPEN | TEST_WINDOW | CLOSED for user writes; missing or blank -> TEST_WINDOW, unknown -> CLOSED."},
      {"access.window", at<&S::access, &access_settings::window>(), J(), H,
       "TEST_WINDOW hours 'HH:MM-HH:MM'; missing or unparsable -> closed."},
      {"access.time_zone_offset_minutes", at<&S::access, &access_settings::time_zone_offset_minutes>(), 0, H,
       "Fixed UTC offset the window is read in (not the host's)."},
      {"auth.jwt_secret", at<&S::auth, &auth_settings::jwt_secret>(), J(), H,
       "HS256 secret of bearer tokens. Required at start; cleared by a reload -> no identity (401).", true},
      {"auth.jwt_audience", at<&S::auth, &auth_settings::jwt_audience>(), J(), H,
       "Required 'aud' of bearer tokens; missing -> not checked."},
      {"auth.aliases", at<&S::auth, &auth_settings::aliases>(), J::object(), H,
       "Employee id -> account map; both resolve to one identity."},
      {"auth.trusted_proxies", at<&S::auth, &auth_settings::trusted_proxies>(), J::array(), H,
       "Peers whose X-Forwarded-For hop and identity header are trusted."},
      {"auth.gateway_header", at<&S::auth, &auth_settings::gateway_header>(), J(), H,
       "Identity header set by a trusted gateway; missing -> header mode off."},
      {"auth.ops_rules", at<&S::auth, &auth_settings::ops_rules>(), J::array({"changeflow.ops", "changeflow.admin"}), H,
       "Rule codes of which any grants the ops API; empty -> nobody."},
      {"auth.required", at<&S::auth, &auth_settings::required>(), true, H,
       "Require an identity on the user API; missing or cleared -> required. false -> callers without a "
       "token are served as 'anonymous' with no per-caller checks (demo and tests only)."},
      {"auth.subject_rule", at<&S::auth, &auth_settings::subject_rule>(), "subject:{subject}", H,
       "Rule code (asked of the permission service) that permits a requester to submit for and read a "
       "subject; {subject} is replaced by the subject. Cleared -> no one is permitted by subject (only "
       "requesters see their own changes, operators see all)."},
      {"idempotency.ttl_seconds", positive<&S::idempotency, &idempotency_settings::ttl_seconds>(), 86400, H,
       "Lifetime of idempotency records; <=0 -> 86400."},
      // -- HTTP cross-cutting concerns, wiring (api area)
      {"idempotency.cleanup_interval_ms", at<&S::idempotency, &idempotency_settings::cleanup_interval_ms>(), 60000, H,
       "Interval of the expired idempotency record cleanup; <=0 -> paused (records still expire)."},
      {"idempotency.cleanup_batch", positive<&S::idempotency, &idempotency_settings::cleanup_batch>(), 500, H,
       "Rows deleted per cleanup statement; <=0 -> 500."},
      {"idempotency.in_flight_timeout_ms", positive<&S::idempotency, &idempotency_settings::in_flight_timeout_ms>(),
       30000, H,
       "Longest a request may hold its idempotency key IN_FLIGHT; after it (or at once when the "
       "owning instance is dead) a retry with the same body takes the key over and runs again. "
       "<=0 -> 30000."},
      {"faults.hold_after_idempotency_begin_ms", at<&S::faults, &faults_settings::hold_after_idempotency_begin_ms>(), 0,
       H,
       "TEST HOOK: a submit waits this long (capped at 60000) between taking its idempotency key and "
       "creating the operation, so a test can kill the process there. <=0 -> off. Never enable in "
       "production."},
      {"auth.permission_timeout_ms", positive<&S::auth, &auth_settings::permission_timeout_ms>(), 2000, H,
       "Longest wait for the permission service per request; then 403 (deny). <=0 -> 2000."},
      {"faults.hold_after_deploy_record_ms", at<&S::faults, &faults_settings::hold_after_deploy_record_ms>(), 0, H,
       "TEST HOOK: a deploy delivery waits this long (at most 60000) between being recorded and being "
       "applied, so a crash test can kill the process in between. 0 = off. Never set in production."},
      {"faults.lose_group_answer_every", at<&S::faults, &faults_settings::lose_group_answer_every>(), 0, H,
       "TEST HOOK: every Nth commit of the transition committer (a group, or a transition alone) loses its "
       "answer after its COMMIT (its last statement kills its own connection, as a connection dropped after "
       "the commit would): a group's members learn their outcomes from its receipt, a transition alone from "
       "the event it wrote. 0 = off; at most 1000000. Never set in production."},
      {"metrics.fault_injection", at<&S::metrics, &metrics_settings::fault_injection>(), false, H,
       "TEST HOOK: every metric emission throws inside the registry wrapper (responses must not "
       "change). Never enable in production."},
      {"metrics.user_labels", at<&S::metrics, &metrics_settings::user_labels>(), false, H,
       "Allow user ids as metric labels (bounded cardinality risk)."},
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
