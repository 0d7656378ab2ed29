#include "workflow/webhook_rule.hpp"

namespace changeflow::workflow {

bool is_final_pipeline_status(std::string_view status) {
  return status == "success" || status == "failed" || status == "canceled" || status == "skipped";
}

bool worth_delivering(const messages::gitlab_event& e) {
  if (e.what == messages::gitlab_event::pipeline) return is_final_pipeline_status(e.status);
  return e.action == "merge" || e.action == "close";
}

namespace {
bool waits_for_pipeline(step s) {
  switch (s) {
    case step::CREATE_MR_OPENED:
    case step::CREATE_PIPELINE_PENDING:
    case step::HANDLE_MERGING:
    case step::HANDLE_PIPELINE_PENDING: return true;
    default: return false;
  }
}
}  // namespace

bool ends_wait(step current, std::string_view head_sha, const messages::gitlab_event& e) {
  if (!worth_delivering(e)) return false;
  if (e.what == messages::gitlab_event::merge_request) {
    return waits_for_pipeline(current) || current == step::REBASE_PENDING || current == step::HANDLE_REBASING;
  }
  // A pipeline of an older head (before a rebase) says nothing about the MR as it is now.
  return waits_for_pipeline(current) && (head_sha.empty() || head_sha == e.sha);
}

bool outdates(const messages::mr_read& read, const messages::gitlab_event& e) {
  if (!read.known()) return false;
  if (e.what == messages::gitlab_event::merge_request) return true;
  return e.sha != read.sha || e.status != "success";
}

}  // namespace changeflow::workflow
