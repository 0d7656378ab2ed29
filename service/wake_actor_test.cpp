// Waking the actor of a passivated wait: an approval decision brings its actor back from the row the
// callback's unit returned in its own round trip, without reading the row again. And a submission
// that finds its change created without an actor (its creation's answer was lost) starts one.
#include "service/wake_actor.hpp"

#include "service/submit.hpp"

#include "actors/testing/in_process.hpp"
#include "persistence/callback_repo.hpp"
#include "persistence/repo_test_support.hpp"
#include "persistence/sql_util.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace changeflow;
using workflow::step;

namespace {

class waking : public actors::testing::in_process_actors {
 protected:
  waking() : in_process_actors({{"durability", {{"passivate_beyond_seconds", 60}}}}) {}

  /// A change waiting days for its approval decision: no actor holds it.
  std::string passivated_wait(const std::string& target) {
    auto id = persistence::test::new_op(setup_db_, "wes", target);
    persistence::test::walk(setup_db_, id, {step::APPROVAL_SENT});
    db_.exec("UPDATE operation SET next_wake_at = NOW(3) + INTERVAL 7 DAY WHERE operation_id = '" + id + "'");
    return id;
  }
  /// SELECTs the test's own session has sent so far (wake_actor reads through it).
  long selects() { return std::stol(setup_db_scalar("SHOW SESSION STATUS LIKE 'Com_select'")); }
  std::string setup_db_scalar(const std::string& sql) {
    return persistence::detail::guarded<std::string>(
               setup_db_,
               [&](sql::Connection& c) {
                 std::unique_ptr<sql::Statement> st(c.createStatement());
                 std::unique_ptr<sql::ResultSet> rs(st->executeQuery(sql));
                 rs->next();
                 return persistence::db_result<std::string>::success(rs->getString(2));
               })
        .value;
  }
};

TEST_F(waking, AnApprovalThatBringsBackAPassivatedWaitStartsItsActorFromTheRowItsUnitReturned) {
  auto id = passivated_wait("w1");
  ASSERT_FALSE(registry_.find(id).has_value());
  auto decided =
      persistence::apply_approval_callback(setup_db_, "cb-w1", id, persistence::approval_result::APPROVED, "");
  ASSERT_TRUE(decided.ok()) << decided.error.message;
  ASSERT_TRUE(decided.value.row.has_value());
  const auto before = selects();
  auto woke = service::wake_actor(setup_db_, svc_, id, decided.value.new_step, "approval callback",
                                  decided.value.new_version, &*decided.value.row);
  EXPECT_EQ(woke, "spawned");
  EXPECT_EQ(selects() - before, 0) << "wake_actor read the row";
  auto spawned = registry_.find(id);
  ASSERT_TRUE(spawned.has_value());
  track(caf::actor_cast<caf::actor>(*spawned));
  run_messages();
  EXPECT_EQ(queued_db(), 1u) << "the actor goes on from the row: APPROVAL_APPROVED -> CREATE_STARTED";

  // Without the row it reads it, as every other writer's wake does.
  auto other = passivated_wait("w2");
  auto plain =
      persistence::apply_approval_callback(setup_db_, "cb-w2", other, persistence::approval_result::APPROVED, "");
  ASSERT_TRUE(plain.ok());
  const auto before_plain = selects();
  EXPECT_EQ(service::wake_actor(setup_db_, svc_, other, plain.value.new_step, "approval callback"), "spawned");
  EXPECT_EQ(selects() - before_plain, 1) << "without the row, wake_actor reads it";
  auto second = registry_.find(other);
  ASSERT_TRUE(second.has_value());
  track(caf::actor_cast<caf::actor>(*second));
}

TEST_F(waking, TheStatusReadsAreHandedTheRowTheUnitReturnedOrToldOfTheWriteWithoutOne) {
  std::vector<std::int64_t> handed;  // versions handed over with their row
  std::vector<std::string> told;     // writes signalled without a row
  svc_.row_written_as = [&](const persistence::operation_row& row, std::int64_t) { handed.push_back(row.version); };
  svc_.row_written = [&](const std::string& id) { told.push_back(id); };
  auto id = passivated_wait("w3");
  auto decided =
      persistence::apply_approval_callback(setup_db_, "cb-w3", id, persistence::approval_result::APPROVED, "");
  ASSERT_TRUE(decided.ok() && decided.value.row.has_value());
  service::wake_actor(setup_db_, svc_, id, decided.value.new_step, "approval callback", decided.value.new_version,
                      &*decided.value.row);
  EXPECT_EQ(handed, std::vector<std::int64_t>{decided.value.row->version});
  EXPECT_TRUE(told.empty());
  if (auto a = registry_.find(id)) track(caf::actor_cast<caf::actor>(*a));

  // A wake without the row (a duplicate delivery, an operator's write) drops what the readers keep.
  service::wake_actor(setup_db_, svc_, id, std::nullopt, "approval callback");
  EXPECT_EQ(told, std::vector<std::string>{id});
  EXPECT_EQ(handed.size(), 1u);
}

TEST_F(waking, ASubmissionThatFindsItsChangeCreatedWithoutAnActorStartsIt) {
  // A creation that committed but whose answer was lost: the row is there, no actor carries it.
  auto op = persistence::test::new_operation_for("sam", "s1");
  auto first = persistence::create_operation(setup_db_, op);
  ASSERT_TRUE(first.ok()) << first.error.message;
  ASSERT_EQ(first.value, persistence::create_outcome::created);
  ASSERT_FALSE(registry_.find(op.operation_id).has_value());

  // The submission runs again (the group's members alone, or the client's retry) and finds it.
  auto again = persistence::create_operation(setup_db_, op);
  ASSERT_TRUE(again.ok()) << again.error.message;
  ASSERT_EQ(again.value, persistence::create_outcome::duplicate_operation);
  auto r = service::start_created(setup_db_, svc_, op, again);
  EXPECT_EQ(r.status, service::submit_status::duplicate) << "the answer stays DUPLICATE_SUBMIT";
  EXPECT_EQ(r.actor, "spawned");
  auto started = registry_.find(op.operation_id);
  ASSERT_TRUE(started.has_value()) << "the change waits for the changed-row poll";
  track(caf::actor_cast<caf::actor>(*started));
  run_messages();
  EXPECT_EQ(queued_external(), 1u) << "the actor goes on from the row: it asks for the approval";

  // A live actor is left alone: no second one, no read.
  const auto before = selects();
  auto live = service::start_created(setup_db_, svc_, op, again);
  EXPECT_EQ(live.status, service::submit_status::duplicate);
  EXPECT_EQ(live.actor, "");
  EXPECT_EQ(selects() - before, 0);
  EXPECT_EQ(registry_.size(), 1u);

  // A change another instance owns is that instance's to carry.
  auto theirs = persistence::test::new_operation_for("sam", "s2");
  ASSERT_TRUE(persistence::create_operation(setup_db_, theirs).ok());
  db_.exec("UPDATE operation SET owner_instance = 'other-instance' WHERE operation_id = '" + theirs.operation_id + "'");
  auto found = persistence::create_operation(setup_db_, theirs);
  ASSERT_TRUE(found.ok());
  auto not_ours = service::start_created(setup_db_, svc_, theirs, found);
  EXPECT_EQ(not_ours.actor, "owner:other-instance");
  EXPECT_FALSE(registry_.find(theirs.operation_id).has_value());
}

}  // namespace
