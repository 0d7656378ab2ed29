#include "http/handlers/callbacks.hpp"

#include "actors/reconciler.hpp"
#include "actors/request_actor.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "config/test_hooks.hpp"
#include "http/envelope.hpp"
#include "http/handlers/callback_body.hpp"
#include "http/handlers/gitlab_webhook_body.hpp"
#include "http/middleware/error_mapping.hpp"
#include "messages/messages.hpp"
#include "persistence/audit_repo.hpp"
#include "persistence/callback_repo.hpp"
#include "persistence/reconcile_repo.hpp"
#include "service/callback_intake.hpp"
#include "service/gitlab_webhook.hpp"

#include <caf/send.hpp>

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

using service::count_callback;

void approval_callback(service_context& ctx, std::shared_ptr<service::delivery_claims> claims,
                       http_server::request& req, http_server::responder reply) {
  auto snap = ctx.config.current();
  if (!approval_signature_valid(req, snap->callbacks().approval_secret)) {
    count_callback(ctx.metrics, "approval", "UNAUTHENTICATED");
    return reply(outcome_response(api_outcome::unauthenticated, {}, nullptr, "callback signature missing or invalid"));
  }
  // Parsing and validation: callback_body.hpp (pure, fuzzed by fuzz/fuzz_callbacks).
  auto parsed = parse_approval_callback_body(req.body);
  if (auto* e = std::get_if<callback_body_error>(&parsed))
    return reply(outcome_response(api_outcome::bad_request, e->message));
  auto& fields = std::get<approval_callback_body>(parsed);
  service::approval_delivery d;
  d.delivery_id = fields.callback_id;
  d.operation_id = fields.operation_id;
  d.result = fields.result;
  d.decision = fields.decision;
  d.payload = req.body;
  auto* svc = ctx.services;
  auto answer = [reply, delivery_id = d.delivery_id, operation_id = d.operation_id](const service::approval_intake& r) {
    if (!r.ok) {
      if (r.error.outcome == db_outcome::retryable)
        return reply(outcome_response(api_outcome::unavailable, {}, nullptr, "database: " + r.error.message));
      return reply(internal_error("database: " + r.error.message));
    }
    if (r.outcome == persistence::callback_outcome::ID_REUSED) {
      return reply(outcome_response(api_outcome::delivery_id_reused, {}, nullptr,
                                    "approval callback id " + delivery_id + " reused for " + operation_id));
    }
    reply(outcome_response(persistence::to_string(r.outcome)));
  };
  // Durable before the 2xx: the ledger row and the transition commit in one transaction; delivery
  // to the actor is only a nudge, so a crash after the 2xx loses nothing (rehydration resumes).
  // That transaction is the group commit's when the committer takes it (it shares the commit of
  // the transitions ready at the same moment).
  if (service::take_approval_grouped(*svc, d, claims, answer)) return;
  // Callbacks use the reserved share of the queue: a sender gives up after a few retries, so a
  // callback refused under load may be lost, while a refused submit is retried by its client.
  bool queued =
      ctx.db.try_submit([svc, claims, d = std::move(d), answer](
                            persistence::db_context& db) { answer(service::take_approval(db, *svc, d, claims.get())); },
                        persistence::db_pool::lane::reserved);
  if (!queued) reply(middleware::outcome_response(middleware::api_outcome::overloaded));
}

void deploy_callback(service_context& ctx, std::shared_ptr<service::delivery_claims> claims, http_server::request& req,
                     http_server::responder reply) {
  auto snap = ctx.config.current();
  const auto& secret = snap->callbacks().deploy_secret;
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
  service::deploy_delivery d;
  d.cb = fields.cb;
  d.operation_ids = fields.operation_ids;
  d.payload = fields.payload;
  // The callback's project when it is one of the configured repositories (exact path), else "".
  const std::string our_project = snap->repositories().find(d.cb.project) ? d.cb.project : std::string();
  auto* svc = ctx.services;
  auto answer = [reply](const service::deploy_intake& r) {
    switch (r.status) {
      case service::deploy_intake_status::duplicate: return reply(outcome_response("DUPLICATE"));
      case service::deploy_intake_status::record_failed:
        return reply(
            internal_error("database: " + r.error.message, r.error.outcome == db_outcome::retryable ? 503 : 500));
      case service::deploy_intake_status::apply_failed:
        // Recorded but not applied: the ledger row stays PENDING and the 5xx makes the sender
        // retry; the retry finds it PENDING and applies it.
        return reply(outcome_response(api_outcome::unavailable, {}, nullptr, "database: " + r.error.message));
      case service::deploy_intake_status::applied: break;
    }
    reply(outcome_response(persistence::to_string(r.outcome),
                           {{"matched", r.matched}, {"validated", r.validated}, {"failed", r.failed}}));
  };
  // A success naming one change commits with the transitions ready at the same moment.
  if (service::take_deploy_grouped(*svc, claims, d, our_project, answer)) return;
  // Callbacks use the reserved share of the queue: a sender gives up after a few retries, so a
  // callback refused under load may be lost, while a refused submit is retried by its client.
  bool queued = ctx.db.try_submit(
      [svc, claims, d = std::move(d), our_project, answer](persistence::db_context& db) {
        answer(service::take_deploy(db, *svc, *claims, d, our_project));
      },
      persistence::db_pool::lane::reserved);
  if (!queued) reply(middleware::outcome_response(middleware::api_outcome::overloaded));
}

service::gitlab_delivery::kind delivery_kind(gitlab_hook k) {
  switch (k) {
    case gitlab_hook::pipeline: return service::gitlab_delivery::kind::pipeline;
    case gitlab_hook::merge_request: return service::gitlab_delivery::kind::merge_request;
    case gitlab_hook::deployment: return service::gitlab_delivery::kind::deployment;
    case gitlab_hook::other: break;
  }
  return service::gitlab_delivery::kind::other;
}

void gitlab_webhook(service_context& ctx, std::shared_ptr<service::delivery_claims> claims,
                    const service::tell_batch_fn& tell_batch, http_server::request& req, http_server::responder reply) {
  // Parsing: gitlab_webhook_body.hpp (pure). The secret is the project's, so the project is read
  // first; every other field is judged only once the sender is authenticated.
  auto hook = parse_gitlab_hook_body(req.body, req.header("x-gitlab-event-uuid"), req.header("idempotency-key"));
  if (hook.project.empty()) return reply(outcome_response(api_outcome::bad_request, hook.error));
  auto snap = ctx.config.current();
  const auto* repo = snap->repositories().find(hook.project);
  if (!repo) {
    // Not ours (a hook left configured on another project): answered 2xx so GitLab does not
    // disable the hook after repeated failures, and nothing is recorded.
    count_callback(ctx.metrics, "gitlab", "IGNORED");
    return reply(outcome_response("IGNORED", {{"reason", "unknown project"}}));
  }
  auto token = req.header("x-gitlab-token");
  if (repo->webhook_secret.empty() || !token || !ids::constant_time_equal(*token, repo->webhook_secret)) {
    count_callback(ctx.metrics, "gitlab", "UNAUTHENTICATED");
    return reply(outcome_response(api_outcome::unauthenticated, {}, nullptr, "webhook token missing or invalid"));
  }
  if (!hook.error.empty()) return reply(outcome_response(api_outcome::bad_request, hook.error));
  service::gitlab_delivery d;
  d.what = delivery_kind(hook.kind);
  d.delivery_id = hook.delivery_id;
  d.project = hook.project;
  d.mr_iid = hook.mr_iid;
  d.pipeline_id = hook.kind == gitlab_hook::deployment ? hook.deployment_id : hook.pipeline_id;
  d.sha = hook.sha;
  d.status = hook.status;
  d.action = hook.action;
  d.merge_commit_sha = hook.merge_commit_sha;
  d.payload = std::move(hook.payload);
  auto* svc = ctx.services;
  // Callbacks' reserved share of the queue, as the other callbacks: GitLab gives up on a hook that
  // keeps failing.
  bool queued = ctx.db.try_submit(
      [svc, claims, tell_batch, d = std::move(d), reply](persistence::db_context& db) {
        auto r = service::take_gitlab_event(db, *svc, *claims, d, tell_batch);
        switch (r.status) {
          case service::gitlab_intake_status::duplicate: return reply(outcome_response("DUPLICATE"));
          case service::gitlab_intake_status::record_failed:
            return reply(
                internal_error("database: " + r.error.message, r.error.outcome == db_outcome::retryable ? 503 : 500));
          case service::gitlab_intake_status::apply_failed:
            return reply(outcome_response(api_outcome::unavailable, {}, nullptr, "database: " + r.error.message));
          case service::gitlab_intake_status::answered: break;
        }
        nlohmann::json extra = {{"delivered", r.delivered}};
        if (d.what == service::gitlab_delivery::kind::deployment) {
          extra = {{"matched", r.deploy.matched}, {"validated", r.deploy.validated}, {"failed", r.deploy.failed}};
        }
        reply(outcome_response(r.outcome, extra));
      },
      persistence::db_pool::lane::reserved);
  if (!queued) reply(middleware::outcome_response(middleware::api_outcome::overloaded));
}

/// POST /api/v1/ops/reconcile: one reconciliation run now, the same code the timer runs; answers
/// what it did. Overlapping with a timer run is safe (mark_validated flips exactly once).
/// Every run is audited with its result (like every operator action): who ran it and what it did.
void manual_reconcile(service_context& ctx, const http_server::request& req, http_server::responder reply) {
  auto who = authenticated_operator(req).value_or("");
  auto* db = &ctx.db;
  // The report goes into the entry's params (JSON); the outcome column holds a short word.
  auto audit = [db, who](std::string outcome, std::string report_json = {}) {
    persistence::audit_entry e;
    e.operator_name = who;
    e.action = "reconcile";
    e.target = "deploy confirmations";
    e.outcome = std::move(outcome);
    e.params_json = std::move(report_json);
    bool queued = db->try_submit([e](persistence::db_context& c) {
      auto r = persistence::insert_audit(c, e);
      if (!r.ok()) log::error("ops.reconcile_audit_failed", {{"error", r.error.message}});
    });
    if (!queued) log::error("ops.reconcile_audit_dropped", {{"operator", who}});
  };
  bool queued = actors::submit_reconciliation(*ctx.services, "manual", [reply, audit](actors::reconcile_report r) {
    if (!r.ok) {
      audit("ERROR");
      return reply(outcome_response(api_outcome::unavailable, {}, nullptr, "reconciliation: " + r.error));
    }
    auto report = actors::to_json(r);
    audit("APPLIED:" + std::to_string(r.validated), report.dump());
    reply(ok(report));
  });
  if (!queued) {
    audit("REFUSED");
    reply(middleware::outcome_response(middleware::api_outcome::overloaded));
  }
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
  r.add({routes::approval_callback, [&ctx, claims = std::make_shared<service::delivery_claims>()](
                                        http_server::request& req, const path_params&, http_server::responder reply) {
           approval_callback(ctx, claims, req, std::move(reply));
         }});
  r.add({routes::deploy_callback, [&ctx, claims = std::make_shared<service::delivery_claims>()](
                                      http_server::request& req, const path_params&, http_server::responder reply) {
           deploy_callback(ctx, claims, req, std::move(reply));
         }});
}

void add_gitlab_webhook_route(router& r, service_context& ctx, std::optional<actors::batch_coordinator> batch) {
  service::tell_batch_fn tell_batch;
  if (batch) {
    tell_batch = [coordinator = *batch](const std::string& project, std::int64_t mr_iid) {
      caf::anon_send(coordinator, actors::batch_webhook_atom::value, project, mr_iid);
    };
  }
  r.add({routes::gitlab_webhook, [&ctx, claims = std::make_shared<service::delivery_claims>(), tell_batch](
                                     http_server::request& req, const path_params&, http_server::responder reply) {
           gitlab_webhook(ctx, claims, tell_batch, req, std::move(reply));
         }});
}

void add_reconcile_route(router& r, service_context& ctx) {
  r.add({routes::ops_reconcile, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           manual_reconcile(ctx, req, std::move(reply));
         }});
}

}  // namespace changeflow::http
