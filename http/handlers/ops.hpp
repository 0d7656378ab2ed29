#pragma once
// The ops API: what operators see and what they may do, behind the ops rule codes.
//
// Reads: live actors of this instance (registry), operations across ALL instances (database),
// one operation in depth (timeline, callback ledger, live actor snapshot, allowed actions),
// overview counts, audit log, effective config, instances/leases, callback ledger.
//
// Actions (retrigger, fail, close, resend-approval, bulk retrigger/fail) are the use case
// service/operator_action; this file parses them and renders its results:
// - allowed only along the transition table's operator edges (workflow::allowed_targets with
//   actor_kind::operator_only); anything else is refused with 409 and a message naming the step;
// - written with operation_repo::transition guarded by (version, step), so an action that races
//   the workflow fails as 409 CONFLICT instead of overwriting newer state;
// - idempotent in two ways: an `Idempotency-Key` header stores the first 2xx answer in
//   idempotency_record and replays it byte for byte; without a key, `expectedVersion` in the body
//   makes a repeat refuse (the version moved) rather than act twice;
// - audited with persistence::insert_audit: the operator is the SERVER-resolved identity written
//   over the client's params (middleware::apply_operator_identity), params masked and truncated
//   (middleware::audit_params). Refusals are audited too.

#include "http/api.hpp"
#include "http/middleware/route_policy.hpp"
#include "http/router.hpp"
#include "workflow/operator_plan.hpp"
#include "workflow/status.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace changeflow::http {

/// Where the ops handlers learn the operator. Defaults to the identity the middleware chain wrote
/// (http::authenticated_operator); a function so tests and alternative front doors can swap it.
using operator_source = std::function<std::optional<std::string>(const http_server::request&)>;

/// Registers every /api/v1/ops/... route of this file (see docs/console.md for the list).
void add_ops_routes(router& r, service_context& ctx, operator_source who = nullptr);

// -- pure core, exposed for tests ---------------------------------------------------------------

/// [{"action": "retrigger", "target": "CREATE_MR_OPENED"}, ...] for the console's buttons.
nlohmann::json allowed_actions_json(workflow::step current);

}  // namespace changeflow::http
