#include "persistence/batch_repo.hpp"
#include "persistence/instance_repo.hpp"

#include "base/ids.hpp"
#include "persistence/repo_test_support.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

#include <cppconn/statement.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <barrier>
#include <map>
#include <mutex>
#include <thread>

using namespace changeflow;
using namespace changeflow::persistence;
using changeflow::testing::test_database;
using changeflow::testing::wait_until;
using namespace std::chrono_literals;

namespace {
/// Rows are claimable once admitted before the current millisecond: age them explicitly.
void age_waiting(const test_database& db) {
  db.exec(
      "UPDATE merge_batch_request SET created_at = created_at - INTERVAL 1 SECOND WHERE batch_id "
      "IS NULL");
}
std::vector<std::string> admit_many(sql::Connection& c, int n, const batch_partition& where = {}) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    ids.push_back(ids::new_uuid());
    EXPECT_TRUE(test::admit_bare(c, ids.back(), where));
  }
  return ids;
}
}  // namespace

// I1 + I2: many claimers race while admissions keep arriving. Each claimer, while it holds a batch,
// sees exactly one active batch; every request ends up claimed exactly once. The claimers must
// really overlap, however fast or slow the machine: the first claim to reach its members keeps its
// transaction open until another claimer's slot INSERT waits on it, so that claimer is told
// slot_occupied on every run; the other rounds race freely.
TEST(BatchRepo, ConcurrentClaimersKeepOneActiveBatchAndNeverDoubleClaim) {
  test_database db;
  constexpr int total = 300;
  constexpr int claimers = 4;
  std::atomic<int> admitted{0}, claimed_total{0}, occupied_seen{0}, batches{0};
  std::atomic<bool> failure{false}, overlap_forced{false}, rival_waited{false};
  std::mutex mu;
  std::string why;  // first failure, under mu
  auto fail = [&](std::string reason) {
    std::lock_guard lock(mu);
    if (!failure.exchange(true)) why = std::move(reason);
  };
  std::map<std::string, int> claims_per_op;
  // The slot row is inserted but not committed yet, so a rival's INSERT of the slot must wait on
  // its unique key; once this claim commits, that rival gets a duplicate key (slot_occupied).
  const std::string rival_waits_on_slot = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '" +
                                          db.name() + "' AND INFO LIKE 'INSERT INTO merge_batch (%'";
  const claim_hook hold_until_a_rival_waits = [&](claim_stage stage) {
    if (stage != claim_stage::members_claimed || overlap_forced.exchange(true)) return;
    rival_waited = wait_until([&] { return db.scalar(rival_waits_on_slot) != "0"; }, 60s);
  };

  std::thread admitter([&] {
    auto c = db.connect();
    for (int i = 0; i < total; ++i) {
      if (!test::admit_bare(*c, ids::new_uuid())) fail("admit: duplicate of a fresh id");
      ++admitted;
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < claimers; ++t) {
    threads.emplace_back([&] {
      auto c = db.connect();
      // Bounded loop: a broken claim must end the test, not hang it.
      for (int round = 0; round < 200000 && claimed_total < total && !failure; ++round) {
        auto r = claim_round(*c, {}, 7, hold_until_a_rival_waits);
        if (!r.ok()) {
          if (r.outcome != db_outcome::retryable) fail("claim: " + r.error.message);
          continue;
        }
        if (r.value.kind == claim_kind::slot_occupied) ++occupied_seen;
        if (r.value.kind != claim_kind::claimed) continue;
        ++batches;
        std::unique_ptr<sql::Statement> st(c->createStatement());
        std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT COUNT(*) FROM merge_batch WHERE active_slot = 1"));
        rs->next();
        if (rs->getInt(1) != 1) fail("active batches: " + std::to_string(rs->getInt(1)));
        {
          std::lock_guard lock(mu);
          for (auto& m : r.value.members) ++claims_per_op[m.operation_id];
        }
        claimed_total += static_cast<int>(r.value.members.size());
        auto f = finish_batch(*c, r.value.batch_id, batch_status::RUNNING, batch_status::SUCCEEDED);
        if (!f.ok()) fail("finish: " + f.error.message);
      }
    });
  }
  admitter.join();
  for (auto& t : threads) t.join();
  ASSERT_FALSE(failure.load()) << why;
  ASSERT_TRUE(rival_waited.load())
      << "no other claimer tried to take the slot while a claim transaction was open (waited "
         "60 s): the claimers never overlapped, so the test proved nothing";
  EXPECT_GE(occupied_seen.load(), 1) << "a claimer waited on an open claim's slot, yet no claim was told slot_occupied";
  EXPECT_EQ(claimed_total.load(), total);
  EXPECT_EQ(claims_per_op.size(), static_cast<std::size_t>(total));
  for (auto& [op, n] : claims_per_op) ASSERT_EQ(n, 1) << op;
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"), "0");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM (SELECT operation_id FROM merge_batch_history WHERE "
                      "event = 'CLAIMED' "
                      "GROUP BY operation_id HAVING COUNT(*) > 1) d"),
            "0");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch"), std::to_string(batches.load()));
  RecordProperty("slot_occupied_seen", occupied_seen.load());
}

// I1 in isolation: claimers released together while nobody finishes; the slot admits exactly one.
TEST(BatchRepo, RacingClaimersGetOneBatchOthersSlotOccupied) {
  test_database db;
  constexpr int racers = 6;
  std::vector<std::unique_ptr<sql::Connection>> conns;
  for (int i = 0; i < racers; ++i) conns.push_back(db.connect());
  for (int round = 0; round < 10; ++round) {
    admit_many(*conns[0], 2 * racers);
    age_waiting(db);
    std::barrier sync(racers);
    std::vector<claim_result> results(racers);
    std::vector<std::thread> threads;
    for (int i = 0; i < racers; ++i) {
      threads.emplace_back([&, i] {
        sync.arrive_and_wait();
        auto r = claim_round(*conns[i], {}, 2);
        ASSERT_TRUE(r.ok()) << r.error.message;
        results[i] = r.value;
      });
    }
    for (auto& t : threads) t.join();
    int claimed = 0;
    std::int64_t winner = 0;
    for (auto& r : results) {
      if (r.kind == claim_kind::claimed) {
        ++claimed;
        winner = r.batch_id;
      } else {
        EXPECT_EQ(r.kind, claim_kind::slot_occupied);
      }
    }
    ASSERT_EQ(claimed, 1) << "round " << round;
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 4)"), "1");
    ASSERT_TRUE(finish_batch(*conns[0], winner, batch_status::RUNNING, batch_status::SUCCEEDED).ok());
  }
}

// I1 per partition: racers claim in two partitions at once. Within a partition exactly one wins and
// the others are told slot_occupied; across partitions both win. The racers are proven to have
// raced: each winner keeps its claim transaction open (slot row inserted, not committed) until a
// rival of its own partition is seen waiting on its slot's unique key, or has been refused while
// the winner holds it (picked as a deadlock victim of the unique check's locks, which a loaded
// machine makes more likely than a wait the test can observe). The two winners are not
// required to hold their slots at the same moment: InnoDB's duplicate-key check takes gap locks on
// the slot index even under READ COMMITTED, so a rival waiting in one partition can briefly hold up
// the other partition's slot INSERT (for as long as the first claim transaction lasts, milliseconds
// outside this test). That partitions do batch in parallel is asserted end to end, from the
// simulator's request log, in tests/e2e/repositories_test.
TEST(BatchRepo, RacingClaimersOneWinnerPerPartitionBothPartitionsWin) {
  test_database db;
  const std::vector<batch_partition> partitions = {{"team/alpha", "main"}, {"team/beta", "main"}};
  constexpr int per_partition = 3;
  constexpr int racers = per_partition * 2;
  std::vector<std::unique_ptr<sql::Connection>> conns;
  for (int i = 0; i < racers; ++i) conns.push_back(db.connect());
  const auto rival_waits_on = [&](const batch_partition& p) {
    return "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '" + db.name() +
           "' AND INFO LIKE 'INSERT INTO merge_batch (%''" + p.repository + "''%'";
  };
  for (int round = 0; round < 5; ++round) {
    for (const auto& p : partitions) admit_many(*conns[0], 2 * per_partition, p);
    age_waiting(db);
    std::barrier sync(racers);
    std::atomic<int> rival_waited{0};
    // Rivals answered slot_occupied, per partition. A rival answered while its partition's winner
    // holds the uncommitted slot raced it too: InnoDB may pick it as a deadlock victim (the unique
    // check's shared locks, here also across partitions) instead of letting it wait.
    std::array<std::atomic<int>, 2> refused{};
    std::vector<claim_result> results(racers);
    std::vector<std::thread> threads;
    for (int i = 0; i < racers; ++i) {
      threads.emplace_back([&, i] {
        const auto& where = partitions[i % 2];
        const claim_hook hold = [&](claim_stage stage) {
          if (stage != claim_stage::members_claimed) return;
          if (wait_until([&] { return refused[i % 2] > 0 || db.scalar(rival_waits_on(where)) != "0"; }, 30s)) {
            ++rival_waited;
          }
        };
        sync.arrive_and_wait();
        auto r = claim_round(*conns[i], where, 2, hold);
        ASSERT_TRUE(r.ok()) << r.error.message;
        results[i] = r.value;
        if (r.value.kind == claim_kind::slot_occupied) ++refused[i % 2];
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(rival_waited.load(), 2) << "round " << round
                                      << ": no rival of a partition waited on, or was refused by, its winner's "
                                         "held slot (no overlap)";
    std::map<std::string, int> winners;
    std::vector<std::int64_t> batch_ids;
    for (int i = 0; i < racers; ++i) {
      const auto& r = results[i];
      if (r.kind == claim_kind::claimed) {
        ++winners[partitions[i % 2].repository];
        batch_ids.push_back(r.batch_id);
      } else {
        EXPECT_EQ(r.kind, claim_kind::slot_occupied) << "round " << round << " racer " << i;
      }
    }
    EXPECT_EQ(winners["team/alpha"], 1) << "round " << round;
    EXPECT_EQ(winners["team/beta"], 1) << "round " << round;
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 4)"), "2");
    // Each batch carries only its own partition's waiting rows.
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request r JOIN merge_batch b ON b.id = r.batch_id "
                        "WHERE b.status = 1 AND (r.repository <> b.repository OR r.target_branch <> b.target_branch)"),
              "0");
    for (auto id : batch_ids) {
      ASSERT_TRUE(finish_batch(*conns[0], id, batch_status::RUNNING, batch_status::SUCCEEDED).ok());
    }
  }
}

TEST(BatchRepo, WaitingPartitionsAndActiveBatchesArePerPartition) {
  test_database db;
  auto c = db.connect();
  const batch_partition main_a{"team/a", "main"}, release_a{"team/a", "release"}, main_b{"team/b", "main"};
  admit_many(*c, 1, main_a);
  admit_many(*c, 2, release_a);
  age_waiting(db);
  auto listed = waiting_partitions(*c);
  ASSERT_TRUE(listed.ok()) << listed.error.message;
  EXPECT_EQ(listed.value, (std::vector<batch_partition>{main_a, release_a}));
  // A partition with nothing waiting claims nothing and holds no slot.
  EXPECT_EQ(claim_round(*c, main_b, 10).value.kind, claim_kind::empty);
  auto a = claim_round(*c, main_a, 10);
  auto r = claim_round(*c, release_a, 10);
  ASSERT_EQ(a.value.kind, claim_kind::claimed);
  ASSERT_EQ(r.value.kind, claim_kind::claimed);
  EXPECT_EQ(r.value.members.size(), 2u);
  EXPECT_EQ(claim_round(*c, main_a, 10).value.kind, claim_kind::slot_occupied);
  auto active = own_active_batches(*c, "");  // claimed without an instance: nobody else's
  ASSERT_TRUE(active.ok());
  ASSERT_EQ(active.value.size(), 2u);
  EXPECT_EQ(active.value[0].partition, main_a);
  EXPECT_EQ(active.value[1].partition, release_a);
  EXPECT_TRUE(waiting_partitions(*c).value.empty());
}

// I3: admissions complete while a claim transaction is open, at every step of it.
TEST(BatchRepo, AdmissionIsNotBlockedByAnOpenClaim) {
  test_database db;
  auto claimer = db.connect();
  auto admitter = db.connect();
  {
    // Fail fast instead of waiting 50 s if admission ever queues behind the claim's locks.
    std::unique_ptr<sql::Statement> st(admitter->createStatement());
    st->execute("SET SESSION innodb_lock_wait_timeout = 1");
  }
  admit_many(*claimer, 3);
  age_waiting(db);
  std::map<claim_stage, bool> during;  // a lock wait would throw out of the hook and fail the claim
  auto r = claim_round(*claimer, {}, 10,
                       [&](claim_stage stage) { during[stage] = test::admit_bare(*admitter, ids::new_uuid()); });
  ASSERT_TRUE(r.ok()) << r.error.message;
  ASSERT_EQ(r.value.kind, claim_kind::claimed);
  // The row admitted right after the slot was taken may be old enough for this claim's read.
  const auto claimed = r.value.members.size();
  EXPECT_TRUE(claimed == 3u || claimed == 4u) << claimed;
  ASSERT_EQ(during.size(), 3u);
  for (auto& [stage, a] : during) EXPECT_TRUE(a) << static_cast<int>(stage);
  // Every admission landed; those the claim did not take wait for the next round.
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request"), "6");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"), std::to_string(6 - claimed));
}

// I4: concurrent duplicate admissions -> one row.
TEST(BatchRepo, ConcurrentDuplicateAdmissionsAdmitOnce) {
  test_database db;
  constexpr int racers = 8;
  for (int round = 0; round < 10; ++round) {
    const auto op = ids::new_uuid();
    std::barrier sync(racers);
    std::atomic<int> admitted{0}, already{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < racers; ++i) {
      threads.emplace_back([&] {
        auto c = db.connect();
        sync.arrive_and_wait();
        (test::admit_bare(*c, op) ? admitted : already)++;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(admitted.load(), 1);
    EXPECT_EQ(already.load(), racers - 1);
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = '" + op + "'"), "1");
  }
}

TEST(BatchRepo, EmptyClaimLeavesNoBatchRow) {
  test_database db;
  auto c = db.connect();
  EXPECT_TRUE(waiting_partitions(*c).value.empty());
  auto r = claim_round(*c, {}, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value.kind, claim_kind::empty);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch"), "0");
  // Admitted in this very millisecond: not claimable yet, and the slot is still not held.
  test::admit_bare(*c, ids::new_uuid());
  EXPECT_EQ(waiting_partitions(*c).value.size(), 1u);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch WHERE active_slot = 1"), "0");
}

TEST(BatchRepo, TerminalStatusReleasesTheSlotBlockedKeepsIt) {
  test_database db;
  auto c = db.connect();
  admit_many(*c, 2);
  age_waiting(db);
  auto first = claim_round(*c, {}, 1);
  ASSERT_EQ(first.value.kind, claim_kind::claimed);
  EXPECT_EQ(claim_round(*c, {}, 1).value.kind, claim_kind::slot_occupied);

  const auto id = first.value.batch_id;
  ASSERT_TRUE(finish_batch(*c, id, batch_status::RUNNING, batch_status::BLOCKED, "pipeline unknown").ok());
  EXPECT_EQ(claim_round(*c, {}, 1).value.kind, claim_kind::slot_occupied);  // BLOCKED holds the slot
  EXPECT_EQ(finish_batch(*c, id, batch_status::RUNNING, batch_status::FAILED).outcome, db_outcome::preempted);
  ASSERT_TRUE(finish_batch(*c, id, batch_status::BLOCKED, batch_status::SUCCEEDED).ok());
  auto b = load_batch(*c, id);
  EXPECT_EQ(b.value.status, batch_status::SUCCEEDED);
  EXPECT_EQ(b.value.failure_reason, "pipeline unknown");
  EXPECT_EQ(b.value.members.size(), 1u);

  auto second = claim_round(*c, {}, 1);
  ASSERT_EQ(second.value.kind, claim_kind::claimed);
  ASSERT_TRUE(finish_batch(*c, second.value.batch_id, batch_status::RUNNING, batch_status::FAILED, "x").ok());
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch WHERE active_slot = 1"), "0");
  EXPECT_EQ(list_batches(*c, 0, 10).value.size(), 2u);
}

TEST(BatchRepo, SettleFailedBatchRunsOnceAndRequeuesMembers) {
  test_database db;
  auto c = db.connect();
  auto ops = admit_many(*c, 3);
  age_waiting(db);
  auto r = claim_round(*c, {}, 10);
  ASSERT_EQ(r.value.kind, claim_kind::claimed);
  auto settled = settle_failed_batch(*c, r.value.batch_id, batch_status::RUNNING, member_reset::requeue, "MR closed");
  ASSERT_TRUE(settled.ok()) << settled.error.message;
  EXPECT_EQ(settled.value, 3);
  // A second settler (timeout sweep racing the task) is preempted and changes nothing.
  auto again = settle_failed_batch(*c, r.value.batch_id, batch_status::RUNNING, member_reset::remove, "sweep");
  EXPECT_EQ(again.outcome, db_outcome::preempted);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"), "3");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_history WHERE event = 'REQUEUED'"), "3");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_history WHERE event = 'REMOVED'"), "0");

  // Requeued members keep their place and are claimed by the next batch.
  auto next = claim_round(*c, {}, 10);
  ASSERT_EQ(next.value.kind, claim_kind::claimed);
  ASSERT_EQ(next.value.members.size(), 3u);
  EXPECT_EQ(next.value.members[0].operation_id, ops[0]);
  ASSERT_TRUE(settle_failed_batch(*c, next.value.batch_id, batch_status::RUNNING, member_reset::remove, "gone").ok());
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request"), "0");
}

TEST(BatchRepo, BisectionClaimsOneSplitGroupAtATime) {
  test_database db;
  auto c = db.connect();
  auto ops = admit_many(*c, 4);
  age_waiting(db);
  auto r = claim_round(*c, {}, 10);
  ASSERT_EQ(r.value.members.size(), 4u);
  auto q = requeue_members(*c, r.value.batch_id, {{ops[0], ops[1]}, {ops[2]}}, "pipeline failed: bisect");
  ASSERT_TRUE(q.ok()) << q.error.message;
  EXPECT_EQ(q.value, 3);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = '" + ops[3] + "'"), "0");

  auto half = claim_round(*c, {}, 10);
  ASSERT_EQ(half.value.kind, claim_kind::claimed);
  ASSERT_EQ(half.value.members.size(), 2u);
  EXPECT_EQ(half.value.members[0].operation_id, ops[0]);
  EXPECT_EQ(half.value.members[1].operation_id, ops[1]);
  ASSERT_TRUE(finish_batch(*c, half.value.batch_id, batch_status::RUNNING, batch_status::SUCCEEDED).ok());
  auto other = claim_round(*c, {}, 10);
  ASSERT_EQ(other.value.members.size(), 1u);
  EXPECT_EQ(other.value.members[0].operation_id, ops[2]);
}

TEST(BatchRepo, SweepFindsOnlyOldRunningBatches) {
  test_database db;
  auto c = db.connect();
  admit_many(*c, 1);
  age_waiting(db);
  auto r = claim_round(*c, {}, 10);
  ASSERT_EQ(r.value.kind, claim_kind::claimed);
  EXPECT_TRUE(sweep_running_older_than(*c, 600).value.empty());
  db.exec("UPDATE merge_batch SET created_at = NOW(3) - INTERVAL 700 SECOND");
  EXPECT_EQ(sweep_running_older_than(*c, 600).value, std::vector<std::int64_t>{r.value.batch_id});
  ASSERT_TRUE(record_batch_mr(*c, r.value.batch_id, 42, "batch/1", "http://mr/42").ok());
  EXPECT_EQ(load_batch(*c, r.value.batch_id).value.mr_iid, 42);
}

// A batch is driven by the instance that claimed it. Another instance takes it over only when the
// owner's lease has expired (or it has no owner), and then exactly one instance gets it; a live
// owner's batch is never handed to a peer that starts up or runs a round.
TEST(BatchRepo, ABatchIsTakenOverOnlyFromAnOwnerWhoseLeaseExpired) {
  test_database db;
  auto c = db.connect();
  for (const char* id : {"inst-a", "inst-b", "inst-c"}) ASSERT_TRUE(register_instance(*c, id, 60).ok());
  const batch_partition main_a{"team/a", "main"}, release_a{"team/a", "release"}, main_b{"team/b", "main"};
  admit_many(*c, 2, main_a);
  admit_many(*c, 1, release_a);
  admit_many(*c, 1, main_b);
  age_waiting(db);
  auto by_a = claim_round(*c, main_a, 10, {}, {}, "inst-a");
  auto by_b = claim_round(*c, release_a, 10, {}, {}, "inst-b");
  auto unowned = claim_round(*c, main_b, 10);  // no instance: adoptable by the first to ask
  ASSERT_EQ(by_a.value.kind, claim_kind::claimed);
  ASSERT_EQ(by_b.value.kind, claim_kind::claimed);
  ASSERT_EQ(unowned.value.kind, claim_kind::claimed);
  EXPECT_EQ(load_batch(*c, by_a.value.batch_id).value.owner_instance.value_or(""), "inst-a");
  EXPECT_FALSE(load_batch(*c, unowned.value.batch_id).value.owner_instance.has_value());

  const auto ids_of = [](const db_result<std::vector<batch_row>>& r) {
    EXPECT_TRUE(r.ok()) << r.error.message;
    std::vector<std::int64_t> out;
    for (const auto& b : r.value) out.push_back(b.id);
    return out;
  };
  // Both owners live: each gets its own; the batch without an owner goes to the first who asks.
  EXPECT_EQ(ids_of(own_active_batches(*c, "inst-b")),
            (std::vector<std::int64_t>{by_b.value.batch_id, unowned.value.batch_id}));
  EXPECT_EQ(ids_of(own_active_batches(*c, "inst-a")), std::vector<std::int64_t>{by_a.value.batch_id});
  EXPECT_TRUE(ids_of(own_active_batches(*c, "inst-c")).empty()) << "a live peer's batch was taken";
  auto not_mine = own_batch(*c, by_a.value.batch_id, "inst-c");
  ASSERT_TRUE(not_mine.ok()) << not_mine.error.message;
  EXPECT_FALSE(not_mine.value);
  EXPECT_EQ(load_batch(*c, by_a.value.batch_id).value.owner_instance.value_or(""), "inst-a");

  // inst-a stops (its lease ends now): the first peer to ask takes its batch, the next finds it owned.
  ASSERT_TRUE(mark_instance_stopped(*c, "inst-a").ok());
  auto taken = own_batch(*c, by_a.value.batch_id, "inst-c");
  ASSERT_TRUE(taken.ok()) << taken.error.message;
  EXPECT_TRUE(taken.value);
  EXPECT_EQ(ids_of(own_active_batches(*c, "inst-b")),
            (std::vector<std::int64_t>{by_b.value.batch_id, unowned.value.batch_id}));
  EXPECT_EQ(ids_of(own_active_batches(*c, "inst-c")), std::vector<std::int64_t>{by_a.value.batch_id});

  // inst-b's lease expires without a stop (it died): its batches go to the next peer that asks.
  db.exec("UPDATE instance SET lease_until = NOW(3) - INTERVAL 1 SECOND WHERE instance_id = 'inst-b'");
  EXPECT_EQ(ids_of(own_active_batches(*c, "inst-c")),
            (std::vector<std::int64_t>{by_a.value.batch_id, by_b.value.batch_id, unowned.value.batch_id}));
  // A finished batch is nobody's to drive.
  ASSERT_TRUE(finish_batch(*c, by_a.value.batch_id, batch_status::RUNNING, batch_status::SUCCEEDED, "").ok());
  EXPECT_EQ(ids_of(own_active_batches(*c, "inst-c")),
            (std::vector<std::int64_t>{by_b.value.batch_id, unowned.value.batch_id}));
}
