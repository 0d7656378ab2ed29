#pragma once
// The change preview: what a submission would do to each file, against the target branch as it is
// now, writing nothing anywhere. GitLab reads run on the external pool with their timeouts. Seed
// rule for read-only previews: a failure of any read answers an empty preview with the reason,
// never an error, so a preview can never keep a user from submitting.

#include "clients/gitlab_client.hpp"
#include "runtime/services.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::service {

struct preview_input {
  std::string path;
  std::string content;
  std::string action;                         // create | update | delete | upsert
  std::optional<std::string> last_commit_id;  // the user's base
};

struct file_preview {
  std::string path;
  std::string action;          // what the commit would carry: create | update | delete ("upsert" resolved)
  bool exists = false;         // on the target branch now
  std::string last_commit_id;  // the target's last commit of the file ("" when it does not exist): the base to send
  std::string diff;            // unified diff target -> change ("" when the change leaves it as is)
  std::string problem;         // why the commit would be refused ("" when it would go in)
};

struct preview_result {
  bool available = true;  // false: a read failed; `reason` says which, `files` is empty
  std::string reason;
  std::vector<file_preview> files;
};

/// One file against its current version (nullopt: the target has no such file). Pure.
file_preview preview_file(const preview_input& in, const std::optional<clients::repository_file>& current);

/// Reads every file on the target branch (stopping at the first failed read) and answers once.
/// Reads each file on `target_branch` of `repository` (a configured repository) and previews it.
void preview_change(runtime::services& svc, const std::string& repository, const std::string& target_branch,
                    std::vector<preview_input> files, std::function<void(preview_result)> done);

}  // namespace changeflow::service
