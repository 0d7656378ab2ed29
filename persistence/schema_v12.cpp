// Migration 12: which MR a merge commit came from, per project.
//
// GitLab's Deployment Hook names the deployed commit (its sha), never the merge request. The Merge
// Request Hook of a merge carries both (`object_attributes.iid` and `merge_commit_sha`), so the
// webhook intake records the pair here when a merge event arrives, and a later Deployment Hook finds
// its MR — and through operation.mr_iid its operations — exactly as the deploy callback does.
// Keyed by (project, sha): a redelivered merge event writes nothing new.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v12() {
  return {R"sql(
CREATE TABLE IF NOT EXISTS gitlab_merge_commit (
  project     VARCHAR(255) NOT NULL,
  sha         VARCHAR(64)  NOT NULL,
  mr_iid      BIGINT       NOT NULL,
  recorded_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (project, sha)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql"};
}

}  // namespace changeflow::persistence
