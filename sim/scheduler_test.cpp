#include "sim/scheduler.hpp"

#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

using namespace std::chrono_literals;

TEST(SimScheduler, AThrowingTaskIsLoggedAndTheNextTasksStillRun) {
  changeflow::sim::scheduler tasks;
  std::atomic<bool> later_ran{false};
  ::testing::internal::CaptureStderr();
  tasks.after(0ms, [] { throw std::runtime_error("callback body broken"); });
  tasks.after(5ms, [&] { later_ran = true; });
  bool ran = changeflow::testing::wait_until([&] { return later_ran.load(); }, 10s);
  tasks.stop();
  auto logged = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(ran);
  EXPECT_NE(logged.find("\"event\":\"sim.task_failed\""), std::string::npos) << logged;
  EXPECT_NE(logged.find("callback body broken"), std::string::npos) << logged;
}

// A task the one before it holds up runs late, and the scheduler says so: what the bench reads to
// tell whether the sim's senders kept up with the service.
TEST(SimScheduler, ATaskHeldUpByTheOneBeforeItIsCountedLate) {
  using clock = changeflow::sim::scheduler::clock;
  std::atomic<bool> release{false}, second_ran{false};
  changeflow::sim::scheduler tasks;
  // Declared after `tasks`, so destroyed first: a failed assertion still lets the first task end
  // before the scheduler joins its thread (and the flags outlive both).
  struct releaser {
    std::atomic<bool>& flag;
    ~releaser() {
      flag = true;
      flag.notify_all();
    }
  } on_exit{release};
  tasks.after(0ms, [&] { release.wait(false); });
  tasks.after(1ms, [&] { second_ran = true; });
  // The second task was due at the latest 1 ms after this; hold the first until well past that.
  const auto due_by = clock::now() + 1ms;
  const auto held_until = due_by + changeflow::sim::scheduler::late_after + 2ms;
  ASSERT_TRUE(changeflow::testing::wait_until([&] { return clock::now() > held_until; }, 10s));
  release = true;
  release.notify_all();
  ASSERT_TRUE(changeflow::testing::wait_until([&] { return second_ran.load(); }, 10s));
  const auto s = tasks.stats();
  tasks.stop();
  EXPECT_EQ(s.tasks, 2u);
  EXPECT_GE(s.late, 1u);
  EXPECT_GE(s.lag_us, 7000u);
}
