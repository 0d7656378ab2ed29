#pragma once
// A fixed set of threads for blocking work (database calls, outbound HTTP) with a bounded queue.
//
// Each thread owns one `Context` (a database connection, an HTTP client with its keep-alive
// sockets) created on that thread and never shared. `try_submit` never blocks: a full queue answers
// false at once so the caller can persist an explicit failure state instead of hanging
// (overload becomes a visible, counted state). A job that throws is logged with an error id and
// counted (`failed`), never dropped silently.

#include "base/ids.hpp"
#include "base/log.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace changeflow {

struct worker_pool_stats {
  std::size_t queued = 0;
  std::size_t busy = 0;
  std::uint64_t completed = 0;
  std::uint64_t rejected = 0;
  std::uint64_t failed = 0;  // jobs that threw
};

/// Held by a job that stands for work queued elsewhere (a group of transitions, a batch of reads):
/// if the pool destroys the job without running it (stopping, a test dropping it), `on_unrun` fires,
/// so the callers of that work are answered instead of waiting for a job that will never come. The
/// job sets `ran` first thing when it runs.
struct unrun_guard {
  std::function<void()> on_unrun;
  bool ran = false;
  unrun_guard() = default;
  unrun_guard(const unrun_guard&) = delete;
  unrun_guard& operator=(const unrun_guard&) = delete;
  ~unrun_guard() {
    if (!ran && on_unrun) on_unrun();
  }
};

/// Names the calling thread (at most 15 characters are kept), so `top -H`, `perf` and
/// /proc/<pid>/task/*/comm show which pool a thread serves.
void name_this_thread(const std::string& name);

template <class Context>
class worker_pool {
 public:
  using job = std::function<void(Context&)>;
  using context_factory = std::function<std::unique_ptr<Context>()>;

  worker_pool(std::string name, std::size_t threads, std::size_t queue_capacity, context_factory make_context)
      : name_(std::move(name)), capacity_(queue_capacity) {
    for (std::size_t i = 0; i < threads; ++i) {
      threads_.emplace_back([this, make_context] { run(make_context); });
    }
  }

  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;

  ~worker_pool() { stop(); }

  /// Who may use the last `reserved` slots of the queue.
  enum class lane { normal, reserved };

  /// Keeps the last `n` queue slots for `lane::reserved` jobs (e.g. callbacks from external systems,
  /// which are lost after the sender's few retries, while a refused submit is simply retried by its
  /// client). Clamped below the capacity.
  void reserve_slots(std::size_t n) {
    std::lock_guard lock(mutex_);
    reserved_ = capacity_ > 0 ? std::min(n, capacity_ - 1) : 0;
  }

  /// Queues a job; false when the queue (or its share of it) is full or the pool is stopping.
  bool try_submit(job j, lane l = lane::normal) {
    {
      std::lock_guard lock(mutex_);
      const std::size_t limit = l == lane::reserved ? capacity_ : capacity_ - reserved_;
      if (stopping_ || queue_.size() >= limit) {
        ++rejected_;
        return false;
      }
      queue_.push_back(std::move(j));
    }
    cv_.notify_one();
    return true;
  }

  /// Finishes queued jobs, then joins the threads. Safe to call twice.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ && threads_.empty()) return;
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }

  /// Runs up to `max` queued jobs on the calling thread with `ctx`, in queue order; returns how many
  /// ran. Meant for a pool built with no threads, which then runs nothing by itself: a test drives it
  /// and so decides when each blocking job runs relative to the actors' messages.
  std::size_t run_queued(Context& ctx, std::size_t max = static_cast<std::size_t>(-1)) {
    std::size_t ran = 0;
    while (ran < max) {
      job j;
      {
        std::lock_guard lock(mutex_);
        if (queue_.empty()) break;
        j = std::move(queue_.front());
        queue_.pop_front();
        ++busy_;
      }
      execute(j, ctx);
      ++ran;
    }
    return ran;
  }

  /// Removes the oldest queued job and destroys it unrun, as if its thread had died with it (tests:
  /// what happens to a caller whose job never answers). False when nothing is queued.
  bool drop_oldest() {
    job j;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) return false;
      j = std::move(queue_.front());
      queue_.pop_front();
    }
    return true;  // `j` is destroyed here, outside the lock (its captures may answer a caller)
  }

  worker_pool_stats stats() const {
    std::lock_guard lock(mutex_);
    return {queue_.size(), busy_, completed_, rejected_, failed_};
  }

  const std::string& name() const { return name_; }
  std::size_t capacity() const { return capacity_; }
  std::size_t reserved() const {
    std::lock_guard lock(mutex_);
    return reserved_;
  }

 private:
  void run(const context_factory& make_context) {
    name_this_thread(name_);
    std::unique_ptr<Context> ctx = make_context();
    for (;;) {
      job j;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        j = std::move(queue_.front());
        queue_.pop_front();
        ++busy_;
      }
      execute(j, *ctx);
    }
  }

  void execute(job& j, Context& ctx) {
    // Jobs translate their own errors into values; one that throws anyway is a bug whose caller
    // would wait for an answer that never comes. It is made visible (logged with an id an operator
    // can quote, counted in changeflow_pool_job_failures) and its caller is answered by the job's
    // answer_guard when `j` is destroyed.
    bool threw = true;
    try {
      j(ctx);
      threw = false;
    } catch (const std::exception& e) {
      log_failure(e.what());
    } catch (...) {
      log_failure("non-standard exception");
    }
    j = nullptr;  // destroy the captures (and so any guard) before the job counts as finished
    std::lock_guard lock(mutex_);
    --busy_;
    ++completed_;
    if (threw) ++failed_;
  }

  void log_failure(const char* what) {
    log::error("worker_pool.job_failed", {{"pool", name_}, {"error_id", ids::new_error_id()}, {"error", what}});
  }

  std::string name_;
  std::size_t capacity_;
  std::size_t reserved_ = 0;  // last slots only lane::reserved jobs may take
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<job> queue_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  std::size_t busy_ = 0;
  std::uint64_t completed_ = 0;
  std::uint64_t rejected_ = 0;
  std::uint64_t failed_ = 0;
};

}  // namespace changeflow
