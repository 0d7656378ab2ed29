#pragma once
// Periodic cleanup of expired idempotency records. A small thread owned by main wakes every
// idempotency.cleanup_interval_ms (hot; <= 0 pauses the cleanup) and queues ONE job on the database
// pool that deletes expired rows in batches of idempotency.cleanup_batch through the expires_at
// index (persistence::idem_delete_expired), so no single statement holds locks for long. A pass
// never overlaps the previous one. Expired records are already ignored by reads (the repo filters
// on expires_at), so the cleanup only bounds table growth: running late is harmless.
// Every instance runs it; concurrent DELETEs of the same expired rows are harmless.

#include "config/store.hpp"
#include "metrics/registry.hpp"
#include "persistence/db_pool.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace changeflow::actors {

class idempotency_cleaner {
 public:
  idempotency_cleaner(config::store& cfg, persistence::db_pool& db, metrics::registry& metrics);
  ~idempotency_cleaner();
  idempotency_cleaner(const idempotency_cleaner&) = delete;
  idempotency_cleaner& operator=(const idempotency_cleaner&) = delete;

  void start();
  /// Stops the timer thread; a pass already queued on the pool still completes with the pool.
  void stop();

  /// Records deleted since start (for tests and the metric).
  std::uint64_t deleted() const { return deleted_.load(); }

 private:
  void run();
  void queue_pass();

  config::store& cfg_;
  persistence::db_pool& db_;
  metrics::registry& metrics_;
  std::atomic<bool> pass_running_{false};
  std::atomic<std::uint64_t> deleted_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace changeflow::actors
