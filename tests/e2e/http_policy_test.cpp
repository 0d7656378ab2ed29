// The HTTP cross-cutting concerns, end to end over real HTTP against changeflowd + changeflow-sim +
// MariaDB: every fallback rule of the configuration (cleared, zero, negative, misspelt, unparsable),
// the permission service failing in each way, identity (JWT alg=none / bad signature / expired,
// aliases), the rate-limit subject, idempotent replay, metric faults, and hot reload.

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include <gtest/gtest.h>
#include <jwt.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

constexpr const char* jwt_secret = "e2e-jwt-secret";

json base_config(json extra = json::object()) {
  json c = {{"auth", {{"jwt_secret", jwt_secret}}}};
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    if (it.value().is_object() && c.contains(it.key())) {
      c[it.key()].update(it.value());
    } else {
      c[it.key()] = it.value();
    }
  }
  return c;
}

/// A token minted with libjwt. exp_offset is seconds from now; alg none ignores the key.
std::string mint(const std::string& sub, long exp_offset = 600, jwt_alg_t alg = JWT_ALG_HS256,
                 const std::string& key = jwt_secret) {
  return mint_jwt(sub, key, exp_offset, alg);
}

using headers = std::vector<std::pair<std::string, std::string>>;

headers bearer(const std::string& token) {
  return {{"Authorization", "Bearer " + token}};
}

http_result call(flow_env& env, const std::string& method, const std::string& target, const std::string& body = {},
                 const headers& h = {}) {
  return http_call("127.0.0.1", env.port(), method, target, body, h);
}

std::string code_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("code") && j["code"].is_string() ? j["code"].get<std::string>() : "";
}

std::string message_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("message") && j["message"].is_string() ? j["message"].get<std::string>() : "";
}

/// A submit with a malformed body: the chain (rate limit, access, auth) runs before the body is
/// parsed, so an ADMITTED probe answers 400 and a refused one answers 429/403/401.
http_result probe_submit(flow_env& env, const headers& h = {}) {
  return call(env, "POST", "/api/v1/changes", "{not json", h);
}

json submit_body(const std::string& title, const std::string& subject, const std::string& target,
                 const std::string& operation_id) {
  json b = {{"subject", subject},
            {"target", target},
            {"title", title},
            {"files", {{{"path", "config/" + target + ".yaml"}, {"content", "value: 1\n"}}}}};
  if (!operation_id.empty()) b["operationId"] = operation_id;
  return b;
}

/// Rewrites the service's config file with `overrides` merged over the environment's config.
void rewrite(flow_env& env, const json& overrides) {
  json c = env.config();
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    if (it.value().is_object() && c.contains(it.key()) && c[it.key()].is_object()) {
      for (auto inner = it.value().begin(); inner != it.value().end(); ++inner)
        c[it.key()][inner.key()] = inner.value();
    } else {
      c[it.key()] = it.value();
    }
  }
  env.service().rewrite_config(c);
}

int unique_counter = 0;
std::string fresh_subject(const std::string& prefix) {
  return prefix + "-" + std::to_string(++unique_counter);
}

/// Number of consecutive admitted probes (400) a fresh identity gets before a 429, up to `cap`.
int admitted_before_limit(flow_env& env, int cap) {
  auto token = mint(fresh_subject("probe"));
  for (int i = 0; i < cap; ++i) {
    auto r = probe_submit(env, bearer(token));
    if (r.status == 429) return i;
    if (r.status != 400) return -100 - r.status;  // anything else is a failure of the test setup
  }
  return cap;
}

double metric_value(flow_env& env, const std::string& prefix) {
  auto r = call(env, "GET", "/metrics");
  double total = 0;
  size_t pos = 0;
  while ((pos = r.body.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || r.body[pos - 1] == '\n') {
      auto eol = r.body.find('\n', pos);
      auto line = r.body.substr(pos, eol - pos);
      auto space = line.rfind(' ');
      if (space != std::string::npos) total += std::stod(line.substr(space + 1));
    }
    pos += prefix.size();
  }
  return total;
}

}  // namespace

// Limit read on every request: a value applies without restart; cleared / 0 / negative -> no
// limiting; a value of the wrong type is refused by validation and the last good snapshot stays.
TEST(HttpPolicy, RateLimitFallbacksApplyWithoutRestart) {
  flow_env env(base_config(json{{"rate_limit", {{"submit", 2}, {"window_ms", 600000}}}}));
  auto pid = env.service().process().pid();
  ASSERT_EQ(admitted_before_limit(env, 5), 2);
  auto limited = probe_submit(env);  // anonymous: its own ip: quota
  probe_submit(env);
  auto third = probe_submit(env);
  EXPECT_EQ(third.status, 429);
  EXPECT_EQ(code_of(third), "RATE_LIMITED");
  EXPECT_FALSE(third.header("retry-after").empty());
  EXPECT_EQ(third.header("ratelimit-limit"), "2");
  (void)limited;

  struct fallback_case {
    const char* name;
    json value;
  };
  const fallback_case unlimited[] = {{"cleared", nullptr}, {"zero", 0}, {"negative", -5}};
  for (const auto& c : unlimited) {
    rewrite(env, {{"rate_limit", {{"submit", c.value}}}});
    EXPECT_TRUE(wait_until([&] { return admitted_before_limit(env, 6) == 6; }, std::chrono::seconds(10))) << c.name;
    rewrite(env, {{"rate_limit", {{"submit", 2}}}});
    EXPECT_TRUE(wait_until([&] { return admitted_before_limit(env, 6) == 2; }, std::chrono::seconds(10))) << c.name;
  }
  // Misspelt value type: the reload is refused (counted), the last good limit (2) stays in force.
  auto errors_before = metric_value(env, "changeflow_config_reload_errors");
  rewrite(env, {{"rate_limit", {{"submit", "ten"}}}});
  EXPECT_TRUE(wait_until([&] { return metric_value(env, "changeflow_config_reload_errors") > errors_before; },
                         std::chrono::seconds(10)));
  EXPECT_EQ(admitted_before_limit(env, 6), 2);
  EXPECT_EQ(env.service().process().pid(), pid) << "every change above applied without a restart";
}

// access.mode: blank -> TEST_WINDOW (closed without a window), misspelt -> CLOSED, any case of OPEN
// opens; TEST_WINDOW with an unparsable window is closed. Only user writes are affected.
TEST(HttpPolicy, AccessModeFallbacks) {
  flow_env env(base_config(json{{"access", {{"mode", "OPEN"}}}}));
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  auto hhmm = [](int minutes) {
    minutes = ((minutes % 1440) + 1440) % 1440;
    char buf[8];
    std::snprintf(buf, sizeof buf, "%02d:%02d", minutes / 60, minutes % 60);
    return std::string(buf);
  };
  int minute_now = utc.tm_hour * 60 + utc.tm_min;
  std::string around_now = hhmm(minute_now - 120) + "-" + hhmm(minute_now + 120);

  struct access_case {
    const char* name;
    json mode;
    json window;
    bool open;
  };
  const access_case cases[] = {
      {"OPEN", "OPEN", nullptr, true},
      {"CLOSED", "CLOSED", nullptr, false},
      {"lower-case open", " open ", nullptr, true},
      {"blank -> TEST_WINDOW without window", "", nullptr, false},
      {"OPEN again", "OPEN", nullptr, true},
      {"misspelt -> CLOSED", "OPNE", nullptr, false},
      {"TEST_WINDOW around now", "TEST_WINDOW", around_now, true},
      {"TEST_WINDOW unparsable window", "TEST_WINDOW", "9am-5pm", false},
      {"cleared -> TEST_WINDOW, window around now", nullptr, around_now, true},
      {"TEST_WINDOW cleared window", "TEST_WINDOW", nullptr, false},
  };
  for (const auto& c : cases) {
    rewrite(env, {{"access", {{"mode", c.mode}, {"window", c.window}}}});
    http_result last;
    bool applied = wait_until(
        [&] {
          last = probe_submit(env, bearer(mint(fresh_subject("access"))));
          return last.status == (c.open ? 400 : 403);
        },
        std::chrono::seconds(10));
    EXPECT_TRUE(applied) << c.name << ": " << last.status << " " << last.body;
    if (!c.open) {
      EXPECT_EQ(code_of(last), "ACCESS_CLOSED") << c.name;
      // Reads are not governed by the access switch.
      EXPECT_EQ(call(env, "GET", "/api/v1/changes?subject=nobody").status, 200) << c.name;
    }
  }
}

// 401 (no usable identity) vs 403 (identity without permission, or the permission service failing),
// the fixed 403 message, JWT verification, and the server-written operator.
TEST(HttpPolicy, AuthorizationIdentityAndPermissionServiceFailures) {
  flow_env env(base_config(json{{"auth", {{"jwt_secret", jwt_secret}, {"permission_timeout_ms", 400}}},
                                {"external", {{"request_timeout_ms", 3000}, {"breaker_failures", 100}}}}));
  ASSERT_EQ(
      env.sim_call("POST", "/_sim/permissions", json{{"subject", "alice"}, {"granted", {"changeflow.ops"}}}.dump())
          .status,
      200);
  ASSERT_EQ(
      env.sim_call("POST", "/_sim/permissions", json{{"subject", "mallory"}, {"granted", json::array()}}.dump()).status,
      200);
  ASSERT_EQ(
      env.sim_call("POST", "/_sim/permissions", json{{"subject", "adminbob"}, {"granted", {"changeflow.admin"}}}.dump())
          .status,
      200);

  struct auth_case {
    const char* name;
    headers h;
    int status;
    const char* code;
  };
  const auth_case cases[] = {
      {"no credentials", {}, 401, "UNAUTHENTICATED"},
      {"not a bearer", {{"Authorization", "Basic YWxpY2U6eA=="}}, 401, "UNAUTHENTICATED"},
      {"alg none", bearer(mint("alice", 600, JWT_ALG_NONE)), 401, "UNAUTHENTICATED"},
      {"wrong signature", bearer(mint("alice", 600, JWT_ALG_HS256, "another-secret")), 401, "UNAUTHENTICATED"},
      {"expired", bearer(mint("alice", -60)), 401, "UNAUTHENTICATED"},
      {"HS512 instead of HS256", bearer(mint("alice", 600, JWT_ALG_HS512)), 401, "UNAUTHENTICATED"},
      {"gateway header from an untrusted peer", {{"X-Authenticated-User", "alice"}}, 401, "UNAUTHENTICATED"},
      {"valid, rule not granted", bearer(mint("mallory@corp.example")), 403, "FORBIDDEN"},
      {"valid, ops rule", bearer(mint("Alice@corp.example")), 200, "OK"},
      {"valid, admin rule (any-of)", bearer(mint("adminbob")), 200, "OK"},
  };
  for (const auto& c : cases) {
    auto r = call(env, "GET", "/api/v1/ops/whoami", {}, c.h);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body;
    EXPECT_EQ(code_of(r), c.code) << c.name;
    if (c.status == 403) {
      EXPECT_EQ(message_of(r), "Access denied") << c.name;
    }
  }

  // Forged operator: neither the reserved parameter nor the reserved header survives.
  auto forged =
      call(env, "GET", "/api/v1/ops/whoami?__authenticatedOperator=mallory&note=hi", {},
           {{"Authorization", "Bearer " + mint("alice")}, {"X-Changeflow-Authenticated-Operator", "mallory"}});
  ASSERT_EQ(forged.status, 200) << forged.body;
  auto data = json::parse(forged.body)["data"];
  EXPECT_EQ(data["operator"], "alice");
  EXPECT_EQ(data["params"]["__authenticatedOperator"], "alice");
  EXPECT_EQ(data["params"]["note"], "hi");

  // The permission service failing in every way denies with the same fixed 403 (fail closed).
  struct failure_case {
    const char* name;
    json fault;
  };
  const failure_case failures[] = {
      {"5xx", {{"kind", "status"}, {"status", 503}, {"endpoint", "permission_check"}, {"match", "downer"}}},
      {"slow beyond auth.permission_timeout_ms",
       {{"kind", "slow"}, {"delay_ms", 2500}, {"endpoint", "permission_check"}, {"match", "slowpoke"}}},
      {"garbage body", {{"kind", "garbage"}, {"endpoint", "permission_check"}, {"match", "garbled"}}},
  };
  for (const auto& f : failures) {
    env.add_fault(f.fault);
    auto r = call(env, "GET", "/api/v1/ops/whoami", {}, bearer(mint(f.fault["match"].get<std::string>())));
    EXPECT_EQ(r.status, 403) << f.name << ": " << r.body;
    EXPECT_EQ(message_of(r), "Access denied") << f.name;
  }
  // A cleared rule list grants nobody (hot): alice is now denied without restart.
  rewrite(env, {{"auth", {{"jwt_secret", jwt_secret}, {"permission_timeout_ms", 400}, {"ops_rules", json::array()}}}});
  EXPECT_TRUE(
      wait_until([&] { return call(env, "GET", "/api/v1/ops/whoami", {}, bearer(mint("alice"))).status == 403; },
                 std::chrono::seconds(10)));

  // Permission service down (nothing listens at its address; base_url is a restart key).
  env.restart_service(json{{"permission", {{"base_url", "http://127.0.0.1:1"}}}});
  auto down = call(env, "GET", "/api/v1/ops/whoami", {}, bearer(mint("alice")));
  EXPECT_EQ(down.status, 403) << down.body;
  EXPECT_EQ(message_of(down), "Access denied");
  EXPECT_EQ(call(env, "GET", "/api/v1/ops/whoami").status, 401)
      << "no identity stays 401 even when the service is down";
}

// The rate-limit subject: the hop appended by the trusted proxy, never a client-supplied first hop;
// an email account and its employee id share one quota.
TEST(HttpPolicy, RateLimitSubjectForwardedForAndAliases) {
  flow_env env(base_config(json{{"rate_limit", {{"submit", 2}, {"window_ms", 600000}}},
                                {"auth",
                                 {{"jwt_secret", jwt_secret},
                                  {"trusted_proxies", {"127.0.0.1"}},
                                  {"aliases", {{"E12345", "carol@corp.example"}}}}}}));
  // Three requests from client 10.0.0.5 behind our proxy, each spoofing a different first hop.
  for (int i = 0; i < 2; ++i) {
    auto r = probe_submit(env, {{"X-Forwarded-For", "9.9.9." + std::to_string(i) + ", 10.0.0.5"}});
    EXPECT_EQ(r.status, 400) << r.body;
  }
  auto spoofed = probe_submit(env, {{"X-Forwarded-For", "9.9.9.77, 10.0.0.5"}});
  EXPECT_EQ(spoofed.status, 429) << "a spoofed first hop must not buy a fresh quota";
  // Another client behind the proxy has its own quota.
  EXPECT_EQ(probe_submit(env, {{"X-Forwarded-For", "9.9.9.1, 10.0.0.6"}}).status, 400);

  // Email-style account and employee id resolve to one identity, hence one quota.
  EXPECT_EQ(probe_submit(env, bearer(mint("Carol@corp.example"))).status, 400);
  EXPECT_EQ(probe_submit(env, bearer(mint("E12345"))).status, 400);
  auto third = probe_submit(env, bearer(mint("12345")));
  EXPECT_EQ(third.status, 429) << third.body;
  // An unrelated identity is unaffected.
  EXPECT_EQ(probe_submit(env, bearer(mint("dave"))).status, 400);
}

// Idempotency: byte-identical replay, 422 on a changed body, 409 while the first is in flight, the
// stored response replayed once the first completes, and the cleanup of expired records.
TEST(HttpPolicy, IdempotencyReplayConflictInFlightAndCleanup) {
  flow_env env(base_config(json{{"idempotency", {{"cleanup_interval_ms", 100}}}}), {"--callback-delay-ms", "3000"});
  const std::string op = "7a1c2a9e-1111-4222-8333-444455556666";
  auto body = submit_body("idem", "erin", "svc-idem", op).dump();
  auto first = call(env, "POST", "/api/v1/changes", body);
  ASSERT_EQ(first.status, 202) << first.body;
  EXPECT_EQ(code_of(first), "ACCEPTED");
  auto retry = call(env, "POST", "/api/v1/changes", body);
  EXPECT_EQ(retry.status, 202);
  EXPECT_EQ(retry.body, first.body) << "the replay is the original response, byte for byte";
  EXPECT_EQ(retry.header("idempotent-replayed"), "true");
  // Same body with different whitespace / key order is the same request.
  auto reordered = call(env, "POST", "/api/v1/changes", json::parse(body).dump(2));
  EXPECT_EQ(reordered.body, first.body);

  auto changed = call(env, "POST", "/api/v1/changes", submit_body("idem CHANGED", "erin", "svc-idem", op).dump());
  EXPECT_EQ(changed.status, 422);
  EXPECT_EQ(code_of(changed), "IDEMPOTENCY_KEY_REUSED");

  // A different Idempotency-Key for the same operation is not a replay: DUPLICATE_SUBMIT, not ACCEPTED.
  auto dup = call(env, "POST", "/api/v1/changes", body, {{"Idempotency-Key", "another-key-1"}});
  EXPECT_EQ(dup.status, 202) << dup.body;
  EXPECT_EQ(code_of(dup), "DUPLICATE_SUBMIT");

  // In flight: a real first request with key K is held right after it began its idempotency record
  // (faults.hold_after_idempotency_begin_ms), on a service of its own so no other submit here
  // waits. The test waits for the record, not for time; the hold only bounds how long the duplicate
  // may take, and stays below the server's 30 s reply deadline so the first still gets its answer.
  {
    constexpr int hold_ms = 20000;
    flow_env held(base_config(json{{"faults", {{"hold_after_idempotency_begin_ms", hold_ms}}},
                                   {"idempotency", {{"in_flight_timeout_ms", 600000}}}}));
    const auto k_body = submit_body("inflight", "frank", "svc-k", "").dump();
    const headers k_key = {{"Idempotency-Key", "K-1"}};
    // Keys are scoped by requester, here the anonymous caller.
    const std::string record = "idempotency_record WHERE idem_key = 'submit:anonymous:K-1'";
    const std::string frank_ops = "SELECT COUNT(*) FROM operation WHERE subject_id = 'frank'";
    http_result first;
    std::jthread first_call([&] {
      first = http_call("127.0.0.1", held.port(), "POST", "/api/v1/changes", k_body, k_key,
                        std::chrono::milliseconds(hold_ms) + std::chrono::seconds(60));
    });
    ASSERT_TRUE(wait_until([&] { return held.db().scalar("SELECT state FROM " + record) == "IN_FLIGHT"; },
                           std::chrono::seconds(30)))
        << "the first request never began its idempotency record";
    auto in_flight = call(held, "POST", "/api/v1/changes", k_body, k_key);
    EXPECT_EQ(in_flight.status, 409) << in_flight.body << " (the first must still be held, " << hold_ms << " ms)";
    EXPECT_EQ(code_of(in_flight), "REQUEST_IN_FLIGHT");
    EXPECT_FALSE(in_flight.header("retry-after").empty());
    EXPECT_EQ(held.db().scalar(frank_ops), "0") << "nothing ran for the in-flight duplicate";
    // The first one completes: the retry now gets exactly what it answered.
    first_call.join();
    ASSERT_EQ(first.status, 202) << first.body << first.error;
    EXPECT_EQ(code_of(first), "ACCEPTED");
    auto after = call(held, "POST", "/api/v1/changes", k_body, k_key);
    EXPECT_EQ(after.status, 202);
    EXPECT_EQ(after.body, first.body) << "the replay is the first's response, byte for byte";
    EXPECT_EQ(after.header("idempotent-replayed"), "true");
    EXPECT_EQ(held.db().scalar("SELECT state FROM " + record), "COMPLETED");
    EXPECT_EQ(held.db().scalar(frank_ops), "1") << "three requests with one key, one operation";
  }

  // Expiry: records past expires_at are deleted by the periodic cleanup.
  env.db().exec("UPDATE idempotency_record SET expires_at = NOW(3) - INTERVAL 1 SECOND");
  EXPECT_TRUE(wait_until([&] { return env.db().scalar("SELECT COUNT(*) FROM idempotency_record") == "0"; },
                         std::chrono::seconds(10)));
  // With the record gone the original body is a fresh request again; the operation exists, so the
  // answer is DUPLICATE_SUBMIT (distinct from ACCEPTED), and it is stored for the next retry.
  auto again = call(env, "POST", "/api/v1/changes", body);
  EXPECT_EQ(code_of(again), "DUPLICATE_SUBMIT") << again.body;
  EXPECT_EQ(call(env, "POST", "/api/v1/changes", body).body, again.body);
  EXPECT_GT(metric_value(env, "changeflow_idempotency_expired_deleted_total"), 0);
}

// A metric registry that throws on every emission changes no response (metrics.fault_injection,
// hot); and the OpenAPI document is served.
TEST(HttpPolicy, MetricFaultsDoNotChangeResponsesAndOpenApiIsServed) {
  flow_env env(base_config());
  auto token = mint("gina");
  auto run_requests = [&](const std::string& suffix) {
    std::vector<std::pair<int, std::string>> out;
    for (auto* r : {"/healthz", "/api/v1/changes/00000000-0000-4000-8000-000000000000", "/api/v1/ops/whoami"}) {
      auto res = call(env, "GET", r);
      out.emplace_back(res.status, code_of(res));
    }
    auto bad = probe_submit(env, bearer(token));
    out.emplace_back(bad.status, code_of(bad));
    auto ok =
        call(env, "POST", "/api/v1/changes", submit_body("m", "gina", "svc-m-" + suffix, "").dump(), bearer(token));
    out.emplace_back(ok.status, code_of(ok));
    return out;
  };
  auto healthy = run_requests("a");
  EXPECT_EQ(healthy.back(), (std::pair<int, std::string>{202, "ACCEPTED"}));

  rewrite(env, {{"metrics", {{"fault_injection", true}}}});
  // Applied once a request no longer moves the received counter.
  ASSERT_TRUE(wait_until(
      [&] {
        auto before = metric_value(env, "changeflow_http_requests_received_total");
        call(env, "GET", "/healthz");
        call(env, "GET", "/healthz");
        return metric_value(env, "changeflow_http_requests_received_total") == before;
      },
      std::chrono::seconds(10)));
  auto faulty = run_requests("b");
  EXPECT_EQ(faulty, healthy);

  auto doc = call(env, "GET", "/api/openapi.json");
  ASSERT_EQ(doc.status, 200);
  auto j = json::parse(doc.body);
  EXPECT_TRUE(j["paths"].contains("/api/v1/changes"));
  EXPECT_TRUE(j["paths"]["/api/v1/ops/whoami"].contains("get"));
}
