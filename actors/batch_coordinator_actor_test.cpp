// The batch coordinator in process, on CAF's deterministic test coordinator
// (actors/testing/in_process.hpp): the test decides when each message, blocking job and timer runs.
// The database is a real MariaDB; GitLab is changeflow-sim in this process, over loopback HTTP,
// whose `attempts` count every mutating request it received.

#include "actors/batch_coordinator.hpp"
#include "actors/testing/in_process.hpp"
#include "persistence/reconcile_repo.hpp"
#include "persistence/repo_test_support.hpp"
#include "sim/simulator.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/sim_attempts.hpp"

#include <gtest/gtest.h>
#include <caf/send.hpp>

using namespace changeflow;
using namespace changeflow::actors;
using persistence::batch_status;
using persistence::test::new_op;
using persistence::test::walk;
using S = workflow::step;

namespace {

/// The simulator starts before the actors' configuration is built: that names its address.
struct running_sim {
  running_sim() {
    sim::sim_options o;
    o.pipeline_duration = std::chrono::milliseconds(0);  // a pipeline has its verdict at the first read
    sim = std::make_unique<sim::simulator>(o);
    sim->start();
  }
  ~running_sim() { sim->stop(); }
  std::unique_ptr<sim::simulator> sim;
};

class batch_in_process : private running_sim, public actors::testing::in_process_actors {
 protected:
  batch_in_process()
      : in_process_actors({{"gitlab", {{"base_url", sim->base_url() + "/api/v4"}}},
                           {"approval", {{"max_retries", 0}}},
                           {"batch", {{"enabled", true}}}}) {}

  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      auto id = new_op(setup_db_, "ann", "t" + std::to_string(i));
      db_.exec("UPDATE operation SET payload = '{\"files\":[{\"path\":\"f" + std::to_string(i) +
               ".yaml\",\"content\":\"x\"}]}' WHERE operation_id = '" + id + "'");
      walk(setup_db_, id, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::BATCH_WAITING});
      members_.push_back(id);
    }
    // Claims take admissions older than the claim's read: age them instead of waiting.
    db_.exec("UPDATE merge_batch_request SET created_at = created_at - INTERVAL 1 SECOND");
    batch_coordinator_options options;
    options.scheduled_rounds = false;
    options.resume_on_start = false;
    coordinator_ = spawn_batch_coordinator(svc_, options);
    track(caf::actor_cast<caf::actor>(coordinator_));
  }

  void start_round() {
    caf::anon_send(coordinator_, batch_round_atom::value);
    run_messages();
  }

  nlohmann::json sim_stats() {
    auto r = changeflow::testing::http_call("127.0.0.1", sim->port(), "GET", "/_sim/stats", "", {});
    EXPECT_EQ(r.status, 200);
    return nlohmann::json::parse(r.body, nullptr, false);
  }

  void add_fault(const nlohmann::json& rule) {
    auto r = changeflow::testing::http_call("127.0.0.1", sim->port(), "POST", "/_sim/faults", rule.dump(), {});
    ASSERT_EQ(r.status, 200) << r.body;
  }

  std::string batch_status_name() { return db_.scalar("SELECT status FROM merge_batch ORDER BY id DESC LIMIT 1"); }

  void expect_every_member_merged_once() {
    for (const auto& id : members_) {
      auto row = persistence::load_operation(setup_db_, id);
      ASSERT_TRUE(row.ok());
      EXPECT_EQ(workflow::phase_of(row.value.step), workflow::phase::MERGED) << workflow::to_string(row.value.step);
    }
    auto stats = sim_stats();
    EXPECT_EQ(changeflow::testing::total_attempts(stats, "create_mr"), 1u) << "one MR for the whole batch";
    EXPECT_EQ(changeflow::testing::total_attempts(stats, "merge"), 1u) << stats["attempts"].dump();
    EXPECT_EQ(changeflow::testing::repeated_side_effects(stats), "");
  }

  batch_coordinator coordinator_;
  std::vector<std::string> members_;
};

}  // namespace

// A round claims the waiting members, carries them in one MR, polls it on a timer while GitLab
// fails the read, merges once, and settles every member in one write.
TEST_F(batch_in_process, ARoundMergesTheWaitingMembersThroughOneMrAndPollsOnItsTimer) {
  // The first read of the batch MR fails (503): the coordinator must wait for its poll timer.
  add_fault(
      {{"kind", "status"}, {"endpoint", "get_mr"}, {"status", 503}, {"count", 1}, {"match", "changeflow/batch-"}});
  start_round();
  settle();
  ASSERT_EQ(batch_status_name(), std::to_string(static_cast<int>(batch_status::RUNNING)));
  EXPECT_EQ(queued_db() + queued_external(), 0u) << "between polls nothing runs";
  ASSERT_TRUE(sched_.has_pending_timeout()) << "a failed read is retried on the poll timer";
  ASSERT_TRUE(fire_next_timer());
  settle();
  EXPECT_EQ(batch_status_name(), std::to_string(static_cast<int>(batch_status::SUCCEEDED)));
  expect_every_member_merged_once();
  EXPECT_EQ(metrics_.counter_value("changeflow_batch_rounds_total", {{"outcome", "claimed"}}), 1.0);
}

// A result for a drive that has ended is ignored, and a job that died mid-drive is answered as a
// failure, retried on the poll timer: the batch still merges exactly once.
TEST_F(batch_in_process, AStaleResultIsIgnoredAndALostJobIsRetried) {
  start_round();
  run_db();        // the claim
  run_external();  // the MR: branch, commit, open
  run_db();        // its record
  ASSERT_EQ(queued_external(), 1u) << "the coordinator reads its MR";
  // A settled result from another drive arrives: nothing may happen.
  batch_job_result stale;
  stale.what = batch_job_result::kind::settled;
  stale.drive = 999;
  stale.ok = true;
  caf::anon_send(coordinator_, stale);
  run_messages();
  EXPECT_EQ(batch_status_name(), std::to_string(static_cast<int>(batch_status::RUNNING)));
  // The read dies unrun.
  ASSERT_TRUE(external_pool_.drop_oldest());
  run_messages();
  EXPECT_EQ(queued_external(), 0u);
  ASSERT_TRUE(sched_.has_pending_timeout()) << "the lost read is retried on the poll timer";
  ASSERT_TRUE(fire_next_timer());
  settle();
  EXPECT_EQ(batch_status_name(), std::to_string(static_cast<int>(batch_status::SUCCEEDED)));
  expect_every_member_merged_once();
}

// The batch MR's deploy pipeline calls back before the settlement made its members MERGED (the
// coordinator that merged died, or was slow): the delivery is recorded and answered OUT_OF_ORDER.
// The settlement applies it to every member right after its commit, so none waits for
// reconciliation's minimum age.
TEST_F(batch_in_process, ASettlementAppliesADeployCallbackThatCameBeforeIt) {
  start_round();
  run_db();  // the claim
  const auto recorded_iid = [&] {
    return db_.scalar("SELECT COALESCE(MAX(mr_iid), 0) FROM merge_batch WHERE status = 1");
  };
  // The MR is opened (external) and recorded (database); stop before anything reads or merges it.
  for (int step = 0; step < 10 && recorded_iid() == "0"; ++step) {
    run_external();
    run_db();
  }
  const auto iid = std::stoll(recorded_iid());
  const auto project = db_.scalar("SELECT repository FROM merge_batch ORDER BY id DESC LIMIT 1");
  ASSERT_GT(iid, 0);
  persistence::deploy_callback_in cb;
  cb.delivery_id = "early-deploy-" + std::to_string(iid);
  cb.project = project;
  cb.mr_iid = iid;
  cb.status = "success";
  nlohmann::json ids = members_;
  cb.operation_ids_json = ids.dump();
  auto recorded = persistence::record_deploy_delivery(setup_db_, cb, "{}");
  ASSERT_TRUE(recorded.ok()) << recorded.error.message;
  for (const auto& id : members_) {
    auto row = persistence::load_operation(setup_db_, id);
    ASSERT_TRUE(row.ok());
    ASSERT_NE(row.value.phase, workflow::phase::MERGED) << "the delivery came before the settlement";
  }

  settle();  // merge, then the settlement
  EXPECT_EQ(batch_status_name(), std::to_string(static_cast<int>(batch_status::SUCCEEDED)));
  for (const auto& id : members_) {
    auto row = persistence::load_operation(setup_db_, id);
    ASSERT_TRUE(row.ok());
    EXPECT_EQ(row.value.phase, workflow::phase::VALIDATED) << id << " " << workflow::to_string(row.value.step);
  }
  EXPECT_EQ(metrics_.counter_value("changeflow_validated_total", {{"via", "callback"}}),
            static_cast<double>(members_.size()));
}
