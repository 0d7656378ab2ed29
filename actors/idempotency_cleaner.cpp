#include "actors/idempotency_cleaner.hpp"

#include "base/log.hpp"
#include "persistence/idempotency_repo.hpp"

namespace changeflow::actors {

namespace {
constexpr int max_batches_per_pass = 50;  // bounds one pass; the rest waits for the next tick
}

idempotency_cleaner::idempotency_cleaner(config::store& cfg, persistence::db_pool& db, metrics::registry& metrics)
    : cfg_(cfg), db_(db), metrics_(metrics) {}

idempotency_cleaner::~idempotency_cleaner() {
  stop();
}

void idempotency_cleaner::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void idempotency_cleaner::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void idempotency_cleaner::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    auto interval = cfg_.current()->integer("idempotency.cleanup_interval_ms");
    // Paused (<= 0): look at the setting again in a second, so re-enabling it applies without restart.
    auto wait = std::chrono::milliseconds(interval > 0 ? interval : 1000);
    cv_.wait_for(lock, wait, [this] { return stop_; });
    if (stop_) break;
    if (interval <= 0) continue;
    lock.unlock();
    queue_pass();
    lock.lock();
  }
}

void idempotency_cleaner::queue_pass() {
  if (pass_running_.exchange(true)) return;  // the previous pass is still queued or running
  auto batch = static_cast<int>(cfg_.current()->integer("idempotency.cleanup_batch"));
  if (batch <= 0) batch = 500;
  bool queued = db_.try_submit([this, batch](persistence::db_context& db) {
    int total = 0;
    try {
      for (int i = 0; i < max_batches_per_pass; ++i) {
        auto r = persistence::idem_delete_expired(db, batch);
        if (!r.ok()) {
          log::warn("idempotency.cleanup_failed", {{"error", r.error.message}});
          break;
        }
        total += r.value;
        if (r.value < batch) break;
      }
    } catch (const std::exception& e) {
      log::warn("idempotency.cleanup_failed", {{"error", e.what()}});
    }
    if (total > 0) {
      deleted_ += static_cast<std::uint64_t>(total);
      metrics_.inc("changeflow_idempotency_expired_deleted_total", "Expired idempotency records deleted", {},
                   static_cast<double>(total));
      log::info("idempotency.cleanup", {{"deleted", total}});
    }
    pass_running_ = false;
  });
  if (!queued) pass_running_ = false;  // pool full: try again next tick
}

}  // namespace changeflow::actors
