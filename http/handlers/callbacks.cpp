#include "http/handlers/callbacks.hpp"

#include "actors/request_actor.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "http/envelope.hpp"
#include "messages/messages.hpp"
#include "persistence/callback_repo.hpp"

#include <caf/all.hpp>
#include <cppconn/exception.h>

namespace changeflow::http {

namespace {

using persistence::db_outcome;

http_server::response outcome_response(std::string_view outcome, nlohmann::json extra = nlohmann::json::object()) {
  extra["outcome"] = outcome;
  // Always 2xx once authenticated and well-formed, so the sender stops retrying.
  return ok(extra);
}

/// Tells the operation's actor to reload its row; spawns one when none lives here (the process
/// restarted, or the actor had stopped) and the operation needs it.
void nudge(actors::services* svc, persistence::db_context& db, const std::string& operation_id,
           const std::string& cause) {
  if (auto a = svc->actors->find(operation_id)) {
    caf::anon_send(*a, messages::row_changed{cause});
    return;
  }
  auto row = persistence::load_operation(db.get(), operation_id);
  if (!row.ok() || !workflow::needs_actor(row.value.step)) return;
  actors::spawn_request_actor(*svc, actors::seed_from_row(row.value, svc->now_ms()));
}

void approval_callback(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto snap = ctx.config.current();
  if (!approval_signature_valid(req, snap->get_string("callbacks.approval_secret"))) {
    ctx.metrics.inc("changeflow_callbacks_total", "Callbacks by kind and outcome",
                    {{"kind", "approval"}, {"outcome", "UNAUTHENTICATED"}});
    return reply(client_error(401, "UNAUTHENTICATED", "Callback signature missing or invalid"));
  }
  auto j = nlohmann::json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return reply(client_error(400, "BAD_REQUEST", "Body must be a JSON object"));
  auto text = [&](const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string(); };
  std::string callback_id = text("callbackId");
  std::string operation_id = text("operationId");
  std::string result = text("result");
  if (callback_id.empty() || callback_id.size() > 128) {
    return reply(client_error(400, "BAD_REQUEST", "'callbackId' is required (1-128 characters)"));
  }
  if (!ids::is_uuid(operation_id)) return reply(client_error(400, "BAD_REQUEST", "'operationId' must be a UUID"));
  persistence::approval_result decision;
  if (result == "APPROVED") {
    decision = persistence::approval_result::APPROVED;
  } else if (result == "REJECTED") {
    decision = persistence::approval_result::REJECTED;
  } else if (result == "WITHDRAWN") {
    decision = persistence::approval_result::WITHDRAWN;
  } else {
    return reply(client_error(400, "BAD_REQUEST", "'result' must be APPROVED, REJECTED or WITHDRAWN"));
  }
  auto* svc = ctx.services;
  auto* metrics = &ctx.metrics;
  std::string body = req.body;
  // Durable before the 2xx: the ledger row and the transition commit in one transaction; delivery
  // to the actor is only a nudge, so a crash after the 2xx loses nothing (rehydration resumes).
  bool queued = ctx.db.try_submit([=](persistence::db_context& db) {
    try {
      auto r = persistence::apply_approval_callback(db.get(), callback_id, operation_id, decision, body);
      if (!r.ok()) {
        if (r.outcome == db_outcome::retryable) {
          db.reset();
          return reply(internal_error("database: " + r.error.message, 503));
        }
        return reply(internal_error("database: " + r.error.message));
      }
      auto outcome = std::string(persistence::to_string(r.value.outcome));
      metrics->inc("changeflow_callbacks_total", "Callbacks by kind and outcome",
                   {{"kind", "approval"}, {"outcome", outcome}});
      log::info("callback.approval", {{"operation_id", operation_id}, {"callback_id", callback_id},
                                      {"result", result}, {"outcome", outcome}});
      if (r.value.outcome == persistence::callback_outcome::APPLIED) nudge(svc, db, operation_id, "approval callback");
      reply(outcome_response(outcome));
    } catch (const sql::SQLException& e) {
      db.reset();
      reply(internal_error(std::string("database unreachable: ") + e.what(), 503));
    }
  });
  if (!queued) reply(client_error(503, "OVERLOADED", "The service is overloaded; retry later"));
}

void deploy_callback(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto snap = ctx.config.current();
  auto secret = snap->get_string("callbacks.deploy_secret");
  auto token = req.header("x-gitlab-token");
  if (!secret || !token || !ids::constant_time_equal(*token, *secret)) {
    ctx.metrics.inc("changeflow_callbacks_total", "Callbacks by kind and outcome",
                    {{"kind", "deploy"}, {"outcome", "UNAUTHENTICATED"}});
    return reply(client_error(401, "UNAUTHENTICATED", "Callback token missing or invalid"));
  }
  auto j = nlohmann::json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return reply(client_error(400, "BAD_REQUEST", "Body must be a JSON object"));
  persistence::deploy_callback_in cb;
  cb.delivery_id = j.contains("deliveryId") && j["deliveryId"].is_string() ? j["deliveryId"].get<std::string>() : "";
  if (cb.delivery_id.empty()) {
    auto header_key = req.header("idempotency-key");
    if (header_key) cb.delivery_id = std::string(*header_key);
  }
  if (cb.delivery_id.empty() || cb.delivery_id.size() > 128) {
    return reply(client_error(400, "BAD_REQUEST", "'deliveryId' is required (1-128 characters)"));
  }
  if (!j.contains("mrIid") || !j["mrIid"].is_number_integer() || j["mrIid"].get<std::int64_t>() <= 0) {
    return reply(client_error(400, "BAD_REQUEST", "'mrIid' must be a positive integer"));
  }
  cb.mr_iid = j["mrIid"].get<std::int64_t>();
  cb.project = j.contains("project") && j["project"].is_string() ? j["project"].get<std::string>() : "";
  if (j.contains("pipelineId") && j["pipelineId"].is_number_integer()) cb.pipeline_id = j["pipelineId"].get<std::int64_t>();
  cb.status = j.contains("status") && j["status"].is_string() ? j["status"].get<std::string>() : "";
  std::vector<std::string> operation_ids;
  if (j.contains("operationIds") && j["operationIds"].is_array()) {
    for (const auto& id : j["operationIds"]) {
      if (!id.is_string() || !ids::is_uuid(id.get<std::string>())) {
        return reply(client_error(400, "BAD_REQUEST", "'operationIds' must be an array of UUIDs"));
      }
      operation_ids.push_back(id.get<std::string>());
    }
    cb.operation_ids_json = j["operationIds"].dump();
  }
  auto* metrics = &ctx.metrics;
  bool queued = ctx.db.try_submit([=](persistence::db_context& db) {
    try {
      auto& conn = db.get();
      auto recorded = persistence::record_deploy_callback(conn, cb);
      if (!recorded.ok()) {
        if (recorded.outcome == db_outcome::retryable) db.reset();
        return reply(internal_error("database: " + recorded.error.message,
                                    recorded.outcome == db_outcome::retryable ? 503 : 500));
      }
      if (recorded.value == persistence::record_outcome::duplicate) {
        metrics->inc("changeflow_callbacks_total", "Callbacks by kind and outcome",
                     {{"kind", "deploy"}, {"outcome", "DUPLICATE"}});
        return reply(outcome_response("DUPLICATE"));
      }
      int flipped = 0;
      if (cb.status == "success") {
        // Exact match when the pipeline names the operations; otherwise the MR number is recorded and
        // reconciliation infers the rest from the watermark.
        for (const auto& id : operation_ids) {
          auto r = persistence::mark_validated(conn, id, "callback");
          if (r.ok() && r.value) {
            ++flipped;
            metrics->inc("changeflow_validated_total", "Operations validated, by path", {{"via", "callback"}});
          }
        }
      }
      metrics->inc("changeflow_callbacks_total", "Callbacks by kind and outcome", {{"kind", "deploy"}, {"outcome", "APPLIED"}});
      reply(outcome_response("APPLIED", {{"validated", flipped}}));
    } catch (const sql::SQLException& e) {
      db.reset();
      reply(internal_error(std::string("database unreachable: ") + e.what(), 503));
    }
  });
  if (!queued) reply(client_error(503, "OVERLOADED", "The service is overloaded; retry later"));
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
  r.add({"POST", "/api/v1/callbacks/approval",
         [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           approval_callback(ctx, req, std::move(reply));
         }});
  r.add({"POST", "/api/v1/callbacks/deploy",
         [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           deploy_callback(ctx, req, std::move(reply));
         }});
}

}  // namespace changeflow::http
