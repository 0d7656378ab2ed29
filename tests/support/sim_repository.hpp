#pragma once
// The files of changeflow-sim's repositories, read and written the way GitLab's own API does it,
// and changes that carry files: for tests that judge what a change did to its target branch (and
// that move it from outside).

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace changeflow::testing {

class flow_env;

/// A project of the sim and one of its branches; the default is the one repository of a flow_env
/// configured without a `repositories` section (gitlab.project's default with gitlab.target_branch's).
struct sim_place {
  std::string project = "config/changes";
  std::string branch = "main";
};

struct repo_file {
  std::string content;
  std::string last_commit_id;
};

/// The file on `ref` (a branch or a commit id) of `project` as GitLab's repository files API
/// answers it; nullopt on a 404.
std::optional<repo_file> read_repo_file(flow_env& env, const std::string& path, const std::string& ref = "main",
                                        const std::string& project = sim_place{}.project);
/// The file on `at`'s branch.
std::optional<repo_file> read_repo_file(flow_env& env, const std::string& path, const sim_place& at);

/// Someone else's commit straight onto `at`'s branch (not through changeflow): one `action` on `path`.
void commit_outside(flow_env& env, const std::string& action, const std::string& path, const std::string& content,
                    const sim_place& at = {});

/// `path` created on `at`'s branch with `content`, as the repository files API then reports it.
repo_file seed_repo_file(flow_env& env, const std::string& path, const std::string& content, const sim_place& at = {});

/// One entry of a submission's `files`.
nlohmann::json file_change(const std::string& path, const std::string& content, const std::string& action = {},
                           const std::string& last_commit_id = {});

/// POST /api/v1/changes for subject alice with `files`, naming `at` as its repository and target
/// branch when given (else the one configured); the new change's id ("" when refused).
std::string submit_files(flow_env& env, const std::string& title, const std::string& target,
                         const nlohmann::json& files, const std::optional<sim_place>& at = std::nullopt);

/// Waits until the change has ended or failed (no actor needed any more), and returns it.
nlohmann::json wait_settled(flow_env& env, const std::string& id);

/// The actions of every commit request the sim received for `branch` of `project`, in order
/// ("<action> <path>[ @<last_commit_id>]").
std::vector<std::string> commit_actions(const nlohmann::json& stats, const std::string& branch,
                                        const std::string& project = sim_place{}.project);

}  // namespace changeflow::testing
