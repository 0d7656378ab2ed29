// The request actor in process, on CAF's deterministic test coordinator
// (actors/testing/in_process.hpp): the test decides when each message, blocking job and timer runs.
// The repository is a real MariaDB; the external systems are scripted answers in
// `runtime::services::run_external`.
//
// So each test fixes one interleaving exactly: a callback's nudge while a write is in flight, a
// call's answer arriving after the row moved on, a timer that was replaced, a job that died.

#include "actors/request_actor.hpp"

#include "actors/testing/in_process.hpp"
#include "persistence/callback_repo.hpp"
#include "persistence/reconcile_repo.hpp"
#include "persistence/repo_test_support.hpp"

#include <gtest/gtest.h>
#include <caf/send.hpp>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

namespace changeflow::messages {
void PrintTo(call_kind k, std::ostream* os) {
  *os << to_string(k);
}
}  // namespace changeflow::messages

using namespace changeflow;
using namespace changeflow::actors;
using messages::call_kind;
using messages::call_reply;
using persistence::test::new_op;
using persistence::test::walk;
using S = workflow::step;

namespace {

/// One request actor, with the external systems scripted in `runtime::services::run_external`.
class in_process : public actors::testing::in_process_actors {
 protected:
  /// Passivation off unless a test asks for it: these tests watch the actor through its waits.
  explicit in_process(std::int64_t passivate_beyond_seconds = 0)
      : in_process_actors({{"poll", {{"short_interval_ms", 1000}, {"short_attempts", 3}}},
                           {"durability", {{"passivate_beyond_seconds", passivate_beyond_seconds}}}}) {
    svc_.run_external = [this](clients::external_context&, const config::snapshot&, const messages::call_request& req,
                               const effects::call_context&) {
      calls_.push_back(req.kind);
      reads_.push_back(req.last_read);
      if (answers_.empty()) {
        ADD_FAILURE() << "no scripted answer for " << messages::to_string(req.kind);
        call_reply r;
        r.kind = req.kind;
        r.outcome = call_reply::status::refused;
        return r;
      }
      auto r = answers_.front();
      answers_.pop_front();
      EXPECT_EQ(r.kind, req.kind) << "the actor made a different call than the script expected";
      return r;
    };
  }

  /// Spawns the actor from the stored row, as submit and rehydration do.
  void spawn() {
    auto row = persistence::load_operation(setup_db_, id_);
    ASSERT_TRUE(row.ok()) << row.error.message;
    auto a = spawn_request_actor(svc_, seed_from_row(row.value, now_ms_));
    ASSERT_TRUE(a.has_value());
    track(caf::actor_cast<caf::actor>(*a));
  }

  void answer(call_reply r) { answers_.push_back(std::move(r)); }
  /// A new change of ann's to `target`, its actor spawned, the approval request it makes answered
  /// with `approval_id` (the answer is queued; the external pool has not run it yet).
  void asked_for_approval(const std::string& target, const std::string& approval_id);
  /// The approval callback's unit applies APPROVED to the change, and the actor is nudged with the
  /// step and version it wrote (as the callback intake does); returns the unit's answer.
  persistence::approval_applied approved_and_named() {
    auto decided =
        persistence::apply_approval_callback(setup_db_, "cb-1", id_, persistence::approval_result::APPROVED, "{}");
    EXPECT_TRUE(decided.ok()) << decided.error.message;
    EXPECT_EQ(decided.value.new_step, S::APPROVAL_APPROVED);
    auto a = registry_.find(id_);
    EXPECT_TRUE(a.has_value());
    if (a && decided.ok()) {
      caf::anon_send(caf::actor_cast<request_actor>(*a),
                     messages::row_changed{"approval callback", workflow::code_of(S::APPROVAL_APPROVED),
                                           *decided.value.new_version});
    }
    return decided.value;
  }

  /// An actor in CREATE_MR_OPENED that read the pipeline running and waits for its next poll.
  void polling_a_running_pipeline();
  /// An actor in CREATE_MR_OPENED whose pipeline read found it passed (the approvals are queued, not
  /// run); returns the row's version at CREATE_MR_OPENED.
  std::int64_t pipeline_read_passed();
  /// From there the approvals answer 429 and are retried; with `lose_first_write` the write of the
  /// held step and the failed attempt is lost once and written on its second try.
  void approvals_retried(bool lose_first_write);
  /// An actor that created MR 42 and handed the transition to CREATE_MR_OPENED to the database
  /// (not run yet).
  void mr_opened_write_in_flight();
  /// The approval decision lands right behind the actor's own APPROVAL_SENT; `nudges` nudges naming
  /// it arrive while that write is in flight.
  void approval_decided_during_the_sent_write(int nudges);

  persistence::operation_row row() {
    auto r = persistence::load_operation(setup_db_, id_);
    EXPECT_TRUE(r.ok()) << r.error.message;
    return r.value;
  }
  bool actor_alive() const { return registry_.find(id_).has_value(); }
  void nudge() {
    auto a = registry_.find(id_);
    ASSERT_TRUE(a.has_value());
    caf::anon_send(caf::actor_cast<request_actor>(*a), messages::row_changed{});
  }

  void webhook_pipeline(const std::string& sha, const std::string& status) {
    auto a = registry_.find(id_);
    ASSERT_TRUE(a.has_value());
    messages::gitlab_event e;
    e.sha = sha;
    e.status = status;
    caf::anon_send(caf::actor_cast<request_actor>(*a), e);
  }

  std::deque<call_reply> answers_;
  std::vector<call_kind> calls_;
  std::vector<messages::mr_read> reads_;  // the MR read each call was given
  std::string id_;
};

call_reply ok(call_kind k) {
  call_reply r;
  r.kind = k;
  return r;
}

void in_process::asked_for_approval(const std::string& target, const std::string& approval_id) {
  id_ = new_op(setup_db_, "ann", target);
  spawn();
  run_messages();
  auto submitted = ok(call_kind::submit_approval);
  submitted.approval_id = approval_id;
  answer(submitted);
}

call_reply pipeline(const std::string& status) {
  auto r = ok(call_kind::read_pipeline);
  r.mr_state = "opened";
  r.sha = r.pipeline_sha = "abc";
  r.pipeline_status = status;
  return r;
}

void in_process::polling_a_running_pipeline() {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED}, 42);
  spawn();
  run_messages();
  answer(pipeline("running"));
  run_external();
  ASSERT_TRUE(sched_.has_pending_timeout()) << "a running pipeline is polled again later";
}

std::int64_t in_process::pipeline_read_passed() {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED}, 42);
  const auto opened = row().version;
  spawn();
  run_messages();
  answer(pipeline("success"));
  run_external();
  return opened;
}

/// A 429 with Retry-After 2 s.
call_reply rate_limited(call_kind k) {
  auto r = ok(k);
  r.outcome = call_reply::status::retryable;
  r.http_status = 429;
  r.retry_after_ms = 2000;
  r.error = "429 Too Many Requests";
  return r;
}

call_reply merge(call_reply::merge_result m) {
  auto r = ok(call_kind::try_merge);
  r.mr_state = m == call_reply::merge_result::merged ? "merged" : "opened";
  r.merge = m;
  return r;
}

void in_process::approvals_retried(bool lose_first_write) {
  const auto opened = pipeline_read_passed();
  answer(rate_limited(call_kind::approve_bots));
  run_external();
  ASSERT_EQ(queued_db(), 1u);
  EXPECT_FALSE(sched_.has_pending_timeout()) << "the retry waits for the write";
  if (lose_first_write) {
    ASSERT_TRUE(db_pool_.drop_oldest()) << "the write's job is lost";
    run_messages();
    ASSERT_TRUE(sched_.has_pending_timeout()) << "the write is retried after a back-off";
    ASSERT_TRUE(fire_next_timer());
    ASSERT_EQ(queued_db(), 1u) << "the same write, again";
  }
  run_db();
  auto r = row();
  EXPECT_EQ(r.step, S::CREATE_SUCCEEDED);
  EXPECT_EQ(r.version, opened + 2);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.last_error.value_or(""), "429 Too Many Requests");
  ASSERT_TRUE(sched_.has_pending_timeout()) << "the approvals' retry waits for its timer";
  answer(ok(call_kind::approve_bots));
  answer(merge(call_reply::merge_result::merged));
  ASSERT_TRUE(fire_next_timer());
  settle();
  EXPECT_EQ(row().step, S::HANDLE_MERGED);
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::read_pipeline, call_kind::approve_bots, call_kind::approve_bots,
                                            call_kind::try_merge}));
}

}  // namespace

// Persist first, effects after: the timer that follows a transition is armed only once the write
// has committed, and the next call is made only after that.
TEST_F(in_process, ATransitionIsWrittenBeforeTheEffectsThatFollowIt) {
  id_ = new_op(setup_db_, "ann", "t1");
  spawn();
  run_messages();
  ASSERT_EQ(queued_external(), 1u) << "APPROVAL_SENDING submits the approval request";
  ASSERT_EQ(queued_db(), 0u);
  auto submitted = ok(call_kind::submit_approval);
  submitted.approval_id = "appr-1";
  answer(submitted);
  run_external();
  EXPECT_EQ(queued_db(), 1u) << "the transition to APPROVAL_SENT waits to be written";
  EXPECT_FALSE(sched_.has_pending_timeout()) << "the approval deadline timer was armed before the write committed";
  EXPECT_EQ(row().step, S::APPROVAL_SENDING);
  run_db();
  EXPECT_EQ(row().step, S::APPROVAL_SENT);
  EXPECT_EQ(row().approval_id.value_or(""), "appr-1");
  EXPECT_TRUE(sched_.has_pending_timeout()) << "after the commit the actor waits for its deadline";
  EXPECT_EQ(queued_db() + queued_external(), 0u);
  EXPECT_TRUE(actor_alive());
}

/// An actor that created the MR (mr 42) and handed the transition to CREATE_MR_OPENED to the
/// database; the write has not run yet.
void in_process::mr_opened_write_in_flight() {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED});
  spawn();
  run_messages();
  auto created = ok(call_kind::create_mr);
  created.mr_iid = 42;
  created.mr_url = "http://gitlab/mr/42";
  answer(created);
  run_external();
  ASSERT_EQ(queued_db(), 1u) << "the transition to CREATE_MR_OPENED waits to be written";
}

// The poll's wait after a transition starts with its write, so the commit does not lengthen it;
// its step (the pipeline read) still runs only after the write has committed: a timer that fires
// while the write is in flight is held until the commit answers.
TEST_F(in_process, APollsWaitStartsWithTheWriteBeforeItAndItsReadComesOnlyAfterTheCommit) {
  ASSERT_NO_FATAL_FAILURE(mr_opened_write_in_flight());
  ASSERT_TRUE(sched_.has_pending_timeout()) << "the pipeline wait runs while the write is in flight";
  EXPECT_TRUE(fire_next_timer());
  EXPECT_EQ(queued_external(), 0u) << "the wait ended, but its read waits for the commit";
  EXPECT_EQ(row().step, S::CREATE_STARTED);
  run_db();
  EXPECT_EQ(row().step, S::CREATE_MR_OPENED);
  EXPECT_EQ(queued_external(), 1u) << "the commit answered: the held read runs at once";
  EXPECT_FALSE(sched_.has_pending_timeout()) << "no second timer for the same wait";
  answer(pipeline("running"));
  run_external();
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::create_mr, call_kind::read_pipeline}));
  EXPECT_TRUE(sched_.has_pending_timeout()) << "the running pipeline is polled again later";
}

// When the write commits before the wait ends, the read comes when the timer fires, once.
TEST_F(in_process, APollsWaitThatOutlastsTheWriteBeforeItEndsWithItsTimer) {
  ASSERT_NO_FATAL_FAILURE(mr_opened_write_in_flight());
  run_db();
  EXPECT_EQ(row().step, S::CREATE_MR_OPENED);
  EXPECT_EQ(queued_external(), 0u) << "the wait is still running";
  EXPECT_TRUE(fire_next_timer());
  EXPECT_EQ(queued_external(), 1u);
  answer(pipeline("running"));
  run_external();
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::create_mr, call_kind::read_pipeline}));
}

// A write that loses its guard voids the wait started with it: the actor reads the row and
// decides again, and the void timer runs nothing.
TEST_F(in_process, AWaitStartedWithAWriteThatLostItsGuardRunsNothing) {
  ASSERT_NO_FATAL_FAILURE(mr_opened_write_in_flight());
  // Meanwhile: cancelled through the API.
  walk(setup_db_, id_, {S::CANCELLED}, std::nullopt, workflow::actor_kind::requester);
  run_db();
  settle();
  EXPECT_EQ(row().step, S::CANCELLED);
  EXPECT_EQ(metrics_.counter_value("changeflow_guard_misses_total"), 1.0);
  fire_next_timer();
  settle();
  EXPECT_EQ(std::count(calls_.begin(), calls_.end(), call_kind::read_pipeline), 0)
      << "no pipeline read for a write that did not land";
}

// A write committed alone is signalled to the status reads without a row (a read per write would
// cost more than the one query a later poll makes); the MERGED write brings its row back and hands
// it over, since it reads it anyway (whether a deploy report came before it).
TEST_F(in_process, AWriteAloneIsSignalledWithoutARowAndTheMergedWriteHandsOverItsRow) {
  std::vector<std::int64_t> handed;
  std::vector<std::string> told;
  svc_.row_written_as = [&](const persistence::operation_row& r, std::int64_t) { handed.push_back(r.version); };
  svc_.row_written = [&](const std::string& id) { told.push_back(id); };
  asked_for_approval("t1", "appr-1");
  run_external();
  run_db();
  ASSERT_EQ(row().step, S::APPROVAL_SENT);
  EXPECT_EQ(told, std::vector<std::string>{id_});
  EXPECT_TRUE(handed.empty());

  // Another change, about to merge: the MERGED write's row comes back with it.
  told.clear();
  id_ = new_op(setup_db_, "ann", "t2");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_APPROVED}, 42);
  spawn();
  answer(merge(call_reply::merge_result::merged));
  settle();
  EXPECT_EQ(row().step, S::HANDLE_MERGED);
  EXPECT_EQ(handed, std::vector<std::int64_t>{row().version}) << "the MERGED write's row was not handed over";
  EXPECT_TRUE(told.empty());
}

// Callback nudges that arrive while a write is in flight coalesce: one re-read after the write, not
// one per nudge, and never a second write of the same transition.
TEST_F(in_process, NudgesDuringAWriteCoalesceIntoOneReread) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED});
  spawn();
  run_messages();
  ASSERT_EQ(queued_db(), 1u) << "APPROVAL_APPROVED moves on to CREATE_STARTED";
  for (int i = 0; i < 5; ++i) nudge();
  run_messages();
  EXPECT_EQ(queued_db(), 1u) << "a nudge while busy must not start a second job";
  auto version_before = row().version;
  db_pool_.run_queued(db_ctx_, 1);  // the write
  EXPECT_EQ(row().version, version_before + 1);
  run_messages();
  EXPECT_EQ(queued_external(), 1u) << "the commit's effect: create the MR";
  EXPECT_EQ(queued_db(), 0u) << "the re-read waits until the actor is idle";
  auto created = ok(call_kind::create_mr);
  created.mr_iid = 42;
  created.mr_url = "http://gitlab/mr/42";
  answer(created);
  settle();
  EXPECT_EQ(row().step, S::CREATE_MR_OPENED);
  EXPECT_EQ(row().version, version_before + 2) << "each transition written once";
  EXPECT_EQ(db_pool_.stats().completed, 3u) << "two writes and exactly one re-read for five nudges";
  // The re-read found the row as the actor wrote it: the pipeline wait it armed stands.
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::create_mr}));
  EXPECT_TRUE(sched_.has_pending_timeout());
  EXPECT_EQ(metrics_.counter_value("changeflow_guard_misses_total"), 0.0);
}

// An approval callback tells the actor the step and version it wrote: an actor that held the
// version before takes them without reading the row, and goes on at once. A nudge whose version
// skips one the actor never saw is read from the database as before.
TEST_F(in_process, AWriterThatNamesWhatItWroteSavesTheActorItsRead) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT});
  spawn();
  run_messages();
  ASSERT_EQ(queued_db(), 0u) << "APPROVAL_SENT waits for the decision";
  auto decided = approved_and_named();
  run_messages();
  ASSERT_EQ(queued_db(), 1u);
  db_pool_.run_queued(db_ctx_, 1);
  EXPECT_EQ(row().step, S::CREATE_STARTED) << "the one job was the next transition, not a read of the row";
  EXPECT_EQ(row().version, *decided.new_version + 1);
  EXPECT_EQ(db_pool_.stats().completed, 1u);
}

// An APPROVED decision that went on to CREATE_STARTED in its own transaction (batching off, the
// row this instance's) names both writes: the actor that holds the version the decision found takes
// them as read and creates the MR, with no job on the database at all.
TEST_F(in_process, ADecisionThatWentOnToTheNextStepIsTakenAsReadAndTheMRIsCreated) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT});
  spawn();
  run_messages();
  ASSERT_EQ(queued_db() + queued_external(), 0u) << "APPROVAL_SENT waits for the decision";
  const auto held = row().version;
  auto decided = persistence::apply_approval_callback(setup_db_, "cb-1", id_, persistence::approval_result::APPROVED,
                                                      "{}", persistence::approved_then_create{svc_.instance_id});
  ASSERT_TRUE(decided.ok()) << decided.error.message;
  ASSERT_EQ(decided.value.new_step, S::CREATE_STARTED);
  ASSERT_EQ(decided.value.new_version, held + 2);
  ASSERT_EQ(decided.value.found_version, held);
  {
    auto a = registry_.find(id_);
    ASSERT_TRUE(a.has_value());
    // As the callback intake's wake sends it.
    messages::row_changed both{"approval callback", workflow::code_of(S::CREATE_STARTED), *decided.value.new_version};
    both.from_version = *decided.value.found_version;
    caf::anon_send(caf::actor_cast<request_actor>(*a), both);
  }
  run_messages();
  EXPECT_EQ(queued_db(), 0u) << "neither a read of the row nor a write of CREATE_STARTED";
  ASSERT_EQ(queued_external(), 1u);
  auto created = ok(call_kind::create_mr);
  created.mr_iid = 11;
  answer(created);
  run_external();
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::create_mr}));
  EXPECT_EQ(metrics_.counter_value("changeflow_nudges_taken_total"), 0.0) << "taken at once, not after a job";

  // The same nudge without the version found claims one write: the actor cannot come from there
  // (two versions behind) and reads the row.
  auto other = new_op(setup_db_, "bob", "t2");
  walk(setup_db_, other, {S::APPROVAL_SENT});
  id_ = other;
  spawn();
  run_messages();
  const auto db_jobs = queued_db();  // the first change's write of its MR, still queued
  auto second = persistence::apply_approval_callback(setup_db_, "cb-2", id_, persistence::approval_result::APPROVED,
                                                     "{}", persistence::approved_then_create{svc_.instance_id});
  ASSERT_TRUE(second.ok() && second.value.new_step == S::CREATE_STARTED);
  auto a = registry_.find(id_);
  ASSERT_TRUE(a.has_value());
  caf::anon_send(
      caf::actor_cast<request_actor>(*a),
      messages::row_changed{"approval callback", workflow::code_of(S::CREATE_STARTED), *second.value.new_version});
  run_messages();
  ASSERT_EQ(queued_db(), db_jobs + 1) << "the read of the row";
  ASSERT_EQ(queued_external(), 0u);
}

// The approval decision lands right behind the actor's own APPROVAL_SENT (the approval system
// answers at once): its nudges arrive while that write is in flight, naming the version just after
// it. Returns once the write and the decision committed and the actor has run its messages.
void in_process::approval_decided_during_the_sent_write(int nudges) {
  spawn();
  run_messages();
  auto submitted = ok(call_kind::submit_approval);
  submitted.approval_id = "appr-1";
  answer(submitted);
  run_external();
  ASSERT_EQ(queued_db(), 1u) << "the transition to APPROVAL_SENT is in flight";
  const auto sent_version = row().version + 1;
  auto a = registry_.find(id_);
  ASSERT_TRUE(a.has_value());
  for (int i = 0; i < nudges; ++i) {
    caf::anon_send(
        caf::actor_cast<request_actor>(*a),
        messages::row_changed{"approval callback", workflow::code_of(S::APPROVAL_APPROVED), sent_version + 1});
  }
  run_messages();
  db_pool_.run_queued(db_ctx_, 1);  // the actor's write
  ASSERT_EQ(row().version, sent_version);
  auto decided =
      persistence::apply_approval_callback(setup_db_, "cb-1", id_, persistence::approval_result::APPROVED, "{}");
  ASSERT_TRUE(decided.ok()) << decided.error.message;
  ASSERT_EQ(decided.value.new_version.value_or(0), sent_version + 1);
  run_messages();
  ASSERT_EQ(queued_db(), 1u);
}

// When the write commits, the one nudge is taken as read: the job that follows is the next
// transition, not a read of the row.
TEST_F(in_process, ANudgeThatCameDuringItsOwnWriteIsTakenAsReadWhenTheWriteCommits) {
  id_ = new_op(setup_db_, "ann", "t1");
  approval_decided_during_the_sent_write(1);
  db_pool_.run_queued(db_ctx_, 1);
  EXPECT_EQ(row().step, S::CREATE_STARTED) << "the job after the write was a read of the row";
  EXPECT_EQ(db_pool_.stats().completed, 2u) << "the actor's two writes, no read";
  EXPECT_EQ(metrics_.counter_value("changeflow_nudges_taken_total"), 1.0);
}

// Two nudges in the same window: the row is read.
TEST_F(in_process, TwoNudgesDuringItsOwnWriteAreReadFromTheDatabase) {
  id_ = new_op(setup_db_, "ann", "t1");
  approval_decided_during_the_sent_write(2);
  const auto version = row().version;
  db_pool_.run_queued(db_ctx_, 1);
  EXPECT_EQ(row().version, version) << "the job after the write must be a read";
  EXPECT_EQ(metrics_.counter_value("changeflow_nudges_taken_total"), 0.0);
}

TEST_F(in_process, ANudgeNamingAVersionTheActorCannotComeFromIsReadFromTheDatabase) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT});
  spawn();
  run_messages();
  auto decided =
      persistence::apply_approval_callback(setup_db_, "cb-1", id_, persistence::approval_result::APPROVED, "{}");
  ASSERT_TRUE(decided.ok()) << decided.error.message;
  auto a = registry_.find(id_);
  ASSERT_TRUE(a.has_value());
  // One version too far: a write this actor never saw would lie between.
  caf::anon_send(caf::actor_cast<request_actor>(*a),
                 messages::row_changed{"approval callback", workflow::code_of(S::APPROVAL_APPROVED),
                                       *decided.value.new_version + 1});
  run_messages();
  ASSERT_EQ(queued_db(), 1u);
  const auto version = row().version;
  db_pool_.run_queued(db_ctx_, 1);
  EXPECT_EQ(row().version, version) << "the first job was the read";
  run_messages();
  ASSERT_EQ(queued_db(), 1u) << "then the transition the row it read calls for";
  db_pool_.run_queued(db_ctx_, 1);
  EXPECT_EQ(row().step, S::CREATE_STARTED);
}

// A call's answer that arrives after someone else moved the row (here: the requester cancelled
// while the merge check was in flight) loses its guarded write, and the actor re-reads, sees
// CANCELLED, and stops without another call.
TEST_F(in_process, AnAnswerArrivingAfterTheRowMovedOnLosesItsWriteAndTheActorStops) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_APPROVED}, 42);
  spawn();
  run_messages();
  ASSERT_EQ(queued_external(), 1u) << "HANDLE_APPROVED tries the merge";
  // Meanwhile: cancelled through the API, which wakes the actor.
  walk(setup_db_, id_, {S::CANCELLED}, std::nullopt, workflow::actor_kind::requester);
  auto cancelled_version = row().version;
  nudge();
  run_messages();
  EXPECT_EQ(queued_db(), 0u) << "busy with the call: the re-read waits for its answer";
  answer(merge(call_reply::merge_result::not_mergeable_yet));
  settle();
  EXPECT_EQ(row().step, S::CANCELLED);
  EXPECT_EQ(row().version, cancelled_version) << "the stale decision must not overwrite the cancel";
  EXPECT_FALSE(actor_alive()) << "an ended operation needs no actor";
  EXPECT_EQ(metrics_.counter_value("changeflow_guard_misses_total"), 1.0);
  EXPECT_EQ(calls_.size(), 1u) << "no call after the cancel was seen";
}

// Every wait re-arms its timer with a new generation; a timer that was replaced (here by a webhook
// that ended the wait early) fires into nothing.
TEST_F(in_process, AReplacedTimerIsIgnoredAndTheCurrentOneDrivesThePoll) {
  ASSERT_NO_FATAL_FAILURE(polling_a_running_pipeline());
  // A webhook ends the wait at once: one more poll, and a new timer.
  webhook_pipeline("abc", "success");
  run_messages();
  answer(pipeline("running"));
  run_external();
  ASSERT_EQ(calls_.size(), 2u);
  // The first timer fires: replaced, nothing happens.
  ASSERT_TRUE(fire_next_timer());
  EXPECT_EQ(queued_external(), 0u) << "a replaced timer must not poll";
  // The current timer fires: the poll runs, the pipeline passed, the step moves on.
  ASSERT_TRUE(fire_next_timer());
  ASSERT_EQ(queued_external(), 1u);
  answer(pipeline("success"));
  auto approve = ok(call_kind::approve_bots);
  answer(approve);
  answer(merge(call_reply::merge_result::merged));
  settle();
  EXPECT_EQ(row().step, S::HANDLE_MERGED);
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::read_pipeline, call_kind::read_pipeline,
                                            call_kind::read_pipeline, call_kind::approve_bots, call_kind::try_merge}));
  EXPECT_FALSE(actor_alive()) << "a merged operation waits for the deploy callback without an actor";
}

// The read that ended the pipeline wait is handed to the approvals, and the approvals' read to the
// first merge attempt: the actor keeps it in memory between the replies and the calls, across the
// transitions written in between. A re-read of the row, and a new actor, start without one.
TEST_F(in_process, TheReadThatFoundThePipelinePassedIsHandedToTheApprovalsAndTheMerge) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED}, 42);
  spawn();
  auto passed = pipeline("success");
  passed.read_at_ms = 777;
  passed.base_sha = "base";
  passed.target_branch = "main";
  answer(passed);
  auto approved = ok(call_kind::approve_bots);
  approved.mr_state = "opened";
  approved.sha = "abc";
  approved.read_at_ms = 777;  // the approvals went on the read they were given
  approved.target_branch = "release";
  answer(approved);
  answer(merge(call_reply::merge_result::merged));
  settle();
  EXPECT_EQ(row().step, S::HANDLE_MERGED);
  ASSERT_EQ(calls_, (std::vector<call_kind>{call_kind::read_pipeline, call_kind::approve_bots, call_kind::try_merge}));
  EXPECT_FALSE(reads_[0].known()) << "the pipeline poll reads for itself";
  EXPECT_EQ(reads_[1].read_at_ms, 777);
  EXPECT_EQ(reads_[1].sha, "abc");
  EXPECT_EQ(reads_[1].pipeline_status, "success");
  EXPECT_EQ(reads_[1].base_sha, "base");
  EXPECT_EQ(reads_[2].read_at_ms, 777);
  EXPECT_EQ(reads_[2].target_branch, "release") << "the merge gets the read the approvals answered with";
}

// The pipeline passed: CREATE_SUCCEEDED is not written on its own. The bots' approvals (safe to
// repeat: they read the MR's approvals first) run at once, and their outcome is written together
// with it, one commit for two versions, both events on the timeline.
TEST_F(in_process, ThePassedPipelineIsWrittenWithTheApprovalsOutcomeInOneCommit) {
  const auto opened = pipeline_read_passed();
  EXPECT_EQ(queued_db(), 0u) << "CREATE_SUCCEEDED waits for the approvals' outcome";
  ASSERT_EQ(queued_external(), 1u) << "the approvals are under way";
  answer(ok(call_kind::approve_bots));
  run_external();
  ASSERT_EQ(queued_db(), 1u) << "one write for both steps";
  EXPECT_EQ(row().step, S::CREATE_MR_OPENED) << "nothing is written before that write runs";
  run_db();
  auto r = row();
  EXPECT_EQ(r.step, S::HANDLE_APPROVED);
  EXPECT_EQ(r.version, opened + 2);
  auto events = persistence::list_events(setup_db_, id_);
  ASSERT_TRUE(events.ok()) << events.error.message;
  ASSERT_GE(events.value.size(), 2u);
  const auto& passed = events.value[events.value.size() - 2];
  const auto& approved = events.value.back();
  EXPECT_EQ(passed.from_step, S::CREATE_MR_OPENED);
  EXPECT_EQ(passed.to_step, S::CREATE_SUCCEEDED);
  EXPECT_EQ(passed.cause, "check pipeline passed");
  EXPECT_EQ(passed.version, opened + 1);
  EXPECT_EQ(approved.from_step, S::CREATE_SUCCEEDED);
  EXPECT_EQ(approved.to_step, S::HANDLE_APPROVED);
  EXPECT_EQ(approved.version, opened + 2);
  EXPECT_EQ(passed.actor, "workflow");
  EXPECT_EQ(approved.actor, "workflow");
  EXPECT_EQ(metrics_.counter_value("changeflow_transitions_total", {{"to_phase", "MR_CREATED"}}), 1.0)
      << "the step written with the next one is counted as committed";
  answer(merge(call_reply::merge_result::merged));
  settle();
  EXPECT_EQ(row().step, S::HANDLE_MERGED);
}

// The approvals fail and are retried later: the held step is written with the failed attempt, so
// the row says where the change waits and what failed before the retry's timer runs.
TEST_F(in_process, ARetryOfTheApprovalsWritesTheHeldStepWithTheFailedAttempt) {
  approvals_retried(false);
}

// The same, and the pair's first write fails (its job is lost: answered as retryable): written on
// the second try, the retry's wait is still armed after that write, not lost with the first try.
TEST_F(in_process, AFailedAttemptWrittenOnTheSecondTryStillArmsItsWait) {
  approvals_retried(true);
}

// The pair's write fails and waits to be retried; meanwhile the actor reads its row (a nudge). The
// row is where it was, behind the step held in memory: the step the row names runs again from the
// row, and the pair decided on the older view is never written.
TEST_F(in_process, ARereadWhileAPairWaitsToBeRetriedDropsThePair) {
  const auto opened = pipeline_read_passed();
  answer(ok(call_kind::approve_bots));
  run_external();
  ASSERT_EQ(queued_db(), 1u);
  ASSERT_TRUE(db_pool_.drop_oldest()) << "the pair's job is lost";
  run_messages();
  nudge();
  run_db();                     // the re-read
  answer(pipeline("running"));  // a new head was pushed: the pipeline runs again
  run_external();
  run_db();
  EXPECT_EQ(row().step, S::CREATE_MR_OPENED);
  EXPECT_EQ(row().version, opened);
  // Every timer pending now (the back-off the failed write armed, the next poll) fires: none may
  // write the pair decided before the re-read.
  answer(pipeline("running"));
  while (fire_next_timer()) {
    run_db();
    run_external();
    if (calls_.size() >= 4) break;
  }
  EXPECT_EQ(row().step, S::CREATE_MR_OPENED) << "the dropped pair was written after all";
  EXPECT_EQ(row().version, opened);
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::read_pipeline, call_kind::approve_bots, call_kind::read_pipeline,
                                            call_kind::read_pipeline}));
}

TEST_F(in_process, ARereadOfTheRowDropsTheKeptRead) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED}, 42);
  spawn();
  run_messages();
  auto passed = pipeline("success");
  passed.read_at_ms = 777;
  answer(passed);
  run_external();
  run_messages();
  // CREATE_SUCCEEDED is held, to be written with the approvals' outcome: nothing waits for the
  // database, the approvals are under way on the read that found the pipeline passed.
  ASSERT_EQ(queued_db(), 0u) << "CREATE_SUCCEEDED is not written on its own";
  ASSERT_EQ(queued_external(), 1u) << "the approvals are under way";
  EXPECT_EQ(row().step, S::CREATE_MR_OPENED);
  // Meanwhile another writer moves the row on: the pair misses as a whole, the actor re-reads the
  // row and goes on from what it says, the approvals (safe to repeat) once more.
  walk(setup_db_, id_, {S::CREATE_SUCCEEDED});
  answer(ok(call_kind::approve_bots));
  answer(ok(call_kind::approve_bots));
  answer(merge(call_reply::merge_result::merged));
  settle();
  EXPECT_EQ(row().step, S::HANDLE_MERGED);
  ASSERT_EQ(calls_, (std::vector<call_kind>{call_kind::read_pipeline, call_kind::approve_bots, call_kind::approve_bots,
                                            call_kind::try_merge}));
  EXPECT_EQ(metrics_.counter_value("changeflow_guard_misses_total"), 1.0);
  EXPECT_EQ(reads_[1].read_at_ms, 777) << "the first approvals went on the read that found the pipeline passed";
  EXPECT_FALSE(reads_[2].known()) << "after a re-read of the row the approvals read the MR themselves";
  EXPECT_FALSE(reads_[3].known());
}

TEST_F(in_process, AnActorSpawnedFromItsRowHasNoReadToHandOn) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED}, 42);
  spawn();
  answer(ok(call_kind::approve_bots));
  answer(merge(call_reply::merge_result::merged));
  settle();
  ASSERT_EQ(calls_, (std::vector<call_kind>{call_kind::approve_bots, call_kind::try_merge}));
  EXPECT_FALSE(reads_[0].known());
  EXPECT_FALSE(reads_[1].known());
}

// A rehydration queues rows and starts their actors at its pace. Meanwhile another actor of the
// same change may run and stop (here: it asked for the approval and passivated at APPROVAL_SENT).
// An actor started from the queued, older row with read_first reads the row before it acts and does
// not ask for the approval again; without it, the older row's step is run again.
TEST_F(in_process, AnActorStartedFromARowThatMayHaveMovedReadsItBeforeItActs) {
  for (const bool read_first : {true, false}) {
    SCOPED_TRACE(read_first ? "read_first" : "from the row as queued");
    id_ = new_op(setup_db_, "ann", read_first ? "t1" : "t2");
    const auto queued = row();  // APPROVAL_SENDING, as the rehydrator read it
    walk(setup_db_, id_, {S::APPROVAL_SENT});
    auto seed = seed_from_row(queued, now_ms_);
    seed.read_first = read_first;
    auto a = spawn_request_actor(svc_, std::move(seed));
    ASSERT_TRUE(a.has_value());
    track(caf::actor_cast<caf::actor>(*a));
    const auto db_jobs = queued_db();
    const auto external_jobs = queued_external();
    run_messages();
    if (read_first) {
      EXPECT_EQ(queued_db(), db_jobs + 1) << "the first job is the read of the row";
      EXPECT_EQ(queued_external(), external_jobs);
      db_pool_.run_queued(db_ctx_, 1);
      run_messages();
      EXPECT_EQ(queued_external(), external_jobs) << "no second request for the approval";
    } else {
      EXPECT_EQ(queued_external(), external_jobs + 1) << "the older row's step asks for the approval again";
    }
  }
}

// A webhook that ends the wait of a rehydrated actor whose first read has not run yet (its wait's
// next wake-up is far off) runs that read at once, and then the step the row names.
TEST_F(in_process, AWebhookForARehydratedActorRunsItsOwedReadAtOnce) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED}, 42);
  db_.exec("UPDATE operation SET next_wake_at = NOW(3) + INTERVAL 30 SECOND WHERE operation_id = '" + id_ + "'");
  auto seed = seed_from_row(row(), now_ms_);
  seed.read_first = true;
  auto a = spawn_request_actor(svc_, std::move(seed));
  ASSERT_TRUE(a.has_value());
  track(caf::actor_cast<caf::actor>(*a));
  run_messages();
  ASSERT_EQ(queued_db() + queued_external(), 0u) << "the wait's wake-up is 30 s off";
  webhook_pipeline("sha-1", "success");
  run_messages();
  ASSERT_EQ(queued_db(), 1u) << "the owed read, at once";
  db_pool_.run_queued(db_ctx_, 1);
  run_messages();
  EXPECT_EQ(queued_external(), 1u) << "then the pipeline's read the step makes";
}

// A blocking job that dies without answering (dropped unrun, as when its thread dies with it) is
// answered by its guard: the actor is not left busy forever, takes its retry path, and finishes.
TEST_F(in_process, AnActorWhoseJobDiedRetriesFromItsRowAndFinishes) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED}, 42);
  spawn();
  run_messages();
  // The external call dies.
  ASSERT_EQ(queued_external(), 1u);
  ASSERT_TRUE(external_pool_.drop_oldest());
  run_messages();
  EXPECT_EQ(row().step, S::HANDLE_STARTED);
  ASSERT_EQ(queued_db(), 1u) << "the failed attempt is written before the retry is armed";
  EXPECT_FALSE(sched_.has_pending_timeout());
  run_db();
  EXPECT_EQ(row().step, S::HANDLE_STARTED);
  EXPECT_EQ(row().attempts, 1);
  EXPECT_EQ(row().last_error, "the job ended without an answer (it threw or was dropped); see worker_pool.job_failed");
  ASSERT_TRUE(sched_.has_pending_timeout()) << "the lost call is retried later, like any failed call";
  ASSERT_TRUE(fire_next_timer());
  ASSERT_EQ(queued_external(), 1u) << "the step runs again (it reads the MR before approving)";
  answer(ok(call_kind::approve_bots));
  run_external();
  // The write of HANDLE_APPROVED dies too.
  ASSERT_EQ(queued_db(), 1u);
  ASSERT_TRUE(db_pool_.drop_oldest());
  run_messages();
  EXPECT_EQ(row().step, S::HANDLE_STARTED);
  ASSERT_TRUE(fire_next_timer());
  ASSERT_EQ(queued_db(), 1u) << "the write is retried under its version guard";
  run_db();
  EXPECT_EQ(row().step, S::HANDLE_APPROVED);
  ASSERT_EQ(queued_external(), 1u) << "after the commit the merge is tried";
  answer(merge(call_reply::merge_result::merged));
  settle();
  EXPECT_EQ(row().step, S::HANDLE_MERGED);
  EXPECT_FALSE(actor_alive());
  // The dropped call never reached the external system: one approve, one merge.
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::approve_bots, call_kind::try_merge}));
}

// A re-read whose job died is retried: the actor reads its row again and goes on from what it says.
TEST_F(in_process, ARereadThatDiedIsReadAgain) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT});
  spawn();
  run_messages();
  ASSERT_TRUE(sched_.has_pending_timeout()) << "APPROVAL_SENT waits for the decision";
  // The approval callback lands (written by the callback path) and nudges the actor.
  walk(setup_db_, id_, {S::APPROVAL_APPROVED});
  nudge();
  run_messages();
  ASSERT_EQ(queued_db(), 1u);
  ASSERT_TRUE(db_pool_.drop_oldest());
  run_messages();
  EXPECT_EQ(queued_db(), 0u);
  // The retry timer (not the week-long approval deadline) re-reads the row.
  ASSERT_TRUE(fire_next_timer());
  ASSERT_EQ(queued_db(), 1u);
  run_db();  // the re-read: APPROVAL_APPROVED -> write CREATE_STARTED
  run_db();
  EXPECT_EQ(row().step, S::CREATE_STARTED) << "the re-read saw APPROVAL_APPROVED and the actor moved on";
  EXPECT_EQ(queued_external(), 1u) << "and creates the MR";
}

// A failed call's retry waits for its back-off (here the Retry-After of a 429), whatever nudges the
// actor meanwhile: a nudge for the actor's own commit (the owner's changed-row poll can read the new
// version before the commit's answer reaches the actor) finds the row as the actor knows it and
// leaves the wait be. A nudge for a row someone else changed still re-runs the step at once.
TEST_F(in_process, ANudgeForTheActorsOwnWriteDoesNotCutARetryAfterShort) {
  id_ = new_op(setup_db_, "ann", "t1");
  spawn();
  run_messages();
  ASSERT_EQ(queued_external(), 1u) << "APPROVAL_SENDING submits the approval request";
  answer(rate_limited(call_kind::submit_approval));
  run_external();
  ASSERT_EQ(queued_db(), 1u) << "the failed attempt is written before the retry is armed";
  nudge();  // arrives while the write is in flight
  run_db();
  nudge();  // arrives after the write's answer
  run_messages();
  settle();
  EXPECT_EQ(calls_.size(), 1u) << "a nudge for the actor's own write re-ran the step before Retry-After";
  EXPECT_EQ(row().attempts, 1);
  ASSERT_TRUE(sched_.has_pending_timeout()) << "the retry waits for its timer";
  // The timer fires: the retry runs.
  auto submitted = ok(call_kind::submit_approval);
  submitted.approval_id = "appr-1";
  answer(submitted);
  ASSERT_TRUE(fire_next_timer());
  settle();
  EXPECT_EQ(calls_.size(), 2u);
  EXPECT_EQ(row().step, S::APPROVAL_SENT);
  // A change made elsewhere (the approval callback) still wakes the waiting actor at once.
  walk(setup_db_, id_, {S::APPROVAL_APPROVED});
  nudge();
  run_messages();
  run_db();  // the re-read sees APPROVAL_APPROVED and writes CREATE_STARTED
  run_db();
  EXPECT_EQ(row().step, S::CREATE_STARTED);
  EXPECT_EQ(queued_external(), 1u) << "and creates the MR";
}

// A timer that fires while a re-read is in flight is not lost when the re-read finds the row
// unchanged: the step runs.
TEST_F(in_process, ATimerThatFiresDuringAnUnneededRereadStillRunsTheStep) {
  ASSERT_NO_FATAL_FAILURE(polling_a_running_pipeline());
  nudge();
  run_messages();
  ASSERT_EQ(queued_db(), 1u) << "the nudge's re-read";
  ASSERT_TRUE(fire_next_timer());  // the poll's time comes while the re-read is in flight
  EXPECT_EQ(queued_external(), 0u) << "busy: the step waits for the re-read";
  run_db();
  ASSERT_EQ(queued_external(), 1u) << "the timer that fired during the re-read was lost";
  answer(pipeline("running"));
  run_external();
  EXPECT_EQ(calls_, (std::vector<call_kind>{call_kind::read_pipeline, call_kind::read_pipeline}));
}

// A deploy report recorded before MERGED was written is applied by the MERGED writer's check. When
// that writer never learnt its write committed (its answer lost after the COMMIT, or a crash right
// after it), the actor that reads the row next finds it MERGED with the report's mark and validates
// the change there and then, instead of leaving it to reconciliation's minimum age.
TEST_F(in_process, AnActorThatReadsItsMergedRowWithAnEarlierDeployReportValidatesTheChange) {
  id_ = new_op(setup_db_, "ann", "t1");
  walk(setup_db_, id_, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::HANDLE_STARTED, S::HANDLE_APPROVED}, 42);
  persistence::deploy_callback_in report;
  report.delivery_id = "dep-early";
  report.project = row().repository;
  report.mr_iid = 42;
  report.pipeline_id = 7042;
  report.status = "success";
  report.operation_ids_json = "[\"" + id_ + "\"]";
  auto early = persistence::record_and_settle_deploy(setup_db_, report, "{}", id_);
  ASSERT_TRUE(early.ok()) << early.error.message;
  ASSERT_FALSE(early.value.validated) << "the change is not MERGED yet";
  ASSERT_TRUE(row().deploy_reported);
  walk(setup_db_, id_, {S::HANDLE_MERGED});  // the MERGED write committed; its writer was not told
  const double validated_before = svc_.metrics->counter_value("changeflow_validated_total", {{"via", "callback"}});

  auto seed = seed_from_row(row(), now_ms_);
  seed.read_first = true;  // as after a crash, or a write whose answer was lost
  auto a = spawn_request_actor(svc_, std::move(seed));
  ASSERT_TRUE(a.has_value());
  track(caf::actor_cast<caf::actor>(*a));
  settle();
  EXPECT_EQ(row().phase, workflow::phase::VALIDATED);
  EXPECT_EQ(svc_.metrics->counter_value("changeflow_validated_total", {{"via", "callback"}}), validated_before + 1);
  EXPECT_TRUE(calls_.empty()) << "nothing asked of GitLab";
}

// Passivation at its default (60 s) against the default approval wait (7 days).
class passivating : public in_process {
 protected:
  passivating() : in_process(60) {}

  /// A new change, walked by its actor to APPROVAL_SENT (the approval request answered).
  void sent_for_approval() {
    asked_for_approval("p1", "appr-p");
    settle();
  }
};

TEST_F(passivating, AnActorWaitingDaysForTheApprovalStopsOnceTheWaitIsStoredAndARowThatMovedBringsOneBack) {
  sent_for_approval();
  auto waiting = row();
  ASSERT_EQ(waiting.step, S::APPROVAL_SENT);
  ASSERT_TRUE(waiting.next_wake_at_ms.has_value()) << "the deadline is in the row before the actor goes";
  EXPECT_GT(*waiting.next_wake_at_ms - now_ms_, 6 * 86400 * 1000LL);
  EXPECT_FALSE(actor_alive()) << "a wait of days holds no actor";
  EXPECT_FALSE(sched_.has_pending_timeout()) << "nor a timer";
  EXPECT_FALSE(spawn_request_actor(svc_, seed_from_row(waiting, now_ms_)).has_value())
      << "rehydration, the sweep and a nudge for an unmoved row spawn nothing for it";
  EXPECT_EQ(metrics_.counter_value("changeflow_passivated_total", {{"when", "wait"}}), 1.0);
  EXPECT_EQ(metrics_.counter_value("changeflow_passivated_total", {{"when", "spawn"}}), 1.0);

  // The approval callback moves the row (as its unit does) and the actor comes back from it.
  walk(setup_db_, id_, {S::APPROVAL_APPROVED});
  spawn();
  run_messages();
  run_db();  // APPROVAL_APPROVED -> CREATE_STARTED
  EXPECT_EQ(row().step, S::CREATE_STARTED);
  EXPECT_TRUE(actor_alive());
  EXPECT_EQ(queued_external(), 1u) << "and carries the change on: the MR is created";
}

// The approval callback commits right behind the actor's own APPROVAL_SENT, and its nudge is in the
// mailbox behind that write's answer: the answer finds a wait of days and the actor starts to stop,
// but the nudge it has not read yet names a row that moved on. It reads the nudge, keeps its place
// and creates the MR, rather than leaving the change in CREATE_STARTED with no actor until a sweep
// finds it.
TEST_F(passivating, ANudgeQueuedBehindTheWriteThatPassivatesBringsTheActorBack) {
  asked_for_approval("p3", "appr-p");
  run_external();  // the approval request answered: APPROVAL_SENT is handed to the database
  ASSERT_EQ(queued_db(), 1u) << "the transition to APPROVAL_SENT is in flight";
  db_pool_.run_queued(db_ctx_, 1);  // it commits; its answer waits in the actor's mailbox
  ASSERT_EQ(row().step, S::APPROVAL_SENT);
  approved_and_named();  // the callback's unit commits and nudges the actor, still registered
  run_messages();        // the write's answer (a wait of days), then the nudge
  EXPECT_TRUE(actor_alive()) << "the actor read the nudge and stayed";
  run_db();  // APPROVAL_APPROVED -> CREATE_STARTED
  EXPECT_EQ(row().step, S::CREATE_STARTED);
  EXPECT_EQ(queued_external(), 1u) << "and creates the MR";
  EXPECT_EQ(metrics_.counter_value("changeflow_passivation_undone_total"), 1.0);
}

// The owner's changed-row poll reads the row the actor's APPROVAL_SENT wrote before that write's
// answer reaches the actor, and nudges it. The answer finds a read pending and arms the wait of days
// as a timer; the read then finds the row as the actor wrote it, and the actor stops then, instead of
// holding that timer for days.
TEST_F(passivating, ANudgeForItsOwnWriteDoesNotKeepAWaitOfDaysAlive) {
  asked_for_approval("p5", "appr-p");
  run_external();  // the approval request answered: APPROVAL_SENT is handed to the database
  ASSERT_EQ(queued_db(), 1u) << "the transition to APPROVAL_SENT is in flight";
  nudge();  // the poll's nudge, naming no write, arrives while the write is in flight
  settle();
  EXPECT_EQ(row().step, S::APPROVAL_SENT);
  EXPECT_FALSE(actor_alive()) << "a wait of days holds no actor";
  EXPECT_FALSE(sched_.has_pending_timeout()) << "nor a timer";
  EXPECT_EQ(metrics_.counter_value("changeflow_passivated_total", {{"when", "wait"}}), 1.0);
}

// The same nudge, and the approval decided before the actor's read: the read finds the row moved on,
// and the actor, which armed nothing for the wait, carries the change on.
TEST_F(passivating, AWaitHeldBackByAReadThatFindsTheDecisionIsNeverStarted) {
  asked_for_approval("p6", "appr-p");
  run_external();
  ASSERT_EQ(queued_db(), 1u) << "the transition to APPROVAL_SENT is in flight";
  nudge();
  db_pool_.run_queued(db_ctx_, 1);  // APPROVAL_SENT commits
  run_messages();                   // its answer: the wait is held back, the read is queued
  ASSERT_EQ(queued_db(), 1u) << "the read the nudge asked for";
  EXPECT_FALSE(sched_.has_pending_timeout()) << "no timer for the wait the read may make moot";
  auto decided =
      persistence::apply_approval_callback(setup_db_, "cb-1", id_, persistence::approval_result::APPROVED, "{}");
  ASSERT_TRUE(decided.ok()) << decided.error.message;
  run_db();  // the read finds APPROVAL_APPROVED and hands CREATE_STARTED to the database
  run_db();
  EXPECT_EQ(row().step, S::CREATE_STARTED);
  EXPECT_TRUE(actor_alive());
  EXPECT_EQ(queued_external(), 1u) << "and creates the MR";
  EXPECT_EQ(metrics_.counter_value("changeflow_passivated_total", {{"when", "wait"}}), 0.0);
}

// A nudge that comes after the actor left the registry finds none, and the actor's last message
// stops it: the wait is passivated and the registry is empty for the change.
TEST_F(passivating, AnActorThatStartedToStopWithNothingBehindItStops) {
  asked_for_approval("p4", "appr-p");
  run_external();
  db_pool_.run_queued(db_ctx_, 1);
  run_messages();
  EXPECT_FALSE(actor_alive());
  EXPECT_FALSE(sched_.has_job()) << "its last message was read";
  EXPECT_EQ(metrics_.counter_value("changeflow_passivation_undone_total"), 0.0);
}

// A rehydration read the row when it was still APPROVAL_SENDING; by the time its actor starts, the
// change's first actor asked for the approval and passivated. The rehydrated actor's first read finds
// the wait of days, with its deadline in the row: it stops too, instead of holding a timer for days.
TEST_F(passivating, AnActorWhoseFirstReadFindsAWaitOfDaysStops) {
  id_ = new_op(setup_db_, "ann", "r1");
  const auto queued = row();  // APPROVAL_SENDING, as the rehydrator read it
  walk(setup_db_, id_, {S::APPROVAL_SENT});
  db_.exec("UPDATE operation SET next_wake_at = NOW(3) + INTERVAL 7 DAY WHERE operation_id = '" + id_ + "'");
  auto seed = seed_from_row(queued, now_ms_);
  seed.read_first = true;
  auto a = spawn_request_actor(svc_, std::move(seed));
  ASSERT_TRUE(a.has_value());
  track(caf::actor_cast<caf::actor>(*a));
  run_messages();
  ASSERT_EQ(queued_db(), 1u) << "the first job is the read of the row";
  run_db();
  EXPECT_EQ(queued_external(), 0u) << "no second request for the approval";
  EXPECT_FALSE(actor_alive()) << "a wait of days holds no actor";
  EXPECT_FALSE(sched_.has_pending_timeout()) << "nor a timer";
  EXPECT_EQ(metrics_.counter_value("changeflow_passivated_total", {{"when", "wait"}}), 1.0);
}

TEST_F(passivating, AWaitWhoseDeadlineIsNearKeepsItsActorAndItsTimer) {
  sent_for_approval();
  auto waiting = row();
  ASSERT_TRUE(waiting.next_wake_at_ms.has_value());
  // Close to its deadline (30 s left, under the 60 s bound) a wait is spawned and times itself out.
  now_ms_ = *waiting.next_wake_at_ms - 30000;
  EXPECT_FALSE(actor_alive());
  spawn();
  run_messages();
  EXPECT_TRUE(actor_alive());
  EXPECT_TRUE(sched_.has_pending_timeout()) << "the actor waits out the last 30 s itself";
}

TEST(PassivatedWait, OnlyTheApprovalWaitWithItsDeadlineBeyondTheBound) {
  const std::int64_t now = 1'000'000'000;
  EXPECT_TRUE(passivated_wait(S::APPROVAL_SENT, now + 61'000, now, 60));
  EXPECT_FALSE(passivated_wait(S::APPROVAL_SENT, now + 60'000, now, 60));
  EXPECT_FALSE(passivated_wait(S::APPROVAL_SENT, 0, now, 60)) << "no stored deadline: keep the actor";
  EXPECT_FALSE(passivated_wait(S::APPROVAL_SENT, now + 86'400'000, now, 0)) << "0 turns it off";
  EXPECT_FALSE(passivated_wait(S::CREATE_MR_OPENED, now + 86'400'000, now, 60)) << "a poll is the actor's work";
}
