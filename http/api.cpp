#include "http/api.hpp"

#include "http/handlers/batch.hpp"
#include "http/handlers/ops.hpp"
#include "http/handlers/static_files.hpp"

#include "base/log.hpp"
#include "clients/external_context.hpp"
#include "http/envelope.hpp"
#include "http/handlers/callbacks.hpp"
#include "http/handlers/changes.hpp"
#include "http/handlers/health.hpp"
#include "http/handlers/subscriptions.hpp"
#include "http/handlers/whoami.hpp"
#include "http/middleware/deadline_timer.hpp"
#include "http/middleware/error_mapping.hpp"
#include "http/middleware/pipeline.hpp"
#include "http/middleware/rate_limiter.hpp"
#include "http/middleware/route_meters.hpp"
#include "http/openapi.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <vector>

namespace changeflow::http {

namespace {

using middleware::route_policy;

/// Fine buckets (0.5 ms .. 5 s) so the benchmark can read p50/p99 of callback -> commit.
route_policy open_route() {
  return {};
}

/// User write: rate limited per subject, identity demanded when auth.required is on, counted as
/// business activity, idempotent, and governed by the access switch.
route_policy user_write(std::string bucket, middleware::limit_setting limit, std::string business_metric) {
  route_policy p;
  p.bucket = std::move(bucket);
  p.limit = limit;
  p.identity_required_by_config = true;
  p.business_metric = std::move(business_metric);
  p.idempotent_write = true;
  p.access_controlled = true;
  return p;
}

/// User cancel: rate limited and identified like a submit, but never closed by the access switch
/// (withdrawing a change must stay possible while submissions are closed). Naturally idempotent:
/// a repeat answers "already cancelled".
route_policy user_cancel() {
  route_policy p;
  p.bucket = "submit";
  p.limit = &config::rate_limit_settings::submit;
  p.identity_required_by_config = true;
  p.business_metric = "cancel";
  return p;
}

/// A user request that is neither a change nor a plain read: a preview (a submit's body, costs
/// GitLab reads, writes nothing) and managing subscriptions. Rate limited and identified like a
/// submit; never closed by the access switch (which governs submissions), not idempotent by key,
/// counted by no business metric.
route_policy user_limited() {
  route_policy p;
  p.bucket = "submit";
  p.limit = &config::rate_limit_settings::submit;
  p.identity_required_by_config = true;
  return p;
}

/// User read: no rate limit (polling the status must never be refused), identity when auth.required.
/// Which operations a caller may see is decided by the handler (middleware/ownership.hpp): it needs
/// the stored row.
route_policy user_read() {
  route_policy p;
  p.identity_required_by_config = true;
  return p;
}

/// Callbacks authenticate themselves (HMAC / shared token, checked by the handler); only a rate
/// limit per sender applies, and it is off unless rate_limit.callbacks is set.
route_policy callback_route() {
  route_policy p;
  p.bucket = "callbacks";
  p.limit = &config::rate_limit_settings::callbacks;
  return p;
}

/// Ops API: identity required, any rule of auth.ops_rules, rate limited per operator.
route_policy ops_route() {
  route_policy p;
  p.bucket = "ops";
  p.limit = &config::rate_limit_settings::ops;
  p.requires_identity = true;
  p.required_rules = {"changeflow.ops", "changeflow.admin"};  // replaced at run time by auth.ops_rules
  p.rules_from_config = true;
  return p;
}

/// Ops reads (the console's polling) have their own bucket, so reading can never use up the quota an
/// operator needs to act during an incident.
route_policy ops_read_route() {
  route_policy p = ops_route();
  p.bucket = "ops_read";
  p.limit = &config::rate_limit_settings::ops_read;
  return p;
}

const route_policy* find_policy(std::string_view method, std::string_view pattern) {
  for (const auto& e : route_policies()) {
    if (e.method == method && e.pattern == pattern) return &e.policy;
  }
  return nullptr;
}

/// What the API owns beyond the routes: the limiter buckets, the permission timeout timer and the
/// chain's dependencies (which refer to both).
struct api_state {
  service_context& ctx;
  middleware::rate_limiter limiter;
  middleware::deadline_timer timer;
  middleware::chain_deps deps;

  explicit api_state(service_context& c)
      : ctx(c),
        deps{[&c] { return c.config.current(); }, limiter, c.metrics, nullptr,
             [] { return std::chrono::system_clock::now(); }} {}
};

std::chrono::milliseconds permission_timeout(const config::snapshot& snap) {
  return std::chrono::milliseconds(snap.auth().permission_timeout_ms);
}

/// One round trip to the permission service on the external pool, raced against a timer so the
/// chain is always answered: whichever comes first wins, the other is ignored. A full pool, a
/// missing pool or a timeout are errors, and errors deny (403).
middleware::permission_check make_permission_check(std::weak_ptr<api_state> weak) {
  return [weak](std::string subject, std::vector<std::string> rules, middleware::permission_callback cb) {
    using middleware::permission_outcome;
    // The first answer takes the callback out of the shared slot, so the loser (the timer entry or
    // the pool job) no longer holds the request's responder and the chain (which holds api_state).
    struct slot_t {
      std::mutex mutex;
      middleware::permission_callback cb;
    };
    auto slot = std::make_shared<slot_t>();
    slot->cb = std::move(cb);
    auto answer = [slot](permission_outcome o) {
      middleware::permission_callback first;
      {
        std::lock_guard lock(slot->mutex);
        first = std::move(slot->cb);
        slot->cb = nullptr;
      }
      if (first) first(std::move(o));
    };
    auto state = weak.lock();
    if (!state) return answer(permission_outcome::failed("service stopping"));
    auto snap = state->ctx.config.current();
    state->timer.schedule(permission_timeout(*snap),
                          [answer] { answer(permission_outcome::failed("permission check timed out")); });
    auto* pool = state->ctx.services ? state->ctx.services->external : nullptr;
    if (!pool) return answer(permission_outcome::failed("no external pool"));
    bool queued = pool->try_submit(
        [snap, subject = std::move(subject), rules = std::move(rules), answer](clients::external_context& ec) {
          try {
            ec.refresh(*snap);
            auto a = ec.permission.check(subject, rules);
            if (a.error) return answer(permission_outcome::failed(clients::describe(*a.error)));
            answer(permission_outcome::granted_rules(std::move(a.granted)));
          } catch (const std::exception& e) {
            answer(permission_outcome::failed(std::string("permission client threw: ") + e.what()));
          } catch (...) {
            answer(permission_outcome::failed("permission client threw"));
          }
        });
    if (!queued) answer(permission_outcome::failed("external pool full"));
  };
}

}  // namespace

std::optional<std::string> authenticated_operator(const http_server::request& req) {
  auto h = req.headers.find(authenticated_operator_header);
  if (h == req.headers.end() || h->second.empty()) return std::nullopt;
  return h->second;
}

middleware::route_policy policy_for(route_access access) {
  switch (access) {
    case route_access::open: return open_route();
    case route_access::user_read: return user_read();
    // Trade-off: rate limiting runs BEFORE the idempotency check, so a retry over quota gets 429
    // RATE_LIMITED instead of its replayed response; it gets the replay once Retry-After has passed.
    case route_access::user_submit: return user_write("submit", &config::rate_limit_settings::submit, "submit");
    case route_access::user_cancel: return user_cancel();
    case route_access::user_preview:
    case route_access::user_manage: return user_limited();
    case route_access::callback: return callback_route();
    case route_access::ops: return ops_route();
  }
  return open_route();
}

middleware::route_policy policy_for(const route_spec& spec) {
  if (spec.access == route_access::ops && spec.method == "GET") return ops_read_route();
  return policy_for(spec.access);
}

const std::vector<route_policy_entry>& route_policies() {
  static const std::vector<route_policy_entry> table = [] {
    std::vector<route_policy_entry> out;
    for (const route_spec* spec : all_routes) {
      out.push_back({std::string(spec->method), std::string(spec->pattern), policy_for(*spec)});
    }
    return out;
  }();
  return table;
}

std::shared_ptr<const router> build_routes(service_context& ctx, std::optional<actors::batch_coordinator> batch) {
  router plain;
  add_health_routes(plain, ctx);
  add_change_routes(plain, ctx);
  add_subscription_routes(plain, ctx);
  add_callback_routes(plain, ctx);
  add_reconcile_route(plain, ctx);
  add_gitlab_webhook_route(plain, ctx, batch);
  add_whoami_route(plain, ctx);
  add_ops_routes(plain, ctx);
  add_batch_routes(plain, ctx, std::move(batch));
  add_console_routes(plain, [&ctx] { return ctx.config.current()->console().dir.value_or(""); });
  add_openapi_route(plain);
  // Every handler serves a route of the table, and every route of the table has exactly one
  // handler: anything else is a programming error, refused before the service listens.
  auto routes = std::make_shared<router>();
  std::set<std::pair<std::string, std::string>> bound;
  for (auto r : plain.routes()) {
    const auto* p = find_policy(r.method, r.pattern);
    if (!p) throw std::logic_error("route " + r.method + " " + r.pattern + " is not in http/route_table.hpp");
    if (!bound.emplace(r.method, r.pattern).second) {
      throw std::logic_error("route " + r.method + " " + r.pattern + " has two handlers");
    }
    r.policy = *p;
    r.policy.meters = std::make_shared<middleware::route_meters>(ctx.metrics, r.pattern, r.method,
                                                                 r.pattern.rfind("/api/v1/callbacks/", 0) == 0);
    routes->add(std::move(r));
  }
  for (const route_spec* spec : all_routes) {
    if (!bound.count({std::string(spec->method), std::string(spec->pattern)})) {
      throw std::logic_error("route " + std::string(spec->method) + " " + std::string(spec->pattern) +
                             " of http/route_table.hpp has no handler");
    }
  }
  return routes;
}

http_server::handler make_api(service_context& ctx, std::shared_ptr<const router> routes) {
  auto state = std::make_shared<api_state>(ctx);
  state->deps.check_permissions = make_permission_check(state);
  ctx.check_permissions = state->deps.check_permissions;
  // When the server releases its handler (at stop), pending permission timeouts are dropped: they
  // hold requests' responders and, through the chain, api_state itself.
  struct timer_guard {
    std::shared_ptr<api_state> s;
    ~timer_guard() { s->timer.clear(); }
  };
  auto guard = std::make_shared<timer_guard>(timer_guard{state});
  return [&ctx, routes, state, guard](http_server::request&& req, http_server::responder reply) {
    // The server calls this on the thread that has just read the request: "arrived" is its arrival.
    const auto arrived = std::chrono::steady_clock::now();
    // Test hook (metrics.fault_injection, hot): every metric emission throws inside the registry's
    // wrapper; responses must not change.
    if (auto snap = ctx.config.current()) ctx.metrics.set_fault_injection(snap->metrics().fault_injection);

    auto m = routes->match(req.method, req.path);
    if (m.kind == router::match_kind::not_found) {
      return reply(middleware::outcome_response(middleware::api_outcome::not_found, "No such endpoint"));
    }
    if (m.kind == router::match_kind::method_not_allowed) {
      auto r = middleware::outcome_response(middleware::api_outcome::method_not_allowed);
      std::string allow;
      for (auto& a : m.allowed_methods) allow += (allow.empty() ? "" : ", ") + a;
      r.set_header("Allow", allow);
      return reply(std::move(r));
    }
    const route* matched = m.matched;
    // API metrics: latency and status per route template, recorded when the reply is sent (also
    // for requests the chain refused, so 401/403/429 show up in the latency histogram).
    auto started = std::chrono::steady_clock::now();
    // `routes` keeps `matched` alive for a reply that comes after the server released its handler.
    http_server::responder timed([reply, arrived, started, routes, matched](http_server::response r) {
      auto now = std::chrono::steady_clock::now();
      double seconds = std::chrono::duration<double>(now - started).count();
      // Callback -> commit: a callback is answered only after its delivery record and transition
      // committed, so arrival -> reply is the sender's view of "callback committed" (bench/).
      double since_arrival = std::chrono::duration<double>(now - arrived).count();
      // build_routes gives every route its meters.
      if (matched->policy.meters) matched->policy.meters->replied(r.status, seconds, since_arrival);
      reply(std::move(r));
    });

    // The reserved operator header is the server's to write: drop any client copy first.
    req.headers.erase(std::string(authenticated_operator_header));
    auto head = middleware::head_of(req, matched->pattern);
    auto shared_req = std::make_shared<http_server::request>(std::move(req));
    auto params = std::make_shared<path_params>(std::move(m.params));
    middleware::run_chain(head, matched->policy, state->deps,
                          [routes, matched, shared_req, params, timed, state](middleware::chain_outcome out) {
                            if (!out.proceed()) return timed(std::move(*out.rejection));
                            if (out.who.id)
                              shared_req->headers[std::string(authenticated_operator_header)] = out.who.id->account;
                            auto on_complete = out.on_complete;
                            http_server::responder completed([timed, on_complete](http_server::response r) {
                              if (on_complete) on_complete(r.status);  // never throws
                              timed(std::move(r));
                            });
                            try {
                              matched->handler(*shared_req, *params, completed);
                            } catch (const std::exception& e) {
                              completed(internal_error(std::string("handler threw: ") + e.what()));
                            } catch (...) {
                              completed(internal_error("handler threw a non-exception"));
                            }
                          });
  };
}

}  // namespace changeflow::http
