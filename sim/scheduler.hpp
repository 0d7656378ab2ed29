#pragma once
// One thread that runs tasks at their due time: approval decisions, callback deliveries (and their
// retries), deploy callbacks, delayed replies. Tasks run one at a time, in due order.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace changeflow::sim {

/// How late the tasks ran against their due time, since start. A sender whose tasks run late is
/// pacing whoever it sends to: the bench reads this to tell the service's limit from the fake's.
struct scheduler_stats {
  std::uint64_t tasks = 0;    // tasks run
  std::uint64_t lag_us = 0;   // sum over the tasks of (start - due)
  std::uint64_t late = 0;     // tasks that started more than scheduler::late_after after their due time
  std::uint64_t busy_us = 0;  // wall time spent running tasks

  scheduler_stats& operator+=(const scheduler_stats& o) {
    tasks += o.tasks;
    lag_us += o.lag_us;
    late += o.late;
    busy_us += o.busy_us;
    return *this;
  }
};

class scheduler {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds late_after{5};
  scheduler();
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  void after(std::chrono::milliseconds delay, std::function<void()> task);
  /// Drops pending tasks and joins the thread. Safe to call twice.
  void stop();
  scheduler_stats stats();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::multimap<clock::time_point, std::function<void()>> tasks_;
  bool stopping_ = false;
  scheduler_stats stats_;
  std::thread thread_;
};

}  // namespace changeflow::sim
