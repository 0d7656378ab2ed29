#include "effects/batch_calls.hpp"

#include "clients/approver.hpp"
#include "effects/external_calls.hpp"
#include "effects/file_actions.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace changeflow::effects {

namespace {

batch_mr_view failed(const clients::call_error& e) {
  batch_mr_view v;
  v.outcome = e.retryable ? batch_mr_view::call::retryable : batch_mr_view::call::refused;
  v.error = clients::describe(e);
  return v;
}

batch_mr_view view_of(const clients::merge_request& mr) {
  batch_mr_view v;
  v.iid = mr.iid;
  v.web_url = mr.web_url;
  v.state = mr.state;
  v.sha = mr.sha;
  v.detailed_merge_status = mr.detailed_merge_status;
  v.has_conflicts = mr.has_conflicts;
  v.rebase_in_progress = mr.rebase_in_progress;
  v.merge_error = mr.merge_error;
  if (mr.head_pipeline) {
    v.pipeline_status = mr.head_pipeline->status;
    v.pipeline_sha = mr.head_pipeline->sha;
  }
  return v;
}

std::string batch_marker(std::int64_t batch_id) {
  return "changeflow-batch: " + std::to_string(batch_id);
}

}  // namespace

batch_plan plan_batch(std::vector<batch_member_change> members) {
  std::stable_sort(members.begin(), members.end(),
                   [](const auto& a, const auto& b) { return a.created_at_ms < b.created_at_ms; });
  batch_plan plan;
  std::set<std::string> touched;
  for (auto& m : members) {
    auto actions = commit_actions_of(m.payload_json);
    bool conflicts =
        std::any_of(actions.begin(), actions.end(), [&](const auto& a) { return touched.count(a.file_path) > 0; });
    if (conflicts) {
      plan.deferred.push_back(m.operation_id);
      continue;
    }
    for (auto& a : actions) {
      touched.insert(a.file_path);
      plan.actions.push_back(std::move(a));
    }
    plan.included.push_back(std::move(m));
  }
  return plan;
}

std::string batch_branch(std::int64_t batch_id) {
  return "changeflow/batch-" + std::to_string(batch_id);
}

std::string batch_title(std::int64_t batch_id, const std::vector<batch_member_change>& members) {
  std::string t = "changeflow batch " + std::to_string(batch_id) + ":";
  for (std::size_t i = 0; i < members.size(); ++i) t += (i ? "; " : " ") + members[i].title;
  if (t.size() > 255) t = t.substr(0, 252) + "...";
  return t;
}

std::string batch_description(std::int64_t batch_id, const std::vector<batch_member_change>& members) {
  std::string d = batch_marker(batch_id) + "\n";
  for (const auto& m : members) d += operation_marker(m.operation_id) + "\n";
  d += "\nChanges in this batch:\n";
  for (const auto& m : members) d += "- " + m.title + " (requested by " + m.subject_id + ")\n";
  return d;
}

batch_mr_view open_batch_mr(clients::repository_access& repo, const std::string& partition_branch,
                            std::int64_t batch_id, const batch_plan& plan, messages::commit_base* own_commit) {
  const auto& token = repo.author_token;
  const auto target_branch = repo.target_branch(partition_branch);
  const auto branch = batch_branch(batch_id);
  const auto marker = batch_marker(batch_id);
  // Each member's files are based on the target as it is now unless the member names its base (see
  // create_mr in external_calls.cpp for why this is the capture point); GitLab checks every base
  // in the one commit, and a member whose file moved refuses the whole commit (bisection finds it).
  auto actions = resolve_actions(repo.gitlab, token, target_branch, plan.actions);
  if (!actions) return failed(actions.error());
  auto commit = repo.gitlab.ensure_branch_with_commit(token, branch, target_branch,
                                                      marker + ": " + std::to_string(plan.included.size()) + " changes",
                                                      actions.value(), marker);
  if (!commit) {
    auto v = failed(commit.error());
    v.content_conflict = is_content_conflict(commit.error());
    return v;
  }
  if (own_commit) *own_commit = base_of(commit.value(), actions.value());
  auto mr = repo.gitlab.ensure_mr(token, branch, target_branch, batch_title(batch_id, plan.included),
                                  batch_description(batch_id, plan.included), !commit->created);
  if (!mr) return failed(mr.error());
  return view_of(mr->mr);
}

batch_mr_view read_batch_mr(clients::repository_access& repo, std::int64_t iid) {
  auto mr = repo.gitlab.get_mr(repo.author_token, iid, true);
  if (!mr) return failed(mr.error());
  return view_of(mr.value());
}

batch_mr_view find_batch_mr(clients::repository_access& repo, std::int64_t batch_id) {
  auto open = repo.gitlab.list_open_mrs(repo.author_token, batch_branch(batch_id));
  if (!open) return failed(open.error());
  if (open->empty()) return batch_mr_view{};  // state "": no MR
  return view_of(open->front());
}

merge_attempt approve_and_merge(clients::repository_access& repo, clients::check_items_cache& check_items,
                                const config::snapshot& snap, std::int64_t iid, const std::vector<std::string>& paths,
                                const messages::commit_base& own_commit) {
  const auto& token = repo.author_token;
  merge_attempt out;
  auto mr = repo.gitlab.get_mr(token, iid, false);
  if (!mr) {
    out.mr = failed(mr.error());
    out.answer = out.mr.outcome == batch_mr_view::call::retryable ? merge_answer::retryable : merge_answer::refused;
    return out;
  }
  out.mr = view_of(mr.value());
  if (mr->state == "merged") return {merge_answer::merged, out.mr};
  if (mr->state != "opened") return {merge_answer::closed, out.mr};
  // The target must still hold every member file's version the batch commit was based on (the MR's
  // fork point); otherwise merging would carry a member over a newer version of its file.
  if (mr->base_sha.empty()) return {merge_answer::not_yet, out.mr};
  auto check = check_unchanged_since(repo.gitlab, token, mr->target_branch, mr->base_sha, paths,
                                     known_at(own_commit, mr->base_sha));
  if (!check) {
    out.mr.error = clients::describe(check.error());
    out.answer = check.error().retryable ? merge_answer::retryable : merge_answer::refused;
    return out;
  }
  if (!check->changed.empty()) {
    out.mr.error = check->describe();
    out.answer = merge_answer::content_conflict;
    return out;
  }
  if (auto approved = clients::approve_as_reviewers(repo.gitlab, check_items, repo.approvers, iid, mr->sha, snap);
      !approved) {
    out.mr.error = clients::describe(approved.error());
    out.answer = approved.error().retryable ? merge_answer::retryable : merge_answer::approval_refused;
    return out;
  }
  // Merge with the sha the pipeline ran on: a head that moved since is refused (409), not merged.
  auto merged = repo.gitlab.merge(token, iid, mr->sha);
  if (merged) {
    out.mr = view_of(merged.value());
    out.answer = merged->state == "merged" ? merge_answer::merged : merge_answer::not_yet;
    return out;
  }
  const auto& e = merged.error();
  out.mr.error = clients::describe(e);
  switch (clients::classify_merge_error(e)) {
    case clients::merge_refusal::not_mergeable_yet:
    case clients::merge_refusal::sha_mismatch: out.answer = merge_answer::not_yet; return out;
    case clients::merge_refusal::needs_rebase: out.answer = merge_answer::needs_rebase; return out;
    case clients::merge_refusal::not_allowed:
    case clients::merge_refusal::other: break;
  }
  // A lost response is retryable: the next read finds the MR merged.
  out.answer = e.retryable ? merge_answer::retryable : merge_answer::refused;
  return out;
}

batch_mr_view rebase_batch_mr(clients::repository_access& repo, std::int64_t iid, const std::vector<std::string>& paths,
                              const messages::commit_base& own_commit) {
  // A rebase replays the members onto the target as it is now, moving the fork point past any newer
  // version of their files; git combines edits of different lines silently. So first: the target
  // must still hold every member file's base.
  auto before = repo.gitlab.get_mr(repo.author_token, iid, false);
  if (!before) return failed(before.error());
  if (before->state == "opened" && !before->base_sha.empty()) {
    auto check = check_unchanged_since(repo.gitlab, repo.author_token, before->target_branch, before->base_sha, paths,
                                       known_at(own_commit, before->base_sha));
    if (!check) return failed(check.error());
    if (!check->changed.empty()) {
      auto v = view_of(before.value());
      v.content_conflict = true;
      v.error = check->describe();
      return v;
    }
  }
  auto res = repo.gitlab.rebase(repo.author_token, iid);
  if (!res && !(res.error().what == clients::call_error::kind::http_status && res.error().status == 409))
    return failed(res.error());
  return read_batch_mr(repo, iid);
}

batch_mr_view close_and_reread(clients::repository_access& repo, std::int64_t iid) {
  const auto& token = repo.author_token;
  auto before = repo.gitlab.get_mr(token, iid, false);
  if (!before) return failed(before.error());
  if (before->state == "opened" || before->state == "locked") {
    // The close may lose to a merge that lands first: that is exactly the race the re-read settles.
    (void)repo.gitlab.close_mr(token, iid);
  }
  return read_batch_mr(repo, iid);
}

}  // namespace changeflow::effects
