// A long mixed chaos run, end to end against changeflowd +
// changeflow-sim + MariaDB. For CHANGEFLOW_CHAOS_SECONDS (default 35) changes are submitted at a
// steady pace while, all at once:
//   - the approval system duplicates, delays (late), reorders (a stale opposite decision first),
//     drops and mis-addresses (old operation id) its callbacks, per tag in the change title;
//   - GitLab answers 5xx bursts and loses responses (the action happens, the answer never comes),
//     fails pipelines, asks for rebases, answers slowly; deploy callbacks are dropped or carry no
//     operation ids;
//   - changeflowd is SIGKILLed and restarted several times (lease takeovers by the new instance);
//   - the step order (flow.default) and the batch path (batch.enabled) flip between waves (hot reload);
//   - the test itself re-delivers callbacks recorded in callback_ledger (approval: the raw body with
//     its HMAC signature; deploy: the delivery with its token) and re-submits requests with the same
//     operationId (a client that lost our answer).
// Then the global and per-change faults stop (each tag's own rule stays: a [pfail] change still on
// its way fails its next pipeline as before), a few clean changes raise the deploy watermark (so
// reconciliation can validate merges whose deploy callback was dropped), and once nothing is in
// motion the database is checked with SQL: I1, I2/I4, I5, I6, one owner at a time, validation
// exactly once, one applied approval per operation; GitLab is judged on the requests the sim
// received (no merge after a merge, no repeated approve, no second MR for a branch) and merged MRs
// <=> merged operations.
// Liveness is judged per change: a change whose tag injects no unrecoverable fault must reach
// VALIDATED; the others must end in a step named for their fault (expected_ends()). The change
// mix comes from a seed printed at the start; CHANGEFLOW_CHAOS_SEED=<seed> replays the same mix
// (which request a kill cuts still depends on timing).
// Waits are wait_until on SQL conditions; the only sleep paces the load generator.

#include "base/ids.hpp"
#include "tests/support/flow_env.hpp"
#include "tests/support/invariants.hpp"
#include "tests/support/sim_attempts.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

using namespace changeflow;
using namespace changeflow::testing;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* approval_secret = "demo-approval-secret";  // the sim's and the service's default
constexpr const char* deploy_secret = "demo-deploy-secret";

int chaos_seconds() {
  const char* v = std::getenv("CHANGEFLOW_CHAOS_SECONDS");
  int s = v ? std::atoi(v) : 0;
  return s > 0 ? s : 35;
}

unsigned chaos_seed() {
  if (const char* v = std::getenv("CHANGEFLOW_CHAOS_SEED"); v && *v) return static_cast<unsigned>(std::stoul(v));
  return static_cast<unsigned>(std::random_device{}());
}

using table = changeflow::testing::rows;

// Terminal phases (workflow::is_terminal) and the steps that are parked on purpose: the outcome
// is unknown after the poll budget / deploy wait and a human (or a late callback) settles them.
const char* terminal_phases = "('VALIDATED','CREATE_FAILED','HANDLE_FAILED','REJECTED','CLOSED')";
const char* parked_steps = "(10501,10502,10503,10302)";  // *_PIPELINE_PENDING, REBASE_PENDING, DEPLOY_TIMEOUT

/// A change's tags pick its faults; the sim scopes each rule by a `match` on the title.
struct tag_kind {
  const char* tag;
  bool per_change;  // true: a count-1 rule matching this change only; false: one unlimited rule per tag
  json rule;        // without `match`
};

/// "PHASE/STEP" endings a change may have, by tag. Every fault not listed here (kills, 5xx bursts,
/// lost answers, slow answers, duplicated / late / mis-addressed callbacks, a rebase, a dropped or
/// id-less deploy callback) is recoverable: the change must be VALIDATED.
const std::set<std::string>& expected_ends(const std::string& tag) {
  static const std::set<std::string> validated = {"VALIDATED/CALLED_BACK"};
  static const std::map<std::string, std::set<std::string>> unrecoverable = {
      // The approval system decided "rejected".
      {"[reject]", {"REJECTED/APPROVAL_REJECTED"}},
      // The stale opposite decision (REJECTED) arrives first and is final; a change whose rejection
      // came while its MR was already open ends the same way.
      {"[reorder]", {"REJECTED/APPROVAL_REJECTED"}},
      // No decision ever arrives: the approval deadline (timeouts.approval_wait_seconds) ends it.
      {"[drop]", {"CLOSED/APPROVAL_TIMEOUT"}},
      // The check pipeline fails: alone, or bisected out of a batch.
      {"[pfail]", {"CREATE_FAILED/CREATE_PIPELINE_FAILED", "HANDLE_FAILED/BATCH_FAILED"}},
  };
  auto it = unrecoverable.find(tag);
  return it == unrecoverable.end() ? validated : it->second;
}

const std::vector<tag_kind>& tags() {
  static const std::vector<tag_kind> t = {
      {"", false, json()},  // no tag-specific fault (global faults still apply)
      {"", false, json()},
      {"[dup]", false, {{"kind", "approval_callback"}, {"mode", "duplicate"}}},
      {"[late]", false, {{"kind", "approval_callback"}, {"mode", "delay"}, {"delay_ms", 2500}}},
      {"[reorder]", false, {{"kind", "approval_callback"}, {"mode", "reorder"}}},
      {"[old]", false, {{"kind", "approval_callback"}, {"mode", "old_operation"}}},
      {"[drop]", false, {{"kind", "approval_callback"}, {"mode", "drop"}}},
      {"[reject]", false, json()},  // the sim decides REJECTED for titles with [reject]
      {"[pfail]", false, {{"kind", "pipeline_fail"}}},
      {"[rebase]", true, {{"kind", "merge_needs_rebase"}, {"count", 1}}},
      {"[deploydrop]", true, {{"kind", "deploy_callback"}, {"mode", "drop"}, {"count", 1}}},
      {"[noids]", true, {{"kind", "deploy_callback"}, {"mode", "no_operation_ids"}, {"count", 1}}},
      {"[slow]", true, {{"kind", "slow"}, {"delay_ms", 1500}, {"count", 2}}},
  };
  return t;
}

/// The unlimited rule of every tag that has one. A tag is a property of its change for the whole run:
/// a [pfail] change's pipeline fails whenever it runs, also after the other faults end.
std::vector<json> tag_rules() {
  std::vector<json> rules;
  for (const auto& t : tags()) {
    if (t.per_change || t.rule.is_null()) continue;
    auto rule = t.rule;
    rule["match"] = t.tag;
    rules.push_back(std::move(rule));
  }
  return rules;
}

/// Count-limited global faults, re-armed at every wave so they spread over the run.
std::vector<json> wave_faults() {
  return {
      {{"kind", "status"}, {"endpoint", "create_mr"}, {"status", 503}, {"count", 3}},
      {{"kind", "status"}, {"endpoint", "get_mr"}, {"status", 502}, {"count", 3}},
      {{"kind", "status"}, {"endpoint", "approval_submit"}, {"status", 500}, {"count", 2}},
      {{"kind", "status"}, {"endpoint", "approval_submit"}, {"status", 429}, {"retry_after", 1}, {"count", 1}},
      {{"kind", "lose_response"}, {"endpoint", "create_mr"}, {"count", 2}},
      {{"kind", "lose_response"}, {"endpoint", "create_commit"}, {"count", 1}},
      {{"kind", "lose_response"}, {"endpoint", "merge"}, {"count", 2}},
      {{"kind", "lose_response"}, {"endpoint", "approve"}, {"count", 2}},
      {{"kind", "lose_response"}, {"endpoint", "approval_submit"}, {"count", 2}},
  };
}

json base_config() {
  return {
      {"external",
       {{"request_timeout_ms", 1000},
        {"connect_timeout_ms", 500},
        {"breaker_failures", 6},
        {"breaker_cooldown_ms", 500}}},
      // A fresh instance id per start (not fixed) + a short lease: every restart takes over the
      // killed instance's rows, so "one owner at a time" is really exercised.
      {"instance", {{"lease_seconds", 3}}},
      {"durability",
       {{"sweep_interval_ms", 500}, {"inbox_poll_ms", 200}, {"stuck_after_seconds", 3}, {"approval_grace_seconds", 1}}},
      // Dropped approval callbacks end in APPROVAL_TIMEOUT (CLOSED) instead of waiting a week.
      {"timeouts", {{"approval_wait_seconds", 8}}},
      {"reconcile", {{"interval_ms", 1000}, {"min_age_seconds", 1}, {"max_age_seconds", 86400}}},
      {"batch", {{"round_interval_ms", 400}, {"max_members", 8}}},
      {"rehydrate", {{"rate_per_second", 2000}}},
      {"rate_limit", {{"submit", 100000}, {"callbacks", 100000}}},
      {"merge", {{"max_attempts", 6}}}};
}

json toggles(int wave) {
  // Flow order alternates every wave; the batch path is on in waves 2-3 of every 4, so it runs
  // with both step orders.
  return {{"flow", {{"default", wave % 2 == 0 ? "approve_then_create" : "create_then_approve"}}},
          {"batch", {{"enabled", wave % 4 >= 2}}}};
}

struct counters {
  int changes = 0, resubmits = 0, submit_retries = 0, kills = 0, approval_replays = 0, deploy_replays = 0;
  std::map<int, int> submit_status;
  std::map<std::string, int> replay_outcomes;
};

struct planned_change {
  std::string id, title, subject, target;
  bool accepted = false;
  std::string tag;
};

}  // namespace

TEST(Chaos, MixedFaultsKillsAndReplaysKeepEveryInvariant) {
  const int seconds = chaos_seconds();
  const unsigned seed = chaos_seed();
  std::cout << "[chaos] seed " << seed << " (replay: CHANGEFLOW_CHAOS_SEED=" << seed << ")\n";
  // The sim re-delivers its callbacks for about two minutes (backoff capped at 2 s), as a real
  // sender does: a callback refused while changeflowd is down is not lost to a kill. Only the
  // [drop] tag loses an approval decision on purpose.
  flow_env env(base_config(), {"--callback-attempts", "60"});
  auto& db = env.db();
  counters n;
  std::mt19937 rng(seed);
  int wave = 0;
  auto apply_wave = [&] {
    auto cfg = env.config();
    merge_json(cfg, toggles(wave));
    env.service().rewrite_config(cfg);
    for (const auto& f : wave_faults()) env.add_fault(f);
  };
  for (const auto& rule : tag_rules()) env.add_fault(rule);
  apply_wave();

  std::vector<planned_change> changes;
  std::vector<std::size_t> unsettled;  // submits whose outcome we have not seen (transport error, 503)
  auto submit = [&](planned_change& c) {
    auto r = env.submit(c.title, c.subject, c.target, c.id);
    ++n.submit_status[r.status];
    if (r.status == 202) {
      c.accepted = true;
      return true;
    }
    // 0: the service is down or was killed mid-request; 503: restarting. The client retries with the
    // same operationId later (idempotent). Anything else is a bug.
    EXPECT_TRUE(r.status == 0 || r.status == 503) << c.title << ": " << r.status << " " << r.body;
    return false;
  };
  auto replay_some = [&] {
    // Approval: the raw body as recorded (the ledger keeps the delivered bytes) with the signature
    // the approval system computes over them -- a byte-exact replay of a real delivery.
    for (const auto& row : db.query("SELECT payload FROM callback_ledger WHERE kind = 'approval' AND payload IS NOT "
                                    "NULL ORDER BY RAND() LIMIT 2")) {
      auto r = http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/approval", row[0],
                         {{"X-Signature", "sha256=" + ids::hmac_sha256_hex(approval_secret, row[0])}}, 3s);
      ++n.approval_replays;
      if (r.status == 0) continue;  // the service is being killed: nothing to judge
      EXPECT_EQ(r.status, 200) << r.body;
      auto j = json::parse(r.body, nullptr, false);
      std::string outcome = j.is_discarded() ? "?" : j["data"].value("outcome", "?");
      ++n.replay_outcomes["approval " + outcome];
      EXPECT_EQ(outcome, "DUPLICATE") << "a replayed approval delivery is recognised: " << row[0];
    }
    for (const auto& row : db.query("SELECT payload FROM callback_ledger WHERE kind = 'deploy' AND payload IS NOT NULL "
                                    "ORDER BY RAND() LIMIT 1")) {
      auto r = http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/deploy", row[0],
                         {{"X-Gitlab-Token", deploy_secret}}, 3s);
      ++n.deploy_replays;
      if (r.status == 0) continue;
      EXPECT_EQ(r.status, 200) << r.body;
      auto j = json::parse(r.body, nullptr, false);
      std::string outcome = j.is_discarded() ? "?" : j["data"].value("outcome", "?");
      ++n.replay_outcomes["deploy " + outcome];
      EXPECT_EQ(outcome, "DUPLICATE") << row[0];
    }
  };

  const auto pace = 300ms;
  const int waves = std::max(4, seconds / 10);
  const auto start = std::chrono::steady_clock::now();
  const auto wave_length = std::chrono::milliseconds(seconds * 1000 / waves);
  auto next_wave = start + wave_length;
  for (int i = 0; std::chrono::steady_clock::now() - start < std::chrono::seconds(seconds); ++i) {
    const auto& tag = tags()[rng() % tags().size()];
    planned_change c;
    c.id = ids::new_uuid();
    c.subject = "chaos-user-" + std::to_string(i % 7);
    c.target = "chaos-target-" + std::to_string(i);
    c.title = "chaos c" + std::to_string(i) + " " + tag.tag;
    c.tag = tag.tag;
    if (tag.per_change) {
      auto rule = tag.rule;
      rule["match"] = c.title;
      env.add_fault(rule);
    }
    changes.push_back(c);
    ++n.changes;
    if (!submit(changes.back())) unsettled.push_back(changes.size() - 1);
    // A client that lost our answer sends the same request again: admitted once (I4).
    if (i % 6 == 0 && changes.back().accepted) {
      ++n.resubmits;
      auto again = env.submit(c.title, c.subject, c.target, c.id);
      EXPECT_TRUE(again.status == 202 || again.status == 0) << again.status << " " << again.body;
    }
    for (auto it = unsettled.begin(); it != unsettled.end();) {
      ++n.submit_retries;
      it = submit(changes[*it]) ? unsettled.erase(it) : std::next(it);
    }
    if (i % 4 == 3) replay_some();
    if (std::chrono::steady_clock::now() >= next_wave) {
      // SIGKILL mid-flight: requests, calls and callbacks in progress are cut. The next instance
      // (new instance id) takes the rows over once the 3 s lease has expired.
      env.kill_service();
      ++n.kills;
      ++wave;
      env.restart_service(toggles(wave));
      apply_wave();
      next_wave += wave_length;
    }
    std::this_thread::sleep_for(pace);  // load pacing, not synchronization
  }
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto it = unsettled.begin(); it != unsettled.end();) {
          ++n.submit_retries;
          it = submit(changes[*it]) ? unsettled.erase(it) : std::next(it);
        }
        return unsettled.empty();
      },
      30s))
      << unsettled.size() << " submits never accepted";

  // Settle: the global and per-change faults off, in one step that keeps the tags' rules (a change
  // still on its way, e.g. bisected out of a failed batch, meets the same faults as before; clearing
  // them would let a [pfail] change's next pipeline pass). Then clean changes whose deploys raise the
  // watermark above every MR, so reconciliation validates the merges whose deploy callback was dropped.
  ASSERT_EQ(env.sim_call("PUT", "/_sim/faults", json(tag_rules()).dump()).status, 200);
  std::vector<std::string> tail;
  for (int k = 0; k < 3; ++k) {
    planned_change c{ids::new_uuid(), "chaos tail " + std::to_string(k), "chaos-tail",
                     "chaos-tail-" + std::to_string(k)};
    ASSERT_TRUE(wait_until([&] { return submit(c); }, 20s));
    changes.push_back(c);
    tail.push_back(c.id);
  }
  const std::string in_motion_sql = std::string("SELECT COUNT(*) FROM operation WHERE phase NOT IN ") +
                                    terminal_phases + " AND step NOT IN " + parked_steps;
  bool settled =
      wait_until([&] { return db.scalar(in_motion_sql) == "0"; }, std::chrono::seconds(std::max(120, seconds / 2)));
  auto in_motion = db.query(std::string("SELECT operation_id, title, step, phase, next_wake_at, owner_instance, "
                                        "last_error FROM operation WHERE phase NOT IN ") +
                            terminal_phases + " AND step NOT IN " + parked_steps);
  EXPECT_TRUE(settled) << "operations still in motion after the faults ended:\n" << describe(in_motion, 30);
  for (const auto& id : tail) EXPECT_EQ(env.get_change(id).value("phase", ""), "VALIDATED") << "clean tail " << id;

  // Liveness: every change ends where its faults allow (expected_ends); print phase/step -> count.
  {
    std::map<std::string, int> ends;
    std::string unexpected;
    for (const auto& c : changes) {
      if (!c.accepted) continue;
      auto got = env.get_change(c.id);
      std::string end = got.value("phase", "?") + "/" + (got.contains("step") ? got["step"].value("name", "?") : "?");
      ++ends[end];
      // Two decisions 20 ms apart may still be applied in either order on a busy machine (separate
      // connections, separate workers): the first to commit wins. A reordered change that ended
      // VALIDATED is correct only when its applied decision was the APPROVED one and the stale
      // REJECTED was refused as out of order.
      const bool approved_first =
          c.tag == "[reorder]" && end == "VALIDATED/CALLED_BACK" &&
          db.scalar(
              "SELECT GROUP_CONCAT(CONCAT(JSON_UNQUOTE(JSON_EXTRACT(payload, '$.result')), ':', outcome) "
              "ORDER BY JSON_EXTRACT(payload, '$.result')) FROM callback_ledger WHERE kind = 'approval' AND "
              "operation_id = '" +
              c.id + "' AND outcome IN ('APPLIED', 'OUT_OF_ORDER')") == "APPROVED:APPLIED,REJECTED:OUT_OF_ORDER";
      if (!expected_ends(c.tag).count(end) && !approved_first) {
        unexpected += c.id + " '" + c.title + "' ended " + end +
                      "; last_error: " + (got.contains("lastError") ? got["lastError"].dump() : std::string("-")) +
                      "\n";
      }
    }
    std::cout << "[chaos] final phase/step -> count\n";
    for (const auto& [end, k] : ends) std::cout << "[chaos]   " << end << ": " << k << "\n";
    EXPECT_TRUE(unexpected.empty()) << "changes not in an expected end for their faults:\n" << unexpected;
    std::cout << "[chaos] every change in an expected end: " << (unexpected.empty() ? "ok" : "VIOLATED") << "\n";
  }

  // ---- the numbers
  int accepted = 0;
  for (const auto& c : changes) accepted += c.accepted;
  std::cout << "[chaos] seconds=" << seconds << " changes=" << changes.size() << " accepted=" << accepted
            << " resubmits=" << n.resubmits << " submit_retries=" << n.submit_retries << " kills=" << n.kills
            << " approval_replays=" << n.approval_replays << " deploy_replays=" << n.deploy_replays << "\n";
  for (const auto& [s, k] : n.submit_status) std::cout << "[chaos] submit status " << s << ": " << k << "\n";
  for (const auto& [o, k] : n.replay_outcomes) std::cout << "[chaos] replay " << o << ": " << k << "\n";
  for (const auto& r : db.query("SELECT phase, step, COUNT(*) FROM operation GROUP BY phase, step ORDER BY 3 DESC")) {
    std::cout << "[chaos] final " << r[0] << " " << r[1] << ": " << r[2] << "\n";
  }
  std::cout << "[chaos] sim stats: " << env.sim_call("GET", "/_sim/stats").body << "\n";
  EXPECT_GE(n.kills, 3);
  EXPECT_GT(n.approval_replays, 0);

  // ---- SQL invariants
  // I4 (submit side): one row per accepted operationId, created once, nothing else created.
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation"), std::to_string(accepted)) << "one row per accepted change";
  expect_invariants([&](const std::string& sql) { return db.query(sql); }, "chaos");
  std::cout << "[chaos] deploy ledger rows left PENDING (killed between record and apply): "
            << db.scalar("SELECT COUNT(*) FROM callback_ledger WHERE kind = 'deploy' AND outcome = 'PENDING'") << "\n";
  // One owner at a time: per operation, the instance ids of its workflow events form runs; once a
  // run ends (ownership moved), that instance never writes the operation again.
  {
    auto rows = db.query(
        "SELECT operation_id, instance_id FROM operation_event WHERE actor = 'workflow' AND "
        "instance_id IS NOT NULL ORDER BY operation_id, id");
    std::map<std::string, std::vector<std::string>> writers;
    for (const auto& r : rows) {
      auto& w = writers[r[0]];
      if (w.empty() || w.back() != r[1]) w.push_back(r[1]);
    }
    int moved = 0;
    std::string bad;
    for (const auto& [op, runs] : writers) {
      std::set<std::string> distinct(runs.begin(), runs.end());
      if (distinct.size() != runs.size()) bad += op + "\n";
      moved += runs.size() > 1;
    }
    EXPECT_TRUE(bad.empty()) << "interleaved owners on:\n" << bad;
    std::cout << "[chaos] one owner at a time: " << (bad.empty() ? "ok" : "VIOLATED") << " (" << moved
              << " operations continued by a later instance)\n";
  }
  // One merge per MR in GitLab, whatever was lost or retried.
  auto stats = json::parse(env.sim_call("GET", "/_sim/stats").body, nullptr, false);
  ASSERT_FALSE(stats.is_discarded());
  // Judged on the requests the sim received, refused ones included (a merge of a merged MR is a
  // 405, a repeated approve a 401: the outcome counters cannot exceed one).
  auto repeated = repeated_side_effects(stats);
  EXPECT_EQ(repeated, "");
  std::cout << "[chaos] no side effect repeated: " << (repeated.empty() ? "ok" : "VIOLATED") << "\n";
  // Both directions between GitLab and our database: every MR the sim merged carries operations,
  // all of them MERGED or VALIDATED here; every MERGED / VALIDATED operation's MR (its own, or its
  // batch's) was merged in the sim.
  {
    std::set<std::string> sim_merged;
    for (const auto& [key, count] : stats["merges"].items()) sim_merged.insert(key.substr(key.find('!') + 1));
    auto rows = db.query(
        "SELECT o.operation_id, o.phase, COALESCE(CAST(o.mr_iid AS CHAR), ''), "
        "COALESCE(CAST(b.mr_iid AS CHAR), '') FROM operation o LEFT JOIN merge_batch b ON b.id = "
        "o.batch_id");
    std::map<std::string, int> carried;  // merged iid -> operations carried by it
    std::string bad;
    for (const auto& r : rows) {
      const auto& op = r[0];
      const auto& phase = r[1];
      // A batch member is merged through its batch's MR; otherwise through its own.
      const auto& iid = r[3].empty() ? r[2] : r[3];
      bool merged_here = phase == "MERGED" || phase == "VALIDATED";
      bool merged_there = !iid.empty() && sim_merged.count(iid);
      if (merged_there) ++carried[iid];
      if (merged_here && !merged_there) bad += op + " is " + phase + " but MR '" + iid + "' was not merged\n";
      if (merged_there && !merged_here) bad += op + " is " + phase + " but its MR " + iid + " was merged\n";
    }
    for (const auto& iid : sim_merged) {
      if (!carried.count(iid)) bad += "MR " + iid + " was merged but no operation carries it\n";
    }
    EXPECT_TRUE(bad.empty()) << bad;
    std::cout << "[chaos] merged in GitLab <=> MERGED/VALIDATED here (" << sim_merged.size()
              << " MRs): " << (bad.empty() ? "ok" : "VIOLATED") << "\n";
  }
}
