// The typed settings: built once per snapshot from the declaration table (config/keys.cpp), with the
// declared defaults, the documented clamps, environment overrides and cleared keys applied.
#include "config/store.hpp"

#include "config/test_env.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

using namespace changeflow::config;
using changeflow::config::test_support::env_of;
using nlohmann::json;

namespace {

std::shared_ptr<const snapshot> load(const json& doc, std::map<std::string, std::string> env = {}) {
  auto r = load_from_json(doc, env_of(std::move(env)));
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors.front());
  return r.snap;
}

/// A valid value of `spec`'s type that differs from its default; the same for every key of a type,
/// so two keys bound to one field would leave the same settings.
json other_value(const key_spec& spec) {
  switch (spec.type) {
    case value_type::integer: return 4242;
    case value_type::number: return 1.5;
    case value_type::boolean: return spec.default_value.is_boolean() ? !spec.default_value.get<bool>() : true;
    case value_type::string: return "x-test";
    case value_type::string_list: return json::array({"x-test"});
    case value_type::object: return json::object({{"x", "test"}});
  }
  return nullptr;
}
}  // namespace

TEST(ConfigSettings, DefaultsComeFromTheDeclarationTable) {
  auto snap = load(json::object());
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->http().address, "127.0.0.1");
  EXPECT_EQ(snap->actors().threads, 1);
  EXPECT_EQ(snap->http().port, 8080);
  EXPECT_EQ(snap->poll().short_interval_ms, 2000);
  EXPECT_EQ(snap->poll().short_attempts, 10);
  EXPECT_EQ(snap->poll().first_interval_ms, 1000);
  EXPECT_EQ(snap->merge().max_attempts, 5);
  EXPECT_EQ(snap->timeouts().approval_wait_seconds, 604800);
  EXPECT_FALSE(snap->batch().enabled);
  EXPECT_EQ(snap->batch().max_attempts, 3);
  EXPECT_EQ(snap->notifications().batch, 50);
  EXPECT_EQ(snap->flow().default_order, "approve_then_create");
  EXPECT_EQ(snap->gitlab().target_branch, "main");
  EXPECT_EQ(snap->gitlab().project, "config/changes");
  EXPECT_EQ(snap->gitlab().approver_user_ids, (std::vector<std::string>{"101", "102"}));
  EXPECT_TRUE(snap->gitlab().approver_tokens.empty());
  EXPECT_EQ(snap->auth().ops_rules, (std::vector<std::string>{"changeflow.ops", "changeflow.admin"}));
  EXPECT_TRUE(snap->auth().required);
  EXPECT_EQ(snap->auth().subject_rule, "subject:{subject}");
  EXPECT_EQ(snap->rate_limit().submit, 600);
  EXPECT_EQ(snap->rate_limit().window_ms, 60000);
  EXPECT_FALSE(snap->rate_limit().callbacks.has_value()) << "no default: no limiting";
  EXPECT_FALSE(snap->console().dir.has_value());
  EXPECT_FALSE(snap->instance().id.has_value());
  EXPECT_FALSE(snap->auth().jwt_secret.has_value());
  EXPECT_EQ(snap->external().ca_file, "");
  EXPECT_EQ(snap->db().reserved_for_callbacks(), 2000) << "missing -> db.queue_capacity / 10";
  EXPECT_EQ(snap->faults().hold_after_deploy_record_ms, 0);
  EXPECT_EQ(snap->faults().lose_group_answer_every, 0) << "test hooks are off by default";
}

// Every bound key fills a field of its own: changing one key changes the settings, and no two keys
// change them the same way (a key bound to nothing, or two keys to one field, would fail here).
TEST(ConfigSettings, EveryKeyIsBoundToItsOwnField) {
  const settings defaults = load(json::object())->settings();
  std::map<std::string, settings> changed;
  for (const auto& spec : all_keys()) {
    if (!spec.bind) {
      EXPECT_EQ(spec.name, "repositories") << "only the repositories section is read by config/ itself";
      continue;
    }
    // The other fields as they are by default, this one changed.
    settings mixed = defaults;
    spec.bind(mixed, other_value(spec), spec.default_value);
    EXPECT_FALSE(mixed == defaults) << spec.name << " changes no settings field";
    changed.emplace(std::string(spec.name), mixed);
  }
  EXPECT_GT(changed.size(), 100u);
  for (auto a = changed.begin(); a != changed.end(); ++a) {
    for (auto b = std::next(a); b != changed.end(); ++b) {
      EXPECT_FALSE(a->second == b->second) << a->first << " and " << b->first << " fill the same field";
    }
  }
}

TEST(ConfigSettings, ClampsAndFallbacksAreAppliedOnce) {
  auto snap =
      load({{"poll", {{"short_interval_ms", 0}, {"short_attempts", -4}, {"timeout_ms", -1}, {"first_interval_ms", -3}}},
            {"merge", {{"max_attempts", 0}}},
            {"notifications", {{"batch", 5000}, {"timeout_ms", 0}, {"retry_base_ms", 9000}, {"retry_cap_ms", 10}}},
            {"rate_limit", {{"window_ms", -5}, {"submit", 0}, {"ops", -1}, {"ops_read", 3}}},
            {"console", {{"poll_ms", 10}}},
            {"durability", {{"sweep_interval_ms", 0}, {"shutdown_deadline_ms", -100}}},
            {"batch", {{"max_attempts", -2}, {"max_members", 0}}},
            {"db", {{"callback_reserve", -3}, {"read_pool_size", 0}}},
            {"actors", {{"threads", 0}}},
            {"faults",
             {{"hold_after_deploy_record_ms", 999999},
              {"hold_after_idempotency_begin_ms", -5},
              {"lose_group_answer_every", -2}}},
            {"approval", {{"max_retries", -1}}},
            {"gitlab", {{"mr_read_reuse_ms", -7}}},
            {"auth", {{"permission_timeout_ms", 0}}},
            {"idempotency", {{"ttl_seconds", -1}, {"cleanup_batch", 0}}}});
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->poll().short_interval_ms, 1);
  EXPECT_EQ(snap->poll().short_attempts, 0);
  EXPECT_EQ(snap->poll().timeout_ms, 1);
  EXPECT_EQ(snap->poll().first_interval_ms, 0);
  EXPECT_EQ(snap->merge().max_attempts, 1);
  EXPECT_EQ(snap->notifications().batch, 1000);
  EXPECT_EQ(snap->notifications().timeout_ms, 5000) << "<= 0 -> the declared default";
  EXPECT_EQ(snap->notifications().retry_cap_ms, 9000) << "below retry_base_ms -> retry_base_ms";
  EXPECT_EQ(snap->rate_limit().window_ms, 60000);
  EXPECT_FALSE(snap->rate_limit().submit.has_value()) << "<= 0 -> no limiting";
  EXPECT_FALSE(snap->rate_limit().ops.has_value());
  EXPECT_EQ(snap->rate_limit().ops_read, 3);
  EXPECT_EQ(snap->console().poll_ms, 1000);
  EXPECT_EQ(snap->durability().sweep_interval_ms, 5000);
  EXPECT_EQ(snap->durability().shutdown_deadline_ms, 0);
  EXPECT_EQ(snap->batch().max_attempts, 3);
  EXPECT_EQ(snap->batch().max_members, 1);
  EXPECT_EQ(snap->db().reserved_for_callbacks(), 0);
  EXPECT_EQ(snap->db().read_pool_size, 1);
  EXPECT_EQ(snap->actors().threads, 1) << "< 1 -> 1";
  EXPECT_EQ(snap->faults().hold_after_deploy_record_ms, 60000);
  EXPECT_EQ(snap->faults().hold_after_idempotency_begin_ms, 0);
  EXPECT_EQ(snap->faults().lose_group_answer_every, 0) << "< 0 -> off";
  EXPECT_EQ(snap->approval().max_retries, 0);
  EXPECT_EQ(snap->gitlab().mr_read_reuse_ms, 0) << "negative -> 0 (no reuse)";
  EXPECT_EQ(snap->auth().permission_timeout_ms, 2000);
  EXPECT_EQ(snap->idempotency().ttl_seconds, 86400);
  EXPECT_EQ(snap->idempotency().cleanup_batch, 500);
  // Keys whose <= 0 has a meaning of its own keep it.
  auto paused = load({{"notifications", {{"dispatch_interval_ms", 0}}}, {"reconcile", {{"interval_ms", -1}}}});
  ASSERT_TRUE(paused);
  EXPECT_EQ(paused->notifications().dispatch_interval_ms, 0);
  EXPECT_EQ(paused->reconcile().interval_ms, -1);
}

TEST(ConfigSettings, EnvironmentOverridesTheFile) {
  auto snap = load({{"poll", {{"short_interval_ms", 1000}}}, {"batch", {{"enabled", false}}}},
                   {{"CHANGEFLOW_POLL_SHORT_INTERVAL_MS", "777"},
                    {"CHANGEFLOW_BATCH_ENABLED", "true"},
                    {"CHANGEFLOW_AUTH_TRUSTED_PROXIES", "10.0.0.1,10.0.0.2"},
                    {"CHANGEFLOW_AUTH_JWT_AUDIENCE", "changeflow"},
                    {"CHANGEFLOW_RATE_LIMIT_CALLBACKS", "40"}});
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->poll().short_interval_ms, 777);
  EXPECT_TRUE(snap->batch().enabled);
  EXPECT_EQ(snap->auth().trusted_proxies, (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
  EXPECT_EQ(snap->auth().jwt_audience, "changeflow");
  EXPECT_EQ(snap->rate_limit().callbacks, 40);
}

TEST(ConfigSettings, ClearedKeys) {
  auto snap =
      load({{"auth", {{"jwt_audience", nullptr}, {"ops_rules", nullptr}, {"aliases", nullptr}, {"subject_rule", ""}}},
            {"rate_limit", {{"submit", nullptr}}},
            {"batch", {{"max_attempts", nullptr}}},
            {"gitlab", {{"target_branch", ""}, {"project", nullptr}}},
            {"approval", {{"callback_url", nullptr}}},
            {"auth.required", nullptr}});
  ASSERT_TRUE(snap);
  // Optional: cleared -> nothing (each consumer's documented fallback).
  EXPECT_FALSE(snap->auth().jwt_audience.has_value());
  EXPECT_FALSE(snap->auth().subject_rule.has_value()) << "\"\" counts as cleared";
  EXPECT_FALSE(snap->rate_limit().submit.has_value()) << "cleared -> no limiting, not the default 600";
  EXPECT_FALSE(snap->gitlab().project.has_value());
  EXPECT_FALSE(snap->approval().callback_url.has_value());
  // A cleared list is empty (nobody granted), a cleared object null.
  EXPECT_TRUE(snap->auth().ops_rules.empty());
  EXPECT_TRUE(snap->auth().aliases.is_null());
  // Plain values: cleared -> the declared default.
  EXPECT_EQ(snap->batch().max_attempts, 3);
  EXPECT_EQ(snap->gitlab().target_branch, "main");
  EXPECT_TRUE(snap->auth().required) << "cleared -> required";
  // A snapshot built directly (no defaults filled in, a wrong type) still answers.
  snapshot odd({{"rate_limit.submit", {json("ten"), "file"}}, {"poll.short_interval_ms", {json("fast"), "file"}}});
  EXPECT_FALSE(odd.rate_limit().submit.has_value());
  EXPECT_EQ(odd.poll().short_interval_ms, 2000);
  EXPECT_TRUE(snapshot({}).auth().required);
}

TEST(ConfigSettings, HotReloadBuildsNewSettings) {
  auto path = std::filesystem::temp_directory_path() /
              ("changeflow-settings-" + std::to_string(::getpid()) + "-" +
               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".json");
  std::ofstream(path) << R"({"poll": {"short_interval_ms": 1000}, "rate_limit": {"submit": 5}})";
  auto initial = load_from_file(path.string(), env_of({}));
  ASSERT_TRUE(initial.snap);
  store s(initial.snap, path.string(), env_of({}));
  auto before = s.current();
  {
    std::ofstream(path.string() + ".tmp") << R"({"poll": {"short_interval_ms": 3000}, "rate_limit": {"submit": null}})";
    std::filesystem::rename(path.string() + ".tmp", path);
  }
  ASSERT_TRUE(s.reload());
  EXPECT_EQ(s.current()->poll().short_interval_ms, 3000);
  EXPECT_FALSE(s.current()->rate_limit().submit.has_value());
  // The old snapshot and its settings never change.
  EXPECT_EQ(before->poll().short_interval_ms, 1000);
  EXPECT_EQ(before->rate_limit().submit, 5);
  std::filesystem::remove(path);
}
