#include "config/snapshot.hpp"

#include "config/test_env.hpp"

#include <gtest/gtest.h>

#include <map>

using namespace changeflow::config;
using changeflow::config::test_support::env_of;
using nlohmann::json;

namespace {

struct validation_case {
  const char* name;
  json doc;
  std::map<std::string, std::string> env;
  bool ok;
  const char* error_mentions;  // substring every failing case must name
};
}  // namespace

TEST(ConfigValidation, TableDriven) {
  const validation_case cases[] = {
      {"empty document uses defaults", json::object(), {}, true, ""},
      {"nested keys", {{"db", {{"port", 3307}}}}, {}, true, ""},
      {"dotted keys", {{"db.port", 3307}}, {}, true, ""},
      {"unknown key", {{"db", {{"prot", 3307}}}}, {}, false, "db.prot"},
      {"unknown top-level key", {{"nonsense", 1}}, {}, false, "nonsense"},
      {"wrong type: string for integer", {{"http", {{"port", "80"}}}}, {}, false, "http.port"},
      {"wrong type: integer for boolean", {{"batch", {{"enabled", 1}}}}, {}, false, "batch.enabled"},
      {"wrong type: list of numbers", {{"auth", {{"trusted_proxies", {1, 2}}}}}, {}, false, "auth.trusted_proxies"},
      {"cleared value is allowed", {{"rate_limit", {{"submit", nullptr}}}}, {}, true, ""},
      {"env override parses", json::object(), {{"CHANGEFLOW_DB_PORT", "4000"}}, true, ""},
      {"env override wrong type", json::object(), {{"CHANGEFLOW_DB_PORT", "40x"}}, false, "db.port"},
      {"env bool wrong", json::object(), {{"CHANGEFLOW_BATCH_ENABLED", "yes"}}, false, "batch.enabled"},
      {"not an object", json::array(), {}, false, "object"},
  };
  for (const auto& c : cases) {
    auto r = load_from_json(c.doc, env_of(c.env));
    EXPECT_EQ(r.snap != nullptr, c.ok) << c.name;
    if (!c.ok) {
      ASSERT_FALSE(r.errors.empty()) << c.name;
      EXPECT_NE(r.errors.front().find(c.error_mentions), std::string::npos) << c.name << ": " << r.errors.front();
    }
  }
}

TEST(ConfigValidation, ReportsEveryBadKey) {
  auto r = load_from_json({{"a", 1}, {"b", 2}, {"http", {{"port", "x"}}}}, env_of({}));
  EXPECT_EQ(r.errors.size(), 3u);
}

TEST(ConfigValues, PrecedenceDefaultFileEnv) {
  auto r =
      load_from_json({{"db", {{"port", 3307}, {"name", "fromfile"}}}}, env_of({{"CHANGEFLOW_DB_NAME", "fromenv"}}));
  ASSERT_TRUE(r.snap);
  EXPECT_EQ(r.snap->get_int("db.port"), 3307);
  EXPECT_EQ(r.snap->get_string("db.name"), "fromenv");
  EXPECT_EQ(r.snap->get_string("db.user"), "changeflow");
  auto d = r.snap->describe();
  EXPECT_EQ(d["db.port"]["source"], "file");
  EXPECT_EQ(d["db.name"]["source"], "env");
  EXPECT_EQ(d["db.user"]["source"], "default");
}

TEST(ConfigValues, ClearedAndEmptyAreMissing) {
  auto r = load_from_json({{"rate_limit", {{"submit", nullptr}}}, {"access", {{"mode", ""}}}}, env_of({}));
  ASSERT_TRUE(r.snap);
  EXPECT_FALSE(r.snap->get_int("rate_limit.submit").has_value());
  EXPECT_FALSE(r.snap->get_string("access.mode").has_value());
}

TEST(ConfigValues, DescribeMasksSecrets) {
  auto r = load_from_json({{"db", {{"password", "hunter2"}}}, {"gitlab", {{"author_token", "tok"}}}}, env_of({}));
  ASSERT_TRUE(r.snap);
  EXPECT_EQ(r.snap->describe()["db.password"]["value"], "***");
  EXPECT_EQ(r.snap->describe()["gitlab.author_token"]["value"], "***");
}

TEST(ConfigValues, EnvNames) {
  EXPECT_EQ(env_name("db.port"), "CHANGEFLOW_DB_PORT");
  EXPECT_EQ(env_name("approval.max_retries"), "CHANGEFLOW_APPROVAL_MAX_RETRIES");
}

TEST(ConfigValues, EveryKeyHasADoc) {
  for (const auto& k : all_keys()) EXPECT_FALSE(k.doc.empty()) << k.name;
}

TEST(ConfigValues, RestartKeysChangedDetected) {
  auto a = load_from_json({{"db", {{"port", 1}}}}, env_of({}));
  auto b = load_from_json({{"db", {{"port", 2}}}, {"batch", {{"enabled", true}}}}, env_of({}));
  auto changed = a.snap->restart_keys_changed(*b.snap);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0], "db.port");
}

TEST(ConfigValues, SecretsAndTokensHaveNoDefaultAndAreEachNamedWhenMissing) {
  const std::vector<std::string> required = {"auth.jwt_secret", "callbacks.approval_secret", "callbacks.deploy_secret",
                                             "gitlab.author_token", "gitlab.approver_tokens"};
  const json complete = {{"auth", {{"jwt_secret", "j"}}},
                         {"callbacks", {{"approval_secret", "a"}, {"deploy_secret", "d"}}},
                         {"gitlab", {{"author_token", "t"}, {"approver_tokens", {"x"}}}}};
  auto full = load_from_json(complete, env_of({}));
  ASSERT_TRUE(full.snap);
  EXPECT_TRUE(missing_required_keys(*full.snap).empty());

  auto none = load_from_json(json::object(), env_of({}));
  ASSERT_TRUE(none.snap);
  auto missing = missing_required_keys(*none.snap);
  ASSERT_EQ(missing.size(), required.size());
  for (const auto& key : required) {
    EXPECT_TRUE(find_key(key)->default_value.is_null()) << key;
    // Each key alone: leaving it out (or clearing it) is reported with its name and variable.
    for (const json& absent : {json(nullptr), json(""), json::array()}) {
      json doc = complete;
      auto dot = key.find('.');
      auto& slot = doc[key.substr(0, dot)][key.substr(dot + 1)];
      bool list_key = key == "gitlab.approver_tokens";
      if (!absent.is_null() && absent.is_array() != list_key) continue;  // "" for strings, [] for lists
      slot = absent;
      auto one = load_from_json(doc, env_of({}));
      ASSERT_TRUE(one.snap) << key;
      auto m = missing_required_keys(*one.snap);
      ASSERT_EQ(m.size(), 1u) << key << " = " << absent.dump();
      EXPECT_NE(m[0].find("'" + key + "'"), std::string::npos) << m[0];
      EXPECT_NE(m[0].find(env_name(key)), std::string::npos) << m[0];
    }
  }
  // The environment satisfies a required key as well as the file does.
  auto from_env = load_from_json(json::object(), env_of({{"CHANGEFLOW_AUTH_JWT_SECRET", "j"},
                                                         {"CHANGEFLOW_CALLBACKS_APPROVAL_SECRET", "a"},
                                                         {"CHANGEFLOW_CALLBACKS_DEPLOY_SECRET", "d"},
                                                         {"CHANGEFLOW_GITLAB_AUTHOR_TOKEN", "t"},
                                                         {"CHANGEFLOW_GITLAB_APPROVER_TOKENS", "x,y"}}));
  ASSERT_TRUE(from_env.snap);
  EXPECT_TRUE(missing_required_keys(*from_env.snap).empty());
}

TEST(ConfigValues, RestrictiveDefaultsForAuthenticationAndAccess) {
  auto snap = load_from_json(json::object(), env_of({})).snap;
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->get_bool("auth.required"), true);
  EXPECT_EQ(snap->get_string("access.mode"), "TEST_WINDOW");
  EXPECT_FALSE(snap->get_string("access.window")) << "TEST_WINDOW without a window is closed";
}
