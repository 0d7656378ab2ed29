#pragma once
// Shared helpers of the persistence tests: create an operation and walk it along allowed edges.

#include "base/ids.hpp"
#include "persistence/operation_repo.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

namespace changeflow::persistence::test {

inline std::string new_op(session c, const std::string& subject, const std::string& target,
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
  auto r = create_operation(c, op);
  EXPECT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.value, create_outcome::created);
  return op.operation_id;
}

/// Walks the operation from its current step through `path`; returns the final version.
inline std::int64_t walk(session c, const std::string& id, std::initializer_list<workflow::step> path,
                         std::optional<std::int64_t> mr_iid = std::nullopt,
                         workflow::actor_kind by = workflow::actor_kind::workflow) {
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
    auto r = transition(c, t);
    EXPECT_TRUE(r.ok()) << workflow::to_string(from) << " -> " << workflow::to_string(to) << ": " << r.error.message;
    version = r.value;
    from = to;
  }
  return version;
}

using S = workflow::step;
inline constexpr std::initializer_list<workflow::step> to_merged = {
    S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_APPROVED, S::HANDLE_MERGING, S::HANDLE_MERGED};

}  // namespace changeflow::persistence::test
