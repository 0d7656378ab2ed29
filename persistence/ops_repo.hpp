#pragma once
// Read side of the ops API: operations across ALL instances (the database, not this process's
// actors), the callback ledger per operation and its outcome counts, and the instance leases.
// Reads only; every write an operator triggers goes through operation_repo::transition (guarded by
// version + step, so an action raced by the workflow fails as preempted instead of overwriting).

#include "persistence/operation_repo.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::persistence {

/// Every field optional; empty = not filtered. Keyset paging on (updated_at, operation_id) oldest
/// first, so "stuck-looking" (oldest untouched) rows come first and a page never repeats a row
/// while others are updated (an updated row moves to the end instead).
struct ops_operation_filter {
  std::optional<workflow::phase> phase;
  std::optional<workflow::step> step;
  std::vector<workflow::step> steps_in;  // any of these steps (the overview's "stuck" set)
  std::string flow;
  std::string owner;    // owner_instance exact match
  std::string subject;  // subject_id exact match
  std::string target;   // target_key exact match
  std::string search;   // part of an operation id (8+ characters; else its start), an MR number, or text of the title

  int older_than_s = 0;  // updated_at < NOW(3) - older_than_s (DB clock); 0 = no filter
  bool only_nonterminal = false;
  bool newest_first = false;  // order by last update, newest first (the cursor then walks backwards)
  int limit = 50;             // clamped to 1..500
  /// Cursor from the previous page: "<updated_at_ms>:<operation_id>"; "" = first page.
  std::string after;
};

struct ops_operation_page {
  std::vector<operation_row> items;
  std::string next_after;  // "" when this was the last page
};

db_result<ops_operation_page> list_ops_operations(session s, const ops_operation_filter& f);
/// How many operations match the filter (its cursor and limit ignored): the list's total.
db_result<std::int64_t> count_ops_operations(session s, const ops_operation_filter& f);
/// Operation ids matching the filter (no paging, at most `cap`), for bulk actions and dry runs.
db_result<std::vector<operation_row>> select_ops_operations(session s, ops_operation_filter f, int cap);

/// Number of operations per phase name (phases without rows are absent).
db_result<std::map<std::string, std::int64_t>> count_operations_by_phase(session s);

struct callback_ledger_row {
  std::int64_t id = 0;
  std::string delivery_id;
  std::string kind;  // approval | deploy
  std::optional<std::string> operation_id;
  std::string outcome;  // APPLIED | DUPLICATE | IGNORED_STALE | OUT_OF_ORDER | PENDING
  std::int64_t received_at_ms = 0;
  std::optional<std::int64_t> applied_at_ms;
};

db_result<std::vector<callback_ledger_row>> list_callbacks_for_operation(session s, const std::string& operation_id);
/// Outcome -> count over the whole ledger.
db_result<std::map<std::string, std::int64_t>> callback_outcome_counts(session s);
/// Newest first, only the given outcomes (e.g. {"DUPLICATE", "IGNORED_STALE", "OUT_OF_ORDER"}).
db_result<std::vector<callback_ledger_row>> recent_callbacks(session s, const std::vector<std::string>& outcomes,
                                                             int limit);

/// Failed attempts of one step of an operation over its whole life (migration 13): every retry and
/// every failure that ended the step, with the last external error met in it.
struct step_attempt_row {
  workflow::step step = workflow::step::APPROVAL_SENDING;
  int failed_attempts = 0;
  std::optional<std::string> last_error;
  std::optional<int> last_error_status;
  std::int64_t first_error_at_ms = 0;
  std::int64_t last_error_at_ms = 0;
};
db_result<std::vector<step_attempt_row>> list_step_attempts(session s, const std::string& operation_id);

/// The database clock in epoch ms: relative times in ops answers ("in 40 s", "for 3 min") are
/// measured from it, like every stored time.
db_result<std::int64_t> database_now_ms(session s);

/// What the attention view reads, in one call (several indexed reads on one connection).
struct attention_query {
  std::vector<workflow::step> decision_steps;  // failures and unknown outcomes awaiting an operator
  int late_after_s = 60;                       // a stored wake this far in the past: the wait is late
  int approval_after_s = 86400;                // an approval wait older than this is overdue
  int callback_window_s = 86400;               // unapplied callbacks received within this window
  std::vector<std::string> callback_outcomes;  // ledger outcomes that mean "not applied"
  int pending_callback_after_s = 60;           // a PENDING ledger row older than this was dropped
  int limit = 200;                             // per kind
};
struct attention_rows {
  std::int64_t now_ms = 0;  // database clock
  std::vector<operation_row> decisions;
  std::vector<operation_row> late_waits;
  std::vector<operation_row> overdue_approvals;
  std::vector<callback_ledger_row> callbacks;
};
db_result<attention_rows> read_attention(session s, const attention_query& q);

struct instance_row {
  std::string instance_id;
  std::int64_t started_at_ms = 0;
  std::int64_t heartbeat_at_ms = 0;
  std::int64_t lease_until_ms = 0;
  std::int64_t epoch = 0;
  std::string address;
  std::string status;
  bool lease_live = false;  // lease_until > NOW(3) on the DB clock
  std::int64_t owned_nonterminal = 0;
};
db_result<std::vector<instance_row>> list_instances(session s);

}  // namespace changeflow::persistence
