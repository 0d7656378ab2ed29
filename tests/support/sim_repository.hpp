#pragma once
// The files of changeflow-sim's repository, read and written the way GitLab's own API does it, and
// changes that carry files: for tests that judge what a change did to the target branch (and that
// move it from outside).

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace changeflow::testing {

class flow_env;

struct repo_file {
  std::string content;
  std::string last_commit_id;
};

/// The file on `ref` as GitLab's repository files API answers it; nullopt on a 404.
std::optional<repo_file> read_repo_file(flow_env& env, const std::string& path, const std::string& ref = "main");

/// Someone else's commit straight onto main (not through changeflow): one `action` on `path`.
void commit_on_main(flow_env& env, const std::string& action, const std::string& path, const std::string& content);

/// `path` created on main with `content`, as the repository files API then reports it.
repo_file seed_repo_file(flow_env& env, const std::string& path, const std::string& content);

/// One entry of a submission's `files`.
nlohmann::json file_change(const std::string& path, const std::string& content, const std::string& action = {},
                           const std::string& last_commit_id = {});

/// POST /api/v1/changes for subject alice with `files`; the new change's id ("" when refused).
std::string submit_files(flow_env& env, const std::string& title, const std::string& target,
                         const nlohmann::json& files);

/// Waits until the change has ended or failed (no actor needed any more), and returns it.
nlohmann::json wait_settled(flow_env& env, const std::string& id);

/// The actions of every commit request the sim received for `branch`, in order
/// ("<action> <path>[ @<last_commit_id>]").
std::vector<std::string> commit_actions(const nlohmann::json& stats, const std::string& branch);

}  // namespace changeflow::testing
