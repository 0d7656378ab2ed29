#pragma once
// Bot approval of a merge request.
//
// Two approvers sit behind one interface: `plain_approver` (POST .../approve) and
// `check_items_approver` (the same call carrying the project's check items). `approver_for(snapshot)`
// reads `gitlab.use_check_items` on every call, so flipping the switch needs no restart. Both
// report failures as the same `call_error` with the real HTTP status, so the retry loop, the 401
// disambiguation and the logs do not care which one ran.

#include "clients/gitlab_client.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace changeflow::config {
class snapshot;
}

namespace changeflow::clients {

/// Check items per project, shared by every worker thread.
class check_items_cache {
 public:
  std::optional<std::vector<check_item>> get(const std::string& project) const;
  void put(const std::string& project, std::vector<check_item> items);
  void clear();

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<check_item>> items_;
};

class approver {
 public:
  virtual ~approver() = default;
  /// One approve call as `token` (no retries; the caller's loop owns those).
  virtual result<done> approve(gitlab_client& gitlab, check_items_cache& cache, const std::string& token,
                               std::int64_t iid, const std::optional<std::string>& sha) const = 0;
};

class plain_approver final : public approver {
 public:
  result<done> approve(gitlab_client& gitlab, check_items_cache& cache, const std::string& token, std::int64_t iid,
                       const std::optional<std::string>& sha) const override;
};

/// Reads the project's check items (cached), acknowledges them all, and when a 422 carries the
/// list now in effect, rebuilds the request from it and retries exactly once.
class check_items_approver final : public approver {
 public:
  result<done> approve(gitlab_client& gitlab, check_items_cache& cache, const std::string& token, std::int64_t iid,
                       const std::optional<std::string>& sha) const override;
};

/// Picks the implementation from `gitlab.use_check_items` (missing -> plain).
const approver& approver_for(const config::snapshot& snap);

struct reviewer {
  std::string token;
  std::int64_t user_id = 0;
};

struct approval_retry_policy {
  int max_retries = 3;                          // approval.max_retries; negative -> 0
  std::chrono::milliseconds backoff_base{200};  // approval.backoff_base_ms; doubled per attempt
};
approval_retry_policy approval_retry_policy_from(const config::snapshot& snap);

enum class approval_outcome {
  approved,          // our call was accepted
  already_approved,  // the approver list already had this bot (re-run, lost response, or 401 settled)
};

using sleep_function = std::function<void(std::chrono::milliseconds)>;

/// Approves MR `iid` as one bot account; the caller calls it once per account, so a retry
/// never re-submits another account's approval. Reads the approver list before every attempt
/// (fail-open: an unreadable list counts as "not yet approved"), retries with exponential backoff,
/// and reads once more after the last failure to settle the "401 = already approved?" ambiguity.
/// A 409 (`sha` is no longer the head, see head_moved) is returned at once: retrying it cannot help.
///
/// Decision: this runs entirely on a thread of the blocking external pool, so the backoff sleeps
/// there (via `sleep`) and never on an actor thread. The pool is sized for it (external.pool_size).
/// `first_read`: a list of approvers read just before this call (approve_as_reviewers) answers the
/// first attempt's check instead of a read of its own; every later attempt reads again.
result<approval_outcome> approve_as_reviewer(gitlab_client& gitlab, check_items_cache& cache, const reviewer& bot,
                                             std::int64_t iid, const std::optional<std::string>& sha,
                                             const config::snapshot& snap, const sleep_function& sleep = {},
                                             const approvals_info* first_read = nullptr);

/// Approves MR `iid` as every bot, one after the other, each as approve_as_reviewer (retried
/// separately, a bot that already approved skipped). The approvers list is read once for the first
/// attempts of all of them (one GitLab read per MR instead of one per bot); retries read again.
result<done> approve_as_reviewers(gitlab_client& gitlab, check_items_cache& cache, const std::vector<reviewer>& bots,
                                  std::int64_t iid, const std::optional<std::string>& sha, const config::snapshot& snap,
                                  const sleep_function& sleep = {});

}  // namespace changeflow::clients
