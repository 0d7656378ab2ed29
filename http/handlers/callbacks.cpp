#include "http/handlers/callbacks.hpp"

#include "actors/reconciler.hpp"
#include "actors/request_actor.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "config/test_hooks.hpp"
#include "http/envelope.hpp"
#include "http/handlers/callback_body.hpp"
#include "http/middleware/error_mapping.hpp"
#include "messages/messages.hpp"
#include "persistence/callback_repo.hpp"
#include "persistence/reconcile_repo.hpp"
#include "service/wake_actor.hpp"

#include <caf/all.hpp>
#include <mutex>
#include <set>

namespace changeflow::http {

namespace {

using middleware::api_outcome;
using middleware::outcome_response;
using persistence::db_outcome;

http_server::response outcome_response(std::string_view outcome, nlohmann::json extra = nlohmann::json::object()) {
  extra["outcome"] = outcome;
  // Always 2xx once authenticated and well-formed, so the sender stops retrying.
  return ok(extra);
}

void count_callback(metrics::registry& m, std::string_view kind, std::string_view outcome) {
  m.inc("changeflow_callbacks_total", "Callbacks by kind and outcome",
        {{"kind", std::string(kind)}, {"outcome", std::string(outcome)}});
}

void approval_callback(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto snap = ctx.config.current();
  if (!approval_signature_valid(req, snap->get_string("callbacks.approval_secret"))) {
    count_callback(ctx.metrics, "approval", "UNAUTHENTICATED");
    return reply(outcome_response(api_outcome::unauthenticated, {}, nullptr, "callback signature missing or invalid"));
  }
  // Parsing and validation: callback_body.hpp (pure, fuzzed by fuzz/fuzz_callbacks).
  auto parsed = parse_approval_callback_body(req.body);
  if (auto* e = std::get_if<callback_body_error>(&parsed))
    return reply(outcome_response(api_outcome::bad_request, e->message));
  auto& fields = std::get<approval_callback_body>(parsed);
  std::string callback_id = fields.callback_id;
  std::string operation_id = fields.operation_id;
  std::string result = fields.result;
  persistence::approval_result decision = fields.decision;
  auto* svc = ctx.services;
  auto* metrics = &ctx.metrics;
  std::string body = req.body;
  // Durable before the 2xx: the ledger row and the transition commit in one transaction; delivery
  // to the actor is only a nudge, so a crash after the 2xx loses nothing (rehydration resumes).
  // Callbacks use the reserved share of the queue: a sender gives up after a few retries, so a
  // callback refused under load may be lost, while a refused submit is retried by its client.
  bool queued = ctx.db.try_submit(
      [=](persistence::db_context& db) {
        auto r = persistence::apply_approval_callback(db, callback_id, operation_id, decision, body);
        if (!r.ok()) {
          if (r.outcome == db_outcome::retryable)
            return reply(outcome_response(api_outcome::unavailable, {}, nullptr, "database: " + r.error.message));
          return reply(internal_error("database: " + r.error.message));
        }
        auto outcome = std::string(persistence::to_string(r.value.outcome));
        count_callback(*metrics, "approval", outcome);
        log::info(
            "callback.approval",
            {{"operation_id", operation_id}, {"callback_id", callback_id}, {"result", result}, {"outcome", outcome}});
        // APPLIED: the actor must act on the new row. DUPLICATE: a sender redelivers when it did not
        // see our 2xx (we may have crashed right after the commit), so make sure an actor drives the
        // already-applied row; a reload of an unchanged row is harmless.
        if (r.value.outcome == persistence::callback_outcome::APPLIED ||
            r.value.outcome == persistence::callback_outcome::DUPLICATE) {
          service::wake_actor(db, *svc, operation_id, std::nullopt, "approval callback");
        }
        reply(outcome_response(outcome));
      },
      persistence::db_pool::lane::reserved);
  if (!queued) reply(middleware::outcome_response(middleware::api_outcome::overloaded));
}

/// What a recorded deploy delivery did: which operations it names, and the classified outcome.
struct deploy_applied {
  persistence::deploy_outcome outcome = persistence::deploy_outcome::IGNORED_STALE;
  int matched = 0;
  int validated = 0;
  int failed = 0;  // moved to DEPLOY_FAILED by this delivery
};

/// A failed deploy is a failure, not "keep waiting": every named operation still waiting for its
/// confirmation moves to DEPLOY_FAILED (guarded by the version just read; a loser to a concurrent
/// writer has moved on and is left alone). It never raises the reconciliation watermark (that one
/// reads successes only).
persistence::db_result<deploy_applied> fail_deploys(persistence::session db, const persistence::deploy_callback_in& cb,
                                                    const std::vector<std::string>& candidates, deploy_applied out) {
  using R = persistence::db_result<deploy_applied>;
  out.outcome = persistence::deploy_outcome::IGNORED_STALE;
  auto rows = persistence::load_operations(db, candidates);
  if (!rows.ok()) return R::failure(rows.error);
  for (const auto& row : rows.value) {
    if (row.phase != workflow::phase::MERGED) {
      if (!workflow::is_terminal(row.phase)) out.outcome = persistence::deploy_outcome::OUT_OF_ORDER;
      continue;
    }
    auto moved = actors::mark_deploy_failed(db, row, cb.mr_iid, cb.pipeline_id);
    if (!moved.ok()) return R::failure(moved.error);
    if (moved.value) {
      out.outcome = persistence::deploy_outcome::DEPLOY_FAILED;
      ++out.failed;
    }
  }
  return R::success(out);
}

/// Runs on a db worker after the delivery was recorded. The candidates are the operations the
/// pipeline named, or else the operations carrying this MR number in the callback's project when it
/// is one of ours (the MR -> operation mapping is ours, so this is an exact match, not an
/// inference; MR numbers are per project, so the project is part of the match). `our_project` is
/// that project, "" when it is not configured here.
persistence::db_result<deploy_applied> apply_deploy(persistence::session db, const persistence::deploy_callback_in& cb,
                                                    const std::vector<std::string>& named_ids,
                                                    const std::string& our_project, metrics::registry& metrics) {
  using R = persistence::db_result<deploy_applied>;
  using persistence::deploy_outcome;
  deploy_applied out;
  if (cb.status != "success" && cb.status != "failed") {
    out.outcome = deploy_outcome::IGNORED_STALE;  // running, canceled, ...: nothing settled yet
    return R::success(out);
  }
  std::vector<std::string> candidates = named_ids;
  if (candidates.empty() && !our_project.empty()) {
    auto by_mr = persistence::operations_for_mr(db, our_project, cb.mr_iid);
    if (!by_mr.ok()) return R::failure(by_mr.error);
    for (const auto& m : by_mr.value) candidates.push_back(m.operation_id);
  }
  out.matched = static_cast<int>(candidates.size());
  if (cb.status == "failed") return fail_deploys(db, cb, candidates, out);
  std::vector<std::string> not_flipped;
  for (const auto& id : candidates) {
    auto r = actors::validate_and_count(db, id, actors::validation_path::callback, metrics);
    if (!r.ok() && r.outcome != persistence::db_outcome::not_found) return R::failure(r.error);
    if (r.ok() && r.value) {
      ++out.validated;
    } else {
      not_flipped.push_back(id);
    }
  }
  if (out.validated > 0) {
    out.outcome = deploy_outcome::APPLIED;
    return R::success(out);
  }
  // Nothing flipped. When an operation is still on its way to MERGED, the callback overtook our own
  // write (merge answered, MERGED not yet committed): OUT_OF_ORDER. Its MR number is recorded, so
  // reconciliation converges it once it is MERGED and older than min_age (mr_iid <= watermark).
  auto rows = persistence::load_operations(db, not_flipped);
  if (!rows.ok()) return R::failure(rows.error);
  out.outcome = deploy_outcome::IGNORED_STALE;
  for (const auto& row : rows.value) {
    if (!workflow::is_terminal(row.phase) && row.phase != workflow::phase::MERGED) {
      out.outcome = deploy_outcome::OUT_OF_ORDER;
    }
  }
  return R::success(out);
}

/// Deliveries this process is applying right now. A copy that arrives meanwhile (senders do deliver
/// twice, at once) is a plain DUPLICATE; a copy of a delivery recorded but left PENDING by a process
/// that died is applied by the copy. Across instances both may apply: harmless (guarded writes,
/// flip-once validation), only the ledger's label is then the first one's.
class delivery_claims {
 public:
  bool claim(const std::string& id) {
    std::lock_guard lock(mutex_);
    return ids_.insert(id).second;
  }
  void release(const std::string& id) {
    std::lock_guard lock(mutex_);
    ids_.erase(id);
  }

 private:
  std::mutex mutex_;
  std::set<std::string> ids_;
};

void deploy_callback(service_context& ctx, std::shared_ptr<delivery_claims> claims, http_server::request& req,
                     http_server::responder reply) {
  auto snap = ctx.config.current();
  auto secret = snap->get_string("callbacks.deploy_secret");
  auto token = req.header("x-gitlab-token");
  if (!secret || !token || !ids::constant_time_equal(*token, *secret)) {
    count_callback(ctx.metrics, "deploy", "UNAUTHENTICATED");
    return reply(outcome_response(api_outcome::unauthenticated, {}, nullptr, "callback token missing or invalid"));
  }
  // Parsing and validation: callback_body.hpp (pure, fuzzed by fuzz/fuzz_callbacks).
  auto parsed = parse_deploy_callback_body(req.body, req.header("idempotency-key"));
  if (auto* e = std::get_if<callback_body_error>(&parsed))
    return reply(outcome_response(api_outcome::bad_request, e->message));
  auto& fields = std::get<deploy_callback_body>(parsed);
  persistence::deploy_callback_in cb = fields.cb;
  std::vector<std::string> operation_ids = fields.operation_ids;
  auto* metrics = &ctx.metrics;
  // The callback's project when it is one of the configured repositories (exact path), else "".
  const std::string our_project = snap->repositories().find(cb.project) ? cb.project : std::string();
  std::string payload = fields.payload;
  // Callbacks use the reserved share of the queue: a sender gives up after a few retries, so a
  // callback refused under load may be lost, while a refused submit is retried by its client.
  bool queued = ctx.db.try_submit(
      [=](persistence::db_context& db) {
        // A copy of a delivery this process is applying right now: answered at once, nothing read.
        if (!claims->claim(cb.delivery_id)) {
          count_callback(*metrics, "deploy", "DUPLICATE");
          return reply(outcome_response("DUPLICATE"));
        }
        struct release_claim {
          delivery_claims& c;
          std::string id;
          ~release_claim() { c.release(id); }
        } held{*claims, cb.delivery_id};
        // Durable before anything else: the MR number (watermark) and the ledger row commit together.
        auto recorded = persistence::record_deploy_delivery(db, cb, payload);
        if (!recorded.ok()) {
          return reply(internal_error("database: " + recorded.error.message,
                                      recorded.outcome == db_outcome::retryable ? 503 : 500));
        }
        if (recorded.value == persistence::record_outcome::duplicate) {
          count_callback(*metrics, "deploy", "DUPLICATE");
          return reply(outcome_response("DUPLICATE"));
        }
        bool first_copy = recorded.value == persistence::record_outcome::inserted;
        config::hold_for_test_hook(*snap, "faults.hold_after_deploy_record_ms");
        if (!first_copy) log::warn("callback.deploy_unapplied_redelivered", {{"delivery_id", cb.delivery_id}});
        auto applied = apply_deploy(db, cb, operation_ids, our_project, *metrics);
        if (!applied.ok()) {
          // Recorded but not applied (database trouble): the ledger row stays PENDING and the 5xx
          // makes the sender retry; the retry finds it PENDING and applies it.
          return reply(outcome_response(api_outcome::unavailable, {}, nullptr, "database: " + applied.error.message));
        }
        auto outcome = std::string(persistence::to_string(applied.value.outcome));
        auto set = persistence::set_deploy_outcome(db, cb.delivery_id, applied.value.outcome);
        if (!set.ok())
          log::warn("callback.deploy_outcome_not_recorded",
                    {{"delivery_id", cb.delivery_id}, {"error", set.error.message}});
        count_callback(*metrics, "deploy", outcome);
        log::info("callback.deploy", {{"delivery_id", cb.delivery_id},
                                      {"mr_iid", cb.mr_iid},
                                      {"status", cb.status},
                                      {"matched", applied.value.matched},
                                      {"validated", applied.value.validated},
                                      {"failed", applied.value.failed},
                                      {"outcome", outcome}});
        reply(outcome_response(outcome, {{"matched", applied.value.matched},
                                         {"validated", applied.value.validated},
                                         {"failed", applied.value.failed}}));
      },
      persistence::db_pool::lane::reserved);
  if (!queued) reply(middleware::outcome_response(middleware::api_outcome::overloaded));
}

/// POST /api/v1/ops/reconcile: one reconciliation run now, the same code the timer runs; answers
/// what it did. Overlapping with a timer run is safe (mark_validated flips exactly once).
void manual_reconcile(service_context& ctx, http_server::responder reply) {
  bool queued = actors::submit_reconciliation(*ctx.services, "manual", [reply](actors::reconcile_report r) {
    if (!r.ok) return reply(outcome_response(api_outcome::unavailable, {}, nullptr, "reconciliation: " + r.error));
    reply(ok(actors::to_json(r)));
  });
  if (!queued) reply(middleware::outcome_response(middleware::api_outcome::overloaded));
}

}  // namespace

bool approval_signature_valid(const http_server::request& req, const std::optional<std::string>& secret) {
  if (!secret) return false;
  auto sig = req.header("x-signature");
  if (!sig) return false;
  std::string_view given = *sig;
  constexpr std::string_view prefix = "sha256=";
  if (given.substr(0, prefix.size()) != prefix) return false;
  given.remove_prefix(prefix.size());
  return ids::constant_time_equal(given, ids::hmac_sha256_hex(*secret, req.body));
}

void add_callback_routes(router& r, service_context& ctx) {
  r.add(
      {routes::approval_callback, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
         approval_callback(ctx, req, std::move(reply));
       }});
  r.add({routes::deploy_callback, [&ctx, claims = std::make_shared<delivery_claims>()](
                                      http_server::request& req, const path_params&, http_server::responder reply) {
           deploy_callback(ctx, claims, req, std::move(reply));
         }});
}

void add_reconcile_route(router& r, service_context& ctx) {
  r.add({routes::ops_reconcile, [&ctx](http_server::request&, const path_params&, http_server::responder reply) {
           manual_reconcile(ctx, std::move(reply));
         }});
}

}  // namespace changeflow::http
