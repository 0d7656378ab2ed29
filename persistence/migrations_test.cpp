#include "persistence/migrations.hpp"

#include "persistence/operation_repo.hpp"

#include "tests/support/test_db.hpp"

#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

using namespace changeflow;
using changeflow::testing::test_database;

namespace {
/// This connection's count of rows read in a scan (not through an index) since it opened.
long scanned_rows(sql::Connection& conn) {
  std::unique_ptr<sql::Statement> st(conn.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SHOW SESSION STATUS LIKE 'Handler_read_rnd_next'"));
  return rs->next() ? std::stol(rs->getString(2)) : -1;
}

void add_change(sql::Connection& conn, const std::string& id, const std::string& target) {
  persistence::new_operation op;
  op.operation_id = id;
  op.subject_id = "mig";
  op.target_key = target;
  op.repository = "group/project";
  op.target_branch = "main";
  ASSERT_EQ(persistence::create_operation(conn, op).value, persistence::create_outcome::created);
}

/// The names of a table's indexes, in the server's order, comma-separated.
std::string index_names(const test_database& db, const std::string& table) {
  return db.scalar(
      "SELECT GROUP_CONCAT(DISTINCT INDEX_NAME ORDER BY INDEX_NAME) FROM information_schema.STATISTICS "
      "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" +
      table + "'");
}

/// The project's migrations older than `version`: the schema a database had before it.
std::vector<persistence::migration> migrations_before(int version) {
  std::vector<persistence::migration> before;
  for (const auto& m : persistence::all_migrations()) {
    if (m.version < version) before.push_back(m);
  }
  return before;
}
}  // namespace

TEST(Migrations, ApplyInOrderOnceAndAreIdempotent) {
  test_database db(false);
  auto conn = db.connect();
  std::vector<persistence::migration> ms = {
      {2, "second", {"INSERT INTO t (v) VALUES ('second')"}},
      {1,
       "first",
       {"CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(16))", "INSERT INTO t (v) VALUES ('first')"}},
  };
  auto r = persistence::migrate(*conn, ms);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.applied, (std::vector<int>{1, 2}));
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(v ORDER BY id) FROM t"), "first,second");

  auto again = persistence::migrate(*conn, ms);
  ASSERT_TRUE(again.ok) << again.error;
  EXPECT_TRUE(again.applied.empty());
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM t"), "2");
  EXPECT_EQ(persistence::current_schema_version(*conn).value, 2);
}

TEST(Migrations, FailingMigrationStopsAndIsNotRecorded) {
  test_database db(false);
  auto conn = db.connect();
  std::vector<persistence::migration> ms = {
      {1, "ok", {"CREATE TABLE a (id INT PRIMARY KEY)"}},
      {2, "broken", {"CREATE TABLE b (id INT PRIMARY KEY)", "THIS IS NOT SQL"}},
      {3, "never", {"CREATE TABLE c (id INT PRIMARY KEY)"}},
  };
  auto r = persistence::migrate(*conn, ms);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("migration 2 (broken) statement 2"), std::string::npos) << r.error;
  EXPECT_EQ(persistence::current_schema_version(*conn).value, 1);
  EXPECT_EQ(
      db.scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'c'"),
      "0");
}

TEST(Migrations, DuplicateVersionRefused) {
  test_database db(false);
  auto conn = db.connect();
  auto r = persistence::migrate(*conn, {{1, "a", {"DO 1"}}, {1, "b", {"DO 1"}}});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("declared twice"), std::string::npos);
}

TEST(Migrations, ProjectMigrationsApplyOnEmptyDatabase) {
  test_database db(false);
  auto conn = db.connect();
  auto r = persistence::migrate(*conn, persistence::all_migrations());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(persistence::current_schema_version(*conn).value, persistence::all_migrations().back().version);
}

TEST(Migrations, TwoMigratorsAtOnceApplyEachMigrationOnce) {
  // The lock is a row (schema_migration_lock), so it holds across the nodes of a cluster too. Two
  // migrators on two connections: each statement ran once (a second CREATE TABLE would fail).
  test_database db(false);
  std::vector<persistence::migration> ms = {
      {1, "table", {"CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(16))"}},
      {2, "row", {"INSERT INTO t (v) VALUES ('once')", "DO SLEEP(0.3)"}},
  };
  persistence::migrate_result first, second;
  std::thread other([&] {
    auto c = db.connect();
    second = persistence::migrate(*c, ms);
  });
  {
    auto c = db.connect();
    first = persistence::migrate(*c, ms);
  }
  other.join();
  ASSERT_TRUE(first.ok) << first.error;
  ASSERT_TRUE(second.ok) << second.error;
  EXPECT_EQ(first.applied.size() + second.applied.size(), 2u);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM t"), "1");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM schema_migration_lock"), "0") << "the holder released it";
}

TEST(Migrations, ALockLeftByADeadHolderIsTakenOverOnceItExpires) {
  test_database db(false);
  auto conn = db.connect();
  ASSERT_TRUE(persistence::migrate(*conn, {}).ok);  // creates the lock table
  db.exec(
      "INSERT INTO schema_migration_lock (name, holder, expires_at) VALUES ('migrations', 'crashed-instance', NOW(3) - "
      "INTERVAL 1 SECOND)");
  auto r = persistence::migrate(*conn, {{1, "after", {"CREATE TABLE t2 (id INT PRIMARY KEY)"}}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.applied, (std::vector<int>{1}));
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM schema_migration_lock WHERE holder = 'crashed-instance'"), "0");
}

// Migration 17 marks the changes in flight whose deploy report was recorded before the mark existed,
// so their MERGED writer still checks the reports (an ended change, or one whose MR has no report,
// stays unmarked).
TEST(Migrations, ReportsRecordedBeforeTheMarkExistedAreMarkedOnChangesInFlight) {
  test_database db(false);
  auto conn = db.connect();
  ASSERT_TRUE(persistence::migrate(*conn, migrations_before(17)).ok);
  const auto change = [&](const std::string& id, const std::string& target, const std::string& phase, int mr) {
    add_change(*conn, id, target);
    db.exec("UPDATE operation SET phase = '" + phase + "', mr_iid = " + std::to_string(mr) + " WHERE operation_id = '" +
            id + "'");
  };
  change("00000000-0000-4000-8000-000000000001", "a", "MERGING", 7);
  change("00000000-0000-4000-8000-000000000002", "b", "VALIDATED", 7);
  change("00000000-0000-4000-8000-000000000003", "c", "MERGING", 8);
  db.exec(
      "INSERT INTO deploy_callback (delivery_id, project, mr_iid, status) VALUES ('early', 'group/project', 7, "
      "'success')");
  auto r = persistence::migrate(*conn, persistence::all_migrations());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(deploy_reported ORDER BY operation_id) FROM operation"), "1,0,0");
}

// Migration 18: every phase change of an operation moves its binding's phase, so each index on the
// binding is written about six times per change. Only the indexes its lookups use are kept: the
// relationship (submit, re-apply) and the operation (callbacks, reconciliation).
TEST(Migrations, TheBindingKeepsOnlyTheIndexesItsLookupsUse) {
  test_database db(false);
  auto conn = db.connect();
  ASSERT_TRUE(persistence::migrate(*conn, persistence::all_migrations()).ok);
  EXPECT_EQ(index_names(db, "binding"), "PRIMARY,uk_binding_operation,uk_binding_relationship");
}

// Migration 22: the reconciliation's deploy watermark is read from the end of one index range,
// however many successful reports the table holds (with only (status, mr_iid) the server read them all).
TEST(Migrations, TheDeployWatermarkIsOneIndexDive) {
  test_database db(false);
  auto conn = db.connect();
  ASSERT_TRUE(persistence::migrate(*conn, persistence::all_migrations()).ok);
  for (int i = 1; i <= 50; ++i) {
    db.exec("INSERT INTO deploy_callback (delivery_id, project, mr_iid, status) VALUES ('d" + std::to_string(i) +
            "', '" + (i % 2 ? "group/project" : "group/other") + "', " + std::to_string(i) + ", 'success')");
  }
  db.exec("ANALYZE TABLE deploy_callback");
  const auto plan = db.query(
      "EXPLAIN SELECT MAX(mr_iid) AS m FROM deploy_callback WHERE status = 'success' AND project = 'group/project'");
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].back(), "Select tables optimized away");
  EXPECT_EQ(index_names(db, "deploy_callback"),
            "idx_deploy_mr,idx_deploy_project_status_mr,PRIMARY,uk_deploy_delivery");
}

// The start-up assignment of rows from before migration 7 reads nothing but one index entry once
// every operation has its repository; while one has none, it assigns every table, the operations last.
TEST(Migrations, TheStartUpAssignmentOfRepositoriesReadsNoTableWholeOnceItIsDone) {
  test_database db(false);
  auto conn = db.connect();
  ASSERT_TRUE(persistence::migrate(*conn, persistence::all_migrations()).ok);
  add_change(*conn, "00000000-0000-4000-8000-000000000001", "a");
  add_change(*conn, "00000000-0000-4000-8000-000000000002", "b");

  // Reading the counter scans SHOW's own rows: what two reads in a row add is the baseline.
  const long first = scanned_rows(*conn);
  const long baseline = scanned_rows(*conn) - first;
  const long before = scanned_rows(*conn);
  auto none = persistence::adopt_rows_without_repository(*conn, "group/project", "main");
  ASSERT_TRUE(none.ok()) << none.error.message;
  EXPECT_EQ(none.value, 0);
  EXPECT_EQ(scanned_rows(*conn) - before, baseline) << "no table was scanned";

  // A change from before repositories existed: its rows carry none.
  db.exec("UPDATE operation SET repository = '', target_branch = '' WHERE target_key = 'b'");
  db.exec("UPDATE binding SET repository = '' WHERE target_key = 'b'");
  db.exec("UPDATE binding_history SET repository = '' WHERE target_key = 'b'");
  // Times the assignment must leave as they are: when a binding last moved, when a batch settled.
  add_change(*conn, "00000000-0000-4000-8000-000000000004", "c");
  db.exec("UPDATE binding SET repository = '', updated_at = '2026-01-02 03:04:05.678' WHERE target_key = 'c'");
  db.exec(
      "INSERT INTO merge_batch (status, repository, target_branch, created_at, updated_at) VALUES "
      "(2, '', '', '2026-01-02 03:04:00.000', '2026-01-02 03:04:05.678')");
  // A later change of the same subject and target, in the repository the old one is assigned to: its
  // binding holds the relationship the old binding would take, which the old one then keeps unassigned.
  persistence::new_operation later;
  later.operation_id = "00000000-0000-4000-8000-000000000003";
  later.subject_id = "mig";
  later.target_key = "b";
  later.repository = "group/legacy";
  later.target_branch = "trunk";
  ASSERT_EQ(persistence::create_operation(*conn, later).value, persistence::create_outcome::created);
  auto one = persistence::adopt_rows_without_repository(*conn, "group/legacy", "trunk");
  ASSERT_TRUE(one.ok()) << one.error.message;
  EXPECT_EQ(one.value, 1);
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(DISTINCT CONCAT(repository, ' ', target_branch)) FROM operation WHERE "
                      "target_key = 'b'"),
            "group/legacy trunk");
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(repository ORDER BY operation_id) FROM binding WHERE target_key = 'b'"),
            ",group/legacy");
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(DISTINCT repository) FROM binding_history WHERE target_key = 'b'"),
            "group/legacy");
  EXPECT_EQ(db.scalar("SELECT repository FROM binding WHERE target_key = 'a'"), "group/project");
  EXPECT_EQ(db.scalar("SELECT CONCAT(repository, ' ', target_branch, ' ', updated_at) FROM merge_batch"),
            "group/legacy trunk 2026-01-02 03:04:05.678");
  EXPECT_EQ(db.scalar("SELECT CONCAT(repository, ' ', updated_at) FROM binding WHERE target_key = 'c'"),
            "group/legacy 2026-01-02 03:04:05.678");
}

// Migration 22: a binding that an earlier version's assignment left without a repository after it
// had assigned its operation (those passes did the operations first) takes its operation's.
TEST(Migrations, BindingsLeftBehindByAnEarlierAssignmentTakeTheirOperationsRepository) {
  test_database db(false);
  auto conn = db.connect();
  ASSERT_TRUE(persistence::migrate(*conn, migrations_before(22)).ok);
  add_change(*conn, "00000000-0000-4000-8000-000000000001", "a");
  db.exec("UPDATE binding SET repository = '', updated_at = '2026-01-02 03:04:05.678'");
  db.exec("UPDATE binding_history SET repository = ''");
  ASSERT_TRUE(persistence::migrate(*conn, persistence::all_migrations()).ok);
  EXPECT_EQ(db.scalar("SELECT repository FROM binding"), "group/project");
  EXPECT_EQ(db.scalar("SELECT updated_at FROM binding"), "2026-01-02 03:04:05.678")
      << "the assignment moved the binding's last change to the migration's time";
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(DISTINCT repository) FROM binding_history"), "group/project");
}
