// The `repositories` section: parsing with its fallbacks, refusal of malformed sections at load, the
// masking of its secrets, and where a change may go (resolve_target), table-driven.
#include "config/repositories.hpp"
#include "config/snapshot.hpp"

#include <gtest/gtest.h>

using namespace changeflow::config;
using nlohmann::json;

namespace {
load_result load(json doc) {
  return load_from_json(doc, [](const std::string&) { return std::optional<std::string>(); });
}
json globals() {
  return {{"gitlab",
           {{"project", "config/changes"},
            {"target_branch", "main"},
            {"author_token", "global-author"},
            {"approver_tokens", {"g-1", "g-2"}},
            {"approver_user_ids", {"101", "102"}}}}};
}
}  // namespace

TEST(Repositories, WithoutTheSectionTheGlobalProjectIsTheOneRepository) {
  auto r = load(globals());
  ASSERT_TRUE(r.errors.empty()) << r.errors.front();
  const auto& set = r.snap->repositories();
  EXPECT_FALSE(set.from_section);
  ASSERT_EQ(set.all.size(), 1u);
  EXPECT_EQ(set.all[0].project, "config/changes");
  EXPECT_EQ(set.all[0].branches, std::vector<std::string>{"main"});
  EXPECT_EQ(set.all[0].author_token, "global-author");
  ASSERT_EQ(set.all[0].approvers.size(), 2u);
  EXPECT_EQ(set.all[0].approvers[1].user_id, 102);
  EXPECT_EQ(set.all[0].webhook_secret, "");
}

TEST(Repositories, EntriesFallBackToTheGlobalKeysFieldByField) {
  auto doc = globals();
  doc["repositories"] = {
      {"team/a", json::object()},
      {"team/b",
       {{"branches", {"main", "release"}},
        {"author_token", "b-author"},
        {"approver_tokens", {"b-1"}},
        {"approver_user_ids", {"201"}},
        {"webhook_secret", "b-hook"}}},
  };
  auto r = load(doc);
  ASSERT_TRUE(r.errors.empty()) << r.errors.front();
  const auto& set = r.snap->repositories();
  EXPECT_TRUE(set.from_section);
  ASSERT_EQ(set.all.size(), 2u);  // gitlab.project is not added: the section lists every repository
  const auto* a = set.find("team/a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->branches, std::vector<std::string>{"main"});
  EXPECT_EQ(a->author_token, "global-author");
  EXPECT_EQ(a->approvers.size(), 2u);
  const auto* b = set.find("team/b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->branches, (std::vector<std::string>{"main", "release"}));
  EXPECT_EQ(b->author_token, "b-author");
  ASSERT_EQ(b->approvers.size(), 1u);
  EXPECT_EQ(b->approvers[0].token, "b-1");
  EXPECT_EQ(b->approvers[0].user_id, 201);
  EXPECT_EQ(b->webhook_secret, "b-hook");
  EXPECT_EQ(set.find("config/changes"), nullptr);
  // Tokens and secrets inside the section are masked in the effective configuration.
  auto described = r.snap->describe()["repositories"]["value"];
  EXPECT_EQ(described["team/b"]["author_token"], "***");
  EXPECT_EQ(described["team/b"]["approver_tokens"], "***");
  EXPECT_EQ(described["team/b"]["webhook_secret"], "***");
  EXPECT_EQ(described["team/b"]["approver_user_ids"], json({"201"}));
  // The global fallback for a project no longer configured.
  auto gone = global_repository(*r.snap, "team/removed");
  EXPECT_EQ(gone.author_token, "global-author");
  EXPECT_EQ(gone.approvers.size(), 2u);
}

TEST(Repositories, MalformedSectionsAreRefusedAtLoadNamingTheField) {
  struct bad_case {
    const char* name;
    json section;
    const char* mentions;
  };
  const bad_case cases[] = {
      {"not an object", json::array({"team/a"}), "repositories"},
      {"entry not an object", {{"team/a", "main"}}, "repositories.team/a"},
      {"unknown field", {{"team/a", {{"branch", "main"}}}}, "unknown field 'branch'"},
      {"empty branches", {{"team/a", {{"branches", json::array()}}}}, "repositories.team/a.branches"},
      {"branch not a string", {{"team/a", {{"branches", {1}}}}}, "repositories.team/a.branches"},
      {"tokens without ids", {{"team/a", {{"approver_tokens", {"t"}}}}}, "set together"},
      {"ids not integers",
       {{"team/a", {{"approver_tokens", {"t"}}, {"approver_user_ids", {"x"}}}}},
       "repositories.team/a.approver_user_ids"},
      {"lists of different length",
       {{"team/a", {{"approver_tokens", {"t", "u"}}, {"approver_user_ids", {"1"}}}}},
       "as many entries"},
      {"author token not a string", {{"team/a", {{"author_token", 5}}}}, "repositories.team/a.author_token"},
      {"not a project path", {{"/team", json::object()}}, "not a project path"},
  };
  for (const auto& c : cases) {
    auto doc = globals();
    doc["repositories"] = c.section;
    auto r = load(doc);
    ASSERT_FALSE(r.errors.empty()) << c.name;
    EXPECT_EQ(r.snap, nullptr) << c.name;
    EXPECT_NE(r.errors.front().find(c.mentions), std::string::npos) << c.name << ": " << r.errors.front();
  }
}

TEST(Repositories, WhereAChangeGoesIsValidatedAgainstTheConfiguredSet) {
  auto one = load(globals()).snap->repositories();
  auto doc = globals();
  doc["repositories"] = {{"team/a", {{"branches", {"main"}}}}, {"team/b", {{"branches", {"main", "release"}}}}};
  auto several = load(doc).snap->repositories();
  struct target_case {
    const char* name;
    const repository_set* set;
    target_request req;
    std::optional<std::pair<std::string, std::string>> resolved;  // nullopt: refused
    const char* mentions;
  };
  using P = std::pair<std::string, std::string>;
  const target_case cases[] = {
      {"old client, one repository, one branch", &one, {}, P{"config/changes", "main"}, ""},
      {"named, one repository", &one, {"config/changes", "main"}, P{"config/changes", "main"}, ""},
      {"branch alone, one repository", &one, {std::nullopt, "main"}, P{"config/changes", "main"}, ""},
      {"unknown branch, one repository", &one, {std::nullopt, "dev"}, std::nullopt, "'dev' is not configured"},
      {"both named", &several, {"team/b", "release"}, P{"team/b", "release"}, ""},
      {"repository with one branch", &several, {"team/a", std::nullopt}, P{"team/a", "main"}, ""},
      {"old client, several repositories", &several, {}, std::nullopt, "'repository' is required"},
      {"repository with several branches", &several, {"team/b", std::nullopt}, std::nullopt, "'release'"},
      {"unknown repository", &several, {"team/c", "main"}, std::nullopt, "team/b (branches 'main', 'release')"},
      {"branch of another repository", &several, {"team/a", "release"}, std::nullopt, "its branches: 'main'"},
  };
  for (const auto& c : cases) {
    auto r = resolve_target(*c.set, c.req);
    if (c.resolved) {
      auto* ok = std::get_if<resolved_target>(&r);
      ASSERT_NE(ok, nullptr) << c.name << ": " << std::get<target_refusal>(r).message;
      EXPECT_EQ(ok->repository, c.resolved->first) << c.name;
      EXPECT_EQ(ok->target_branch, c.resolved->second) << c.name;
    } else {
      auto* no = std::get_if<target_refusal>(&r);
      ASSERT_NE(no, nullptr) << c.name;
      EXPECT_NE(no->message.find(c.mentions), std::string::npos) << c.name << ": " << no->message;
    }
  }
}
