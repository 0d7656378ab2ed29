// Reconciliation against a real MariaDB: the watermark inference, the sliding window,
// exact deploy matching by MR number, and the validated counter when the callback path and the
// reconciler race on the same operations with real threads.

#include "actors/reconciler.hpp"

#include "persistence/operation_sql.hpp"
#include "persistence/reconcile_repo.hpp"
#include "persistence/repo_test_support.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

#include <cppconn/statement.h>

#include <gtest/gtest.h>

#include <optional>

#include <atomic>
#include <barrier>
#include <future>
#include <thread>

using namespace changeflow;
using namespace changeflow::persistence;
using namespace std::chrono_literals;
using changeflow::actors::validation_path;
using changeflow::testing::test_database;
using test::new_op;
using test::S;
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

namespace {
deploy_callback_in success_naming(const std::string& delivery, std::int64_t mr, const std::string& id) {
  deploy_callback_in cb;
  cb.delivery_id = delivery;
  cb.project = project;
  cb.mr_iid = mr;
  cb.status = "success";
  cb.operation_ids_json = "[\"" + id + "\"]";
  return cb;
}
std::int64_t commits(sql::Connection& c) {
  std::unique_ptr<sql::Statement> st(c.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SHOW SESSION STATUS LIKE 'Com_commit'"));
  rs->next();
  return rs->getInt64(2);
}
}  // namespace

// A success naming its one change: the delivery's two rows, the flip and the ledger's outcome with
// its link to the change commit together, once; a copy writes nothing; the outcome follows where
// the change stood.
TEST(DeploySettlement, ASuccessNamingItsChangeIsRecordedAppliedAndClassifiedInOneCommit) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "dee", "a", {}, project);
  std::int64_t merged_at = 0;
  {
    std::optional<operation_row> merged_row;
    const auto merged_version = walk(*c, id, test::to_merged, 41, workflow::actor_kind::workflow, &merged_row);
    merged_at = merged_version;
    // No report came before MERGED: the row says so, and its writer runs no check.
    ASSERT_TRUE(merged_row);
    EXPECT_FALSE(merged_row->deploy_reported);
    EXPECT_FALSE(actors::deploy_check_needed(&*merged_row, merged_version));
    EXPECT_TRUE(actors::deploy_check_needed(nullptr, merged_version)) << "without the row the writer must check";
  }
  const auto before = commits(*c);
  auto r = record_and_settle_deploy(*c, success_naming("p-41", 41, id), "{}", id);
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(commits(*c) - before, 1);
  EXPECT_EQ(r.value.recorded, record_outcome::inserted);
  EXPECT_TRUE(r.value.validated);
  EXPECT_EQ(r.value.outcome, deploy_outcome::APPLIED);
  EXPECT_EQ(phase_of(db, id), "VALIDATED");
  // The row as the flip left it came back in the same round trip (for the change's status readers).
  ASSERT_TRUE(r.value.row);
  EXPECT_EQ(r.value.row->phase, workflow::phase::VALIDATED);
  // A MERGED writer handed this row (its write and this report shared a group commit, the report
  // after it) has no check left to make, although the row is past the version it wrote.
  EXPECT_FALSE(actors::deploy_check_needed(&*r.value.row, merged_at));
  EXPECT_EQ(std::to_string(r.value.row->version),
            db.scalar("SELECT version FROM operation WHERE operation_id = '" + id + "'"));
  EXPECT_EQ(db.scalar("SELECT step FROM operation WHERE operation_id = '" + id + "'"),
            std::to_string(workflow::code_of(workflow::step::CALLED_BACK)));
  EXPECT_EQ(db.scalar("SELECT CONCAT(actor, '|', cause) FROM operation_event WHERE operation_id = '" + id +
                      "' ORDER BY id DESC LIMIT 1"),
            "callback|validated via callback");
  EXPECT_EQ(db.scalar("SELECT CONCAT(outcome, '|', applied_at IS NOT NULL) FROM callback_ledger "
                      "WHERE delivery_id = 'deploy:p-41'"),
            "APPLIED|1");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM callback_operation o JOIN callback_ledger l ON l.id = o.ledger_id "
                      "WHERE l.delivery_id = 'deploy:p-41' AND o.operation_id = '" +
                      id + "'"),
            "1");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM deploy_callback WHERE delivery_id = 'p-41' AND mr_iid = 41"), "1");

  const auto events = db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + id + "'");
  auto copy = record_and_settle_deploy(*c, success_naming("p-41", 41, id), "{}", id);
  ASSERT_TRUE(copy.ok()) << copy.error.message;
  EXPECT_EQ(copy.value.recorded, record_outcome::duplicate);
  EXPECT_FALSE(copy.value.validated);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + id + "'"), events);

  // Already validated: stale, and linked to the change all the same.
  auto late = record_and_settle_deploy(*c, success_naming("p-41-rerun", 41, id), "{}", id);
  ASSERT_TRUE(late.ok()) << late.error.message;
  EXPECT_EQ(late.value.outcome, deploy_outcome::IGNORED_STALE);
  EXPECT_FALSE(late.value.row) << "a delivery that moved nothing hands back no row";
  EXPECT_FALSE(late.value.validated);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM callback_operation WHERE operation_id = '" + id + "'"), "2");

  // Overtook our own MERGED write: out of order, then applied by that writer right after it.
  auto early = new_op(*c, "dee", "b", {}, project);
  walk(*c, early, test::to_merging, 42);
  auto ooo = record_and_settle_deploy(*c, success_naming("p-42", 42, early), "{}", early);
  ASSERT_TRUE(ooo.ok()) << ooo.error.message;
  EXPECT_EQ(ooo.value.outcome, deploy_outcome::OUT_OF_ORDER);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:p-42'"), "OUT_OF_ORDER");
  EXPECT_EQ(phase_of(db, early), "MERGING");
  metrics::registry m;
  std::optional<operation_row> merged_row;
  const auto merged_version = walk(*c, early, {S::HANDLE_MERGED}, 42, workflow::actor_kind::workflow, &merged_row);
  ASSERT_TRUE(merged_row);
  EXPECT_TRUE(merged_row->deploy_reported) << "the early report is not marked on the row MERGED committed";
  EXPECT_TRUE(actors::deploy_check_needed(&*merged_row, merged_version));
  auto applied = actors::validate_if_already_deployed(*c, early, 42, project, m, merged_version);
  ASSERT_TRUE(applied.ok()) << applied.error.message;
  EXPECT_TRUE(applied.value);
  EXPECT_EQ(phase_of(db, early), "VALIDATED");
  EXPECT_EQ(validated(m, "callback"), 1);
  // The version guard: a writer that does not hold the version it names changes nothing.
  auto again = actors::validate_if_already_deployed(*c, early, 42, project, m, merged_version);
  ASSERT_TRUE(again.ok()) << again.error.message;
  EXPECT_FALSE(again.value);
  EXPECT_EQ(validated(m, "callback"), 1);

  // No such change: recorded, left PENDING for the general path.
  auto unknown = record_and_settle_deploy(*c, success_naming("p-43", 43, "00000000-0000-4000-8000-00000000dead"), "{}",
                                          "00000000-0000-4000-8000-00000000dead");
  ASSERT_TRUE(unknown.ok()) << unknown.error.message;
  EXPECT_EQ(unknown.value.recorded, record_outcome::inserted);
  EXPECT_FALSE(unknown.value.outcome);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:p-43'"), "PENDING");
}

// The deploy callback and the writer of MERGED race on real threads, change after change: every
// change ends VALIDATED, by exactly one of them (the window the next test holds open is hit here
// only by chance).
TEST(DeploySettlement, RacingTheMergedWriterValidatesEveryChangeExactlyOnce) {
  test_database db;
  auto setup = db.connect();
  constexpr int changes = 60;
  std::vector<std::string> ids;
  for (int i = 0; i < changes; ++i) {
    ids.push_back(new_op(*setup, "racer", "t" + std::to_string(i), {}, project));
    walk(*setup, ids.back(),
         {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_APPROVED, S::HANDLE_MERGING}, 500 + i);
  }
  metrics::registry m;
  std::atomic<int> by_callback{0}, errors{0};
  std::barrier start(2);
  std::thread writer([&] {
    auto conn = db.connect();
    start.arrive_and_wait();
    for (int i = 0; i < changes; ++i) {
      const auto v = walk(*conn, ids[i], {S::HANDLE_MERGED}, 500 + i);
      auto r = actors::validate_if_already_deployed(*conn, ids[i], 500 + i, project, m, v);
      if (!r.ok()) {
        ADD_FAILURE() << "the MERGED writer's check: " << r.error.code << " " << r.error.message;
        ++errors;
      }
    }
  });
  std::thread callback([&] {
    auto conn = db.connect();
    start.arrive_and_wait();
    for (int i = 0; i < changes; ++i) {
      auto r =
          record_and_settle_deploy(*conn, success_naming("race-" + std::to_string(i), 500 + i, ids[i]), "{}", ids[i]);
      if (!r.ok()) {
        ADD_FAILURE() << "the callback: " << r.error.code << " " << r.error.message;
        ++errors;
      }
      if (r.ok() && r.value.validated) ++by_callback;
    }
  });
  writer.join();
  callback.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE subject_id = 'racer' AND phase = 'VALIDATED'"),
            std::to_string(changes));
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event e JOIN operation o ON o.operation_id = e.operation_id "
                      "WHERE o.subject_id = 'racer' AND e.to_phase = 'VALIDATED'"),
            std::to_string(changes));
  EXPECT_EQ(by_callback.load() + static_cast<int>(validated(m, "callback")), changes);
}

// The general path of a delivery (a failure, several or no named changes) marks the changes it
// names before it decides anything from their phase: one not yet MERGED carries the mark into its
// MERGED write; an ended one is left alone, and no marked row looks updated.
TEST(DeploySettlement, AReportTakenTheGeneralWayIsMarkedOnChangesNotYetMergedOnly) {
  test_database db;
  auto c = db.connect();
  auto merging = new_op(*c, "gen", "a", {}, project);
  walk(*c, merging, test::to_merging, 51);
  auto ended = new_op(*c, "gen", "b", {}, project);
  walk(*c, ended, {S::APPROVAL_SENT, S::APPROVAL_REJECTED});
  const auto updated = [&](const std::string& id) {
    return db.scalar("SELECT updated_at FROM operation WHERE operation_id = '" + id + "'");
  };
  const auto merging_updated = updated(merging);
  ASSERT_TRUE(mark_deploy_reported(*c, {merging, ended}).ok());
  EXPECT_EQ(db.scalar("SELECT deploy_reported FROM operation WHERE operation_id = '" + merging + "'"), "1");
  EXPECT_EQ(db.scalar("SELECT deploy_reported FROM operation WHERE operation_id = '" + ended + "'"), "0");
  EXPECT_EQ(updated(merging), merging_updated) << "the mark moved updated_at";
  std::optional<operation_row> merged_row;
  const auto v = walk(*c, merging, {S::HANDLE_MERGED}, 51, workflow::actor_kind::workflow, &merged_row);
  ASSERT_TRUE(merged_row);
  EXPECT_TRUE(actors::deploy_check_needed(&*merged_row, v));
}

// The callback's unit is held open after its flip found the change not yet MERGED (its ledger row
// waits behind another connection's uncommitted row with the same key). The MERGED writer must
// wait for the unit's commit: were the row not locked until then, MERGED would commit, the writer's
// check would miss the uncommitted delivery, the unit would commit OUT_OF_ORDER, and the change
// would sit MERGED until reconciliation.
TEST(DeploySettlement, TheMergedWriterWaitsForACallbackUnitInProgressAndThenValidates) {
  test_database db;
  auto setup = db.connect();
  auto id = new_op(*setup, "held", "a", {}, project);
  walk(*setup, id, test::to_merging, 77);
  auto blocker = db.connect();
  blocker->setAutoCommit(false);
  std::unique_ptr<sql::Statement> st(blocker->createStatement());
  st->execute(
      "INSERT INTO callback_ledger (delivery_id, kind, outcome) VALUES ('deploy:held-77', 'deploy', 'PENDING')");
  auto callback_conn = db.connect();
  const auto callback_id = test::connection_id(*callback_conn);
  auto callback = std::async(std::launch::async, [&] {
    return record_and_settle_deploy(*callback_conn, success_naming("held-77", 77, id), "{}", id);
  });
  auto waiting_on_ledger = [&] {
    return db.scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + std::to_string(callback_id) +
                     " AND INFO LIKE 'INSERT INTO callback_ledger%'") == "1";
  };
  ASSERT_TRUE(changeflow::testing::wait_until(waiting_on_ledger, 10s)) << "the callback's unit never got that far";
  metrics::registry m;
  auto writer_conn = db.connect();
  const auto writer_id = test::connection_id(*writer_conn);
  std::optional<operation_row> merged_row;
  auto writer = std::async(std::launch::async, [&] {
    const auto v = walk(*writer_conn, id, {S::HANDLE_MERGED}, 77, workflow::actor_kind::workflow, &merged_row);
    // The row the MERGED write committed carries the report's mark: the writer checks.
    EXPECT_TRUE(actors::deploy_check_needed(merged_row ? &*merged_row : nullptr, v));
    return actors::validate_if_already_deployed(*writer_conn, id, 77, project, m, v);
  });
  EXPECT_TRUE(changeflow::testing::wait_until(
      [&] {
        return db.scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + std::to_string(writer_id) +
                         " AND INFO LIKE '" + persistence::detail::update_operation_by_key + "step%'") == "1";
      },
      10s))
      << "the MERGED write did not wait for the callback's unit";
  blocker->rollback();
  auto settled = callback.get();
  ASSERT_TRUE(settled.ok()) << settled.error.message;
  EXPECT_EQ(settled.value.outcome, deploy_outcome::OUT_OF_ORDER);
  auto checked = writer.get();
  ASSERT_TRUE(checked.ok()) << checked.error.message;
  EXPECT_TRUE(checked.value) << "the writer's check missed the delivery";
  EXPECT_EQ(phase_of(db, id), "VALIDATED");
}
