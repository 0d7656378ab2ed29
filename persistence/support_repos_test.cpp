// Idempotency records, audit log and deploy callbacks.
#include "persistence/audit_repo.hpp"
#include "persistence/callback_repo.hpp"
#include "persistence/idempotency_repo.hpp"

#include "tests/support/test_db.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <thread>

using namespace changeflow::persistence;
using changeflow::testing::test_database;

namespace {
// No owner recorded: only the in-flight deadline could free a record, and these tests never reach
// it (takeovers: idempotency_repo_test.cpp).
const idem_owner owner{"", std::chrono::hours(1)};
}  // namespace

TEST(Idempotency, ConcurrentBeginHasOneFreshWinnerOthersSeeIt) {
  test_database db;
  constexpr int racers = 8;
  for (int round = 0; round < 10; ++round) {
    const std::string key = "op-" + std::to_string(round);
    std::barrier sync(racers);
    std::atomic<int> fresh{0}, saw_winner{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < racers; ++i) {
      threads.emplace_back([&, i] {
        auto c = db.connect();
        const std::string fp(64, static_cast<char>('a' + i));
        sync.arrive_and_wait();
        auto r = idem_begin(*c, key, fp, 3600, owner);
        ASSERT_TRUE(r.ok()) << r.error.message;
        if (r.value.fresh) {
          ++fresh;
        } else {
          ASSERT_TRUE(r.value.existing);
          EXPECT_EQ(r.value.existing->state, idem_state::IN_FLIGHT);
          // The winner's fingerprint is what the database holds.
          EXPECT_EQ(r.value.existing->fingerprint,
                    db.scalar("SELECT fingerprint FROM idempotency_record WHERE idem_key = '" + key + "'"));
          ++saw_winner;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(fresh.load(), 1);
    EXPECT_EQ(saw_winner.load(), racers - 1);
  }
}

TEST(Idempotency, CompleteStoresTheResponseForReplays) {
  test_database db;
  auto c = db.connect();
  const std::string fp(64, 'f');
  ASSERT_TRUE(idem_begin(*c, "k", fp, 60, owner).value.fresh);
  ASSERT_TRUE(idem_complete(*c, "k", 202, R"({"code":"ACCEPTED"})").ok());
  EXPECT_EQ(idem_complete(*c, "k", 500, "").outcome, db_outcome::preempted);
  auto replay = idem_begin(*c, "k", fp, 60, owner);
  ASSERT_FALSE(replay.value.fresh);
  EXPECT_EQ(replay.value.existing->state, idem_state::COMPLETED);
  EXPECT_EQ(replay.value.existing->status_code, 202);
  EXPECT_EQ(replay.value.existing->response_body, R"({"code":"ACCEPTED"})");

  ASSERT_TRUE(idem_begin(*c, "k2", fp, 60, owner).value.fresh);
  ASSERT_TRUE(idem_abandon(*c, "k2").ok());
  EXPECT_TRUE(idem_begin(*c, "k2", fp, 60, owner).value.fresh);
}

TEST(Idempotency, ExpiryCleanupDeletesOnlyExpiredRows) {
  test_database db;
  auto c = db.connect();
  const std::string fp(64, 'f');
  for (auto key : {"old1", "old2", "live"}) ASSERT_TRUE(idem_begin(*c, key, fp, 3600, owner).value.fresh);
  db.exec(
      "UPDATE idempotency_record SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE idem_key LIKE "
      "'old%'");
  auto r = idem_delete_expired(*c, 100);
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.value, 2);
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(idem_key) FROM idempotency_record"), "live");
  EXPECT_EQ(idem_delete_expired(*c, 100).value, 0);

  ASSERT_TRUE(idem_begin(*c, "again", fp, 3600, owner).value.fresh);
  db.exec(
      "UPDATE idempotency_record SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE idem_key = "
      "'again'");
  EXPECT_TRUE(idem_begin(*c, "again", fp, 3600, owner).value.fresh);  // expired row replaced, not a conflict
}

TEST(Audit, DuplicateDedupKeyIsAlreadyRecorded) {
  test_database db;
  auto c = db.connect();
  audit_entry e{"root", "force_fail", "op-1", R"({"reason":"***"})", "ok", "req-1"};
  EXPECT_TRUE(insert_audit(*c, e).value);
  e.outcome = "overwritten?";
  auto again = insert_audit(*c, e);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again.value);
  e.dedup_key.reset();
  EXPECT_TRUE(insert_audit(*c, e).value);
  EXPECT_TRUE(insert_audit(*c, e).value);
  auto rows = list_audit(*c, 0, 10);
  ASSERT_EQ(rows.value.size(), 3u);
  EXPECT_EQ(rows.value.back().entry.outcome, "ok");  // the first record was kept as written
}
