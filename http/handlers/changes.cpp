#include "http/handlers/changes.hpp"

#include "actors/request_actor.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "config/test_hooks.hpp"
#include "http/dto/change_dto.hpp"
#include "http/envelope.hpp"
#include "http/handlers/answers.hpp"
#include "http/middleware/authorization.hpp"
#include "http/middleware/error_mapping.hpp"
#include "http/middleware/ownership.hpp"
#include "persistence/binding_repo.hpp"
#include "service/end_change.hpp"
#include "service/idempotency.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>

namespace changeflow::http {

namespace {

using middleware::api_outcome;
using middleware::outcome_response;
using persistence::db_outcome;

http_server::response overloaded() {
  return outcome_response(api_outcome::overloaded);
}

/// 404 for an operation the caller may not see: the same answer as for one that does not exist, so
/// ids cannot be probed for existence.
http_server::response no_such_operation() {
  return outcome_response(api_outcome::not_found, "No such operation");
}

/// Who asks, as the middleware chain resolved it. nullopt only where auth.required is false and no
/// token was sent: the anonymous caller, who is served without per-caller checks. The switch is read
/// again here so a handler never serves an anonymous caller the chain would now refuse.
struct asking {
  std::optional<std::string> account;
  bool refused = false;  // anonymous although an identity is required: answer 401
};
asking who_asks(service_context& ctx, const http_server::request& req) {
  asking a;
  a.account = authenticated_operator(req);
  if (!a.account && ctx.config.current()->flag("auth.required")) a.refused = true;
  return a;
}

/// One permission round trip for `rules`; `then` gets the granted codes, or nullopt on any failure
/// (no service, pool full, timeout, error answer, a throw): failures grant nothing.
void ask_permissions(service_context& ctx, const std::string& account, std::vector<std::string> rules,
                     std::function<void(std::optional<std::set<std::string>>)> then) {
  if (!ctx.check_permissions || rules.empty()) return then(std::nullopt);
  auto once = std::make_shared<std::atomic<bool>>(false);
  auto answer = [then, once](middleware::permission_outcome o) {
    if (once->exchange(true)) return;
    if (!o.granted) log::info("http.permission_check_failed", {{"error", o.error}});
    then(std::move(o.granted));
  };
  try {
    ctx.check_permissions(account, std::move(rules), answer);
  } catch (const std::exception& e) {
    answer(middleware::permission_outcome::failed(std::string("permission check threw: ") + e.what()));
  }
}

http_server::response access_denied(std::string_view detail) {
  return middleware::deny_response(middleware::authz_decision::deny_403, detail);
}
http_server::response authentication_required() {
  return middleware::deny_response(middleware::authz_decision::deny_401, "auth.required changed under the request");
}

constexpr std::size_t max_idempotency_key_length = 200;
constexpr std::string_view submit_route = "/api/v1/changes";

/// Printable ASCII, 1..200 characters (the stored key is prefixed and must fit VARCHAR(255)).
bool valid_idempotency_key(std::string_view k) {
  if (k.empty() || k.size() > max_idempotency_key_length) return false;
  return std::all_of(k.begin(), k.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; });
}

/// What frees a target whose current change is at `s`, in words for the user.
std::string what_unblocks(workflow::step s) {
  auto p = workflow::phase_of(s);
  if (p == workflow::phase::MERGED) return "it has merged; wait for its deploy confirmation";
  if (p == workflow::phase::CREATE_FAILED || p == workflow::phase::HANDLE_FAILED) {
    return "it failed and awaits an operator: an operator re-triggers or closes it, or its requester cancels it";
  }
  return "wait for it to finish, or cancel it";
}

/// 409 naming the change that holds the target (one extra read, on the refusal path only). The
/// blocker may have ended between the refusal and this read: the client is then told to retry.
http_server::response blocked_response(persistence::db_context& db, const persistence::new_operation& op) {
  auto binding = persistence::find_binding(db, op.subject_id, op.repository, op.target_key);
  if (!binding.ok()) {
    return outcome_response(api_outcome::in_progress,
                            "Another change for this subject and target is in progress; retry shortly");
  }
  auto blocker = persistence::load_operation(db, binding.value.operation_id);
  if (!blocker.ok() || workflow::is_reappliable(blocker.value.phase)) {
    return outcome_response(api_outcome::in_progress,
                            "Another change for this subject and target just started or ended; retry shortly",
                            {{"blockingOperationId", binding.value.operation_id}});
  }
  const auto& b = blocker.value;
  return outcome_response(api_outcome::in_progress,
                          "Change " + b.operation_id + " for this subject and target is at " +
                              std::string(workflow::to_string(b.step)) + "; " + what_unblocks(b.step),
                          {{"blockingOperationId", b.operation_id},
                           {"blockingPhase", workflow::to_string(b.phase)},
                           {"blockingStep", workflow::to_string(b.step)},
                           {"statusUrl", "/api/v1/changes/" + b.operation_id},
                           {"unblockedBy", what_unblocks(b.step)}});
}

/// Creates the operation and spawns its actor; the response the client gets (and, for 2xx, the one
/// stored for replay). Runs on a database worker.
http_server::response create_and_start(persistence::db_context& db, actors::services* svc,
                                       const persistence::new_operation& op) {
  auto r = persistence::create_operation(db, op);
  if (!r.ok()) return db_failure(r.error);
  nlohmann::json data = {{"operationId", op.operation_id}, {"statusUrl", "/api/v1/changes/" + op.operation_id}};
  switch (r.value) {
    case persistence::create_outcome::created: {
      persistence::operation_row row;
      row.operation_id = op.operation_id;
      row.subject_id = op.subject_id;
      row.target_key = op.target_key;
      row.flow = std::string(workflow::to_string(op.flow));
      row.step = op.initial_step;
      row.phase = workflow::phase_of(op.initial_step);
      row.version = 1;
      row.title = op.title;
      row.payload_json = op.payload_json;
      row.requester = op.requester;
      row.repository = op.repository;
      row.target_branch = op.target_branch;
      row.updated_at_ms = svc->now_ms();
      actors::spawn_request_actor(*svc, actors::seed_from_row(row, svc->now_ms()));
      svc->metrics->inc("changeflow_submissions_total", "Accepted change submissions", {{"outcome", "ACCEPTED"}});
      data["phase"] = workflow::to_string(row.phase);
      data["step"] = workflow::to_string(row.step);
      return outcome_response(api_outcome::accepted, {}, data);
    }
    case persistence::create_outcome::duplicate_operation:
      // The operation exists but this is not a replay of a stored response (the idempotency record
      // expired, or another Idempotency-Key was used): the client keeps its form locked.
      return outcome_response(api_outcome::duplicate_submit, {}, data);
    case persistence::create_outcome::in_progress:
    case persistence::create_outcome::preempted: return blocked_response(db, op);
  }
  return outcome_response(api_outcome::internal, {}, nullptr, "unknown create outcome");
}

/// Idempotent submit (service/idempotency): the gate, then create-and-start, then the answer stored
/// for replay (2xx only). A re-run after a takeover is safe because the operation id is the same on
/// the re-run (the client's, or one derived from the key): create_operation answers
/// duplicate_operation when the dead request got as far as creating it, and simply creates it when not.
http_server::response submit_once(persistence::db_context& db, actors::services* svc,
                                  const persistence::new_operation& op, const service::idempotent_request& idem) {
  auto gate = service::begin_idempotent(db, *svc, idem);
  if (gate.verdict != service::gate_verdict::run) return gate_response(gate, idem.key);
  config::hold_for_test_hook(*svc->config->current(), "faults.hold_after_idempotency_begin_ms");
  http_server::response res;
  try {
    res = create_and_start(db, svc, op);
  } catch (...) {
    service::finish_idempotent(db, idem, {500, {}});
    throw;
  }
  service::finish_idempotent(db, idem, {res.status, res.body});
  return res;
}

void store_submission(service_context& ctx, const http_server::request& req, const dto::submit_request& request,
                      const std::string& requester, http_server::responder reply);

/// A submission is for a subject the requester is permitted for (its rule code, or an operator
/// code), checked in one round trip after the body is parsed; denied -> 403 "Access denied".
void submit(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  auto parsed = dto::parse_submit(req.body);
  if (auto* err = std::get_if<dto::parse_error>(&parsed)) {
    return reply(outcome_response(api_outcome::bad_request, err->message));
  }
  auto request = std::get<dto::submit_request>(std::move(parsed));
  // Where the change goes must be a configured repository and branch: refused before anything is
  // asked or written, with the configured choices in the message.
  auto where =
      config::resolve_target(ctx.config.current()->repositories(), {request.repository, request.target_branch});
  if (auto* refusal = std::get_if<config::target_refusal>(&where)) {
    return reply(outcome_response(api_outcome::bad_request, refusal->message));
  }
  const auto& target = std::get<config::resolved_target>(where);
  request.repository = target.repository;
  request.target_branch = target.target_branch;
  if (!caller.account) {
    return store_submission(ctx, req, request, std::string(middleware::anonymous_requester), std::move(reply));
  }
  auto rules = middleware::rules_for_subject(*ctx.config.current(), request.subject);
  auto shared_req = std::make_shared<http_server::request>(req);
  auto account = *caller.account;
  ask_permissions(
      ctx, account, rules.to_ask(),
      [&ctx, shared_req, request, account, rules, reply](std::optional<std::set<std::string>> granted) {
        if (!middleware::permitted_for_subject({account, std::move(granted)}, rules)) {
          return reply(access_denied("submit: " + account + " not permitted for subject " + request.subject));
        }
        store_submission(ctx, *shared_req, request, account, reply);
      });
}

void store_submission(service_context& ctx, const http_server::request& req, const dto::submit_request& request,
                      const std::string& requester, http_server::responder reply) {
  // Key: the Idempotency-Key header, else the client's operationId. Without either the request
  // is not deduplicated (a fresh server-side id is generated): clients should send one.
  std::optional<std::string> key;
  if (auto h = req.header("idempotency-key")) {
    if (!valid_idempotency_key(*h)) {
      return reply(
          outcome_response(api_outcome::bad_request, "'Idempotency-Key' must be 1-200 printable ASCII characters"));
    }
    key = std::string(*h);
  } else if (request.operation_id) {
    key = *request.operation_id;
  }
  auto snap = ctx.config.current();
  auto order = workflow::parse_flow(snap->text("flow.default")).value_or(workflow::flow::approve_then_create);
  persistence::new_operation op;
  // Without a client id, the id is derived from the key: a retry (or the re-run of a request that
  // died mid-way) names the same operation, so it can never create a second change.
  // Keys are the requester's own: another caller's identical key is another request.
  std::string scoped_key = key ? "submit:" + requester + ":" + *key : std::string();
  if (scoped_key.size() > 250) scoped_key = "submit:" + ids::sha256_hex(scoped_key);
  op.operation_id = request.operation_id.value_or(key ? ids::uuid_from_name(scoped_key) : ids::new_uuid());
  op.subject_id = request.subject;
  op.target_key = request.target;
  op.flow = order;
  op.initial_step =
      order == workflow::flow::approve_then_create ? workflow::step::APPROVAL_SENDING : workflow::step::CREATE_STARTED;
  op.title = request.title;
  op.payload_json = dto::payload_json(request);
  op.owner_instance = ctx.services->instance_id;
  op.requester = requester;
  op.repository = request.repository.value_or("");
  op.target_branch = request.target_branch.value_or("");
  op.actor = "user:" + requester;
  service::idempotent_request idem;
  idem.key = scoped_key;
  if (key) idem.fingerprint = service::request_fingerprint("POST", submit_route, req.body);
  idem.ttl = service::idempotency_ttl(*snap);
  idem.in_flight_timeout = service::idempotency_in_flight_timeout(*snap);
  idem.route = "submit";
  auto* svc = ctx.services;
  bool queued = ctx.db.try_submit([op, reply, svc, idem](persistence::db_context& db) {
    try {
      if (idem.key.empty()) return reply(create_and_start(db, svc, op));
      reply(submit_once(db, svc, op, idem));
    } catch (const std::exception& e) {
      reply(outcome_response(api_outcome::internal, {}, nullptr, std::string("submit failed: ") + e.what()));
    }
  });
  if (!queued) reply(overloaded());
}

/// Shows an operation to its requester, to callers permitted for its subject and to operators; to
/// anyone else it does not exist (404, the same body as an unknown id). The requester needs no
/// permission round trip; everyone else costs one, and a failed check shows nothing.
void get_one(service_context& ctx, const http_server::request& req, const std::string& id,
             http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  if (!ids::is_uuid(id)) return reply(no_such_operation());
  auto* svc = ctx.services;
  bool queued = ctx.read_pool().try_submit([&ctx, caller, id, reply, svc](persistence::db_context& db) {
    auto row = persistence::load_operation(db, id);
    if (row.outcome == db_outcome::not_found) return reply(no_such_operation());
    if (!row.ok()) return reply(db_failure(row.error));
    auto events = persistence::list_events(db, id);
    if (!events.ok()) return reply(db_failure(events.error));
    auto data = dto::to_json(row.value);
    nlohmann::json timeline = nlohmann::json::array();
    for (const auto& e : events.value) timeline.push_back(dto::to_json(e));
    data["timeline"] = std::move(timeline);
    data["live"] = svc->actors->find(id).has_value();
    if (!caller.account || middleware::is_requester(*caller.account, row.value)) {
      return reply(outcome_response(api_outcome::ok, {}, data));
    }
    auto rules = middleware::rules_for_subject(*ctx.config.current(), row.value.subject_id);
    ask_permissions(
        ctx, *caller.account, rules.to_ask(),
        [account = *caller.account, op = std::move(row.value), rules, data = std::move(data),
         reply](std::optional<std::set<std::string>> granted) {
          if (!middleware::may_use({account, std::move(granted)}, op, rules, middleware::operation_use::view)) {
            log::info("http.change_hidden", {{"operation_id", op.operation_id}, {"caller", account}});
            return reply(no_such_operation());
          }
          reply(outcome_response(api_outcome::ok, {}, data));
        });
  });
  if (!queued) reply(overloaded());
}

void reply_with_rows(const persistence::db_result<std::vector<persistence::operation_row>>& rows,
                     const http_server::responder& reply) {
  if (!rows.ok()) return reply(db_failure(rows.error));
  nlohmann::json items = nlohmann::json::array();
  for (const auto& row : rows.value) items.push_back(dto::to_json(row));
  reply(outcome_response(api_outcome::ok, {}, {{"items", items}}));
}

/// Without `subject`: the caller's own changes (no permission round trip). With `subject`: that
/// subject's changes, for callers permitted for it or operators (one round trip; denied -> 403).
void list_changes(service_context& ctx, const http_server::request& req, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  auto subject = req.query_param("subject");
  if (subject && subject->empty())
    return reply(outcome_response(api_outcome::bad_request, "'subject' must not be empty"));
  int limit = 50;
  if (auto l = req.query_param("limit")) {
    try {
      limit = std::clamp(std::stoi(*l), 1, 500);
    } catch (...) {
      return reply(outcome_response(api_outcome::bad_request, "'limit' must be a number"));
    }
  }
  auto run = [&ctx, limit, reply](std::optional<std::string> by_subject, std::string requester) {
    bool queued = ctx.read_pool().try_submit([by_subject, requester, limit, reply](persistence::db_context& db) {
      if (by_subject) return reply_with_rows(persistence::list_operations_by_subject(db, *by_subject, limit), reply);
      reply_with_rows(persistence::list_operations_by_requester(db, requester, limit), reply);
    });
    if (!queued) reply(overloaded());
  };
  std::string requester = caller.account.value_or(std::string(middleware::anonymous_requester));
  if (!subject) return run(std::nullopt, requester);
  if (!caller.account) return run(*subject, requester);
  auto rules = middleware::rules_for_subject(*ctx.config.current(), *subject);
  ask_permissions(ctx, requester, rules.to_ask(),
                  [run, requester, rules, s = *subject, reply](std::optional<std::set<std::string>> granted) {
                    if (!middleware::permitted_for_subject({requester, std::move(granted)}, rules)) {
                      return reply(access_denied("list: " + requester + " not permitted for subject " + s));
                    }
                    run(s, requester);
                  });
}

/// Runs the cancel use case for a caller already authorized, and maps its result.
void run_cancel(service_context& ctx, const std::string& id, std::string actor, std::string reason,
                http_server::responder reply) {
  service::end_request r;
  r.kind = service::end_kind::cancel;
  r.operation_id = id;
  r.by = workflow::actor_kind::requester;
  r.actor = std::move(actor);
  r.reason = std::move(reason);
  service::end_change(*ctx.services, r, [reply, id](service::end_result e) {
    nlohmann::json data = {{"operationId", id},
                           {"phase", workflow::to_string(workflow::phase_of(e.to))},
                           {"step", workflow::to_string(e.to)},
                           {"version", e.version},
                           {"withdrawn", e.withdrawn},
                           {"statusUrl", "/api/v1/changes/" + id}};
    switch (e.status) {
      case service::end_status::ended: return reply(outcome_response(api_outcome::ok, e.message, data));
      case service::end_status::already_ended:
        data["alreadyCancelled"] = true;
        return reply(outcome_response(api_outcome::ok, e.message, data));
      case service::end_status::merged_wins:
        return reply(outcome_response(api_outcome::already_merged, e.message, data));
      case service::end_status::not_allowed:
      case service::end_status::stale: return reply(outcome_response(api_outcome::conflict, e.message, data));
      case service::end_status::not_found: return reply(no_such_operation());
      case service::end_status::overloaded: return reply(overloaded());
      case service::end_status::unavailable: break;
    }
    reply(outcome_response(api_outcome::unavailable, e.message, nullptr, e.detail));
  });
}

/// POST /api/v1/changes/{id}/cancel: the requester (or an operator) withdraws a change that has not
/// merged. The use case (service::end_change) closes the open MR — unless it merged, which wins —,
/// writes CANCELLED, then withdraws the pending approval; a repeat answers "already cancelled".
/// Anyone else is told the change does not exist (404), as for reads. The requester needs no
/// permission round trip; anybody else costs one, and a failed check allows nothing.
void cancel(service_context& ctx, http_server::request& req, const std::string& id, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  if (!ids::is_uuid(id)) return reply(no_such_operation());
  auto parsed = dto::parse_cancel(req.body);
  if (auto* err = std::get_if<dto::parse_error>(&parsed))
    return reply(outcome_response(api_outcome::bad_request, err->message));
  auto reason = std::get<dto::cancel_request>(parsed).reason;
  if (!caller.account)
    return run_cancel(ctx, id, "user:" + std::string(middleware::anonymous_requester), reason, reply);
  bool queued =
      ctx.read_pool().try_submit([&ctx, account = *caller.account, id, reason, reply](persistence::db_context& db) {
        auto row = persistence::load_operation(db, id);
        if (row.outcome == db_outcome::not_found) return reply(no_such_operation());
        if (!row.ok()) return reply(db_failure(row.error));
        if (middleware::is_requester(account, row.value)) return run_cancel(ctx, id, "user:" + account, reason, reply);
        auto rules = middleware::rules_for_subject(*ctx.config.current(), row.value.subject_id);
        ask_permissions(ctx, account, rules.to_ask(),
                        [&ctx, account, op = std::move(row.value), rules, id, reason,
                         reply](std::optional<std::set<std::string>> granted) {
                          middleware::caller who{account, std::move(granted)};
                          if (!middleware::may_use(who, op, rules, middleware::operation_use::act)) {
                            log::info("http.cancel_refused", {{"operation_id", id}, {"caller", account}});
                            return reply(no_such_operation());
                          }
                          run_cancel(ctx, id, "operator:" + account, reason, reply);
                        });
      });
  if (!queued) reply(overloaded());
}

}  // namespace

void add_change_routes(router& r, service_context& ctx) {
  r.add({routes::submit_change, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           submit(ctx, req, std::move(reply));
         }});
  r.add({routes::get_change, [&ctx](http_server::request& req, const path_params& p, http_server::responder reply) {
           get_one(ctx, req, p.at("id"), std::move(reply));
         }});
  r.add({routes::cancel_change, [&ctx](http_server::request& req, const path_params& p, http_server::responder reply) {
           cancel(ctx, req, p.at("id"), std::move(reply));
         }});
  r.add({routes::list_changes, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           list_changes(ctx, req, std::move(reply));
         }});
}

}  // namespace changeflow::http
