#pragma once
// GitLab REST v4 subset the bots need (see /work/shared/reference/gitlab-api.md). Synchronous; one
// instance per worker thread. The token is chosen per call (author bot vs approver bots) and never
// logged. Non-success statuses come back as `call_error{http_status}` with GitLab's message parsed;
// the few statuses that are part of the normal flow (404 branch, 409 duplicate MR) are answered here.

#include "clients/guarded_call.hpp"
#include "clients/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::clients {

struct gitlab_pipeline {
  std::int64_t id = 0;
  std::string sha;
  std::string status;  // created|pending|running|success|failed|canceled|skipped|manual|...
};

struct merge_request {
  std::int64_t id = 0;
  std::int64_t iid = 0;
  std::string state;  // opened|closed|locked|merged
  std::string title;
  std::string description;
  std::string source_branch;
  std::string target_branch;
  std::string sha;
  std::string merge_status;           // deprecated field, kept for logs
  std::string detailed_merge_status;  // checking|mergeable|need_rebase|conflict|ci_must_pass|...
  bool has_conflicts = false;
  std::string merge_error;  // empty when null
  bool rebase_in_progress = false;
  std::optional<std::string> merge_commit_sha;
  std::optional<gitlab_pipeline> head_pipeline;
  std::string web_url;
  std::string base_sha;  // diff_refs.base_sha: the target commit the source forked from; "" until computed
};

struct branch_info {
  std::string name;
  std::string head_sha;
  std::string head_message;
};

struct commit_action {
  std::string action = "create";  // create|update|delete|move|chmod (changeflow's upsert is resolved first)
  std::string file_path;
  std::string content;
  std::string encoding = "text";
  std::string previous_path;  // for move
  // Optimistic lock of update/delete: GitLab refuses the whole commit when the file's last commit
  // is another one ("You are attempting to update a file that has changed since you started
  // editing it."). "" sends none.
  std::string last_commit_id;
};

/// A file as the repository files API returns it.
struct repository_file {
  std::string path;
  std::string content;         // decoded
  std::string last_commit_id;  // the last commit that changed the file
  std::string commit_id;       // the ref's head commit
};

struct commit_info {
  std::string id;
  std::string message;
  std::string parent;  // parent_ids[0]: the commit the actions were applied to ("" when not given)
};

struct branch_commit {
  std::string sha;       // head of the branch carrying the change
  bool created = false;  // false: the branch already carried it (a re-run)
  // With `created`: the commit this call's commit was applied to. GitLab refuses a `create` action
  // for a path that exists there, so every path the commit created was absent in it.
  std::string parent;
};

struct mr_opened {
  merge_request mr;
  bool already_existed = false;  // a 409 resolved to the open MR for this source branch
};

struct approvals_info {
  bool approved = false;
  std::vector<std::int64_t> approved_by;  // user ids
  bool has(std::int64_t user_id) const;
};

struct check_item {
  std::string id;
  std::string title;
};

/// How a refused merge should be handled by the caller.
enum class merge_refusal {
  not_mergeable_yet,  // 405: checking, pipeline running, not approved, not open -> poll then retry
  needs_rebase,       // 422 (406 on older GitLab): conflict or behind target -> rebase
  sha_mismatch,       // 409: the head moved -> re-read the MR
  not_allowed,        // 401: the bot may not merge into the target
  other,
};
merge_refusal classify_merge_error(const call_error& e);

/// An approve or a merge answered 409: the `sha` it carried is no longer the MR's head. The same
/// call with the same sha is refused again; the MR has to be read for its head.
bool head_moved(const call_error& e);

class gitlab_client {
 public:
  gitlab_client(http_client& http, circuit_breaker& breaker, const call_settings& settings, url_parts api_base,
                std::string project);

  /// nullopt when the branch does not exist (404).
  result<std::optional<branch_info>> get_branch(const std::string& token, const std::string& branch);
  /// GET repository/files/:file_path?ref= (ref: a branch or a commit). nullopt when the file does
  /// not exist at that ref (404 "File Not Found"); any other 404 (project, ref) is an error.
  result<std::optional<repository_file>> get_file(const std::string& token, const std::string& path,
                                                  const std::string& ref);
  result<commit_info> create_commit(const std::string& token, const std::string& branch,
                                    const std::optional<std::string>& start_branch, const std::string& message,
                                    const std::vector<commit_action>& actions);
  /// Idempotent: creates the branch from `target_branch` with one commit, or reuses the branch when
  /// its head commit message already contains `change_marker` (e.g. the operation id). The commit is
  /// tried first; the branch is read only when GitLab answers that it exists.
  result<branch_commit> ensure_branch_with_commit(const std::string& token, const std::string& branch,
                                                  const std::string& target_branch, const std::string& message,
                                                  const std::vector<commit_action>& actions,
                                                  const std::string& change_marker);

  /// 201 -> new MR; 409 "Another open merge request already exists" -> that open MR.
  result<mr_opened> create_mr(const std::string& token, const std::string& source_branch,
                              const std::string& target_branch, const std::string& title,
                              const std::string& description);
  /// The MR of `source_branch`: on a re-run (`rerun`: the branch already carried our commit, so an
  /// earlier attempt may have opened the MR and lost the answer, or died) the open MR is read
  /// first, so a retry never asks GitLab for a second one; otherwise create_mr, whose 409 lookup
  /// covers a concurrent creator. A first attempt costs no extra read.
  result<mr_opened> ensure_mr(const std::string& token, const std::string& source_branch,
                              const std::string& target_branch, const std::string& title,
                              const std::string& description, bool rerun);
  result<merge_request> get_mr(const std::string& token, std::int64_t iid, bool include_rebase_in_progress = true);
  result<std::vector<merge_request>> list_open_mrs(const std::string& token, const std::string& source_branch,
                                                   const std::string& target_branch = {});
  result<std::vector<gitlab_pipeline>> list_mr_pipelines(const std::string& token, std::int64_t iid);
  result<gitlab_pipeline> get_pipeline(const std::string& token, std::int64_t pipeline_id);

  result<approvals_info> get_approvals(const std::string& token, std::int64_t iid);
  /// Plain approve, or with `check_items` acknowledged when given.
  result<done> approve(const std::string& token, std::int64_t iid, const std::optional<std::string>& sha,
                       const std::optional<std::vector<check_item>>& check_items = std::nullopt);
  /// The project's required check items (GET /projects/:id/approval_check_items).
  result<std::vector<check_item>> get_check_items(const std::string& token);

  /// Always with sha. 200 is returned as the MR; check `state == "merged"` (auto-merge may be set).
  result<merge_request> merge(const std::string& token, std::int64_t iid, const std::string& sha);
  /// 202 accepted; poll get_mr(include_rebase_in_progress) for the result.
  result<done> rebase(const std::string& token, std::int64_t iid);
  result<merge_request> close_mr(const std::string& token, std::int64_t iid);

  const std::string& project() const { return project_; }

 private:
  result<http_response> send(const std::string& token, std::string method, std::string path_and_query,
                             std::string body = {});
  std::string project_path() const;

  http_client& http_;
  circuit_breaker& breaker_;
  const call_settings& settings_;
  url_parts api_;
  std::string project_;
};

// JSON shapes, exposed for the tests and the simulator's own tests.
merge_request parse_merge_request(const std::string& body);
std::vector<check_item> parse_check_items(const std::string& body);  // {"check_items":[{id,title}]}

}  // namespace changeflow::clients
