// The user API knows who is asking: the requester is the verified identity (never a body field), a
// submission needs the subject's rule code at the permission service, a change is visible only to
// its requester, to callers permitted for its subject and to operators (404 for everyone else), and
// a failing permission service denies. Also: changeflowd does not start without its secrets.
// Real changeflowd, real MariaDB, the simulator as permission service, real HTTP.

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fstream>

using namespace changeflow::testing;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using headers = std::vector<std::pair<std::string, std::string>>;

headers as(const std::string& account) {
  return {{"Authorization", "Bearer " + mint_hs256(test_jwt_secret, account, 600)}};
}

json identity_config(json extra = json::object()) {
  // Authentication on (flow_env's default is anonymous use); a short permission timeout so a slow
  // service is a quick deny; a breaker that never opens, so every check reaches the simulator and
  // its request log counts what the service attempted.
  json c = {{"auth", {{"required", true}, {"permission_timeout_ms", 500}}}, {"external", {{"breaker_failures", 1000}}}};
  merge_json(c, extra);
  return c;
}

json change_body(const std::string& subject, const std::string& target) {
  return {{"subject", subject},
          {"target", target},
          {"title", "identity " + target},
          {"files", {{{"path", "config/" + target + ".yaml"}, {"content", "v: 1\n"}}}}};
}

http_result call(flow_env& env, const std::string& method, const std::string& target, const headers& h,
                 const std::string& body = {}) {
  return http_call("127.0.0.1", env.port(), method, target, body, h);
}

json body_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

std::string submit_ok(flow_env& env, const std::string& account, const std::string& subject,
                      const std::string& target) {
  auto r = call(env, "POST", "/api/v1/changes", as(account), change_body(subject, target).dump());
  EXPECT_EQ(r.status, 202) << account << " for " << subject << ": " << r.body;
  return body_of(r)["data"].value("operationId", "");
}

std::vector<std::string> listed_ids(const http_result& r) {
  std::vector<std::string> ids;
  const json body = body_of(r);
  for (const auto& item : body["data"]["items"]) ids.push_back(item["operationId"].get<std::string>());
  return ids;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

void grant(flow_env& env, const std::string& account, json rules) {
  auto r = env.sim_call("POST", "/_sim/permissions", json{{"subject", account}, {"granted", rules}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
}

int permission_checks(flow_env& env) {
  auto stats = body_of(env.sim_call("GET", "/_sim/stats"));
  return stats["requests"].value("permission_check", 0);
}

}  // namespace

TEST(Identity, RequesterIsTheTokenAndEachTeamSeesOnlyWhatItMay) {
  flow_env env(identity_config());
  grant(env, "alice", {"subject:team-a"});
  grant(env, "carol", {"subject:team-a"});  // alice's teammate
  grant(env, "bob", {"subject:team-b"});
  grant(env, "olga", {"changeflow.ops"});
  grant(env, "mallory", json::array());

  // No token: 401 on every user route; the reserved operator header does not stand in for one.
  const headers forged_header = {{"X-Changeflow-Authenticated-Operator", "alice"}};
  EXPECT_EQ(call(env, "POST", "/api/v1/changes", {}, change_body("team-a", "anon").dump()).status, 401);
  EXPECT_EQ(call(env, "POST", "/api/v1/changes", forged_header, change_body("team-a", "anon").dump()).status, 401);
  EXPECT_EQ(call(env, "GET", "/api/v1/changes", forged_header).status, 401);

  // Submit only for a permitted subject; the refused one leaves no row behind.
  const std::string mine = submit_ok(env, "alice", "team-a", "svc-a");
  const std::string theirs = submit_ok(env, "bob", "team-b", "svc-b");
  ASSERT_FALSE(mine.empty());
  ASSERT_FALSE(theirs.empty());
  int checks_before = permission_checks(env);
  auto refused = call(env, "POST", "/api/v1/changes", as("alice"), change_body("team-b", "svc-sneaky").dump());
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_EQ(body_of(refused)["message"], "Access denied");
  EXPECT_EQ(permission_checks(env), checks_before + 1) << "the refusal came from the permission service";
  auto nobody = call(env, "POST", "/api/v1/changes", as("mallory"), change_body("team-a", "svc-m").dump());
  EXPECT_EQ(nobody.status, 403) << nobody.body;
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE target_key IN ('svc-sneaky', 'svc-m')"), "0");

  // The requester cannot be forged: a body naming someone is refused, the reserved header is
  // replaced.
  for (const char* field : {"requester", "actor", "applicant"}) {
    auto body = change_body("team-a", std::string("svc-forged-") + field);
    body[field] = "olga";
    auto r = call(env, "POST", "/api/v1/changes", as("alice"), body.dump());
    EXPECT_EQ(r.status, 400) << field << ": " << r.body;
  }
  headers alice_with_header = as("alice");
  alice_with_header.emplace_back("X-Changeflow-Authenticated-Operator", "olga");
  auto via_header = call(env, "POST", "/api/v1/changes", alice_with_header, change_body("team-a", "svc-hdr").dump());
  ASSERT_EQ(via_header.status, 202) << via_header.body;
  EXPECT_EQ(env.db().scalar("SELECT requester FROM operation WHERE target_key = 'svc-hdr'"), "alice");
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE requester = 'olga'"), "0");

  // The requester reads its own change without a permission round trip; requester and the first
  // timeline actor are the token's identity.
  checks_before = permission_checks(env);
  auto own = call(env, "GET", "/api/v1/changes/" + mine + "?include=timeline", as("alice"));
  ASSERT_EQ(own.status, 200) << own.body;
  auto data = body_of(own)["data"];
  EXPECT_EQ(data["requester"], "alice");
  EXPECT_EQ(data["subject"], "team-a");
  ASSERT_FALSE(data["timeline"].empty());
  EXPECT_EQ(data["timeline"][0]["actor"], "user:alice");
  EXPECT_EQ(permission_checks(env), checks_before);

  // Another team gets exactly the answer an unknown id gets; a teammate and an operator see it.
  auto hidden = call(env, "GET", "/api/v1/changes/" + mine, as("bob"));
  auto unknown = call(env, "GET", "/api/v1/changes/00000000-0000-4000-8000-00000000beef", as("bob"));
  EXPECT_EQ(hidden.status, 404) << hidden.body;
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(body_of(hidden), body_of(unknown)) << "a hidden change must look like a missing one";
  EXPECT_EQ(call(env, "GET", "/api/v1/changes/" + mine, as("mallory")).status, 404);
  EXPECT_EQ(call(env, "GET", "/api/v1/changes/" + mine, as("carol")).status, 200);
  EXPECT_EQ(call(env, "GET", "/api/v1/changes/" + mine, as("olga")).status, 200);
  EXPECT_EQ(call(env, "GET", "/api/v1/changes/" + theirs, as("olga")).status, 200);

  // Listing: without subject the caller's own changes; with subject only when permitted.
  auto alice_list = call(env, "GET", "/api/v1/changes", as("alice"));
  ASSERT_EQ(alice_list.status, 200) << alice_list.body;
  auto alice_ids = listed_ids(alice_list);
  EXPECT_TRUE(contains(alice_ids, mine));
  EXPECT_FALSE(contains(alice_ids, theirs));
  const json alice_body = body_of(alice_list);
  for (const auto& item : alice_body["data"]["items"]) EXPECT_EQ(item["requester"], "alice");
  EXPECT_TRUE(listed_ids(call(env, "GET", "/api/v1/changes", as("carol"))).empty()) << "carol submitted nothing";
  auto bob_on_a = call(env, "GET", "/api/v1/changes?subject=team-a", as("bob"));
  EXPECT_EQ(bob_on_a.status, 403) << bob_on_a.body;
  EXPECT_EQ(body_of(bob_on_a)["message"], "Access denied");
  EXPECT_TRUE(contains(listed_ids(call(env, "GET", "/api/v1/changes?subject=team-a", as("carol"))), mine));
  EXPECT_TRUE(contains(listed_ids(call(env, "GET", "/api/v1/changes?subject=team-a", as("olga"))), mine));
  EXPECT_TRUE(contains(listed_ids(call(env, "GET", "/api/v1/changes?subject=team-b", as("olga"))), theirs));

  // The approval system is told the requester as applicant.
  json approvals;
  EXPECT_TRUE(wait_until(
      [&] {
        approvals = body_of(env.sim_call("GET", "/_sim/approvals"))["approvals"];
        return std::any_of(approvals.begin(), approvals.end(), [&](const json& a) { return a["requestId"] == mine; });
      },
      20s));
  for (const auto& a : approvals) {
    if (a["requestId"] == mine) {
      EXPECT_EQ(a["applicant"], "alice");
    }
    if (a["requestId"] == theirs) {
      EXPECT_EQ(a["applicant"], "bob");
    }
  }

  // Anonymous use exists only when switched on explicitly; it is then recorded as "anonymous".
  json anonymous_ok = env.config();
  anonymous_ok["auth"]["required"] = false;
  env.service().rewrite_config(anonymous_ok);
  http_result anon;
  EXPECT_TRUE(wait_until(
      [&] {
        anon = call(env, "POST", "/api/v1/changes", {}, change_body("team-a", "svc-anon").dump());
        return anon.status == 202;
      },
      10s))
      << anon.status << " " << anon.body;
  auto anon_change =
      call(env, "GET", "/api/v1/changes/" + body_of(anon)["data"].value("operationId", "") + "?include=timeline", {});
  ASSERT_EQ(anon_change.status, 200) << anon_change.body;
  EXPECT_EQ(body_of(anon_change)["data"]["requester"], "anonymous");
  EXPECT_EQ(body_of(anon_change)["data"]["timeline"][0]["actor"], "user:anonymous");
}

// Any failure of the permission service denies: an error answer, an unreadable one, or no answer
// within auth.permission_timeout_ms. Only the requester, who needs no round trip, keeps access.
// Cancel is the requester's or an operator's: a teammate may read the change but not cancel it,
// another team is told it does not exist, and the timeline names who cancelled.
TEST(Identity, OnlyTheRequesterOrAnOperatorCancels) {
  flow_env env(identity_config(), {"--callback-delay-ms", "600000"});  // approvals stay pending
  grant(env, "alice", {"subject:team-a"});
  grant(env, "carol", {"subject:team-a"});
  grant(env, "bob", {"subject:team-b"});
  grant(env, "olga", {"changeflow.ops"});
  grant(env, "mallory", json::array());
  const std::string mine = submit_ok(env, "alice", "team-a", "svc-cancel-1");
  const std::string other = submit_ok(env, "alice", "team-a", "svc-cancel-2");
  auto cancel_as = [&](const std::string& who, const std::string& id) {
    return call(env, "POST", "/api/v1/changes/" + id + "/cancel", as(who));
  };
  EXPECT_EQ(call(env, "POST", "/api/v1/changes/" + mine + "/cancel", {}).status, 401);
  auto by_bob = cancel_as("bob", mine);
  EXPECT_EQ(by_bob.status, 404) << by_bob.body;
  EXPECT_EQ(cancel_as("carol", mine).status, 404);  // may read it, may not act on it
  EXPECT_EQ(cancel_as("mallory", mine).status, 404);
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE phase = 'CANCELLED'"), "0");

  auto by_alice = cancel_as("alice", mine);
  ASSERT_EQ(by_alice.status, 200) << by_alice.body;
  auto by_olga = cancel_as("olga", other);
  ASSERT_EQ(by_olga.status, 200) << by_olga.body;
  auto actor_of = [&](const std::string& id) {
    return env.db().scalar("SELECT actor FROM operation_event WHERE operation_id = '" + id +
                           "' AND to_phase = 'CANCELLED'");
  };
  EXPECT_EQ(actor_of(mine), "user:alice");
  EXPECT_EQ(actor_of(other), "operator:olga");
}

// A revert is a submission for the change's subject: whoever may submit for it reverts (a teammate,
// an operator), not merely whoever submitted the original. The requester who lost the subject may
// still see the change (403), another team is told it does not exist (404), and both timelines
// name who reverted.
TEST(Identity, WhoeverMaySubmitForTheSubjectReverts) {
  flow_env env(identity_config());
  grant(env, "alice", {"subject:team-a"});
  grant(env, "carol", {"subject:team-a"});
  grant(env, "bob", {"subject:team-b"});
  grant(env, "olga", {"changeflow.ops"});
  const std::string original = submit_ok(env, "alice", "team-a", "svc-revert-1");
  ASSERT_TRUE(wait_until(
      [&] {
        return env.db().scalar("SELECT phase FROM operation WHERE operation_id = '" + original + "'") == "VALIDATED";
      },
      60s));
  const std::string path = "/api/v1/changes/" + original + "/revert";
  EXPECT_EQ(call(env, "POST", path, {}).status, 401);
  EXPECT_EQ(call(env, "POST", path, as("bob")).status, 404);
  grant(env, "alice", json::array());
  auto by_alice = call(env, "POST", path, as("alice"));
  EXPECT_EQ(by_alice.status, 403) << by_alice.body;
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation"), "1") << "a refused revert writes nothing";

  auto by_carol = call(env, "POST", path, as("carol"));
  ASSERT_EQ(by_carol.status, 202) << by_carol.body;
  const auto revert = body_of(by_carol)["data"]["operationId"].get<std::string>();
  EXPECT_EQ(env.db().scalar("SELECT requester FROM operation WHERE operation_id = '" + revert + "'"), "carol");
  EXPECT_EQ(env.db().scalar("SELECT actor FROM operation_event WHERE operation_id = '" + original +
                            "' AND cause = 'reverted by " + revert + "'"),
            "user:carol");
  // An operator passes the same check; the change is reverted already.
  auto by_olga = call(env, "POST", path, as("olga"));
  EXPECT_EQ(by_olga.status, 409) << by_olga.body;
  EXPECT_EQ(body_of(by_olga)["code"], "ALREADY_REVERTED");
}

TEST(Identity, PermissionServiceFailureDenies) {
  flow_env env(identity_config());
  grant(env, "alice", {"subject:team-a"});
  grant(env, "olga", {"changeflow.ops"});
  const std::string mine = submit_ok(env, "alice", "team-a", "svc-down");
  ASSERT_FALSE(mine.empty());

  struct failure {
    const char* name;
    json fault;
  };
  const failure failures[] = {
      {"5xx", {{"kind", "status"}, {"status", 503}}},
      {"unreadable answer", {{"kind", "garbage"}}},
      {"slower than auth.permission_timeout_ms", {{"kind", "slow"}, {"delay_ms", 1500}}},
  };
  for (const auto& f : failures) {
    SCOPED_TRACE(f.name);
    ASSERT_EQ(env.sim_call("DELETE", "/_sim/faults").status, 200);
    for (const char* account : {"alice", "olga"}) {
      json rule = f.fault;
      rule["endpoint"] = "permission_check";
      rule["match"] = account;
      rule["count"] = -1;
      env.add_fault(rule);
    }
    int checks_before = permission_checks(env);
    auto submit = call(env, "POST", "/api/v1/changes", as("alice"), change_body("team-a", "svc-while-down").dump());
    EXPECT_EQ(submit.status, 403) << submit.body;
    EXPECT_EQ(body_of(submit)["message"], "Access denied");
    EXPECT_EQ(call(env, "GET", "/api/v1/changes/" + mine, as("olga")).status, 404);
    EXPECT_EQ(call(env, "GET", "/api/v1/changes?subject=team-a", as("olga")).status, 403);
    EXPECT_EQ(call(env, "GET", "/api/v1/changes?subject=team-a", as("alice")).status, 403);
    // Denied because the service failed, not because it was never asked.
    EXPECT_EQ(permission_checks(env), checks_before + 4);
    // The requester's own change and list need no permission service.
    EXPECT_EQ(call(env, "GET", "/api/v1/changes/" + mine, as("alice")).status, 200);
    EXPECT_TRUE(contains(listed_ids(call(env, "GET", "/api/v1/changes", as("alice"))), mine));
  }
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE target_key = 'svc-while-down'"), "0");

  // The service stopped altogether: refused connections deny as well.
  env.sim().process().stop(SIGTERM, 5s);
  auto submit = call(env, "POST", "/api/v1/changes", as("alice"), change_body("team-a", "svc-no-sim").dump());
  EXPECT_EQ(submit.status, 403) << submit.body;
  EXPECT_EQ(call(env, "GET", "/api/v1/changes/" + mine, as("olga")).status, 404);
  EXPECT_EQ(call(env, "GET", "/api/v1/changes/" + mine, as("alice")).status, 200);
}

// No built-in secrets or tokens: without any one of them changeflowd exits non-zero at start and
// names the key; with all of them the same configuration passes.
TEST(Identity, StartupRefusesEachMissingSecret) {
  auto dir = make_temp_dir("cf-secrets");
  auto start = [&](const json& cfg, const std::string& name, std::vector<std::string> extra_args) {
    std::string path = dir + "/" + name + ".json";
    std::ofstream(path) << cfg.dump(2);
    std::vector<std::string> argv = {binary_path("changeflowd"), "--config", path, "--port-file",
                                     dir + "/" + name + ".port"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    return child_process(argv, dir + "/" + name + ".log");
  };
  // Nothing else is wrong with this configuration: the check passes with every secret present.
  json complete = test_secrets();
  complete["http"] = {{"port", 0}};
  complete["db"] = {{"host", "127.0.0.1"}, {"port", 9}, {"connect_timeout_ms", 200}};
  auto ok = start(complete, "complete", {"--check-config"});
  EXPECT_EQ(ok.wait_exit(20s), 0) << ok.log_contents();

  const std::vector<std::pair<std::string, std::string>> required = {{"auth", "jwt_secret"},
                                                                     {"callbacks", "approval_secret"},
                                                                     {"callbacks", "deploy_secret"},
                                                                     {"gitlab", "author_token"},
                                                                     {"gitlab", "approver_tokens"}};
  int attempt = 0;
  for (const auto& [section, key] : required) {
    const std::string name = section + "." + key;
    const json empty = key == "approver_tokens" ? json::array() : json("");
    for (const char* variant : {"left out", "null", "empty"}) {
      json cfg = complete;
      if (std::string(variant) == "left out") {
        cfg[section].erase(key);
        if (cfg[section].empty()) cfg.erase(section);  // an empty section reads as an unknown key
      } else {
        cfg[section][key] = std::string(variant) == "null" ? json(nullptr) : empty;
      }
      auto proc = start(cfg, "missing-" + std::to_string(++attempt), {});
      auto status = proc.wait_exit(20s);
      ASSERT_TRUE(status) << name << " " << variant << ": changeflowd kept running without it";
      EXPECT_NE(*status, 0) << name << " " << variant;
      auto log = proc.log_contents();
      EXPECT_NE(log.find("required key '" + name + "'"), std::string::npos) << variant << ": " << log;
    }
  }
}
