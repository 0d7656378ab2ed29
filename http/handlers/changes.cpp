#include "http/handlers/changes.hpp"

#include "actors/request_actor.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "http/dto/change_dto.hpp"
#include "http/envelope.hpp"
#include "http/middleware/error_mapping.hpp"
#include "http/middleware/idempotency.hpp"
#include "persistence/binding_repo.hpp"
#include "persistence/idempotency_repo.hpp"
#include "service/end_change.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <cppconn/exception.h>

namespace changeflow::http {

namespace {

using persistence::db_outcome;
using middleware::api_outcome;
using middleware::outcome_response;

http_server::response db_failure(const persistence::db_error& e) {
  if (e.outcome == db_outcome::retryable) return outcome_response(api_outcome::unavailable, {}, nullptr, "database: " + e.message);
  return outcome_response(api_outcome::internal, {}, nullptr, "database: " + e.message);
}

http_server::response overloaded() { return outcome_response(api_outcome::overloaded); }

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
  auto binding = persistence::find_binding(db.get(), op.subject_id, op.target_key);
  if (!binding.ok()) {
    if (binding.outcome == db_outcome::retryable) db.reset();
    return outcome_response(api_outcome::in_progress,
                            "Another change for this subject and target is in progress; retry shortly");
  }
  auto blocker = persistence::load_operation(db.get(), binding.value.operation_id);
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
  auto r = persistence::create_operation(db.get(), op);
  if (!r.ok()) {
    if (r.outcome == db_outcome::retryable) db.reset();
    return db_failure(r.error);
  }
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
    case persistence::create_outcome::preempted:
      return blocked_response(db, op);
  }
  return outcome_response(api_outcome::internal, {}, nullptr, "unknown create outcome");
}

/// Test hook (faults.hold_after_idempotency_begin_ms, hot, 0 = off): holds a submit between taking
/// its idempotency key and creating the operation, so a test can kill the process exactly there.
/// Capped, so a forgotten hook slows a database worker down but never keeps it.
void hold_after_idempotency_begin(const config::snapshot& snap) {
  auto hold = std::clamp<std::int64_t>(snap.int_or("faults.hold_after_idempotency_begin_ms", 0), 0, 60000);
  if (hold > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold));
}

/// Idempotent submit: begin (insert IN_FLIGHT or read the winner) -> run -> complete with the
/// ORIGINAL response so a retry replays it byte for byte. Only 2xx responses are stored: an error
/// drops the record, so the retry runs afresh instead of replaying a transient failure forever.
/// A record left IN_FLIGHT by a request that died is taken over by idem_begin and run again. That
/// is safe because the operation id is the same on the re-run (the client's, or one derived from the
/// key): create_operation answers duplicate_operation when the dead request got as far as creating
/// it, and simply creates it when not.
http_server::response submit_once(persistence::db_context& db, actors::services* svc,
                                  const persistence::new_operation& op, const std::string& key,
                                  const std::string& fingerprint, int ttl_seconds) {
  auto snap = svc->config->current();
  auto begun = persistence::idem_begin(db.get(), key, fingerprint, ttl_seconds,
                                       {svc->instance_id, middleware::idempotency_in_flight_timeout(*snap)});
  if (!begun.ok()) {
    if (begun.outcome == db_outcome::retryable) db.reset();
    return db_failure(begun.error);
  }
  if (!begun.value.fresh) {
    const auto& rec = *begun.value.existing;
    middleware::idempotency_record existing;
    existing.key = rec.key;
    existing.fingerprint = rec.fingerprint;
    existing.state = rec.state == persistence::idem_state::COMPLETED ? middleware::idempotency_state::completed
                                                                      : middleware::idempotency_state::in_flight;
    existing.status = static_cast<unsigned>(rec.status_code.value_or(0));
    existing.response_body = rec.response_body.value_or("");
    // The database already filtered out expired records with ITS clock; do not re-judge expiry
    // with ours (two clocks would disagree near the boundary).
    existing.expires_at = std::chrono::system_clock::time_point::max();
    switch (middleware::decide(existing, fingerprint, std::chrono::system_clock::now())) {
      case middleware::idempotency_decision::replay_stored_response: {
        http_server::response replay;
        replay.status = existing.status;
        replay.body = existing.response_body;
        replay.set_header("Idempotent-Replayed", "true");
        return replay;
      }
      case middleware::idempotency_decision::conflict_changed_body_422:
        return outcome_response(api_outcome::idempotency_mismatch, {}, nullptr, "idempotency key reused: " + key);
      case middleware::idempotency_decision::in_flight_409:
        return outcome_response(api_outcome::request_in_flight);
      case middleware::idempotency_decision::proceed_fresh:
        break;  // unreachable: the record is live
    }
    return outcome_response(api_outcome::unavailable, {}, nullptr, "idempotency record vanished: " + key);
  }
  hold_after_idempotency_begin(*snap);
  http_server::response res;
  try {
    res = create_and_start(db, svc, op);
  } catch (...) {
    persistence::idem_abandon(db.get(), key);
    throw;
  }
  if (res.status >= 200 && res.status < 300) {
    auto done = persistence::idem_complete(db.get(), key, static_cast<int>(res.status), res.body);
    if (!done.ok()) log::warn("idempotency.complete_failed", {{"key", key}, {"error", done.error.message}});
  } else {
    persistence::idem_abandon(db.get(), key);
  }
  return res;
}

void submit(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto parsed = dto::parse_submit(req.body);
  if (auto* err = std::get_if<dto::parse_error>(&parsed)) {
    return reply(outcome_response(api_outcome::bad_request, err->message));
  }
  auto request = std::get<dto::submit_request>(std::move(parsed));
  // Key: the Idempotency-Key header, else the client's operationId. Without either the request
  // is not deduplicated (a fresh server-side id is generated): clients should send one.
  std::optional<std::string> key;
  if (auto h = req.header("idempotency-key")) {
    if (!valid_idempotency_key(*h)) {
      return reply(outcome_response(api_outcome::bad_request,
                                    "'Idempotency-Key' must be 1-200 printable ASCII characters"));
    }
    key = std::string(*h);
  } else if (request.operation_id) {
    key = *request.operation_id;
  }
  auto snap = ctx.config.current();
  auto order = workflow::parse_flow(snap->string_or("flow.default", "approve_then_create"))
                   .value_or(workflow::flow::approve_then_create);
  persistence::new_operation op;
  // Without a client id, the id is derived from the key: a retry (or the re-run of a request that
  // died mid-way) names the same operation, so it can never create a second change.
  op.operation_id = request.operation_id.value_or(key ? ids::uuid_from_name("submit:" + *key) : ids::new_uuid());
  op.subject_id = request.subject;
  op.target_key = request.target;
  op.flow = order;
  op.initial_step = order == workflow::flow::approve_then_create ? workflow::step::APPROVAL_SENDING
                                                                  : workflow::step::CREATE_STARTED;
  op.title = request.title;
  op.payload_json = dto::payload_json(request);
  op.owner_instance = ctx.services->instance_id;
  op.actor = "user:" + request.subject;
  std::string scoped_key = key ? "submit:" + *key : std::string();
  std::string fingerprint = key ? middleware::request_fingerprint("POST", submit_route, req.body) : std::string();
  int ttl = static_cast<int>(middleware::idempotency_ttl(*snap).count());
  auto* svc = ctx.services;
  bool queued = ctx.db.try_submit([op, reply, svc, scoped_key, fingerprint, ttl](persistence::db_context& db) {
    try {
      if (scoped_key.empty()) return reply(create_and_start(db, svc, op));
      reply(submit_once(db, svc, op, scoped_key, fingerprint, ttl));
    } catch (const sql::SQLException& e) {
      db.reset();
      reply(outcome_response(api_outcome::unavailable, {}, nullptr, std::string("database unreachable: ") + e.what()));
    } catch (const std::exception& e) {
      reply(outcome_response(api_outcome::internal, {}, nullptr, std::string("submit failed: ") + e.what()));
    }
  });
  if (!queued) reply(overloaded());
}

void get_one(service_context& ctx, const std::string& id, http_server::responder reply) {
  if (!ids::is_uuid(id)) return reply(outcome_response(api_outcome::not_found, "No such operation"));
  auto* svc = ctx.services;
  bool queued = ctx.read_pool().try_submit([id, reply, svc](persistence::db_context& db) {
    try {
      auto& conn = db.get();
      auto row = persistence::load_operation(conn, id);
      if (row.outcome == db_outcome::not_found) return reply(outcome_response(api_outcome::not_found, "No such operation"));
      if (!row.ok()) return reply(db_failure(row.error));
      auto events = persistence::list_events(conn, id);
      if (!events.ok()) return reply(db_failure(events.error));
      auto data = dto::to_json(row.value);
      nlohmann::json timeline = nlohmann::json::array();
      for (const auto& e : events.value) timeline.push_back(dto::to_json(e));
      data["timeline"] = std::move(timeline);
      data["live"] = svc->actors->find(id).has_value();
      reply(outcome_response(api_outcome::ok, {}, data));
    } catch (const sql::SQLException& e) {
      db.reset();
      reply(outcome_response(api_outcome::unavailable, {}, nullptr, std::string("database unreachable: ") + e.what()));
    }
  });
  if (!queued) reply(overloaded());
}

void list_by_subject(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto subject = req.query_param("subject");
  if (!subject || subject->empty()) return reply(outcome_response(api_outcome::bad_request, "'subject' query parameter is required"));
  int limit = 50;
  if (auto l = req.query_param("limit")) {
    try {
      limit = std::clamp(std::stoi(*l), 1, 500);
    } catch (...) {
      return reply(outcome_response(api_outcome::bad_request, "'limit' must be a number"));
    }
  }
  bool queued = ctx.read_pool().try_submit([s = *subject, limit, reply](persistence::db_context& db) {
    try {
      auto rows = persistence::list_operations_by_subject(db.get(), s, limit);
      if (!rows.ok()) return reply(db_failure(rows.error));
      nlohmann::json items = nlohmann::json::array();
      for (const auto& row : rows.value) items.push_back(dto::to_json(row));
      reply(outcome_response(api_outcome::ok, {}, {{"items", items}}));
    } catch (const sql::SQLException& e) {
      db.reset();
      reply(outcome_response(api_outcome::unavailable, {}, nullptr, std::string("database unreachable: ") + e.what()));
    }
  });
  if (!queued) reply(overloaded());
}

/// POST /api/v1/changes/{id}/cancel: the requester withdraws a change that has not merged. The use
/// case (service::end_change) withdraws the pending approval, closes the open MR — unless it merged,
/// which wins — and writes CANCELLED; a repeat answers "already cancelled".
void cancel(service_context& ctx, http_server::request& req, const std::string& id, http_server::responder reply) {
  if (!ids::is_uuid(id)) return reply(outcome_response(api_outcome::not_found, "No such operation"));
  auto parsed = dto::parse_cancel(req.body);
  if (auto* err = std::get_if<dto::parse_error>(&parsed)) return reply(outcome_response(api_outcome::bad_request, err->message));
  service::end_request r;
  r.kind = service::end_kind::cancel;
  r.operation_id = id;
  r.by = workflow::actor_kind::requester;
  r.actor = "user:" + authenticated_operator(req).value_or("anonymous");
  r.reason = std::get<dto::cancel_request>(parsed).reason;
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
      case service::end_status::merged_wins: return reply(outcome_response(api_outcome::already_merged, e.message, data));
      case service::end_status::not_allowed:
      case service::end_status::stale: return reply(outcome_response(api_outcome::conflict, e.message, data));
      case service::end_status::not_found: return reply(outcome_response(api_outcome::not_found, "No such operation"));
      case service::end_status::overloaded: return reply(overloaded());
      case service::end_status::unavailable: break;
    }
    reply(outcome_response(api_outcome::unavailable, e.message, nullptr, e.detail));
  });
}

}  // namespace

void add_change_routes(router& r, service_context& ctx) {
  r.add({"POST", "/api/v1/changes", [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           submit(ctx, req, std::move(reply));
         }});
  r.add({"GET", "/api/v1/changes/{id}",
         [&ctx](http_server::request&, const path_params& p, http_server::responder reply) {
           get_one(ctx, p.at("id"), std::move(reply));
         }});
  r.add({"POST", "/api/v1/changes/{id}/cancel",
         [&ctx](http_server::request& req, const path_params& p, http_server::responder reply) {
           cancel(ctx, req, p.at("id"), std::move(reply));
         }});
  r.add({"GET", "/api/v1/changes", [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           list_by_subject(ctx, req, std::move(reply));
         }});
}

}  // namespace changeflow::http
