#include "workflow/transitions.hpp"

#include <algorithm>

namespace changeflow::workflow {
namespace {
using S = step;
constexpr auto OP = actor_kind::operator_only;
constexpr auto RQ = actor_kind::requester;

std::vector<transition_rule> build_table() {
  std::vector<transition_rule> t = {
      // -- approval (both orders)
      {S::APPROVAL_SENDING, S::APPROVAL_SENT},
      {S::APPROVAL_SENDING, S::APPROVAL_APPROVED},  // callback before SENT was written
      {S::APPROVAL_SENDING, S::APPROVAL_REJECTED},
      {S::APPROVAL_SENDING, S::APPROVAL_WITHDRAWN},
      {S::APPROVAL_SENDING, S::APPROVAL_SUBMIT_FAILED},
      {S::APPROVAL_SENDING, S::CREATE_OVERLOADED},
      {S::APPROVAL_SENDING, S::CREATE_ERROR},
      {S::APPROVAL_SENT, S::APPROVAL_APPROVED},
      {S::APPROVAL_SENT, S::APPROVAL_REJECTED},
      {S::APPROVAL_SENT, S::APPROVAL_WITHDRAWN},
      {S::APPROVAL_SENT, S::APPROVAL_TIMEOUT},
      // -- after approval: create the MR (new order), handle the existing MR (legacy), or batch
      {S::APPROVAL_APPROVED, S::CREATE_STARTED},
      {S::APPROVAL_APPROVED, S::HANDLE_STARTED},
      {S::APPROVAL_APPROVED, S::BATCH_WAITING},
      {S::APPROVAL_APPROVED, S::CREATE_OVERLOADED},
      {S::APPROVAL_APPROVED, S::HANDLE_OVERLOADED},
      {S::APPROVAL_APPROVED, S::CREATE_ERROR},
      // -- MR creation
      {S::CREATE_STARTED, S::CREATE_MR_OPENED},
      {S::CREATE_STARTED, S::CREATE_GITLAB_REFUSED},
      {S::CREATE_STARTED, S::CONTENT_CONFLICT},  // GitLab refused the commit: a file moved since its base
      {S::CREATE_STARTED, S::CREATE_ERROR},
      {S::CREATE_STARTED, S::CREATE_OVERLOADED},
      {S::CREATE_MR_OPENED, S::CREATE_SUCCEEDED},
      {S::CREATE_MR_OPENED, S::CREATE_PIPELINE_FAILED},
      {S::CREATE_MR_OPENED, S::CREATE_PIPELINE_PENDING},
      {S::CREATE_MR_OPENED, S::CREATE_ERROR},
      {S::CREATE_MR_OPENED, S::CREATE_OVERLOADED},
      {S::CREATE_PIPELINE_PENDING, S::CREATE_SUCCEEDED},
      {S::CREATE_PIPELINE_PENDING, S::CREATE_PIPELINE_FAILED},
      {S::CREATE_PIPELINE_PENDING, S::CREATE_ERROR},
      {S::CREATE_SUCCEEDED, S::APPROVAL_SENDING},  // legacy order: approval after the MR
      {S::CREATE_SUCCEEDED, S::HANDLE_STARTED},
      // The bots' approvals run from CREATE_SUCCEEDED itself (new order): their outcomes leave it.
      {S::CREATE_SUCCEEDED, S::HANDLE_APPROVED},
      {S::CREATE_SUCCEEDED, S::HANDLE_ALREADY_MERGED},
      {S::CREATE_SUCCEEDED, S::HANDLE_APPROVAL_FAILED},
      {S::CREATE_SUCCEEDED, S::HANDLE_MR_CLOSED},
      {S::CREATE_SUCCEEDED, S::HANDLE_ERROR},
      {S::CREATE_SUCCEEDED, S::HANDLE_OVERLOADED},
      {S::CREATE_SUCCEEDED, S::CREATE_OVERLOADED},
      {S::CREATE_SUCCEEDED, S::CREATE_ERROR},
      // -- handling: approve as both bots, merge, rebase
      {S::HANDLE_STARTED, S::HANDLE_APPROVED},
      {S::HANDLE_STARTED, S::HANDLE_ALREADY_MERGED},
      {S::HANDLE_STARTED, S::HANDLE_APPROVAL_FAILED},
      {S::HANDLE_STARTED, S::HANDLE_MR_CLOSED},
      {S::HANDLE_STARTED, S::HANDLE_ERROR},
      {S::HANDLE_STARTED, S::HANDLE_OVERLOADED},
      {S::HANDLE_APPROVED, S::HANDLE_MERGING},
      {S::HANDLE_APPROVED, S::HANDLE_ALREADY_MERGED},
      {S::HANDLE_APPROVED, S::HANDLE_MR_CLOSED},
      {S::HANDLE_APPROVED, S::HANDLE_ERROR},
      {S::HANDLE_APPROVED, S::HANDLE_OVERLOADED},
      {S::HANDLE_APPROVED, S::HANDLE_MERGED},  // mergeable at the first try
      {S::HANDLE_APPROVED, S::HANDLE_REBASING},
      {S::HANDLE_APPROVED, S::HANDLE_PIPELINE_FAILED},
      {S::HANDLE_APPROVED, S::HANDLE_MERGE_FAILED},
      {S::HANDLE_MERGING, S::HANDLE_MERGED},
      {S::HANDLE_MERGING, S::HANDLE_ALREADY_MERGED},
      {S::HANDLE_MERGING, S::HANDLE_REBASING},
      {S::HANDLE_MERGING, S::HANDLE_MERGE_FAILED},
      {S::HANDLE_MERGING, S::HANDLE_MR_CLOSED},
      {S::HANDLE_MERGING, S::HANDLE_PIPELINE_PENDING},
      {S::HANDLE_MERGING, S::HANDLE_PIPELINE_FAILED},
      {S::HANDLE_MERGING, S::HANDLE_ERROR},
      {S::HANDLE_MERGING, S::HANDLE_OVERLOADED},
      {S::HANDLE_MERGING, S::HANDLE_APPROVAL_FAILED},  // approvals lost by a rebase and refused again
      // The target changed a file of the change since its base: found right before a merge (or a
      // rebase), wherever the merge is attempted from.
      {S::HANDLE_APPROVED, S::CONTENT_CONFLICT},
      {S::HANDLE_MERGING, S::CONTENT_CONFLICT},
      {S::HANDLE_PIPELINE_PENDING, S::CONTENT_CONFLICT},
      {S::HANDLE_REBASING, S::HANDLE_MERGING},
      {S::HANDLE_REBASING, S::HANDLE_REBASE_CONFLICT},
      {S::HANDLE_REBASING, S::REBASE_PENDING},
      {S::HANDLE_REBASING, S::HANDLE_MR_CLOSED},
      {S::HANDLE_REBASING, S::HANDLE_ALREADY_MERGED},
      {S::HANDLE_REBASING, S::HANDLE_ERROR},
      {S::HANDLE_REBASING, S::HANDLE_OVERLOADED},
      {S::HANDLE_REBASING, S::HANDLE_MERGE_FAILED},  // GitLab refused the rebase itself
      // -- outcome unknown after the poll budget: a slow re-check may still settle it
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_MERGING},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_MERGED},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_REBASING},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_MERGE_FAILED},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_OVERLOADED},
      {S::REBASE_PENDING, S::HANDLE_OVERLOADED},
      {S::CREATE_PIPELINE_PENDING, S::CREATE_OVERLOADED},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_PIPELINE_FAILED},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_ALREADY_MERGED},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_MR_CLOSED},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_ERROR},
      {S::REBASE_PENDING, S::HANDLE_MERGING},
      {S::REBASE_PENDING, S::HANDLE_REBASE_CONFLICT},
      {S::REBASE_PENDING, S::HANDLE_ALREADY_MERGED},
      {S::REBASE_PENDING, S::HANDLE_MR_CLOSED},
      {S::REBASE_PENDING, S::HANDLE_ERROR},
      // -- merged: wait for the deploy confirmation
      {S::HANDLE_MERGED, S::CALLED_BACK},
      {S::HANDLE_MERGED, S::DEPLOY_TIMEOUT},
      {S::HANDLE_ALREADY_MERGED, S::CALLED_BACK},
      {S::HANDLE_ALREADY_MERGED, S::DEPLOY_TIMEOUT},
      {S::BATCH_MERGED, S::CALLED_BACK},
      {S::BATCH_MERGED, S::DEPLOY_TIMEOUT},
      {S::DEPLOY_TIMEOUT, S::CALLED_BACK},
      // -- batch path
      {S::BATCH_WAITING, S::BATCH_CLAIMED},
      {S::BATCH_CLAIMED, S::BATCH_MERGED},
      {S::BATCH_CLAIMED, S::BATCH_WAITING},  // failed batch or bisection: back to the waiting set
      {S::BATCH_CLAIMED, S::BATCH_FAILED},
      // -- operators: re-trigger the interrupted step, resolve a pending outcome, close, force-fail
      {S::CREATE_PIPELINE_PENDING, S::CREATE_MR_OPENED, OP},
      {S::CREATE_ERROR, S::CREATE_STARTED, OP},
      {S::CREATE_OVERLOADED, S::CREATE_STARTED, OP},
      {S::CREATE_PIPELINE_FAILED, S::CREATE_STARTED, OP},
      {S::CREATE_GITLAB_REFUSED, S::CREATE_STARTED, OP},
      // No re-trigger out of CONTENT_CONFLICT: a change without its own base would be based on the
      // newer version and committed over it. Its requester cancels it (or an operator closes it)
      // and submits the rebased change.
      {S::APPROVAL_SUBMIT_FAILED, S::APPROVAL_SENDING, OP},
      {S::HANDLE_PIPELINE_PENDING, S::HANDLE_STARTED, OP},
      {S::REBASE_PENDING, S::HANDLE_REBASING, OP},
      {S::REBASE_PENDING, S::HANDLE_STARTED, OP},
      {S::HANDLE_ERROR, S::HANDLE_STARTED, OP},
      {S::HANDLE_OVERLOADED, S::HANDLE_STARTED, OP},
      {S::HANDLE_APPROVAL_FAILED, S::HANDLE_STARTED, OP},
      {S::HANDLE_MERGE_FAILED, S::HANDLE_STARTED, OP},
      {S::HANDLE_PIPELINE_FAILED, S::HANDLE_STARTED, OP},
      {S::HANDLE_REBASE_CONFLICT, S::HANDLE_STARTED, OP},
      {S::BATCH_FAILED, S::BATCH_WAITING, OP},
  };
  // Deploy confirmation failed or never came: an explicit failure the operators resolve by
  // confirming (the change is in effect after all) or closing (it is not, and the target is free).
  for (auto merged : {S::HANDLE_MERGED, S::HANDLE_ALREADY_MERGED, S::BATCH_MERGED, S::DEPLOY_TIMEOUT}) {
    t.push_back({merged, S::DEPLOY_FAILED});
  }
  t.push_back({S::DEPLOY_FAILED, S::CALLED_BACK, OP});
  t.push_back({S::DEPLOY_FAILED, S::CLOSE_SUCCEEDED, OP});
  t.push_back({S::DEPLOY_TIMEOUT, S::CLOSE_SUCCEEDED, OP});
  for (auto s : all_steps) {
    auto p = phase_of(s);
    if (is_reappliable(p)) continue;  // ended: nothing left to resolve
    // Operators may force a failure from any state that has not ended (a forced failure is then
    // closed like any other failure).
    if (s != S::FORCED_FAILED && s != S::DEPLOY_FAILED) t.push_back({s, S::FORCED_FAILED, OP});
    if (p == phase::MERGED || s == S::DEPLOY_FAILED) continue;  // merged: nothing left to withdraw
    // Closing and cancelling withdraw what is open remotely, reading the MR first: an MR found
    // merged is recorded as merged instead (merged wins), by whoever asked.
    // A claimed member rides in the batch MR with others: closing that MR would withdraw them all.
    // It leaves the batch when the batch settles (operators can settle it from the batch view).
    if (s == S::BATCH_CLAIMED) continue;
    t.push_back({s, S::CLOSE_SUCCEEDED, OP});
    t.push_back({s, S::CANCELLED, RQ});
    if (s != S::HANDLE_ALREADY_MERGED) t.push_back({s, S::HANDLE_ALREADY_MERGED, RQ});
  }
  return t;
}
}  // namespace

const std::vector<transition_rule>& transition_table() {
  static const std::vector<transition_rule> table = build_table();
  return table;
}

bool is_initial_step(step s) {
  return s == step::APPROVAL_SENDING || s == step::CREATE_STARTED;
}

bool is_allowed(step from, step to, actor_kind by) {
  for (const auto& r : transition_table()) {
    if (r.from != from || r.to != to) continue;
    if (static_cast<int>(by) >= static_cast<int>(r.by)) return true;
  }
  return false;
}

std::vector<step> allowed_targets(step from, actor_kind by) {
  std::vector<step> out;
  for (const auto& r : transition_table()) {
    if (r.from != from) continue;
    if (static_cast<int>(by) < static_cast<int>(r.by)) continue;
    if (std::find(out.begin(), out.end(), r.to) == out.end()) out.push_back(r.to);
  }
  return out;
}

}  // namespace changeflow::workflow
