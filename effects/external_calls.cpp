#include "effects/external_calls.hpp"

#include "base/log.hpp"
#include "clients/approver.hpp"
#include "effects/file_actions.hpp"

#include <nlohmann/json.hpp>

#include <chrono>

namespace changeflow::effects {

using messages::call_kind;
using messages::call_reply;
using status = call_reply::status;
using merge_result = call_reply::merge_result;

std::string branch_for(const std::string& operation_id) {
  return "changeflow/" + operation_id;
}

std::string operation_marker(const std::string& operation_id) {
  return "changeflow-operation: " + operation_id;
}

namespace {

call_reply failed(call_kind k, const clients::call_error& e) {
  call_reply r;
  r.kind = k;
  r.http_status = e.status;
  r.error = clients::describe(e);
  if (e.retryable) {
    r.outcome = status::retryable;
    if (e.retry_after_seconds) r.retry_after_ms = static_cast<std::int64_t>(*e.retry_after_seconds) * 1000;
  } else {
    r.outcome = status::refused;
  }
  return r;
}

void fill_mr(call_reply& r, const clients::merge_request& mr) {
  r.mr_iid = mr.iid;
  r.mr_url = mr.web_url;
  r.mr_state = mr.state;
  r.sha = mr.sha;
  r.rebase_in_progress = mr.rebase_in_progress;
  r.merge_error = mr.merge_error;
  if (mr.head_pipeline) {
    r.pipeline_status = mr.head_pipeline->status;
    r.pipeline_sha = mr.head_pipeline->sha;
  }
  r.detailed_merge_status = mr.detailed_merge_status;
  r.has_conflicts = mr.has_conflicts;
  r.base_sha = mr.base_sha;
  r.target_branch = mr.target_branch;
}

/// A reply carrying the MR as read at `read_at_ms` (this process's steady clock).
call_reply reply_with(call_kind k, const clients::merge_request& mr, std::int64_t read_at_ms) {
  call_reply r;
  r.kind = k;
  fill_mr(r, mr);
  r.read_at_ms = read_at_ms;
  return r;
}

/// This process's steady clock: what an MR read is stamped with and its age measured on (the read
/// never leaves the process, so neither the wall clock nor the database's matters).
std::int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// GET the MR, the reply's read stamped with the time just before the request went out.
clients::result<clients::merge_request> read_stamped(clients::repository_access& repo, std::int64_t iid,
                                                     bool include_rebase_in_progress, std::int64_t& read_at_ms) {
  read_at_ms = steady_now_ms();
  return repo.gitlab.get_mr(repo.author_token, iid, include_rebase_in_progress);
}

/// The read the step was given, when it may act on it instead of reading the MR again: known and
/// at most gitlab.mr_read_reuse_ms old (0 disables the reuse).
const messages::mr_read* reusable(const messages::mr_read& known, const config::snapshot& snap) {
  const auto limit = snap.gitlab().mr_read_reuse_ms;
  if (limit <= 0 || !known.known()) return nullptr;
  const auto age = steady_now_ms() - known.read_at_ms;
  return age >= 0 && age <= limit ? &known : nullptr;
}

/// The MR as the read said it was (the fields a read carries; the rest stays empty).
clients::merge_request as_merge_request(const messages::mr_read& known, std::int64_t iid) {
  clients::merge_request mr;
  mr.iid = iid;
  mr.state = known.state;
  mr.sha = known.sha;
  mr.detailed_merge_status = known.detailed_merge_status;
  mr.has_conflicts = known.has_conflicts;
  mr.base_sha = known.base_sha;
  mr.target_branch = known.target_branch;
  if (!known.pipeline_status.empty() || !known.pipeline_sha.empty()) {
    mr.head_pipeline = clients::gitlab_pipeline{0, known.pipeline_sha, known.pipeline_status};
  }
  return mr;
}

call_reply submit_approval(clients::external_context& ctx, const config::snapshot& snap, const call_context& op) {
  clients::approval_submission s;
  s.request_id = op.operation_id;
  s.title = op.title;
  s.applicant = op.applicant;
  s.callback_url = snap.approval().callback_url.value_or("");
  auto payload = nlohmann::json::parse(op.payload_json, nullptr, false);
  s.form = payload.is_discarded() ? nlohmann::json::object() : payload;
  if (op.legacy_order && op.mr_iid) s.mr_id = *op.mr_iid;
  auto res = ctx.approval.submit(s);
  if (!res) return failed(call_kind::submit_approval, res.error());
  call_reply r;
  r.kind = call_kind::submit_approval;
  r.approval_id = res->approval_id;
  return r;
}

call_reply create_mr(clients::repository_access& repo, const call_context& op) {
  const auto& token = repo.author_token;
  auto branch = branch_for(op.operation_id);
  const auto target = repo.target_branch(op.target_branch);
  // The change's base, when it names none, is the target branch as it is now: its first GitLab
  // contact, not its submission. Submitting never waits on GitLab (a submit is accepted while GitLab
  // is down and the change shows its state), so there is nothing to read at submit time; and a
  // change approved days later is still committed only over the version it was checked against
  // from here on: the merge checks the target kept it (try_merge). Clients that want the version
  // the user saw send `lastCommitId` (the preview answers it).
  auto actions = resolve_actions(repo.gitlab, token, target, commit_actions_of(op.payload_json));
  if (!actions) return failed(call_kind::create_mr, actions.error());
  auto commit = repo.gitlab.ensure_branch_with_commit(
      token, branch, target, "changeflow " + op.operation_id + ": " + op.title, actions.value(), op.operation_id);
  if (!commit) {
    auto r = failed(call_kind::create_mr, commit.error());
    r.content_conflict = is_content_conflict(commit.error());
    return r;
  }
  auto mr = repo.gitlab.ensure_mr(token, branch, target, op.title,
                                  operation_marker(op.operation_id) + "\n\nRequested by " + op.subject_id + ".",
                                  !commit->created);
  if (!mr) return failed(call_kind::create_mr, mr.error());
  call_reply r;
  r.kind = call_kind::create_mr;
  fill_mr(r, mr->mr);
  r.own_commit = base_of(commit.value(), actions.value());
  return r;
}

call_reply read_mr(clients::repository_access& repo, call_kind kind, std::int64_t iid) {
  std::int64_t read_at = 0;
  auto mr = read_stamped(repo, iid, true, read_at);
  if (!mr) return failed(kind, mr.error());
  return reply_with(kind, mr.value(), read_at);
}

/// Approves as every bot on `sha`, one bot after the other. The bots are retried separately: a
/// retry never re-submits the other account's approval, and a bot that already approved is skipped.
clients::result<clients::done> approve_all(clients::external_context& ctx, clients::repository_access& repo,
                                           const config::snapshot& snap, std::int64_t iid, const std::string& sha) {
  return clients::approve_as_reviewers(repo.gitlab, ctx.shared->check_items, repo.approvers, iid, sha, snap);
}

call_reply approve_bots(clients::external_context& ctx, clients::repository_access& repo, const config::snapshot& snap,
                        const messages::call_request& req) {
  const auto iid = req.mr_iid;
  // The read that ended the pipeline wait, when fresh, says the MR is open at this head: approve
  // on its sha without reading again. GitLab refuses an approve whose sha is no longer the head
  // (409): the head moved since, so the MR is read and approved as below, on the head it has now.
  if (const auto* known = reusable(req.last_read, snap); known && known->state == "opened" && !known->sha.empty()) {
    auto approved = approve_all(ctx, repo, snap, iid, known->sha);
    if (approved) return reply_with(call_kind::approve_bots, as_merge_request(*known, iid), known->read_at_ms);
    if (!clients::head_moved(approved.error())) return failed(call_kind::approve_bots, approved.error());
    log::info("gitlab.approve_head_moved", {{"mr_iid", iid}, {"sha", known->sha}});
  }
  std::int64_t read_at = 0;
  auto mr = read_stamped(repo, iid, false, read_at);
  if (!mr) return failed(call_kind::approve_bots, mr.error());
  auto r = reply_with(call_kind::approve_bots, mr.value(), read_at);
  // Read the remote state first; a merged MR is not approved again.
  if (mr->state == "merged") {
    r.already_merged = true;
    return r;
  }
  if (mr->state == "closed") {
    r.closed = true;
    return r;
  }
  auto approved = approve_all(ctx, repo, snap, iid, mr->sha);
  if (!approved) return failed(call_kind::approve_bots, approved.error());
  return r;
}

/// The target changed one of the change's files since the MR's branch forked from it: the MR is
/// closed (it must never be merged) and the change ends CONTENT_CONFLICT. A close that fails is
/// left to operators; the reply says conflict either way, which is what decides.
bool stop_on_changed_files(clients::repository_access& repo, const clients::merge_request& mr, const call_context& op,
                           call_reply& r) {
  if (mr.base_sha.empty()) return false;  // GitLab has not computed diff_refs yet: not mergeable yet either
  auto check =
      check_unchanged_since(repo.gitlab, repo.author_token, mr.target_branch, mr.base_sha,
                            paths_of(commit_actions_of(op.payload_json)), known_at(op.own_commit, mr.base_sha));
  if (!check) {
    r = failed(call_kind::try_merge, check.error());
    return true;
  }
  if (check->changed.empty()) return false;
  (void)repo.gitlab.close_mr(repo.author_token, mr.iid);
  r.merge = merge_result::content_conflict;
  r.error = check->describe();
  return true;
}

/// What the MR as read says about merging it now: `ready` goes on to the files check and the merge.
enum class merge_gate { ready, already_merged, closed, needs_rebase, not_mergeable_yet, pipeline_failed };

merge_gate gate_of(const clients::merge_request& mr) {
  if (mr.state == "merged") return merge_gate::already_merged;
  if (mr.state == "closed") return merge_gate::closed;
  const auto& detailed = mr.detailed_merge_status;
  if (detailed == "need_rebase" || detailed == "conflict" || mr.has_conflicts) return merge_gate::needs_rebase;
  // Merge only when the head pipeline ran on the MR's current SHA (renovatebot/renovate#46236).
  if (!mr.head_pipeline || mr.head_pipeline->sha != mr.sha) return merge_gate::not_mergeable_yet;
  const auto& ps = mr.head_pipeline->status;
  if (ps == "failed" || ps == "canceled") return merge_gate::pipeline_failed;
  if (ps != "success" || detailed == "checking" || detailed == "unchecked" || detailed == "ci_still_running" ||
      detailed == "preparing" || mr.base_sha.empty()) {
    return merge_gate::not_mergeable_yet;
  }
  return merge_gate::ready;
}

/// The files check and the merge of an MR whose read said `ready`, with that read's sha: GitLab
/// merges only that head (409 otherwise), and its refusals map onto merge results.
call_reply merge_ready(clients::repository_access& repo, const clients::merge_request& mr, const call_context& op,
                       call_reply r) {
  // Last check before the merge: GitLab's merge has no compare-and-swap on the target's files, so
  // changeflow reads them. What lands between this read and the merge is a window of one round trip;
  // git's own conflict detection refuses the merge when both sides changed the same lines.
  if (stop_on_changed_files(repo, mr, op, r)) return r;
  auto merged = repo.gitlab.merge(repo.author_token, mr.iid, mr.sha);
  if (merged) {
    fill_mr(r, merged.value());
    r.merge = merged->state == "merged" ? merge_result::merged : merge_result::not_mergeable_yet;
    return r;
  }
  const auto& e = merged.error();
  r.error = clients::describe(e);
  r.http_status = e.status;
  switch (clients::classify_merge_error(e)) {
    // 405 also answers an MR that is no longer open: the next attempt reads it and finds out.
    case clients::merge_refusal::not_mergeable_yet: r.merge = merge_result::not_mergeable_yet; return r;
    case clients::merge_refusal::needs_rebase:
      // The target moved between the check and the merge (GitLab answers 422): when it moved one of
      // the change's files, that is the conflict, not a reason to rebase over it.
      if (stop_on_changed_files(repo, mr, op, r)) return r;
      r.merge = merge_result::needs_rebase;
      return r;
    case clients::merge_refusal::sha_mismatch: r.merge = merge_result::sha_mismatch; return r;
    case clients::merge_refusal::not_allowed:
    case clients::merge_refusal::other: break;
  }
  // A lost response is retryable: the next attempt reads the MR first and finds it merged.
  return failed(call_kind::try_merge, e);
}

call_reply try_merge(clients::repository_access& repo, const config::snapshot& snap, const messages::call_request& req,
                     const call_context& op) {
  const auto iid = req.mr_iid;
  // Right after the approvals: the read that ended the pipeline wait (and that the approvals went
  // on), when fresh and it said the MR could be merged, is merged on without reading again. Only a
  // `ready` read is reused; anything else is read again rather than acted on from memory.
  if (const auto* known = reusable(req.last_read, snap)) {
    auto mr = as_merge_request(*known, iid);
    if (gate_of(mr) == merge_gate::ready) {
      return merge_ready(repo, mr, op, reply_with(call_kind::try_merge, mr, known->read_at_ms));
    }
  }
  std::int64_t read_at = 0;
  auto mr = read_stamped(repo, iid, true, read_at);
  if (!mr) return failed(call_kind::try_merge, mr.error());
  auto r = reply_with(call_kind::try_merge, mr.value(), read_at);
  switch (gate_of(mr.value())) {
    case merge_gate::ready: return merge_ready(repo, mr.value(), op, std::move(r));
    case merge_gate::already_merged: r.merge = merge_result::already_merged; return r;
    case merge_gate::closed: r.merge = merge_result::closed; return r;
    case merge_gate::needs_rebase:
      // A rebase replays the change onto the target as it is now: never over a newer version of
      // one of its files.
      if (stop_on_changed_files(repo, mr.value(), op, r)) return r;
      r.merge = merge_result::needs_rebase;
      return r;
    case merge_gate::pipeline_failed:
      r.merge = merge_result::pipeline_failed;
      r.error = "pipeline " + mr->head_pipeline->status;
      return r;
    case merge_gate::not_mergeable_yet: r.merge = merge_result::not_mergeable_yet; return r;
  }
  return r;
}

call_reply rebase(clients::repository_access& repo, std::int64_t iid) {
  auto res = repo.gitlab.rebase(repo.author_token, iid);
  call_reply r;
  r.kind = call_kind::rebase;
  if (res) return r;
  // 409 "Failed to enqueue" / resource lock: a rebase already runs; polling settles it.
  if (res.error().what == clients::call_error::kind::http_status && res.error().status == 409) return r;
  return failed(call_kind::rebase, res.error());
}

}  // namespace

messages::call_reply run_call(clients::external_context& ctx, const config::snapshot& snap,
                              const messages::call_request& req, const call_context& op) {
  ctx.refresh(snap);
  // Every GitLab call of the change goes to its own repository, with that repository's tokens.
  auto repo = ctx.repository(snap, op.repository);
  switch (req.kind) {
    case call_kind::submit_approval: return submit_approval(ctx, snap, op);
    case call_kind::create_mr: return create_mr(repo, op);
    case call_kind::read_pipeline: return read_mr(repo, call_kind::read_pipeline, req.mr_iid);
    case call_kind::approve_bots: return approve_bots(ctx, repo, snap, req);
    case call_kind::try_merge: return try_merge(repo, snap, req, op);
    case call_kind::rebase: return rebase(repo, req.mr_iid);
    case call_kind::read_rebase: return read_mr(repo, call_kind::read_rebase, req.mr_iid);
  }
  call_reply r;
  r.kind = req.kind;
  r.outcome = status::refused;
  r.error = "unknown call";
  return r;
}

}  // namespace changeflow::effects
