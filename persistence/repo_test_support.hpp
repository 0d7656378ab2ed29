#pragma once
// Shared helpers of the persistence tests: create an operation and walk it along allowed edges, and
// line racing connections up behind a lock so a race provably overlaps.

#include "base/ids.hpp"
#include "persistence/operation_repo.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"
#include "workflow/batch_decide.hpp"

#include <cppconn/connection.h>
#include <cppconn/exception.h>
#include <cppconn/prepared_statement.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace changeflow::persistence::test {

/// A new change's fields (a fresh id), not yet created.
inline new_operation new_operation_for(const std::string& subject, const std::string& target,
                                       const std::string& requester = {}, const std::string& repository = {}) {
  new_operation op;
  op.requester = requester;
  op.repository = repository;
  op.target_branch = repository.empty() ? std::string() : "main";
  op.operation_id = ids::new_uuid();
  op.subject_id = subject;
  op.target_key = target;
  op.title = "change " + target;
  op.payload_json = R"({"files":[{"path":"a.yaml"}]})";
  op.owner_instance = "test-instance";
  return op;
}

/// Every field of two rows, one expectation each (a row handed back must be the row stored).
inline void expect_same_row(const operation_row& got, const operation_row& stored) {
  EXPECT_EQ(got.operation_id, stored.operation_id);
  EXPECT_EQ(got.subject_id, stored.subject_id);
  EXPECT_EQ(got.target_key, stored.target_key);
  EXPECT_EQ(got.flow, stored.flow);
  EXPECT_EQ(got.step, stored.step);
  EXPECT_EQ(got.phase, stored.phase);
  EXPECT_EQ(got.version, stored.version);
  EXPECT_EQ(got.title, stored.title);
  EXPECT_EQ(got.payload_json, stored.payload_json);
  EXPECT_EQ(got.mr_iid, stored.mr_iid);
  EXPECT_EQ(got.mr_url, stored.mr_url);
  EXPECT_EQ(got.approval_id, stored.approval_id);
  EXPECT_EQ(got.batch_id, stored.batch_id);
  EXPECT_EQ(got.attempts, stored.attempts);
  EXPECT_EQ(got.batch_attempts, stored.batch_attempts);
  EXPECT_EQ(got.next_wake_at_ms, stored.next_wake_at_ms);
  EXPECT_EQ(got.owner_instance, stored.owner_instance);
  EXPECT_EQ(got.lease_epoch, stored.lease_epoch);
  EXPECT_EQ(got.last_error, stored.last_error);
  EXPECT_EQ(got.last_error_status, stored.last_error_status);
  EXPECT_EQ(got.last_error_at_ms, stored.last_error_at_ms);
  EXPECT_EQ(got.deploy_reported, stored.deploy_reported);
  EXPECT_EQ(got.created_at_ms, stored.created_at_ms);
  EXPECT_EQ(got.updated_at_ms, stored.updated_at_ms);
  EXPECT_EQ(got.requester, stored.requester);
  EXPECT_EQ(got.repository, stored.repository);
  EXPECT_EQ(got.target_branch, stored.target_branch);
  EXPECT_EQ(got.revert_of, stored.revert_of);
  EXPECT_EQ(got.reverted_by, stored.reverted_by);
}

inline std::string new_op(session c, const std::string& subject, const std::string& target,
                          const std::string& requester = {}, const std::string& repository = {}) {
  auto op = new_operation_for(subject, target, requester, repository);
  auto r = create_operation(c, op);
  EXPECT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.value, create_outcome::created);
  return op.operation_id;
}

/// APPROVAL_SENDING -> APPROVAL_SENT guarded by `expected_version` (the group commit tests).
inline transition_request to_approval_sent(const std::string& id, std::int64_t expected_version) {
  transition_request t;
  t.operation_id = id;
  t.expected_version = expected_version;
  t.from = workflow::step::APPROVAL_SENDING;
  t.to = workflow::step::APPROVAL_SENT;
  t.cause = "approval submitted";
  t.approval_id = "AP-" + id.substr(0, 8);
  return t;
}

/// Walks the operation from its current step through `path`; returns the final version. With
/// `last_row`, the row the last step committed (read in its round trip, as the actors' writes do).
inline std::int64_t walk(session c, const std::string& id, std::initializer_list<workflow::step> path,
                         std::optional<std::int64_t> mr_iid = std::nullopt,
                         workflow::actor_kind by = workflow::actor_kind::workflow,
                         std::optional<operation_row>* last_row = nullptr) {
  auto row = load_operation(c, id);
  EXPECT_TRUE(row.ok());
  auto from = row.value.step;
  auto version = row.value.version;
  for (auto to : path) {
    transition_request t;
    t.operation_id = id;
    t.expected_version = version;
    t.from = from;
    t.to = to;
    t.cause = "test walk";
    t.mr_iid = mr_iid;
    t.by = by;
    auto r = transition(c, t, last_row);
    EXPECT_TRUE(r.ok()) << workflow::to_string(from) << " -> " << workflow::to_string(to) << ": " << r.error.message;
    version = r.value;
    from = to;
  }
  return version;
}

/// The pair an actor writes after the pipeline passed and the bots approved: CREATE_MR_OPENED ->
/// CREATE_SUCCEEDED (not written on its own) -> HANDLE_APPROVED, the first guarded by `opened`.
inline transition_request passed_and_approved(const std::string& id, std::int64_t opened) {
  auto passed = std::make_shared<transition_request>();
  passed->operation_id = id;
  passed->expected_version = opened;
  passed->from = workflow::step::CREATE_MR_OPENED;
  passed->to = workflow::step::CREATE_SUCCEEDED;
  passed->cause = "check pipeline passed";
  passed->clear_wake = true;
  transition_request t;
  t.operation_id = id;
  t.expected_version = opened + 1;
  t.from = workflow::step::CREATE_SUCCEEDED;
  t.to = workflow::step::HANDLE_APPROVED;
  t.cause = "approved by both bots";
  t.before = std::move(passed);
  return t;
}

using S = workflow::step;
inline constexpr std::initializer_list<workflow::step> to_merging = {
    S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_APPROVED, S::HANDLE_MERGING};
inline constexpr std::initializer_list<workflow::step> to_merged = {
    S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_APPROVED, S::HANDLE_MERGING, S::HANDLE_MERGED};

/// The server's id of a connection (information_schema.PROCESSLIST.ID).
inline std::int64_t connection_id(sql::Connection& c) {
  std::unique_ptr<sql::Statement> st(c.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT CONNECTION_ID()"));
  rs->next();
  return rs->getInt64(1);
}

/// One connection per racer. A test that holds a lock the racers' statement needs sees them all
/// waiting behind it (`all_waiting_in`) before it lets go, so the race provably overlaps however
/// fast or slow the machine is.
struct racer_connections {
  std::vector<std::unique_ptr<sql::Connection>> conns;
  std::string ids;  // "12, 13, 14": their server ids

  racer_connections(const changeflow::testing::test_database& db, int racers) {
    for (int i = 0; i < racers; ++i) {
      conns.push_back(db.connect());
      ids += (i ? ", " : "") + std::to_string(connection_id(*conns.back()));
    }
  }
  /// True once every racer runs a statement starting with `statement_prefix` (within 60 s).
  bool all_waiting_in(const changeflow::testing::test_database& db, const std::string& statement_prefix) const {
    return changeflow::testing::wait_until(
        [&] {
          return db.scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN (" + ids +
                           ") AND INFO LIKE '" + statement_prefix + "%'") == std::to_string(conns.size());
        },
        std::chrono::seconds(60));
  }
};

/// Seeds the batch waiting set with a row that has no operation behind it (the claim keeps such a
/// row claimable), so a test of the batch tables needs no operation. Live code admits only through
/// `transition` to BATCH_WAITING. True = inserted, false = already admitted (unique operation_id).
inline bool admit_bare(sql::Connection& c, const std::string& operation_id,
                       const workflow::batch::partition& where = {}) {
  std::unique_ptr<sql::PreparedStatement> st(
      c.prepareStatement("INSERT INTO merge_batch_request (operation_id, repository, target_branch, created_at) VALUES "
                         "(?, ?, ?, NOW(3))"));
  st->setString(1, operation_id);
  st->setString(2, where.repository);
  st->setString(3, where.target_branch);
  try {
    st->executeUpdate();
  } catch (const sql::SQLException& e) {
    if (e.getErrorCode() == 1062) return false;
    throw;
  }
  return true;
}

/// One application of a relationship, as binding_history records it (tests read the history; the
/// service never does).
struct binding_history_row {
  std::int64_t id = 0;
  std::string operation_id;
  std::string replaced_operation_id;  // "" on the first application
  std::string replaced_phase;
  std::int64_t applied_at_ms = 0;
};
/// Every application of a relationship, oldest first.
inline std::vector<binding_history_row> binding_history(sql::Connection& c, const std::string& subject_id,
                                                        const std::string& repository, const std::string& target_key) {
  std::unique_ptr<sql::PreparedStatement> st(c.prepareStatement(
      "SELECT id, operation_id, replaced_operation_id, replaced_phase, "
      "CAST(ROUND(UNIX_TIMESTAMP(applied_at) * 1000) AS SIGNED) AS applied_at_ms "
      "FROM binding_history WHERE subject_id = ? AND repository = ? AND target_key = ? ORDER BY id"));
  st->setString(1, subject_id);
  st->setString(2, repository);
  st->setString(3, target_key);
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery());
  std::vector<binding_history_row> out;
  while (rs->next()) {
    out.push_back(
        {rs->getInt64("id"), std::string(rs->getString("operation_id")),
         rs->isNull("replaced_operation_id") ? std::string() : std::string(rs->getString("replaced_operation_id")),
         rs->isNull("replaced_phase") ? std::string() : std::string(rs->getString("replaced_phase")),
         rs->getInt64("applied_at_ms")});
  }
  return out;
}

}  // namespace changeflow::persistence::test
