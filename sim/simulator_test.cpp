// The simulator over real loopback HTTP: the GitLab MR state machine, approvals with their signed
// callbacks (captured by a small receiving server), faults, and the deploy callback.
#include "sim/simulator.hpp"

#include "base/base64.hpp"

#include "base/ids.hpp"
#include "http/server/server.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <mutex>
#include <set>

using namespace changeflow;
using namespace std::chrono_literals;
using changeflow::testing::http_call;
using changeflow::testing::wait_until;
using json = nlohmann::json;

namespace {

// Captures every POST it receives and answers 200.
class callback_receiver {
 public:
  callback_receiver()
      : server_({}, [this](http_server::request&& req, http_server::responder reply) {
          {
            std::lock_guard lock(mutex_);
            received_.push_back(std::move(req));
          }
          reply(http_server::response{200, "application/json", {}, R"({"code":"OK"})"});
        }) {
    server_.start();
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(server_.port()) + path; }
  std::vector<http_server::request> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }
  std::size_t count() { return received().size(); }

 private:
  std::mutex mutex_;
  std::vector<http_server::request> received_;
  http_server::server server_;
};

class SimulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim::sim_options o;
    o.callback_delay = 20ms;
    o.pipeline_duration = 50ms;
    o.rebase_duration = 20ms;
    o.deploy_callback_url = receiver.url("/api/v1/callbacks/deploy");
    o.approval_secret = "approval-secret";
    o.deploy_secret = "deploy-secret";
    configure(o);
    simulator = std::make_unique<sim::simulator>(o);
    simulator->start();
  }
  void TearDown() override { simulator->stop(); }
  /// Options of a derived fixture, on top of the ones above.
  virtual void configure(sim::sim_options&) {}

  changeflow::testing::http_result call(const std::string& method, const std::string& target,
                                        const json& body = nullptr, const std::string& token = "author-token") {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!token.empty()) headers.emplace_back("PRIVATE-TOKEN", token);
    return http_call("127.0.0.1", simulator->port(), method, target, body.is_null() ? "" : body.dump(), headers);
  }
  static std::string mr_path(int iid, const std::string& suffix = "") {
    return "/api/v4/projects/config%2Fchanges/merge_requests/" + std::to_string(iid) + suffix;
  }
  json open_mr(const std::string& branch, const std::string& title, const std::string& description = "") {
    auto commit = call("POST", "/api/v4/projects/config%2Fchanges/repository/commits",
                       {{"branch", branch},
                        {"start_branch", "main"},
                        {"commit_message", "change"},
                        {"actions", {{{"action", "create"}, {"file_path", branch + ".yaml"}, {"content", "x"}}}}});
    EXPECT_EQ(commit.status, 201) << commit.body;
    auto mr =
        call("POST", "/api/v4/projects/config%2Fchanges/merge_requests",
             {{"source_branch", branch}, {"target_branch", "main"}, {"title", title}, {"description", description}});
    EXPECT_EQ(mr.status, 201) << mr.body;
    return json::parse(mr.body);
  }
  json get_mr(int iid) { return json::parse(call("GET", mr_path(iid, "?include_rebase_in_progress=true")).body); }
  bool mergeable(int iid) { return get_mr(iid)["detailed_merge_status"] == "mergeable"; }
  void add_fault(const json& f) { ASSERT_EQ(call("POST", "/_sim/faults", f, "").status, 200); }
  json stats() { return json::parse(call("GET", "/_sim/stats", nullptr, "").body); }
  /// Waits until the sim has counted these approval and deploy deliveries (a sender counts one once it
  /// has read the answer, which may be after the receiver saw it); `seen` gets the last counters.
  bool wait_sent(int approvals, int deploys, json& seen) {
    return wait_until(
        [&] {
          seen = stats()["callbacks"];
          return seen.value("approval_sent", 0) == approvals && seen.value("deploy_sent", 0) == deploys;
        },
        5s);
  }

  callback_receiver receiver;
  std::unique_ptr<sim::simulator> simulator;
};

// The standard workload's sim (bench/run): every callback twice, sent from lanes, and a pipeline
// that reads "running" once whatever its duration.
class StandardWorkloadSimTest : public SimulatorTest {
 protected:
  void configure(sim::sim_options& o) override {
    o.callback_delay = 0ms;
    o.pipeline_duration = 0ms;
    o.callback_copies = 2;
    o.callback_copy_gap = 5ms;
    o.callback_lanes = 2;
    o.pipeline_running_reads = 1;
  }
};

// A simulator started again against a database that holds an earlier one's MRs (bench/run's flows
// on one prefilled database): its MR numbers start past them.
class LaterSimTest : public SimulatorTest {
 protected:
  void configure(sim::sim_options& o) override { o.first_mr_iid = 5001; }
};

}  // namespace

TEST_F(LaterSimTest, MrNumbersStartAtTheFirstGivenAndGoOnFromThere) {
  auto first = open_mr("change/later-1", "first");
  auto second = open_mr("change/later-2", "second");
  EXPECT_EQ(first["iid"], 5001);
  EXPECT_EQ(second["iid"], 5002);
  EXPECT_EQ(get_mr(5001)["title"], "first");
}

TEST_F(StandardWorkloadSimTest, CallbacksComeTwiceWithOneIdAndThePipelineReadsRunningOnce) {
  ASSERT_EQ(
      call("POST", "/api/approvals",
           {{"requestId", "op-std"}, {"title", "T"}, {"callbackUrl", receiver.url("/api/v1/callbacks/approval")}}, "")
          .status,
      201);
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 2; }, 5s));
  auto approvals = receiver.received();
  EXPECT_EQ(json::parse(approvals[0].body)["callbackId"], json::parse(approvals[1].body)["callbackId"]);

  auto mr = open_mr("change/std", "Standard", "changeflow-operation: 22222222-2222-4222-8222-222222222222\n");
  int iid = mr["iid"];
  // Zero pipeline duration, yet the first read sees it running and the second its outcome.
  EXPECT_EQ(get_mr(iid)["head_pipeline"]["status"], "running");
  auto second = get_mr(iid);
  EXPECT_EQ(second["head_pipeline"]["status"], "success");
  EXPECT_EQ(second["detailed_merge_status"], "mergeable");

  ASSERT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", mr["sha"]}}).status, 200);
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 4; }, 5s));
  std::vector<std::string> deliveries;
  for (const auto& r : receiver.received()) {
    if (r.path == "/api/v1/callbacks/deploy")
      deliveries.push_back(json::parse(r.body)["deliveryId"].get<std::string>());
  }
  ASSERT_EQ(deliveries.size(), 2u);
  EXPECT_EQ(deliveries[0], deliveries[1]);
  json sent;
  EXPECT_TRUE(wait_sent(2, 2, sent)) << sent.dump();
  // The four deliveries ran on the lanes, not on the scheduler; the stats say how late they started.
  auto lag = stats()["task_lag"];
  EXPECT_EQ(lag["lane_count"], 2);
  EXPECT_EQ(lag["lanes"]["tasks"], 4);
  EXPECT_TRUE(lag["lanes"]["lag_us"].is_number_unsigned()) << lag.dump();
  EXPECT_TRUE(lag["lanes"]["busy_us"].is_number_unsigned()) << lag.dump();
}

TEST_F(SimulatorTest, MergeRequestGoesFromCheckingToMergeableToMerged) {
  auto mr = open_mr("change/one", "Change one", "changeflow-operation: 11111111-1111-4111-8111-111111111111\n");
  int iid = mr["iid"];
  EXPECT_EQ(mr["detailed_merge_status"], "checking");
  EXPECT_EQ(mr["state"], "opened");
  std::string sha = mr["sha"];

  // Right after creation the merge is refused with 405, as on GitLab.
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", sha}}).status, 405);
  ASSERT_TRUE(wait_until([&] { return mergeable(iid); }, 5s));
  EXPECT_EQ(get_mr(iid)["head_pipeline"]["status"], "success");
  EXPECT_EQ(get_mr(iid)["head_pipeline"]["sha"], sha);

  auto wrong_sha = call("PUT", mr_path(iid, "/merge"), {{"sha", "0000"}});
  EXPECT_EQ(wrong_sha.status, 409);
  EXPECT_NE(wrong_sha.body.find("SHA does not match HEAD"), std::string::npos);

  auto merged = call("PUT", mr_path(iid, "/merge"), {{"sha", sha}});
  ASSERT_EQ(merged.status, 200) << merged.body;
  EXPECT_EQ(json::parse(merged.body)["state"], "merged");
  // A merged MR cannot be closed: the close is ignored.
  EXPECT_EQ(json::parse(call("PUT", mr_path(iid), {{"state_event", "close"}}).body)["state"], "merged");

  // The deploy pipeline reports back with the operation ids from the description.
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 1; }, 5s));
  auto deploy = receiver.received().front();
  EXPECT_EQ(deploy.path, "/api/v1/callbacks/deploy");
  EXPECT_EQ(deploy.header("x-gitlab-token").value_or(""), "deploy-secret");
  auto payload = json::parse(deploy.body);
  EXPECT_EQ(payload["mrIid"], iid);
  EXPECT_EQ(payload["status"], "success");
  EXPECT_EQ(payload["operationIds"], json::array({"11111111-1111-4111-8111-111111111111"}));
  EXPECT_EQ(stats()["merges"]["config/changes!" + std::to_string(iid)], 1);
}

TEST_F(SimulatorTest, DuplicateOpenMergeRequestAnswers409WithArrayBody) {
  auto mr = open_mr("change/dup", "Dup");
  auto again = call("POST", "/api/v4/projects/config%2Fchanges/merge_requests",
                    {{"source_branch", "change/dup"}, {"target_branch", "main"}, {"title", "Dup"}});
  EXPECT_EQ(again.status, 409);
  auto body = json::parse(again.body);
  ASSERT_TRUE(body["message"].is_array());
  EXPECT_EQ(body["message"][0], "Another open merge request already exists for this source branch: !" +
                                    std::to_string(mr["iid"].get<int>()));
}

TEST_F(SimulatorTest, ClosedMergeRequestCannotBeMergedAndUnknownTokenIs401) {
  auto mr = open_mr("change/close", "Close me");
  int iid = mr["iid"];
  EXPECT_EQ(call("GET", mr_path(iid), nullptr, "stolen").status, 401);
  EXPECT_EQ(json::parse(call("PUT", mr_path(iid), {{"state_event", "close"}}).body)["state"], "closed");
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", mr["sha"]}}).status, 405);
}

TEST_F(SimulatorTest, MergedBeforeCloseTheCloseFindsTheMergeRequestMerged) {
  add_fault({{"kind", "merged_before_close"}, {"match", "Late merge"}, {"count", 1}});
  auto mr = open_mr("change/late-merge", "Late merge");
  int iid = mr["iid"];
  auto closed = call("PUT", mr_path(iid), {{"state_event", "close"}});
  ASSERT_EQ(closed.status, 200);
  EXPECT_EQ(json::parse(closed.body)["state"], "merged");
  EXPECT_EQ(get_mr(iid)["state"], "merged");
  EXPECT_EQ(stats()["merges"]["config/changes!" + std::to_string(iid)], 1);
  // The rule fired once: another MR closes normally.
  auto other = open_mr("change/late-merge-2", "Late merge 2");
  EXPECT_EQ(json::parse(call("PUT", mr_path(other["iid"]), {{"state_event", "close"}}).body)["state"], "closed");
}

TEST_F(SimulatorTest, NeedsRebaseThenRebaseThenMerge) {
  add_fault({{"kind", "merge_needs_rebase"}, {"match", "Rebase me"}, {"count", 1}});
  auto mr = open_mr("change/rebase", "Rebase me");
  int iid = mr["iid"];
  ASSERT_TRUE(wait_until([&] { return mergeable(iid); }, 5s));
  auto refused = call("PUT", mr_path(iid, "/merge"), {{"sha", mr["sha"]}});
  EXPECT_EQ(refused.status, 422);
  EXPECT_EQ(get_mr(iid)["detailed_merge_status"], "need_rebase");

  auto rebase = call("PUT", mr_path(iid, "/rebase"));
  EXPECT_EQ(rebase.status, 202);
  EXPECT_EQ(json::parse(rebase.body)["rebase_in_progress"], true);
  ASSERT_TRUE(wait_until([&] { return get_mr(iid)["rebase_in_progress"] == false; }, 5s));
  auto after = get_mr(iid);
  EXPECT_TRUE(after["merge_error"].is_null());
  EXPECT_NE(after["sha"], mr["sha"]);  // the rebase moved the head and started a new pipeline
  ASSERT_TRUE(wait_until([&] { return mergeable(iid); }, 5s));
  EXPECT_EQ(json::parse(call("GET", mr_path(iid, "/pipelines")).body).size(), 2u);
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", get_mr(iid)["sha"]}}).status, 200);
}

// head_moves: the read that finds the pipeline passed is answered as it was, then the head moves;
// an approve or merge with the sha that read showed is refused with 409, and the new head gets its
// own pipeline. Reads while the pipeline still runs leave the rule armed.
TEST_F(SimulatorTest, HeadMovesRightAfterTheReadThatFoundThePipelinePassed) {
  add_fault({{"kind", "head_moves"}, {"match", "Moving head"}, {"count", 1}});
  auto mr = open_mr("change/moving", "Moving head");
  int iid = mr["iid"];
  EXPECT_EQ(get_mr(iid)["head_pipeline"]["status"], "running");
  EXPECT_EQ(get_mr(iid)["sha"], mr["sha"]) << "a read of a running pipeline does not move the head";
  json ready;
  ASSERT_TRUE(wait_until(
      [&] {
        ready = get_mr(iid);
        return ready["head_pipeline"]["status"] == "success";
      },
      5s));
  EXPECT_EQ(ready["sha"], mr["sha"]) << "the read is answered before the head moves";
  EXPECT_EQ(stats()["faults_fired"].value("head_moves", 0), 1);
  auto approve = call("POST", mr_path(iid, "/approve"), {{"sha", ready["sha"]}}, "approver-1-token");
  EXPECT_EQ(approve.status, 409) << approve.body;
  auto moved = get_mr(iid);
  EXPECT_NE(moved["sha"], ready["sha"]);
  EXPECT_EQ(moved["head_pipeline"]["sha"], moved["sha"]);
  EXPECT_EQ(call("POST", mr_path(iid, "/approve"), {{"sha", moved["sha"]}}, "approver-1-token").status, 201);
  ASSERT_TRUE(wait_until([&] { return mergeable(iid); }, 5s));
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", ready["sha"]}}).status, 409);
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", moved["sha"]}}).status, 200);
  // The request log keeps the head pipeline each MR read answered with.
  auto log = json::parse(call("GET", "/_sim/requests", nullptr, "").body)["requests"];
  std::vector<std::string> reads;
  for (const auto& e : log) {
    if (e["endpoint"] == "get_mr" && e["iid"] == iid) reads.push_back(e["headPipeline"]);
  }
  ASSERT_GE(reads.size(), 4u);
  EXPECT_EQ(reads[0], "running");
  EXPECT_EQ(reads.back(), "success");
}

TEST_F(SimulatorTest, RebaseConflictAndFailedPipelineAreReported) {
  add_fault(json::array(
      {{{"kind", "rebase_conflict"}, {"match", "Conflicted"}}, {{"kind", "pipeline_fail"}, {"match", "Broken"}}}));
  auto conflicted = open_mr("change/conflict", "Conflicted");
  int iid = conflicted["iid"];
  EXPECT_EQ(call("PUT", mr_path(iid, "/rebase")).status, 202);
  ASSERT_TRUE(wait_until([&] { return get_mr(iid)["rebase_in_progress"] == false; }, 5s));
  EXPECT_EQ(get_mr(iid)["merge_error"], "Rebase failed. Please rebase locally");
  EXPECT_EQ(get_mr(iid)["detailed_merge_status"], "conflict");
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", get_mr(iid)["sha"]}}).status, 422);

  auto broken = open_mr("change/broken", "Broken");
  int broken_iid = broken["iid"];
  ASSERT_TRUE(wait_until([&] { return get_mr(broken_iid)["head_pipeline"]["status"] == "failed"; }, 5s));
  EXPECT_EQ(get_mr(broken_iid)["detailed_merge_status"], "ci_must_pass");
}

// PUT replaces the rule set: the kept rule still fires, the dropped one no longer does.
TEST_F(SimulatorTest, PutFaultsReplacesTheWholeSet) {
  add_fault({{"kind", "pipeline_fail"}, {"match", "Kept"}});
  add_fault({{"kind", "pipeline_fail"}, {"match", "Dropped"}});
  auto put = call("PUT", "/_sim/faults", json::array({{{"kind", "pipeline_fail"}, {"match", "Kept"}}}), "");
  ASSERT_EQ(put.status, 200) << put.body;
  ASSERT_EQ(json::parse(put.body)["faults"].size(), 1u) << put.body;

  int kept = open_mr("change/kept", "Kept")["iid"];
  int dropped = open_mr("change/dropped", "Dropped")["iid"];
  auto settled = [&](int iid) {
    auto s = get_mr(iid)["head_pipeline"]["status"];
    return s == "failed" || s == "success";
  };
  ASSERT_TRUE(wait_until([&] { return settled(kept) && settled(dropped); }, 5s));
  EXPECT_EQ(get_mr(kept)["head_pipeline"]["status"], "failed");
  EXPECT_EQ(get_mr(dropped)["head_pipeline"]["status"], "success");
  EXPECT_EQ(call("PUT", "/_sim/faults", json::array({{{"kind", "no_such_kind"}}}), "").status, 400);
  EXPECT_EQ(json::parse(call("GET", "/_sim/faults", nullptr, "").body)["faults"].size(), 1u)
      << "a refused PUT leaves the set as it was";
}

TEST_F(SimulatorTest, SecondApprovalBySameUserIs401) {
  auto mr = open_mr("change/approve", "Approve me");
  int iid = mr["iid"];
  EXPECT_EQ(call("POST", mr_path(iid, "/approve"), json::object(), "approver-1-token").status, 201);
  EXPECT_EQ(call("POST", mr_path(iid, "/approve"), json::object(), "approver-1-token").status, 401);
  auto approvals = json::parse(call("GET", mr_path(iid, "/approvals"), nullptr, "approver-1-token").body);
  EXPECT_EQ(approvals["approved_by"][0]["user"]["id"], 101);
}

// The attempt counters see what the outcome counters cannot: a refused approve, a merge of a merged
// MR, a second MR for a branch that has one open. Each refusal below leaves `approvals` and `merges`
// unchanged while `attempts` grows.
TEST_F(SimulatorTest, AttemptsCountEveryMutatingRequestIncludingRefusedOnes) {
  auto mr = open_mr("change/attempts", "Attempts");
  int iid = mr["iid"];
  const std::string key = "config/changes!" + std::to_string(iid);
  const std::string branch = "config/changes:change/attempts";
  EXPECT_EQ(call("POST", mr_path(iid, "/approve"), json::object(), "approver-1-token").status, 201);
  EXPECT_EQ(call("POST", mr_path(iid, "/approve"), json::object(), "approver-1-token").status, 401);
  add_fault({{"kind", "status"}, {"endpoint", "approve"}, {"status", 503}, {"count", 1}});
  EXPECT_EQ(call("POST", mr_path(iid, "/approve"), json::object(), "approver-2-token").status, 503);
  EXPECT_EQ(call("POST", "/api/v4/projects/config%2Fchanges/merge_requests",
                 {{"source_branch", "change/attempts"}, {"target_branch", "main"}, {"title", "Again"}})
                .status,
            409);
  ASSERT_TRUE(wait_until([&] { return mergeable(iid); }, 5s));
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", mr["sha"]}}).status, 200);
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", mr["sha"]}}).status, 405);
  EXPECT_EQ(call("PUT", mr_path(iid), {{"state_event", "close"}}).status, 200);  // ignored: merged
  json submit = {{"requestId", "op-attempts"}, {"title", "T"}, {"callbackUrl", receiver.url("/cb")}};
  EXPECT_EQ(call("POST", "/api/approvals", submit, "").status, 201);
  EXPECT_EQ(call("POST", "/api/approvals", submit, "").status, 200);

  auto s = stats();
  auto a = s["attempts"];
  EXPECT_EQ(s["approvals"][key], json({{"101", 1}}));  // outcomes: one approval took effect
  EXPECT_EQ(a["approve"][key], json({{"101", 2}, {"102", 1}}));
  EXPECT_EQ(a["approve_after_approved"][key], json({{"101", 1}}));
  EXPECT_EQ(s["merges"][key], 1);
  EXPECT_EQ(a["merge"][key], 2);
  EXPECT_EQ(a["merge_after_merged"][key], 1);
  EXPECT_EQ(a["close"][key], 1);
  EXPECT_EQ(a["create_commit"][branch], 1);
  EXPECT_EQ(a["create_mr"][branch], 2);
  EXPECT_EQ(a["create_mr_while_open"][branch], 1);
  EXPECT_EQ(a["approval_submit"]["op-attempts"], 2);
}

TEST_F(SimulatorTest, ApprovalIsDeduplicatedAndCalledBackSigned) {
  json submit = {{"requestId", "op-approve"}, {"title", "Change A"},
                 {"applicant", "alice"},      {"callbackUrl", receiver.url("/api/v1/callbacks/approval")},
                 {"form", {{"k", "v"}}},      {"ext", {{"mrId", "7"}}}};
  auto first = call("POST", "/api/approvals", submit, "");
  ASSERT_EQ(first.status, 201) << first.body;
  auto again = call("POST", "/api/approvals", submit, "");
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(json::parse(again.body)["approvalId"], json::parse(first.body)["approvalId"]);

  ASSERT_TRUE(wait_until([&] { return receiver.count() == 1; }, 5s));
  auto cb = receiver.received().front();
  EXPECT_EQ(cb.header("x-signature").value_or(""), "sha256=" + ids::hmac_sha256_hex("approval-secret", cb.body));
  auto payload = json::parse(cb.body);
  EXPECT_EQ(payload["result"], "APPROVED");
  EXPECT_EQ(payload["operationId"], "op-approve");
  EXPECT_EQ(payload["approvalId"], json::parse(first.body)["approvalId"]);
  EXPECT_EQ(payload["ext"]["mrId"], "7");
  EXPECT_TRUE(ids::is_uuid(payload["callbackId"].get<std::string>()));
}

TEST_F(SimulatorTest, RejectMarkerDuplicateAndReorderFaults) {
  add_fault(json::array({{{"kind", "approval_callback"}, {"mode", "duplicate"}, {"match", "op-dup"}},
                         {{"kind", "approval_callback"}, {"mode", "reorder"}, {"match", "op-reorder"}}}));
  auto url = receiver.url("/cb");
  ASSERT_EQ(
      call("POST", "/api/approvals", {{"requestId", "op-reject"}, {"title", "Bad [reject]"}, {"callbackUrl", url}}, "")
          .status,
      201);
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 1; }, 5s));
  EXPECT_EQ(json::parse(receiver.received()[0].body)["result"], "REJECTED");

  ASSERT_EQ(call("POST", "/api/approvals", {{"requestId", "op-dup"}, {"title", "T"}, {"callbackUrl", url}}, "").status,
            201);
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 3; }, 5s));
  auto r = receiver.received();
  EXPECT_EQ(json::parse(r[1].body)["callbackId"], json::parse(r[2].body)["callbackId"]);  // same delivery twice

  ASSERT_EQ(
      call("POST", "/api/approvals", {{"requestId", "op-reorder"}, {"title", "T"}, {"callbackUrl", url}}, "").status,
      201);
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 5; }, 5s));
  r = receiver.received();
  EXPECT_EQ(json::parse(r[3].body)["result"], "REJECTED");
  EXPECT_EQ(json::parse(r[4].body)["result"], "APPROVED");
  // The sender counts a delivery once it has read the answer, which may be after the receiver saw it.
  EXPECT_TRUE(wait_until([&] { return stats()["callbacks"].value("approval_sent", 0) == 5; }, 5s))
      << stats()["callbacks"].dump();
}

TEST_F(SimulatorTest, ConcurrentDuplicatesSendTheSameDeliveryFromSeveralThreads) {
  add_fault(json::array({{{"kind", "approval_callback"},
                          {"mode", "duplicate"},
                          {"copies", 4},
                          {"concurrent", true},
                          {"match", "op-burst"}},
                         {{"kind", "deploy_callback"},
                          {"mode", "duplicate"},
                          {"copies", 3},
                          {"concurrent", true},
                          {"gap_ms", 5},
                          {"match", "Burst deploy"}}}));
  ASSERT_EQ(call("POST", "/api/approvals",
                 {{"requestId", "op-burst"}, {"title", "T"}, {"callbackUrl", receiver.url("/cb")}}, "")
                .status,
            201);
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 4; }, 5s));
  std::set<std::string> ids;
  for (const auto& r : receiver.received()) ids.insert(json::parse(r.body)["callbackId"].get<std::string>());
  EXPECT_EQ(ids.size(), 1u) << "four copies of one delivery";

  auto mr = open_mr("change/burst", "Burst deploy");
  int iid = mr["iid"];
  ASSERT_TRUE(wait_until([&] { return mergeable(iid); }, 5s));
  ASSERT_EQ(call("PUT", mr_path(iid, "/merge"), {{"sha", mr["sha"]}}).status, 200);
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 7; }, 5s));
  std::set<std::string> deliveries;
  for (const auto& r : receiver.received()) {
    if (r.path == "/api/v1/callbacks/deploy") deliveries.insert(json::parse(r.body)["deliveryId"].get<std::string>());
  }
  EXPECT_EQ(deliveries.size(), 1u);
  json sent;
  EXPECT_TRUE(wait_sent(4, 3, sent)) << sent.dump();
  EXPECT_EQ(sent["approval_concurrent_bursts"], 1);
  EXPECT_EQ(sent["deploy_concurrent_bursts"], 1);
}

TEST_F(SimulatorTest, WithdrawSendsWithdrawnCallback) {
  sim::sim_options slow;
  slow.callback_delay = 60s;  // the decision never comes during the test
  sim::simulator s(slow);
  s.start();
  auto submitted = http_call("127.0.0.1", s.port(), "POST", "/api/approvals",
                             json{{"requestId", "op-w"}, {"title", "T"}, {"callbackUrl", receiver.url("/cb")}}.dump());
  ASSERT_EQ(submitted.status, 201);
  std::string id = json::parse(submitted.body)["approvalId"];
  EXPECT_EQ(http_call("127.0.0.1", s.port(), "POST", "/api/approvals/" + id + "/withdraw").status, 200);
  EXPECT_EQ(http_call("127.0.0.1", s.port(), "POST", "/api/approvals/" + id + "/withdraw").status, 200);
  ASSERT_TRUE(wait_until([&] { return receiver.count() == 1; }, 5s));
  EXPECT_EQ(json::parse(receiver.received()[0].body)["result"], "WITHDRAWN");
  s.stop();
}

TEST_F(SimulatorTest, LostResponseClosesTheConnectionAfterTheActionTookEffect) {
  auto mr = open_mr("change/lost", "Lost");
  int iid = mr["iid"];
  add_fault({{"kind", "lose_response"}, {"endpoint", "approve"}, {"count", 1}});
  auto lost = call("POST", mr_path(iid, "/approve"), json::object(), "approver-2-token");
  EXPECT_EQ(lost.status, 0);  // no response at all
  auto approvals = json::parse(call("GET", mr_path(iid, "/approvals")).body);
  EXPECT_EQ(approvals["approved_by"][0]["user"]["id"], 102);
}

TEST_F(SimulatorTest, ResetForgetsEverything) {
  open_mr("change/reset", "Reset");
  add_fault({{"kind", "status"}, {"status", 500}});
  EXPECT_EQ(call("POST", "/_sim/reset", json::object(), "").status, 200);
  EXPECT_EQ(call("GET", mr_path(1)).status, 404);
  EXPECT_TRUE(stats()["merges"].empty());
}

namespace {
std::string decoded(const json& file) {
  return changeflow::base64::decode(file["content"].get<std::string>()).value_or("<not base64>");
}
}  // namespace

// The repository files API and the Commits API's file rules, as GitLab has them: content per
// branch, 404 for a missing file, create of an existing file and update of a missing one refused,
// an update whose last_commit_id is not the file's last commit refused (nothing written), and a
// merge carrying the source's files onto the target.
TEST_F(SimulatorTest, FilesFollowGitLabsContract) {
  const std::string files = "/api/v4/projects/config%2Fchanges/repository/files/";
  const std::string commits = "/api/v4/projects/config%2Fchanges/repository/commits";
  auto commit = [&](const std::string& branch, const std::string& start, const json& action) {
    json body = {{"branch", branch}, {"commit_message", "c"}, {"actions", json::array({action})}};
    if (!start.empty()) body["start_branch"] = start;
    return call("POST", commits, body);
  };
  EXPECT_EQ(call("GET", files + "conf%2Fa.yaml?ref=main").status, 404);
  EXPECT_EQ(call("GET", files + "conf%2Fa.yaml").status, 400) << "ref is required";
  auto created = commit("main", "", {{"action", "create"}, {"file_path", "conf/a.yaml"}, {"content", "v: 1\n"}});
  ASSERT_EQ(created.status, 201) << created.body;
  auto c1 = json::parse(created.body)["id"].get<std::string>();
  auto f = json::parse(call("GET", files + "conf%2Fa.yaml?ref=main").body);
  EXPECT_EQ(decoded(f), "v: 1\n");
  EXPECT_EQ(f["last_commit_id"], c1);
  EXPECT_EQ(f["encoding"], "base64");

  auto exists = commit("main", "", {{"action", "create"}, {"file_path", "conf/a.yaml"}, {"content", "x"}});
  EXPECT_EQ(exists.status, 400);
  EXPECT_NE(exists.body.find("A file with this name already exists"), std::string::npos) << exists.body;
  auto missing = commit("main", "", {{"action", "update"}, {"file_path", "conf/none.yaml"}, {"content", "x"}});
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.body.find("doesn't exist"), std::string::npos) << missing.body;

  // A branch forked at c1 updates the file with its base; main moves meanwhile.
  auto on_branch =
      commit("feature/x", "main",
             {{"action", "update"}, {"file_path", "conf/a.yaml"}, {"content", "v: 2\n"}, {"last_commit_id", c1}});
  ASSERT_EQ(on_branch.status, 201) << on_branch.body;
  auto moved = commit(
      "main", "", {{"action", "update"}, {"file_path", "conf/a.yaml"}, {"content", "v: 3\n"}, {"last_commit_id", c1}});
  ASSERT_EQ(moved.status, 201) << moved.body;
  auto stale = commit(
      "main", "", {{"action", "update"}, {"file_path", "conf/a.yaml"}, {"content", "v: 4\n"}, {"last_commit_id", c1}});
  EXPECT_EQ(stale.status, 400);
  EXPECT_NE(stale.body.find("You are attempting to update a file that has changed since you started editing it."),
            std::string::npos)
      << stale.body;
  EXPECT_EQ(decoded(json::parse(call("GET", files + "conf%2Fa.yaml?ref=main").body)), "v: 3\n");
  // The old version stays readable at its commit.
  EXPECT_EQ(decoded(json::parse(call("GET", files + "conf%2Fa.yaml?ref=" + c1).body)), "v: 1\n");

  // Both sides changed the file since the fork: the MR conflicts and cannot be merged.
  auto mr = call("POST", "/api/v4/projects/config%2Fchanges/merge_requests",
                 {{"source_branch", "feature/x"}, {"target_branch", "main"}, {"title", "x"}});
  ASSERT_EQ(mr.status, 201) << mr.body;
  int iid = json::parse(mr.body)["iid"];
  EXPECT_EQ(get_mr(iid)["diff_refs"]["base_sha"], c1);
  changeflow::testing::wait_until([&] { return get_mr(iid)["detailed_merge_status"] != "checking"; },
                                  std::chrono::seconds(5));
  EXPECT_EQ(get_mr(iid)["detailed_merge_status"], "conflict");
  EXPECT_EQ(call("PUT", mr_path(iid, "/merge"), json::object()).status, 422);

  // A branch changing another file merges, and its content lands on main.
  auto other = commit("feature/y", "main", {{"action", "create"}, {"file_path", "conf/b.yaml"}, {"content", "b\n"}});
  ASSERT_EQ(other.status, 201) << other.body;
  auto mr2 = json::parse(call("POST", "/api/v4/projects/config%2Fchanges/merge_requests",
                              {{"source_branch", "feature/y"}, {"target_branch", "main"}, {"title", "y"}})
                             .body);
  int iid2 = mr2["iid"];
  changeflow::testing::wait_until([&] { return mergeable(iid2); }, std::chrono::seconds(5));
  ASSERT_EQ(call("PUT", mr_path(iid2, "/merge"), json::object()).status, 200);
  auto b = json::parse(call("GET", files + "conf%2Fb.yaml?ref=main").body);
  EXPECT_EQ(decoded(b), "b\n");
  EXPECT_EQ(b["last_commit_id"], json::parse(other.body)["id"]);
  EXPECT_EQ(decoded(json::parse(call("GET", files + "conf%2Fa.yaml?ref=main").body)), "v: 3\n");
}
