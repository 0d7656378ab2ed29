#include "http/handlers/changes.hpp"

#include "actors/request_actor.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "http/dto/change_dto.hpp"
#include "http/envelope.hpp"

#include <cppconn/exception.h>

namespace changeflow::http {

namespace {

using persistence::db_outcome;

http_server::response db_failure(const persistence::db_error& e) {
  if (e.outcome == db_outcome::retryable) return internal_error("database: " + e.message, 503);
  return internal_error("database: " + e.message);
}

void submit(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto parsed = dto::parse_submit(req.body);
  if (auto* err = std::get_if<dto::parse_error>(&parsed)) {
    return reply(client_error(400, "BAD_REQUEST", err->message));
  }
  auto request = std::get<dto::submit_request>(std::move(parsed));
  auto snap = ctx.config.current();
  auto order = workflow::parse_flow(snap->string_or("flow.default", "approve_then_create"))
                   .value_or(workflow::flow::approve_then_create);
  persistence::new_operation op;
  op.operation_id = request.operation_id.value_or(ids::new_uuid());
  op.subject_id = request.subject;
  op.target_key = request.target;
  op.flow = order;
  op.initial_step = order == workflow::flow::approve_then_create ? workflow::step::APPROVAL_SENDING
                                                                  : workflow::step::CREATE_STARTED;
  op.title = request.title;
  op.payload_json = dto::payload_json(request);
  op.owner_instance = ctx.services->instance_id;
  op.actor = "user:" + request.subject;
  auto* svc = ctx.services;
  bool queued = ctx.db.try_submit([op, reply, svc](persistence::db_context& db) {
    try {
      auto r = persistence::create_operation(db.get(), op);
      if (!r.ok()) {
        if (r.outcome == db_outcome::retryable) db.reset();
        return reply(db_failure(r.error));
      }
      nlohmann::json data = {{"operationId", op.operation_id},
                             {"statusUrl", "/api/v1/changes/" + op.operation_id}};
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
          return reply(ok(data, 202, "ACCEPTED"));
        }
        case persistence::create_outcome::duplicate_operation:
          // The client keeps its form locked: this is the same submission again, not a new one.
          return reply(ok(data, 202, "DUPLICATE_SUBMIT"));
        case persistence::create_outcome::in_progress:
        case persistence::create_outcome::preempted:
          return reply(client_error(409, "IN_PROGRESS",
                                    "A change for this subject and target is still in progress; wait for it to "
                                    "finish or ask an operator to close it"));
      }
      reply(internal_error("unknown create outcome"));
    } catch (const sql::SQLException& e) {
      db.reset();
      reply(internal_error(std::string("database unreachable: ") + e.what(), 503));
    }
  });
  if (!queued) reply(client_error(503, "OVERLOADED", "The service is overloaded; retry later"));
}

void get_one(service_context& ctx, const std::string& id, http_server::responder reply) {
  if (!ids::is_uuid(id)) return reply(client_error(404, "NOT_FOUND", "No such operation"));
  auto* svc = ctx.services;
  bool queued = ctx.db.try_submit([id, reply, svc](persistence::db_context& db) {
    try {
      auto& conn = db.get();
      auto row = persistence::load_operation(conn, id);
      if (row.outcome == db_outcome::not_found) return reply(client_error(404, "NOT_FOUND", "No such operation"));
      if (!row.ok()) return reply(db_failure(row.error));
      auto events = persistence::list_events(conn, id);
      if (!events.ok()) return reply(db_failure(events.error));
      auto data = dto::to_json(row.value);
      nlohmann::json timeline = nlohmann::json::array();
      for (const auto& e : events.value) timeline.push_back(dto::to_json(e));
      data["timeline"] = std::move(timeline);
      data["live"] = svc->actors->find(id).has_value();
      reply(ok(data));
    } catch (const sql::SQLException& e) {
      db.reset();
      reply(internal_error(std::string("database unreachable: ") + e.what(), 503));
    }
  });
  if (!queued) reply(client_error(503, "OVERLOADED", "The service is overloaded; retry later"));
}

void list_by_subject(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto subject = req.query_param("subject");
  if (!subject || subject->empty()) return reply(client_error(400, "BAD_REQUEST", "'subject' query parameter is required"));
  int limit = 50;
  if (auto l = req.query_param("limit")) {
    try {
      limit = std::clamp(std::stoi(*l), 1, 500);
    } catch (...) {
      return reply(client_error(400, "BAD_REQUEST", "'limit' must be a number"));
    }
  }
  bool queued = ctx.db.try_submit([s = *subject, limit, reply](persistence::db_context& db) {
    try {
      auto rows = persistence::list_operations_by_subject(db.get(), s, limit);
      if (!rows.ok()) return reply(db_failure(rows.error));
      nlohmann::json items = nlohmann::json::array();
      for (const auto& row : rows.value) items.push_back(dto::to_json(row));
      reply(ok({{"items", items}}));
    } catch (const sql::SQLException& e) {
      db.reset();
      reply(internal_error(std::string("database unreachable: ") + e.what(), 503));
    }
  });
  if (!queued) reply(client_error(503, "OVERLOADED", "The service is overloaded; retry later"));
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
  r.add({"GET", "/api/v1/changes", [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           list_by_subject(ctx, req, std::move(reply));
         }});
}

}  // namespace changeflow::http
