#include "persistence/operation_repo.hpp"

#include "persistence/binding_repo.hpp"
#include "persistence/callback_repo.hpp"
#include "persistence/db_pool.hpp"
#include "persistence/instance_repo.hpp"
#include "persistence/operation_sql.hpp"
#include "persistence/repo_test_support.hpp"
#include "persistence/sql_util.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"
#include "workflow/decide.hpp"

#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>
#include <mysql_connection.h>

#include <atomic>
#include <barrier>
#include <future>
#include <thread>
#include <tuple>

using namespace changeflow;
using namespace changeflow::persistence;
using namespace std::chrono_literals;
using changeflow::testing::test_database;
using test::connection_id;
using test::new_op;
using test::walk;
using workflow::phase;
using S = workflow::step;

namespace {
std::string count_events(const test_database& db, const std::string& id) {
  return db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + id + "'");
}
std::int64_t session_status(sql::Connection& c, const std::string& name) {
  std::unique_ptr<sql::Statement> st(c.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SHOW SESSION STATUS LIKE '" + name + "'"));
  rs->next();
  return rs->getInt64(2);
}
std::int64_t session_questions(sql::Connection& c) {
  return session_status(c, "Questions");
}
}  // namespace

TEST(OperationRepo, CreateTransitionAndTimelineRoundTrip) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "alice", "repo/app.yaml");

  auto row = load_operation(*c, id);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row.value.step, S::APPROVAL_SENDING);
  EXPECT_EQ(row.value.phase, phase::APPROVAL_SENDING);
  EXPECT_EQ(row.value.version, 1);
  EXPECT_EQ(row.value.flow, "approve_then_create");
  EXPECT_EQ(row.value.payload_json.find("a.yaml") != std::string::npos, true);
  EXPECT_EQ(row.value.owner_instance, "test-instance");
  EXPECT_GT(row.value.created_at_ms, 1600000000000);

  transition_request t;
  t.operation_id = id;
  t.expected_version = 1;
  t.from = S::APPROVAL_SENDING;
  t.to = S::APPROVAL_SENT;
  t.cause = "approval submitted";
  t.approval_id = "AP-7";
  t.wake_in_ms = 60'000;
  t.attempts = 2;
  t.last_error = std::string(3000, 'x');
  auto v = transition(*c, t);
  ASSERT_TRUE(v.ok()) << v.error.message;
  EXPECT_EQ(v.value, 2);

  row = load_operation(*c, id);
  EXPECT_EQ(row.value.step, S::APPROVAL_SENT);
  EXPECT_EQ(row.value.phase, phase::APPROVAL_SENT);
  EXPECT_EQ(row.value.approval_id, "AP-7");
  EXPECT_EQ(row.value.attempts, 2);
  EXPECT_EQ(row.value.last_error->size(), 1024u);
  ASSERT_TRUE(row.value.next_wake_at_ms);
  // Wake time comes from the DB clock: about a minute after the row's own update time.
  EXPECT_NEAR(static_cast<double>(*row.value.next_wake_at_ms - row.value.updated_at_ms), 60'000.0, 1'000.0);

  auto b = find_binding(*c, "alice", "", "repo/app.yaml");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value.operation_id, id);
  EXPECT_EQ(b.value.phase, phase::APPROVAL_SENT);

  auto events = list_events(*c, id);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events.value.size(), 2u);
  EXPECT_FALSE(events.value[0].from_step);
  EXPECT_EQ(events.value[0].to_step, S::APPROVAL_SENDING);
  EXPECT_EQ(events.value[0].cause, "created");
  EXPECT_EQ(events.value[1].from_step, S::APPROVAL_SENDING);
  EXPECT_EQ(events.value[1].to_step, S::APPROVAL_SENT);
  EXPECT_EQ(events.value[1].to_phase, phase::APPROVAL_SENT);
  EXPECT_EQ(events.value[1].cause, "approval submitted");
  EXPECT_EQ(events.value[1].version, 2);

  auto many = load_operations(*c, {id, "missing"});
  ASSERT_TRUE(many.ok());
  ASSERT_EQ(many.value.size(), 1u);
  EXPECT_EQ(load_operation(*c, "missing").outcome, db_outcome::not_found);
  EXPECT_EQ(list_operations_by_subject(*c, "alice", 10).value.size(), 1u);
}

TEST(OperationRepo, RequesterIsStoredListedAndEmptyForRowsWithoutOne) {
  test_database db;
  auto c = db.connect();
  auto mine = new_op(*c, "team-a", "repo/requested.yaml", "alice@example.com");
  auto without = new_op(*c, "team-a", "repo/unowned.yaml");  // no requester: NULL, as before migration 6

  auto row = load_operation(*c, mine);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row.value.requester, "alice@example.com");
  EXPECT_EQ(load_operation(*c, without).value.requester, "");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE requester IS NULL"), "1");

  auto listed = list_operations_by_requester(*c, "alice@example.com", 10);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed.value.size(), 1u);
  EXPECT_EQ(listed.value[0].operation_id, mine);
  EXPECT_EQ(listed.value[0].requester, "alice@example.com");
  EXPECT_TRUE(list_operations_by_requester(*c, "bob@example.com", 10).value.empty());
}

TEST(OperationRepo, TransitionIsOneStatementWhoseTextSurvivesHostileBytes) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "mallory", "repo/evil.yaml");
  // Quotes, backslashes, a NUL, SQL comment and statement separators, multi-byte UTF-8.
  const std::string hostile =
      std::string("it's \\' \" ; DROP TABLE operation; -- ") + '\0' + " \xc3\xa9\xe2\x82\xac %_";
  transition_request t;
  t.operation_id = id;
  t.expected_version = 1;
  t.from = S::APPROVAL_SENDING;
  t.to = S::APPROVAL_SENT;
  t.cause = hostile;
  t.actor = hostile;
  t.instance_id = hostile;
  t.approval_id = hostile;
  t.last_error = hostile;
  // The statement counter moves by exactly one: no BEGIN/COMMIT, no second statement.
  auto questions = [&] { return session_questions(*c); };
  const auto before = questions();
  auto v = transition(*c, t);
  const auto after = questions();
  ASSERT_TRUE(v.ok()) << v.error.message;
  EXPECT_EQ(after - before, 2) << "the transition plus this SHOW";
  auto row = load_operation(*c, id);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row.value.approval_id, hostile);
  EXPECT_EQ(row.value.last_error, hostile);
  auto events = list_events(*c, id);
  ASSERT_EQ(events.value.size(), 2u);
  EXPECT_EQ(events.value[1].cause, hostile);
  EXPECT_EQ(events.value[1].actor, hostile);
  EXPECT_EQ(events.value[1].instance_id, hostile);
  EXPECT_EQ(events.value[1].version, 2);
  // The trigger's staging columns are empty at rest; other writers of the row add no event.
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE event_actor IS NOT NULL OR event_cause IS NOT NULL "
                      "OR event_instance IS NOT NULL"),
            "0");
  std::unique_ptr<sql::Statement> st(c->createStatement());
  st->executeUpdate("UPDATE operation SET attempts = attempts + 1 WHERE operation_id = '" + id + "'");
  EXPECT_EQ(count_events(db, id), "2");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation"), "1");
  // A guard miss writes nothing, event included.
  auto stale = transition(*c, t);
  EXPECT_EQ(stale.outcome, db_outcome::preempted);
  EXPECT_EQ(count_events(db, id), "2");
}

TEST(BoundStatement, PlaceholdersOutsideQuotesAreBoundAndValuesEscaped) {
  test_database db;
  auto c = db.connect();
  detail::statement st(*c, "SELECT '?', \"a?b\", `x?` AS q, ?, ? FROM operation WHERE phase = 'it''s ?' AND id = ?");
  st.setString(1, "o'k\\");
  st.setInt64(2, -42);
  EXPECT_THROW(st.bound_sql(), std::logic_error) << "the third placeholder is unbound";
  st.setNull(3);
  EXPECT_EQ(st.bound_sql(),
            "SELECT '?', \"a?b\", `x?` AS q, 'o\\'k\\\\', -42 FROM operation WHERE phase = 'it''s ?' AND id = NULL");
  EXPECT_THROW(st.setInt(4, 1), std::out_of_range);
  // A value full of metacharacters round-trips through the server unchanged.
  const std::string hostile = std::string("'; DROP TABLE operation; -- \\ \" ? ") + '\0' + "\xe2\x82\xac";
  detail::statement echo(*c, "SELECT ? AS v");
  echo.setString(1, hostile);
  std::unique_ptr<sql::ResultSet> rs(echo.executeQuery());
  ASSERT_TRUE(rs->next());
  EXPECT_EQ(std::string(rs->getString("v")), hostile);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND "
                      "table_name = 'operation'"),
            "1");
}

// A value without a byte the server's escaping changes is quoted without the driver; either way the
// text is what the driver's escaping makes of it, and the server reads back the value.
TEST(BoundStatement, QuotingAgreesWithTheDriversEscapingForEveryByte) {
  test_database db;
  auto c = db.connect();
  const detail::sql_text t(*c);
  auto& mysql = dynamic_cast<sql::mysql::MySQL_Connection&>(*c);
  std::vector<std::string> values = {"", "plain", "svc-42/team.repo", "caf\xc3\xa9 \xe2\x82\xac", "a b\tc"};
  for (int b = 0; b < 256; ++b) values.push_back(std::string("x") + static_cast<char>(b) + "y");
  for (const auto& v : values) {
    SCOPED_TRACE(::testing::PrintToString(v));
    EXPECT_EQ(t.quote(v), "'" + std::string(mysql.escapeString(sql::SQLString(v))) + "'");
    // A lone byte above 0x7f is not UTF-8: the server would refuse it rather than echo it.
    if (v.size() == 3 && static_cast<unsigned char>(v[1]) >= 0x80) continue;
    detail::statement echo(*c, "SELECT ? AS v");
    echo.setString(1, v);
    std::unique_ptr<sql::ResultSet> rs(echo.executeQuery());
    ASSERT_TRUE(rs->next());
    EXPECT_EQ(std::string(rs->getString("v")), v);
  }
}

namespace {
/// Round trips `run` made on `c`: the session's statements (Questions, where a compound statement
/// counts once) - (statements inside plain texts - texts), less the SHOW that reads the counter.
template <typename Run>
std::int64_t round_trips_of(sql::Connection& c, Run&& run) {
  const auto q0 = session_status(c, "Questions");
  const auto s0 = scripts_sent();
  run();
  const auto s1 = scripts_sent();
  const auto q1 = session_status(c, "Questions");
  return (q1 - q0 - 1) - static_cast<std::int64_t>((s1.statements - s0.statements) - (s1.texts - s0.texts));
}
}  // namespace

// A submission is ONE round trip: the text reads the binding under its lock, writes only what a
// change that takes the target writes, and commits itself. Round trips = the session's statements
// (Questions, where a compound statement counts once); the SHOW statements here are the others.
TEST(OperationRepo, ASubmissionIsOneRoundTripWhateverItsAnswer) {
  test_database db;
  auto c = db.connect();
  auto round_trips = [&](auto&& run) { return round_trips_of(*c, run); };
  new_operation op;
  op.operation_id = ids::new_uuid();
  op.subject_id = "ria";
  op.target_key = "t1";
  EXPECT_EQ(round_trips([&] { EXPECT_EQ(create_operation(*c, op).value, create_outcome::created); }), 1);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE operation_id = '" + op.operation_id + "'"), "1")
      << "committed by the text itself";
  new_operation held = op;
  held.operation_id = ids::new_uuid();
  EXPECT_EQ(round_trips([&] { EXPECT_EQ(create_operation(*c, held).value, create_outcome::in_progress); }), 1);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation"), "1") << "a held target: nothing written";
  EXPECT_EQ(session_status(*c, "Com_rollback"), 0) << "nothing to roll back either";
}

// The row a creation hands back (kept for status reads, and an actor's seed) is the stored row,
// field by field, whatever the inputs leave empty or cut to their columns.
TEST(OperationRepo, TheRowACreationHandsBackIsTheStoredRow) {
  test_database db;
  auto c = db.connect();
  std::vector<new_operation> ops;
  ops.push_back(test::new_operation_for("cara", "t-plain", "cara@example.com", "team/repo"));
  auto bare = test::new_operation_for("cara", "t-bare");
  bare.payload_json.clear();
  bare.owner_instance.clear();
  bare.requester.clear();
  ops.push_back(bare);
  auto wide = test::new_operation_for("cara", "t-wide", std::string(200, 'r'));
  std::string accents;
  for (int i = 0; i < 600; ++i) accents += "\xc3\xa9";  // 600 characters, 1,200 bytes: cut to the column
  wide.title = accents;
  wide.lease_epoch = 7;
  wide.flow = workflow::flow::create_then_approve;
  wide.initial_step = S::CREATE_STARTED;
  ops.push_back(wide);
  auto revert = test::new_operation_for("cara", "t-revert");
  revert.revert_of = ids::new_uuid();
  ops.push_back(revert);
  for (const auto& op : ops) {
    SCOPED_TRACE(op.target_key);
    std::optional<operation_row> created;
    ASSERT_EQ(create_operation(*c, op, &created).value, create_outcome::created);
    ASSERT_TRUE(created);
    auto stored = load_operation(*c, op.operation_id);
    ASSERT_TRUE(stored.ok());
    test::expect_same_row(*created, stored.value);
  }
}

// A write that someone's status reads are watching brings its committed row back in the same
// round trip: the creation, and a transition committed alone.
TEST(OperationRepo, ACreationAndATransitionHandBackTheRowTheyCommittedInTheSameRoundTrip) {
  test_database db;
  auto c = db.connect();
  auto round_trips = [&](auto&& run) { return round_trips_of(*c, run); };
  auto op = test::new_operation_for("una", "t-row");
  std::optional<operation_row> created;
  EXPECT_EQ(round_trips([&] { EXPECT_EQ(create_operation(*c, op, &created).value, create_outcome::created); }), 1);
  ASSERT_TRUE(created);
  EXPECT_EQ(created->operation_id, op.operation_id);
  EXPECT_EQ(created->version, 1);
  EXPECT_EQ(created->step, S::APPROVAL_SENDING);
  EXPECT_EQ(created->created_at_ms, load_operation(*c, op.operation_id).value.created_at_ms);

  // A held target: no row comes back.
  auto held = test::new_operation_for("una", "t-row");
  std::optional<operation_row> none;
  EXPECT_EQ(create_operation(*c, held, &none).value, create_outcome::in_progress);
  EXPECT_FALSE(none);

  auto t = test::to_approval_sent(op.operation_id, 1);
  std::optional<operation_row> committed;
  EXPECT_EQ(round_trips([&] { EXPECT_TRUE(transition(*c, t, &committed).ok()); }), 1);
  ASSERT_TRUE(committed);
  EXPECT_EQ(committed->version, 2);
  EXPECT_EQ(committed->step, S::APPROVAL_SENT);
  EXPECT_EQ(committed->approval_id, t.approval_id);
  EXPECT_EQ(committed->updated_at_ms, load_operation(*c, op.operation_id).value.updated_at_ms);

  // A guard miss: no row, and the outcome is told apart as before, whoever holds the next version.
  std::optional<operation_row> stale_row;
  EXPECT_EQ(transition(*c, t, &stale_row).outcome, db_outcome::preempted);
  EXPECT_FALSE(stale_row) << "the row at version 2 is not what this (missed) transition committed";
  auto gone = test::to_approval_sent("00000000-0000-4000-8000-0000000000aa", 1);
  EXPECT_EQ(transition(*c, gone, &stale_row).outcome, db_outcome::not_found);
  EXPECT_FALSE(stale_row);
  // The connection is in step after all of it.
  EXPECT_EQ(load_operation(*c, op.operation_id).value.version, 2);
}

TEST(OperationRepo, CreateIsIdempotentAndRefusesToOverwriteActiveRows) {
  test_database db;
  auto c = db.connect();
  new_operation op;
  op.operation_id = ids::new_uuid();
  op.subject_id = "bob";
  op.target_key = "t1";
  ASSERT_EQ(create_operation(*c, op).value, create_outcome::created);
  EXPECT_EQ(create_operation(*c, op).value, create_outcome::duplicate_operation);

  new_operation other = op;
  other.operation_id = ids::new_uuid();
  EXPECT_EQ(create_operation(*c, other).value, create_outcome::in_progress);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation"), "1");  // refused: nothing written

  other.initial_step = S::HANDLE_STARTED;
  EXPECT_EQ(create_operation(*c, other).outcome, db_outcome::illegal_transition);
}

TEST(OperationRepo, ReappliableRowIsResetInPlaceWithHistory) {
  test_database db;
  auto c = db.connect();
  auto first = new_op(*c, "carol", "t");
  walk(*c, first, {S::APPROVAL_REJECTED});
  auto second = new_op(*c, "carol", "t");
  auto b = find_binding(*c, "carol", "", "t");
  EXPECT_EQ(b.value.operation_id, second);
  EXPECT_EQ(b.value.phase, phase::APPROVAL_SENDING);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding"), "1");
  auto h = test::binding_history(*c, "carol", "", "t");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].replaced_operation_id, first);
  EXPECT_EQ(h[1].replaced_phase, "REJECTED");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE operation_id = '" + first + "'"), "0");
  auto events = list_events(*c, second);
  ASSERT_EQ(events.value.size(), 1u);
  EXPECT_EQ(events.value[0].cause, "re-applied");
  EXPECT_EQ(events.value[0].version, 1);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE event_actor IS NOT NULL"), "0");
}

// A target is changed many times: once its change ended (validated, cancelled, closed) the next one
// takes the binding; while a change is in flight or parked in a failure, the next one is refused and
// nothing is written.
TEST(OperationRepo, EndedChangesFreeTheTargetFailuresHoldIt) {
  test_database db;
  auto c = db.connect();
  auto first = new_op(*c, "gina", "t");
  walk(*c, first, test::to_merged, 7);
  walk(*c, first, {S::CALLED_BACK});
  auto second = new_op(*c, "gina", "t");  // VALIDATED frees the target
  ASSERT_EQ(find_binding(*c, "gina", "", "t").value.operation_id, second);
  EXPECT_EQ(load_operation(*c, first).value.phase, phase::VALIDATED);  // the old one stays readable

  walk(*c, second, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_ERROR});
  new_operation third;
  third.operation_id = ids::new_uuid();
  third.subject_id = "gina";
  third.target_key = "t";
  EXPECT_EQ(create_operation(*c, third).value, create_outcome::in_progress);  // a failure holds it
  walk(*c, second, {S::FORCED_FAILED}, std::nullopt, workflow::actor_kind::operator_only);
  EXPECT_EQ(create_operation(*c, third).value, create_outcome::in_progress);  // a forced one too
  walk(*c, second, {S::CANCELLED}, std::nullopt, workflow::actor_kind::requester);
  EXPECT_EQ(create_operation(*c, third).value, create_outcome::created);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE subject_id = 'gina'"), "1");
  auto h = test::binding_history(*c, "gina", "", "t");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[1].replaced_phase, "VALIDATED");
  EXPECT_EQ(h[2].replaced_phase, "CANCELLED");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE operation_id = '" + second + "'"), "0");
  // A late transition of a replaced operation never touches the binding now owned by another.
  EXPECT_EQ(find_binding(*c, "gina", "", "t").value.phase, phase::APPROVAL_SENDING);
}

// I5: racing re-applies of one freed relationship -> exactly one winner, one row. The racers must
// really overlap, however fast or slow the machine: in the first round a test transaction locks
// the binding row, so every racer waits in its locking read of the binding; once the lock is
// released one racer takes the target and every other one, reading the binding after that commit,
// must be told the target is in progress. The other rounds race freely, with the same answers.
TEST(OperationRepo, ConcurrentReappliesHaveOneWinner) {
  test_database db;
  constexpr int rounds = 30;
  constexpr int racers = 4;
  test::racer_connections racing(db, racers);
  auto& conns = racing.conns;
  for (int round = 0; round < rounds; ++round) {
    const std::string target = "t" + std::to_string(round);
    auto old = new_op(*conns[0], "dave", target);
    // Every kind of ended change frees the target; the race must have one winner for each.
    switch (round % 3) {
      case 0: walk(*conns[0], old, {S::APPROVAL_REJECTED}); break;
      case 1: walk(*conns[0], old, {S::CANCELLED}, std::nullopt, workflow::actor_kind::requester); break;
      default: walk(*conns[0], old, test::to_merged, round); walk(*conns[0], old, {S::CALLED_BACK});
    }
    const bool gated = round == 0;
    std::unique_ptr<sql::Connection> gate;
    if (gated) {
      gate = db.connect();
      gate->setAutoCommit(false);
      std::unique_ptr<sql::Statement> st(gate->createStatement());
      std::unique_ptr<sql::ResultSet>(st->executeQuery(
          "SELECT id FROM binding WHERE subject_id = 'dave' AND target_key = '" + target + "' FOR UPDATE"));
    }
    std::barrier sync(racers);
    std::vector<create_outcome> outcomes(racers);
    std::vector<std::string> ids(racers);
    std::vector<std::thread> threads;
    for (int i = 0; i < racers; ++i) {
      threads.emplace_back([&, i] {
        new_operation op;
        op.operation_id = ids[i] = ids::new_uuid();
        op.subject_id = "dave";
        op.target_key = target;
        sync.arrive_and_wait();
        auto r = create_operation(*conns[i], op);
        ASSERT_TRUE(r.ok()) << r.error.message;
        outcomes[i] = r.value;
      });
    }
    bool all_waited = true;
    if (gated) {
      all_waited = racing.all_waiting_in(db, "SELECT operation_id, phase INTO @changeflow_bound_op");
      gate->rollback();
    }
    for (auto& t : threads) t.join();
    ASSERT_TRUE(all_waited)
        << "the racers never all reached the binding's locking read behind the locked row (waited 60 s): "
           "they did not overlap, so the round proved nothing";
    int winners = 0, preempted = 0;
    std::string winner;
    for (int i = 0; i < racers; ++i) {
      if (outcomes[i] == create_outcome::created) {
        ++winners;
        winner = ids[i];
      } else {
        EXPECT_TRUE(outcomes[i] == create_outcome::preempted || outcomes[i] == create_outcome::in_progress);
        preempted += outcomes[i] == create_outcome::preempted;
      }
    }
    ASSERT_EQ(winners, 1) << "round " << round;
    // The binding is read with its lock, so every loser waited for the winner's commit and then read
    // the target held by the winner's change: in progress, never a blind overwrite.
    EXPECT_EQ(preempted, 0) << "round " << round;
    EXPECT_EQ(find_binding(*conns[0], "dave", "", target).value.operation_id, winner);
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE target_key = '" + target + "'"), "1");
    // Losers' operation rows were rolled back with their transaction.
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE target_key = '" + target + "'"), "2");
  }
}

// I6 with ABA: MERGING -> REBASING -> MERGING puts the step back, the version does not come back.
TEST(OperationRepo, StaleVersionFailsEvenAfterStepRoundTrip) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "erin", "t");
  auto v =
      walk(*c, id, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_APPROVED, S::HANDLE_MERGING});
  walk(*c, id, {S::HANDLE_REBASING, S::HANDLE_MERGING});
  ASSERT_EQ(load_operation(*c, id).value.step, S::HANDLE_MERGING);

  transition_request stale;
  stale.operation_id = id;
  stale.expected_version = v;  // read before the round trip
  stale.from = S::HANDLE_MERGING;
  stale.to = S::HANDLE_MERGED;
  auto r = transition(*c, stale);
  EXPECT_EQ(r.outcome, db_outcome::preempted);
  EXPECT_EQ(load_operation(*c, id).value.step, S::HANDLE_MERGING);
  EXPECT_EQ(db.scalar("SELECT phase FROM binding WHERE operation_id = '" + id + "'"), "MERGING");

  stale.operation_id = "nope";
  EXPECT_EQ(transition(*c, stale).outcome, db_outcome::not_found);
}

TEST(OperationRepo, IllegalTransitionIsRefusedBeforeAnySql) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "frank", "t");
  transition_request t;
  t.operation_id = id;
  t.expected_version = 1;
  t.from = S::APPROVAL_SENDING;
  t.to = S::HANDLE_MERGED;  // not in the table
  auto r = transition(*c, t);
  EXPECT_EQ(r.outcome, db_outcome::illegal_transition);
  EXPECT_EQ(load_operation(*c, id).value.version, 1);
  EXPECT_EQ(count_events(db, id), "1");

  // Operator-only edge taken by the workflow: refused too.
  t.to = S::FORCED_FAILED;
  EXPECT_EQ(transition(*c, t).outcome, db_outcome::illegal_transition);
  // No SQL at all: on a closed connection any statement would fail with a driver error instead.
  auto closed = db.connect();
  closed->close();
  EXPECT_EQ(transition(*closed, t).outcome, db_outcome::illegal_transition);
  t.by = workflow::actor_kind::operator_only;
  t.actor = "operator:root";
  auto ok = transition(*c, t);
  EXPECT_TRUE(ok.ok()) << ok.error.message;
  EXPECT_EQ(list_events(*c, id).value.back().actor, "operator:root");
}

TEST(OperationRepo, OwnerFenceRejectsWritesFromAFormerOwner) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "gina", "t");
  transition_request t;
  t.operation_id = id;
  t.expected_version = 1;
  t.from = S::APPROVAL_SENDING;
  t.to = S::APPROVAL_SENT;
  t.fence = owner_fence{"test-instance", 1};  // epoch is 0
  EXPECT_EQ(transition(*c, t).outcome, db_outcome::preempted);
  t.fence->lease_epoch = 0;
  EXPECT_TRUE(transition(*c, t).ok());
}

// An UPDATE of operation that names its rows by key considers that key alone. Without the hint the
// optimizer also estimates a range on every index the guard's columns lead: for the owner's guard,
// idx_operation_owner_phase over all of the instance's rows (two index dives per transition, more
// work as finished changes accumulate).
TEST(OperationRepo, UpdatesByKeyConsiderTheKeyAlone) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "hana", "t");
  const detail::sql_text text(*c);
  transition_request t;
  t.operation_id = id;
  t.expected_version = 1;
  t.from = S::APPROVAL_SENDING;
  t.to = S::APPROVAL_SENT;
  t.fence = owner_fence{"test-instance", 0};
  t.mr_iid = 7;
  auto possible_keys = [&](const std::string& sql) {
    std::unique_ptr<sql::Statement> st(c->createStatement());
    std::unique_ptr<sql::ResultSet> rs(st->executeQuery("EXPLAIN " + sql));
    if (!rs->next()) return std::string("(no plan)");
    return rs->isNull("possible_keys") ? std::string("(none)") : std::string(rs->getString("possible_keys"));
  };
  const std::string guarded = detail::transition_update_sql(text, t);
  EXPECT_EQ(possible_keys(guarded), "PRIMARY") << guarded;
  t.retry_in_step = true;
  EXPECT_EQ(possible_keys(detail::transition_update_sql(text, t)), "PRIMARY");
  EXPECT_EQ(possible_keys(detail::deploy_reported_mark_sql("= " + text.quote(id))), "PRIMARY");
  EXPECT_EQ(possible_keys(detail::deploy_reported_mark_sql("IN (" + text.quote(id) + ", 'other')")), "PRIMARY");
  // The same guard without the hint: what the test would see if it were dropped.
  std::string plain = guarded;
  plain.replace(0, std::string(detail::update_operation_by_key).size(), "UPDATE operation SET ");
  EXPECT_NE(possible_keys(plain), "PRIMARY") << plain;
  // And the hinted text still applies the transition under its guard.
  t.retry_in_step = false;
  EXPECT_TRUE(transition(*c, t).ok());
  EXPECT_EQ(transition(*c, t).outcome, db_outcome::preempted);
}

// The UPDATE a group's transitions share reads its rows of keys first and reaches each operation row
// by its key: on a table of three rows, where a scan would cost the optimizer nothing, as on a large
// one. (Driven from `operation` instead, it would read the whole table, and lock what it reads,
// once it grows.)
TEST(OperationRepo, TheUpdateTransitionsShareLooksUpEachRowByKey) {
  test_database db;
  auto c = db.connect();
  const detail::sql_text text(*c);
  std::vector<transition_request> reqs;
  for (const char* who : {"ines", "jon", "kim"}) {
    reqs.push_back(test::to_approval_sent(new_op(*c, who, "t"), 1));
    reqs.back().fence = owner_fence{"test-instance", 0};
  }
  const std::vector<const transition_request*> group{&reqs[0], &reqs[1], &reqs[2]};
  const auto updates = detail::transition_updates(text, group);
  ASSERT_EQ(updates.size(), 1u) << "three transitions of one shape share one UPDATE";
  std::unique_ptr<sql::Statement> st(c->createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("EXPLAIN " + updates.front()));
  std::vector<std::tuple<std::string, std::string, std::string>> plan;  // table, type, key
  while (rs->next()) {
    plan.emplace_back(rs->getString("table"), rs->getString("type"),
                      rs->isNull("key") ? std::string() : std::string(rs->getString("key")));
  }
  ASSERT_GE(plan.size(), 2u);
  EXPECT_EQ(std::get<0>(plan[0]).rfind("<derived", 0), 0u) << "the rows of keys come first";
  EXPECT_EQ(std::get<0>(plan[1]), "operation");
  EXPECT_EQ(std::get<1>(plan[1]), "eq_ref") << "each operation row by its key";
  EXPECT_EQ(std::get<2>(plan[1]), "PRIMARY");
  // And it lands, each row under its own guard.
  auto out = transition_group(*c, reqs);
  for (auto& r : out) EXPECT_TRUE(r.ok()) << r.error.message;
}

// A connection killed in the middle of a transaction surfaces as `retryable`, and nothing lands.
TEST(OperationRepo, KilledConnectionIsRetryable) {
  test_database db;
  auto setup = db.connect();
  auto id = new_op(*setup, "hank", "t");

  auto holder = db.connect();  // holds the row lock so the victim stops inside its transaction
  holder->setAutoCommit(false);
  {
    std::unique_ptr<sql::Statement> st(holder->createStatement());
    std::unique_ptr<sql::ResultSet>(
        st->executeQuery("SELECT * FROM operation WHERE operation_id = '" + id + "' FOR UPDATE"));
  }
  auto victim = db.connect();
  const auto victim_id = connection_id(*victim);
  auto pending = std::async(std::launch::async, [&] {
    transition_request t;
    t.operation_id = id;
    t.expected_version = 1;
    t.from = S::APPROVAL_SENDING;
    t.to = S::APPROVAL_SENT;
    return transition(*victim, t);
  });
  ASSERT_TRUE(changeflow::testing::wait_until(
      [&] {
        return db.scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + std::to_string(victim_id) +
                         " AND INFO LIKE 'UPDATE operation%'") == "1";
      },
      10s));
  db.exec("KILL " + std::to_string(victim_id));
  auto r = pending.get();
  EXPECT_EQ(r.outcome, db_outcome::retryable) << r.error.code << " " << r.error.message;
  holder->rollback();
  EXPECT_EQ(load_operation(*setup, id).value.version, 1);
}

// A transition alone whose connection dies after its COMMIT, before its answer is read: it answers
// as if the answer had come (the new version, and the row it committed when asked for), read from
// the event its version wrote, so its actor counts it once. Another writer's event at that version is
// a guard miss; a transition that did not commit is still a lost connection, for the retry to tell.
TEST(OperationRepo, ATransitionWhoseAnswerIsLostAfterItsCommitAnswersAsIfItHadCome) {
  test_database db;
  auto setup = db.connect();
  db_context ctx(db.settings());
  auto id = new_op(*setup, "lara", "t-lost");
  auto t = test::to_approval_sent(id, 1);
  t.instance_id = "instance-a";
  std::optional<operation_row> row;
  const auto before = connection_id(session(ctx).connection());
  auto r = transition(ctx, t, &row, true);
  ASSERT_TRUE(r.ok()) << r.error.code << " " << r.error.message;
  EXPECT_EQ(r.value, 2);
  EXPECT_NE(connection_id(session(ctx).connection()), before) << "the fault killed the connection it ran on";
  ASSERT_TRUE(row) << "the row it committed, read after the loss";
  EXPECT_EQ(row->version, 2);
  EXPECT_EQ(row->step, S::APPROVAL_SENT);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + id + "' AND version = 2"), "1");

  // The same loss for a transition whose version another writer took first: its own UPDATE missed
  // its guard, and the event at that version is not its own.
  auto next = walk(*setup, id, {S::APPROVAL_APPROVED});
  transition_request late;
  late.operation_id = id;
  late.expected_version = next - 1;
  late.from = S::APPROVAL_SENT;
  late.to = S::APPROVAL_APPROVED;
  late.cause = "approval submitted";
  late.instance_id = "instance-a";
  auto missed = transition(ctx, late, nullptr, true);
  EXPECT_EQ(missed.outcome, db_outcome::preempted) << missed.error.message;
}

// A pair of transitions (the step passed through is written with the next one): one transaction,
// both events, two versions; it lands whole or not at all, and a lost answer is recovered from the
// second event as for one transition.
TEST(OperationRepo, APairOfTransitionsLandsWholeOrNotAtAll) {
  test_database db;
  auto setup = db.connect();
  db_context ctx(db.settings());
  const std::string opened_path = "t-pair";
  auto id = new_op(*setup, "pia", opened_path);
  const auto opened =
      walk(*setup, id, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED}, 7);
  const auto events_at = [&](const std::string& op) {
    return db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + op + "'");
  };
  const auto events_before = events_at(id);

  // The two transitions go under one fence: a pair whose fences differ is refused before any SQL.
  auto split = test::passed_and_approved(id, opened);
  split.fence = owner_fence{"instance-a", 1};
  EXPECT_EQ(transition(ctx, split).outcome, db_outcome::illegal_transition);
  // A fence that does not hold: nothing written.
  auto fenced = test::passed_and_approved(id, opened);
  fenced.fence = owner_fence{"someone-else", 1};
  auto first = std::make_shared<transition_request>(*fenced.before);
  first->fence = fenced.fence;
  fenced.before = first;
  auto missed = transition(ctx, fenced);
  EXPECT_EQ(missed.outcome, db_outcome::preempted) << missed.error.message;
  EXPECT_EQ(load_operation(*setup, id).value.version, opened);
  EXPECT_EQ(load_operation(*setup, id).value.step, S::CREATE_MR_OPENED);
  EXPECT_EQ(events_at(id), events_before);

  // A stale first transition: nothing written either.
  auto stale = transition(ctx, test::passed_and_approved(id, opened - 1));
  EXPECT_EQ(stale.outcome, db_outcome::preempted) << stale.error.message;
  EXPECT_EQ(load_operation(*setup, id).value.version, opened);

  // Transitions that do not follow one another are refused before any SQL.
  auto gap = test::passed_and_approved(id, opened);
  gap.expected_version = opened + 2;
  EXPECT_EQ(transition(ctx, gap).outcome, db_outcome::illegal_transition);

  // It lands: the row two versions on, handed back, and both events in order.
  std::optional<operation_row> row;
  auto landed = transition(ctx, test::passed_and_approved(id, opened), &row);
  ASSERT_TRUE(landed.ok()) << landed.error.message;
  EXPECT_EQ(landed.value, opened + 2);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->version, opened + 2);
  EXPECT_EQ(row->step, S::HANDLE_APPROVED);
  test::expect_same_row(*row, load_operation(*setup, id).value);
  auto events = list_events(*setup, id);
  ASSERT_TRUE(events.ok());
  ASSERT_GE(events.value.size(), 2u);
  const auto& passed = events.value[events.value.size() - 2];
  EXPECT_EQ(passed.to_step, S::CREATE_SUCCEEDED);
  EXPECT_EQ(passed.to_phase, workflow::phase::MR_CREATED);
  EXPECT_EQ(passed.version, opened + 1);
  EXPECT_EQ(passed.cause, "check pipeline passed");
  EXPECT_EQ(events.value.back().from_step, S::CREATE_SUCCEEDED);
  EXPECT_EQ(events.value.back().to_step, S::HANDLE_APPROVED);
  EXPECT_EQ(events.value.back().version, opened + 2);

  // A row already where the pair's second transition expects it (no writer does this today): the
  // second UPDATE would land, but the first missed, so neither is written.
  auto ahead = new_op(*setup, "pia", opened_path + "-ahead");
  const auto at_succeeded =
      walk(*setup, ahead,
           {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED, S::CREATE_SUCCEEDED}, 9);
  auto behind = transition(ctx, test::passed_and_approved(ahead, at_succeeded - 1));
  EXPECT_EQ(behind.outcome, db_outcome::preempted) << behind.error.message;
  EXPECT_EQ(load_operation(*setup, ahead).value.version, at_succeeded);
  EXPECT_EQ(load_operation(*setup, ahead).value.step, S::CREATE_SUCCEEDED);

  // A retry within the step, written with the step before it, whose answer is lost: the first
  // transition's event says both committed.
  auto retried = new_op(*setup, "pia", opened_path + "-retry");
  const auto retried_opened =
      walk(*setup, retried, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED}, 10);
  auto retry = test::passed_and_approved(retried, retried_opened);
  retry.to = S::CREATE_SUCCEEDED;
  retry.retry_in_step = true;
  retry.last_error = "429 Too Many Requests";
  auto retry_lost = transition(ctx, retry, nullptr, true);
  ASSERT_TRUE(retry_lost.ok()) << retry_lost.error.code << " " << retry_lost.error.message;
  EXPECT_EQ(retry_lost.value, retried_opened + 2);
  EXPECT_EQ(load_operation(*setup, retried).value.attempts, 1);

  // Its answer lost after the commit: read back from its second event, as for one transition.
  auto other = new_op(*setup, "pia", opened_path + "-2");
  const auto other_opened =
      walk(*setup, other, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED}, 8);
  std::optional<operation_row> lost_row;
  auto lost = transition(ctx, test::passed_and_approved(other, other_opened), &lost_row, true);
  ASSERT_TRUE(lost.ok()) << lost.error.code << " " << lost.error.message;
  EXPECT_EQ(lost.value, other_opened + 2);
  ASSERT_TRUE(lost_row);
  EXPECT_EQ(lost_row->step, S::HANDLE_APPROVED);
}

// Callback and reconciler race mark_validated: exactly one flip reported per operation.
TEST(DbContext, AConnectionLostUnderARepositoryIsReplacedOnTheNextGet) {
  test_database db;
  auto setup = db.connect();
  auto id = new_op(*setup, "ivy", "t");
  db_context ctx(db.settings());
  const auto first = connection_id(session(ctx).connection());
  db.exec("KILL " + std::to_string(first));
  // The repository turns the driver's exception into a value; the pool never sees it.
  auto lost = load_operation(ctx, id);
  EXPECT_EQ(lost.outcome, db_outcome::retryable) << lost.error.message;
  // The next call opens a new connection instead of failing with "server has gone away" forever.
  session again(ctx);
  EXPECT_NE(connection_id(again.connection()), first);
  auto row = load_operation(again, id);
  ASSERT_TRUE(row.ok()) << row.error.message;
  EXPECT_EQ(row.value.operation_id, id);
}

TEST(OperationRepo, MarkValidatedFlipsExactlyOnceUnderRace) {
  test_database db;
  auto c = db.connect();
  constexpr int n = 150;
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    ids.push_back(new_op(*c, "ivy", "t" + std::to_string(i)));
    walk(*c, ids.back(), test::to_merged, 100 + i);
  }
  std::vector<std::atomic<int>> flips(n);
  std::atomic<int> errors{0};
  std::barrier sync(2);
  auto racer = [&](const std::string& via) {
    auto conn = db.connect();
    for (int i = 0; i < n; ++i) {
      sync.arrive_and_wait();
      auto r = mark_validated(*conn, ids[i], via);
      if (!r.ok()) {
        ++errors;
        continue;
      }
      if (r.value) {
        EXPECT_EQ(r.value->subject_id, "ivy");
        ++flips[i];
      }
    }
  };
  std::thread a(racer, "callback"), b(racer, "reconciliation");
  a.join();
  b.join();
  EXPECT_EQ(errors.load(), 0);
  for (int i = 0; i < n; ++i) ASSERT_EQ(flips[i].load(), 1) << "operation " << i;
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE phase = 'VALIDATED'"), std::to_string(n));
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE step = 10301 AND phase = 'VALIDATED'"), std::to_string(n));
  // One event per validation, carried by the operation's own write; nothing left in staging.
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE cause LIKE 'validated via %'"), std::to_string(n));
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE event_actor IS NOT NULL"), "0");
  // A later call is an idempotent no-op.
  EXPECT_FALSE(mark_validated(*c, ids[0], "callback").value);
}

// The step already says CALLED_BACK but the binding lags at MERGED (a write without an event moved
// only the operation): the flip repairs the binding with its own write, since the trigger moves the
// binding only when the operation's phase changes.
TEST(OperationRepo, MarkValidatedRepairsABindingLeftAtMerged) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "lena", "t");
  walk(*c, id, test::to_merged, 9);
  db.exec("UPDATE operation SET step = 10301, phase = 'VALIDATED' WHERE operation_id = '" + id + "'");
  ASSERT_EQ(db.scalar("SELECT phase FROM binding WHERE operation_id = '" + id + "'"), "MERGED");
  auto r = mark_validated(*c, id, "reconciliation");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value);
  EXPECT_EQ(db.scalar("SELECT phase FROM binding WHERE operation_id = '" + id + "'"), "VALIDATED");
  EXPECT_FALSE(mark_validated(*c, id, "callback").value);
}

// A deploy delivery that validates its one change is classified in the flip's own transaction; a
// call that flips nothing leaves the ledger row PENDING for its caller to classify.
TEST(OperationRepo, MarkValidatedSettlesTheDeliveryWithTheFlip) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "mona", "t");
  walk(*c, id, test::to_merged, 11);
  for (const char* key : {"deploy:settle-1", "deploy:settle-2"}) {
    db.exec(std::string("INSERT INTO callback_ledger (delivery_id, kind, outcome, received_at) VALUES ('") + key +
            "', 'deploy', 'PENDING', NOW(3))");
  }
  const ledger_settlement first{"deploy:settle-1", "APPLIED", {id}};
  auto r = mark_validated(*c, id, "callback", &first);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.value);
  EXPECT_TRUE(r.value->settled);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:settle-1'"), "APPLIED");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM callback_operation o JOIN callback_ledger l ON l.id = o.ledger_id "
                      "WHERE l.delivery_id = 'deploy:settle-1' AND o.operation_id = '" +
                      id + "'"),
            "1");
  const ledger_settlement second{"deploy:settle-2", "APPLIED", {id}};
  auto again = mark_validated(*c, id, "callback", &second);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again.value);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:settle-2'"), "PENDING");
}

TEST(OperationRepo, MarkValidatedIgnoresOperationsNotMerged) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "jack", "t");
  auto r = mark_validated(*c, id, "reconciliation");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value);
  EXPECT_EQ(load_operation(*c, id).value.step, S::APPROVAL_SENDING);
}

TEST(OperationRepo, ReconciliationWindowUsesDbClock) {
  test_database db;
  auto c = db.connect();
  auto old_op = new_op(*c, "kim", "a");
  walk(*c, old_op, test::to_merged, 7);
  auto fresh = new_op(*c, "kim", "b");
  walk(*c, fresh, test::to_merged, 8);
  db.exec("UPDATE operation SET updated_at = NOW(3) - INTERVAL 120 SECOND WHERE operation_id = '" + old_op + "'");
  auto w = merged_in_window(*c, "", 60, 3600, 100);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w.value.size(), 1u);
  EXPECT_EQ(w.value[0].operation_id, old_op);
  EXPECT_EQ(w.value[0].mr_iid, 7);
}

// An approval callback chosen as a deadlock victim (on a cluster: the loser of a certification
// conflict, the same 1213) is run again inside the repository and applied, not answered as a
// failure the sender might give up on. The deadlock is forced: another transaction holds the
// operation row, the callback records its delivery and waits for that row, then the other inserts
// the same delivery id. That transaction has written more rows, so InnoDB rolls the callback back.
TEST(ApprovalCallback, ADeadlockVictimIsRunAgainAndApplied) {
  test_database db;
  auto setup = db.connect();
  auto id = new_op(*setup, "mel", "t");
  auto other = db.connect();
  other->setAutoCommit(false);
  std::unique_ptr<sql::Statement> st(other->createStatement());
  for (int i = 0; i < 5; ++i) {
    st->execute(
        "INSERT INTO callback_ledger (delivery_id, kind, operation_id, outcome, received_at) VALUES "
        "('heavier-" +
        std::to_string(i) + "', 'approval', '" + id + "', 'APPLIED', NOW(3))");
  }
  std::unique_ptr<sql::ResultSet>(
      st->executeQuery("SELECT * FROM operation WHERE operation_id = '" + id + "' FOR UPDATE"));
  auto callback = db.connect();
  const auto callback_id = connection_id(*callback);
  const auto conflicts_before = conflicts_seen();
  auto pending = std::async(std::launch::async, [&] {
    return apply_approval_callback(*callback, "d-deadlock", id, approval_result::APPROVED, "");
  });
  // Waiting means: its current statement is the operation's UPDATE (a prefix match: while the server
  // starts a compound statement its INFO is the whole text, the ledger INSERT not yet run, and a
  // match anywhere in it let the test go on before the callback held its ledger row), and its
  // transaction is blocked on a lock. InnoDB refreshes what INNODB_TRX shows only when nobody read
  // it for 100 ms, so it is polled less often than that: read every 10 ms it kept showing the
  // callback's transaction as it was before the lock wait (or not at all) for the whole 10 s.
  ASSERT_TRUE(changeflow::testing::wait_until(
      [&] {
        return db.scalar(
                   "SELECT COUNT(*) FROM information_schema.PROCESSLIST p JOIN information_schema.INNODB_TRX t "
                   "ON t.trx_mysql_thread_id = p.ID WHERE p.ID = " +
                   std::to_string(callback_id) + " AND p.INFO LIKE '" + detail::update_operation_by_key +
                   "step%' AND t.trx_state = 'LOCK WAIT'") == "1";
      },
      10s, 150ms))
      << "the callback never waited for the operation row";
  // Closes the cycle: this insert waits for the callback's ledger row, which waits for our row lock.
  st->execute(
      "INSERT INTO callback_ledger (delivery_id, kind, operation_id, outcome, received_at) VALUES "
      "('d-deadlock', 'approval', '" +
      id + "', 'APPLIED', NOW(3))");
  other->rollback();
  auto r = pending.get();
  ASSERT_TRUE(r.ok()) << r.error.code << " " << r.error.message;
  EXPECT_EQ(r.value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(load_operation(*setup, id).value.step, S::APPROVAL_APPROVED);
  EXPECT_GT(conflicts_seen(), conflicts_before) << "no deadlock happened: the test did not test the retry";
}

TEST(ApprovalCallback, GuardOutcomes) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "lee", "t");
  // Arrives while still SENDING (before SENT was written): applied.
  auto a = apply_approval_callback(*c, "d1", id, approval_result::APPROVED, R"({"r":"APPROVED"})");
  ASSERT_TRUE(a.ok()) << a.error.message;
  EXPECT_EQ(a.value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(a.value.new_step, S::APPROVAL_APPROVED);
  EXPECT_EQ(a.value.new_version, 2);
  // The row as committed comes back in the same round trip (an actor is started from it).
  ASSERT_TRUE(a.value.row.has_value());
  EXPECT_EQ(a.value.row->operation_id, id);
  EXPECT_EQ(a.value.row->step, S::APPROVAL_APPROVED);
  EXPECT_EQ(a.value.row->version, 2);
  EXPECT_EQ(a.value.row->subject_id, "lee");
  EXPECT_EQ(list_events(*c, id).value.back().actor, "callback");
  // Redelivery.
  EXPECT_EQ(apply_approval_callback(*c, "d1", id, approval_result::APPROVED, "").value.outcome,
            callback_outcome::DUPLICATE);
  // WITHDRAWN after APPROVED took effect: nothing applied, no row.
  auto late = apply_approval_callback(*c, "d2", id, approval_result::WITHDRAWN, "");
  EXPECT_EQ(late.value.outcome, callback_outcome::OUT_OF_ORDER);
  EXPECT_FALSE(late.value.row.has_value());
  EXPECT_EQ(load_operation(*c, id).value.step, S::APPROVAL_APPROVED);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'd2'"), "OUT_OF_ORDER");

  // A callback for an operation replaced by a re-apply is stale.
  auto old = new_op(*c, "lee", "u");
  walk(*c, old, {S::APPROVAL_SENT, S::APPROVAL_REJECTED});
  new_op(*c, "lee", "u");
  EXPECT_EQ(apply_approval_callback(*c, "d3", old, approval_result::APPROVED, "").value.outcome,
            callback_outcome::IGNORED_STALE);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'd3'"), "IGNORED_STALE");
  EXPECT_EQ(apply_approval_callback(*c, "d4", "unknown-op", approval_result::APPROVED, "").value.outcome,
            callback_outcome::IGNORED_STALE);
}

// With approved_then_create, an APPROVED decision writes the workflow's next step in its own
// transaction, exactly when the workflow's choice could be nothing else: the row is this instance's
// and has no MR. Each event keeps its writer; the answer names both writes.
TEST(ApprovalCallback, AnApprovedDecisionGoesOnToCreateStartedOnlyWhereTheWorkflowWould) {
  test_database db;
  auto c = db.connect();
  const approved_then_create then{"test-instance"};  // the owner new_op writes
  auto id = new_op(*c, "lee", "t");
  walk(*c, id, {S::APPROVAL_SENT});
  auto a = apply_approval_callback(*c, "d1", id, approval_result::APPROVED, "{}", then);
  ASSERT_TRUE(a.ok()) << a.error.message;
  EXPECT_EQ(a.value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(a.value.new_step, S::CREATE_STARTED);
  EXPECT_EQ(a.value.new_version, 4);
  EXPECT_EQ(a.value.found_version, 2);
  ASSERT_TRUE(a.value.row.has_value());
  test::expect_same_row(*a.value.row, load_operation(*c, id).value);
  auto events = list_events(*c, id).value;
  ASSERT_GE(events.size(), 2u);
  const auto& decided = events[events.size() - 2];
  const auto& next = events.back();
  EXPECT_EQ(decided.to_step, S::APPROVAL_APPROVED);
  EXPECT_EQ(decided.actor, "callback");
  EXPECT_EQ(decided.version, 3);
  EXPECT_EQ(next.from_step, S::APPROVAL_APPROVED);
  EXPECT_EQ(next.to_step, S::CREATE_STARTED);
  EXPECT_EQ(next.actor, "workflow");
  EXPECT_EQ(next.instance_id.value_or(""), "test-instance");
  EXPECT_EQ(next.cause, std::string(workflow::create_after_approval_cause));
  EXPECT_EQ(next.version, 4);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'd1'"), "APPLIED");
  // A copy changes nothing more.
  EXPECT_EQ(apply_approval_callback(*c, "d1", id, approval_result::APPROVED, "{}", then).value.outcome,
            callback_outcome::DUPLICATE);
  EXPECT_EQ(load_operation(*c, id).value.version, 4);

  // Where the workflow could choose otherwise, or the row is not this instance's, the decision is
  // written alone and the actor decides.
  auto owned_elsewhere = new_op(*c, "lee", "u");
  db.exec("UPDATE operation SET owner_instance = 'other-instance' WHERE operation_id = '" + owned_elsewhere + "'");
  auto with_mr = new_op(*c, "lee", "v");
  db.exec("UPDATE operation SET mr_iid = 7 WHERE operation_id = '" + with_mr + "'");
  auto plain = new_op(*c, "lee", "w");
  for (const auto& [op, delivery, given] : std::vector<std::tuple<std::string, std::string, bool>>{
           {owned_elsewhere, "d2", true}, {with_mr, "d3", true}, {plain, "d4", false}}) {
    auto r = apply_approval_callback(*c, delivery, op, approval_result::APPROVED, "{}",
                                     given ? std::optional(then) : std::nullopt);
    ASSERT_TRUE(r.ok()) << r.error.message;
    EXPECT_EQ(r.value.new_step, S::APPROVAL_APPROVED) << delivery;
    EXPECT_EQ(r.value.found_version, r.value.new_version.value_or(0) - 1) << delivery;
    EXPECT_EQ(load_operation(*c, op).value.step, S::APPROVAL_APPROVED) << delivery;
  }
  auto rejected = new_op(*c, "lee", "x");
  auto r = apply_approval_callback(*c, "d5", rejected, approval_result::REJECTED, "{}", then);
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(load_operation(*c, rejected).value.step, S::APPROVAL_REJECTED);
}

// An approval system that restarted reissues delivery ids: an id seen before for ANOTHER operation
// is refused and recorded for the operation it names, never taken for a duplicate of the first.
TEST(ApprovalCallback, ADeliveryIdReusedForAnotherOperationIsRefusedAndRecorded) {
  test_database db;
  auto c = db.connect();
  auto first = new_op(*c, "kim", "a");
  auto second = new_op(*c, "kim", "b");
  ASSERT_EQ(apply_approval_callback(*c, "cb-7", first, approval_result::APPROVED, "{}").value.outcome,
            callback_outcome::APPLIED);
  for (int copy = 0; copy < 2; ++copy) {
    auto r = apply_approval_callback(*c, "cb-7", second, approval_result::APPROVED, R"({"again":1})");
    ASSERT_TRUE(r.ok()) << r.error.message;
    EXPECT_EQ(r.value.outcome, callback_outcome::ID_REUSED) << "copy " << copy;
  }
  EXPECT_EQ(load_operation(*c, second).value.step, S::APPROVAL_SENDING) << "nothing applied to the second";
  EXPECT_EQ(
      db.scalar("SELECT COUNT(*) FROM callback_ledger WHERE operation_id = '" + second + "' AND outcome = 'ID_REUSED'"),
      "1");
  // The first operation's own redelivery is still a plain duplicate, and a fresh id applies.
  EXPECT_EQ(apply_approval_callback(*c, "cb-7", first, approval_result::APPROVED, "").value.outcome,
            callback_outcome::DUPLICATE);
  EXPECT_EQ(apply_approval_callback(*c, "cb-8", second, approval_result::APPROVED, "").value.outcome,
            callback_outcome::APPLIED);
}

TEST(ApprovalCallback, ConcurrentDeliveriesApplyOnce) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "mia", "t");
  walk(*c, id, {S::APPROVAL_SENT});
  constexpr int racers = 4;
  std::barrier sync(racers);
  std::atomic<int> applied{0}, duplicate{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < racers; ++i) {
    threads.emplace_back([&, i] {
      auto conn = db.connect();
      sync.arrive_and_wait();
      // Two deliveries of one decision and two of another decision: one decision wins.
      auto r = apply_approval_callback(*conn, "dup-" + std::to_string(i % 2), id,
                                       i % 2 ? approval_result::REJECTED : approval_result::APPROVED, "");
      ASSERT_TRUE(r.ok()) << r.error.message;
      if (r.value.outcome == callback_outcome::APPLIED) ++applied;
      if (r.value.outcome == callback_outcome::DUPLICATE) ++duplicate;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(applied.load(), 1);
  EXPECT_EQ(duplicate.load(), 2);
  EXPECT_EQ(load_operation(*c, id).value.version, 3);
}

TEST(InstanceRepo, TakeOverExpiredOwnersAndPageOwned) {
  test_database db;
  auto c = db.connect();
  ASSERT_EQ(register_instance(*c, "a", 30).value, 1);
  ASSERT_EQ(register_instance(*c, "a", 30).value, 2);  // restart bumps the epoch
  ASSERT_TRUE(register_instance(*c, "b", 30).ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    new_operation op;
    op.operation_id = ids::new_uuid();
    op.subject_id = "s";
    op.target_key = "t" + std::to_string(i);
    op.owner_instance = "a";
    ASSERT_EQ(create_operation(*c, op).value, create_outcome::created);
    ids.push_back(op.operation_id);
  }
  walk(*c, ids[4], {S::APPROVAL_REJECTED});                    // terminal: never taken over
  EXPECT_TRUE(take_over_expired(*c, "b", 100).value.empty());  // a's lease is fresh
  ASSERT_TRUE(heartbeat(*c, "a", 30).ok());
  db.exec("UPDATE instance SET lease_until = NOW(3) - INTERVAL 1 SECOND WHERE instance_id = 'a'");
  auto taken = take_over_expired(*c, "b", 100);
  ASSERT_TRUE(taken.ok()) << taken.error.message;
  ASSERT_EQ(taken.value.size(), 4u);
  EXPECT_EQ(taken.value[0].lease_epoch, 1);
  EXPECT_TRUE(take_over_expired(*c, "c", 100).value.empty());  // b is alive now
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE cause = 'owner lease expired: taken over' "
                      "AND instance_id = 'b' AND from_step = to_step"),
            "4");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE event_actor IS NOT NULL"), "0");

  // The former owner's fenced write fails.
  transition_request t;
  t.operation_id = taken.value[0].operation_id;
  t.expected_version = taken.value[0].version;
  t.from = S::APPROVAL_SENDING;
  t.to = S::APPROVAL_SENT;
  t.fence = owner_fence{"a", 0};
  EXPECT_EQ(transition(*c, t).outcome, db_outcome::preempted);

  auto page1 = list_owned_nonterminal(*c, "b", "", 3);
  ASSERT_EQ(page1.value.size(), 3u);
  auto page2 = list_owned_nonterminal(*c, "b", page1.value.back().operation_id, 3);
  ASSERT_EQ(page2.value.size(), 1u);
  EXPECT_EQ(heartbeat(*c, "zzz", 30).outcome, db_outcome::not_found);
}

TEST(OperationRepo, RetriesAndTheFailureThatEndsAStepAreCountedForThatStep) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "alice", "repo/retries.yaml");
  auto v = walk(*c, id, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED});
  auto row = load_operation(*c, id);
  ASSERT_TRUE(row.ok());
  const auto updated_before = row.value.updated_at_ms;
  const auto events_before = count_events(db, id);

  transition_request retry;
  retry.operation_id = id;
  retry.from = retry.to = S::CREATE_STARTED;
  retry.retry_in_step = true;
  retry.last_error = "GitLab answered 503";
  retry.last_error_status = 503;
  retry.wake_in_ms = 60000;
  for (int i = 0; i < 2; ++i) {
    retry.expected_version = v;
    auto r = transition(*c, retry);
    ASSERT_TRUE(r.ok()) << r.error.message;
    v = r.value;
  }
  // A stale retry (the version moved on) writes nothing.
  retry.expected_version = v - 1;
  EXPECT_EQ(transition(*c, retry).outcome, db_outcome::preempted);

  row = load_operation(*c, id);
  EXPECT_EQ(row.value.step, S::CREATE_STARTED);
  EXPECT_EQ(row.value.attempts, 2);
  EXPECT_EQ(row.value.last_error_status, 503);
  ASSERT_TRUE(row.value.last_error_at_ms);
  ASSERT_TRUE(row.value.next_wake_at_ms);
  EXPECT_EQ(row.value.updated_at_ms, updated_before) << "a retry is not a step change";
  EXPECT_EQ(count_events(db, id), events_before) << "a retry writes no timeline event";
  EXPECT_EQ(db.scalar("SELECT failed_attempts FROM operation_step_attempt WHERE operation_id = '" + id +
                      "' AND step = " + std::to_string(workflow::code_of(S::CREATE_STARTED))),
            "2");

  // The failure that ends the step is its third failed attempt; the new step starts from none.
  transition_request fail;
  fail.operation_id = id;
  fail.expected_version = v;
  fail.from = S::CREATE_STARTED;
  fail.to = S::CREATE_GITLAB_REFUSED;
  fail.cause = "GitLab refused";
  fail.failed_attempt = true;
  fail.last_error = "GitLab answered 422";
  fail.last_error_status = 422;
  fail.clear_wake = true;
  ASSERT_TRUE(transition(*c, fail).ok());
  row = load_operation(*c, id);
  EXPECT_EQ(row.value.attempts, 0);
  EXPECT_EQ(row.value.last_error_status, 422);
  EXPECT_EQ(db.scalar("SELECT CONCAT(failed_attempts, ' ', last_error_status) FROM operation_step_attempt WHERE "
                      "operation_id = '" +
                      id + "' AND step = " + std::to_string(workflow::code_of(S::CREATE_STARTED))),
            "3 422");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_step_attempt WHERE operation_id = '" + id + "'"), "1");

  // A retry can only stay in its step.
  retry.expected_version = v + 1;
  retry.to = S::CREATE_MR_OPENED;
  EXPECT_EQ(transition(*c, retry).outcome, db_outcome::illegal_transition);
}

TEST(TransitionGroup, EachTransitionKeepsItsOwnGuardAndOutcomeInOneCommit) {
  test_database db;
  auto c = db.connect();
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto b = new_op(*c, "bob", "repo/b.yaml");
  auto d = new_op(*c, "dora", "repo/d.yaml");
  // b's guard names a version it is not at; the last names no operation at all.
  std::vector<transition_request> reqs{test::to_approval_sent(a, 1), test::to_approval_sent(b, 7),
                                       test::to_approval_sent(d, 1),
                                       test::to_approval_sent("00000000-0000-0000-0000-000000000000", 1)};
  auto out = transition_group(*c, reqs);
  ASSERT_EQ(out.size(), 4u);
  ASSERT_TRUE(out[0].ok()) << out[0].error.message;
  EXPECT_EQ(out[0].value, 2);
  EXPECT_EQ(out[1].outcome, db_outcome::preempted);
  ASSERT_TRUE(out[2].ok()) << out[2].error.message;
  EXPECT_EQ(out[2].value, 2);
  EXPECT_EQ(out[3].outcome, db_outcome::not_found);
  EXPECT_EQ(load_operation(*c, a).value.step, S::APPROVAL_SENT);
  EXPECT_EQ(load_operation(*c, b).value.step, S::APPROVAL_SENDING);
  EXPECT_EQ(load_operation(*c, b).value.version, 1);
  EXPECT_EQ(load_operation(*c, d).value.approval_id, "AP-" + d.substr(0, 8));
  // Each landed transition wrote its own event (the trigger) and moved its binding.
  EXPECT_EQ(count_events(db, a), "2");
  EXPECT_EQ(count_events(db, b), "1");
  EXPECT_EQ(count_events(db, d), "2");
  EXPECT_EQ(find_binding(*c, "dora", "", "repo/d.yaml").value.phase, phase::APPROVAL_SENT);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE cause = 'approval submitted'"), "2");
  // The acknowledgement list is cleared after the group: a later update on the same session adds
  // nothing to it.
  std::unique_ptr<sql::Statement> st(c->createStatement());
  st->executeUpdate("UPDATE operation SET attempts = attempts + 1 WHERE operation_id = '" + a + "'");
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT @changeflow_ack IS NULL"));
  ASSERT_TRUE(rs->next());
  EXPECT_EQ(rs->getInt(1), 1);
}

TEST(TransitionGroup, IsOneRoundTripAndOneCommitForTheWholeGroup) {
  test_database db;
  auto c = db.connect();
  std::vector<transition_request> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(test::to_approval_sent(new_op(*c, "s" + std::to_string(i), "repo/x.yaml"), 1));
  const auto commits = session_status(*c, "Com_commit");
  auto out = transition_group(*c, reqs);
  for (auto& r : out) ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(session_status(*c, "Com_commit") - commits, 1);
  // Five UPDATEs that set the same columns the same way share one: UPDATE, SET, START, COMMIT,
  // SELECT, SET are six statements in one compound statement, which the server counts as one
  // statement (Questions); a SHOW in between each count.
  const auto before = session_questions(*c);
  const auto statements_before = scripts_sent().compound_statements;
  for (auto& r : reqs) {
    r.expected_version = 2;
    r.from = S::APPROVAL_SENT;
    r.to = S::APPROVAL_SENT;
    r.retry_in_step = true;
    r.last_error = "timeout";
    r.wake_in_ms = 1000;
  }
  out = transition_group(*c, reqs);
  for (auto& r : out) ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(session_questions(*c) - before, 2) << "the group's one compound statement plus this SHOW";
  EXPECT_EQ(scripts_sent().compound_statements - statements_before, 6u) << "six statements inside it";
  // A retry in its step lands as a guarded write too (version + 1, the failed attempt recorded).
  EXPECT_EQ(load_operation(*c, reqs[0].operation_id).value.version, 3);
  EXPECT_EQ(load_operation(*c, reqs[0].operation_id).value.attempts, 1);
}

TEST(TransitionGroup, TransitionsThatShareOneUpdateWriteWhatEachWritesAlone) {
  test_database db;
  auto c = db.connect();
  // Twins: the same requests on two sets of changes, once as one group (where the transitions of a
  // shape share one UPDATE) and once each alone. Four shapes of two: the plain one; a wake-up and
  // attempts; a fenced one with an error text that needs quoting; a retry in its step. In each shape
  // the second one's guard does not hold (a version it is not at, a lease epoch it does not have).
  std::vector<transition_request> grouped, alone;
  std::vector<std::int64_t> updated_before;
  for (int i = 0; i < 8; ++i) {
    for (auto* list : {&grouped, &alone}) {
      auto id = new_op(*c, (list == &grouped ? "g" : "a") + std::to_string(i), "repo/x.yaml");
      // A minute back, so that an updated_at the group moved would show.
      db.exec("UPDATE operation SET updated_at = updated_at - INTERVAL 1 MINUTE WHERE operation_id = '" + id + "'");
      if (list == &grouped) updated_before.push_back(load_operation(*c, id).value.updated_at_ms);
      auto r = test::to_approval_sent(id, 1);
      switch (i / 2) {
        case 0: break;
        case 1:
          r.wake_in_ms = 60'000 + i;
          r.attempts = i;
          break;
        case 2:
          r.fence = owner_fence{"test-instance", i == 5 ? 3 : 0};
          r.instance_id = "test-instance";
          r.last_error = "it's \"quoted\" \\ " + std::to_string(i);
          break;
        default:
          r.to = S::APPROVAL_SENDING;
          r.approval_id.reset();
          r.retry_in_step = true;
          r.wake_in_ms = 5'000;
          r.last_error = "GitLab answered 502";
          r.last_error_status = 502;
          break;
      }
      if (i == 1 || i == 3 || i == 7) r.expected_version = 9;
      list->push_back(r);
    }
  }
  const auto statements_before = scripts_sent().compound_statements;
  auto got = transition_group(*c, grouped);
  EXPECT_EQ(scripts_sent().compound_statements - statements_before, 9u)
      << "SET, START, four shared UPDATEs, SELECT, COMMIT, SET";
  for (std::size_t i = 0; i < grouped.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    auto want = transition(*c, alone[i]);
    ASSERT_EQ(got[i].ok(), want.ok()) << got[i].error.message << " / " << want.error.message;
    EXPECT_EQ(got[i].outcome, want.outcome);
    EXPECT_EQ(got[i].ok(), i % 2 == 0) << "the first of each shape lands, the second's guard does not hold";
    if (want.ok()) {
      EXPECT_EQ(got[i].value, want.value);
    }
    auto g = load_operation(*c, grouped[i].operation_id).value;
    auto a = load_operation(*c, alone[i].operation_id).value;
    EXPECT_EQ(g.step, a.step);
    EXPECT_EQ(g.phase, a.phase);
    EXPECT_EQ(g.version, a.version);
    EXPECT_EQ(g.attempts, a.attempts);
    EXPECT_EQ(g.approval_id.has_value(), a.approval_id.has_value());
    if (g.approval_id && grouped[i].approval_id && got[i].ok()) {
      EXPECT_EQ(*g.approval_id, *grouped[i].approval_id);
    }
    EXPECT_EQ(g.last_error, a.last_error);
    EXPECT_EQ(g.last_error_status, a.last_error_status);
    EXPECT_EQ(g.last_error_at_ms.has_value(), a.last_error_at_ms.has_value());
    EXPECT_EQ(g.next_wake_at_ms.has_value(), a.next_wake_at_ms.has_value());
    if (g.next_wake_at_ms && a.next_wake_at_ms) {
      // The wake-up is counted from the database clock when each was written: moments apart.
      EXPECT_NEAR(static_cast<double>(*g.next_wake_at_ms - *a.next_wake_at_ms), 0.0, 5'000.0);
    }
    // A retry in its step keeps the time of the last step change.
    if (grouped[i].retry_in_step) {
      EXPECT_EQ(g.updated_at_ms, updated_before[i]);
    }
    auto ge = list_events(*c, g.operation_id).value;
    auto ae = list_events(*c, a.operation_id).value;
    ASSERT_EQ(ge.size(), ae.size());
    EXPECT_EQ(ge.back().cause, ae.back().cause);
    EXPECT_EQ(ge.back().actor, ae.back().actor);
    EXPECT_EQ(ge.back().instance_id, ae.back().instance_id);
    EXPECT_EQ(ge.back().to_step, ae.back().to_step);
    EXPECT_EQ(ge.back().version, ae.back().version);
    EXPECT_EQ(db.scalar("SELECT COALESCE(SUM(failed_attempts), 0) FROM operation_step_attempt WHERE operation_id = '" +
                        g.operation_id + "'"),
              db.scalar("SELECT COALESCE(SUM(failed_attempts), 0) FROM operation_step_attempt WHERE operation_id = '" +
                        a.operation_id + "'"));
  }
  EXPECT_EQ(load_operation(*c, grouped[4].operation_id).value.last_error, "it's \"quoted\" \\ 4");
  EXPECT_EQ(load_operation(*c, grouped[6].operation_id).value.attempts, 1) << "the retry counted";
}

TEST(TransitionGroup, AFailingStatementRollsTheGroupBackAndEveryRequestRunsAlone) {
  test_database db;
  auto c = db.connect();
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto b = new_op(*c, "bob", "repo/b.yaml");
  auto d = new_op(*c, "dora", "repo/d.yaml");
  // b's transition fails as a statement (not as a guard): an MR URL longer than its column, which
  // strict mode refuses. Run alone, a and d land and b gets its own error; nothing of b is written.
  auto bad = test::to_approval_sent(b, 1);
  bad.mr_url = std::string(5000, 'u');
  auto out = transition_group(*c, {test::to_approval_sent(a, 1), bad, test::to_approval_sent(d, 1)});
  ASSERT_TRUE(out[0].ok()) << out[0].error.message;
  EXPECT_FALSE(out[1].ok());
  EXPECT_NE(out[1].outcome, db_outcome::preempted);
  ASSERT_TRUE(out[2].ok()) << out[2].error.message;
  EXPECT_EQ(load_operation(*c, a).value.version, 2);
  EXPECT_EQ(load_operation(*c, b).value.version, 1);
  EXPECT_EQ(load_operation(*c, d).value.version, 2);
  EXPECT_EQ(count_events(db, a), "2");
  EXPECT_EQ(count_events(db, b), "1");
  // The session is usable and outside any transaction.
  std::unique_ptr<sql::Statement> st(c->createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT @@in_transaction, @changeflow_ack IS NULL"));
  ASSERT_TRUE(rs->next());
  EXPECT_EQ(rs->getInt(1), 0);
  EXPECT_EQ(rs->getInt(2), 1);
}

TEST(TransitionGroup, ASecondRequestForTheSameOperationAndABatchAdmissionRunAlone) {
  test_database db;
  auto c = db.connect();
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto b = new_op(*c, "bob", "repo/b.yaml");
  auto first = test::to_approval_sent(a, 1);
  auto again = test::to_approval_sent(a, 1);  // the same guard: only one of the two can land
  auto out = transition_group(*c, {first, test::to_approval_sent(b, 1), again});
  ASSERT_TRUE(out[0].ok()) << out[0].error.message;
  ASSERT_TRUE(out[1].ok()) << out[1].error.message;
  EXPECT_EQ(out[2].outcome, db_outcome::preempted);
  EXPECT_EQ(count_events(db, a), "2");
  // An illegal edge is refused before any SQL, the others still land.
  transition_request illegal = test::to_approval_sent(b, 2);
  illegal.from = S::APPROVAL_SENT;
  illegal.to = S::CALLED_BACK;
  auto refused = transition_group(*c, {illegal, test::to_approval_sent(new_op(*c, "carl", "repo/c.yaml"), 1)});
  EXPECT_EQ(refused[0].outcome, db_outcome::illegal_transition);
  EXPECT_TRUE(refused[1].ok()) << refused[1].error.message;
}

namespace {
/// Holds, in the transaction `st` runs, a shared lock on the operation key's entry of `operation_id`
/// alone (the read is covered by that index, so the binding's row itself stays free).
bool hold_operation_key(sql::Statement& st, const std::string& operation_id) {
  std::unique_ptr<sql::ResultSet> held(
      st.executeQuery("SELECT operation_id FROM binding FORCE INDEX (uk_binding_operation) WHERE operation_id = '" +
                      operation_id + "' LOCK IN SHARE MODE"));
  return held->next();
}

/// `create_operation` on a connection of its own, on another thread.
std::future<db_result<create_outcome>> submit_in_background(const test_database& db, new_operation op) {
  return std::async(std::launch::async, [&db, op = std::move(op)] {
    auto s = db.connect();
    return create_operation(*s, op);
  });
}
}  // namespace

// A refused submit reaches the binding only through its relationship key, as its locking read does.
// Through the operation key it would wait for that key's entry, which the bound change's transition
// trigger holds while it waits for the binding row the submit already holds (a deadlock the lifecycle
// suite met). Here another transaction holds the operation key's entry of the bound change (a shared
// lock on that index alone): the refused submit must answer without waiting for it.
TEST(OperationRepo, ARefusedSubmitDoesNotWaitForTheBoundChangesOperationKey) {
  test_database db;
  auto c = db.connect();
  const auto bound = test::new_op(*c, "sam", "limits.yaml");
  auto holder = db.connect();
  std::unique_ptr<sql::Statement> hold(holder->createStatement());
  hold->execute("START TRANSACTION");
  ASSERT_TRUE(hold_operation_key(*hold, bound));
  auto answered = submit_in_background(db, test::new_operation_for("sam", "limits.yaml"));
  const bool in_time =
      changeflow::testing::wait_until([&] { return answered.wait_for(0ms) == std::future_status::ready; }, 20s);
  hold->execute("ROLLBACK");  // lets a submit that waited go on, so it ends either way
  EXPECT_TRUE(in_time) << "the refused submit waited for the operation key's entry";
  auto r = answered.get();
  // A submit that waits for the entry runs into the connection's read timeout first.
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.value, create_outcome::in_progress);
}

// A submission chosen as a deadlock victim runs again instead of answering the client with an error.
// The cycle is made on purpose: a re-apply's binding UPDATE needs the operation key's entry of the
// change it replaces, which another (heavier) transaction holds, and that transaction then asks for
// the binding row the submission holds. InnoDB rolls back the lighter one, the submission; its
// second run waits for the other transaction and then takes the target.
TEST(OperationRepo, ASubmissionChosenAsADeadlockVictimRunsAgain) {
  test_database db;
  auto c = db.connect();
  const auto ended = test::new_op(*c, "rita", "r.yaml");
  db.exec("UPDATE operation SET step = 10301, phase = 'VALIDATED' WHERE operation_id = '" + ended + "'");
  db.exec("UPDATE binding SET phase = 'VALIDATED' WHERE operation_id = '" + ended + "'");
  const auto binding_id = db.scalar("SELECT id FROM binding WHERE operation_id = '" + ended + "'");
  db.exec("CREATE TABLE weight (id INT PRIMARY KEY) ENGINE=InnoDB");
  auto other = db.connect();
  std::unique_ptr<sql::Statement> o(other->createStatement());
  o->execute("START TRANSACTION");
  // Its weight (rows written) makes InnoDB choose the submission as the victim.
  o->execute(
      "INSERT INTO weight WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) "
      "SELECT i FROM n");
  ASSERT_TRUE(hold_operation_key(*o, ended));
  auto again = test::new_operation_for("rita", "r.yaml");
  auto answered = submit_in_background(db, again);
  // The submission runs `statement` (it waits there for a lock held here).
  const auto running = [&](const std::string& statement) {
    return changeflow::testing::wait_until(
        [&] {
          return db.scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE '" +
                           statement + "%'") == "1";
        },
        20s);
  };
  const bool cycle_ready = running("UPDATE binding FORCE INDEX");
  EXPECT_TRUE(cycle_ready) << "the submission never reached its binding UPDATE";
  if (cycle_ready) {
    o->execute("SET SESSION innodb_lock_wait_timeout = 5");  // a cycle InnoDB did not see ends here
    try {
      // Closes the cycle: the submission holds this row and waits for the key held here.
      std::unique_ptr<sql::ResultSet> row(
          o->executeQuery("SELECT id FROM binding WHERE id = " + binding_id + " FOR UPDATE"));
      // The submission was rolled back; its second run waits for this row at its first read.
      EXPECT_TRUE(running("SELECT operation_id, phase INTO")) << "the submission did not run again";
    } catch (const sql::SQLException& e) {
      ADD_FAILURE() << "this transaction lost the cycle (" << e.getErrorCode() << "): the test proves nothing";
    }
  }
  o->execute("ROLLBACK");
  auto r = answered.get();
  ASSERT_TRUE(r.ok()) << r.error.code << " " << r.error.message;
  EXPECT_EQ(r.value, create_outcome::created);
  EXPECT_EQ(db.scalar("SELECT operation_id FROM binding WHERE subject_id = 'rita' AND target_key = 'r.yaml'"),
            again.operation_id);
}

// The row is read by column position after the first: every field must come from its own column.
// Each column is given a value no other column has, written with plain SQL, then read back.
TEST(OperationRepo, EveryFieldOfARowIsReadFromItsOwnColumn) {
  test_database db;
  auto c = db.connect();
  auto op = test::new_operation_for("dana", "t-columns", "dana@example.com", "team/columns");
  ASSERT_EQ(create_operation(*c, op).value, create_outcome::created);
  const auto other = ids::new_uuid();
  const auto later = ids::new_uuid();
  std::unique_ptr<sql::Statement> st(c->createStatement());
  st->execute("SET SESSION foreign_key_checks = 0, time_zone = '+00:00'");
  st->execute(
      "UPDATE operation SET step = " + std::to_string(workflow::code_of(S::HANDLE_APPROVED)) +
      ", phase = 'MERGING', version = 41, title = 'the title', payload = '{\"files\":[]}', mr_iid = 4242, "
      "mr_url = 'https://g/mr/4242', approval_id = 'approval-77', attempts = 3, batch_attempts = 5, "
      "next_wake_at = '2031-02-03 04:05:06.789', owner_instance = 'instance-x', lease_epoch = 11, "
      "last_error = 'the error', created_at = '2030-01-02 03:04:05.006', updated_at = '2030-06-07 08:09:10.011', "
      "requester = 'req@example.com', repository = 'team/other', target_branch = 'release', revert_of = '" +
      other + "', reverted_by = '" + later +
      "', last_error_status = 502, last_error_at = '2030-07-08 09:10:11.012', deploy_reported = 1 "
      "WHERE operation_id = '" +
      op.operation_id + "'");
  st->execute("SET SESSION foreign_key_checks = 1");
  auto row = load_operation(*c, op.operation_id);
  ASSERT_TRUE(row.ok());
  const auto& r = row.value;
  EXPECT_EQ(r.operation_id, op.operation_id);
  EXPECT_EQ(r.subject_id, op.subject_id);
  EXPECT_EQ(r.target_key, op.target_key);
  EXPECT_EQ(r.flow, std::string(workflow::to_string(op.flow)));
  EXPECT_EQ(r.step, S::HANDLE_APPROVED);
  EXPECT_EQ(r.phase, phase::MERGING);
  EXPECT_EQ(r.version, 41);
  EXPECT_EQ(r.title, "the title");
  EXPECT_EQ(r.payload_json, "{\"files\":[]}");
  EXPECT_EQ(r.mr_iid, 4242);
  EXPECT_EQ(r.mr_url, "https://g/mr/4242");
  EXPECT_EQ(r.approval_id, "approval-77");
  EXPECT_EQ(r.batch_id, std::nullopt);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.batch_attempts, 5);
  EXPECT_EQ(r.next_wake_at_ms, 1927857906789LL);
  EXPECT_EQ(r.owner_instance, "instance-x");
  EXPECT_EQ(r.lease_epoch, 11);
  EXPECT_EQ(r.last_error, "the error");
  EXPECT_EQ(r.created_at_ms, 1893553445006LL);
  EXPECT_EQ(r.updated_at_ms, 1907050150011LL);
  EXPECT_EQ(r.requester, "req@example.com");
  EXPECT_EQ(r.repository, "team/other");
  EXPECT_EQ(r.target_branch, "release");
  EXPECT_EQ(r.revert_of, other);
  EXPECT_EQ(r.reverted_by, later);
  EXPECT_EQ(r.last_error_status, 502);
  EXPECT_EQ(r.last_error_at_ms, 1909732211012LL);
  EXPECT_TRUE(r.deploy_reported);
}
