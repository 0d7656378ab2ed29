// A group commit whose answer is lost after its COMMIT (the connection drops right then) is
// recovered from its receipt: every member gets the outcome the answer would have given it (when
// the receipt cannot be read either, the members run again alone and find what the group wrote;
// persistence/transition_committer_test.cpp covers that path); a transition committed alone learns
// it from the event it wrote. Here through the whole service, with every second commit losing its
// answer (faults.lose_group_answer_every = 2: the commit's last statement kills its own connection
// after the COMMIT) while changes submitted together run: every change still reaches VALIDATED,
// written once (one event per version, one flip to VALIDATED), every transition counted once,
// nothing is asked of GitLab twice, and the SQL invariants hold. Half the submissions carry an
// idempotency key, half do not.

#include "tests/support/flow_env.hpp"
#include "tests/support/invariants.hpp"
#include "tests/support/sim_attempts.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace changeflow::testing;
using nlohmann::json;

TEST(LostGroupAnswer, EveryChangeFinishesOnceWhileGroupsLoseTheirAnswerAfterCommitting) {
  // The owner's changed-row poll and the sweep, which would start an actor for an owned change they
  // find without one, run at most once an hour here: a change a lost answer left without its actor
  // stays stuck and fails the test.
  flow_env env(json{{"faults", {{"lose_group_answer_every", 2}}},
                    {"rate_limit", {{"submit", 0}}},
                    {"durability", {{"sweep_interval_ms", 3600000}, {"inbox_poll_ms", 3600000}}}},
               {"--callback-delay-ms", "0", "--pipeline-duration-ms", "0"});
  constexpr int submitters = 4;
  constexpr int per_submitter = 10;
  std::mutex mutex;
  std::vector<std::string> ids;
  std::map<std::string, int> codes;  // "<status> <code>" -> count
  std::vector<std::thread> threads;
  for (int t = 0; t < submitters; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_submitter; ++i) {
        const auto n = std::to_string(t) + "-" + std::to_string(i);
        // Half the submitters name their change (operationId, the request's idempotency key): a keyed
        // submission commits its key's record in the group too, and when that group loses its answer
        // its gate replays the stored answer and the change still gets its actor.
        char id[40];
        std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", t * 100 + i);
        auto r = env.submit("lost answer " + n, "lena-" + n, "svc-lost-" + n, t % 2 ? std::string(id) : std::string());
        auto j = json::parse(r.body, nullptr, false);
        std::lock_guard lock(mutex);
        const std::string code = !j.is_discarded() && j.contains("code") ? j["code"].get<std::string>() : "?";
        ++codes[std::to_string(r.status) + " " + code];
        if (r.status == 202 && !j.is_discarded()) ids.push_back(j["data"]["operationId"].get<std::string>());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::cout << "submissions answered:";
  for (const auto& [code, n] : codes) std::cout << " " << code << " x" << n;
  std::cout << "\n";
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(submitters * per_submitter)) << "every submission accepted";
  // A submission whose group lost its answer is run again alone and finds its change created.
  for (const auto& [code, n] : codes) EXPECT_TRUE(code == "202 ACCEPTED" || code == "202 DUPLICATE_SUBMIT") << code;

  for (const auto& id : ids) {
    auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(120));
    ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  }
  const double recovered = env.metric_sum("changeflow_transition_groups_recovered");
  const double failed = env.metric_sum("changeflow_transition_groups_failed");
  std::cout << "groups that lost their answer: " << recovered << " recovered from their receipts, " << failed
            << " taken for failed, of " << env.metric_sum("changeflow_transition_groups") << " groups\n";
  EXPECT_GT(recovered, 0) << "the fault met no group: nothing here was tested";
  // The success metric is counted exactly once per change: a flip whose group lost its answer is
  // counted by the member its receipt names, never by a copy and never not at all.
  EXPECT_EQ(env.metric_sum("changeflow_validated_total"), static_cast<double>(ids.size()));
  // A transition that committed alone and lost its answer learns from the event it wrote that it
  // landed: every transition the workflow wrote is counted once, those among them too.
  const auto log = env.service().process().log_contents();
  int lone_losses = 0;
  for (auto at = log.find("transition.answer_lost"); at != std::string::npos;
       at = log.find("transition.answer_lost", at + 1)) {
    ++lone_losses;
  }
  std::cout << "transitions alone that lost their answer: " << lone_losses << "\n";
  EXPECT_GT(lone_losses, 0) << "the fault met no transition alone: its lost-answer read was not tested";
  EXPECT_EQ(env.metric_sum("changeflow_transitions_total"),
            std::stod(env.db().scalar("SELECT COUNT(*) FROM operation_event WHERE actor = 'workflow'")));

  auto& db = env.db();
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation"), std::to_string(ids.size())) << "each change created once";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM idempotency_record WHERE state = 'COMPLETED' AND status_code = 202"),
            std::to_string(submitters / 2 * per_submitter))
      << "each keyed submission's answer stored once";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM (SELECT operation_id FROM operation_event WHERE to_phase = 'VALIDATED' "
                      "GROUP BY operation_id HAVING COUNT(*) > 1) d"),
            "0")
      << "one flip to VALIDATED per change";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM (SELECT operation_id, version FROM operation_event GROUP BY operation_id, "
                      "version HAVING COUNT(*) > 1) d"),
            "0")
      << "no version written twice";
  expect_invariants([&](const std::string& sql) { return db.query(sql); }, "lost-answer");

  auto stats = sim_stats(env);
  EXPECT_EQ(repeated_side_effects(stats), "");
  EXPECT_EQ(stats["merges"].size(), ids.size());
  for (const auto& [mr, bots] : stats["approvals"].items()) EXPECT_EQ(bots.size(), 2u) << "both bots approved " << mr;
}
