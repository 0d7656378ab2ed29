#include "http/middleware/deadline_timer.hpp"

namespace changeflow::http::middleware {

deadline_timer::deadline_timer() : thread_([this] { run(); }) {}

deadline_timer::~deadline_timer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void deadline_timer::schedule(std::chrono::milliseconds delay, std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    due_.emplace(std::chrono::steady_clock::now() + delay, std::move(fn));
  }
  cv_.notify_all();
}

std::size_t deadline_timer::pending() const {
  std::lock_guard lock(mutex_);
  return due_.size();
}

void deadline_timer::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = due_.begin();
    if (first->first > std::chrono::steady_clock::now()) {
      cv_.wait_until(lock, first->first);
      continue;
    }
    auto fn = std::move(first->second);
    due_.erase(first);
    lock.unlock();
    try {
      fn();
    } catch (...) {
      // A timeout callback that throws must not stop every later timeout from firing.
    }
    lock.lock();
  }
}

}  // namespace changeflow::http::middleware
