#include "http/handlers/ops.hpp"

#include "actors/registry.hpp"
#include "actors/request_actor.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "http/dto/change_dto.hpp"
#include "http/envelope.hpp"
#include "http/handlers/answers.hpp"
#include "http/handlers/ops_body.hpp"
#include "http/handlers/whoami.hpp"
#include "http/middleware/authorization.hpp"
#include "http/middleware/error_mapping.hpp"
#include "persistence/audit_repo.hpp"
#include "persistence/operation_repo.hpp"
#include "persistence/ops_repo.hpp"
#include "service/attention.hpp"
#include "service/idempotency.hpp"
#include "service/operator_action.hpp"
#include "workflow/decide.hpp"
#include "workflow/transitions.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

namespace changeflow::http {

namespace {

using json = nlohmann::json;
using middleware::api_outcome;
using middleware::outcome_response;
using persistence::db_outcome;
using workflow::ops_action;
using workflow::step;

constexpr auto live_snapshot_timeout = std::chrono::milliseconds(300);

json null_or(const std::optional<std::string>& v) {
  return v ? json(*v) : json(nullptr);
}
json null_or(const std::optional<std::int64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

/// The ops view of a row: the user view plus what only operators see (owner, wake, attempts, error).
json ops_row_json(const persistence::operation_row& row) {
  auto j = dto::to_json(row);
  j["ownerInstance"] = null_or(row.owner_instance);
  j["leaseEpoch"] = row.lease_epoch;
  j["nextWakeAtMs"] = null_or(row.next_wake_at_ms);
  j["attempts"] = row.attempts;
  j["batchAttempts"] = row.batch_attempts;
  j["lastError"] = null_or(row.last_error);
  j["lastErrorStatus"] = row.last_error_status ? json(*row.last_error_status) : json(nullptr);
  j["lastErrorAtMs"] = null_or(row.last_error_at_ms);
  j["batchId"] = null_or(row.batch_id);
  j["approvalId"] = null_or(row.approval_id);
  j["updatedAtMs"] = row.updated_at_ms;
  j["createdAtMs"] = row.created_at_ms;
  j["terminal"] = workflow::is_terminal(row.phase);
  j["waitsFor"] = service::waits_for(row.step);
  return j;
}

json summary_json(const actors::live_summary& s) {
  auto st = workflow::step_from_code(s.step);
  return {{"operationId", s.operation_id},
          {"step", {{"code", s.step}, {"name", st ? json(workflow::to_string(*st)) : json(nullptr)}}},
          {"phase", st ? json(workflow::to_string(workflow::phase_of(*st))) : json(nullptr)},
          {"flow", s.flow},
          {"version", s.version},
          {"mrIid", s.mr_iid ? json(s.mr_iid) : json(nullptr)},
          {"nextWakeMs", s.next_wake_ms ? json(s.next_wake_ms) : json(nullptr)},
          {"polls", s.polls},
          {"mergeAttempts", s.merge_attempts},
          {"spawnedMs", s.spawned_ms},
          {"stepEnteredMs", s.step_entered_ms},
          {"busy", s.busy},
          {"lastNote", s.last_note},
          {"lastError", s.last_error}};
}

json callback_json(const persistence::callback_ledger_row& c) {
  return {{"id", c.id},
          {"deliveryId", c.delivery_id},
          {"kind", c.kind},
          {"operationId", null_or(c.operation_id)},
          {"outcome", c.outcome},
          {"receivedAtMs", c.received_at_ms},
          {"appliedAtMs", null_or(c.applied_at_ms)}};
}

/// Parses a 0..max integer query value; nullopt (and a 400 for the caller) when malformed.
std::optional<int> int_param(const http_server::request& req, std::string_view name, int fallback, int lo, int hi,
                             std::string& error) {
  auto v = req.query_param(name);
  if (!v || v->empty()) return fallback;
  try {
    std::size_t used = 0;
    long n = std::stol(*v, &used);
    if (used != v->size()) throw std::invalid_argument("trailing");
    return static_cast<int>(std::clamp<long>(n, lo, hi));
  } catch (...) {
    error = "'" + std::string(name) + "' must be a number";
    return std::nullopt;
  }
}

// parse_step_param and the filter parser live in ops_body.hpp (pure, fuzzed: fuzz/fuzz_ops_actions).
std::optional<persistence::ops_operation_filter> parse_filter(const json& q, std::string& error) {
  return parse_ops_filter(q, error);
}

/// The answer to an action, from the use case's result: the one outcome switch of the ops actions.
http_server::response action_response(const service::operator_action& a, const service::action_result& r) {
  using service::action_status;
  switch (r.status) {
    case action_status::done: {
      json data = {{"operationId", a.operation_id},
                   {"action", workflow::to_string(a.action)},
                   {"from", workflow::to_string(r.from)},
                   {"to", workflow::to_string(r.to)},
                   {"phase", workflow::to_string(workflow::phase_of(r.to))},
                   {"version", r.version}};
      if (a.action == ops_action::close) {
        data["withdrawn"] = r.withdrawn;
        data["mergedWins"] = r.merged_wins;
      } else {
        data["actor"] = r.actor;
      }
      return outcome_response(
          api_outcome::ok,
          "Done: " + std::string(workflow::to_string(r.from)) + " -> " + std::string(workflow::to_string(r.to)), data);
    }
    case action_status::not_found: return outcome_response(api_outcome::not_found, "No such operation");
    case action_status::already_merged: return outcome_response(api_outcome::already_merged, r.message);
    case action_status::stale:
    case action_status::refused:
    case action_status::preempted: return outcome_response(api_outcome::conflict, r.message);
    case action_status::overloaded: return outcome_response(api_outcome::overloaded);
    case action_status::unavailable: return outcome_response(api_outcome::unavailable, r.message, nullptr, r.detail);
    case action_status::failed: break;
  }
  return db_failure(r.error);
}

/// Runs one parsed action on a database worker and replies exactly once.
void run_action(persistence::db_context& db, runtime::services* svc, service::operator_action a,
                http_server::responder reply) {
  auto rendered = std::make_shared<http_server::response>();
  auto key = a.idem.key;
  auto render = [a, rendered](const service::action_result& r) {
    *rendered = action_response(a, r);
    return service::stored_answer{rendered->status, rendered->body};
  };
  service::run_operator_action(db, *svc, std::move(a), render,
                               [rendered, reply, key](const service::gate_result* not_run) {
                                 reply(not_run ? gate_response(*not_run, key) : std::move(*rendered));
                               });
}

// -- request parsing shared by the action routes ------------------------------------------------

struct parsed_action {
  std::optional<service::operator_action> request;
  std::optional<http_server::response> error;
};

parsed_action parse_action(service_context& ctx, const operator_source& who, http_server::request& req,
                           ops_action action, const std::string& id, const std::string& route_template) {
  parsed_action out;
  auto op = who(req);
  if (!op) {
    out.error = outcome_response(api_outcome::unauthenticated);
    return out;
  }
  auto parsed = parse_ops_action_body(req.body, action == ops_action::fail);
  if (auto* message = std::get_if<std::string>(&parsed)) {
    out.error = outcome_response(api_outcome::bad_request, *message);
    return out;
  }
  auto& fields = std::get<ops_action_body>(parsed);
  service::operator_action a;
  a.action = action;
  a.operation_id = id;
  a.operator_name = *op;
  a.reason = std::move(fields.reason);
  a.expected_version = fields.expected_version;
  json params = std::move(fields.body);
  params["operationId"] = id;
  // Copy-then-overwrite: a client value under the reserved name never survives.
  a.audit_params =
      middleware::audit_params(middleware::apply_operator_identity(std::move(params), identity::identity{*op, ""}));
  if (auto h = req.header("idempotency-key")) {
    if (!service::valid_idempotency_key(*h)) {
      out.error =
          outcome_response(api_outcome::bad_request, "'Idempotency-Key' must be 1-200 printable ASCII characters");
      return out;
    }
    // Scoped by operator and action: the same key from another operator is another request.
    a.idem.key = service::scoped_idempotency_key("ops", *op, *h);
    a.idem.fingerprint = service::request_fingerprint("POST", route_template, id + "\n" + req.body);
    a.idem.ttl = service::idempotency_ttl(*ctx.config.current());
    a.idem.in_flight_timeout = service::idempotency_in_flight_timeout(*ctx.config.current());
    a.idem.route = "ops";
  }
  out.request = std::move(a);
  return out;
}

void submit_db(service_context& ctx, http_server::responder reply, std::function<void(persistence::db_context&)> job) {
  bool queued = ctx.db.try_submit([job = std::move(job), reply](persistence::db_context& db) {
    try {
      job(db);
    } catch (const std::exception& e) {
      reply(outcome_response(api_outcome::internal, {}, nullptr, std::string("ops handler: ") + e.what()));
    }
  });
  if (!queued) reply(outcome_response(api_outcome::overloaded));
}

// -- read endpoints -----------------------------------------------------------------------------

void list_actors(service_context& ctx, http_server::request& req, http_server::responder reply) {
  std::string error;
  auto limit = int_param(req, "limit", 200, 1, 2000, error);
  if (!limit) return reply(outcome_response(api_outcome::bad_request, error));
  auto step_name = req.query_param("step").value_or("");
  std::optional<step> step_filter;
  if (!step_name.empty()) {
    step_filter = parse_step_param(step_name);
    if (!step_filter) return reply(outcome_response(api_outcome::bad_request, "unknown step '" + step_name + "'"));
  }
  auto& reg = *ctx.services->actors;
  auto items =
      reg.list([&](const actors::live_summary& s) { return !step_filter || s.step == workflow::code_of(*step_filter); },
               static_cast<std::size_t>(*limit));
  json list = json::array();
  for (const auto& s : items) list.push_back(summary_json(s));
  json by_step = json::object();
  for (auto [code, n] : reg.count_by_step()) {
    auto st = workflow::step_from_code(code);
    by_step[st ? std::string(workflow::to_string(*st)) : std::to_string(code)] = n;
  }
  reply(outcome_response(
      api_outcome::ok, {},
      {{"instance", ctx.services->instance_id}, {"total", reg.size()}, {"byStep", by_step}, {"items", list}}));
}

void list_operations(service_context& ctx, http_server::request& req, http_server::responder reply) {
  std::string error;
  auto f = parse_filter(query_params_json(req.query), error);
  if (!f) return reply(outcome_response(api_outcome::bad_request, error));
  submit_db(ctx, reply, [f = *f, reply](persistence::db_context& db) {
    auto page = persistence::list_ops_operations(db, f);
    if (!page.ok() && page.outcome == db_outcome::not_found) {
      return reply(outcome_response(api_outcome::bad_request, "'after' is not a cursor this API returned"));
    }
    if (!page.ok()) return reply(db_failure(page.error));
    auto total = persistence::count_ops_operations(db, f);
    if (!total.ok()) return reply(db_failure(total.error));
    json items = json::array();
    for (const auto& r : page.value.items) items.push_back(ops_row_json(r));
    reply(
        outcome_response(api_outcome::ok, {},
                         {{"items", items},
                          {"total", total.value},
                          {"nextAfter", page.value.next_after.empty() ? json(nullptr) : json(page.value.next_after)}}));
  });
}

void get_operation(service_context& ctx, const std::string& id, http_server::responder reply) {
  if (!ids::is_uuid(id)) return reply(outcome_response(api_outcome::not_found, "No such operation"));
  auto* svc = ctx.services;
  submit_db(ctx, reply, [svc, id, reply](persistence::db_context& db) {
    auto row = persistence::load_operation(db, id);
    if (row.outcome == db_outcome::not_found)
      return reply(outcome_response(api_outcome::not_found, "No such operation"));
    if (!row.ok()) return reply(db_failure(row.error));
    auto events = persistence::list_events(db, id);
    if (!events.ok()) return reply(db_failure(events.error));
    auto callbacks = persistence::list_callbacks_for_operation(db, id);
    if (!callbacks.ok()) return reply(db_failure(callbacks.error));
    auto attempts = persistence::list_step_attempts(db, id);
    if (!attempts.ok()) return reply(db_failure(attempts.error));
    auto now = persistence::database_now_ms(db);
    if (!now.ok()) return reply(db_failure(now.error));
    auto data = ops_row_json(row.value);
    data["nowMs"] = now.value;
    std::map<int, const persistence::step_attempt_row*> attempts_by_step;
    json step_attempts = json::array();
    for (const auto& a : attempts.value) {
      attempts_by_step[workflow::code_of(a.step)] = &a;
      step_attempts.push_back({{"step", {{"code", workflow::code_of(a.step)}, {"name", workflow::to_string(a.step)}}},
                               {"failedAttempts", a.failed_attempts},
                               {"lastError", null_or(a.last_error)},
                               {"lastErrorStatus", a.last_error_status ? json(*a.last_error_status) : json(nullptr)},
                               {"firstErrorAtMs", a.first_error_at_ms},
                               {"lastErrorAtMs", a.last_error_at_ms}});
    }
    data["stepAttempts"] = std::move(step_attempts);
    // Each event opens a stay in its target step; the stay lasts until the next event, or until now
    // for the current step of a change that has not ended (then it is still running).
    const bool ended = workflow::is_terminal(row.value.phase);
    json timeline = json::array();
    for (std::size_t i = 0; i < events.value.size(); ++i) {
      const auto& e = events.value[i];
      auto ej = dto::to_json(e);
      ej["instanceId"] = null_or(e.instance_id);
      ej["atMs"] = e.at_ms;
      if (e.from_step) ej["fromCode"] = workflow::code_of(*e.from_step);
      ej["toCode"] = workflow::code_of(e.to_step);
      const bool last = i + 1 == events.value.size();
      if (!last) {
        ej["durationMs"] = events.value[i + 1].at_ms - e.at_ms;
      } else if (!ended) {
        ej["durationMs"] = std::max<std::int64_t>(0, now.value - e.at_ms);
        ej["running"] = true;
      } else {
        ej["durationMs"] = nullptr;
      }
      timeline.push_back(std::move(ej));
    }
    data["timeline"] = std::move(timeline);
    const auto end_ms = ended && !events.value.empty() ? events.value.back().at_ms : now.value;
    data["totalMs"] = std::max<std::int64_t>(0, end_ms - row.value.created_at_ms);
    data["ended"] = ended;
    // The stored wake is the durable deadline; a live actor's own timer is the truth while it lives.
    data["nextWake"] =
        row.value.next_wake_at_ms ? json{{"atMs", *row.value.next_wake_at_ms}, {"source", "row"}} : json(nullptr);
    json cbs = json::array();
    for (const auto& c : callbacks.value) cbs.push_back(callback_json(c));
    data["callbacks"] = std::move(cbs);
    data["allowedActions"] = allowed_actions_json(row.value.step);
    data["live"] = nullptr;
    auto summary = svc->actors->summary(id);
    auto actor = svc->actors->find(id);
    if (!summary || !actor) return reply(outcome_response(api_outcome::ok, {}, data));
    data["live"] = {{"instance", svc->instance_id}, {"summary", summary_json(*summary)}, {"snapshot", nullptr}};
    data["nextWake"] = summary->next_wake_ms > 0 ? json{{"atMs", summary->next_wake_ms}, {"source", "live actor"}}
                                                 : json{{"atMs", nullptr}, {"source", "live actor"}};
    // Ask the actor itself, bounded, from a short-lived actor: this database worker is released now,
    // and a busy or dying actor only costs the timeout, with the registry summary above as the view.
    svc->system->spawn([actor = *actor, data = std::move(data), reply](caf::event_based_actor* self) mutable {
      self->request(actor, live_snapshot_timeout, messages::inspect_request{})
          .then(
              [data, reply](const messages::actor_snapshot& snap) mutable {
                auto parsed = json::parse(snap.json, nullptr, false);
                if (!parsed.is_discarded()) data["live"]["snapshot"] = std::move(parsed);
                reply(outcome_response(api_outcome::ok, {}, data));
              },
              [self, data, reply](caf::error& err) mutable {
                data["live"]["snapshotError"] = self->system().render(err);
                reply(outcome_response(api_outcome::ok, {}, data));
              });
    });
  });
}

json instances_json(const std::vector<persistence::instance_row>& rows, const std::string& self) {
  json items = json::array();
  for (const auto& r : rows) {
    items.push_back({{"instanceId", r.instance_id},
                     {"startedAtMs", r.started_at_ms},
                     {"heartbeatAtMs", r.heartbeat_at_ms},
                     {"leaseUntilMs", r.lease_until_ms},
                     {"epoch", r.epoch},
                     {"address", r.address},
                     {"status", r.status},
                     {"leaseLive", r.lease_live},
                     {"ownedActive", r.owned_nonterminal},
                     {"self", r.instance_id == self}});
  }
  return items;
}

/// Steps an operator should look at first: outcome unknown, refused for load, or unexpected errors.
std::vector<step> stuck_steps() {
  return {step::CREATE_PIPELINE_PENDING,
          step::HANDLE_PIPELINE_PENDING,
          step::REBASE_PENDING,
          step::CREATE_OVERLOADED,
          step::HANDLE_OVERLOADED,
          step::CREATE_ERROR,
          step::HANDLE_ERROR,
          step::DEPLOY_TIMEOUT};
}

void overview(service_context& ctx, http_server::request& req, http_server::responder reply) {
  std::string error;
  auto old_s = int_param(req, "old_wait_s", 600, 1, 30 * 86400, error);
  if (!old_s) return reply(outcome_response(api_outcome::bad_request, error));
  auto* svc = ctx.services;
  submit_db(ctx, reply, [svc, old = *old_s, reply](persistence::db_context& db) {
    auto phases = persistence::count_operations_by_phase(db);
    if (!phases.ok()) return reply(db_failure(phases.error));
    persistence::ops_operation_filter stuck_f;
    stuck_f.steps_in = stuck_steps();
    stuck_f.limit = 50;
    auto stuck = persistence::list_ops_operations(db, stuck_f);
    if (!stuck.ok()) return reply(db_failure(stuck.error));
    persistence::ops_operation_filter old_f;
    old_f.only_nonterminal = true;
    old_f.older_than_s = old;
    old_f.limit = 50;
    auto waits = persistence::list_ops_operations(db, old_f);
    if (!waits.ok()) return reply(db_failure(waits.error));
    auto cb = persistence::callback_outcome_counts(db);
    if (!cb.ok()) return reply(db_failure(cb.error));
    // The instances come with the overview so the console's overview is one read per refresh.
    auto instances = persistence::list_instances(db);
    if (!instances.ok()) return reply(db_failure(instances.error));
    auto now = persistence::database_now_ms(db);
    if (!now.ok()) return reply(db_failure(now.error));
    json by_phase = json::object();
    for (auto p : workflow::all_phases) by_phase[std::string(workflow::to_string(p))] = 0;
    for (const auto& [p, n] : phases.value) by_phase[p] = n;
    json stuck_items = json::array();
    std::set<std::string> seen;
    for (const auto& r : stuck.value.items) {
      auto j = ops_row_json(r);
      j["why"] = "step " + std::string(workflow::to_string(r.step));
      stuck_items.push_back(std::move(j));
      seen.insert(r.operation_id);
    }
    for (const auto& r : waits.value.items) {
      if (seen.count(r.operation_id)) continue;
      auto j = ops_row_json(r);
      j["why"] = "no progress for over " + std::to_string(old) + " s";
      stuck_items.push_back(std::move(j));
    }
    reply(outcome_response(api_outcome::ok, {},
                           {{"byPhase", by_phase},
                            {"stuck", stuck_items},
                            {"callbacks", cb.value},
                            {"liveActors", svc->actors->size()},
                            {"instances", instances_json(instances.value, svc->instance_id)},
                            {"nowMs", now.value},
                            {"instance", svc->instance_id}}));
  });
}

void attention(service_context& ctx, http_server::responder reply) {
  auto* svc = ctx.services;
  auto snap = ctx.config.current();
  auto settings = service::attention_settings_from(*snap);
  const auto poll_ms = snap->console().poll_ms;
  submit_db(ctx, reply, [svc, settings, poll_ms, reply](persistence::db_context& db) {
    auto report = service::read_attention_report(db, *svc, settings);
    if (!report.ok()) return reply(db_failure(report.error));
    const auto& r = report.value;
    json items = json::array();
    for (const auto& i : r.items) {
      json j = {{"reason", service::to_string(i.reason)},
                {"waitsFor", i.waits_for},
                {"operationId", i.operation_id.empty() ? json(nullptr) : json(i.operation_id)},
                {"title", i.title},
                {"sinceMs", i.since_ms},
                {"ageMs", std::max<std::int64_t>(0, r.now_ms - i.since_ms)},
                {"dueMs", null_or(i.due_ms)},
                {"dueLabel", i.due_label},
                {"lastError", null_or(i.last_error)},
                {"lastErrorStatus", i.last_error_status ? json(*i.last_error_status) : json(nullptr)},
                {"lastErrorAtMs", null_or(i.last_error_at_ms)}};
      if (i.step) {
        j["step"] = {{"code", workflow::code_of(*i.step)}, {"name", workflow::to_string(*i.step)}};
        j["phase"] = workflow::to_string(workflow::phase_of(*i.step));
      }
      if (!i.delivery_id.empty()) {
        j["deliveryId"] = i.delivery_id;
        j["callbackKind"] = i.callback_kind;
        j["callbackOutcome"] = i.callback_outcome;
      }
      items.push_back(std::move(j));
    }
    reply(outcome_response(api_outcome::ok, {},
                           {{"nowMs", r.now_ms},
                            {"pollMs", poll_ms},
                            {"counts", r.counts},
                            {"truncated", r.truncated},
                            {"total", r.items.size()},
                            {"items", items}}));
  });
}

void list_audit(service_context& ctx, http_server::request& req, http_server::responder reply) {
  std::string error;
  auto limit = int_param(req, "limit", 100, 1, 500, error);
  if (!limit) return reply(outcome_response(api_outcome::bad_request, error));
  std::int64_t before = 0;
  if (auto b = req.query_param("before"); b && !b->empty()) {
    try {
      before = std::stoll(*b);
    } catch (...) {
      return reply(outcome_response(api_outcome::bad_request, "'before' must be a number"));
    }
  }
  submit_db(ctx, reply, [before, limit = *limit, reply](persistence::db_context& db) {
    auto rows = persistence::list_audit(db, before, limit);
    if (!rows.ok()) return reply(db_failure(rows.error));
    json items = json::array();
    for (const auto& r : rows.value) {
      auto params = r.entry.params_json.empty() ? json(nullptr) : json::parse(r.entry.params_json, nullptr, false);
      items.push_back({{"id", r.id},
                       {"atMs", r.at_ms},
                       {"operator", r.entry.operator_name},
                       {"action", r.entry.action},
                       {"target", r.entry.target},
                       {"params", params.is_discarded() ? json(nullptr) : params},
                       {"outcome", r.entry.outcome}});
    }
    json next = rows.value.size() == static_cast<std::size_t>(limit) && !rows.value.empty() ? json(rows.value.back().id)
                                                                                            : json(nullptr);
    reply(outcome_response(api_outcome::ok, {}, {{"items", items}, {"nextBefore", next}}));
  });
}

void list_instances(service_context& ctx, http_server::responder reply) {
  auto* svc = ctx.services;
  submit_db(ctx, reply, [svc, reply](persistence::db_context& db) {
    auto rows = persistence::list_instances(db);
    if (!rows.ok()) return reply(db_failure(rows.error));
    reply(outcome_response(api_outcome::ok, {},
                           {{"self", svc->instance_id}, {"items", instances_json(rows.value, svc->instance_id)}}));
  });
}

void list_callbacks(service_context& ctx, http_server::request& req, http_server::responder reply) {
  std::string error;
  auto limit = int_param(req, "limit", 50, 1, 500, error);
  if (!limit) return reply(outcome_response(api_outcome::bad_request, error));
  submit_db(ctx, reply, [limit = *limit, reply](persistence::db_context& db) {
    auto counts = persistence::callback_outcome_counts(db);
    if (!counts.ok()) return reply(db_failure(counts.error));
    auto recent = persistence::recent_callbacks(db, {"DUPLICATE", "IGNORED_STALE", "OUT_OF_ORDER", "ID_REUSED"}, limit);
    if (!recent.ok()) return reply(db_failure(recent.error));
    json items = json::array();
    for (const auto& c : recent.value) items.push_back(callback_json(c));
    reply(outcome_response(api_outcome::ok, {}, {{"counts", counts.value}, {"recentUnapplied", items}}));
  });
}

// -- bulk ------------------------------------------------------------------------------------------

void bulk(service_context& ctx, const operator_source& who, http_server::request& req, const std::string& action_name,
          http_server::responder reply) {
  auto action = workflow::parse_ops_action(action_name);
  if (!action || (*action != ops_action::retrigger && *action != ops_action::fail)) {
    return reply(outcome_response(api_outcome::not_found, "Bulk actions are 'retrigger' and 'fail'"));
  }
  auto op = who(req);
  if (!op) return reply(outcome_response(api_outcome::unauthenticated));
  // Filter, dryRun (default: count only; only an explicit JSON false acts) and reason: ops_body.hpp.
  auto parsed = parse_ops_bulk_body(req.body, *action == ops_action::fail);
  if (auto* message = std::get_if<std::string>(&parsed))
    return reply(outcome_response(api_outcome::bad_request, *message));
  auto& fields = std::get<ops_bulk_body>(parsed);
  service::bulk_action b;
  b.action = *action;
  b.filter = fields.filter;
  b.dry_run = fields.dry_run;
  b.reason = fields.reason;
  b.operator_name = *op;
  b.audit_params =
      middleware::audit_params(middleware::apply_operator_identity(fields.body, identity::identity{*op, ""}));
  auto* svc = ctx.services;
  submit_db(ctx, reply, [svc, b = std::move(b), reply](persistence::db_context& db) {
    auto r = service::run_bulk_action(db, *svc, b);
    if (!r.ok) return reply(db_failure(r.error));
    json data = {{"action", workflow::to_string(b.action)},
                 {"dryRun", b.dry_run},
                 {"matched", r.matched},
                 {"eligible", r.eligible},
                 {"capped", r.capped},
                 {"sampleIds", r.sample_ids}};
    if (!b.dry_run) data["outcomes"] = json(r.outcomes);
    reply(outcome_response(api_outcome::ok, {}, data));
  });
}

}  // namespace

// -- what the console offers -----------------------------------------------------------------

namespace {

/// What an action will do, in the words the confirmation dialog shows.
std::string effect_of(ops_action a, step current, step target) {
  const std::string from(workflow::to_string(current)), to(workflow::to_string(target));
  switch (a) {
    case ops_action::retrigger:
      return "Moves the change from " + from + " to " + to +
             " and runs that step now: the stored wake and the attempt count are cleared and the actor is woken "
             "(or started).";
    case ops_action::resend_approval:
      return "Sends the approval request again (" + to + "); the approval system answers with the same request id.";
    case ops_action::confirm:
      return "Records the change as in effect (" + to +
             ", phase VALIDATED) without a deploy confirmation. Only when you checked the deployment yourself.";
    case ops_action::fail:
      return "Ends the step as " + to +
             " with your reason. The target stays held until the change is closed; nothing is sent to GitLab.";
    case ops_action::close:
      return "Closes the change for good: reads the MR first (if it merged, the change is recorded as merged), "
             "closes it if open, withdraws the approval request, and frees the target for a new change.";
  }
  return {};
}

/// A re-trigger that cannot help: the step failed deterministically, and running it again meets the
/// same answer unless someone fixed the cause outside changeflow.
std::string warning_of(ops_action a, step current) {
  if (a != ops_action::retrigger || !workflow::is_deterministic_failure(current)) return {};
  if (current == step::CREATE_PIPELINE_FAILED || current == step::HANDLE_PIPELINE_FAILED) {
    return "The pipeline failed deterministically. A re-trigger reads the same MR and reuses its failed pipeline, "
           "so it fails again unless a new pipeline was run on the MR (fix the change and run the pipeline "
           "first), or close the change.";
  }
  return std::string(workflow::to_string(current)) +
         " is a deterministic failure: re-triggering without fixing its cause meets the same refusal again.";
}

}  // namespace

json allowed_actions_json(step current) {
  json out = json::array();
  for (auto a : workflow::all_ops_actions) {
    auto p = workflow::plan_action(a, current);
    if (!p.target) continue;
    auto warning = warning_of(a, current);
    out.push_back({{"action", workflow::to_string(a)},
                   {"target", workflow::to_string(*p.target)},
                   {"effect", effect_of(a, current, *p.target)},
                   {"warning", warning.empty() ? json(nullptr) : json(warning)},
                   {"destructive", a == ops_action::fail || a == ops_action::close},
                   {"requiresReason", a == ops_action::fail}});
  }
  return out;
}

namespace {
const route_spec& route_of(ops_action a) {
  switch (a) {
    case ops_action::retrigger: return routes::ops_retrigger;
    case ops_action::fail: return routes::ops_fail;
    case ops_action::close: return routes::ops_close;
    case ops_action::resend_approval: return routes::ops_resend_approval;
    case ops_action::confirm: return routes::ops_confirm;
  }
  return routes::ops_retrigger;
}
}  // namespace

void add_ops_routes(router& r, service_context& ctx, operator_source who) {
  if (!who) who = [](const http_server::request& req) { return authenticated_operator(req); };
  auto add = [&](const route_spec& spec, route_handler h) { r.add({spec, std::move(h)}); };
  add(routes::ops_overview, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
    overview(ctx, req, std::move(reply));
  });
  add(routes::ops_attention, [&ctx](http_server::request&, const path_params&, http_server::responder reply) {
    attention(ctx, std::move(reply));
  });
  add(routes::ops_actors, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
    list_actors(ctx, req, std::move(reply));
  });
  add(routes::ops_operations, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
    list_operations(ctx, req, std::move(reply));
  });
  add(routes::ops_operation, [&ctx](http_server::request&, const path_params& p, http_server::responder reply) {
    get_operation(ctx, p.at("id"), std::move(reply));
  });
  for (auto a : workflow::all_ops_actions) {
    const route_spec& spec = route_of(a);
    std::string pattern(spec.pattern);
    add(spec, [&ctx, who, a, pattern](http_server::request& req, const path_params& p, http_server::responder reply) {
      const auto& id = p.at("id");
      if (!ids::is_uuid(id)) return reply(outcome_response(api_outcome::not_found, "No such operation"));
      auto parsed = parse_action(ctx, who, req, a, id, pattern);
      if (parsed.error) return reply(std::move(*parsed.error));
      auto* svc = ctx.services;
      submit_db(ctx, reply, [svc, a = std::move(*parsed.request), reply](persistence::db_context& db) {
        run_action(db, svc, a, reply);
      });
    });
  }
  add(routes::ops_bulk, [&ctx, who](http_server::request& req, const path_params& p, http_server::responder reply) {
    bulk(ctx, who, req, p.at("action"), std::move(reply));
  });
  add(routes::ops_audit, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
    list_audit(ctx, req, std::move(reply));
  });
  add(routes::ops_config, [&ctx](http_server::request&, const path_params&, http_server::responder reply) {
    reply(outcome_response(api_outcome::ok, {}, ctx.config.current()->describe()));
  });
  add(routes::ops_instances, [&ctx](http_server::request&, const path_params&, http_server::responder reply) {
    list_instances(ctx, std::move(reply));
  });
  add(routes::ops_callbacks, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
    list_callbacks(ctx, req, std::move(reply));
  });
}

}  // namespace changeflow::http
