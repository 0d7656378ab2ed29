#include "service/revert_change.hpp"

#include "base/log.hpp"
#include "config/repositories.hpp"
#include "config/snapshot.hpp"
#include "effects/file_actions.hpp"
#include "persistence/revert_repo.hpp"
#include "workflow/revert_rule.hpp"

#include <memory>
#include <utility>
#include <variant>

namespace changeflow::service {

namespace {

using persistence::db_outcome;

/// The Retry-After of a revert whose GitLab reads failed, when GitLab named none itself: long
/// enough for a burst of errors or a half-open breaker to pass, short enough for a person waiting.
constexpr int default_retry_after_s = 5;

struct run_state {
  runtime::services* svc = nullptr;
  revert_request req;
  revert_render render;
  std::function<void(std::optional<gate_result>)> done;
  bool owns_key = false;  // the gate let this request run: its record must be finished
};
using run_ptr = std::shared_ptr<run_state>;

revert_result status_only(revert_status s, std::string message = {}, std::string detail = {}) {
  revert_result r;
  r.status = s;
  r.message = std::move(message);
  r.detail = std::move(detail);
  return r;
}

/// A repository answer that ends the request: no such change, or the database failed.
template <class T>
std::optional<revert_result> ends_request(const persistence::db_result<T>& r) {
  if (r.outcome == db_outcome::not_found) return status_only(revert_status::not_found, "No such operation");
  if (r.ok()) return std::nullopt;
  auto out = status_only(revert_status::failed);
  out.error = r.error;
  return out;
}

revert_result gitlab_unreadable(const clients::call_error& e, const std::string& what) {
  auto r = status_only(revert_status::unavailable,
                       "GitLab could not be read for the files' previous contents; nothing was written, retry later",
                       what + ": " + clients::describe(e));
  r.retry_after_s = e.retry_after_seconds.value_or(default_retry_after_s);
  return r;
}

void log_outcome(const run_ptr& run, const revert_result& r) {
  if (r.detail.empty()) return;
  log::warn(
      "change.revert_not_created",
      {{"operation_id", run->req.original_id}, {"revert_id", run->req.revert.operation_id}, {"detail", r.detail}});
}

/// Renders the answer, stores it under the key (a 2xx for replay; anything else drops the record
/// so a retry runs afresh), then answers. On a database worker.
void conclude(persistence::session db, const run_ptr& run, const revert_result& r) {
  log_outcome(run, r);
  auto answer = run->render(r);
  if (run->owns_key) finish_idempotent(db, run->req.idem, answer);
  run->done(std::nullopt);
}

/// The same from an external worker: the record is finished on a database worker. When none can
/// take it the answer still goes out, and the record left IN_FLIGHT is taken over by a retry after
/// idempotency.in_flight_timeout_ms (the protocol's rule for a request that died).
void conclude_elsewhere(const run_ptr& run, revert_result r) {
  if (run->owns_key) {
    auto shared = std::make_shared<revert_result>(std::move(r));
    if (run->svc->db->try_submit([run, shared](persistence::db_context& db) { conclude(db, run, *shared); })) return;
    r = std::move(*shared);
  }
  log_outcome(run, r);
  run->render(r);
  run->done(std::nullopt);
}

/// The refusals that need no GitLab read (over what the database holds and the configuration), so
/// a change that cannot be reverted is told so while GitLab is down.
std::optional<revert_result> refusal(persistence::session db, const config::repository_set& repositories,
                                     const persistence::operation_row& original) {
  auto current = persistence::find_revert(db, original);
  if (auto ended = ends_request(current)) return ended;
  std::optional<workflow::earlier_revert> state;
  if (current.value) state = current.value->state();
  switch (workflow::may_revert(original.phase, state)) {
    case workflow::revert_verdict::allowed: break;
    case workflow::revert_verdict::not_validated:
      return status_only(revert_status::not_validated, "Only a VALIDATED change can be reverted; change " +
                                                           original.operation_id + " is at " +
                                                           std::string(workflow::to_string(original.step)) + " (" +
                                                           std::string(workflow::to_string(original.phase)) + ")");
    case workflow::revert_verdict::already_reverted: {
      const auto& link = *current.value;
      auto r = status_only(revert_status::already_reverted,
                           "Change " + original.operation_id + " is already reverted by " + link.revert_id + " (" +
                               std::string(workflow::to_string(link.phase)) +
                               "); a revert that ends without taking effect lets it be reverted again");
      r.current_revert = link.revert_id;
      return r;
    }
  }
  // A revert is a new change, and a new change goes only to a configured repository and branch (a
  // submit naming any other is refused). "" is a row from before migration 7 that start-up could
  // not assign: its calls use gitlab.project, as the original's did.
  if (!original.repository.empty()) {
    auto where = config::resolve_target(repositories, {original.repository, original.target_branch});
    if (auto* gone = std::get_if<config::target_refusal>(&where)) {
      return status_only(revert_status::not_configured,
                         "Change " + original.operation_id + " cannot be reverted here: " + gone->message);
    }
  }
  if (!original.mr_iid) {
    return status_only(revert_status::nothing_to_revert,
                       "Change " + original.operation_id + " has no merge request recorded to read its base from");
  }
  if (effects::commit_actions_of(original.payload_json).empty()) {
    return status_only(revert_status::nothing_to_revert, "Change " + original.operation_id + " carries no files");
  }
  return std::nullopt;
}

/// The transaction that creates the revert and links the original, then its actor. On a database
/// worker. The original is checked again under its row lock: it may have been reverted meanwhile.
void write_revert(const run_ptr& run, const persistence::operation_row& original,
                  std::vector<clients::commit_action> actions) {
  bool queued = run->svc->db->try_submit([run, original, actions = std::move(actions)](persistence::db_context& db) {
    auto op = run->req.revert;
    op.subject_id = original.subject_id;
    op.target_key = original.target_key;
    // Where the original went, so the revert lands on the same binding and the same files.
    op.repository = original.repository;
    op.target_branch = original.target_branch;
    op.title = revert_title(original.title);
    op.payload_json = effects::payload_of(actions);
    op.revert_of = original.operation_id;
    auto written = persistence::create_revert(db, op, op.actor);
    if (auto ended = ends_request(written)) return conclude(db, run, *ended);
    const auto& w = written.value;
    switch (w.verdict) {
      case workflow::revert_verdict::allowed: break;
      case workflow::revert_verdict::not_validated:
        return conclude(db, run,
                        status_only(revert_status::not_validated,
                                    "Only a VALIDATED change can be reverted; change " + original.operation_id +
                                        " is at " + std::string(workflow::to_string(w.original_step))));
      case workflow::revert_verdict::already_reverted: {
        auto r = status_only(revert_status::already_reverted,
                             "Change " + original.operation_id + " was reverted meanwhile by " + w.current_revert);
        r.current_revert = w.current_revert;
        return conclude(db, run, r);
      }
    }
    revert_result r;
    r.status = revert_status::created;
    r.submitted =
        start_created(db, *run->svc, op, persistence::db_result<persistence::create_outcome>::success(w.created));
    if (r.submitted.status == submit_status::accepted) {
      log::info("change.reverted", {{"operation_id", original.operation_id},
                                    {"revert_id", op.operation_id},
                                    {"files", static_cast<int>(actions.size())}});
    }
    conclude(db, run, r);
  });
  if (!queued) conclude_elsewhere(run, status_only(revert_status::overloaded));
}

/// What the GitLab reads gave: the revert's files, or the answer that ends the request.
using read_outcome = std::variant<std::vector<clients::commit_action>, revert_result>;

/// The original's base (its MR's fork point), each of its files there and on the target now, and
/// the revert's files from them. Blocking: an external worker only.
read_outcome read_previous_contents(clients::external_context& ec, const config::snapshot& snap,
                                    const persistence::operation_row& original) {
  // The original's own repository, reached with that repository's token; its MR number is per project.
  auto repo = ec.repository(snap, original.repository);
  const auto& token = repo.author_token;
  auto mr = repo.gitlab.get_mr(token, *original.mr_iid, false);
  if (!mr) return gitlab_unreadable(mr.error(), "read MR !" + std::to_string(*original.mr_iid));
  if (mr->base_sha.empty()) {
    auto r = status_only(revert_status::unavailable,
                         "GitLab has not answered the merge request's base yet; nothing was written, retry later",
                         "MR !" + std::to_string(*original.mr_iid) + " has no diff_refs.base_sha");
    r.retry_after_s = default_retry_after_s;
    return r;
  }
  const auto target = repo.target_branch(original.target_branch);
  std::vector<file_versions> files;
  for (const auto& path : effects::paths_of(effects::commit_actions_of(original.payload_json))) {
    auto then = repo.gitlab.get_file(token, path, mr->base_sha);
    if (!then) return gitlab_unreadable(then.error(), "read " + path + " at " + mr->base_sha);
    auto now = repo.gitlab.get_file(token, path, target);
    if (!now) return gitlab_unreadable(now.error(), "read " + path + " on " + target);
    files.push_back({path, std::move(then.value()), std::move(now.value())});
  }
  auto actions = revert_actions(files);
  if (actions.empty()) {
    return status_only(revert_status::nothing_to_revert, "The target already holds every file of change " +
                                                             original.operation_id +
                                                             " as it was before it: there is nothing to revert");
  }
  return actions;
}

void read_then_write(const run_ptr& run, const persistence::operation_row& original) {
  auto snap = run->svc->config->current();
  bool queued = run->svc->external->try_submit([run, original, snap](clients::external_context& ec) {
    read_outcome outcome;
    try {
      ec.refresh(*snap);
      outcome = read_previous_contents(ec, *snap, original);
    } catch (const std::exception& e) {
      auto r =
          status_only(revert_status::unavailable, {}, std::string("reading the previous contents threw: ") + e.what());
      r.retry_after_s = default_retry_after_s;
      outcome = std::move(r);
    }
    if (auto* refused = std::get_if<revert_result>(&outcome)) return conclude_elsewhere(run, std::move(*refused));
    write_revert(run, original, std::get<std::vector<clients::commit_action>>(std::move(outcome)));
  });
  if (!queued) conclude_elsewhere(run, status_only(revert_status::overloaded));
}

}  // namespace

std::vector<clients::commit_action> revert_actions(const std::vector<file_versions>& files) {
  std::vector<clients::commit_action> out;
  for (const auto& f : files) {
    clients::commit_action a;
    a.file_path = f.path;
    if (!f.at_base) {
      if (!f.on_target) continue;  // created by the change and gone since: nothing to take back
      a.action = "delete";
      a.last_commit_id = f.on_target->last_commit_id;
    } else if (!f.on_target) {
      a.action = "create";  // the change deleted it (or it was deleted since): it comes back
      a.content = f.at_base->content;
    } else {
      if (f.on_target->content == f.at_base->content) continue;
      a.action = "update";
      a.content = f.at_base->content;
      a.last_commit_id = f.on_target->last_commit_id;
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::string revert_title(std::string_view original_title) {
  return "Revert: " + std::string(original_title);
}

void revert_change(runtime::services& svc, revert_request req, revert_render render,
                   std::function<void(std::optional<gate_result>)> done) {
  auto run = std::make_shared<run_state>();
  run->svc = &svc;
  run->req = std::move(req);
  run->render = std::move(render);
  run->done = std::move(done);
  bool queued = svc.db->try_submit([run](persistence::db_context& db) {
    if (!run->req.idem.key.empty()) {
      // A re-run after a takeover is safe: the revert's id is the same on the re-run (the client's,
      // or derived from the key), and create_revert answers duplicate_operation for a revert the
      // dead request got as far as creating.
      auto gate = begin_idempotent(db, *run->svc, run->req.idem);
      if (gate.verdict != gate_verdict::run) return run->done(gate);
      run->owns_key = true;
    }
    auto row = persistence::load_operation(db, run->req.original_id);
    if (auto ended = ends_request(row)) return conclude(db, run, *ended);
    if (auto refused = refusal(db, run->svc->config->current()->repositories(), row.value)) {
      return conclude(db, run, *refused);
    }
    read_then_write(run, row.value);
  });
  if (!queued) {
    run->render(status_only(revert_status::overloaded));
    run->done(std::nullopt);
  }
}

}  // namespace changeflow::service
