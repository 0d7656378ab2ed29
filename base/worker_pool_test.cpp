#include "base/worker_pool.hpp"

#include <gtest/gtest.h>

#include <future>
#include <latch>
#include <sstream>
#include <stdexcept>

using namespace changeflow;

namespace {
struct counter_ctx {
  int jobs_seen = 0;
};
}  // namespace

TEST(WorkerPool, RunsJobsOnPerThreadContexts) {
  worker_pool<counter_ctx> pool("t", 2, 100, [] { return std::make_unique<counter_ctx>(); });
  std::atomic<int> done{0};
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(pool.try_submit([&](counter_ctx& c) {
      ++c.jobs_seen;
      ++done;
    }));
  }
  pool.stop();
  EXPECT_EQ(done.load(), 50);
  EXPECT_EQ(pool.stats().completed, 50u);
}

TEST(WorkerPool, FullQueueRejectsImmediately) {
  worker_pool<counter_ctx> pool("t", 1, 2, [] { return std::make_unique<counter_ctx>(); });
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::latch started(1);
  ASSERT_TRUE(pool.try_submit([&](counter_ctx&) {
    started.count_down();
    gate.wait();
  }));
  started.wait();  // the single thread is now busy
  EXPECT_TRUE(pool.try_submit([](counter_ctx&) {}));
  EXPECT_TRUE(pool.try_submit([](counter_ctx&) {}));
  EXPECT_FALSE(pool.try_submit([](counter_ctx&) {}));  // queue of 2 is full
  EXPECT_EQ(pool.stats().rejected, 1u);
  release.set_value();
  pool.stop();
  EXPECT_EQ(pool.stats().completed, 3u);
}

TEST(WorkerPool, SubmitAfterStopIsRejected) {
  worker_pool<counter_ctx> pool("t", 1, 10, [] { return std::make_unique<counter_ctx>(); });
  pool.stop();
  EXPECT_FALSE(pool.try_submit([](counter_ctx&) {}));
}

TEST(WorkerPool, ReservedSlotsAreLeftForReservedJobs) {
  worker_pool<counter_ctx> pool("t", 1, 4, [] { return std::make_unique<counter_ctx>(); });
  pool.reserve_slots(2);
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::latch started(1);
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.try_submit([&](counter_ctx&) {
    started.count_down();
    gate.wait();
  }));
  started.wait();  // the single thread is now busy; the queue is empty
  auto job = [&](counter_ctx&) { ++ran; };
  using lane = worker_pool<counter_ctx>::lane;
  EXPECT_TRUE(pool.try_submit(job));
  EXPECT_TRUE(pool.try_submit(job));
  EXPECT_FALSE(pool.try_submit(job)) << "normal jobs stop at capacity - reserved";
  EXPECT_TRUE(pool.try_submit(job, lane::reserved));
  EXPECT_TRUE(pool.try_submit(job, lane::reserved));
  EXPECT_FALSE(pool.try_submit(job, lane::reserved)) << "reserved jobs stop at capacity";
  release.set_value();
  pool.stop();
  EXPECT_EQ(ran.load(), 4);
}

TEST(WorkerPool, AThrowingJobIsLoggedWithAnErrorIdAndCountedAndTheThreadGoesOn) {
  worker_pool<counter_ctx> pool("throwing", 1, 10, [] { return std::make_unique<counter_ctx>(); });
  std::atomic<int> ran{0};
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(pool.try_submit([](counter_ctx&) { throw std::runtime_error("boom in job"); }));
  ASSERT_TRUE(pool.try_submit([](counter_ctx&) { throw 42; }));
  ASSERT_TRUE(pool.try_submit([&](counter_ctx&) { ++ran; }));
  pool.stop();
  auto logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ran.load(), 1) << "the thread survives a throwing job";
  EXPECT_EQ(pool.stats().failed, 2u);
  EXPECT_EQ(pool.stats().completed, 3u);
  std::vector<nlohmann::json> failures;
  std::istringstream lines(logged);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == "worker_pool.job_failed") failures.push_back(j);
  }
  ASSERT_EQ(failures.size(), 2u) << logged;
  EXPECT_EQ(failures[0]["pool"], "throwing");
  EXPECT_EQ(failures[0]["error"], "boom in job");
  EXPECT_EQ(failures[0]["level"], "error");
  EXPECT_FALSE(failures[0].value("error_id", "").empty());
  EXPECT_NE(failures[0]["error_id"], failures[1]["error_id"]);
}
