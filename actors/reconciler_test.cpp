// Reconciliation against a real MariaDB: the watermark inference, the sliding window,
// exact deploy matching by MR number, and the validated counter when the callback path and the
// reconciler race on the same operations with real threads.

#include "actors/reconciler.hpp"

#include "persistence/reconcile_repo.hpp"
#include "persistence/repo_test_support.hpp"
#include "tests/support/test_db.hpp"

#include <gtest/gtest.h>

#include <optional>

#include <atomic>
#include <barrier>
#include <thread>

using namespace changeflow;
using namespace changeflow::persistence;
using changeflow::actors::validation_path;
using changeflow::testing::test_database;
using test::new_op;
using test::walk;

namespace {
constexpr const char* project = "config/changes";

void deploy(persistence::session c, std::int64_t mr, const std::string& status = "success",
            const std::string& proj = project, std::optional<std::string> operation_ids_json = std::nullopt) {
  deploy_callback_in cb;
  cb.delivery_id = "d-" + proj + "-" + std::to_string(mr) + "-" + status + operation_ids_json.value_or("");
  cb.project = proj;
  cb.mr_iid = mr;
  cb.status = status;
  cb.operation_ids_json = operation_ids_json;
  auto r = record_deploy_delivery(c, cb, "{}");
  ASSERT_TRUE(r.ok()) << r.error.message;
  ASSERT_EQ(r.value, record_outcome::inserted);
}

actors::reconcile_settings settings(int min_age, int max_age = 3600) {
  actors::reconcile_settings s;
  s.min_age_s = min_age;
  s.max_age_s = max_age;
  s.projects = {project};
  return s;
}

std::string phase_of(test_database& db, const std::string& id) {
  return db.scalar("SELECT phase FROM binding WHERE operation_id = '" + id + "'");
}

double validated(metrics::registry& m, const char* via) {
  return m.counter_value("changeflow_validated_total", {{"via", via}});
}
}  // namespace

TEST(ReconcilePlan, WatermarkDecidesEachCandidate) {
  std::vector<merged_candidate> c = {{"a", 5}, {"b", 7}, {"c", 9}};
  auto none = actors::plan_reconciliation(c, std::nullopt);
  EXPECT_TRUE(none.validate.empty());  // nothing called back yet: nothing can be inferred
  EXPECT_EQ(none.wait.size(), 3u);
  auto p = actors::plan_reconciliation(c, 7);
  EXPECT_EQ(p.validate, (std::vector<std::string>{"a", "b"}));  // below (lost) and equal (own callback)
  EXPECT_EQ(p.wait, (std::vector<std::string>{"c"}));
}

TEST(Reconciler, ValidatesOnlyBelowTheProjectWatermarkAndInsideTheWindow) {
  test_database db;
  auto c = db.connect();
  metrics::registry m;
  auto lost = new_op(*c, "ann", "a", {}, project);
  walk(*c, lost, test::to_merged, 5);
  auto own = new_op(*c, "ann", "b", {}, project);
  walk(*c, own, test::to_merged, 6);
  auto later = new_op(*c, "ann", "c", {}, project);
  walk(*c, later, test::to_merged, 8);
  auto too_old = new_op(*c, "ann", "d", {}, project);
  walk(*c, too_old, test::to_merged, 4);
  db.exec("UPDATE operation SET updated_at = NOW(3) - INTERVAL 2 HOUR WHERE operation_id = '" + too_old + "'");

  // No successful callback yet: everything waits.
  auto r0 = actors::run_reconciliation(*c, settings(0), m, "manual");
  ASSERT_TRUE(r0.ok) << r0.error;
  EXPECT_EQ(r0.scanned, 3);
  EXPECT_EQ(r0.waiting, 3);
  EXPECT_FALSE(r0.watermark);

  // A failed deploy and another project's success do not move this project's watermark.
  deploy(*c, 6, "success");
  deploy(*c, 9, "failed");
  deploy(*c, 100, "success", "other/project");

  // Inside min_age: too young to call lost, nothing happens even though the watermark covers them.
  auto young = actors::run_reconciliation(*c, settings(600), m, "manual");
  ASSERT_TRUE(young.ok) << young.error;
  EXPECT_EQ(young.scanned, 0);
  EXPECT_EQ(phase_of(db, lost), "MERGED");

  db.exec(
      "UPDATE operation SET updated_at = NOW(3) - INTERVAL 20 SECOND WHERE phase = 'MERGED' "
      "AND operation_id <> '" +
      too_old + "'");
  auto r = actors::run_reconciliation(*c, settings(10), m, "manual");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.watermark, 6);
  EXPECT_EQ(r.scanned, 3);
  EXPECT_EQ(r.validated, 2);  // 5 (lost: a later MR was deployed) and 6 (its own callback)
  EXPECT_EQ(r.waiting, 1);    // 8: above the watermark
  EXPECT_EQ(phase_of(db, lost), "VALIDATED");
  EXPECT_EQ(phase_of(db, own), "VALIDATED");
  EXPECT_EQ(phase_of(db, later), "MERGED");
  EXPECT_EQ(phase_of(db, too_old), "MERGED");  // outside max_age
  EXPECT_EQ(validated(m, "reconciliation"), 2);
  EXPECT_EQ(db.scalar("SELECT actor FROM operation_event WHERE operation_id = '" + lost + "' ORDER BY id DESC LIMIT 1"),
            "reconciler");

  // A second run finds nothing more to flip and counts nothing more.
  auto again = actors::run_reconciliation(*c, settings(10), m, "manual");
  EXPECT_EQ(again.validated, 0);
  EXPECT_EQ(validated(m, "reconciliation"), 2);
}

TEST(DeployDelivery, RecordsBothRowsOnceAndMatchesOperationsByMr) {
  test_database db;
  auto c = db.connect();
  auto a = new_op(*c, "bo", "a", {}, project);
  walk(*c, a, test::to_merged, 12);
  auto b = new_op(*c, "bo", "b", {}, project);  // not merged yet, same batch MR
  walk(*c, b, {test::S::APPROVAL_SENT, test::S::APPROVAL_APPROVED, test::S::HANDLE_STARTED}, 12);

  deploy_callback_in cb;
  cb.delivery_id = "pipeline-77";
  cb.project = project;
  cb.mr_iid = 12;
  cb.status = "success";
  auto first = record_deploy_delivery(*c, cb, R"({"mrIid":12})");
  ASSERT_TRUE(first.ok()) << first.error.message;
  EXPECT_EQ(first.value, record_outcome::inserted);
  auto second = record_deploy_delivery(*c, cb, R"({"mrIid":12})");
  ASSERT_TRUE(second.ok());
  // Recorded but never classified (its process died before applying it): the redelivery must apply it.
  EXPECT_EQ(second.value, record_outcome::duplicate_unapplied);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM deploy_callback"), "1");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM callback_ledger WHERE kind = 'deploy'"), "1");
  ASSERT_TRUE(set_deploy_outcome(*c, "pipeline-77", deploy_outcome::APPLIED).ok());
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:pipeline-77'"), "APPLIED");
  EXPECT_EQ(record_deploy_delivery(*c, cb, R"({"mrIid":12})").value, record_outcome::duplicate);
  // The first classification stays: a later one (a re-application) does not overwrite it.
  ASSERT_TRUE(set_deploy_outcome(*c, "pipeline-77", deploy_outcome::IGNORED_STALE).ok());
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:pipeline-77'"), "APPLIED");

  auto ops = operations_for_mr(*c, project, 12);
  ASSERT_TRUE(ops.ok());
  ASSERT_EQ(ops.value.size(), 2u);
  EXPECT_EQ(ops.value[0].operation_id, a);
  EXPECT_EQ(ops.value[0].binding_phase, workflow::phase::MERGED);
  EXPECT_EQ(ops.value[1].binding_phase, workflow::phase::MERGING);
  EXPECT_TRUE(operations_for_mr(*c, project, 13).value.empty());
  EXPECT_EQ(deploy_watermark(*c, project).value, 12);
  EXPECT_FALSE(deploy_watermark(*c, "nobody").value);
}

// The callback path and the reconciler race on the same operations, round after round, on real
// threads with their own connections: the validated counter (both labels together) equals the
// number of operations, and each operation flipped exactly once.
TEST(Reconciler, CallbackAndReconciliationRaceCountOncePerOperation) {
  test_database db;
  auto setup = db.connect();
  metrics::registry m;
  constexpr int rounds = 6;
  constexpr int per_round = 30;
  int total = 0;
  deploy(*setup, 1'000'000);  // watermark above every MR: the reconciler covers all of them
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> ids;
    for (int i = 0; i < per_round; ++i) {
      ids.push_back(new_op(*setup, "race" + std::to_string(round), "t" + std::to_string(i), {}, project));
      walk(*setup, ids.back(), test::to_merged, 1000 + round * per_round + i);
    }
    total += per_round;
    std::atomic<int> errors{0};
    std::barrier start(2);
    std::thread callback_path([&] {
      auto conn = db.connect();
      start.arrive_and_wait();
      // Newest first while the reconciler goes oldest first: they meet in the middle every round.
      for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
        if (!actors::validate_and_count(*conn, *it, validation_path::callback, m).ok()) ++errors;
      }
    });
    std::thread reconciler_path([&] {
      auto conn = db.connect();
      start.arrive_and_wait();
      // The whole reconciliation run (both queries, then mark_validated per covered row).
      auto r = actors::run_reconciliation(*conn, settings(0), m, "timer");
      if (!r.ok || r.failed != 0) ++errors;
    });
    callback_path.join();
    reconciler_path.join();
    EXPECT_EQ(errors.load(), 0) << "round " << round;
    ASSERT_EQ(validated(m, "callback") + validated(m, "reconciliation"), total) << "round " << round;
  }
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE phase = 'VALIDATED'"), std::to_string(total));
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE to_phase = 'VALIDATED'"), std::to_string(total));
}

// A deploy callback that overtook our MERGED write is applied by the writer right after it.
TEST(Reconciler, ValidateIfAlreadyDeployedAppliesAnOvertakingCallback) {
  test_database db;
  auto c = db.connect();
  metrics::registry m;
  auto id = new_op(*c, "cy", "a", {}, project);
  walk(*c, id, test::to_merged, 31);
  auto before = actors::validate_if_already_deployed(*c, id, 31, project, m);
  ASSERT_TRUE(before.ok()) << before.error.message;
  EXPECT_FALSE(before.value);  // no callback yet: stays MERGED
  EXPECT_EQ(phase_of(db, id), "MERGED");
  deploy(*c, 31, "success", "other/project");
  EXPECT_FALSE(actors::validate_if_already_deployed(*c, id, 31, project, m).value);
  EXPECT_EQ(phase_of(db, id), "MERGED");
  // A failure and a success recorded for the MR (a re-run deploy pipeline): the success wins.
  deploy(*c, 31, "failed");
  deploy(*c, 31, "success");
  EXPECT_TRUE(actors::validate_if_already_deployed(*c, id, 31, project, m).value);
  EXPECT_EQ(phase_of(db, id), "VALIDATED");
  EXPECT_EQ(validated(m, "callback"), 1);

  // MR iids repeat (a recreated project, a restarted simulator on the same database): a recorded
  // deploy that names other operations never validates this one; one that names it does.
  auto repeat = new_op(*c, "cy", "c");
  walk(*c, repeat, test::to_merged, 31);
  EXPECT_FALSE(actors::validate_if_already_deployed(*c, repeat, 31, project, m).value)
      << "the earlier deploy of MR !31 named no operation, but it was recorded before this change merged";
  deploy(*c, 31, "success", project, R"(["00000000-0000-4000-8000-00000000beef"])");
  deploy(*c, 31, "failed", project, R"(["00000000-0000-4000-8000-00000000beef"])");
  EXPECT_FALSE(actors::validate_if_already_deployed(*c, repeat, 31, project, m).value);
  EXPECT_EQ(phase_of(db, repeat), "MERGED");
  deploy(*c, 31, "success", project, "[\"" + repeat + "\"]");
  EXPECT_TRUE(actors::validate_if_already_deployed(*c, repeat, 31, project, m).value);
  EXPECT_EQ(phase_of(db, repeat), "VALIDATED");
  EXPECT_EQ(validated(m, "callback"), 2);

  // Only a failure recorded: the operation is a failed deploy, not "keep waiting".
  auto failed = new_op(*c, "cy", "b", {}, project);
  walk(*c, failed, test::to_merged, 32);
  deploy(*c, 32, "failed");
  EXPECT_FALSE(actors::validate_if_already_deployed(*c, failed, 32, project, m).value);
  EXPECT_EQ(phase_of(db, failed), "HANDLE_FAILED");
  EXPECT_EQ(db.scalar("SELECT step FROM operation WHERE operation_id = '" + failed + "'"),
            std::to_string(workflow::code_of(workflow::step::DEPLOY_FAILED)));
  EXPECT_EQ(validated(m, "callback"), 2);
}
