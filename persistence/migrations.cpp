#include "persistence/migrations.hpp"

#include "base/ids.hpp"
#include "persistence/sql_util.hpp"

#include <cppconn/exception.h>
#include <cppconn/prepared_statement.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>

namespace changeflow::persistence {

// Migration 2: the core tables (operations, their events, bindings, batches, ledgers, idempotency
// records); `instance` is migration 1. Conventions: steps are stored as their INT code, phases and
// flows as their names; DATETIME(3) timestamps are written and compared with the database clock
// only; JSON columns hold caller-built documents.
std::vector<std::string> schema_v2();
// Migration 3: transitions in one statement (staging columns + BEFORE UPDATE trigger).
std::vector<std::string> schema_v3();
// Migration 4: owner and in-flight deadline of idempotency records, so dead requests' keys recover.
std::vector<std::string> schema_v4();
// Migration 5: per-member batch attempt counter (bounds the requeues of a failing batch).
std::vector<std::string> schema_v5();
// Migration 6: operation.requester, the verified identity that submitted the change.
std::vector<std::string> schema_v6();
// Migration 7: repository and target branch of every change; one batch slot per (repository, branch).
std::vector<std::string> schema_v7();
// Migration 9: notification subscriptions and the delivery outbox, written by a trigger on the timeline.
std::vector<std::string> schema_v9();
// Migration 10: creation writes its first event through the staging columns too (one timeline writer).
std::vector<std::string> schema_v10();
// Migration 11: a change and its revert name each other (operation.revert_of, operation.reverted_by).
std::vector<std::string> schema_v11();
// Migration 12: merge commit -> MR per project (a Deployment Hook names only the commit).
std::vector<std::string> schema_v12();
// Migration 13: failed attempts and the last external error per step (retries are durable).
std::vector<std::string> schema_v13();
// Migration 14: grouped transitions learn which of them landed (the group acknowledgement trigger).
std::vector<std::string> schema_v14();
// Migration 15: the instance whose coordinator drives an active batch (adoption and takeover).
std::vector<std::string> schema_v15();
// Migration 16: notifications written by the operation triggers (no nested trigger on the timeline).
std::vector<std::string> schema_v16();
// Migration 17: a deploy report that came before MERGED is marked on the change's row.
std::vector<std::string> schema_v17();
// Migration 18: the binding's phase index, which every phase change rewrote and no query read.
std::vector<std::string> schema_v18();
std::vector<std::string> schema_v19();
std::vector<std::string> schema_v20();
// Migration 21: a submission's creation as a stored procedure (one CALL in a group commit).
std::vector<std::string> schema_v21();
std::vector<std::string> schema_v22();

const std::vector<migration>& all_migrations() {
  static const std::vector<migration> migrations = {
      {1, "instance registry", {R"sql(
CREATE TABLE IF NOT EXISTS instance (
  instance_id   VARCHAR(128) NOT NULL,
  started_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  heartbeat_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  lease_until   DATETIME(3)  NOT NULL,
  epoch         BIGINT       NOT NULL DEFAULT 1,
  address       VARCHAR(255) NULL,
  status        VARCHAR(16)  NOT NULL DEFAULT 'RUNNING',
  PRIMARY KEY (instance_id),
  KEY idx_instance_lease (lease_until)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql"}},
      {2, "workflow, batch, callback, idempotency and audit tables", schema_v2()},
      {3, "transition event trigger", schema_v3()},
      {4, "idempotency record owner and in-flight deadline", schema_v4()},
      {5, "batch attempts per member", schema_v5()},
      {6, "operation requester", schema_v6()},
      {7, "repositories and per-branch batch slots", schema_v7()},
      {9, "notification subscriptions and delivery outbox", schema_v9()},
      {10, "creation event trigger: one timeline writer", schema_v10()},
      {11, "revert links", schema_v11()},
      {12, "merge commits of GitLab merge events", schema_v12()},
      {13, "failed attempts and last external error per step", schema_v13()},
      {14, "group commit acknowledgement trigger", schema_v14()},
      {15, "batch owner", schema_v15()},
      {16, "notifications from the operation triggers", schema_v16()},
      {17, "deploy reports that came before MERGED, marked on the row", schema_v17()},
      {18, "no phase index on the binding", schema_v18()},
      {19, "idempotency records name their change", schema_v19()},
      {20, "group commit receipts", schema_v20()},
      {21, "submission creation procedure", schema_v21()},
      {22, "reads that do not grow with the history", schema_v22()},
  };
  return migrations;
}

namespace {
void exec(sql::Connection& conn, const std::string& statement) {
  std::unique_ptr<sql::Statement> st(conn.createStatement());
  st->execute(statement);
}

std::set<int> applied_versions(sql::Connection& conn) {
  std::set<int> out;
  std::unique_ptr<sql::Statement> st(conn.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT version FROM schema_migrations"));
  while (rs->next()) out.insert(rs->getInt(1));
  return out;
}

/// The migration lock: one row of `schema_migration_lock`, taken by inserting it. GET_LOCK is local to
/// one server, so on a Galera cluster two instances starting on two nodes would both hold it; a row
/// insert is replicated and certified, so exactly one of two concurrent takers commits (the other
/// gets a duplicate key or, across nodes, a certification failure, and waits). A holder that died
/// leaves the row until `expires_at`; a taker removes an expired row and tries again.
struct migration_lock {
  static constexpr int hold_seconds = 300;  // longer than any migration here takes
  static constexpr int wait_seconds = hold_seconds + 60;

  sql::Connection& conn;
  std::string holder = ids::new_uuid();
  bool held = false;

  explicit migration_lock(sql::Connection& c) : conn(c) {
    exec(conn, R"sql(
CREATE TABLE IF NOT EXISTS schema_migration_lock (
  name       VARCHAR(64)  NOT NULL,
  holder     VARCHAR(64)  NOT NULL,
  expires_at DATETIME(3)  NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql");
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(wait_seconds);
    while (!(held = try_take()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the holder's migrations take seconds
    }
  }
  ~migration_lock() {
    if (!held) return;
    try {
      std::unique_ptr<sql::PreparedStatement> del(
          conn.prepareStatement("DELETE FROM schema_migration_lock WHERE name = 'migrations' AND holder = ?"));
      del->setString(1, holder);
      del->executeUpdate();
    } catch (...) {
    }
  }

  bool try_take() {
    try {
      exec(conn, "DELETE FROM schema_migration_lock WHERE name = 'migrations' AND expires_at < NOW(3)");
      std::unique_ptr<sql::PreparedStatement> ins(
          conn.prepareStatement("INSERT INTO schema_migration_lock (name, holder, expires_at) VALUES ('migrations', ?, "
                                "NOW(3) + INTERVAL " +
                                std::to_string(hold_seconds) + " SECOND)"));
      ins->setString(1, holder);
      ins->executeUpdate();
      return true;
    } catch (const sql::SQLException& e) {
      // Held by someone else (1062), or taken on another node at the same moment (1213).
      if (e.getErrorCode() == 1062 || e.getErrorCode() == 1213) return false;
      throw;
    }
  }
};
}  // namespace

db_result<int> current_schema_version(session s) {
  return detail::guarded<int>(s, [](sql::Connection& conn) -> db_result<int> {
    std::unique_ptr<sql::Statement> st(conn.createStatement());
    std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"));
    return db_result<int>::success(rs->next() ? rs->getInt(1) : 0);
  });
}

db_result<int> adopt_rows_without_repository(session s, const std::string& project, const std::string& target_branch) {
  return detail::guarded<int>(s, [&](sql::Connection& conn) -> db_result<int> {
    // Each statement is idempotent on its own (only '' rows match), so no transaction is needed: a
    // crash half-way leaves the rest for the next start-up. The operations go last, so an operation
    // still unassigned (one index read) is what says whether anything is left: the other tables have
    // no index on the column, and their UPDATEs would read every row at every start-up.
    std::unique_ptr<sql::Statement> probe(conn.createStatement());
    std::unique_ptr<sql::ResultSet> left(probe->executeQuery("SELECT 1 FROM operation WHERE repository = '' LIMIT 1"));
    if (!left->next()) return db_result<int>::success(0);
    // IGNORE: a row whose unique key (a binding's relationship, a batch's active slot) a later row
    // already holds in that repository stays unassigned instead of stopping the operations' turn.
    // The assignment names where a row belongs and changes nothing else: the `updated_at` of a
    // binding (when it last moved) and of a batch (when it settled) keep their times.
    for (const char* set :
         {"binding SET repository = ?, updated_at = updated_at", "binding_history SET repository = ?"}) {
      auto st = detail::prepare(conn, std::string("UPDATE IGNORE ") + set + " WHERE repository = ''");
      st->setString(1, project);
      st->executeUpdate();
    }
    for (const char* set : {"merge_batch SET repository = ?, target_branch = ?, updated_at = updated_at",
                            "merge_batch_request SET repository = ?, target_branch = ?"}) {
      auto st = detail::prepare(conn, std::string("UPDATE IGNORE ") + set + " WHERE repository = ''");
      st->setString(1, project);
      st->setString(2, target_branch);
      st->executeUpdate();
    }
    auto ops = detail::prepare(conn,
                               "UPDATE operation SET repository = ?, target_branch = ?, updated_at = updated_at "
                               "WHERE repository = ''");
    ops->setString(1, project);
    ops->setString(2, target_branch);
    return db_result<int>::success(ops->executeUpdate());
  });
}

migrate_result migrate(session s, const std::vector<migration>& migrations) {
  migrate_result result;
  std::vector<const migration*> ordered;
  for (const auto& m : migrations) ordered.push_back(&m);
  std::sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->version < b->version; });
  for (size_t i = 1; i < ordered.size(); ++i) {
    if (ordered[i]->version == ordered[i - 1]->version) {
      result.ok = false;
      result.error = "migration version " + std::to_string(ordered[i]->version) + " is declared twice";
      return result;
    }
  }
  sql::Connection* opened = nullptr;
  try {
    opened = &s.connection();
  } catch (const sql::SQLException& e) {
    result.ok = false;
    result.unreachable = true;
    result.code = e.getErrorCode();
    result.error = e.what();
    return result;
  }
  sql::Connection& conn = *opened;
  try {
    exec(conn, R"sql(
CREATE TABLE IF NOT EXISTS schema_migrations (
  version    INT          NOT NULL,
  name       VARCHAR(255) NOT NULL,
  applied_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql");
    migration_lock lock(conn);
    if (!lock.held) {
      result.ok = false;
      result.error = "could not take the migration lock (schema_migration_lock) within " +
                     std::to_string(migration_lock::wait_seconds) + " s";
      return result;
    }
    auto done = applied_versions(conn);
    for (const auto* m : ordered) {
      if (done.count(m->version)) continue;
      for (size_t s = 0; s < m->statements.size(); ++s) {
        try {
          exec(conn, m->statements[s]);
        } catch (const sql::SQLException& e) {
          result.ok = false;
          result.error = "migration " + std::to_string(m->version) + " (" + m->name + ") statement " +
                         std::to_string(s + 1) + " failed: " + e.what();
          return result;
        }
      }
      std::unique_ptr<sql::PreparedStatement> ins(
          conn.prepareStatement("INSERT INTO schema_migrations (version, name) VALUES (?, ?)"));
      ins->setInt(1, m->version);
      ins->setString(2, m->name);
      ins->executeUpdate();
      result.applied.push_back(m->version);
    }
  } catch (const sql::SQLException& e) {
    if (is_connection_lost_code(e.getErrorCode())) s.connection_lost();
    result.ok = false;
    result.error = std::string("migrations: ") + e.what();
  }
  return result;
}

}  // namespace changeflow::persistence
