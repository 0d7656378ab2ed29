#include "workflow/status.hpp"

namespace changeflow::workflow {

phase phase_of(step s) {
  switch (s) {
    case step::APPROVAL_SENDING: return phase::APPROVAL_SENDING;
    case step::APPROVAL_SENT: return phase::APPROVAL_SENT;
    case step::APPROVAL_REJECTED:
    case step::APPROVAL_WITHDRAWN: return phase::REJECTED;
    case step::APPROVAL_TIMEOUT:
    case step::CLOSE_SUCCEEDED: return phase::CLOSED;
    case step::CANCELLED: return phase::CANCELLED;
    case step::APPROVAL_APPROVED:
    case step::CREATE_STARTED:
    case step::CREATE_MR_OPENED:
    case step::CREATE_PIPELINE_PENDING: return phase::MR_CREATING;
    case step::CREATE_SUCCEEDED:
    case step::BATCH_WAITING: return phase::MR_CREATED;
    case step::CREATE_PIPELINE_FAILED:
    case step::CREATE_ERROR:
    case step::CREATE_OVERLOADED:
    case step::CREATE_GITLAB_REFUSED:
    case step::CONTENT_CONFLICT:
    case step::APPROVAL_SUBMIT_FAILED: return phase::CREATE_FAILED;
    case step::HANDLE_STARTED:
    case step::HANDLE_APPROVED:
    case step::HANDLE_MERGING:
    case step::HANDLE_REBASING:
    case step::HANDLE_PIPELINE_PENDING:
    case step::REBASE_PENDING:
    case step::BATCH_CLAIMED: return phase::MERGING;
    case step::HANDLE_REBASE_CONFLICT:
    case step::HANDLE_APPROVAL_FAILED:
    case step::HANDLE_MERGE_FAILED:
    case step::HANDLE_MR_CLOSED:
    case step::HANDLE_PIPELINE_FAILED:
    case step::HANDLE_ERROR:
    case step::HANDLE_OVERLOADED:
    case step::FORCED_FAILED:
    case step::DEPLOY_FAILED:
    case step::BATCH_FAILED: return phase::HANDLE_FAILED;
    case step::HANDLE_MERGED:
    case step::HANDLE_ALREADY_MERGED:
    case step::DEPLOY_TIMEOUT:
    case step::BATCH_MERGED: return phase::MERGED;
    case step::CALLED_BACK: return phase::VALIDATED;
  }
  return phase::HANDLE_FAILED;
}

std::string_view to_string(phase p) {
  switch (p) {
    case phase::APPROVAL_SENDING: return "APPROVAL_SENDING";
    case phase::APPROVAL_SENT: return "APPROVAL_SENT";
    case phase::MR_CREATING: return "MR_CREATING";
    case phase::MR_CREATED: return "MR_CREATED";
    case phase::MERGING: return "MERGING";
    case phase::MERGED: return "MERGED";
    case phase::VALIDATED: return "VALIDATED";
    case phase::CREATE_FAILED: return "CREATE_FAILED";
    case phase::HANDLE_FAILED: return "HANDLE_FAILED";
    case phase::REJECTED: return "REJECTED";
    case phase::CLOSED: return "CLOSED";
    case phase::CANCELLED: return "CANCELLED";
  }
  return "?";
}

std::string_view to_string(step s) {
  switch (s) {
    // A list of names: kept as written.
    // clang-format off
#define CF_STEP(name) \
  case step::name: return #name;
    CF_STEP(CREATE_STARTED) CF_STEP(CREATE_SUCCEEDED) CF_STEP(CREATE_MR_OPENED)
    CF_STEP(CREATE_PIPELINE_FAILED) CF_STEP(CREATE_ERROR) CF_STEP(CREATE_OVERLOADED)
    CF_STEP(CREATE_GITLAB_REFUSED) CF_STEP(CONTENT_CONFLICT) CF_STEP(APPROVAL_SENDING) CF_STEP(APPROVAL_SENT)
    CF_STEP(APPROVAL_REJECTED) CF_STEP(APPROVAL_WITHDRAWN) CF_STEP(APPROVAL_SUBMIT_FAILED)
    CF_STEP(APPROVAL_TIMEOUT) CF_STEP(APPROVAL_APPROVED) CF_STEP(HANDLE_STARTED)
    CF_STEP(HANDLE_APPROVED) CF_STEP(HANDLE_MERGING) CF_STEP(HANDLE_REBASING)
    CF_STEP(HANDLE_REBASE_CONFLICT) CF_STEP(HANDLE_APPROVAL_FAILED) CF_STEP(HANDLE_MERGE_FAILED)
    CF_STEP(HANDLE_MERGED) CF_STEP(HANDLE_ALREADY_MERGED) CF_STEP(HANDLE_MR_CLOSED)
    CF_STEP(HANDLE_PIPELINE_FAILED) CF_STEP(HANDLE_ERROR) CF_STEP(HANDLE_OVERLOADED)
    CF_STEP(CLOSE_SUCCEEDED) CF_STEP(FORCED_FAILED) CF_STEP(CANCELLED) CF_STEP(CALLED_BACK)
    CF_STEP(DEPLOY_TIMEOUT) CF_STEP(DEPLOY_FAILED) CF_STEP(HANDLE_PIPELINE_PENDING) CF_STEP(CREATE_PIPELINE_PENDING)
    CF_STEP(REBASE_PENDING) CF_STEP(BATCH_WAITING) CF_STEP(BATCH_CLAIMED) CF_STEP(BATCH_FAILED)
    CF_STEP(BATCH_MERGED)
#undef CF_STEP
    // clang-format on
  }
  return "?";
}

std::optional<phase> parse_phase(std::string_view name) {
  for (auto p : all_phases) {
    if (to_string(p) == name) return p;
  }
  return std::nullopt;
}

std::optional<step> parse_step(std::string_view name) {
  for (auto s : all_steps) {
    if (to_string(s) == name) return s;
  }
  return std::nullopt;
}

std::optional<step> step_from_code(int code) {
  for (auto s : all_steps) {
    if (code_of(s) == code) return s;
  }
  return std::nullopt;
}

bool is_reappliable(phase p) {
  switch (p) {
    case phase::VALIDATED:
    case phase::REJECTED:
    case phase::CLOSED:
    case phase::CANCELLED: return true;
    default: return false;
  }
}

bool is_awaiting_approval(phase p) {
  return p == phase::APPROVAL_SENDING || p == phase::APPROVAL_SENT;
}

bool is_terminal(phase p) {
  switch (p) {
    case phase::VALIDATED:
    case phase::CREATE_FAILED:
    case phase::HANDLE_FAILED:
    case phase::REJECTED:
    case phase::CLOSED:
    case phase::CANCELLED: return true;
    default: return false;
  }
}

bool is_deterministic_failure(step s) {
  switch (s) {
    case step::CREATE_PIPELINE_FAILED:
    case step::CREATE_GITLAB_REFUSED:
    case step::CONTENT_CONFLICT:
    case step::APPROVAL_SUBMIT_FAILED:
    case step::HANDLE_REBASE_CONFLICT:
    case step::HANDLE_APPROVAL_FAILED:
    case step::HANDLE_MERGE_FAILED:
    case step::HANDLE_MR_CLOSED:
    case step::HANDLE_PIPELINE_FAILED:
    case step::FORCED_FAILED:
    case step::DEPLOY_FAILED:
    case step::BATCH_FAILED: return true;
    default: return false;
  }
}

std::string_view to_string(hint h) {
  switch (h) {
    case hint::KEEP_WAITING: return "KEEP_WAITING";
    case hint::CONTACT_MAINTAINERS: return "CONTACT_MAINTAINERS";
    case hint::DONE: return "DONE";
    case hint::REAPPLY_ALLOWED: return "REAPPLY_ALLOWED";
    case hint::REBASE_AND_RESUBMIT: return "REBASE_AND_RESUBMIT";
  }
  return "KEEP_WAITING";
}

std::string_view describe(hint h) {
  switch (h) {
    case hint::KEEP_WAITING: return "the change is moving or retrying on its own: keep waiting";
    case hint::CONTACT_MAINTAINERS: return "waiting will not help: contact the maintainers";
    case hint::DONE: return "the change is in effect";
    case hint::REAPPLY_ALLOWED: return "the change has ended: a new change to this target may be submitted";
    case hint::REBASE_AND_RESUBMIT:
      return "the file changed since your change was based on it: rebase your change and submit again";
  }
  return "keep waiting";
}

hint hint_for(phase p, step s) {
  if (p == phase::VALIDATED) return hint::DONE;
  if (is_reappliable(p)) return hint::REAPPLY_ALLOWED;
  // Nothing a maintainer does fixes a file that moved: the change's author rebases on the newer
  // version (cancelling this one frees the target) and submits again.
  if (s == step::CONTENT_CONFLICT) return hint::REBASE_AND_RESUBMIT;
  if (is_deterministic_failure(s)) return hint::CONTACT_MAINTAINERS;
  // Merged but never confirmed: waiting longer will not deploy it; someone has to look at the
  // deploy pipeline (an operator confirms or closes it).
  if (s == step::DEPLOY_TIMEOUT) return hint::CONTACT_MAINTAINERS;
  // In progress, timed out (outcome unknown) or a transient failure awaiting a retry.
  return hint::KEEP_WAITING;
}

std::string_view to_string(flow f) {
  return f == flow::approve_then_create ? "approve_then_create" : "create_then_approve";
}

std::optional<flow> parse_flow(std::string_view name) {
  if (name == "approve_then_create") return flow::approve_then_create;
  if (name == "create_then_approve") return flow::create_then_approve;
  return std::nullopt;
}

}  // namespace changeflow::workflow
