// Durability: three changeflowd processes on one database. Clients submit round-robin;
// every approval callback is delivered to an instance that does NOT own the operation (the owner
// picks the change up through its changed-row poll); one instance is SIGKILLed mid-flight and the
// others take over its operations when its lease expires. Asserts: every operation completes, no
// callback is lost, and each operation is advanced by one owner at a time.

#include "tests/support/flow_env.hpp"
#include "tests/support/sim_attempts.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <map>
#include <set>

using namespace changeflow::testing;
using nlohmann::json;

namespace {
std::string callback_url(unsigned short port) {
  return "http://127.0.0.1:" + std::to_string(port) + "/api/v1/callbacks/approval";
}
}  // namespace

TEST(MultiInstance, PeersTakeOverAKilledInstanceAndCallbacksReachTheOwner) {
  const unsigned short port_b = free_port();
  const unsigned short port_c = free_port();
  const json common = {
      {"instance", {{"lease_seconds", 2}}},
      {"durability", {{"inbox_poll_ms", 150}, {"sweep_interval_ms", 500}, {"stuck_after_seconds", 2}}}};
  // A's approval callbacks go to C; B's and C's go to A: never to the owner, never to B (killed).
  json cfg_a = common;
  cfg_a["instance"]["id"] = "inst-a";
  cfg_a["approval"] = {{"callback_url", callback_url(port_c)}};
  // The sim needs slow approvals so B's operations are still in flight when it dies.
  flow_env env(cfg_a, {"--callback-delay-ms", "600"});
  const std::string url_a = callback_url(env.port());
  auto peer_config = [&](const std::string& id, unsigned short port) {
    json c = env.config();
    c["instance"]["id"] = id;
    c["http"]["port"] = port;
    c["approval"]["callback_url"] = url_a;
    return c;
  };
  auto b = std::make_unique<service_process>(peer_config("inst-b", port_b), env.dir(), "changeflowd-b");
  service_process c(peer_config("inst-c", port_c), env.dir(), "changeflowd-c");
  const std::vector<unsigned short> ports = {env.port(), port_b, port_c};

  // Round-robin clients.
  constexpr int total = 30;
  std::vector<std::string> ids;
  for (int i = 0; i < total; ++i) {
    json body = {{"subject", "multi-user"},
                 {"target", "svc-" + std::to_string(i)},
                 {"title", "multi change " + std::to_string(i)},
                 {"files", {{{"path", "config/svc-" + std::to_string(i) + ".yaml"}, {"content", "v: 1\n"}}}}};
    auto r = http_call("127.0.0.1", ports[i % 3], "POST", "/api/v1/changes", body.dump());
    ASSERT_EQ(r.status, 202) << r.body << r.error;
    ids.push_back(json::parse(r.body)["data"]["operationId"].get<std::string>());
  }
  auto& db = env.db();
  // Kill B while it owns operations that are still in flight.
  ASSERT_TRUE(wait_until(
      [&] {
        return db.scalar(
                   "SELECT COUNT(*) FROM operation WHERE owner_instance = 'inst-b' "
                   "AND step = 10012") != "0";
      },  // APPROVAL_SENT
      std::chrono::seconds(30)));
  auto b_inflight =
      std::stoi(db.scalar("SELECT COUNT(*) FROM operation WHERE owner_instance = 'inst-b' AND phase NOT "
                          "IN ('VALIDATED','CREATE_FAILED','HANDLE_FAILED','REJECTED','CLOSED')"));
  auto killed_at = std::chrono::steady_clock::now();
  b->process().kill_now();
  b.reset();
  ASSERT_GT(b_inflight, 0);

  // The survivors take B's operations over once its lease (2 s) expires.
  ASSERT_TRUE(wait_until(
      [&] {
        return db.scalar(
                   "SELECT COUNT(*) FROM operation WHERE owner_instance = 'inst-b' AND "
                   "phase NOT IN ('VALIDATED','CREATE_FAILED','HANDLE_FAILED','REJECTED',"
                   "'CLOSED')") == "0";
      },
      std::chrono::seconds(30)));
  auto takeover_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed_at).count();
  std::cout << "B owned " << b_inflight << " in-flight operations; taken over after " << takeover_ms << " ms\n";

  // Every operation completes; status reads work on any surviving instance.
  const std::vector<unsigned short> alive = {env.port(), port_c};
  for (size_t i = 0; i < ids.size(); ++i) {
    json last;
    bool ok = wait_until(
        [&] {
          auto r = http_call("127.0.0.1", alive[i % 2], "GET", "/api/v1/changes/" + ids[i]);
          if (r.status != 200) return false;
          last = json::parse(r.body)["data"];
          return last["phase"] == "VALIDATED";
        },
        std::chrono::seconds(60));
    ASSERT_TRUE(ok) << last.dump(2);
  }

  // No callback lost: one applied approval callback per operation, none given up by the sender.
  EXPECT_EQ(db.scalar("SELECT COUNT(DISTINCT operation_id) FROM callback_ledger WHERE kind = 'approval'"),
            std::to_string(total));
  auto stats = json::parse(env.sim_call("GET", "/_sim/stats").body);
  EXPECT_EQ(stats["callbacks"].value("approval_failed", 0), 0) << stats.dump();
  // Judged on requests received: a takeover after the kill must not repeat B's merges or approvals.
  EXPECT_EQ(stats["merges"].size(), static_cast<std::size_t>(total)) << stats.dump();
  EXPECT_EQ(repeated_side_effects(stats), "");

  // One owner at a time: per operation, the instance ids of its workflow events form runs; once a
  // run ends (ownership moved) that instance never writes the operation again.
  std::map<std::string, std::vector<std::string>> writers;
  for (const auto& row : db.query("SELECT operation_id, instance_id FROM operation_event WHERE actor = 'workflow' AND "
                                  "instance_id IS NOT NULL ORDER BY operation_id, id")) {
    auto& w = writers[row[0]];
    const std::string& inst = row[1];
    if (w.empty() || w.back() != inst) w.push_back(inst);
  }
  int moved = 0;
  for (const auto& [op, runs] : writers) {
    std::set<std::string> distinct(runs.begin(), runs.end());
    EXPECT_EQ(distinct.size(), runs.size()) << "interleaved writers on " << op;
    if (runs.size() > 1) {
      ++moved;
      EXPECT_EQ(runs.front(), "inst-b") << "only B's operations change owner";
    }
  }
  std::cout << moved << " operations continued by a new owner\n";
  EXPECT_GT(moved, 0) << "B's in-flight operations were continued by A or C";
  auto takeovers =
      std::stoi(db.scalar("SELECT COUNT(*) FROM operation_event WHERE cause = 'owner lease expired: taken over'"));
  EXPECT_GT(takeovers, 0);
  EXPECT_LE(takeovers, b_inflight) << "only B's operations were taken over";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM (SELECT operation_id FROM operation_event WHERE cause = 'owner lease "
                      "expired: taken over' GROUP BY operation_id HAVING COUNT(*) > 1) d"),
            "0")
      << "no operation was taken over twice";
}
