// Taking over the idempotency record of a request that died between idem_begin and idem_complete:
// when a retry may, when it may not, and that racing retries get exactly one winner.
#include "persistence/idempotency_repo.hpp"
#include "persistence/instance_repo.hpp"

#include "tests/support/test_db.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <functional>
#include <thread>

using namespace changeflow::persistence;
using changeflow::testing::test_database;
using namespace std::chrono_literals;

namespace {

const std::string fp(64, 'f');
const idem_owner first_owner{"inst-first", 60s};
const idem_owner retry_owner{"inst-retry", 60s};

/// Registers both instances with a minute of lease and begins `key` as first_owner.
void begin_as_first(const test_database& db, sql::Connection& c, const std::string& key) {
  ASSERT_TRUE(register_instance(c, first_owner.instance_id, 60).ok());
  ASSERT_TRUE(register_instance(c, retry_owner.instance_id, 60).ok());
  auto begun = idem_begin(c, key, fp, 3600, first_owner);
  ASSERT_TRUE(begun.ok()) << begun.error.message;
  ASSERT_TRUE(begun.value.fresh);
  ASSERT_EQ(db.scalar("SELECT owner_instance FROM idempotency_record WHERE idem_key = '" + key + "'"),
            first_owner.instance_id);
}

std::string column(const test_database& db, const std::string& key, const std::string& col) {
  return db.scalar("SELECT " + col + " FROM idempotency_record WHERE idem_key = '" + key + "'");
}

}  // namespace

TEST(IdempotencyTakeover, LiveOwnerWithinItsDeadlineKeepsTheKey) {
  test_database db;
  auto c = db.connect();
  begin_as_first(db, *c, "k");
  auto again = idem_begin(*c, "k", fp, 3600, retry_owner);
  ASSERT_TRUE(again.ok()) << again.error.message;
  EXPECT_FALSE(again.value.fresh);
  EXPECT_FALSE(again.value.taken_over);
  ASSERT_TRUE(again.value.existing);
  EXPECT_EQ(again.value.existing->state, idem_state::IN_FLIGHT);
  EXPECT_FALSE(again.value.existing->reclaimable);
  EXPECT_EQ(column(db, "k", "owner_instance"), first_owner.instance_id);
  EXPECT_EQ(column(db, "k", "takeovers"), "0");
}

// Every way the first request can be dead, each judged with the database clock.
TEST(IdempotencyTakeover, DeadRequestIsTakenOverByTheSameRequest) {
  struct death {
    const char* name;
    std::function<void(const test_database&, sql::Connection&)> kill;
  };
  const death deaths[] = {
      {"in-flight deadline passed (owner alive)",
       [](const test_database& db, sql::Connection&) {
         db.exec("UPDATE idempotency_record SET in_flight_until = NOW(3) - INTERVAL 1 SECOND");
       }},
      {"owner lease expired",
       [](const test_database& db, sql::Connection&) {
         db.exec(
             "UPDATE instance SET lease_until = NOW(3) - INTERVAL 1 SECOND WHERE instance_id = "
             "'inst-first'");
       }},
      {"owner stopped",
       [](const test_database&, sql::Connection& c) {
         ASSERT_TRUE(mark_instance_stopped(c, first_owner.instance_id).ok());
       }},
      {"owner restarted under the same id (new epoch)",
       [](const test_database&, sql::Connection& c) {
         ASSERT_TRUE(register_instance(c, first_owner.instance_id, 60).ok());
       }},
      {"owner row gone", [](const test_database& db,
                            sql::Connection&) { db.exec("DELETE FROM instance WHERE instance_id = 'inst-first'"); }},
  };
  for (const auto& d : deaths) {
    SCOPED_TRACE(d.name);
    test_database db;
    auto c = db.connect();
    begin_as_first(db, *c, "k");
    d.kill(db, *c);
    auto taken = idem_begin(*c, "k", fp, 3600, retry_owner);
    ASSERT_TRUE(taken.ok()) << taken.error.message;
    EXPECT_TRUE(taken.value.fresh);
    EXPECT_TRUE(taken.value.taken_over);
    EXPECT_EQ(column(db, "k", "owner_instance"), retry_owner.instance_id);
    EXPECT_EQ(column(db, "k", "takeovers"), "1");
    EXPECT_EQ(column(db, "k", "in_flight_until > NOW(3)"), "1") << "the new owner gets a fresh deadline";
    // The new owner is alive and within its deadline: a third request waits for it.
    auto third = idem_begin(*c, "k", fp, 3600, first_owner);
    ASSERT_TRUE(third.ok());
    EXPECT_FALSE(third.value.fresh);
    // And it completes the record as any owner does; the next retry replays its response.
    ASSERT_TRUE(idem_complete(*c, "k", 202, R"({"code":"ACCEPTED"})").ok());
    auto replay = idem_begin(*c, "k", fp, 3600, first_owner);
    ASSERT_TRUE(replay.ok());
    ASSERT_FALSE(replay.value.fresh);
    EXPECT_EQ(replay.value.existing->state, idem_state::COMPLETED);
    EXPECT_EQ(replay.value.existing->response_body, R"({"code":"ACCEPTED"})");
  }
}

TEST(IdempotencyTakeover, OtherRequestWithTheKeyOfADeadOneIsStillAKeyReuse) {
  test_database db;
  auto c = db.connect();
  begin_as_first(db, *c, "k");
  ASSERT_TRUE(mark_instance_stopped(*c, first_owner.instance_id).ok());
  const std::string other_fp(64, 'e');
  auto other = idem_begin(*c, "k", other_fp, 3600, retry_owner);
  ASSERT_TRUE(other.ok()) << other.error.message;
  EXPECT_FALSE(other.value.fresh);
  ASSERT_TRUE(other.value.existing);
  EXPECT_EQ(other.value.existing->fingerprint, fp) << "the caller compares it and answers 422";
  EXPECT_EQ(column(db, "k", "owner_instance"), first_owner.instance_id);
  EXPECT_EQ(column(db, "k", "takeovers"), "0");
}

// Rows written before migration 4 carry no owner and no deadline; nobody can tell whether their
// request still runs, so they keep blocking until they expire.
TEST(IdempotencyTakeover, RecordWithoutOwnerOrDeadlineIsNotTakenOver) {
  test_database db;
  auto c = db.connect();
  ASSERT_TRUE(register_instance(*c, retry_owner.instance_id, 60).ok());
  db.exec(
      "INSERT INTO idempotency_record (idem_key, fingerprint, state, expires_at) VALUES ('legacy', "
      "'" +
      fp + "', 'IN_FLIGHT', NOW(3) + INTERVAL 1 HOUR)");
  auto r = idem_begin(*c, "legacy", fp, 3600, retry_owner);
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_FALSE(r.value.fresh);
  EXPECT_FALSE(r.value.existing->reclaimable);
}

TEST(IdempotencyTakeover, RacingRetriesOfADeadRequestHaveExactlyOneWinner) {
  test_database db;
  constexpr int racers = 8;
  auto setup = db.connect();
  for (int i = 0; i < racers; ++i) ASSERT_TRUE(register_instance(*setup, "racer-" + std::to_string(i), 60).ok());
  for (int round = 0; round < 10; ++round) {
    const std::string key = "dead-" + std::to_string(round);
    begin_as_first(db, *setup, key);
    ASSERT_TRUE(mark_instance_stopped(*setup, first_owner.instance_id).ok());
    std::barrier sync(racers);
    std::atomic<int> took{0}, waited{0};
    std::vector<std::string> winner(racers);
    std::vector<std::thread> threads;
    for (int i = 0; i < racers; ++i) {
      threads.emplace_back([&, i] {
        auto c = db.connect();
        const idem_owner me{"racer-" + std::to_string(i), 60s};
        sync.arrive_and_wait();
        auto r = idem_begin(*c, key, fp, 3600, me);
        ASSERT_TRUE(r.ok()) << r.error.message;
        if (r.value.fresh) {
          EXPECT_TRUE(r.value.taken_over);
          winner[i] = me.instance_id;
          ++took;
        } else {
          ASSERT_TRUE(r.value.existing);
          EXPECT_EQ(r.value.existing->state, idem_state::IN_FLIGHT);
          EXPECT_FALSE(r.value.existing->reclaimable) << "a loser sees the winner's live claim";
          ++waited;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(took.load(), 1) << "round " << round;
    EXPECT_EQ(waited.load(), racers - 1) << "round " << round;
    EXPECT_EQ(column(db, key, "takeovers"), "1");
    std::string won;
    for (const auto& w : winner) won += w;
    EXPECT_EQ(column(db, key, "owner_instance"), won) << "the row names the one that was told it won";
  }
}

// A key names the change its request creates: the id is stored when the key is taken, and a retry
// that takes over the key of a request that died gets that id back, not its own, so it creates (or
// finds) the same change. A record that names none (written before migration 19) gives none back:
// the caller then uses the id such a request derived from the key.
TEST(IdempotencyTakeover, ATakeoverGetsTheChangeTheDeadRequestNamed) {
  test_database db;
  auto c = db.connect();
  ASSERT_TRUE(register_instance(*c, first_owner.instance_id, 60).ok());
  ASSERT_TRUE(register_instance(*c, retry_owner.instance_id, 60).ok());
  const std::string first_id = "018f0000-0000-7000-8000-000000000001";
  const std::string retry_id = "018f0000-0000-7000-8000-000000000002";
  auto begun = idem_begin(*c, "named", fp, 3600, first_owner, first_id);
  ASSERT_TRUE(begun.ok()) << begun.error.message;
  ASSERT_TRUE(begun.value.fresh);
  EXPECT_EQ(begun.value.operation_id, std::optional<std::string>(first_id));
  EXPECT_EQ(column(db, "named", "operation_id"), first_id);

  ASSERT_TRUE(mark_instance_stopped(*c, first_owner.instance_id).ok());
  auto taken = idem_begin(*c, "named", fp, 3600, retry_owner, retry_id);
  ASSERT_TRUE(taken.ok()) << taken.error.message;
  ASSERT_TRUE(taken.value.taken_over);
  EXPECT_EQ(taken.value.operation_id, std::optional<std::string>(first_id)) << "the dead request's change";
  EXPECT_EQ(column(db, "named", "operation_id"), first_id);

  // A record without a change (as before migration 19): taken over, it names none.
  db.exec(
      "INSERT INTO idempotency_record (idem_key, fingerprint, state, expires_at, owner_instance, "
      "in_flight_until) VALUES ('unnamed', REPEAT('f', 64), 'IN_FLIGHT', NOW(3) + INTERVAL 1 HOUR, "
      "'inst-first', NOW(3) - INTERVAL 1 SECOND)");
  auto old = idem_begin(*c, "unnamed", fp, 3600, retry_owner, retry_id);
  ASSERT_TRUE(old.ok()) << old.error.message;
  ASSERT_TRUE(old.value.taken_over);
  EXPECT_FALSE(old.value.operation_id);
}
