#include "http/middleware/authorization.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using namespace changeflow::http::middleware;
using changeflow::http::identity::resolve_reason;
using changeflow::http::identity::resolve_result;
using nlohmann::json;

namespace {
const resolve_result alice{http::identity::identity{"alice", "jwt"}, resolve_reason::ok};
const resolve_result nobody{std::nullopt, resolve_reason::none_presented};
const resolve_result bad_token{std::nullopt, resolve_reason::bad_token};
const resolve_result expired{std::nullopt, resolve_reason::expired};
const std::vector<std::string> ops_rules = {"changeflow.ops", "changeflow.admin"};
}  // namespace

TEST(Authorization, DecisionTableDriven) {
  struct authz_case {
    const char* name;
    std::vector<std::string> rules;
    bool requires_identity;
    resolve_result who;
    std::optional<permission_outcome> permissions;
    authz_decision want;
  };
  const authz_case cases[] = {
      {"open route, anonymous", {}, false, nobody, std::nullopt, authz_decision::allow},
      {"open route, bad token ignored", {}, false, bad_token, std::nullopt, authz_decision::allow},
      {"identity route, anonymous", {}, true, nobody, std::nullopt, authz_decision::deny_401},
      {"identity route, expired token", {}, true, expired, std::nullopt, authz_decision::deny_401},
      {"identity route, identified", {}, true, alice, std::nullopt, authz_decision::allow},
      {"rules, anonymous -> 401 before any permission call", ops_rules, false, nobody, std::nullopt,
       authz_decision::deny_401},
      {"rules, bad token -> 401 even if service says yes", ops_rules, false, bad_token,
       permission_outcome::granted_rules({"changeflow.ops"}), authz_decision::deny_401},
      {"rules, first granted", ops_rules, false, alice, permission_outcome::granted_rules({"changeflow.ops"}),
       authz_decision::allow},
      {"rules, any-of: admin granted", ops_rules, false, alice, permission_outcome::granted_rules({"changeflow.admin"}),
       authz_decision::allow},
      {"rules, none granted", ops_rules, false, alice, permission_outcome::granted_rules({}), authz_decision::deny_403},
      {"rules, unrelated grant", ops_rules, false, alice, permission_outcome::granted_rules({"other.rule"}),
       authz_decision::deny_403},
      {"rules, garbage grant (case differs)", ops_rules, false, alice,
       permission_outcome::granted_rules({"CHANGEFLOW.OPS", ""}), authz_decision::deny_403},
      {"rules, service error", ops_rules, false, alice, permission_outcome::failed("timeout"),
       authz_decision::deny_403},
      {"rules, check never ran", ops_rules, false, alice, std::nullopt, authz_decision::deny_403},
      {"empty rule code never matches empty grant",
       {""},
       false,
       alice,
       permission_outcome::granted_rules({""}),
       authz_decision::deny_403},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(decide_authorization(c.rules, c.requires_identity, c.who, c.permissions), c.want)
        << c.name << ": got " << to_string(decide_authorization(c.rules, c.requires_identity, c.who, c.permissions));
  }
}

TEST(Authorization, DenialResponsesRevealNothing) {
  auto r401 = deny_response(authz_decision::deny_401, "bad_token");
  EXPECT_EQ(r401.status, 401u);
  auto b401 = json::parse(r401.body);
  EXPECT_EQ(b401["code"], "UNAUTHENTICATED");
  EXPECT_EQ(b401["message"], "Authentication required");

  for (const char* detail : {"rule not granted", "permission service: timeout", "missing changeflow.admin"}) {
    auto r = deny_response(authz_decision::deny_403, detail);
    EXPECT_EQ(r.status, 403u);
    auto body = json::parse(r.body);
    EXPECT_EQ(body["code"], "FORBIDDEN");
    EXPECT_EQ(body["message"], "Access denied") << "message is fixed whatever the cause";
    EXPECT_TRUE(body["data"].is_null());
    EXPECT_EQ(r.body.find("changeflow."), std::string::npos) << "no rule code leaks";
    EXPECT_EQ(r.body.find("timeout"), std::string::npos) << "no cause leaks";
  }
  EXPECT_EQ(deny_response(authz_decision::allow).status, 500u) << "misuse fails closed";
}

TEST(Authorization, OperatorIdentityOverwritesForgedValue) {
  http::identity::identity op{"alice", "jwt"};
  json forged = {{"__authenticatedOperator", "mallory"}, {"reason", "rollback"}};
  auto out = apply_operator_identity(forged, op);
  EXPECT_EQ(out["__authenticatedOperator"], "alice");
  EXPECT_EQ(out["reason"], "rollback") << "client params are kept";

  auto absent = apply_operator_identity({{"reason", "x"}}, op);
  EXPECT_EQ(absent["__authenticatedOperator"], "alice");

  auto forged_object = apply_operator_identity({{"__authenticatedOperator", {{"account", "mallory"}}}}, op);
  EXPECT_EQ(forged_object["__authenticatedOperator"], "alice");

  auto not_object = apply_operator_identity(json::array({"__authenticatedOperator", "mallory"}), op);
  EXPECT_EQ(not_object, (json{{"__authenticatedOperator", "alice"}}));
}

TEST(Authorization, AuditParamsMaskedAndTruncated) {
  std::string long_value(1000, 'x');
  std::string multibyte;
  for (int i = 0; i < 200; ++i) multibyte += "\xC3\xA9";  // 400 bytes of "é"
  json params = {{"token", "abc"},
                 {"password", "hunter2"},
                 {"nested", {{"apiSecret", "s"}, {"note", long_value}}},
                 {"list", json::array({long_value, 7})},
                 {"accent", multibyte},
                 {"short", "keep"}};
  auto audited = audit_params(params);
  EXPECT_EQ(audited["token"], "***");
  EXPECT_EQ(audited["password"], "***");
  EXPECT_EQ(audited["nested"]["apiSecret"], "***");
  EXPECT_EQ(audited["nested"]["note"].get<std::string>().size(), 256u);
  EXPECT_EQ(audited["list"][0].get<std::string>().size(), 256u);
  EXPECT_EQ(audited["list"][1], 7);
  EXPECT_EQ(audited["short"], "keep");
  auto accent = audited["accent"].get<std::string>();
  EXPECT_EQ(accent.size(), 256u) << "256 is even: exactly 128 characters";
  EXPECT_NO_THROW((void)audited.dump()) << "never cut inside a UTF-8 character";
  auto odd = audit_params({{"v", "a" + multibyte}});  // 'a' shifts the boundary: cut must back off
  EXPECT_EQ(odd["v"].get<std::string>().size(), 255u);
  EXPECT_NO_THROW((void)odd.dump());
}
