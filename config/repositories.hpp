#pragma once
// The GitLab repositories changeflow serves, typed. The `repositories` section (hot) maps each
// project path to the target branches changes may go to and the tokens its calls use:
//
//   "repositories": {
//     "config/changes": {"branches": ["main"]},
//     "team/payments":  {"branches": ["main", "release"], "author_token": "...",
//                        "approver_tokens": ["..."], "approver_user_ids": ["201"],
//                        "webhook_secret": "..."}
//   }
//
// Every field but the project path falls back to the global key it mirrors: `branches` to
// [gitlab.target_branch], `author_token` to gitlab.author_token, `approver_tokens` and
// `approver_user_ids` (together) to gitlab.approver_tokens and gitlab.approver_user_ids;
// `webhook_secret` has no fallback ("" = none). Without the section, gitlab.project with
// gitlab.target_branch is the one repository, so a configuration written for one repository keeps
// working. A malformed section is refused at load, so a reload keeps the last good snapshot.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace changeflow::config {

class snapshot;

struct approver_bot {
  std::string token;
  std::int64_t user_id = 0;
};

struct repository {
  std::string project;                // GitLab project path, e.g. "group/project" (URL-encoded when used)
  std::vector<std::string> branches;  // target branches changes may go to, in configured order
  std::string author_token;           // commits, opens, reads, rebases, merges and closes MRs
  std::vector<approver_bot> approvers;
  std::string webhook_secret;  // X-Gitlab-Token of this project's GitLab webhooks; "" = not set

  bool has_branch(std::string_view branch) const;
};

struct repository_set {
  std::vector<repository> all;  // ordered by project path
  bool from_section = false;    // false: built from the global gitlab.* keys

  const repository* find(std::string_view project) const;
};

/// The typed repositories of a snapshot, fallbacks applied; `errors` names the offending field of
/// every problem (an empty set without errors happens only when gitlab.project is cleared).
struct repositories_parse {
  repository_set set;
  std::vector<std::string> errors;
};
repositories_parse parse_repositories(const snapshot& snap);

/// `project` with the global settings: [gitlab.target_branch] and the gitlab.* tokens. It is the
/// one repository without a section, and what a project no longer configured falls back to.
repository global_repository(const snapshot& snap, const std::string& project);

/// Where a change goes, as the submit body named it (either may be absent).
struct target_request {
  std::optional<std::string> repository;
  std::optional<std::string> target_branch;
};
struct resolved_target {
  std::string repository;
  std::string target_branch;
};
struct target_refusal {
  std::string message;  // actionable: names what is configured
};
/// Validates a change's repository and target branch against the configured set. Both named: both
/// must be configured. Omitted: allowed only when exactly one repository with exactly one branch is
/// configured (old clients), otherwise refused with the choices listed. A branch alone is resolved
/// when exactly one repository is configured.
std::variant<resolved_target, target_refusal> resolve_target(const repository_set& repos, const target_request& req);

}  // namespace changeflow::config
