// The outbox against a real database: the timeline trigger writes exactly the notified events, in
// the same statement or transaction as the transition (and nothing when it does not commit), and
// the claim hands out each stream's oldest pending delivery only, once, with backoff and max age.

#include "persistence/notification_repo.hpp"

#include "base/ids.hpp"
#include "persistence/repo_test_support.hpp"
#include "tests/support/test_db.hpp"

#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

using namespace changeflow;
using namespace changeflow::persistence;
using changeflow::testing::test_database;
using test::new_op;
using test::walk;
using workflow::phase;
using S = workflow::step;

namespace {

std::string subscribe(sql::Connection& c, std::optional<std::string> subject, std::optional<std::string> op = {}) {
  new_subscription s;
  s.subscription_id = ids::new_uuid();
  s.subject_id = std::move(subject);
  s.operation_id = std::move(op);
  s.url = "http://127.0.0.1:9/hook";
  s.secret = "0123456789abcdef";
  s.owner = "alice";
  auto r = create_subscription(c, s);
  EXPECT_TRUE(r.ok()) << r.error.message;
  return s.subscription_id;
}

/// The notification rule written from the workflow's own vocabulary: the first event, a phase
/// change, or a step change inside a terminal phase.
bool notified(const operation_event_row& e) {
  if (!e.from_phase) return true;
  if (*e.from_phase != e.to_phase) return true;
  return workflow::is_terminal(e.to_phase) && e.from_step != e.to_step;
}

std::string count_deliveries(const test_database& db, const std::string& where = "1 = 1") {
  return db.scalar("SELECT COUNT(*) FROM notification_delivery WHERE " + where);
}

/// Waits until `sql` (a scalar query) answers "1"; the database clock decides, not ours.
bool wait_until_db(const test_database& db, const std::string& sql) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (db.scalar(sql) == "1") return true;
    std::this_thread::yield();
  }
  return false;
}

claim_request claim_as(const std::string& who, int limit = 50, std::int64_t lease_ms = 60000) {
  return {who, ids::new_uuid(), limit, lease_ms};
}

}  // namespace

TEST(NotificationOutbox, NothingIsWrittenWithoutASubscription) {
  test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "alice", "svc/a.yaml");
  walk(*c, id, test::to_merged);
  EXPECT_EQ(count_deliveries(db), "0");
}

// The outbox is the timeline's notified events, one per subscriber, numbered 1..n per change in
// timeline order, whichever writer wrote them: creation, the transition trigger, mark_validated.
TEST(NotificationOutbox, FollowsTheNotifiedEventsOfTheTimelineForEveryWriter) {
  test_database db;
  auto c = db.connect();
  auto sub = subscribe(*c, "alice");
  auto other_subject = new_op(*c, "bob", "svc/b.yaml");
  auto id = new_op(*c, "alice", "svc/a.yaml");
  walk(*c, id, test::to_merged, 7);
  auto v = mark_validated(*c, id, "callback");
  ASSERT_TRUE(v.ok()) << v.error.message;
  ASSERT_TRUE(v.value.has_value());

  auto events = list_events(*c, id);
  ASSERT_TRUE(events.ok());
  std::vector<std::vector<std::string>> expected;
  int seq = 0;
  for (const auto& e : events.value) {
    if (!notified(e)) continue;
    std::string kind = !e.from_phase                       ? "change.created"
                       : workflow::is_terminal(e.to_phase) ? "change.terminal"
                                                           : "change.phase_changed";
    expected.push_back({std::to_string(++seq), std::to_string(e.id), kind});
  }
  // The walk passes in-phase steps (APPROVAL_APPROVED -> HANDLE_STARTED ...), so the rule filters.
  ASSERT_LT(expected.size(), events.value.size());
  ASSERT_GE(expected.size(), 4u);
  auto got = db.query("SELECT sequence, event_id, kind FROM notification_delivery WHERE operation_id = '" + id +
                      "' ORDER BY sequence");
  EXPECT_EQ(got, expected);
  EXPECT_EQ(expected.back()[2], "change.terminal");
  EXPECT_EQ(count_deliveries(db, "operation_id = '" + other_subject + "'"), "0");
  EXPECT_EQ(db.scalar("SELECT COUNT(DISTINCT subscription_id) FROM notification_delivery"), "1");
  (void)sub;
}

// The rule's terminal phase list is SQL; workflow::is_terminal is the truth. A step change inside
// each phase is notified exactly when the phase is terminal. The events are written here the way the
// operation triggers write theirs (the event, then notify_event with its id), for every phase, which
// no real operation can walk through.
TEST(NotificationOutbox, StepChangesInsideAPhaseAreNotifiedExactlyForTerminalPhases) {
  test_database db;
  auto c = db.connect();
  subscribe(*c, "alice");
  auto id = new_op(*c, "alice", "svc/a.yaml");
  const auto write_event = [&](int from_step, int to_step, const std::string& phase) {
    db.exec(
        "INSERT INTO operation_event (operation_id, from_step, to_step, from_phase, to_phase, cause, actor, "
        "version) VALUES ('" +
        id + "', " + std::to_string(from_step) + ", " + std::to_string(to_step) + ", '" + phase + "', '" + phase +
        "', 'test', 'test', 1)");
    auto event_id = db.scalar("SELECT MAX(id) FROM operation_event");
    db.exec("CALL notify_event(" + event_id + ", '" + id + "', 'alice', '" + phase + "', '" + phase + "', " +
            std::to_string(from_step) + ", " + std::to_string(to_step) + ")");
    return event_id;
  };
  for (auto p : workflow::all_phases) {
    const std::string name(workflow::to_string(p));
    auto event_id = write_event(1, 2, name);
    EXPECT_EQ(count_deliveries(db, "event_id = " + event_id), workflow::is_terminal(p) ? "1" : "0") << name;
    // The same step again (a lease takeover's event) is never notified.
    EXPECT_EQ(count_deliveries(db, "event_id = " + write_event(2, 2, name)), "0") << name;
  }
}

// A transition notifies from the operation's own trigger: the timeline has no trigger of its own
// (a nested trigger per event cost a third of the database's CPU per transition), and an event
// written by the operation triggers is notified exactly once.
TEST(NotificationOutbox, TheOperationTriggersNotifyAndTheTimelineHasNoTrigger) {
  test_database db;
  auto c = db.connect();
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND "
                      "EVENT_OBJECT_TABLE = 'operation_event'"),
            "0");
  subscribe(*c, "alice");
  auto id = new_op(*c, "alice", "svc/b.yaml");
  walk(*c, id, {S::APPROVAL_SENT});
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM notification_delivery WHERE operation_id = '" + id + "'"), "2")
      << "change.created and the phase change to APPROVAL_SENT, each once";
  EXPECT_EQ(db.scalar("SELECT COUNT(DISTINCT event_id) FROM notification_delivery WHERE operation_id = '" + id + "'"),
            "2");

  // Written as any writer does (the staging columns on the row's own UPDATE): a step change inside a
  // live phase is not notified, a move into a terminal phase is, and so is a step change inside it.
  const auto steps_of = [](workflow::phase p) {
    std::vector<S> out;
    for (auto st : workflow::all_steps) {
      if (workflow::phase_of(st) == p) out.push_back(st);
    }
    return out;
  };
  const auto move = [&](S to) {
    db.exec("UPDATE operation SET step = " + std::to_string(workflow::code_of(to)) + ", phase = '" +
            std::string(workflow::to_string(workflow::phase_of(to))) +
            "', version = version + 1, event_cause = 'test', event_actor = 'test' WHERE operation_id = '" + id + "'");
    return db.scalar("SELECT COUNT(*) FROM notification_delivery WHERE operation_id = '" + id + "'");
  };
  auto live = steps_of(workflow::phase::MR_CREATING);
  auto failed = steps_of(workflow::phase::HANDLE_FAILED);
  ASSERT_GE(live.size(), 2u);
  ASSERT_GE(failed.size(), 2u);
  EXPECT_EQ(move(live[0]), "3") << "into another live phase";
  EXPECT_EQ(move(live[1]), "3") << "a step inside a live phase";
  EXPECT_EQ(move(failed[0]), "4") << "into a terminal phase";
  EXPECT_EQ(move(failed[1]), "5") << "a step inside a terminal phase";
}

TEST(NotificationOutbox, ATransitionThatLosesItsGuardWritesNoOutboxRow) {
  test_database db;
  auto c = db.connect();
  subscribe(*c, "alice");
  auto id = new_op(*c, "alice", "svc/a.yaml");
  auto version = walk(*c, id, {S::APPROVAL_SENT, S::APPROVAL_APPROVED});
  const auto before = count_deliveries(db);
  const auto events_before = db.scalar("SELECT COUNT(*) FROM operation_event");
  ASSERT_NE(before, "0");

  // The one-statement path and the admission path (an explicit transaction), both stale.
  for (auto to : {S::CREATE_STARTED, S::BATCH_WAITING}) {
    transition_request t;
    t.operation_id = id;
    t.expected_version = version - 1;
    t.from = S::APPROVAL_APPROVED;
    t.to = to;
    t.cause = "stale writer";
    auto r = transition(*c, t);
    EXPECT_EQ(r.outcome, db_outcome::preempted) << workflow::to_string(to);
  }
  EXPECT_EQ(count_deliveries(db), before);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event"), events_before);

  // A transition that matched but whose transaction rolled back leaves neither event nor delivery.
  {
    auto raw = db.connect();
    std::unique_ptr<sql::Statement> st(raw->createStatement());
    st->execute("START TRANSACTION");
    st->execute("UPDATE operation SET step = " + std::to_string(workflow::code_of(S::BATCH_WAITING)) +
                ", phase = 'MR_CREATED', version = version + 1, event_actor = 'test' WHERE operation_id = '" + id +
                "'");
    std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT COUNT(*) FROM notification_delivery"));
    ASSERT_TRUE(rs->next());
    EXPECT_GT(rs->getInt(1), std::stoi(before)) << "inside the transaction the delivery exists";
    st->execute("ROLLBACK");
  }
  EXPECT_EQ(count_deliveries(db), before);

  // The same admission with the right version commits event and delivery together.
  transition_request t;
  t.operation_id = id;
  t.expected_version = version;
  t.from = S::APPROVAL_APPROVED;
  t.to = S::BATCH_WAITING;
  t.cause = "admitted";
  ASSERT_TRUE(transition(*c, t).ok());
  EXPECT_EQ(std::stoi(count_deliveries(db)), std::stoi(before) + 1);
  EXPECT_EQ(db.scalar("SELECT to_phase FROM operation_event WHERE id = (SELECT MAX(event_id) FROM "
                      "notification_delivery)"),
            "MR_CREATED");
}

TEST(NotificationOutbox, AChangeSubscriptionHearsOnlyItsChange) {
  test_database db;
  auto c = db.connect();
  auto a = new_op(*c, "alice", "svc/a.yaml");
  auto b = new_op(*c, "alice", "svc/b.yaml");
  auto only_a = subscribe(*c, std::nullopt, a);
  auto a_in_subject = subscribe(*c, "alice", a);
  auto wrong_subject = subscribe(*c, "bob", a);  // matches nothing: a is alice's
  walk(*c, a, {S::APPROVAL_SENT});
  walk(*c, b, {S::APPROVAL_SENT});
  auto per_subscription = [&](const std::string& sub) {
    return db.scalar(
        "SELECT COUNT(*) FROM notification_delivery d JOIN notification_subscription s ON s.id = d.subscription_id "
        "WHERE s.subscription_id = '" +
        sub + "'");
  };
  // Subscribed after a's creation: only the APPROVAL_SENT event, numbered as the change's second.
  EXPECT_EQ(per_subscription(only_a), "1");
  EXPECT_EQ(per_subscription(a_in_subject), "1");
  EXPECT_EQ(per_subscription(wrong_subject), "0");
  EXPECT_EQ(db.scalar("SELECT DISTINCT sequence FROM notification_delivery"), "2");
  EXPECT_EQ(count_deliveries(db, "operation_id = '" + b + "'"), "0");
}

TEST(NotificationClaim, OnlyTheOldestPendingDeliveryOfEachStreamIsDue) {
  test_database db;
  auto c = db.connect();
  subscribe(*c, "alice");
  subscribe(*c, "alice");
  auto id = new_op(*c, "alice", "svc/a.yaml");
  walk(*c, id, test::to_merged);
  ASSERT_EQ(count_deliveries(db, "sequence = 3"), "2");

  auto first = claim_due_deliveries(*c, claim_as("i1"));
  ASSERT_TRUE(first.ok()) << first.error.message;
  ASSERT_EQ(first.value.size(), 2u) << "one head per subscription";
  for (const auto& d : first.value) EXPECT_EQ(d.sequence, 1);
  // A peer finds nothing: the heads are claimed and hold their streams back.
  auto peer = claim_due_deliveries(*c, claim_as("i2"));
  ASSERT_TRUE(peer.ok());
  EXPECT_TRUE(peer.value.empty());

  // Delivering one stream's head makes that stream's next event due, and only that one.
  ASSERT_TRUE(mark_delivered(*c, first.value[0].id, 204).value);
  auto next = claim_due_deliveries(*c, claim_as("i2"));
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next.value.size(), 1u);
  EXPECT_EQ(next.value[0].sequence, 2);
  EXPECT_EQ(next.value[0].subscription_id, first.value[0].subscription_id);
  EXPECT_EQ(next.value[0].event.to_phase, phase::APPROVAL_SENT);
  EXPECT_EQ(next.value[0].secret, "0123456789abcdef");
  EXPECT_FALSE(mark_delivered(*c, first.value[0].id, 200).value) << "a second mark changes nothing";
}

TEST(NotificationClaim, AFailedAttemptBacksOffThenAgesOutAndReleasesItsStream) {
  test_database db;
  auto c = db.connect();
  subscribe(*c, "alice");
  auto id = new_op(*c, "alice", "svc/a.yaml");
  walk(*c, id, {S::APPROVAL_SENT});
  auto req = claim_as("i1");
  auto got = claim_due_deliveries(*c, req);
  ASSERT_EQ(got.value.size(), 1u);
  const auto head = got.value[0];

  failed_attempt a;
  a.id = head.id;
  a.token = "not-my-claim";
  a.http_status = 503;
  a.error = "HTTP 503";
  a.retry_in_ms = 3600 * 1000;
  a.max_age_s = 86400;
  EXPECT_EQ(record_failed_attempt(*c, a).value, "") << "another claim's attempt writes nothing";
  EXPECT_EQ(db.scalar("SELECT attempts FROM notification_delivery WHERE id = " + std::to_string(head.id)), "0");

  a.token = req.token;
  EXPECT_EQ(record_failed_attempt(*c, a).value, "PENDING");
  auto row = db.query(
      "SELECT attempts, last_status, last_error, claim_token IS NULL, next_attempt_at > NOW(3) + "
      "INTERVAL 50 MINUTE FROM notification_delivery WHERE id = " +
      std::to_string(head.id));
  EXPECT_EQ(row, (changeflow::testing::rows{{"1", "503", "HTTP 503", "1", "1"}}));
  auto later = claim_due_deliveries(*c, claim_as("i2"));
  EXPECT_TRUE(later.value.empty()) << "not due before its next try, and it still holds its stream";

  // Due again (the test moves the clock of this row, not the service's), then past its max age.
  db.exec("UPDATE notification_delivery SET next_attempt_at = NOW(3) WHERE id = " + std::to_string(head.id));
  auto again = claim_as("i2");
  auto retry = claim_due_deliveries(*c, again);
  ASSERT_EQ(retry.value.size(), 1u);
  EXPECT_EQ(retry.value[0].attempts, 1);
  ASSERT_TRUE(
      wait_until_db(db, "SELECT created_at < NOW(3) FROM notification_delivery WHERE id = " + std::to_string(head.id)));
  a.token = again.token;
  a.max_age_s = 0;
  EXPECT_EQ(record_failed_attempt(*c, a).value, "FAILED");
  auto after = claim_due_deliveries(*c, claim_as("i3"));
  ASSERT_EQ(after.value.size(), 1u) << "a given-up delivery no longer holds its stream";
  EXPECT_EQ(after.value[0].sequence, 2);
}

TEST(NotificationClaim, AnExpiredLeaseLetsAnotherClaimerSendItAgain) {
  test_database db;
  auto c = db.connect();
  subscribe(*c, "alice");
  new_op(*c, "alice", "svc/a.yaml");
  auto first = claim_as("i1", 50, 1);
  auto got = claim_due_deliveries(*c, first);
  ASSERT_EQ(got.value.size(), 1u);
  ASSERT_TRUE(wait_until_db(db, "SELECT claim_until < NOW(3) FROM notification_delivery"));
  auto second = claim_as("i2");
  auto taken = claim_due_deliveries(*c, second);
  ASSERT_EQ(taken.value.size(), 1u);
  EXPECT_EQ(taken.value[0].delivery_id, got.value[0].delivery_id) << "the same delivery id: subscribers deduplicate";
  failed_attempt late;
  late.id = got.value[0].id;
  late.token = first.token;
  late.error = "timeout";
  late.max_age_s = 86400;
  EXPECT_EQ(record_failed_attempt(*c, late).value, "") << "the first claimer lost its claim";
  EXPECT_TRUE(mark_delivered(*c, got.value[0].id, 200).value) << "a 2xx counts whoever holds the claim";
}

// Two instances claiming at the same time on their own connections never get the same row.
TEST(NotificationClaim, ConcurrentClaimersNeverShareADelivery) {
  test_database db;
  {
    auto c = db.connect();
    for (int i = 0; i < 6; ++i) subscribe(*c, "alice");
    for (int i = 0; i < 10; ++i) new_op(*c, "alice", "svc/" + std::to_string(i) + ".yaml");
  }
  ASSERT_EQ(count_deliveries(db), "60");
  std::mutex mutex;
  std::multiset<std::int64_t> claimed;
  std::atomic<bool> go{false};
  auto claimer = [&](std::string who) {
    auto c = db.connect();
    while (!go) std::this_thread::yield();
    for (int round = 0; round < 20; ++round) {
      auto r = claim_due_deliveries(*c, claim_as(who, 7));
      ASSERT_TRUE(r.ok()) << r.error.message;
      std::lock_guard lock(mutex);
      for (const auto& d : r.value) claimed.insert(d.id);
    }
  };
  std::thread t1(claimer, "i1"), t2(claimer, "i2");
  go = true;
  t1.join();
  t2.join();
  EXPECT_EQ(claimed.size(), 60u);
  EXPECT_EQ(std::set<std::int64_t>(claimed.begin(), claimed.end()).size(), claimed.size()) << "a row claimed twice";
}

TEST(NotificationSubscriptions, DeletingGivesUpWhatWasNotDelivered) {
  test_database db;
  auto c = db.connect();
  auto sub = subscribe(*c, "alice");
  auto id = new_op(*c, "alice", "svc/a.yaml");
  walk(*c, id, {S::APPROVAL_SENT});
  auto found = find_subscription(*c, sub);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found.value.deliveries.at("PENDING"), 2);
  auto mine = list_subscriptions(*c, "alice", 10);
  ASSERT_EQ(mine.value.size(), 1u);
  EXPECT_TRUE(list_subscriptions(*c, "bob", 10).value.empty());

  auto gone = delete_subscription(*c, sub);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone.value, 2);
  EXPECT_EQ(delete_subscription(*c, sub).outcome, db_outcome::not_found);
  EXPECT_EQ(count_deliveries(db, "state = 'FAILED' AND last_error = 'subscription deleted'"), "2");
  EXPECT_TRUE(claim_due_deliveries(*c, claim_as("i1")).value.empty());
  walk(*c, id, {S::APPROVAL_APPROVED, S::CREATE_STARTED});
  EXPECT_EQ(count_deliveries(db), "2") << "nothing new for a deleted subscription";
  auto listed = list_deliveries(*c, {"FAILED", id, "", 10, 0});
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed.value.size(), 2u);
}
