#pragma once
// The attention view: everything that needs a human or is late, each item saying in words what it
// waits for, since when, its deadline or next try, and the last error met. Read in one call (one
// database worker, the registry of this instance's live actors) and sorted by real age, oldest first.
// The words are decided here, once, so the console only renders them.

#include "persistence/ops_repo.hpp"
#include "persistence/session.hpp"
#include "runtime/services.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::service {

/// Why an item is listed; the closed set the console counts and colours by.
enum class attention_reason {
  failed,             // a failure holds the target until an operator re-triggers or closes it
  outcome_unknown,    // a pipeline, rebase or deploy never reported within its budget: a human confirms
  late_wait,          // a stored wake (next try or deadline) passed without the change moving
  overdue_approval,   // the approval request is unanswered for longer than ops.attention_approval_after_s
  stuck_actor,        // a live actor on this instance whose timer is overdue
  callback_unapplied  // a callback that was ignored, refused, out of order, or recorded and never applied
};
std::string_view to_string(attention_reason r);

struct attention_item {
  attention_reason reason = attention_reason::failed;
  std::string waits_for;  // in words: what has to happen for this item to go away
  std::string operation_id;
  std::string title;
  std::optional<workflow::step> step;
  std::int64_t since_ms = 0;           // when the wait began (DB clock): the sort key
  std::optional<std::int64_t> due_ms;  // deadline or next try, when there is one
  std::string due_label;               // "next try" | "deadline" | "was due"
  std::optional<std::string> last_error;
  std::optional<int> last_error_status;
  std::optional<std::int64_t> last_error_at_ms;
  // callback items
  std::string delivery_id;
  std::string callback_kind;
  std::string callback_outcome;
};

struct attention_report {
  std::int64_t now_ms = 0;  // database clock; relative times are measured from it
  std::vector<attention_item> items;
  std::map<std::string, int> counts;  // reason -> items (every reason present, 0 included)
  bool truncated = false;             // a kind hit its read limit
};

struct attention_settings {
  int late_after_s = 60;
  int approval_after_s = 86400;
  int limit = 200;
};
attention_settings attention_settings_from(const config::snapshot& snap);

/// Runs on a database worker. Live actors are read from this instance's registry.
persistence::db_result<attention_report> read_attention_report(persistence::session db, runtime::services& svc,
                                                               const attention_settings& settings);

/// What a change in `s` waits for, in words (also used by the change page).
std::string waits_for(workflow::step s);

}  // namespace changeflow::service
