#include "http/middleware/pipeline.hpp"

#include "base/log.hpp"
#include "http/envelope.hpp"
#include "http/middleware/access_mode.hpp"
#include "http/middleware/error_mapping.hpp"
#include "http/middleware/route_meters.hpp"

#include <algorithm>
#include <atomic>

namespace changeflow::http::middleware {

namespace {

/// State shared by the synchronous part and the permission callback.
struct chain_run {
  request_head head;
  route_policy policy;
  chain_deps& deps;
  std::shared_ptr<const config::snapshot> snap;
  std::function<void(chain_outcome)> done;
  chain_outcome outcome;
  std::chrono::system_clock::time_point now{};
  std::vector<std::string> rules;  // the route's rule codes as in force for this request
  std::atomic<bool> finished{false};
  std::atomic<bool> answered{false};  // the permission callback is honoured once

  // The headers and the peer are read by the synchronous part only (run_chain's `head`): the run
  // keeps the route and the method, not a second copy of every header.
  chain_run(const request_head& h, const route_policy& p, chain_deps& d, std::function<void(chain_outcome)> fn)
      : head{h.method, h.route, {}, {}}, policy(p), deps(d), done(std::move(fn)) {}

  void finish() {
    if (finished.exchange(true)) return;  // exactly once, whatever the permission client does
    done(std::move(outcome));
  }
  void reject(http_server::response r) {
    outcome.rejection = std::move(r);
    outcome.on_complete = nullptr;
    finish();
  }
};

bool user_labels_allowed(const config::snapshot& snap, const identity::resolve_result& who) {
  // An unmapped employee id might be the same person as an account: skip rather than guess, so one
  // person never shows up under two label values.
  return snap.metrics().user_labels && who.id && !identity::is_unmapped_employee(*who.id);
}

void count_business(metrics::registry& m, const std::string& action, const char* stage, const config::snapshot& snap,
                    const identity::resolve_result& who) noexcept {
  try {
    m.inc("changeflow_business_activity_total", "Business actions by route-declared action and stage",
          {{"action", action}, {"stage", stage}});
    if (user_labels_allowed(snap, who)) {
      m.inc("changeflow_business_activity_by_user_total", "Business actions per user (metrics.user_labels)",
            {{"action", action}, {"stage", stage}, {"user", who.id->account}});
    }
  } catch (...) {
    // Building labels can only fail on allocation; observability never changes the outcome.
  }
}

void pass(const std::shared_ptr<chain_run>& run) {
  auto& m = run->deps.metrics;
  // 2b. Access switch for user writes: misconfiguration closes (see access_mode.hpp). Checked after
  // authorization so an anonymous caller still learns it must log in, and before the metrics so a
  // refused write is never counted as business activity.
  if (run->policy.access_controlled && !access_allowed(*run->snap, run->now)) {
    m.inc("changeflow_access_closed_total", "User writes refused because access is closed",
          {{"route", run->head.route}});
    return run->reject(outcome_response(api_outcome::access_closed, {}, nullptr,
                                        "access.mode/access.window closed for " + run->head.route));
  }
  // 3. API metrics: request received (latency by status is recorded by the API when it replies).
  if (run->policy.meters) {
    run->policy.meters->received();
  } else {
    m.inc("changeflow_http_requests_received_total", "Requests admitted past rate limit and authorization",
          {{"route", run->head.route}, {"method", run->head.method}});
  }
  // 4. Business metrics: only routes that declare an action ever get here (allowlist by
  // construction).
  if (!run->policy.business_metric.empty()) {
    count_business(m, run->policy.business_metric, "received", *run->snap, run->outcome.who);
    run->outcome.on_complete = [&m, action = run->policy.business_metric, snap = run->snap,
                                who = run->outcome.who](unsigned status) noexcept {
      if (status >= 200 && status < 300) count_business(m, action, "succeeded", *snap, who);
    };
  } else {
    run->outcome.on_complete = [](unsigned) noexcept {};
  }
  run->finish();
}

void deny(const std::shared_ptr<chain_run>& run, authz_decision d, const std::string& detail) {
  run->deps.metrics.inc("changeflow_authz_denied_total", "Requests refused by authorization",
                        {{"route", run->head.route}, {"decision", std::string(to_string(d))}});
  run->reject(deny_response(d, detail));
}

void authorize(const std::shared_ptr<chain_run>& run) {
  const auto& p = run->policy;
  // A cleared or mistyped switch demands an identity: turning authentication off must be explicit.
  bool identity_required = p.requires_identity || (p.identity_required_by_config && run->snap->auth().required);
  const bool rules_from_config = p.rules_from_config;
  run->rules = rules_from_config ? run->snap->auth().ops_rules : p.required_rules;
  run->rules.erase(std::remove_if(run->rules.begin(), run->rules.end(), [](const std::string& r) { return r.empty(); }),
                   run->rules.end());
  // A rules key that is cleared or empty grants nobody: it still demands an identity (401 first),
  // then denies with 403 without asking the permission service.
  if (rules_from_config) identity_required = true;
  if (!needs_identity(run->rules, identity_required)) return pass(run);

  const auto& who = run->outcome.who;
  if (rules_from_config && run->rules.empty() && who.id) {
    return deny(run, authz_decision::deny_403, "auth.ops_rules is empty: nobody is granted");
  }
  if (run->rules.empty() || !who.id) {
    auto d = decide_authorization(run->rules, identity_required, who, std::nullopt);
    if (d == authz_decision::allow) return pass(run);
    return deny(run, d, "identity: " + std::string(identity::to_string(who.reason)));
  }

  auto on_answer = [run](permission_outcome answer) {
    if (run->answered.exchange(true)) return;
    try {
      auto d = decide_authorization(run->rules, true, run->outcome.who, answer);
      if (d == authz_decision::allow) return pass(run);
      deny(run, d, answer.granted ? "rule not granted" : "permission service: " + answer.error);
    } catch (...) {
      deny(run, authz_decision::deny_403, "permission answer handling failed");
    }
  };
  if (!run->deps.check_permissions) {
    return deny(run, authz_decision::deny_403, "no permission service configured");
  }
  try {
    run->deps.check_permissions(who.id->account, run->rules, on_answer);
  } catch (const std::exception& e) {
    if (!run->answered.exchange(true))
      deny(run, authz_decision::deny_403, std::string("permission check threw: ") + e.what());
  } catch (...) {
    if (!run->answered.exchange(true)) deny(run, authz_decision::deny_403, "permission check threw");
  }
}

}  // namespace

request_head head_of(const http_server::request& req, std::string route_template) {
  return request_head{req.method, std::move(route_template), req.headers, req.peer_address};
}

void run_chain(const request_head& head, const route_policy& policy, chain_deps& deps,
               std::function<void(chain_outcome)> done) {
  auto run = std::make_shared<chain_run>(head, policy, deps, std::move(done));
  try {
    run->snap = deps.config ? deps.config() : nullptr;
    if (!run->snap)
      return run->reject(
          outcome_response(api_outcome::unavailable, {}, nullptr, "middleware chain: no configuration snapshot"));
    auto now = deps.clock ? deps.clock() : std::chrono::system_clock::now();
    run->now = now;
    const auto& snap = *run->snap;

    run->outcome.who = identity::resolve_identity(head.headers, head.peer_address, snap, now);
    if (run->outcome.who.presented_but_rejected()) {
      log::info("http.identity_rejected",
                {{"route", head.route}, {"reason", identity::to_string(run->outcome.who.reason)}});
    }
    run->outcome.client_address = client_address(head.headers, head.peer_address, snap.auth().trusted_proxies);
    run->outcome.rate_limit_subject = rate_limit_subject(run->outcome.who.id, run->outcome.client_address);

    // 1. Rate limit. Runs before idempotency: a duplicate over quota gets 429, not
    // DUPLICATE_SUBMIT.
    if (auto settings = rate_limit_policy(snap, policy.limit)) {
      auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
      auto key = policy.bucket + ":" + run->outcome.rate_limit_subject;
      auto r = deps.limiter.try_acquire(key, settings->limit, settings->window_ms, now_ms);
      if (!r.allowed) {
        deps.metrics.inc("changeflow_rate_limited_total", "Requests refused by rate limiting",
                         {{"bucket", policy.bucket.empty() ? std::string("default") : policy.bucket}});
        return run->reject(rate_limited_response(r, settings->limit));
      }
    }
    // 2. Authorization (may continue asynchronously), then 3./4. metrics in pass().
    authorize(run);
  } catch (const std::exception& e) {
    // Fail closed: a fault inside the chain must never let the request through unchecked.
    run->reject(internal_error(std::string("middleware chain failed: ") + e.what()));
  } catch (...) {
    run->reject(internal_error("middleware chain failed"));
  }
}

}  // namespace changeflow::http::middleware
