#include "http/handlers/subscriptions.hpp"

#include "base/ids.hpp"
#include "base/log.hpp"
#include "http/dto/subscription_dto.hpp"
#include "http/handlers/answers.hpp"
#include "http/handlers/caller.hpp"
#include "http/middleware/error_mapping.hpp"
#include "http/middleware/ownership.hpp"
#include "persistence/notification_repo.hpp"
#include "service/subscriptions.hpp"

#include <algorithm>
#include <memory>

namespace changeflow::http {

namespace {

using middleware::api_outcome;
using middleware::outcome_response;
using nlohmann::json;
using persistence::db_outcome;

http_server::response no_such_operation() {
  return outcome_response(api_outcome::not_found, "No such operation");
}
http_server::response no_such_subscription() {
  return outcome_response(api_outcome::not_found, "No such subscription");
}

/// Runs `job` on the database pool; 503 OVERLOADED when it is full, 500 when the job throws.
void on_db(persistence::db_pool& pool, const http_server::responder& reply,
           std::function<void(persistence::db_context&)> job) {
  bool queued = pool.try_submit([job = std::move(job), reply](persistence::db_context& db) {
    try {
      job(db);
    } catch (const std::exception& e) {
      reply(outcome_response(api_outcome::internal, {}, nullptr, std::string("subscriptions: ") + e.what()));
    }
  });
  if (!queued) reply(outcome_response(api_outcome::overloaded));
}

/// Asks whether `account` holds an operator code; `then(true)` only on a granted answer.
void ask_operator(service_context& ctx, const std::string& account, std::function<void(bool)> then) {
  auto rules = middleware::rules_for_subject(*ctx.config.current(), "");
  rules.subject_rule.clear();
  ask_permissions(ctx, account, rules.to_ask(), [rules, account, then](std::optional<std::set<std::string>> granted) {
    then(middleware::is_operator({account, std::move(granted)}, rules));
  });
}

void store(service_context& ctx, const dto::subscription_request& request, const std::string& owner,
           const http_server::responder& reply) {
  service::subscribe_request s;
  s.subject = request.subject;
  s.operation_id = request.operation_id;
  s.url = request.url;
  s.secret = request.secret;
  s.owner = owner;
  on_db(ctx.db, reply, [s, reply](persistence::db_context& db) {
    auto r = service::subscribe(db, s);
    switch (r.status) {
      case service::subscribe_status::created: {
        json data = {{"subscriptionId", r.subscription.subscription_id},
                     {"subject", s.subject ? json(*s.subject) : json(nullptr)},
                     {"operationId", s.operation_id ? json(*s.operation_id) : json(nullptr)},
                     {"url", s.url},
                     {"owner", s.owner},
                     {"secret", r.secret}};
        return reply(outcome_response(
            api_outcome::created, "Subscribed; keep the secret: it is answered only now and signs every event", data));
      }
      case service::subscribe_status::unsupported_url:
        return reply(outcome_response(api_outcome::bad_request, r.message));
      case service::subscribe_status::failed: return reply(db_failure(r.error));
    }
    reply(outcome_response(api_outcome::internal, {}, nullptr, "unknown subscribe status"));
  });
}

/// Stores a change's subscription once the caller was found allowed to see the change; a subject
/// given beside the change must be the change's own (only now: the subject is part of what it sees).
void store_for_change(service_context& ctx, const dto::subscription_request& request,
                      const persistence::operation_row& op, const std::string& account,
                      const http_server::responder& reply) {
  if (request.subject && *request.subject != op.subject_id) {
    return reply(
        outcome_response(api_outcome::bad_request,
                         "'subject' is not the change's subject; give the change alone, or with its own subject"));
  }
  store(ctx, request, account, reply);
}

/// A change's subscription needs the right to view the change (requester, subject code, operator);
/// anyone else is told the change does not exist, as GET /api/v1/changes/{id} would. The anonymous
/// caller (auth.required false) is served without per-caller checks, as everywhere.
void subscribe_to_change(service_context& ctx, const dto::subscription_request& request, const std::string& account,
                         bool anonymous, const http_server::responder& reply) {
  on_db(ctx.read_pool(), reply, [&ctx, request, account, anonymous, reply](persistence::db_context& db) {
    auto row = persistence::load_operation(db, *request.operation_id);
    if (row.outcome == db_outcome::not_found) return reply(no_such_operation());
    if (!row.ok()) return reply(db_failure(row.error));
    auto op = std::move(row.value);
    if (anonymous || middleware::is_requester(account, op)) {
      return store_for_change(ctx, request, op, account, reply);
    }
    auto rules = middleware::rules_for_subject(*ctx.config.current(), op.subject_id);
    ask_permissions(
        ctx, account, rules.to_ask(),
        [&ctx, request, account, op, rules, reply](std::optional<std::set<std::string>> granted) {
          if (!middleware::may_use({account, std::move(granted)}, op, rules, middleware::operation_use::view)) {
            log::info("http.subscribe_hidden", {{"operation_id", op.operation_id}, {"caller", account}});
            return reply(no_such_operation());
          }
          store_for_change(ctx, request, op, account, reply);
        });
  });
}

void subscribe(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  auto parsed = dto::parse_subscription(req.body);
  if (auto* err = std::get_if<dto::parse_error>(&parsed)) {
    return reply(outcome_response(api_outcome::bad_request, err->message));
  }
  auto request = std::get<dto::subscription_request>(std::move(parsed));
  const std::string anonymous(middleware::anonymous_requester);
  if (request.operation_id) {
    return subscribe_to_change(ctx, request, caller.account.value_or(anonymous), !caller.account, reply);
  }
  if (!caller.account) return store(ctx, request, anonymous, reply);
  auto rules = middleware::rules_for_subject(*ctx.config.current(), *request.subject);
  ask_permissions(
      ctx, *caller.account, rules.to_ask(),
      [&ctx, request, account = *caller.account, rules, reply](std::optional<std::set<std::string>> granted) {
        if (!middleware::permitted_for_subject({account, std::move(granted)}, rules)) {
          return reply(access_denied("subscribe: " + account + " not permitted for subject " + *request.subject));
        }
        store(ctx, request, account, reply);
      });
}

std::optional<int> limit_param(const http_server::request& req, int fallback, std::string& error) {
  auto v = req.query_param("limit");
  if (!v || v->empty()) return fallback;
  try {
    std::size_t used = 0;
    long n = std::stol(*v, &used);
    if (used != v->size()) throw std::invalid_argument("trailing");
    return static_cast<int>(std::clamp<long>(n, 1, 500));
  } catch (...) {
    error = "'limit' must be a number";
    return std::nullopt;
  }
}

/// The caller's own subscriptions; with all=true everybody's, for operators (403 otherwise).
void list(service_context& ctx, http_server::request& req, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  std::string error;
  auto limit = limit_param(req, 100, error);
  if (!limit) return reply(outcome_response(api_outcome::bad_request, error));
  auto all = req.query_param("all");
  if (all && *all != "true" && *all != "false") {
    return reply(outcome_response(api_outcome::bad_request, "'all' must be true or false"));
  }
  auto run = [&ctx, limit = *limit, reply](std::string owner) {
    on_db(ctx.read_pool(), reply, [owner, limit, reply](persistence::db_context& db) {
      auto rows = persistence::list_subscriptions(db, owner, limit);
      if (!rows.ok()) return reply(db_failure(rows.error));
      json items = json::array();
      for (const auto& s : rows.value) items.push_back(dto::to_json(s));
      reply(outcome_response(api_outcome::ok, {}, {{"items", items}}));
    });
  };
  std::string account = caller.account.value_or(std::string(middleware::anonymous_requester));
  if (!all || *all == "false") return run(account);
  if (!caller.account) return reply(access_denied("subscriptions all=true without an identity"));
  ask_operator(ctx, account, [run, account, reply](bool op) {
    if (!op) return reply(access_denied("subscriptions all=true: " + account + " is not an operator"));
    run("");
  });
}

void remove(service_context& ctx, http_server::request& req, const std::string& id, http_server::responder reply) {
  auto caller = who_asks(ctx, req);
  if (caller.refused) return reply(authentication_required());
  // A body would be ignored; refusing it tells a client that believes it sends parameters so.
  if (req.body.find_first_not_of(" \t\r\n") != std::string::npos) {
    return reply(outcome_response(api_outcome::bad_request, "DELETE /api/v1/subscriptions/{id} takes no body"));
  }
  if (!ids::is_uuid(id)) return reply(no_such_subscription());
  std::string account = caller.account.value_or(std::string(middleware::anonymous_requester));
  auto run = [&ctx, id, reply] {
    on_db(ctx.db, reply, [id, reply](persistence::db_context& db) {
      auto r = service::unsubscribe(db, id);
      if (r.outcome == db_outcome::not_found) return reply(no_such_subscription());
      if (!r.ok()) return reply(db_failure(r.error));
      reply(outcome_response(api_outcome::ok, "Subscription deleted", {{"subscriptionId", id}, {"givenUp", r.value}}));
    });
  };
  on_db(ctx.read_pool(), reply,
        [&ctx, id, account, anonymous = !caller.account, run, reply](persistence::db_context& db) {
          auto sub = persistence::find_subscription(db, id);
          if (sub.outcome == db_outcome::not_found) return reply(no_such_subscription());
          if (!sub.ok()) return reply(db_failure(sub.error));
          if (sub.value.owner == account) return run();
          if (anonymous) return reply(no_such_subscription());
          ask_operator(ctx, account, [run, id, account, reply](bool op) {
            if (!op) {
              log::info("http.unsubscribe_refused", {{"subscription_id", id}, {"caller", account}});
              return reply(no_such_subscription());
            }
            run();
          });
        });
}

void list_deliveries(service_context& ctx, http_server::request& req, http_server::responder reply) {
  std::string error;
  auto limit = limit_param(req, 50, error);
  if (!limit) return reply(outcome_response(api_outcome::bad_request, error));
  persistence::delivery_filter f;
  f.limit = *limit;
  if (auto s = req.query_param("state"); s && !s->empty()) {
    if (*s != "PENDING" && *s != "DELIVERED" && *s != "FAILED") {
      return reply(outcome_response(api_outcome::bad_request, "'state' must be PENDING, DELIVERED or FAILED"));
    }
    f.state = *s;
  }
  if (auto o = req.query_param("operationId"); o && !o->empty()) {
    if (!ids::is_uuid(*o)) return reply(outcome_response(api_outcome::bad_request, "'operationId' must be a UUID"));
    f.operation_id = *o;
  }
  if (auto s = req.query_param("subscriptionId"); s && !s->empty()) {
    if (!ids::is_uuid(*s)) return reply(outcome_response(api_outcome::bad_request, "'subscriptionId' must be a UUID"));
    f.subscription_id = *s;
  }
  if (auto a = req.query_param("after"); a && !a->empty()) {
    try {
      std::size_t used = 0;
      f.after = std::stoll(*a, &used);
      if (used != a->size() || f.after < 0) throw std::invalid_argument("after");
    } catch (...) {
      return reply(outcome_response(api_outcome::bad_request, "'after' must be a cursor from nextAfter"));
    }
  }
  on_db(ctx.read_pool(), reply, [f, reply](persistence::db_context& db) {
    auto counts = persistence::delivery_counts(db);
    if (!counts.ok()) return reply(db_failure(counts.error));
    auto rows = persistence::list_deliveries(db, f);
    if (!rows.ok()) return reply(db_failure(rows.error));
    json items = json::array();
    for (const auto& d : rows.value) items.push_back(dto::to_json(d));
    json next = rows.value.size() == static_cast<std::size_t>(f.limit) ? json(rows.value.back().cursor) : json(nullptr);
    reply(outcome_response(api_outcome::ok, {}, {{"counts", counts.value}, {"items", items}, {"nextAfter", next}}));
  });
}

}  // namespace

void add_subscription_routes(router& r, service_context& ctx) {
  r.add({routes::subscribe, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
           subscribe(ctx, req, std::move(reply));
         }});
  r.add({routes::list_subscriptions, [&ctx](http_server::request& req, const path_params&,
                                            http_server::responder reply) { list(ctx, req, std::move(reply)); }});
  r.add({routes::unsubscribe, [&ctx](http_server::request& req, const path_params& p, http_server::responder reply) {
           remove(ctx, req, p.at("id"), std::move(reply));
         }});
  r.add(
      {routes::ops_notifications, [&ctx](http_server::request& req, const path_params&, http_server::responder reply) {
         list_deliveries(ctx, req, std::move(reply));
       }});
}

}  // namespace changeflow::http
