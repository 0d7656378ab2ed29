// Status reads over real HTTP (changeflowd + changeflow-sim + MariaDB): the change without its
// timeline unless asked for; the blocking wait (?wait=&since=) answering on the transition, at its
// deadline with the unchanged state, at once for an ended change, 400 on bad values and 404 for a
// change the caller may not see; plain reads answered from the row the instance read a moment ago
// (http.status_cache_ms), dropped by every write of that instance; and several instances on one
// database: a change moved by another instance reaches a waiter through the re-check, a fresh read
// (Cache-Control: no-cache) is never stale, and a plain read is at most status_cache_ms behind.
//
// The waits use client deadlines SHORTER than the wait they ask for: an answer that arrives at all
// proves the change's move ended the wait, not its deadline.

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>

using namespace changeflow::testing;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using headers = std::vector<std::pair<std::string, std::string>>;

/// The sim never calls back: a change waits in APPROVAL_SENT until something else moves it.
const std::vector<std::string> no_callbacks = {"--callback-delay-ms", "86400000"};

/// Waiters are woken only by this instance's writes: the re-check runs every 10 minutes.
json signals_only(json extra = json::object()) {
  json c = {{"http", {{"status_wait_recheck_ms", 600000}}}};
  merge_json(c, extra);
  return c;
}

json body_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

http_result get(unsigned short port, const std::string& target, std::chrono::milliseconds timeout = 10s,
                const headers& h = {}) {
  return http_call("127.0.0.1", port, "GET", target, {}, h, timeout);
}

std::string submitted(flow_env& env, const std::string& target) {
  auto r = env.submit("status " + target, "status-user", target);
  EXPECT_EQ(r.status, 202) << r.body << r.error;
  return body_of(r)["data"].value("operationId", "");
}

/// Waits until the change is in `step` (plain reads); returns its document.
json reach_step(unsigned short port, const std::string& id, const std::string& step) {
  json last;
  EXPECT_TRUE(wait_until(
      [&] {
        auto r = get(port, "/api/v1/changes/" + id);
        if (r.status != 200) return false;
        last = body_of(r)["data"];
        return last["step"]["name"] == step;
      },
      30s))
      << last.dump(2);
  return last;
}

http_result cancel(unsigned short port, const std::string& id) {
  return http_call("127.0.0.1", port, "POST", "/api/v1/changes/" + id + "/cancel", json{{"reason", "test"}}.dump(),
                   {{"Content-Type", "application/json"}});
}

}  // namespace

TEST(StatusRead, TheTimelineOnlyWhenAskedFor) {
  flow_env env(json::object(), no_callbacks);
  auto id = submitted(env, "svc-timeline");
  ASSERT_FALSE(id.empty());
  auto plain = reach_step(env.port(), id, "APPROVAL_SENT");
  EXPECT_FALSE(plain.contains("timeline")) << plain.dump(2);
  EXPECT_EQ(plain["operationId"], id);
  EXPECT_EQ(plain["phase"], "APPROVAL_SENT");

  auto full = get(env.port(), "/api/v1/changes/" + id + "?include=timeline");
  ASSERT_EQ(full.status, 200) << full.body;
  auto doc = body_of(full)["data"];
  ASSERT_TRUE(doc["timeline"].is_array()) << doc.dump(2);
  ASSERT_GE(doc["timeline"].size(), 2u);
  EXPECT_EQ(doc["timeline"].front()["to"], "APPROVAL_SENDING");
  EXPECT_EQ(doc["timeline"].back()["to"], "APPROVAL_SENT");
  EXPECT_EQ(doc["timeline"].back()["version"], doc["version"]);
  // Apart from the timeline, the same document. `live` says whether an actor holds the change at
  // the moment of each read, and a waiting change's actor may stop (passivation) or start between
  // two reads, so the two documents may differ there.
  doc.erase("timeline");
  ASSERT_TRUE(doc["live"].is_boolean() && plain["live"].is_boolean());
  doc.erase("live");
  plain.erase("live");
  EXPECT_EQ(doc, plain);

  auto bad = get(env.port(), "/api/v1/changes/" + id + "?include=events");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(body_of(bad).value("message", "").find("include"), std::string::npos) << bad.body;
}

TEST(StatusRead, AWaitAnswersOnTheTransitionOrAtItsDeadlineUnchanged) {
  flow_env env(signals_only(), no_callbacks);
  auto id = submitted(env, "svc-wait");
  ASSERT_FALSE(id.empty());
  auto at_sent = reach_step(env.port(), id, "APPROVAL_SENT");
  const auto v = at_sent["version"].get<std::int64_t>();
  const std::string url = "/api/v1/changes/" + id;

  // Nothing moves it: the wait ends at its deadline, with the state it had.
  auto started = std::chrono::steady_clock::now();
  auto quiet = get(env.port(), url + "?wait=600&since=" + std::to_string(v));
  auto waited = std::chrono::steady_clock::now() - started;
  ASSERT_EQ(quiet.status, 200) << quiet.body << quiet.error;
  EXPECT_EQ(body_of(quiet)["data"]["version"], v);
  EXPECT_EQ(body_of(quiet)["data"]["step"]["name"], "APPROVAL_SENT");
  EXPECT_FALSE(body_of(quiet)["data"].contains("timeline"));
  EXPECT_GE(waited, 600ms) << "the wait answered before its deadline although nothing moved";

  // A wait of 20 s, read with a 15 s client deadline, answered by the cancel: the transition
  // woke it (the re-check runs only every 10 minutes here).
  auto pending = std::async(std::launch::async, [&] {
    return get(env.port(), url + "?wait=20000&include=timeline&since=" + std::to_string(v), 15s);
  });
  ASSERT_TRUE(wait_until([&] { return metric_sum(env.port(), "changeflow_status_waiters") >= 1; }, 10s));
  auto cancelled = cancel(env.port(), id);
  ASSERT_EQ(cancelled.status, 200) << cancelled.body;
  auto woke = pending.get();
  ASSERT_EQ(woke.status, 200) << woke.body << woke.error;
  auto moved = body_of(woke)["data"];
  EXPECT_EQ(moved["step"]["name"], "CANCELLED") << moved.dump(2);
  EXPECT_GT(moved["version"].get<std::int64_t>(), v);
  ASSERT_TRUE(moved["timeline"].is_array());
  EXPECT_EQ(moved["timeline"].back()["to"], "CANCELLED");
  EXPECT_EQ(metric_sum(env.port(), "changeflow_status_waiters"), 0);

  // An ended change, or a version the caller has not seen yet: answered at once.
  auto ended = get(env.port(), url + "?wait=20000&since=" + moved["version"].dump(), 10s);
  ASSERT_EQ(ended.status, 200) << ended.body << ended.error;
  EXPECT_EQ(body_of(ended)["data"]["step"]["name"], "CANCELLED");
  auto behind = get(env.port(), url + "?wait=20000&since=0", 10s);
  ASSERT_EQ(behind.status, 200) << behind.body << behind.error;
  EXPECT_EQ(body_of(behind)["data"]["version"], moved["version"]);

  // Bad values: 400, naming the argument.
  for (const char* q : {"?wait=-1", "?wait=25001", "?wait=abc", "?wait=", "?wait=1e3", "?since=3", "?wait=100&since=x",
                        "?wait=100&since=-1"}) {
    auto r = get(env.port(), url + q);
    EXPECT_EQ(r.status, 400) << q << ": " << r.body;
    auto message = body_of(r).value("message", "");
    EXPECT_TRUE(message.find("wait") != std::string::npos || message.find("since") != std::string::npos)
        << q << ": " << message;
  }
  // An unknown change: 404 at once, not a wait.
  auto unknown = get(env.port(), "/api/v1/changes/00000000-0000-4000-8000-000000000000?wait=20000", 10s);
  EXPECT_EQ(unknown.status, 404) << unknown.body << unknown.error;
}

TEST(StatusRead, AWaitFollowsAChangeThroughTheWholeFlow) {
  // Every version the standard flow writes on this instance (the actor's steps, the approval and
  // deploy callbacks) wakes the waiter: each 20 s wait is read with a 15 s client deadline.
  flow_env env(signals_only());
  auto id = submitted(env, "svc-follow");
  ASSERT_FALSE(id.empty());
  const std::string url = "/api/v1/changes/" + id;
  std::int64_t seen = 0;
  std::vector<std::string> steps;
  json last;
  for (int answers = 0; answers < 100; ++answers) {
    auto r = get(env.port(), url + "?wait=20000&since=" + std::to_string(seen), 15s);
    ASSERT_EQ(r.status, 200) << "after version " << seen << ": " << r.body << r.error;
    last = body_of(r)["data"];
    auto version = last["version"].get<std::int64_t>();
    ASSERT_GT(version, seen) << last.dump(2);
    seen = version;
    // A write that keeps the step (a retry, a poll's next wake) moves the version, not the timeline.
    auto step = last["step"]["name"].get<std::string>();
    if (steps.empty() || steps.back() != step) steps.push_back(step);
    if (last["phase"] == "VALIDATED") break;
  }
  EXPECT_EQ(last["phase"], "VALIDATED") << last.dump(2);
  EXPECT_GE(steps.size(), 3u);
  // What the waits saw is what the timeline recorded, in order.
  EXPECT_TRUE(is_subsequence(steps, timeline_steps(env.get_change(id))));
}

TEST(StatusRead, AWaitShowsNothingToACallerWhoMayNotSeeTheChange) {
  json config = {{"auth", {{"required", true}, {"permission_timeout_ms", 500}}},
                 {"external", {{"breaker_failures", 1000}}}};
  flow_env env(signals_only(config), no_callbacks);
  auto as = [](const std::string& account) -> headers {
    return {{"Authorization", "Bearer " + mint_hs256(test_jwt_secret, account, 600)}};
  };
  const std::vector<std::pair<std::string, std::string>> grants = {
      {"alice", "subject:team-a"}, {"bob", "subject:team-b"}, {"olga", "changeflow.ops"}};
  for (const auto& [account, rule] : grants) {
    json grant = {{"subject", account}, {"granted", json::array({rule})}};
    ASSERT_EQ(env.sim_call("POST", "/_sim/permissions", grant.dump()).status, 200);
  }
  json body = {{"subject", "team-a"},
               {"target", "svc-hidden"},
               {"title", "hidden"},
               {"files", {{{"path", "config/svc-hidden.yaml"}, {"content", "v: 1\n"}}}}};
  auto r = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump(), as("alice"));
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string url = "/api/v1/changes/" + body_of(r)["data"]["operationId"].get<std::string>();

  // bob may not see team-a's change: 404, answered at once instead of after the 20 s wait; the
  // same answer as for an id that does not exist.
  auto hidden = get(env.port(), url + "?wait=20000", 10s, as("bob"));
  EXPECT_EQ(hidden.status, 404) << hidden.body << hidden.error;
  auto unknown = get(env.port(), "/api/v1/changes/00000000-0000-4000-8000-000000000000?wait=20000", 10s, as("bob"));
  EXPECT_EQ(body_of(hidden), body_of(unknown));
  auto hidden_timeline = get(env.port(), url + "?include=timeline", 10s, as("bob"));
  EXPECT_EQ(hidden_timeline.status, 404) << hidden_timeline.body;
  // Its requester and an operator do see it.
  EXPECT_EQ(get(env.port(), url + "?wait=20000&since=0", 10s, as("alice")).status, 200);
  EXPECT_EQ(get(env.port(), url + "?wait=20000&since=0", 10s, as("olga")).status, 200);
  // No token: 401, whatever the arguments.
  EXPECT_EQ(get(env.port(), url + "?wait=20000").status, 401);
}

TEST(StatusRead, PlainReadsAreKeptAndEveryWriteOfThisInstanceIsSeenAtOnce) {
  // Rows are kept for 10 minutes here: a write that did not drop the kept row would leave the
  // change looking stuck and this test would time out. The whole flow is followed by plain polls
  // (every step of the actor, both callbacks), then a second change is cancelled and read at once.
  flow_env env(json{{"http", {{"status_cache_ms", 600000}}}});
  auto id = submitted(env, "svc-kept");
  ASSERT_FALSE(id.empty());
  std::vector<std::string> steps;
  json last;
  int polls = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        auto r = get(env.port(), "/api/v1/changes/" + id);
        ++polls;
        if (r.status != 200) return false;
        last = body_of(r)["data"];
        auto step = last["step"]["name"].get<std::string>();
        if (steps.empty() || steps.back() != step) steps.push_back(step);
        return last["phase"] == "VALIDATED";
      },
      60s))
      << last.dump(2);
  EXPECT_GE(steps.size(), 3u);
  EXPECT_TRUE(is_subsequence(steps, timeline_steps(env.get_change(id))));
  // The polls were answered from kept rows between the writes: the database answered fewer of them
  // than were asked (each write replaces or drops the kept row; only then does a poll query).
  const auto db_reads = metric_sum(env.port(), "changeflow_status_read_db_reads_total");
  EXPECT_LT(db_reads, polls) << "every poll of the change queried the database (" << polls << " polls)";

  auto other = submitted(env, "svc-kept-cancel");
  ASSERT_FALSE(other.empty());
  auto before = reach_step(env.port(), other, "APPROVAL_SENT");
  ASSERT_EQ(cancel(env.port(), other).status, 200);
  auto after = get(env.port(), "/api/v1/changes/" + other);
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(body_of(after)["data"]["step"]["name"], "CANCELLED") << after.body;
  EXPECT_GT(body_of(after)["data"]["version"].get<std::int64_t>(), before["version"].get<std::int64_t>());
}

TEST(StatusRead, AnotherInstancesWriteReachesWaitersAndFreshReadsAreNeverStale) {
  // Two instances on one database. A owns the change; B only reads it. B's waiter learns of A's
  // cancel through its re-check (every 300 ms here); B keeps plain reads for 10 minutes, so right
  // after A's commit a plain read on B still shows the row B read before (the documented bound),
  // while a fresh read (Cache-Control: no-cache) shows the committed state; an ended change is then
  // answered from B's memory.
  flow_env env(json{{"http", {{"status_wait_recheck_ms", 300}}}}, no_callbacks);
  json peer = env.config();
  peer["instance"]["id"] = "status-peer";
  peer["http"]["port"] = free_port();
  peer["http"]["status_cache_ms"] = 600000;
  service_process b(peer, env.dir(), "changeflowd-peer");

  auto id = submitted(env, "svc-peer");
  ASSERT_FALSE(id.empty());
  const std::string url = "/api/v1/changes/" + id;
  auto on_a = reach_step(env.port(), id, "APPROVAL_SENT");
  const auto v = on_a["version"].get<std::int64_t>();
  auto on_b = get(b.port(), url);
  ASSERT_EQ(on_b.status, 200) << on_b.body;
  EXPECT_EQ(body_of(on_b)["data"]["version"], v);

  auto pending = std::async(std::launch::async,
                            [&] { return get(b.port(), url + "?wait=20000&since=" + std::to_string(v), 15s); });
  ASSERT_TRUE(wait_until([&] { return metric_sum(b.port(), "changeflow_status_waiters") >= 1; }, 10s));
  ASSERT_EQ(cancel(env.port(), id).status, 200);
  const auto committed = std::stoll(env.db().scalar("SELECT version FROM operation WHERE operation_id = '" + id + "'"));
  // A plain read on B right after A's commit: the row B read before (within status_cache_ms), or
  // the committed one when B's re-check for its waiter (every 300 ms) has read the cancel already,
  // which then answers plain reads too; never any other version.
  auto kept = get(b.port(), url);
  ASSERT_EQ(kept.status, 200) << kept.body;
  const auto kept_version = body_of(kept)["data"]["version"].get<std::int64_t>();
  EXPECT_TRUE(kept_version == v || kept_version == committed) << kept.body;
  // A fresh read on B: the new state, never the one B served before.
  auto after = get(b.port(), url, 10s, {{"Cache-Control", "no-cache"}});
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(body_of(after)["data"]["version"], committed);
  EXPECT_EQ(body_of(after)["data"]["step"]["name"], "CANCELLED");

  auto woke = pending.get();
  ASSERT_EQ(woke.status, 200) << woke.body << woke.error;
  EXPECT_EQ(body_of(woke)["data"]["step"]["name"], "CANCELLED");
  EXPECT_EQ(body_of(woke)["data"]["version"], committed);

  // The ended change is kept in memory by B and still answered as committed; its timeline comes
  // from the database.
  EXPECT_GE(metric_sum(b.port(), "changeflow_status_cached_rows"), 1);
  auto again = get(b.port(), url);
  EXPECT_EQ(body_of(again)["data"]["version"], committed);
  auto full = get(b.port(), url + "?include=timeline");
  ASSERT_EQ(full.status, 200) << full.body;
  EXPECT_EQ(body_of(full)["data"]["timeline"].back()["to"], "CANCELLED");
  EXPECT_EQ(body_of(full)["data"]["timeline"].back()["version"], committed);
}
