#pragma once
// Test hooks that hold a worker at a named point so a crash test can kill the process exactly there
// (faults.hold_after_* keys, hot, 0 = off). Capped at 60 s: a forgotten hook slows a worker down but
// never keeps it.

#include "config/snapshot.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace changeflow::config {

inline void hold_for_test_hook(const snapshot& snap, const std::string& key) {
  auto hold = std::clamp<std::int64_t>(snap.int_or(key, 0), 0, 60000);
  if (hold > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold));
}

}  // namespace changeflow::config
