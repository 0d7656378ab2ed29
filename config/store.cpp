#include "config/store.hpp"

#include "base/log.hpp"

namespace changeflow::config {

store::store(std::shared_ptr<const snapshot> initial, std::string path, env_lookup env)
    : current_(std::move(initial)), path_(std::move(path)), env_(std::move(env)) {
  std::error_code ec;
  if (!path_.empty()) last_mtime_ = std::filesystem::last_write_time(path_, ec);
}

store::~store() {
  stop_watching();
}

std::shared_ptr<const snapshot> store::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

void store::replace(std::shared_ptr<const snapshot> next) {
  std::lock_guard lock(mutex_);
  current_ = std::move(next);
}

bool store::reload() {
  if (path_.empty()) return false;
  auto result = load_from_file(path_, env_);
  if (!result.snap) {
    ++reload_errors_;
    log::error("config.reload_failed", {{"path", path_}, {"errors", result.errors}});
    return false;
  }
  auto previous = current();
  auto restart_keys = previous->restart_keys_changed(*result.snap);
  if (!restart_keys.empty()) {
    log::warn("config.restart_required", {{"keys", restart_keys}});
  }
  replace(result.snap);
  ++reloads_;
  log::info("config.reloaded", {{"path", path_}});
  return true;
}

void store::start_watching(std::chrono::milliseconds interval) {
  if (path_.empty() || watcher_.joinable()) return;
  watcher_ = std::thread([this, interval] {
    std::unique_lock lock(watch_mutex_);
    while (!watch_cv_.wait_for(lock, interval, [this] { return stop_; })) {
      std::error_code ec;
      auto mtime = std::filesystem::last_write_time(path_, ec);
      if (ec || mtime == last_mtime_) continue;
      last_mtime_ = mtime;
      reload();
    }
  });
}

void store::stop_watching() {
  {
    std::lock_guard lock(watch_mutex_);
    stop_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

}  // namespace changeflow::config
