#include "workflow/batch_decide.hpp"

#include <algorithm>
#include <set>

namespace changeflow::workflow::batch {

std::string to_string(const partition& p) {
  return p.repository + "@" + p.target_branch;
}

std::vector<partition> partitions_to_claim(const std::vector<partition>& waiting,
                                           const std::vector<std::pair<partition, partition_activity>>& here) {
  std::set<partition> busy;
  for (const auto& [p, activity] : here) {
    if (activity != partition_activity::idle) busy.insert(p);
  }
  std::set<partition> chosen;
  for (const auto& p : waiting) {
    if (!busy.count(p)) chosen.insert(p);
  }
  return {chosen.begin(), chosen.end()};
}

std::string_view describe(failure_cause c) {
  switch (c) {
    case failure_cause::pipeline_failed: return "pipeline failed";
    case failure_cause::rebase_conflict: return "rebase conflict with the target branch";
    case failure_cause::commit_refused: return "GitLab refused the batch commit";
    case failure_cause::content_conflict:
      return "content conflict: the file changed since your change was based on it: rebase your change and submit "
             "again";
    case failure_cause::approval_refused: return "approval refused";
    case failure_cause::merge_refused: return "merge refused";
    case failure_cause::mr_closed: return "MR closed";
    case failure_cause::gitlab_failing: return "GitLab kept failing";
    case failure_cause::pipeline_timeout: return "pipeline did not finish within poll.timeout_ms";
    case failure_cause::swept: return "running timeout (sweep)";
    case failure_cause::operator_settled: return "settled by an operator";
    case failure_cause::no_members: return "no member could be loaded";
  }
  return "batch failed";
}

failure_plan plan_failure(failure_cause cause, std::size_t members, int depth, int max_splits) {
  switch (cause) {
    case failure_cause::pipeline_failed:
      if (members <= 1) return failure_plan::fail_alone;
      if (depth < max_splits) return failure_plan::bisect;
      return failure_plan::fail_all;
    case failure_cause::rebase_conflict:
    case failure_cause::commit_refused:
      if (members > 1 && depth < max_splits) return failure_plan::bisect;
      return failure_plan::requeue_bounded;
    // A member whose file moved fails again in every batch: alone, it fails at once; at the split
    // bound, every member of the (small) rest fails rather than wearing out attempts.
    case failure_cause::content_conflict:
      if (members <= 1) return failure_plan::fail_alone;
      if (depth < max_splits) return failure_plan::bisect;
      return failure_plan::fail_all;
    default: return failure_plan::requeue_bounded;
  }
}

verdict classify(const mr_view& mr) {
  if (mr.state == "merged") return verdict::merged;
  if (mr.state == "closed" || mr.state.empty()) return verdict::closed;
  if (mr.rebase_in_progress) return verdict::running;
  // GitLab keeps the conflict after a failed rebase and says so in merge_error; rebasing again
  // cannot help, so this ends the batch instead of polling until poll.timeout_ms.
  if ((mr.has_conflicts || mr.detailed_merge_status == "conflict") && !mr.merge_error.empty()) return verdict::conflict;
  if (mr.detailed_merge_status == "need_rebase" || mr.detailed_merge_status == "conflict" || mr.has_conflicts)
    return verdict::needs_rebase;
  if (mr.pipeline_status.empty() || !pipeline_ran_on_head(mr.sha, mr.pipeline_sha)) return verdict::running;
  if (mr.pipeline_status == "failed" || mr.pipeline_status == "canceled") return verdict::pipeline_failed;
  if (mr.pipeline_status == "success") return verdict::ready;
  return verdict::running;
}

std::int64_t backoff_ms(const settings& s, int failures) {
  return std::min<std::int64_t>(s.backoff_cap_ms, s.backoff_base_ms << std::clamp(failures, 0, 6));
}

namespace {

decision act(drive d, action::kind what, std::string text = {}) {
  decision out{std::move(d), {}};
  out.act.what = what;
  out.act.text = std::move(text);
  return out;
}

decision poll_later(drive d, std::int64_t delay_ms) {
  auto out = act(std::move(d), action::kind::poll_later);
  out.act.delay_ms = delay_ms;
  return out;
}

std::string merged_cause(const drive& d, bool after_failure) {
  return "batch MR !" + std::to_string(d.mr_iid) + " merged" + (after_failure ? " (merged wins over the failure)" : "");
}

/// A call failed: a refusal ends in the failure path with `refused_cause`; a retryable failure is
/// tried again after a backoff, until too many in a row end in the failure path too.
decision retry_or_fail(drive d, const mr_view& mr, failure_cause refused_cause, const settings& s,
                       const std::string& what = {}) {
  if (mr.outcome == mr_view::call::refused) return start_failure(std::move(d), refused_cause, mr.error);
  if (++d.call_failures > s.max_call_failures) {
    return start_failure(std::move(d), failure_cause::gitlab_failing, what + mr.error);
  }
  const auto delay = backoff_ms(s, d.call_failures);
  return poll_later(std::move(d), delay);
}

/// The pipeline is still running: poll again on the tiered schedule, or fail on its timeout.
decision next_poll(drive d, const settings& s, std::int64_t now_ms) {
  auto delay = s.polls.next_delay(d.polls++, now_ms - d.wait_started_ms);
  if (!delay) return start_failure(std::move(d), failure_cause::pipeline_timeout, {});
  return poll_later(std::move(d), *delay);
}

}  // namespace

decision begin(drive d, std::int64_t now_ms) {
  d.wait_started_ms = now_ms;
  if (d.members.empty()) return start_failure(std::move(d), failure_cause::no_members, {});
  if (d.mr_iid) return act(std::move(d), action::kind::read_mr);
  return act(std::move(d), action::kind::open_mr);
}

decision on_mr_opened(drive d, const mr_view& mr, const settings& s, std::int64_t now_ms) {
  if (mr.outcome != mr_view::call::ok) {
    auto cause = mr.content_conflict ? failure_cause::content_conflict : failure_cause::commit_refused;
    return retry_or_fail(std::move(d), mr, cause, s);
  }
  d.call_failures = 0;
  d.mr_iid = mr.iid;
  d.wait_started_ms = now_ms;
  d.polls = 0;
  return act(std::move(d), action::kind::record_mr);
}

decision on_mr_recorded(drive d, bool ok, bool preempted) {
  // A record that failed for another reason is not fatal: the MR is known in memory and the
  // settlement writes its number too.
  if (!ok && preempted) return act(std::move(d), action::kind::end, "preempted");
  return act(std::move(d), action::kind::read_mr);
}

decision on_mr_read(drive d, const mr_view& mr, const settings& s, std::int64_t now_ms) {
  // A 4xx reading (or rebasing) the batch's own MR: nothing a member carries explains it.
  if (mr.outcome != mr_view::call::ok) return retry_or_fail(std::move(d), mr, failure_cause::gitlab_failing, s);
  d.call_failures = 0;
  if (d.settle_requested) return start_failure(std::move(d), failure_cause::operator_settled, {});
  switch (classify(mr)) {
    case verdict::merged: {
      auto cause = merged_cause(d, false);
      return act(std::move(d), action::kind::settle_merged, cause);
    }
    case verdict::closed: return start_failure(std::move(d), failure_cause::mr_closed, "closed outside changeflow");
    case verdict::pipeline_failed:
      return start_failure(std::move(d), failure_cause::pipeline_failed, mr.pipeline_status + " on " + mr.sha);
    case verdict::conflict: return start_failure(std::move(d), failure_cause::rebase_conflict, mr.merge_error);
    case verdict::needs_rebase: return act(std::move(d), action::kind::rebase_mr);
    case verdict::ready: return act(std::move(d), action::kind::approve_and_merge);
    case verdict::running: return next_poll(std::move(d), s, now_ms);
  }
  return next_poll(std::move(d), s, now_ms);
}

decision on_rebase_requested(drive d, const mr_view& mr, const settings& s, std::int64_t now_ms) {
  if (mr.outcome == mr_view::call::ok && mr.content_conflict) {
    return start_failure(std::move(d), failure_cause::content_conflict, mr.error);
  }
  // The rebase runs asynchronously: an accepted request on an open MR means "keep polling".
  if (mr.outcome == mr_view::call::ok && mr.state == "opened") {
    d.call_failures = 0;
    return next_poll(std::move(d), s, now_ms);
  }
  return on_mr_read(std::move(d), mr, s, now_ms);
}

decision on_merge(drive d, merge_answer answer, const mr_view& mr, const settings& s, std::int64_t now_ms) {
  switch (answer) {
    case merge_answer::merged: {
      auto cause = merged_cause(d, false);
      return act(std::move(d), action::kind::settle_merged, cause);
    }
    case merge_answer::closed: return start_failure(std::move(d), failure_cause::mr_closed, "closed before the merge");
    case merge_answer::approval_refused: return start_failure(std::move(d), failure_cause::approval_refused, mr.error);
    case merge_answer::refused: return start_failure(std::move(d), failure_cause::merge_refused, mr.error);
    case merge_answer::content_conflict: return start_failure(std::move(d), failure_cause::content_conflict, mr.error);
    case merge_answer::retryable:
      if (++d.call_failures > s.max_call_failures) {
        return start_failure(std::move(d), failure_cause::gitlab_failing, "merge: " + mr.error);
      }
      return next_poll(std::move(d), s, now_ms);
    case merge_answer::not_yet:
    case merge_answer::needs_rebase: return next_poll(std::move(d), s, now_ms);
  }
  return next_poll(std::move(d), s, now_ms);
}

decision start_failure(drive d, failure_cause cause, const std::string& detail) {
  if (!d.cause) {
    d.cause = cause;
    d.failure = std::string(describe(cause)) + (detail.empty() ? "" : ": " + detail);
    d.call_failures = 0;  // the failure path counts its own retries
  }
  // No MR recorded: look for one on the batch branch first (a crash may have come between the MR's
  // creation and its recording).
  return act(std::move(d), d.mr_iid ? action::kind::close_and_reread : action::kind::find_and_close);
}

decision on_reread(drive d, const mr_view& mr, const settings& s) {
  if (mr.outcome != mr_view::call::ok) {
    if (++d.call_failures <= s.max_call_failures) {
      const auto delay = backoff_ms(s, d.call_failures);
      return poll_later(std::move(d), delay);  // the tick re-runs the close + re-read
    }
    // The MR's final state cannot be read: a human decides. BLOCKED keeps the slot.
    auto why = "blocked: MR state unknown after failure (" + d.failure + "): " + mr.error;
    return act(std::move(d), action::kind::block, why);
  }
  if (mr.iid) d.mr_iid = mr.iid;
  if (mr.state == "merged") {
    auto cause = merged_cause(d, true);  // merged wins: the merge landed before (or despite) the close
    return act(std::move(d), action::kind::settle_merged, cause);
  }
  const auto cause = d.cause.value_or(failure_cause::gitlab_failing);
  auto out = act(std::move(d), action::kind::settle_failed, {});
  const auto& nd = out.next;
  auto& a = out.act;
  a.plan = plan_failure(cause, nd.members.size(), nd.depth, s.max_splits);
  switch (a.plan) {
    case failure_plan::bisect:
      a.groups = halves(nd.members);
      a.text = "bisect: " + nd.failure;
      break;
    case failure_plan::fail_alone: a.text = "failed alone: " + nd.failure; break;
    case failure_plan::fail_all: a.text = "split bound reached: " + nd.failure; break;
    case failure_plan::requeue_bounded:
      a.bounded = split_by_attempts(nd.members, s.max_attempts);
      a.text = nd.failure;
      a.leaving_cause =
          nd.failure + " (no batch attempts left: batch.max_attempts = " + std::to_string(s.max_attempts) + ")";
      break;
  }
  return out;
}

decision on_settled(drive d, bool ok, bool preempted, const std::string& outcome, const settings& s) {
  if (ok) return act(std::move(d), action::kind::end, outcome);
  // Preempted: another settler won (sweep, operator, another instance): nothing else to do.
  // Anything else (database down): the settlement is tried again through the failure path.
  if (!preempted && ++d.call_failures <= s.max_call_failures) return poll_later(std::move(d), s.settle_retry_ms);
  return act(std::move(d), action::kind::end, "preempted");
}

decision on_poll_tick(drive d, const settings& s, std::int64_t now_ms) {
  (void)s;
  (void)now_ms;
  if (d.cause) {
    // Retrying the failure path: close + re-read, then the settlement.
    const auto cause = *d.cause;
    return start_failure(std::move(d), cause, {});
  }
  if (!d.mr_iid) return act(std::move(d), action::kind::open_mr);
  return act(std::move(d), action::kind::read_mr);
}

}  // namespace changeflow::workflow::batch
