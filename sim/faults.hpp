#pragma once
// Fault injection rules of the simulator. A rule is global or scoped by a `match` substring of the
// request's subject (MR title + source branch, branch name, approval requestId + title, permission
// subject), so tests running in parallel against one sim do not disturb each other. `count` limits
// how often it fires (-1 = until cleared).
//
// kinds (endpoint names in docs/external-contracts.md):
//   status {status, retry_after?, body?}   answer with this status (5xx bursts, 429 with Retry-After)
//   slow {delay_ms}                         answer late
//   garbage                                 200 with a body that is not JSON
//   lose_response                           perform the action, then close without answering
//   approve_not_allowed {user_id?}          401 on approve (0/absent = any user)
//   check_items_change                      the project's check items change before this approve
//   merged_before_close                     a close of an open MR finds it merged (a merge landed first)
//   merge_needs_rebase                      merge answers 422 need_rebase until a rebase happens
//   rebase_conflict                         the rebase fails with merge_error (a conflict)
//   target_conflict                         right after this commit creates its branch, someone pushes
//                                           the same files to the start branch: MRs of the branch
//                                           conflict with their target and every rebase fails
//   pipeline_fail | pipeline_hang           the next pipeline of the MR fails / never finishes
//   head_moves                              get_mr: the first read that finds the head pipeline passed
//                                           is answered, then a commit lands on the MR's source branch
//                                           (new head sha, new pipeline, approvals kept)
//   approval_callback {mode: duplicate|delay|reorder|old_operation|drop, delay_ms?, operation_id?}
//   deploy_callback {mode: drop|no_operation_ids|failed|duplicate}
//   gitlab_webhook {mode: drop|duplicate|reorder|unknown_project|forged}, endpoint pipeline_hook |
//     merge_request_hook | deployment_hook: the hook is not sent / sent `copies` times with one
//     event UUID / (pipeline) followed by a stale "running" of the same pipeline / also sent as
//     an event of a project the receiver does not know / also sent with a wrong X-Gitlab-Token
//   duplicate (both kinds) {copies? = 2, concurrent? = false, gap_ms? = 0}: the same delivery
//     `copies` times; concurrent sends them from separate threads at once (copy k starts k * gap_ms
//     later), as a sender whose retry overlaps its first attempt or two sender replicas do.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::sim {

struct fault {
  std::string kind;
  std::string endpoint;  // empty = any endpoint the kind applies to
  std::string match;     // empty = any subject
  int remaining = -1;    // -1 = unlimited
  int status = 503;
  std::optional<int> retry_after;
  std::string body;
  int delay_ms = 0;
  std::int64_t user_id = 0;
  std::string mode;
  std::string operation_id;
  int copies = 2;
  bool concurrent = false;
  int gap_ms = 0;
};

/// Parses one rule; error text when the rule is invalid.
std::optional<fault> parse_fault(const nlohmann::json& j, std::string& error);
nlohmann::json to_json(const fault& f);

/// Not thread-safe: the simulator guards it with its state mutex.
class fault_set {
 public:
  void add(fault f) { rules_.push_back(std::move(f)); }
  void clear() { rules_.clear(); }
  /// The first rule of `kind` matching endpoint, subject and (when the rule names one) user; consumes one use.
  std::optional<fault> take(const std::string& kind, const std::string& endpoint, const std::string& subject,
                            std::int64_t user_id = 0);
  nlohmann::json describe() const;
  const std::map<std::string, std::uint64_t>& fired() const { return fired_; }
  void reset_counters() { fired_.clear(); }

 private:
  std::vector<fault> rules_;
  std::map<std::string, std::uint64_t> fired_;
};

}  // namespace changeflow::sim
