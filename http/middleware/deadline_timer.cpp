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

void deadline_timer::clear() {
  decltype(due_) dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(due_);
  }
  cv_.notify_all();
  // `dropped` is destroyed here, outside the lock: the callbacks' captures may be large.
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
      // A copy: the entry may be gone (clear(), an earlier schedule) when the wait returns.
      const auto when = first->first;
      cv_.wait_until(lock, when);
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
