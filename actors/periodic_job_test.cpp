// The periodic-job idiom on CAF's deterministic test coordinator: timers fire only when the test
// fires them, so each property is checked step by step without waiting on the clock.

#include "actors/periodic_job.hpp"

#include <gtest/gtest.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <atomic>
#include <vector>

namespace changeflow::actors {
namespace {

caf::actor_system_config& testing_config(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  return cfg;
}

class PeriodicJob : public ::testing::Test {
 protected:
  PeriodicJob()
      : system_(testing_config(cfg_)), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(system_.scheduler())) {}

  // The jobs (locals of the test body) are stopped by now; their exit messages run here so the
  // system can shut down (on the test coordinator nothing runs unless the test runs it).
  void TearDown() override { sched_.run(); }

  /// A spec whose passes stay open until the test ends them (`finish`), like a database job.
  periodic_spec held_spec(bool first_at_once = true) {
    periodic_spec s;
    s.name = "test";
    s.first_at_once = first_at_once;
    s.interval_ms = [this] { return interval_.load(); };
    s.start_pass = [this](pass_done done) {
      if (refuse_) return false;
      ++started_;
      open_.push_back(std::move(done));
      return true;
    };
    return s;
  }
  void finish(bool again = false) {
    ASSERT_FALSE(open_.empty());
    auto d = std::move(open_.front());
    open_.erase(open_.begin());
    d(again);
    sched_.run();
  }
  /// Fires the pending timer; false when none is armed.
  bool fire() {
    bool fired = sched_.trigger_timeout();
    sched_.run();
    return fired;
  }

  caf::actor_system_config cfg_;
  caf::actor_system system_;
  caf::scheduler::test_coordinator& sched_;
  std::atomic<std::int64_t> interval_{100};
  bool refuse_ = false;
  int started_ = 0;
  std::vector<pass_done> open_;
};

TEST_F(PeriodicJob, RunsAtOnceThenOneIntervalAfterEachPassEnded) {
  periodic_job job;
  job.start(system_, held_spec());
  sched_.run();
  EXPECT_EQ(started_, 1);
  // While the pass is open no timer is armed: passes never overlap.
  EXPECT_FALSE(sched_.has_pending_timeout());
  finish();
  ASSERT_TRUE(sched_.has_pending_timeout());
  EXPECT_EQ(started_, 1);
  ASSERT_TRUE(fire());
  EXPECT_EQ(started_, 2);
  EXPECT_FALSE(sched_.has_pending_timeout());
}

TEST_F(PeriodicJob, FirstPassAfterOneIntervalWhenAsked) {
  periodic_job job;
  job.start(system_, held_spec(false));
  sched_.run();
  EXPECT_EQ(started_, 0);
  ASSERT_TRUE(fire());
  EXPECT_EQ(started_, 1);
}

TEST_F(PeriodicJob, AgainRunsTheNextPassWithoutATimer) {
  periodic_job job;
  job.start(system_, held_spec());
  sched_.run();
  finish(true);
  EXPECT_EQ(started_, 2);
  EXPECT_FALSE(sched_.has_pending_timeout());
  finish(false);
  EXPECT_EQ(started_, 2);
  EXPECT_TRUE(sched_.has_pending_timeout());
}

TEST_F(PeriodicJob, ANonPositiveIntervalPausesAndTheHotValueResumesIt) {
  periodic_job job;
  interval_ = 0;
  job.start(system_, held_spec());
  sched_.run();
  EXPECT_EQ(started_, 0);
  // Paused: the job keeps looking at the interval, but runs no pass.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(fire());
  EXPECT_EQ(started_, 0);
  interval_ = 100;
  ASSERT_TRUE(fire());
  EXPECT_EQ(started_, 1);
}

TEST_F(PeriodicJob, APassThatCouldNotStartIsTriedAgainAfterTheInterval) {
  periodic_job job;
  refuse_ = true;
  job.start(system_, held_spec());
  sched_.run();
  EXPECT_EQ(started_, 0);
  ASSERT_TRUE(sched_.has_pending_timeout());
  refuse_ = false;
  ASSERT_TRUE(fire());
  EXPECT_EQ(started_, 1);
}

TEST_F(PeriodicJob, StopEndsTheTimerAndALateReportReachesNobody) {
  periodic_job job;
  job.start(system_, held_spec());
  sched_.run();
  ASSERT_EQ(started_, 1);
  EXPECT_FALSE(*job.stop_flag());
  job.stop();
  sched_.run();
  EXPECT_TRUE(*job.stop_flag());
  EXPECT_FALSE(job.running());
  finish();  // the open pass ends after the stop
  EXPECT_FALSE(sched_.has_pending_timeout());
  EXPECT_EQ(started_, 1);
}

TEST_F(PeriodicJob, ThrowingStartIsAPassThatCouldNotStart) {
  periodic_job job;
  auto spec = held_spec();
  int calls = 0;
  spec.start_pass = [&calls](pass_done) -> bool {
    ++calls;
    throw std::runtime_error("boom");
  };
  job.start(system_, std::move(spec));
  sched_.run();
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(fire());
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace changeflow::actors
