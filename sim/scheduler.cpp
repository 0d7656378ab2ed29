#include "sim/scheduler.hpp"

#include "base/log.hpp"

namespace changeflow::sim {

scheduler::scheduler() : thread_([this] { run(); }) {}
scheduler::~scheduler() {
  stop();
}

void scheduler::after(std::chrono::milliseconds delay, std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    tasks_.emplace(clock::now() + delay, std::move(task));
  }
  cv_.notify_one();
}

void scheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  // Destroy the dropped tasks outside the lock: a dropped delayed reply answers 500 on destruction.
  std::multimap<clock::time_point, std::function<void()>> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(tasks_);
  }
}

scheduler_stats scheduler::stats() {
  std::lock_guard lock(mutex_);
  return stats_;
}

void scheduler::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (tasks_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto due = tasks_.begin()->first;
    const auto now = clock::now();
    if (now < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    const auto lag = now - due;
    ++stats_.tasks;
    stats_.lag_us += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(lag).count());
    if (lag > late_after) ++stats_.late;
    auto task = std::move(tasks_.begin()->second);
    tasks_.erase(tasks_.begin());
    lock.unlock();
    // A task is a sim action; one failing must not stop the others, but it is logged: a callback
    // or decision that silently vanished would look like a service bug in the test that waits for it.
    const auto started = clock::now();
    try {
      task();
    } catch (const std::exception& e) {
      log::error("sim.task_failed", {{"error", e.what()}});
    } catch (...) {
      log::error("sim.task_failed", {{"error", "non-standard exception"}});
    }
    lock.lock();
    stats_.busy_us += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - started).count());
  }
}

}  // namespace changeflow::sim
