#pragma once
// The configuration as typed values: one struct per concern, built once per snapshot (a snapshot is
// immutable; a hot reload builds a new snapshot and with it new settings). Call sites read
// `snap.poll().short_interval_ms`, never a key string.
//
// Each field is bound to its key in the declaration table (config/keys.cpp), next to the key's type,
// default, reload kind and documentation: a key is named once. How a field takes its value:
//  - a plain scalar (integer, boolean, string): the configured value; cleared (null, "" for a
//    string), missing or of another type -> the declared default;
//  - a `positive` binding (keys.cpp): as above, and a value <= 0 -> the declared default too;
//  - std::optional<...>: the configured value; cleared, missing or of another type -> nullopt;
//  - a list: the configured strings; cleared -> empty (an empty list, not the default);
//  - an object: the configured JSON object; cleared -> null.
// The documented clamps that are not "<= 0 -> default" are applied once in settings.cpp
// (finish_settings), so every reader sees the same effective value.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::config {

struct http_settings {
  std::string address;
  std::int64_t port = 0;
  std::int64_t threads = 0;
  std::int64_t body_limit_bytes = 0;
  std::int64_t header_limit_bytes = 0;
  std::int64_t read_timeout_ms = 0;
  std::int64_t handler_timeout_ms = 0;      // >= 1
  std::int64_t status_wait_recheck_ms = 0;  // >= 1
  std::int64_t status_wait_max = 0;         // >= 0
  std::int64_t status_cache_ms = 0;         // >= 0

  bool operator==(const http_settings&) const = default;
};

struct instance_settings {
  std::optional<std::string> id;
  std::int64_t lease_seconds = 0;  // >= 1

  bool operator==(const instance_settings&) const = default;
};

struct actors_settings {
  std::int64_t threads = 0;
  std::string scheduler;

  bool operator==(const actors_settings&) const = default;
};

struct log_settings {
  std::string level;

  bool operator==(const log_settings&) const = default;
};

struct console_settings {
  std::optional<std::string> dir;
  std::int64_t poll_ms = 0;  // >= 1000

  bool operator==(const console_settings&) const = default;
};

struct ops_settings {
  std::int64_t attention_late_after_s = 0;      // >= 0
  std::int64_t attention_approval_after_s = 0;  // >= 0

  bool operator==(const ops_settings&) const = default;
};

struct db_settings {
  std::string host;
  std::int64_t port = 0;
  std::optional<std::string> socket;
  std::vector<std::string> endpoints;  // "host:port" of every node of a cluster; empty: host/port
  std::string user;
  std::string password;
  std::string name;
  std::int64_t pool_size = 0;
  std::optional<std::int64_t> callback_reserve;  // as configured; see reserved_for_callbacks()
  std::int64_t read_pool_size = 0;               // >= 1
  std::int64_t transition_group_max = 0;         // >= 1; 1 = no group commit
  std::int64_t transition_committers = 0;        // >= 1; groups committing at the same time
  std::int64_t queue_capacity = 0;
  std::int64_t connect_timeout_ms = 0;
  std::int64_t read_timeout_ms = 0;

  /// Queue slots only callbacks may use: db.callback_reserve, missing -> queue_capacity / 10 (at
  /// least 1); never negative.
  std::int64_t reserved_for_callbacks() const;

  bool operator==(const db_settings&) const = default;
};

struct external_settings {
  std::int64_t pool_size = 0;
  std::int64_t queue_capacity = 0;
  std::int64_t connect_timeout_ms = 0;  // > 0
  std::int64_t request_timeout_ms = 0;  // > 0
  std::int64_t breaker_failures = 0;
  std::int64_t breaker_cooldown_ms = 0;  // > 0
  std::string ca_file;

  bool operator==(const external_settings&) const = default;
};

struct gitlab_settings {
  std::optional<std::string> base_url;
  std::optional<std::string> project;
  std::string target_branch;
  std::optional<std::string> author_token;
  std::vector<std::string> approver_tokens;
  std::vector<std::string> approver_user_ids;
  bool use_check_items = false;
  std::int64_t mr_read_reuse_ms = 0;  // >= 0; 0 = every approve and merge step reads the MR

  bool operator==(const gitlab_settings&) const = default;
};

struct approval_settings {
  std::optional<std::string> base_url;
  std::optional<std::string> callback_url;
  std::int64_t max_retries = 0;      // >= 0
  std::int64_t backoff_base_ms = 0;  // >= 0

  bool operator==(const approval_settings&) const = default;
};

struct permission_settings {
  std::optional<std::string> base_url;

  bool operator==(const permission_settings&) const = default;
};

struct callbacks_settings {
  std::optional<std::string> approval_secret;
  std::optional<std::string> deploy_secret;

  bool operator==(const callbacks_settings&) const = default;
};

struct flow_settings {
  std::string default_order;  // flow.default

  bool operator==(const flow_settings&) const = default;
};

struct poll_settings {
  std::int64_t short_interval_ms = 0;  // >= 1
  std::int64_t short_attempts = 0;     // >= 0
  std::int64_t long_interval_ms = 0;   // >= 1
  std::int64_t timeout_ms = 0;         // >= 1
  std::int64_t webhook_interval_ms = 0;
  std::int64_t first_interval_ms = 0;  // >= 0; 0 -> no ramp

  bool operator==(const poll_settings&) const = default;
};

struct merge_settings {
  std::int64_t max_attempts = 0;  // >= 1

  bool operator==(const merge_settings&) const = default;
};

struct timeouts_settings {
  std::int64_t approval_wait_seconds = 0;  // >= 1
  std::int64_t deploy_wait_seconds = 0;    // > 0

  bool operator==(const timeouts_settings&) const = default;
};

struct rehydrate_settings {
  std::int64_t rate_per_second = 0;  // > 0
  std::int64_t page_size = 0;        // >= 1

  bool operator==(const rehydrate_settings&) const = default;
};

struct durability_settings {
  std::int64_t sweep_interval_ms = 0;       // > 0
  std::int64_t inbox_poll_ms = 0;           // > 0
  std::int64_t stuck_after_seconds = 0;     // > 0
  std::int64_t approval_grace_seconds = 0;  // > 0
  std::int64_t shutdown_deadline_ms = 0;    // >= 0
  /// A wait for the approval decision whose stored deadline is further away than this needs no live
  /// actor (0: every wait keeps its actor). >= 0.
  std::int64_t passivate_beyond_seconds = 0;

  bool operator==(const durability_settings&) const = default;
};

struct batch_settings {
  bool enabled = false;
  std::int64_t round_interval_ms = 0;
  std::int64_t max_members = 0;  // >= 1
  std::int64_t max_splits = 0;
  std::int64_t max_attempts = 0;  // > 0
  std::int64_t running_timeout_seconds = 0;

  bool operator==(const batch_settings&) const = default;
};

struct reconcile_settings {
  std::int64_t interval_ms = 0;  // <= 0: disabled
  std::int64_t min_age_seconds = 0;
  std::int64_t max_age_seconds = 0;

  bool operator==(const reconcile_settings&) const = default;
};

struct notifications_settings {
  std::int64_t dispatch_interval_ms = 0;  // <= 0: paused
  std::int64_t batch = 0;                 // 1..1000
  std::int64_t timeout_ms = 0;            // > 0
  std::int64_t retry_base_ms = 0;         // > 0
  std::int64_t retry_cap_ms = 0;          // >= retry_base_ms
  std::int64_t max_age_seconds = 0;       // > 0

  bool operator==(const notifications_settings&) const = default;
};

struct rate_limit_settings {
  std::int64_t window_ms = 0;  // > 0
  // Per-window limits; cleared or <= 0 -> nullopt (no limiting).
  std::optional<std::int64_t> submit;
  std::optional<std::int64_t> callbacks;
  std::optional<std::int64_t> ops;
  std::optional<std::int64_t> ops_read;

  bool operator==(const rate_limit_settings&) const = default;
};

struct access_settings {
  std::optional<std::string> mode;
  std::optional<std::string> window;
  std::int64_t time_zone_offset_minutes = 0;

  bool operator==(const access_settings&) const = default;
};

struct auth_settings {
  std::optional<std::string> jwt_secret;
  std::optional<std::string> jwt_audience;
  nlohmann::json aliases;  // object, or null when cleared
  std::vector<std::string> trusted_proxies;
  std::optional<std::string> gateway_header;
  std::vector<std::string> ops_rules;
  bool required = true;
  std::optional<std::string> subject_rule;
  std::int64_t permission_timeout_ms = 0;  // > 0

  bool operator==(const auth_settings&) const = default;
};

struct idempotency_settings {
  std::int64_t ttl_seconds = 0;           // > 0
  std::int64_t cleanup_interval_ms = 0;   // <= 0: paused
  std::int64_t cleanup_batch = 0;         // > 0
  std::int64_t in_flight_timeout_ms = 0;  // > 0

  bool operator==(const idempotency_settings&) const = default;
};

struct faults_settings {
  std::int64_t hold_after_idempotency_begin_ms = 0;  // 0..60000
  std::int64_t hold_after_deploy_record_ms = 0;      // 0..60000
  std::int64_t lose_group_answer_every = 0;          // 0 (off)..1000000

  bool operator==(const faults_settings&) const = default;
};

struct metrics_settings {
  bool fault_injection = false;
  bool user_labels = false;

  bool operator==(const metrics_settings&) const = default;
};

/// Every concern's settings of one snapshot.
struct settings {
  http_settings http;
  instance_settings instance;
  actors_settings actors;
  log_settings log;
  console_settings console;
  ops_settings ops;
  db_settings db;
  external_settings external;
  gitlab_settings gitlab;
  approval_settings approval;
  permission_settings permission;
  callbacks_settings callbacks;
  flow_settings flow;
  poll_settings poll;
  merge_settings merge;
  timeouts_settings timeouts;
  rehydrate_settings rehydrate;
  durability_settings durability;
  batch_settings batch;
  reconcile_settings reconcile;
  notifications_settings notifications;
  rate_limit_settings rate_limit;
  access_settings access;
  auth_settings auth;
  idempotency_settings idempotency;
  faults_settings faults;
  metrics_settings metrics;

  bool operator==(const settings&) const = default;
};

/// Applies the clamps that are not "<= 0 -> default" (called once per snapshot, after binding).
void finish_settings(settings& s);

}  // namespace changeflow::config
