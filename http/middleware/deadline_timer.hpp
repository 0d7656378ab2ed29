#pragma once
// One background thread that runs callbacks at a deadline. The API uses it to guarantee that a
// permission check always answers: the check races the external call against this timer and the
// first answer wins (run_chain honours exactly one). Callbacks run on the timer thread and must be
// short (they only complete a request or drop a flag).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace changeflow::http::middleware {

class deadline_timer {
 public:
  deadline_timer();
  /// Stops the thread; callbacks not yet due are dropped (their requests are answered by the
  /// responder's own "never replied" fallback).
  ~deadline_timer();
  deadline_timer(const deadline_timer&) = delete;
  deadline_timer& operator=(const deadline_timer&) = delete;

  /// Runs `fn` once after `delay` (never throws out: exceptions from `fn` are swallowed).
  void schedule(std::chrono::milliseconds delay, std::function<void()> fn);
  std::size_t pending() const;
  /// Drops every pending callback without running it (at shutdown: what they captured is released
  /// while its owners still exist).
  void clear();

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> due_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace changeflow::http::middleware
