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
