#pragma once
// Holds the current configuration snapshot and swaps it atomically when the file changes.
// A reload that fails validation keeps the last good snapshot; the error is logged and counted.
// Keys marked "restart" are still read from the new snapshot, but components built at start-up
// (ports, database, pools) only pick them up after a restart; a reload that changes one is logged.

#include "config/snapshot.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace changeflow::config {

class store {
 public:
  explicit store(std::shared_ptr<const snapshot> initial, std::string path = {}, env_lookup env = process_env);
  ~store();

  store(const store&) = delete;
  store& operator=(const store&) = delete;

  std::shared_ptr<const snapshot> current() const;
  void replace(std::shared_ptr<const snapshot> next);

  /// Re-reads the file now; true when a new snapshot was installed.
  bool reload();
  /// Polls the file's modification time every `interval` on a background thread.
  void start_watching(std::chrono::milliseconds interval);
  void stop_watching();

  std::uint64_t reload_count() const { return reloads_.load(); }
  std::uint64_t reload_error_count() const { return reload_errors_.load(); }
  const std::string& path() const { return path_; }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const snapshot> current_;
  std::string path_;
  env_lookup env_;
  std::filesystem::file_time_type last_mtime_{};
  std::atomic<std::uint64_t> reloads_{0};
  std::atomic<std::uint64_t> reload_errors_{0};
  std::thread watcher_;
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool stop_ = false;
};

}  // namespace changeflow::config
