#pragma once
// Test hooks that hold a worker at a named point so a crash test can kill the process exactly there
// (faults.hold_after_* keys, hot, 0 = off). Capped at 60 s: a forgotten hook slows a worker down but
// never keeps it.

#include <chrono>
#include <cstdint>
#include <thread>

namespace changeflow::config {

/// `hold_ms` is a faults.hold_after_* setting (already clamped to 0..60000 by the settings).
inline void hold_for_test_hook(std::int64_t hold_ms) {
  if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
}

}  // namespace changeflow::config
