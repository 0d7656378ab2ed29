#pragma once
// The head-SHA rule, shared by the request flow and the batch coordinator: only a pipeline that ran
// on the MR's current head decides anything (pass or fail). A pipeline of an older sha (before a
// rebase or a new commit) says nothing about what would be merged. When GitLab leaves out either
// sha, the head pipeline it reports is taken as the head's.

#include <string_view>

namespace changeflow::workflow {

inline bool pipeline_ran_on_head(std::string_view mr_sha, std::string_view pipeline_sha) {
  return mr_sha.empty() || pipeline_sha.empty() || mr_sha == pipeline_sha;
}

}  // namespace changeflow::workflow
