#include "http/middleware/pipeline.hpp"

#include <gtest/gtest.h>
#include <jwt.h>

#include <cstdlib>

using namespace changeflow;
using namespace changeflow::http::middleware;
using nlohmann::json;

namespace {

const std::string secret = "pipeline-secret-0123456789";
const auto start = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));

std::string token_for(const std::string& sub) {
  jwt_t* raw = nullptr;
  jwt_new(&raw);
  jwt_add_grant(raw, "sub", sub.c_str());
  jwt_add_grant_int(raw, "exp", 1'700'000'000 + 3600);
  jwt_set_alg(raw, JWT_ALG_HS256, reinterpret_cast<const unsigned char*>(secret.data()),
              static_cast<int>(secret.size()));
  char* text = jwt_encode_str(raw);
  std::string out = text;
  std::free(text);
  jwt_free(raw);
  return out;
}

/// A fake permission service: a table of grants per subject, or a scripted failure mode.
struct fake_permissions {
  enum class mode { answer, fail, throw_now, answer_twice, hold };
  mode how = mode::answer;
  std::map<std::string, std::set<std::string>> grants;
  int calls = 0;
  permission_callback held;

  permission_check as_function() {
    return [this](std::string subject, std::vector<std::string>, permission_callback cb) {
      ++calls;
      switch (how) {
        case mode::answer: return cb(permission_outcome::granted_rules(grants[subject]));
        case mode::fail: return cb(permission_outcome::failed("connection refused"));
        case mode::throw_now: throw std::runtime_error("sdk exploded");
        case mode::answer_twice:
          cb(permission_outcome::failed("first"));
          return cb(permission_outcome::granted_rules(grants[subject]));
        case mode::hold: held = std::move(cb); return;
      }
    };
  }
};

struct fixture {
  std::shared_ptr<const config::snapshot> snap;
  rate_limiter limiter;
  metrics::registry metrics;
  fake_permissions permissions;
  std::chrono::system_clock::time_point now = start;
  chain_deps deps{[this] { return snap; }, limiter, metrics, permissions.as_function(), [this] { return now; }};

  explicit fixture(json overrides = json::object()) {
    json doc = {{"auth.jwt_secret", secret},
                {"auth.aliases", {{"E12345", "alice@corp.example"}}},
                {"auth.trusted_proxies", {"10.0.0.1"}},
                {"rate_limit.submit", 2},
                {"rate_limit.ops", 100},
                {"rate_limit.window_ms", 1000}};
    for (auto& [k, v] : overrides.items()) doc[k] = v;
    snap = config::load_from_json(doc, [](const std::string&) { return std::optional<std::string>(); }).snap;
    EXPECT_TRUE(snap);
    permissions.grants["alice"] = {"changeflow.ops"};
  }

  std::vector<chain_outcome> run(const request_head& head, const route_policy& policy) {
    std::vector<chain_outcome> seen;
    run_chain(head, policy, deps, [&](chain_outcome o) { seen.push_back(std::move(o)); });
    return seen;
  }
  unsigned status_of(const request_head& head, const route_policy& policy) {
    auto seen = run(head, policy);
    EXPECT_EQ(seen.size(), 1u) << "done exactly once";
    if (seen.size() != 1) return 0;
    if (!seen[0].proceed()) return seen[0].rejection->status;
    seen[0].on_complete(200);
    return 200;  // handler ran and replied 200
  }
};

request_head head(std::string route, std::string peer = "192.0.2.7", http::identity::header_map headers = {}) {
  return request_head{"POST", std::move(route), std::move(headers), std::move(peer)};
}
http::identity::header_map bearer(const std::string& sub) {
  return {{"authorization", "Bearer " + token_for(sub)}};
}

const route_policy submit_policy{.bucket = "submit",
                                 .limit = &config::rate_limit_settings::submit,
                                 .business_metric = "submit",
                                 .idempotent_write = true};
const route_policy ops_policy{.bucket = "ops",
                              .limit = &config::rate_limit_settings::ops,
                              .required_rules = {"changeflow.ops", "changeflow.admin"},
                              .requires_identity = true};
const route_policy user_policy{.bucket = "submit",
                               .limit = &config::rate_limit_settings::submit,
                               .requires_identity = true,
                               .business_metric = "submit",
                               .idempotent_write = true};
const route_policy status_policy{};

}  // namespace

TEST(Pipeline, RateLimitRejectsBeforeAnythingElse) {
  fixture f;
  f.permissions.how = fake_permissions::mode::answer;
  const route_policy limited_ops{.bucket = "ops",
                                 .limit = &config::rate_limit_settings::submit,
                                 .required_rules = ops_policy.required_rules,
                                 .requires_identity = true,
                                 .business_metric = "ops_action"};
  auto h = head("/api/v1/ops/x", "192.0.2.7", bearer("alice@corp.example"));
  EXPECT_EQ(f.status_of(h, limited_ops), 200u);
  EXPECT_EQ(f.status_of(h, limited_ops), 200u);
  EXPECT_EQ(f.permissions.calls, 2);

  auto seen = f.run(h, limited_ops);
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_FALSE(seen[0].proceed());
  EXPECT_EQ(seen[0].rejection->status, 429u);
  EXPECT_EQ(json::parse(seen[0].rejection->body)["code"], "RATE_LIMITED");
  EXPECT_EQ(f.permissions.calls, 2) << "a rejected request consumes nothing downstream";
  EXPECT_EQ(f.metrics.counter_value("changeflow_rate_limited_total", {{"bucket", "ops"}}), 1);
  EXPECT_EQ(
      f.metrics.counter_value("changeflow_business_activity_total", {{"action", "ops_action"}, {"stage", "received"}}),
      2)
      << "429s never enter business counts";
  EXPECT_EQ(f.metrics.counter_value("changeflow_http_requests_received_total",
                                    {{"route", "/api/v1/ops/x"}, {"method", "POST"}}),
            2);

  f.now += std::chrono::milliseconds(1000);
  EXPECT_EQ(f.status_of(h, limited_ops), 200u) << "the window slid";
}

TEST(Pipeline, EmailAndEmployeeIdShareOneQuota) {
  fixture f;
  EXPECT_EQ(f.status_of(head("/api/v1/changes", "192.0.2.7", bearer("alice@corp.example")), submit_policy), 200u);
  // Another browser, another address, the employee-id form of the same person.
  auto seen = f.run(head("/api/v1/changes", "198.51.100.3", bearer("E12345")), submit_policy);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rate_limit_subject, "alice");
  EXPECT_EQ(f.status_of(head("/api/v1/changes", "203.0.113.5", bearer("12345")), submit_policy), 429u);
  EXPECT_EQ(f.status_of(head("/api/v1/changes", "192.0.2.7", bearer("bob@corp.example")), submit_policy), 200u)
      << "another person has their own quota";
}

TEST(Pipeline, SpoofedForwardedForFromUntrustedPeerIsIgnored) {
  fixture f;
  for (const char* spoof : {"1.1.1.1", "2.2.2.2"}) {
    auto seen = f.run(head("/api/v1/changes", "192.0.2.7", {{"x-forwarded-for", spoof}}), submit_policy);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].client_address, "192.0.2.7");
    EXPECT_EQ(seen[0].rate_limit_subject, "ip:192.0.2.7");
  }
  EXPECT_EQ(f.status_of(head("/api/v1/changes", "192.0.2.7", {{"x-forwarded-for", "3.3.3.3"}}), submit_policy), 429u)
      << "rotating a forged header does not buy a fresh quota";

  // Behind our proxy, the hop it appended is the subject; a client-forged first hop is not.
  auto proxied =
      f.run(head("/api/v1/changes", "10.0.0.1", {{"x-forwarded-for", "6.6.6.6, 198.51.100.9"}}), submit_policy);
  ASSERT_EQ(proxied.size(), 1u);
  EXPECT_EQ(proxied[0].rate_limit_subject, "ip:198.51.100.9");
}

TEST(Pipeline, RateLimitFallbacksNeverBlock) {
  for (json value : {json(nullptr), json(0), json(-1)}) {
    fixture f(json{{"rate_limit.submit", value}});
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(f.status_of(head("/api/v1/changes"), submit_policy), 200u) << value.dump();
    }
  }
  fixture f;
  route_policy unlimited = submit_policy;
  unlimited.limit = nullptr;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(f.status_of(head("/api/v1/changes"), unlimited), 200u);
}

TEST(Pipeline, AuthorizationOutcomesTableDriven) {
  struct authz_case {
    const char* name;
    http::identity::header_map headers;
    std::string peer;
    fake_permissions::mode how;
    json config_overrides;
    unsigned want_status;
  };
  const authz_case cases[] = {
      {"granted", bearer("alice@corp.example"), "192.0.2.7", fake_permissions::mode::answer, json::object(), 200},
      {"granted via employee id", bearer("E12345"), "192.0.2.7", fake_permissions::mode::answer, json::object(), 200},
      {"not granted", bearer("bob@corp.example"), "192.0.2.7", fake_permissions::mode::answer, json::object(), 403},
      {"service error", bearer("alice@corp.example"), "192.0.2.7", fake_permissions::mode::fail, json::object(), 403},
      {"service throws", bearer("alice@corp.example"), "192.0.2.7", fake_permissions::mode::throw_now, json::object(),
       403},
      {"no identity", {}, "192.0.2.7", fake_permissions::mode::answer, json::object(), 401},
      {"alg none",
       {{"authorization", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9."}},
       "192.0.2.7",
       fake_permissions::mode::answer,
       json::object(),
       401},
      {"gateway header from untrusted peer",
       {{"x-user", "alice"}},
       "192.0.2.7",
       fake_permissions::mode::answer,
       {{"auth.gateway_header", "X-User"}},
       401},
      {"gateway header from trusted proxy",
       {{"x-user", "alice"}},
       "10.0.0.1",
       fake_permissions::mode::answer,
       {{"auth.gateway_header", "X-User"}},
       200},
      {"secret cleared",
       bearer("alice@corp.example"),
       "192.0.2.7",
       fake_permissions::mode::answer,
       {{"auth.jwt_secret", nullptr}},
       401},
  };
  for (const auto& c : cases) {
    fixture f(c.config_overrides);
    f.permissions.how = c.how;
    auto seen = f.run(head("/api/v1/ops/actors", c.peer, c.headers), ops_policy);
    ASSERT_EQ(seen.size(), 1u) << c.name;
    unsigned status = seen[0].proceed() ? 200 : seen[0].rejection->status;
    EXPECT_EQ(status, c.want_status) << c.name;
    if (status == 403) {
      EXPECT_EQ(json::parse(seen[0].rejection->body)["message"], "Access denied") << c.name;
    }
    if (status == 401) {
      EXPECT_EQ(f.permissions.calls, 0) << c.name << ": no permission call without identity";
    }
  }
}

TEST(Pipeline, PermissionAnswerArrivesLaterAndOnlyOnce) {
  fixture f;
  f.permissions.how = fake_permissions::mode::hold;
  std::vector<chain_outcome> seen;
  run_chain(head("/api/v1/ops/actors", "192.0.2.7", bearer("alice@corp.example")), ops_policy, f.deps,
            [&](chain_outcome o) { seen.push_back(std::move(o)); });
  EXPECT_TRUE(seen.empty()) << "waiting for the permission service";
  ASSERT_TRUE(f.permissions.held);
  f.permissions.held(permission_outcome::granted_rules({"changeflow.admin"}));
  f.permissions.held(permission_outcome::failed("late duplicate"));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].proceed());

  fixture twice;
  twice.permissions.how = fake_permissions::mode::answer_twice;
  auto out = twice.run(head("/api/v1/ops/actors", "192.0.2.7", bearer("alice@corp.example")), ops_policy);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].rejection->status, 403u) << "the first answer (an error) decides";
}

TEST(Pipeline, IdentityRequirementFromConfigKey) {
  route_policy p = status_policy;
  p.identity_required_by_config = true;
  fixture anonymous_ok(json{{"auth.required", false}});
  EXPECT_EQ(anonymous_ok.status_of(head("/api/v1/changes"), p), 200u);
  fixture required(json{{"auth.required", true}});
  EXPECT_EQ(required.status_of(head("/api/v1/changes"), p), 401u);
  EXPECT_EQ(required.status_of(head("/api/v1/changes", "192.0.2.7", bearer("alice@corp.example")), p), 200u);
  fixture cleared(json{{"auth.required", nullptr}});
  EXPECT_EQ(cleared.status_of(head("/api/v1/changes"), p), 401u)
      << "cleared -> required: anonymous use must be switched on explicitly";
  fixture defaulted;
  EXPECT_EQ(defaulted.status_of(head("/api/v1/changes"), p), 401u) << "the default requires an identity";
}

TEST(Pipeline, BusinessMetricsOnlyForDeclaredRoutesAndSuccess) {
  fixture f(json{{"rate_limit.submit", 100}});
  auto received = [&] {
    return f.metrics.counter_value("changeflow_business_activity_total", {{"action", "submit"}, {"stage", "received"}});
  };
  auto succeeded = [&] {
    return f.metrics.counter_value("changeflow_business_activity_total",
                                   {{"action", "submit"}, {"stage", "succeeded"}});
  };
  auto h = head("/api/v1/changes", "192.0.2.7", bearer("alice@corp.example"));
  for (unsigned status : {202u, 200u, 400u, 500u, 409u}) {
    auto seen = f.run(h, user_policy);
    ASSERT_EQ(seen.size(), 1u);
    ASSERT_TRUE(seen[0].proceed());
    seen[0].on_complete(status);
  }
  EXPECT_EQ(received(), 5);
  EXPECT_EQ(succeeded(), 2) << "only 2xx count as successful access";

  auto other = f.run(head("/api/v1/changes/{id}", "192.0.2.7", bearer("alice@corp.example")), status_policy);
  ASSERT_TRUE(other[0].proceed());
  other[0].on_complete(200);
  EXPECT_EQ(received(), 5) << "routes without a business metric never count";

  EXPECT_EQ(f.status_of(head("/api/v1/changes"), user_policy), 401u);
  EXPECT_EQ(received(), 5) << "401s never count";
  EXPECT_EQ(f.metrics.counter_value("changeflow_business_activity_by_user_total",
                                    {{"action", "submit"}, {"stage", "received"}, {"user", "alice"}}),
            0)
      << "no user labels unless metrics.user_labels";
  EXPECT_EQ(f.metrics.counter_value("changeflow_http_requests_received_total",
                                    {{"route", "/api/v1/changes/{id}"}, {"method", "POST"}}),
            1)
      << "labelled by route template";
}

TEST(Pipeline, UserLabelsOnlyWhenConfiguredAndTrustworthy) {
  fixture f(json{{"metrics.user_labels", true}, {"rate_limit.submit", 100}});
  f.run(head("/api/v1/changes", "192.0.2.7", bearer("E12345")), user_policy);
  f.run(head("/api/v1/changes", "192.0.2.7", bearer("E99999")), user_policy);
  EXPECT_EQ(f.metrics.counter_value("changeflow_business_activity_by_user_total",
                                    {{"action", "submit"}, {"stage", "received"}, {"user", "alice"}}),
            1);
  EXPECT_EQ(f.metrics.counter_value("changeflow_business_activity_by_user_total",
                                    {{"action", "submit"}, {"stage", "received"}, {"user", "emp:99999"}}),
            0)
      << "an unmapped employee id is skipped, not guessed";
  EXPECT_EQ(
      f.metrics.counter_value("changeflow_business_activity_total", {{"action", "submit"}, {"stage", "received"}}), 2);
}

TEST(Pipeline, MetricsFaultsNeverChangeOutcomes) {
  struct step {
    request_head h;
    route_policy p;
    fake_permissions::mode how;
  };
  auto script = [] {
    return std::vector<step>{
        {head("/api/v1/changes", "192.0.2.7", bearer("alice@corp.example")), submit_policy,
         fake_permissions::mode::answer},
        {head("/api/v1/changes", "192.0.2.7", bearer("E12345")), submit_policy, fake_permissions::mode::answer},
        {head("/api/v1/changes", "192.0.2.7", bearer("alice@corp.example")), submit_policy,
         fake_permissions::mode::answer},
        {head("/api/v1/ops/a", "192.0.2.7", bearer("alice@corp.example")), ops_policy, fake_permissions::mode::answer},
        {head("/api/v1/ops/a", "192.0.2.7", bearer("bob@corp.example")), ops_policy, fake_permissions::mode::answer},
        {head("/api/v1/ops/a", "192.0.2.7", bearer("alice@corp.example")), ops_policy, fake_permissions::mode::fail},
        {head("/api/v1/ops/a", "192.0.2.7", {}), ops_policy, fake_permissions::mode::answer},
        {head("/api/v1/changes", "10.0.0.1", {}), user_policy, fake_permissions::mode::answer},
    };
  };
  auto outcomes = [&](bool fault) {
    fixture f(json{{"metrics.user_labels", true}});
    f.metrics.set_fault_injection(fault);
    std::vector<std::string> out;
    for (auto& s : script()) {
      f.permissions.how = s.how;
      auto seen = f.run(s.h, s.p);
      EXPECT_EQ(seen.size(), 1u);
      if (seen.empty()) continue;
      if (seen[0].proceed()) {
        EXPECT_NO_THROW(seen[0].on_complete(200));
        out.push_back("proceed " + seen[0].rate_limit_subject);
      } else {
        out.push_back(std::to_string(seen[0].rejection->status) + " " +
                      json::parse(seen[0].rejection->body)["code"].get<std::string>());
      }
    }
    return out;
  };
  auto healthy = outcomes(false);
  auto faulty = outcomes(true);
  EXPECT_EQ(healthy, faulty);
  EXPECT_EQ(healthy,
            (std::vector<std::string>{"proceed alice", "proceed alice", "429 RATE_LIMITED", "proceed alice",
                                      "403 FORBIDDEN", "403 FORBIDDEN", "401 UNAUTHENTICATED", "401 UNAUTHENTICATED"}));
}

TEST(Pipeline, MissingSnapshotFailsClosed) {
  fixture f;
  f.snap = nullptr;
  auto seen = f.run(head("/api/v1/changes"), status_policy);
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_FALSE(seen[0].proceed());
  EXPECT_EQ(seen[0].rejection->status, 503u);
}
