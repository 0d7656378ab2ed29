#include "http/handlers/changes.hpp"

#include "actors/registry.hpp"
#include "actors/request_actor.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "config/test_hooks.hpp"
#include "http/dto/change_dto.hpp"
#include "http/envelope.hpp"
#include "http/handlers/answers.hpp"
#include "http/handlers/caller.hpp"
#include "http/middleware/authorization.hpp"
#include "http/middleware/error_mapping.hpp"
#include "http/middleware/ownership.hpp"
#include "persistence/binding_repo.hpp"
#include "service/end_change.hpp"
#include "service/idempotency.hpp"
#include "service/preview_change.hpp"
#include "service/revert_change.hpp"
#include "service/status_read.hpp"
#include "service/submit.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
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

constexpr std::string_view submit_route = "/api/v1/changes";

/// What frees a target whose current change is at `s`, in words for the user.
std::string what_unblocks(workflow::step s) {
  auto p = workflow::phase_of(s);
  if (p == workflow::phase::MERGED) return "it has merged; wait for its deploy confirmation";
  if (s == workflow::step::CONTENT_CONFLICT) {
    return "its files changed since it was based on them: its requester cancels it, then submits the rebased change";
  }
  if (p == workflow::phase::CREATE_FAILED || p == workflow::phase::HANDLE_FAILED) {
    return "it failed and awaits an operator: an operator re-triggers or closes it, or its requester cancels it";
  }
  return "wait for it to finish, or cancel it";
}

/// The answer to a submission, from the use case's result: the one outcome switch of submit.
/// `accepted_data` is added to the data of a 202 ACCEPTED.
http_server::response submit_response(const service::submit_result& r, const std::string& operation_id,
                                      const nlohmann::json& accepted_data = nlohmann::json::object()) {
  nlohmann::json data = {{"operationId", operation_id}, {"statusUrl", "/api/v1/changes/" + operation_id}};
  switch (r.status) {
    case service::submit_status::accepted:
      data["phase"] = workflow::to_string(r.created.phase);
      data["step"] = workflow::to_string(r.created.step);
      data.update(accepted_data);
      return outcome_response(api_outcome::accepted, {}, data);
    case service::submit_status::duplicate:
      // Not a replay of a stored response: the client keeps its form locked and polls.
      return outcome_response(api_outcome::duplicate_submit, {}, data);
    case service::submit_status::blocked: {
      if (!r.blocking_id) {
        return outcome_response(api_outcome::in_progress,
                                "Another change for this subject and target is in progress; retry shortly");
      }
      if (!r.blocker) {
        return outcome_response(api_outcome::in_progress,
                                "Another change for this subject and target just started or ended; retry shortly",
                                {{"blockingOperationId", *r.blocking_id}});
      }
      const auto& b = *r.blocker;
      return outcome_response(api_outcome::in_progress,
                              "Change " + b.operation_id + " for this subject and target is at " +
                                  std::string(workflow::to_string(b.step)) + "; " + what_unblocks(b.step),
                              {{"blockingOperationId", b.operation_id},
                               {"blockingPhase", workflow::to_string(b.phase)},
                               {"blockingStep", workflow::to_string(b.step)},
                               {"statusUrl", "/api/v1/changes/" + b.operation_id},
                               {"unblockedBy", what_unblocks(b.step)}});
    }
    case service::submit_status::failed: break;
  }
  return db_failure(r.error);
}

void store_submission(service_context& ctx, const http_server::request& req, const dto::submit_request& request,
                      const std::string& requester, http_server::responder reply);

/// A submit body (also a preview's), parsed, with its repository and branch resolved against the
/// configured ones: refused (400) before anything is asked or written, with the configured choices
/// in the message.
std::variant<dto::submit_request, http_server::response> parse_placed(service_context& ctx, const std::string& body) {
  auto parsed = dto::parse_submit(body);
  if (auto* err = std::get_if<dto::parse_error>(&parsed))
    return outcome_response(api_outcome::bad_request, err->message);
  auto request = std::get<dto::submit_request>(std::move(parsed));
  auto where =
      config::resolve_target(ctx.config.current()->repositories(), {request.repository, request.target_branch});
  if (auto* refusal = std::get_if<config::target_refusal>(&where)) {
    return outcome_response(api_outcome::bad_request, refusal->message);
  }
  const auto& target = std::get<config::resolved_target>(where);
  request.repository = target.repository;
  request.target_branch = target.target_branch;
  return request;
}

/// A submission is for a subject the requester is permitted for (its rule code, or an operator
/// code), checked in one round trip after the body is parsed; denied -> 403 "Access denied".
void submit(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  auto placed = parse_placed(ctx, req.body);
  if (auto* refused = std::get_if<http_server::response>(&placed)) return reply(std::move(*refused));
  auto request = std::get<dto::submit_request>(std::move(placed));
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

/// The key a change-creating request is deduplicated by: the Idempotency-Key header, else the
/// client's operationId; nullopt without either (not deduplicated: clients should send one).
struct request_key {
  std::optional<std::string> key;
  bool malformed = false;  // the header is not 1-200 printable ASCII characters: answer 400
};
request_key key_of(const http_server::request& req, const std::optional<std::string>& operation_id) {
  request_key k;
  if (auto h = req.header("idempotency-key")) {
    if (!service::valid_idempotency_key(*h)) k.malformed = true;
    k.key = std::string(*h);
  } else if (operation_id) {
    k.key = *operation_id;
  }
  return k;
}

http_server::response malformed_key() {
  return outcome_response(api_outcome::bad_request, "'Idempotency-Key' must be 1-200 printable ASCII characters");
}

/// A change `requester` starts now, as every change-creating request starts it: the configured
/// flow, its first step, this instance as owner. Its id is the client's, else derived from `name`
/// (a revert's scoped key and original), so a retry or the re-run of a request that died mid-way
/// names the same operation and can never create a second change; else a fresh time-ordered id
/// (`name` empty: a submission, whose key, when it has one, stores the id instead).
persistence::new_operation new_change(service_context& ctx, const std::string& requester,
                                      const std::optional<std::string>& client_id, const std::string& name) {
  auto order =
      workflow::parse_flow(ctx.config.current()->flow().default_order).value_or(workflow::flow::approve_then_create);
  persistence::new_operation op;
  // A fresh id is time-ordered: the operation's row and its timeline are keyed by it, so new changes
  // land at the end of those indexes, not on random pages of a history that grows.
  op.operation_id = client_id.value_or(name.empty() ? ids::new_time_ordered_uuid() : ids::uuid_from_name(name));
  op.flow = order;
  op.initial_step =
      order == workflow::flow::approve_then_create ? workflow::step::APPROVAL_SENDING : workflow::step::CREATE_STARTED;
  op.owner_instance = ctx.services->instance_id;
  op.requester = requester;
  op.actor = "user:" + requester;
  return op;
}

/// The idempotency protocol's view of a request keyed by `scoped_key` ("" = not deduplicated);
/// `route` is the path its fingerprint is taken over (with the id for per-change routes).
service::idempotent_request idempotent(service_context& ctx, const http_server::request& req,
                                       const std::string& scoped_key, std::string_view route, std::string label) {
  auto snap = ctx.config.current();
  service::idempotent_request idem;
  idem.key = scoped_key;
  if (!scoped_key.empty()) idem.fingerprint = service::request_fingerprint("POST", route, req.body);
  idem.ttl = service::idempotency_ttl(*snap);
  idem.in_flight_timeout = service::idempotency_in_flight_timeout(*snap);
  idem.route = std::move(label);
  return idem;
}

void store_submission(service_context& ctx, const http_server::request& req, const dto::submit_request& request,
                      const std::string& requester, http_server::responder reply) {
  auto [key, malformed] = key_of(req, request.operation_id);
  if (malformed) return reply(malformed_key());
  // Keys are the requester's own: another caller's identical key is another request.
  std::string scoped_key = key ? service::scoped_idempotency_key("submit", requester, *key) : std::string();
  // The change's id is the client's, else a fresh time-ordered one: with a key, it is stored with the
  // key, and a retry that takes over the key of a request that died reuses it.
  auto op = new_change(ctx, requester, request.operation_id, {});
  op.subject_id = request.subject;
  op.target_key = request.target;
  op.title = request.title;
  op.payload_json = dto::payload_json(request);
  op.repository = request.repository.value_or("");
  op.target_branch = request.target_branch.value_or("");
  auto idem = idempotent(ctx, req, scoped_key, submit_route, "submit");
  if (!scoped_key.empty()) {
    idem.operation_id = op.operation_id;
    if (!request.operation_id) idem.legacy_operation_id = ids::uuid_from_name(scoped_key);
  }
  auto* svc = ctx.services;
  // Without a key there is no idempotency record to write around the creation: it commits with the
  // transitions ready at the same moment (the group commit).
  if (idem.key.empty() &&
      service::submit_grouped(*svc, op, [reply, id = op.operation_id](const service::submit_result& r) {
        reply(submit_response(r, id));
      })) {
    return;
  }
  // The submission's whole path: the idempotency gate, then the creation alone.
  auto run_alone = [op, reply, svc, idem](persistence::db_context& db) {
    try {
      http_server::response res;
      auto not_run = service::submit(db, *svc, op, idem, [&res](const service::submit_result& r) {
        res = submit_response(r, r.operation_id);
        return service::stored_answer{res.status, res.body};
      });
      reply(not_run ? gate_response(*not_run, idem.key) : std::move(res));
    } catch (const std::exception& e) {
      reply(outcome_response(api_outcome::internal, {}, nullptr, std::string("submit failed: ") + e.what()));
    }
  };
  // With a key, the common case (a fresh key, a free target) also commits in the group: the key's
  // record with the answer a created change gets, rendered now, and the creation together.
  if (!idem.key.empty()) {
    service::submit_result created;
    created.status = service::submit_status::accepted;
    created.created.step = op.initial_step;
    created.created.phase = workflow::phase_of(op.initial_step);
    auto accepted = submit_response(created, op.operation_id);
    const service::stored_answer stored{accepted.status, accepted.body};
    if (service::submit_grouped(
            *svc, op, idem, stored,
            [reply, accepted](const service::submit_result&) { reply(accepted); },  // the group created it
            run_alone)) {
      return;
    }
  }
  if (!ctx.db.try_submit(std::move(run_alone))) reply(overloaded());
}

/// POST /api/v1/changes/preview: the submit body validated, and each file diffed against the target
/// branch, with the same authorization as a submit and nothing written. A body a submit would
/// refuse gets the submit's 400; what GitLab would refuse is answered per file (valid: false); a
/// failed GitLab read answers an empty preview with the reason (the seeds' read-only preview rule:
/// it never keeps anyone from submitting).
void preview(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  auto placed = parse_placed(ctx, req.body);
  if (auto* refused = std::get_if<http_server::response>(&placed)) return reply(std::move(*refused));
  auto request = std::get<dto::submit_request>(std::move(placed));
  const config::resolved_target target{*request.repository, *request.target_branch};
  auto run = [&ctx, request, target, reply] {
    std::vector<service::preview_input> files;
    for (const auto& f : request.files) files.push_back({f.path, f.content, f.action, f.last_commit_id});
    service::preview_change(
        *ctx.services, target.repository, target.target_branch, std::move(files), [reply](service::preview_result r) {
          if (!r.available) return reply(outcome_response(api_outcome::ok, r.reason, {{"reason", r.reason}}));
          nlohmann::json files = nlohmann::json::array();
          bool valid = true;
          for (const auto& f : r.files) {
            valid = valid && f.problem.empty();
            files.push_back({{"path", f.path},
                             {"action", f.action},
                             {"exists", f.exists},
                             {"lastCommitId", f.exists ? nlohmann::json(f.last_commit_id) : nlohmann::json(nullptr)},
                             {"diff", f.diff},
                             {"problem", f.problem.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.problem)}});
          }
          reply(outcome_response(api_outcome::ok, valid ? "The change is valid" : "The change would be refused",
                                 {{"valid", valid}, {"files", files}}));
        });
  };
  if (!caller.account) return run();
  auto rules = middleware::rules_for_subject(*ctx.config.current(), request.subject);
  auto account = *caller.account;
  ask_permissions(
      ctx, account, rules.to_ask(),
      [account, rules, run, subject = request.subject, reply](std::optional<std::set<std::string>> granted) {
        if (!middleware::permitted_for_subject({account, std::move(granted)}, rules)) {
          return reply(access_denied("preview: " + account + " not permitted for subject " + subject));
        }
        run();
      });
}

/// Whether `caller` may see a change: its requester (no round trip), callers permitted for its
/// subject and operators (one permission round trip; a failed check shows nothing).
service::view_check viewer(service_context& ctx, const std::optional<std::string>& account) {
  return [&ctx, account](const persistence::operation_row& op, std::function<void(bool)> decide) {
    if (!account || middleware::is_requester(*account, op)) return decide(true);
    auto rules = middleware::rules_for_subject(*ctx.config.current(), op.subject_id);
    ask_permissions(
        ctx, *account, rules.to_ask(),
        [account = *account, id = op.operation_id, op, rules,
         decide = std::move(decide)](std::optional<std::set<std::string>> granted) {
          bool visible = middleware::may_use({account, std::move(granted)}, op, rules, middleware::operation_use::view);
          if (!visible) log::info("http.change_hidden", {{"operation_id", id}, {"caller", account}});
          decide(visible);
        });
  };
}

/// The one outcome switch of a status read.
http_server::response status_response(const service::status_view& v) {
  switch (v.outcome) {
    case service::status_outcome::ok: {
      if (v.timeline) return outcome_response(api_outcome::ok, {}, dto::status_document(v.row, *v.timeline, v.live));
      http_server::response r;
      r.status = 200;
      r.body = dto::status_body(v.row, v.live);
      return r;
    }
    case service::status_outcome::not_found: return no_such_operation();
    case service::status_outcome::overloaded: return overloaded();
    case service::status_outcome::failed: break;
  }
  return db_failure(v.error);
}

/// `Cache-Control: no-cache` (or `max-age=0`): the caller wants the database's state, not a row this
/// instance read a moment ago.
bool asks_fresh(std::optional<std::string_view> cache_control) {
  if (!cache_control) return false;
  std::string v(*cache_control);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return v.find("no-cache") != std::string::npos || v.find("no-store") != std::string::npos ||
         v.find("max-age=0") != std::string::npos;
}

/// GET /api/v1/changes/{id}[?include=timeline][&wait=<ms>[&since=<version>]]: the change (one
/// query, or none for an ended change), its timeline when asked for, and the blocking wait
/// (service/status_read). Shown to its requester, to callers permitted for its subject and to
/// operators; to anyone else it does not exist (404, the same body as an unknown id).
void get_one(service_context& ctx, const http_server::request& req, const std::string& id,
             http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  auto parsed = dto::parse_status_params(req.query_param("include"), req.query_param("wait"), req.query_param("since"),
                                         service::max_status_wait_ms);
  if (auto* err = std::get_if<dto::parse_error>(&parsed))
    return reply(outcome_response(api_outcome::bad_request, err->message));
  if (!ids::is_uuid(id)) return reply(no_such_operation());
  if (!ctx.status) return reply(overloaded());
  const auto& params = std::get<dto::status_params>(parsed);
  service::status_query q;
  q.operation_id = id;
  q.timeline = params.timeline;
  q.since = params.since;
  q.fresh = asks_fresh(req.header("cache-control"));
  // A wait ends before the server's handler deadline would cut it (http.handler_timeout_ms).
  auto deadline_ms = ctx.config.current()->http().handler_timeout_ms;
  q.wait_ms = std::min(params.wait_ms, std::max<std::int64_t>(0, deadline_ms - 1000));
  ctx.status->read(std::move(q), viewer(ctx, caller.account),
                   [reply](service::status_view v) { reply(status_response(v)); });
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

/// The answer to a revert, from the use case's result: its one outcome switch. A created revert
/// answers as a submission does (202 ACCEPTED naming the new change, DUPLICATE_SUBMIT, IN_PROGRESS
/// when another change holds the target).
http_server::response revert_response(const service::revert_result& r, const std::string& original_id,
                                      const std::string& revert_id) {
  switch (r.status) {
    case service::revert_status::created: return submit_response(r.submitted, revert_id, {{"revertOf", original_id}});
    case service::revert_status::not_found: return no_such_operation();
    case service::revert_status::not_validated:
    case service::revert_status::nothing_to_revert:
    case service::revert_status::not_configured:
      return outcome_response(api_outcome::conflict, r.message, {{"operationId", original_id}});
    case service::revert_status::already_reverted:
      return outcome_response(api_outcome::already_reverted, r.message,
                              {{"operationId", original_id},
                               {"revertOperationId", r.current_revert},
                               {"statusUrl", "/api/v1/changes/" + r.current_revert}});
    case service::revert_status::unavailable: {
      auto res = outcome_response(api_outcome::unavailable, r.message, nullptr, r.detail);
      res.set_header("Retry-After", std::to_string(r.retry_after_s));
      return res;
    }
    case service::revert_status::overloaded: return overloaded();
    case service::revert_status::failed: break;
  }
  return db_failure(r.error);
}

/// Runs the revert use case for a caller already authorized, keyed like a submission (scope
/// "revert", the fingerprint taken over the path, so one key cannot revert two changes).
void start_revert(service_context& ctx, const http_server::request& req, const std::string& original_id,
                  const dto::revert_request& request, const std::string& requester, http_server::responder reply) {
  auto [key, malformed] = key_of(req, request.operation_id);
  if (malformed) return reply(malformed_key());
  std::string scoped_key = key ? service::scoped_idempotency_key("revert", requester, *key) : std::string();
  service::revert_request r;
  r.original_id = original_id;
  r.revert = new_change(ctx, requester, request.operation_id, key ? scoped_key + " " + original_id : std::string());
  const std::string path = "/api/v1/changes/" + original_id + "/revert";
  r.idem = idempotent(ctx, req, scoped_key, path, "revert");
  auto revert_id = r.revert.operation_id;
  auto answer = std::make_shared<http_server::response>();
  service::revert_change(
      *ctx.services, std::move(r),
      [answer, original_id, revert_id](const service::revert_result& result) {
        *answer = revert_response(result, original_id, revert_id);
        return service::stored_answer{answer->status, answer->body};
      },
      [answer, scoped_key, reply](std::optional<service::gate_result> gate) {
        reply(gate ? gate_response(*gate, scoped_key) : std::move(*answer));
      });
}

/// POST /api/v1/changes/{id}/revert: whoever may submit for the change's subject (its code, or an
/// operator) reverts a VALIDATED change with a new change (service/revert_change). A caller who may
/// see the change but not submit for its subject gets 403; anyone else is told it does not exist.
void revert(service_context& ctx, http_server::request& req, const std::string& id, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  if (!ids::is_uuid(id)) return reply(no_such_operation());
  auto parsed = dto::parse_revert(req.body);
  if (auto* err = std::get_if<dto::parse_error>(&parsed)) {
    return reply(outcome_response(api_outcome::bad_request, err->message));
  }
  auto request = std::get<dto::revert_request>(std::move(parsed));
  if (!caller.account) {
    return start_revert(ctx, req, id, request, std::string(middleware::anonymous_requester), std::move(reply));
  }
  auto shared_req = std::make_shared<http_server::request>(req);
  bool queued = ctx.read_pool().try_submit(
      [&ctx, account = *caller.account, id, request, shared_req, reply](persistence::db_context& db) {
        auto row = persistence::load_operation(db, id);
        if (row.outcome == db_outcome::not_found) return reply(no_such_operation());
        if (!row.ok()) return reply(db_failure(row.error));
        auto rules = middleware::rules_for_subject(*ctx.config.current(), row.value.subject_id);
        ask_permissions(
            ctx, account, rules.to_ask(),
            [&ctx, account, op = std::move(row.value), rules, id, request, shared_req,
             reply](std::optional<std::set<std::string>> granted) {
              middleware::caller who{account, std::move(granted)};
              if (middleware::permitted_for_subject(who, rules)) {
                return start_revert(ctx, *shared_req, id, request, account, reply);
              }
              if (middleware::may_use(who, op, rules, middleware::operation_use::view)) {
                return reply(access_denied("revert: " + account + " not permitted for subject " + op.subject_id));
              }
              log::info("http.revert_refused", {{"operation_id", id}, {"caller", account}});
              reply(no_such_operation());
            });
      });
  if (!queued) reply(overloaded());
}

}  // namespace

void add_change_routes(router& r, service_context& ctx) {
  r.add({routes::submit_change, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           submit(ctx, req, std::move(reply));
         }});
  r.add({routes::preview_change, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           preview(ctx, req, std::move(reply));
         }});
  r.add({routes::get_change, [&ctx](http_server::request& req, const path_params& p, http_server::responder reply) {
           get_one(ctx, req, p.at("id"), std::move(reply));
         }});
  r.add({routes::cancel_change, [&ctx](http_server::request& req, const path_params& p, http_server::responder reply) {
           cancel(ctx, req, p.at("id"), std::move(reply));
         }});
  r.add({routes::revert_change, [&ctx](http_server::request& req, const path_params& p, http_server::responder reply) {
           revert(ctx, req, p.at("id"), std::move(reply));
         }});
  r.add({routes::list_changes, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           list_changes(ctx, req, std::move(reply));
         }});
}

}  // namespace changeflow::http
