#include "workflow/decide.hpp"

#include "workflow/pipeline_rule.hpp"

namespace changeflow::messages {

std::string_view to_string(call_kind k) {
  switch (k) {
    case call_kind::submit_approval: return "submit_approval";
    case call_kind::create_mr: return "create_mr";
    case call_kind::read_pipeline: return "read_pipeline";
    case call_kind::approve_bots: return "approve_bots";
    case call_kind::try_merge: return "try_merge";
    case call_kind::rebase: return "rebase";
    case call_kind::read_rebase: return "read_rebase";
  }
  return "?";
}

mr_read read_of(const call_reply& r) {
  mr_read m;
  m.read_at_ms = r.read_at_ms;
  m.state = r.mr_state;
  m.sha = r.sha;
  m.pipeline_status = r.pipeline_status;
  m.pipeline_sha = r.pipeline_sha;
  m.detailed_merge_status = r.detailed_merge_status;
  m.has_conflicts = r.has_conflicts;
  m.base_sha = r.base_sha;
  m.target_branch = r.target_branch;
  return m;
}

}  // namespace changeflow::messages

namespace changeflow::workflow {

bool needs_actor(step s) {
  auto p = phase_of(s);
  if (is_terminal(p) || p == phase::MERGED) return false;
  // The batch coordinator drives its members through the database.
  return s != step::BATCH_WAITING && s != step::BATCH_CLAIMED;
}

namespace {

using status = call_reply::status;
using merge_result = call_reply::merge_result;

effect call(call_kind k, const operation_state& s) {
  effect e{effect::kind::call};
  e.call.kind = k;
  e.call.mr_iid = s.mr_iid.value_or(0);
  e.call.sha = s.mr_sha;
  // The approvals, and the merge attempt right after them, may act on the read kept for them.
  if (k == call_kind::approve_bots || (k == call_kind::try_merge && s.current == step::HANDLE_APPROVED)) {
    e.call.last_read = s.last_read;
  }
  return e;
}

/// The reply's MR read, kept for the next step when the reply carries one.
std::optional<messages::mr_read> kept(const call_reply& r) {
  if (r.read_at_ms == 0) return std::nullopt;
  return messages::read_of(r);
}

effect timer(std::int64_t ms) {
  effect e{effect::kind::timer};
  e.delay_ms = ms;
  return e;
}

decision go(step to, std::string cause) {
  decision d;
  d.next = transition_out{};
  d.next->to = to;
  d.next->cause = std::move(cause);
  return d;
}

decision go_failed(step to, std::string cause, std::string error) {
  decision d = go(to, std::move(cause));
  d.next->last_error = std::move(error);
  d.next->clear_wake = true;
  return d;
}

decision refuse(std::string note) {
  decision d;
  d.refused = true;
  d.note = std::move(note);
  return d;
}

/// Keep waiting in the current step: the next poll per the tiered schedule, or `on_timeout`.
decision wait_or(const operation_state& s, const settings& cfg, std::int64_t now_ms, step on_timeout,
                 std::string timeout_cause, std::int64_t min_delay_ms = 0) {
  auto delay = cfg.polls.next_delay(s.polls, now_ms - s.step_entered_ms);
  if (!delay) {
    decision d = go(on_timeout, std::move(timeout_cause));
    d.next->wake_in_ms = cfg.polls.pending_recheck_ms();
    d.effects.push_back(timer(cfg.polls.pending_recheck_ms()));
    return d;
  }
  decision d;
  d.count_poll = true;
  d.effects.push_back(timer(std::max(*delay, min_delay_ms)));
  return d;
}

decision on_resume(const operation_state& s, const settings& cfg, std::int64_t now_ms) {
  switch (s.current) {
    case step::APPROVAL_SENDING: {
      decision d;
      d.effects.push_back(call(call_kind::submit_approval, s));
      return d;
    }
    case step::APPROVAL_SENT: {
      std::int64_t deadline = s.step_entered_ms + cfg.approval_wait_ms;
      if (now_ms >= deadline) return go_failed(step::APPROVAL_TIMEOUT, "no approval decision before the deadline", "");
      decision d;
      d.effects.push_back(timer(deadline - now_ms));
      return d;
    }
    case step::APPROVAL_APPROVED: {
      // An approval that carries an MR (legacy order) is handled on that MR; otherwise
      // the MR is created now. The order an operation started with decides, never the live switch.
      if (s.mr_iid) return go(step::HANDLE_STARTED, "approved: handle the existing MR");
      if (cfg.batch_enabled) return go(step::BATCH_WAITING, "approved: admitted to the batch waiting set");
      return go(step::CREATE_STARTED, std::string(create_after_approval_cause));
    }
    case step::CREATE_STARTED: {
      decision d;
      d.effects.push_back(call(call_kind::create_mr, s));
      return d;
    }
    case step::CREATE_MR_OPENED:
    case step::CREATE_PIPELINE_PENDING: {
      decision d;
      d.effects.push_back(call(call_kind::read_pipeline, s));
      return d;
    }
    case step::CREATE_SUCCEEDED:
      if (s.order == flow::create_then_approve && s.approval_id.empty()) {
        return go(step::APPROVAL_SENDING, "MR ready: request approval (legacy order)");
      }
      // The MR is ready: the bots approve it from here. Handling is not written as a step of its
      // own first (HANDLE_STARTED): that write would record a decision nothing else depends on, and
      // cost a commit per change; the approvals' outcome is the next step either way.
      [[fallthrough]];
    case step::HANDLE_STARTED: {
      decision d;
      d.effects.push_back(call(call_kind::approve_bots, s));
      return d;
    }
    case step::HANDLE_APPROVED:
    case step::HANDLE_MERGING:
    case step::HANDLE_PIPELINE_PENDING: {
      decision d;
      d.effects.push_back(call(call_kind::try_merge, s));
      return d;
    }
    case step::HANDLE_REBASING:
    case step::REBASE_PENDING: {
      decision d;
      d.effects.push_back(call(call_kind::read_rebase, s));
      return d;
    }
    default: {
      decision d;
      d.effects.push_back(effect{effect::kind::stop});
      d.note = "no actor work in this step";
      return d;
    }
  }
}

decision on_submit_approval(const operation_state& s, const call_reply& r, const settings& cfg, std::int64_t now_ms) {
  if (s.current != step::APPROVAL_SENDING) return refuse("approval reply outside APPROVAL_SENDING");
  switch (r.outcome) {
    case status::ok: {
      decision d = go(step::APPROVAL_SENT, "approval submitted");
      d.next->approval_id = r.approval_id;
      d.next->wake_in_ms = cfg.approval_wait_ms;
      d.effects.push_back(timer(cfg.approval_wait_ms));
      return d;
    }
    case status::retryable:
      return wait_or(s, cfg, now_ms, step::APPROVAL_SUBMIT_FAILED, "approval system unreachable", r.retry_after_ms);
    case status::refused:
      return go_failed(step::APPROVAL_SUBMIT_FAILED, "approval system refused the submission", r.error);
    case status::overloaded: return go_failed(step::CREATE_OVERLOADED, "worker pool full", r.error);
  }
  return refuse("unknown outcome");
}

decision on_create_mr(const operation_state& s, const call_reply& r, const settings& cfg, std::int64_t now_ms) {
  if (s.current != step::CREATE_STARTED) return refuse("create reply outside CREATE_STARTED");
  switch (r.outcome) {
    case status::ok: {
      decision d = go(step::CREATE_MR_OPENED, "MR opened; waiting for its pipeline");
      d.next->mr_iid = r.mr_iid;
      d.next->mr_url = r.mr_url;
      auto first = cfg.polls.next_delay(0, 0).value_or(cfg.polls.short_interval_ms);
      d.next->wake_in_ms = first;
      d.sha_seen = r.sha;
      d.effects.push_back(timer(first));
      return d;
    }
    case status::retryable:
      return wait_or(s, cfg, now_ms, step::CREATE_ERROR, "GitLab unreachable while creating the MR", r.retry_after_ms);
    case status::refused:
      if (r.content_conflict) {
        return go_failed(step::CONTENT_CONFLICT, std::string(describe(hint::REBASE_AND_RESUBMIT)), r.error);
      }
      return go_failed(step::CREATE_GITLAB_REFUSED, "GitLab refused the branch, commit or MR", r.error);
    case status::overloaded: return go_failed(step::CREATE_OVERLOADED, "worker pool full", r.error);
  }
  return refuse("unknown outcome");
}

decision on_read_pipeline(const operation_state& s, const call_reply& r, const settings& cfg, std::int64_t now_ms) {
  if (s.current != step::CREATE_MR_OPENED && s.current != step::CREATE_PIPELINE_PENDING) {
    return refuse("pipeline reply outside the pipeline wait");
  }
  bool pending = s.current == step::CREATE_PIPELINE_PENDING;
  auto keep_waiting = [&] {
    if (pending) {
      decision d;
      d.effects.push_back(timer(cfg.polls.pending_recheck_ms()));
      return d;
    }
    return wait_or(s, cfg, now_ms, step::CREATE_PIPELINE_PENDING, "check pipeline did not finish in time");
  };
  switch (r.outcome) {
    case status::ok: {
      if (r.mr_state == "closed") return go_failed(step::CREATE_ERROR, "MR closed outside changeflow", "MR closed");
      bool on_head = pipeline_ran_on_head(r.sha, r.pipeline_sha);
      if (r.mr_state == "merged" || (r.pipeline_status == "success" && on_head)) {
        decision d = go(step::CREATE_SUCCEEDED, "check pipeline passed");
        d.next->clear_wake = true;
        // The bots' approvals run from CREATE_SUCCEEDED (on_resume): they read the MR's approvals
        // before approving, and their outcome is the next step, so this step is written with it
        // (a retry with its failed attempt). The legacy order's approval request comes first from
        // here, and is written after this step as before.
        d.next->with_next = !(s.order == flow::create_then_approve && s.approval_id.empty());
        d.sha_seen = r.sha;
        // The approvals act on this read while it is fresh (gitlab.mr_read_reuse_ms).
        if (r.mr_state == "opened") d.keep_read = kept(r);
        return d;
      }
      if (on_head && (r.pipeline_status == "failed" || r.pipeline_status == "canceled")) {
        return go_failed(step::CREATE_PIPELINE_FAILED, "check pipeline " + r.pipeline_status, r.error);
      }
      decision d = keep_waiting();
      d.sha_seen = r.sha;
      return d;
    }
    case status::retryable: return keep_waiting();
    case status::refused: return go_failed(step::CREATE_ERROR, "MR could not be read", r.error);
    case status::overloaded: return go_failed(step::CREATE_OVERLOADED, "worker pool full", r.error);
  }
  return refuse("unknown outcome");
}

decision on_approve_bots(const operation_state& s, const call_reply& r, const settings& cfg, std::int64_t now_ms) {
  if (s.current != step::HANDLE_STARTED && s.current != step::CREATE_SUCCEEDED) {
    return refuse("approval reply outside HANDLE_STARTED and CREATE_SUCCEEDED");
  }
  switch (r.outcome) {
    case status::ok:
      // An MR merged before handling finishes as merged without approving again.
      if (r.already_merged) return go(step::HANDLE_ALREADY_MERGED, "MR already merged; approval skipped");
      if (r.closed) return go_failed(step::HANDLE_MR_CLOSED, "MR closed outside changeflow", "MR closed");
      {
        decision d = go(step::HANDLE_APPROVED, "approved by both bots");
        // The read the approvals went on: the first merge attempt acts on it while it is fresh.
        d.keep_read = kept(r);
        if (!r.sha.empty()) d.sha_seen = r.sha;
        return d;
      }
    case status::retryable:
      return wait_or(s, cfg, now_ms, step::HANDLE_ERROR, "GitLab unreachable while approving", r.retry_after_ms);
    case status::refused: return go_failed(step::HANDLE_APPROVAL_FAILED, "a bot may not approve this MR", r.error);
    case status::overloaded: return go_failed(step::HANDLE_OVERLOADED, "worker pool full", r.error);
  }
  return refuse("unknown outcome");
}

decision on_try_merge(const operation_state& s, const call_reply& r, const settings& cfg, std::int64_t now_ms) {
  if (s.current != step::HANDLE_APPROVED && s.current != step::HANDLE_MERGING &&
      s.current != step::HANDLE_PIPELINE_PENDING) {
    return refuse("merge reply outside merging");
  }
  auto keep_waiting = [&]() -> decision {
    if (s.current == step::HANDLE_APPROVED) {
      auto first = cfg.polls.next_delay(0, 0).value_or(cfg.polls.short_interval_ms);
      decision d = go(step::HANDLE_MERGING, "waiting until GitLab can merge (pipeline on the head SHA)");
      d.next->wake_in_ms = first;
      d.effects.push_back(timer(std::max(first, r.retry_after_ms)));
      return d;
    }
    if (s.current == step::HANDLE_PIPELINE_PENDING) {
      decision d;
      d.effects.push_back(timer(cfg.polls.pending_recheck_ms()));
      return d;
    }
    return wait_or(s, cfg, now_ms, step::HANDLE_PIPELINE_PENDING, "MR did not become mergeable in time",
                   r.retry_after_ms);
  };
  switch (r.outcome) {
    case status::ok: break;
    case status::retryable: return keep_waiting();
    case status::refused: return go_failed(step::HANDLE_MERGE_FAILED, "GitLab refused the merge", r.error);
    case status::overloaded: return go_failed(step::HANDLE_OVERLOADED, "worker pool full", r.error);
  }
  switch (r.merge) {
    case merge_result::merged: {
      decision d = go(step::HANDLE_MERGED, "merged");
      d.next->clear_wake = true;
      return d;
    }
    case merge_result::already_merged: {
      decision d = go(step::HANDLE_ALREADY_MERGED, "MR was already merged");
      d.next->clear_wake = true;
      return d;
    }
    case merge_result::closed: return go_failed(step::HANDLE_MR_CLOSED, "MR closed outside changeflow", "MR closed");
    case merge_result::content_conflict:
      return go_failed(step::CONTENT_CONFLICT, std::string(describe(hint::REBASE_AND_RESUBMIT)), r.error);
    case merge_result::pipeline_failed:
      return go_failed(step::HANDLE_PIPELINE_FAILED, "pipeline on the head SHA failed", r.error);
    case merge_result::not_mergeable_yet: {
      decision d = keep_waiting();
      d.sha_seen = r.sha;
      return d;
    }
    case merge_result::sha_mismatch: {
      if (s.merge_attempts + 1 >= cfg.merge_max_attempts) {
        return go_failed(step::HANDLE_MERGE_FAILED, "merge kept failing on a moving head SHA", r.error);
      }
      decision d = keep_waiting();
      d.sha_seen = r.sha;
      d.count_merge_attempt = true;
      return d;
    }
    case merge_result::needs_rebase: {
      if (s.merge_attempts + 1 >= cfg.merge_max_attempts) {
        return go_failed(step::HANDLE_MERGE_FAILED, "merge still needs a rebase after the attempt limit", r.error);
      }
      decision d = go(step::HANDLE_REBASING, "merge needs a rebase");
      d.count_merge_attempt = true;
      d.effects.push_back(call(call_kind::rebase, s));
      return d;
    }
    case merge_result::none: break;
  }
  return refuse("merge reply without a result");
}

decision on_rebase(const operation_state& s, const call_reply& r, const settings& cfg, std::int64_t now_ms) {
  if (s.current != step::HANDLE_REBASING) return refuse("rebase reply outside HANDLE_REBASING");
  switch (r.outcome) {
    case status::ok: {
      decision d;
      d.effects.push_back(timer(cfg.polls.next_delay(0, 0).value_or(cfg.polls.short_interval_ms)));
      return d;
    }
    case status::retryable:
      return wait_or(s, cfg, now_ms, step::REBASE_PENDING, "rebase could not be requested in time", r.retry_after_ms);
    case status::refused: return go_failed(step::HANDLE_MERGE_FAILED, "GitLab refused the rebase", r.error);
    case status::overloaded: return go_failed(step::HANDLE_OVERLOADED, "worker pool full", r.error);
  }
  return refuse("unknown outcome");
}

decision on_read_rebase(const operation_state& s, const call_reply& r, const settings& cfg, std::int64_t now_ms) {
  if (s.current != step::HANDLE_REBASING && s.current != step::REBASE_PENDING) {
    return refuse("rebase status outside the rebase wait");
  }
  switch (r.outcome) {
    case status::ok: break;
    case status::retryable:
      if (s.current == step::REBASE_PENDING) {
        decision d;
        d.effects.push_back(timer(cfg.polls.pending_recheck_ms()));
        return d;
      }
      return wait_or(s, cfg, now_ms, step::REBASE_PENDING, "rebase did not finish in time");
    case status::refused: return go_failed(step::HANDLE_ERROR, "MR could not be read during rebase", r.error);
    case status::overloaded: return go_failed(step::HANDLE_OVERLOADED, "worker pool full", r.error);
  }
  if (r.mr_state == "merged") return go(step::HANDLE_ALREADY_MERGED, "MR was merged during the rebase");
  if (r.mr_state == "closed") return go_failed(step::HANDLE_MR_CLOSED, "MR closed outside changeflow", "MR closed");
  if (r.rebase_in_progress) {
    if (s.current == step::REBASE_PENDING) {
      decision d;
      d.effects.push_back(timer(cfg.polls.pending_recheck_ms()));
      return d;
    }
    return wait_or(s, cfg, now_ms, step::REBASE_PENDING, "rebase did not finish in time");
  }
  if (!r.merge_error.empty()) {
    return go_failed(step::HANDLE_REBASE_CONFLICT, "rebase failed with a conflict", r.merge_error);
  }
  // Rebased: the new head needs its own pipeline before the next merge attempt.
  auto first = cfg.polls.next_delay(0, 0).value_or(cfg.polls.short_interval_ms);
  decision d = go(step::HANDLE_MERGING, "rebased; waiting for the pipeline on the new head");
  d.next->wake_in_ms = first;
  d.sha_seen = r.sha;
  d.effects.push_back(timer(first));
  return d;
}

}  // namespace

decision decide(const operation_state& s, const event& e, const settings& cfg, std::int64_t now_ms) {
  decision d;
  if (std::holds_alternative<resume>(e)) {
    d = on_resume(s, cfg, now_ms);
  } else {
    const auto& r = std::get<reply>(e).r;
    switch (r.kind) {
      case call_kind::submit_approval: d = on_submit_approval(s, r, cfg, now_ms); break;
      case call_kind::create_mr: d = on_create_mr(s, r, cfg, now_ms); break;
      case call_kind::read_pipeline: d = on_read_pipeline(s, r, cfg, now_ms); break;
      case call_kind::approve_bots: d = on_approve_bots(s, r, cfg, now_ms); break;
      case call_kind::try_merge: d = on_try_merge(s, r, cfg, now_ms); break;
      case call_kind::rebase: d = on_rebase(s, r, cfg, now_ms); break;
      case call_kind::read_rebase: d = on_read_rebase(s, r, cfg, now_ms); break;
    }
  }
  if (const auto* r = std::get_if<reply>(&e); r && r->r.outcome != status::ok && !d.refused) {
    d.failed = failed_call{r->r.error.empty() ? std::string(messages::to_string(r->r.kind)) + " failed" : r->r.error,
                           r->r.http_status};
  }
  // Every decision is checked against the central table: an edge the table does not allow is
  // refused here, never written.
  if (d.next && !is_allowed(s.current, d.next->to, actor_kind::workflow)) {
    return refuse(std::string("transition not in the table: ") + std::string(to_string(s.current)) + " -> " +
                  std::string(to_string(d.next->to)));
  }
  if (d.next && !needs_actor(d.next->to)) {
    d.effects.push_back(effect{effect::kind::stop});
  }
  return d;
}

}  // namespace changeflow::workflow
