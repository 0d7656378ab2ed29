#include "http/middleware/ownership.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using namespace changeflow::http::middleware;
using nlohmann::json;

namespace {

std::shared_ptr<const config::snapshot> snap_of(json doc) {
  auto r = config::load_from_json(doc, [](const std::string&) { return std::optional<std::string>(); });
  EXPECT_TRUE(r.snap);
  return r.snap;
}

persistence::operation_row row(std::string subject, std::string requester) {
  persistence::operation_row r;
  r.operation_id = "00000000-0000-4000-8000-000000000001";
  r.subject_id = std::move(subject);
  r.requester = std::move(requester);
  return r;
}

caller who(std::string account, std::optional<std::set<std::string>> granted) {
  return caller{std::move(account), std::move(granted)};
}

}  // namespace

TEST(Ownership, RulesForSubjectFollowThePatternAndTheOpsRules) {
  auto snap = snap_of(json::object());
  auto r = rules_for_subject(*snap, "payments");
  EXPECT_EQ(r.subject_rule, "subject:payments");
  EXPECT_EQ(r.ops_rules, (std::vector<std::string>{"changeflow.ops", "changeflow.admin"}));
  EXPECT_EQ(r.to_ask(), (std::vector<std::string>{"subject:payments", "changeflow.ops", "changeflow.admin"}));

  auto custom = snap_of({{"auth.subject_rule", "team.{subject}.{subject}"}, {"auth.ops_rules", {"root", "root", ""}}});
  auto c = rules_for_subject(*custom, "x");
  EXPECT_EQ(c.subject_rule, "team.x.x");
  EXPECT_EQ(c.to_ask(), (std::vector<std::string>{"team.x.x", "root"})) << "no empties, no repeats";

  // Cleared, or without a placeholder (one code for all subjects): nobody is permitted by subject.
  for (const json& bad : {json(nullptr), json(""), json("subject:any")}) {
    auto s = snap_of({{"auth.subject_rule", bad}});
    EXPECT_EQ(rules_for_subject(*s, "payments").subject_rule, "") << bad.dump();
  }
}

TEST(Ownership, TableOfWhoMayViewAndWhoMayAct) {
  auto snap = snap_of(json::object());
  auto rules = rules_for_subject(*snap, "team-a");
  const auto op = row("team-a", "alice");
  const std::set<std::string> none;
  struct ownership_case {
    const char* name;
    caller c;
    bool view;
    bool act;
  };
  const ownership_case cases[] = {
      {"requester, permission service not asked", who("alice", std::nullopt), true, true},
      {"requester who lost the subject grant", who("alice", none), true, true},
      {"same team, not the requester", who("bob", std::set<std::string>{"subject:team-a"}), true, false},
      {"other team", who("carol", std::set<std::string>{"subject:team-b"}), false, false},
      {"operator", who("olga", std::set<std::string>{"changeflow.ops"}), true, true},
      {"admin", who("ada", std::set<std::string>{"changeflow.admin"}), true, true},
      {"permission service failed", who("bob", std::nullopt), false, false},
      {"granted nothing", who("bob", none), false, false},
      {"an unrelated code", who("bob", std::set<std::string>{"subject:team-a-extra"}), false, false},
      {"empty account never matches", who("", std::nullopt), false, false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(may_use(c.c, op, rules, operation_use::view), c.view) << c.name;
    EXPECT_EQ(may_use(c.c, op, rules, operation_use::act), c.act) << c.name;
  }
}

TEST(Ownership, RowsWithoutRequesterBelongToNobody) {
  auto snap = snap_of(json::object());
  auto rules = rules_for_subject(*snap, "team-a");
  const auto old = row("team-a", "");
  EXPECT_FALSE(is_requester("", old));
  EXPECT_FALSE(may_use(who("", std::set<std::string>{}), old, rules, operation_use::act));
  EXPECT_TRUE(may_use(who("bob", std::set<std::string>{"subject:team-a"}), old, rules, operation_use::view));
  EXPECT_TRUE(may_use(who("olga", std::set<std::string>{"changeflow.ops"}), old, rules, operation_use::act));
}

TEST(Ownership, SubjectPermissionForSubmitAndList) {
  auto snap = snap_of({{"auth.ops_rules", json::array()}});
  auto rules = rules_for_subject(*snap, "team-a");
  EXPECT_TRUE(permitted_for_subject(who("bob", std::set<std::string>{"subject:team-a"}), rules));
  EXPECT_FALSE(permitted_for_subject(who("bob", std::set<std::string>{"subject:team-b"}), rules));
  EXPECT_FALSE(permitted_for_subject(who("bob", std::set<std::string>{"changeflow.ops"}), rules))
      << "with auth.ops_rules empty nobody is an operator";
  EXPECT_FALSE(permitted_for_subject(who("bob", std::nullopt), rules));
}
