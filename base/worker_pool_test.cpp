#include "base/worker_pool.hpp"

#include "base/answer_guard.hpp"

#include <gtest/gtest.h>

#include <pthread.h>
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

TEST(WorkerPool, ItsThreadsCarryThePoolsNameCutTo15Characters) {
  // The kernel keeps 15 characters of a thread's name; a longer one is cut, not refused.
  for (const std::string name : {"external", "a-pool-name-longer-than-fifteen"}) {
    worker_pool<counter_ctx> pool(name, 1, 10, [] { return std::make_unique<counter_ctx>(); });
    std::promise<std::string> seen;
    ASSERT_TRUE(pool.try_submit([&](counter_ctx&) {
      char buf[32] = {};
      ::pthread_getname_np(::pthread_self(), buf, sizeof buf);
      seen.set_value(buf);
    }));
    EXPECT_EQ(seen.get_future().get(), name.substr(0, 15));
  }
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

// A job's caller is answered whatever becomes of the job: the guard fires when the job throws (of
// any type) or is dropped unrun, and stays silent when the job answered.
TEST(WorkerPool, AJobThatEndsWithoutAnswerIsAnsweredByItsGuard) {
  worker_pool<counter_ctx> pool("manual", 0, 10, [] { return std::make_unique<counter_ctx>(); });
  counter_ctx ctx;
  std::vector<std::string> lost;
  auto job_with_guard = [&](std::string name, std::function<void()> body) {
    auto guard = make_answer_guard([&lost, name] { lost.push_back(name); });
    return pool.try_submit([guard, body](counter_ctx&) {
      body();
      guard->answered();
    });
  };
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(job_with_guard("answers", [] {}));
  ASSERT_TRUE(job_with_guard("throws", [] { throw std::runtime_error("boom"); }));
  ASSERT_TRUE(job_with_guard("throws-int", [] { throw 7; }));
  ASSERT_TRUE(job_with_guard("dropped", [] {}));
  EXPECT_EQ(pool.stats().queued, 4u) << "a pool without threads runs nothing by itself";
  EXPECT_EQ(pool.run_queued(ctx, 3), 3u);
  EXPECT_TRUE(pool.drop_oldest());
  EXPECT_FALSE(pool.drop_oldest());
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(lost, (std::vector<std::string>{"throws", "throws-int", "dropped"}));
  EXPECT_EQ(pool.stats().failed, 2u);
  EXPECT_EQ(pool.stats().completed, 3u);
  EXPECT_EQ(pool.stats().busy, 0u);
}
