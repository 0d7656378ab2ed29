#pragma once
// One thread that runs tasks at their due time: approval decisions, callback deliveries (and their
// retries), deploy callbacks, delayed replies. Tasks run one at a time, in due order.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace changeflow::sim {

class scheduler {
 public:
  using clock = std::chrono::steady_clock;
  scheduler();
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  void after(std::chrono::milliseconds delay, std::function<void()> task);
  /// Drops pending tasks and joins the thread. Safe to call twice.
  void stop();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::multimap<clock::time_point, std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace changeflow::sim
