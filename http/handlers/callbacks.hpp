#pragma once
#include "actors/batch_coordinator.hpp"
#include "http/api.hpp"

#include <optional>

namespace changeflow::http {
/// POST /api/v1/callbacks/approval and /api/v1/callbacks/deploy. Every authenticated, well-formed
/// callback is made durable (ledger row, deduplicated by its delivery id) before its 2xx, which
/// carries the classified outcome: APPLIED | DUPLICATE | IGNORED_STALE | OUT_OF_ORDER (deploy also
/// DEPLOY_FAILED); counted as changeflow_callbacks_total{kind,outcome}. Unauthenticated -> 401,
/// nothing recorded. See docs/callbacks.md.
void add_callback_routes(router& r, service_context& ctx);

/// POST /api/v1/webhooks/gitlab: GitLab's Pipeline, Merge Request and Deployment Hooks. The project
/// (project.path_with_namespace) must be a configured repository (else 2xx IGNORED, counted) and
/// X-Gitlab-Token its webhook_secret (else 401, counted, nothing recorded); deduplicated by
/// X-Gitlab-Event-UUID, durable before the 2xx. See service/gitlab_webhook.hpp, docs/callbacks.md.
void add_gitlab_webhook_route(router& r, service_context& ctx, std::optional<actors::batch_coordinator> batch);

/// POST /api/v1/ops/reconcile: runs one reconciliation pass now (the timer's code, on the db pool)
/// and answers {trigger, scanned, validated, alreadyValidated, waiting, failed, watermark}.
/// Policy: the ops policy (identity + auth.ops_rules, rate_limit.ops), as api.cpp ops_route().
void add_reconcile_route(router& r, service_context& ctx);

/// True when the approval callback carries a valid signature for `body`: `X-Signature: sha256=<hex
/// HMAC-SHA256(body, secret)>`, compared in constant time. A missing secret refuses everything.
bool approval_signature_valid(const http_server::request& req, const std::optional<std::string>& secret);
}  // namespace changeflow::http
