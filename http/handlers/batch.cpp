#include "http/handlers/batch.hpp"

#include "http/envelope.hpp"
#include "http/handlers/answers.hpp"
#include "http/middleware/error_mapping.hpp"
#include "persistence/batch_repo.hpp"
#include "persistence/operation_repo.hpp"

#include <caf/all.hpp>

namespace changeflow::http {

namespace {

using middleware::api_outcome;
using middleware::outcome_response;
using persistence::db_outcome;

nlohmann::json batch_json(const persistence::batch_row& b) {
  nlohmann::json j = {
      {"id", b.id},
      {"status", std::string(persistence::to_string(b.status))},
      {"repository", b.partition.repository},
      {"targetBranch", b.partition.target_branch},
      {"ownerInstance", b.owner_instance ? nlohmann::json(*b.owner_instance) : nlohmann::json(nullptr)},
      {"mrIid", b.mr_iid ? nlohmann::json(*b.mr_iid) : nlohmann::json(nullptr)},
      {"branch", b.branch.value_or("")},
      {"splitDepth", b.split_depth},
      {"parentBatchId", b.parent_batch_id ? nlohmann::json(*b.parent_batch_id) : nlohmann::json(nullptr)},
      {"failureReason", b.failure_reason.value_or("")},
      {"createdAtMs", b.created_at_ms},
      {"updatedAtMs", b.updated_at_ms}};
  return j;
}

std::optional<std::int64_t> parse_id(const std::string& s) {
  try {
    std::size_t used = 0;
    auto v = std::stoll(s, &used);
    if (used != s.size() || v <= 0) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

/// Runs a db job for a handler on a database worker; a full queue is a 503.
void with_db(service_context& ctx, http_server::responder reply,
             std::function<void(persistence::session, http_server::responder&)> job) {
  bool queued = ctx.db.try_submit([reply, job](persistence::db_context& db) mutable { job(db, reply); });
  if (!queued) reply(outcome_response(api_outcome::overloaded));
}

/// Asks the coordinator without blocking an HTTP thread: a short-lived actor makes the request.
template <class... Ts>
void ask(service_context& ctx, const std::optional<actors::batch_coordinator>& c, http_server::responder reply,
         std::function<http_server::response(const std::string&)> answer, Ts... args) {
  if (!c || !ctx.services || !ctx.services->system) return reply(outcome_response(api_outcome::batch_disabled));
  auto coordinator = *c;
  ctx.services->system->spawn(
      [coordinator, reply, answer](caf::event_based_actor* self, Ts... xs) {
        self->request(coordinator, std::chrono::seconds(5), xs...)
            .then([reply, answer](const std::string& s) { reply(answer(s)); },
                  [reply](caf::error& e) {
                    reply(outcome_response(api_outcome::unavailable, {}, nullptr,
                                           "batch coordinator: " + caf::to_string(e)));
                  });
      },
      args...);
}

}  // namespace

void add_batch_routes(router& r, service_context& ctx, std::optional<actors::batch_coordinator> coordinator) {
  r.add({routes::ops_batches, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           std::int64_t before = 0;
           int limit = 50;
           if (auto b = req.query_param("before")) before = parse_id(*b).value_or(0);
           if (auto l = req.query_param("limit"))
             limit = static_cast<int>(std::clamp<std::int64_t>(parse_id(*l).value_or(50), 1, 500));
           with_db(ctx, reply, [before, limit](persistence::session db, http_server::responder& reply) {
             auto rows = persistence::list_batches(db, before, limit);
             if (!rows.ok()) return reply(db_failure(rows.error));
             nlohmann::json items = nlohmann::json::array();
             for (const auto& b : rows.value) items.push_back(batch_json(b));
             reply(ok({{"items", items}}));
           });
         }});

  r.add({routes::ops_batch, [&ctx](http_server::request&, const path_params& p, http_server::responder reply) {
           auto id = parse_id(p.at("id"));
           if (!id) return reply(outcome_response(api_outcome::not_found, "No such batch"));
           with_db(ctx, reply, [id = *id](persistence::session db, http_server::responder& reply) {
             auto b = persistence::load_batch(db, id);
             if (b.outcome == db_outcome::not_found)
               return reply(outcome_response(api_outcome::not_found, "No such batch"));
             if (!b.ok()) return reply(db_failure(b.error));
             auto ops = persistence::load_operations(db, b.value.members);
             if (!ops.ok()) return reply(db_failure(ops.error));
             auto waiting = persistence::list_waiting(db, 500);
             if (!waiting.ok()) return reply(db_failure(waiting.error));
             auto j = batch_json(b.value);
             nlohmann::json members = nlohmann::json::array();
             for (const auto& o : ops.value) {
               members.push_back({{"operationId", o.operation_id},
                                  {"title", o.title},
                                  {"subject", o.subject_id},
                                  {"step", std::string(workflow::to_string(o.step))},
                                  {"phase", std::string(workflow::to_string(o.phase))},
                                  {"batchId", o.batch_id ? nlohmann::json(*o.batch_id) : nlohmann::json(nullptr)}});
             }
             j["members"] = members;
             nlohmann::json w = nlohmann::json::array();
             for (const auto& x : waiting.value)
               w.push_back({{"operationId", x.operation_id},
                            {"repository", x.partition.repository},
                            {"targetBranch", x.partition.target_branch},
                            {"splitGroup", x.split_group},
                            {"admittedAtMs", x.admitted_at_ms}});
             j["waiting"] = w;
             reply(ok(j));
           });
         }});

  r.add({routes::ops_batch_settle,
         [&ctx, coordinator](http_server::request&, const path_params& p, http_server::responder reply) {
           auto id = parse_id(p.at("id"));
           if (!id) return reply(outcome_response(api_outcome::not_found, "No such batch"));
           ask(
               ctx, coordinator, reply,
               [](const std::string& s) {
                 if (s == "busy") return outcome_response(api_outcome::busy);
                 return ok({{"result", s}}, 202, "ACCEPTED");
               },
               actors::batch_settle_atom::value, *id);
         }});

  r.add({routes::ops_batch_unblock,
         [&ctx, coordinator](http_server::request&, const path_params& p, http_server::responder reply) {
           auto id = parse_id(p.at("id"));
           if (!id) return reply(outcome_response(api_outcome::not_found, "No such batch"));
           auto* system = ctx.services ? ctx.services->system : nullptr;
           with_db(ctx, reply, [id = *id, coordinator, system](persistence::session db, http_server::responder& reply) {
             auto w =
                 persistence::finish_batch(db, id, persistence::batch_status::BLOCKED,
                                           persistence::batch_status::RUNNING, std::string("unblocked by an operator"));
             if (w.outcome == db_outcome::preempted) return reply(outcome_response(api_outcome::not_blocked));
             if (!w.ok()) return reply(db_failure(w.error));
             if (coordinator && system) caf::anon_send(*coordinator, actors::batch_adopt_atom::value, id);
             reply(ok({{"id", id}, {"status", "RUNNING"}}));
           });
         }});

  r.add({routes::ops_batch_round,
         [&ctx, coordinator](http_server::request&, const path_params&, http_server::responder reply) {
           ask(
               ctx, coordinator, reply,
               [](const std::string& s) {
                 return ok({{"result", s}}, 202, "ACCEPTED");
               },
               actors::batch_round_atom::value);
         }});
}

}  // namespace changeflow::http
