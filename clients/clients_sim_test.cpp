// The clients against the simulator over real loopback HTTP, including every fault that concerns
// them: lost responses, the 401 ambiguity, unreadable approver lists, check-item changes, duplicate
// MRs, timeouts, the circuit breaker, 429 Retry-After and a broken permission service.
#include "clients/external_context.hpp"

#include "config/snapshot.hpp"
#include "sim/simulator.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace changeflow;
using namespace changeflow::clients;
using namespace std::chrono_literals;
using changeflow::testing::wait_until;
using json = nlohmann::json;

namespace {

std::shared_ptr<const config::snapshot> make_config(const std::string& sim_url, json overrides = json::object()) {
  // The tokens have no default: these are the simulator's own (sim/simulator.hpp).
  json doc = {{"gitlab.base_url", sim_url + "/api/v4"},
              {"gitlab.author_token", "author-token"},
              {"gitlab.approver_tokens", {"approver-1-token", "approver-2-token"}},
              {"approval.base_url", sim_url},
              {"permission.base_url", sim_url},
              {"approval.max_retries", 2},
              {"approval.backoff_base_ms", 1},
              {"external.request_timeout_ms", 2000},
              {"external.breaker_failures", 50}};
  for (auto& [k, v] : overrides.items()) doc[k] = v;
  auto loaded = config::load_from_json(doc, [](const std::string&) { return std::optional<std::string>(); });
  EXPECT_TRUE(loaded.errors.empty()) << (loaded.errors.empty() ? "" : loaded.errors.front());
  return loaded.snap;
}

class ClientsAgainstSim : public ::testing::Test {
 protected:
  void SetUp() override {
    sim::sim_options o;
    o.pipeline_duration = 30ms;
    o.callback_delay = 60s;  // approval decisions are not part of these tests
    simulator = std::make_unique<sim::simulator>(o);
    simulator->start();
    use_config(make_config(simulator->base_url()));
  }
  void TearDown() override {
    gitlab.reset();
    ctx.reset();
    simulator->stop();
  }
  void use_config(std::shared_ptr<const config::snapshot> s) {
    snap = std::move(s);
    auto eps = endpoints_from(*snap);
    ASSERT_TRUE(eps) << describe(eps.error());
    ctx = std::make_unique<external_context>(shared, eps.value(), call_settings_from(*snap));
    gitlab = std::make_unique<gitlab_client>(ctx->gitlab_for("config/changes"));
  }
  void add_fault(const json& f) {
    ASSERT_EQ(changeflow::testing::http_call("127.0.0.1", simulator->port(), "POST", "/_sim/faults", f.dump()).status,
              200);
  }
  json stats() {
    return json::parse(changeflow::testing::http_call("127.0.0.1", simulator->port(), "GET", "/_sim/stats").body);
  }
  std::uint64_t requests(const std::string& endpoint) { return stats()["requests"].value(endpoint, 0u); }

  merge_request open_mr(const std::string& branch, const std::string& title) {
    auto commit = gitlab->ensure_branch_with_commit("author-token", branch, "main", "change " + title,
                                                    {{"create", "a.yaml", "x", "text", ""}}, title);
    EXPECT_TRUE(commit) << describe(commit.error());
    auto mr = gitlab->create_mr("author-token", branch, "main", title, "");
    EXPECT_TRUE(mr) << describe(mr.error());
    return mr->mr;
  }

  std::shared_ptr<external_shared> shared = std::make_shared<external_shared>();
  std::shared_ptr<const config::snapshot> snap;
  std::unique_ptr<sim::simulator> simulator;
  std::unique_ptr<external_context> ctx;
  std::unique_ptr<gitlab_client> gitlab;  // bound to the default project, config/changes
  const reviewer bot1{"approver-1-token", 101};
  const reviewer bot2{"approver-2-token", 102};
};

}  // namespace

TEST_F(ClientsAgainstSim, BranchCommitIsIdempotentAndDuplicateMrResolvesToTheOpenOne) {
  auto first = gitlab->ensure_branch_with_commit("author-token", "change/op-1", "main", "op-1 change",
                                                 {{"create", "a.yaml", "x", "text", ""}}, "op-1");
  ASSERT_TRUE(first) << describe(first.error());
  EXPECT_TRUE(first->created);
  EXPECT_EQ(requests("get_branch"), 0u) << "a new branch is created without reading it first";
  // A second attempt of the same change: GitLab refuses the branch (it exists), the branch is read,
  // and its head carries the change's marker: nothing is committed twice.
  auto again = gitlab->ensure_branch_with_commit("author-token", "change/op-1", "main", "op-1 change",
                                                 {{"create", "a.yaml", "x", "text", ""}}, "op-1");
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->sha, first->sha);
  EXPECT_EQ(requests("create_commit"), 2u) << "the first commit and the refused second";
  EXPECT_EQ(requests("get_branch"), 1u);
  // A branch left without this change's marker (another change's): the commit goes onto it.
  auto onto = gitlab->ensure_branch_with_commit("author-token", "change/op-1", "main", "op-2 change",
                                                {{"create", "b.yaml", "y", "text", ""}}, "op-2");
  ASSERT_TRUE(onto) << describe(onto.error());
  EXPECT_TRUE(onto->created);
  EXPECT_NE(onto->sha, first->sha);

  auto mr = gitlab->create_mr("author-token", "change/op-1", "main", "op-1", "");
  ASSERT_TRUE(mr) << describe(mr.error());
  EXPECT_FALSE(mr->already_existed);
  auto duplicate = gitlab->create_mr("author-token", "change/op-1", "main", "op-1", "");
  ASSERT_TRUE(duplicate) << describe(duplicate.error());
  EXPECT_TRUE(duplicate->already_existed);
  EXPECT_EQ(duplicate->mr.iid, mr->mr.iid);
  EXPECT_GE(ctx->http.connections_opened(), 1u);
  EXPECT_LT(ctx->http.connections_opened(), 3u);  // keep-alive reuse across the calls above
}

TEST_F(ClientsAgainstSim, MergeRefusalsAreClassified) {
  auto mr = open_mr("change/merge", "merge");
  auto early = gitlab->merge("author-token", mr.iid, mr.sha);
  ASSERT_FALSE(early);
  EXPECT_EQ(classify_merge_error(early.error()), merge_refusal::not_mergeable_yet);
  ASSERT_TRUE(
      wait_until([&] { return gitlab->get_mr("author-token", mr.iid)->detailed_merge_status == "mergeable"; }, 5s));
  auto wrong = gitlab->merge("author-token", mr.iid, "deadbeef");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(classify_merge_error(wrong.error()), merge_refusal::sha_mismatch);
  auto merged = gitlab->merge("author-token", mr.iid, mr.sha);
  ASSERT_TRUE(merged) << describe(merged.error());
  EXPECT_EQ(merged->state, "merged");
  ASSERT_TRUE(merged->head_pipeline);
  EXPECT_EQ(merged->head_pipeline->status, "success");
}

TEST_F(ClientsAgainstSim, LostApproveResponseIsSeenOnTheNextAttempt) {
  auto mr = open_mr("change/lost", "lost");
  add_fault({{"kind", "lose_response"}, {"endpoint", "approve"}, {"match", "lost"}, {"count", 1}});
  auto r = approve_as_reviewer(*gitlab, shared->check_items, bot1, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r.value(), approval_outcome::already_approved);
  EXPECT_EQ(requests("approve"), 1u);  // the second attempt read the list and skipped the call
  EXPECT_EQ(stats()["approvals"]["config/changes!" + std::to_string(mr.iid)]["101"], 1);
}

TEST_F(ClientsAgainstSim, BotsShareOneReadOfTheApproverList) {
  auto mr = open_mr("change/shared", "shared");
  auto r = approve_as_reviewers(*gitlab, shared->check_items, {bot1, bot2}, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(requests("get_approvals"), 1u) << "one read for both bots' first attempts";
  EXPECT_EQ(requests("approve"), 2u);
  EXPECT_EQ(stats()["approvals"]["config/changes!" + std::to_string(mr.iid)]["101"], 1);
  EXPECT_EQ(stats()["approvals"]["config/changes!" + std::to_string(mr.iid)]["102"], 1);
}

TEST_F(ClientsAgainstSim, ABotTheSharedReadNamesIsNotApprovedAgain) {
  auto mr = open_mr("change/known", "known");
  ASSERT_TRUE(gitlab->approve(bot2.token, mr.iid, std::nullopt));
  auto r = approve_as_reviewers(*gitlab, shared->check_items, {bot1, bot2}, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(requests("get_approvals"), 1u);
  EXPECT_EQ(requests("approve"), 2u) << "the direct approve and bot 1's; bot 2 skipped on the shared read";
  EXPECT_EQ(stats()["approvals"]["config/changes!" + std::to_string(mr.iid)]["102"], 1);
}

TEST_F(ClientsAgainstSim, AnUnreadableSharedListLetsEachBotReadForItself) {
  auto mr = open_mr("change/unshared", "unshared");
  add_fault({{"kind", "status"}, {"endpoint", "get_approvals"}, {"match", "unshared"}, {"status", 502}, {"count", 1}});
  auto r = approve_as_reviewers(*gitlab, shared->check_items, {bot1, bot2}, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(requests("get_approvals"), 3u) << "the failed shared read, then one per bot";
  EXPECT_EQ(requests("approve"), 2u);
}

TEST_F(ClientsAgainstSim, AlreadyApproved401IsSettledByTheFinalRead) {
  auto mr = open_mr("change/settle", "settle");
  ASSERT_TRUE(gitlab->approve(bot1.token, mr.iid, std::nullopt));
  // The list is unreadable for every pre-attempt read (3 with max_retries 2), readable for the last one.
  add_fault({{"kind", "status"}, {"endpoint", "get_approvals"}, {"match", "settle"}, {"status", 502}, {"count", 3}});
  auto r = approve_as_reviewer(*gitlab, shared->check_items, bot1, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r.value(), approval_outcome::already_approved);
  EXPECT_EQ(requests("approve"), 4u);  // 1 direct + 3 attempts answered 401
}

TEST_F(ClientsAgainstSim, NotAllowed401SurfacesWithItsStatus) {
  auto mr = open_mr("change/denied", "denied");
  add_fault({{"kind", "approve_not_allowed"}, {"user_id", 102}});
  auto r = approve_as_reviewer(*gitlab, shared->check_items, bot2, mr.iid, std::nullopt, *snap);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::http_status);
  EXPECT_EQ(r.error().status, 401);
  EXPECT_EQ(requests("approve"), 3u);  // max_retries 2 -> 3 attempts, each account separately
  // The other account is unaffected.
  auto other = approve_as_reviewer(*gitlab, shared->check_items, bot1, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(other);
  EXPECT_EQ(other.value(), approval_outcome::approved);
}

TEST_F(ClientsAgainstSim, UnreadableApproverListFailsOpen) {
  auto mr = open_mr("change/open", "failopen");
  add_fault({{"kind", "status"}, {"endpoint", "get_approvals"}, {"status", 500}});
  auto r = approve_as_reviewer(*gitlab, shared->check_items, bot1, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r.value(), approval_outcome::approved);
  EXPECT_EQ(stats()["approvals"]["config/changes!" + std::to_string(mr.iid)]["101"], 1);
}

TEST_F(ClientsAgainstSim, CheckItemsChangeHealsWithExactlyOneRetry) {
  use_config(make_config(simulator->base_url(), {{"gitlab.use_check_items", true}}));
  ASSERT_EQ(changeflow::testing::http_call("127.0.0.1", simulator->port(), "PUT", "/_sim/check_items",
                                           R"({"required":true,"items":[{"id":"a","title":"A"}]})")
                .status,
            200);
  auto mr = open_mr("change/items", "items");
  auto first = approve_as_reviewer(*gitlab, shared->check_items, bot1, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(first) << describe(first.error());
  ASSERT_TRUE(shared->check_items.get("config/changes"));
  EXPECT_EQ(shared->check_items.get("config/changes")->size(), 1u);

  add_fault({{"kind", "check_items_change"}, {"count", 1}});
  auto second = approve_as_reviewer(*gitlab, shared->check_items, bot2, mr.iid, std::nullopt, *snap);
  ASSERT_TRUE(second) << describe(second.error());
  EXPECT_EQ(second.value(), approval_outcome::approved);
  auto s = stats();
  EXPECT_EQ(s["check_items_422"], 1);
  EXPECT_EQ(s["requests"]["approve"], 3);      // 1 + (stale 422 + rebuilt retry)
  EXPECT_EQ(s["requests"]["check_items"], 1);  // the second bot used the cache, then the 422 body
  EXPECT_EQ(shared->check_items.get("config/changes")->size(), 2u);

  // With the switch off, the plain approver is used and no check items are sent (the sim refuses).
  use_config(make_config(simulator->base_url(), {{"gitlab.use_check_items", false}}));
  auto plain = gitlab->approve(bot1.token, mr.iid, std::nullopt);
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().status, 401);  // already approved by bot1: the plain path reached approve
}

TEST_F(ClientsAgainstSim, SlowResponseBecomesATimeout) {
  use_config(make_config(simulator->base_url(), {{"external.request_timeout_ms", 200}}));
  auto mr = open_mr("change/slow", "slow");
  add_fault({{"kind", "slow"}, {"endpoint", "get_mr"}, {"delay_ms", 3000}, {"count", 1}});
  auto r = gitlab->get_mr("author-token", mr.iid);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::timeout);
  EXPECT_TRUE(r.error().retryable);
  auto next = gitlab->get_mr("author-token", mr.iid);  // a fresh connection works again
  EXPECT_TRUE(next) << describe(next.error());
}

TEST_F(ClientsAgainstSim, BreakerOpensWithoutNetworkCallsThenHalfOpens) {
  use_config(
      make_config(simulator->base_url(), {{"external.breaker_failures", 2}, {"external.breaker_cooldown_ms", 100}}));
  auto mr = open_mr("change/breaker", "breaker");
  add_fault({{"kind", "status"}, {"endpoint", "get_mr"}, {"status", 503}, {"count", 2}});
  EXPECT_EQ(gitlab->get_mr("author-token", mr.iid).error().status, 503);
  EXPECT_EQ(gitlab->get_mr("author-token", mr.iid).error().status, 503);
  EXPECT_EQ(shared->gitlab.state(), breaker_state::open);
  auto before = requests("get_mr");
  auto refused = gitlab->get_mr("author-token", mr.iid);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().what, call_error::kind::breaker_open);
  EXPECT_EQ(requests("get_mr"), before);  // no network call while open
  // After the cool-down one trial goes through; it succeeds and closes the breaker.
  ASSERT_TRUE(wait_until([&] { return gitlab->get_mr("author-token", mr.iid).ok(); }, 5s));
  EXPECT_EQ(shared->gitlab.state(), breaker_state::closed);
}

TEST_F(ClientsAgainstSim, RateLimitCarriesRetryAfter) {
  add_fault({{"kind", "status"}, {"endpoint", "get_branch"}, {"status", 429}, {"retry_after", 7}, {"count", 1}});
  auto r = gitlab->get_branch("author-token", "main");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 429);
  EXPECT_TRUE(r.error().retryable);
  ASSERT_TRUE(r.error().retry_after_seconds);
  EXPECT_EQ(*r.error().retry_after_seconds, 7);
  EXPECT_EQ(r.error().message, "Retry later");
}

TEST_F(ClientsAgainstSim, PermissionFailuresMeanNoPermission) {
  ASSERT_EQ(changeflow::testing::http_call("127.0.0.1", simulator->port(), "POST", "/_sim/permissions",
                                           R"({"subject":"alice","granted":["change.submit"]})")
                .status,
            200);
  auto ok = ctx->permission.check("alice", {"change.submit", "ops.force"});
  EXPECT_FALSE(ok.error);
  EXPECT_EQ(ok.granted, std::set<std::string>({"change.submit"}));

  add_fault({{"kind", "status"}, {"endpoint", "permission_check"}, {"status", 500}, {"count", 1}});
  auto down = ctx->permission.check("alice", {"change.submit"});
  EXPECT_TRUE(down.granted.empty());
  ASSERT_TRUE(down.error);
  EXPECT_EQ(down.error->status, 500);

  add_fault({{"kind", "garbage"}, {"endpoint", "permission_check"}, {"count", 1}});
  auto garbage = ctx->permission.check("alice", {"change.submit"});
  EXPECT_TRUE(garbage.granted.empty());
  ASSERT_TRUE(garbage.error);
  EXPECT_EQ(garbage.error->what, call_error::kind::protocol);

  auto port = simulator->port();
  simulator->stop();
  use_config(make_config("http://127.0.0.1:" + std::to_string(port)));
  auto unreachable = ctx->permission.check("alice", {"change.submit"});
  EXPECT_TRUE(unreachable.granted.empty());
  ASSERT_TRUE(unreachable.error);
  EXPECT_EQ(unreachable.error->what, call_error::kind::refused);
}

TEST_F(ClientsAgainstSim, ApprovalSubmitIsIdempotentAndWithdrawWorks) {
  approval_submission s{"op-77", "Change 77", "alice", "http://127.0.0.1:1/cb", {{"k", 1}}, 12};
  auto first = ctx->approval.submit(s);
  ASSERT_TRUE(first) << describe(first.error());
  EXPECT_TRUE(first->created);
  auto again = ctx->approval.submit(s);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->approval_id, first->approval_id);
  EXPECT_TRUE(ctx->approval.withdraw(first->approval_id));
  auto unknown = ctx->approval.withdraw("apr-nope");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().status, 404);
}
