// The operator-transition use case on a real MariaDB, with the actor it wakes run in process
// (actors/testing/in_process.hpp): a written edge spawns the actor, a stale view is preempted, an
// edge the table refuses writes nothing.
#include "service/operator_transition.hpp"

#include "actors/registry.hpp"
#include "actors/testing/in_process.hpp"
#include "persistence/repo_test_support.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using persistence::test::new_op;
using persistence::test::walk;
using S = workflow::step;

namespace {

class operator_transition_test : public actors::testing::in_process_actors {
 protected:
  operator_transition_test() : in_process_actors(nlohmann::json::object()) {}

  persistence::operation_row row(const std::string& id) {
    auto r = persistence::load_operation(setup_db_, id);
    EXPECT_TRUE(r.ok()) << r.error.message;
    return r.value;
  }

  service::transition_result apply(const persistence::operation_row& seen, S to) {
    service::operator_transition t;
    t.operator_name = "olga";
    t.to = to;
    t.cause = "operator retrigger";
    t.rerun = true;
    auto r = service::apply_operator_transition(db_ctx_, svc_, seen, t);
    if (auto a = registry_.find(seen.operation_id)) track(*a);
    return r;
  }
};

}  // namespace

TEST_F(operator_transition_test, AWrittenEdgeWakesTheActorAStaleViewAndARefusedEdgeWriteNothing) {
  auto id = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_ERROR}, 42);
  const auto seen = row(id);

  // An edge the operator may not take from HANDLE_ERROR: refused, nothing written.
  auto refused = apply(seen, S::HANDLE_MERGED);
  EXPECT_EQ(refused.status, service::transition_status::refused);
  EXPECT_EQ(row(id).version, seen.version);

  // Re-trigger: written, and the actor that runs the step again is spawned.
  auto done = apply(seen, S::HANDLE_STARTED);
  ASSERT_EQ(done.status, service::transition_status::done);
  EXPECT_EQ(done.version, seen.version + 1);
  EXPECT_EQ(row(id).step, S::HANDLE_STARTED);
  EXPECT_EQ(done.actor, "spawned");
  EXPECT_TRUE(registry_.find(id).has_value());
  EXPECT_EQ(db_.scalar("SELECT actor FROM operation_event WHERE operation_id = '" + id + "' ORDER BY id DESC LIMIT 1"),
            "operator:olga");

  // The same view again: the row moved since, so the write is preempted.
  auto stale = apply(seen, S::HANDLE_STARTED);
  EXPECT_EQ(stale.status, service::transition_status::preempted);
  EXPECT_EQ(row(id).version, seen.version + 1);
}
