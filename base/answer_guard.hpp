#pragma once
// A job handed to a worker pool owes its caller an answer (an actor that sent it stays busy until
// the answer arrives). `answer_guard` makes that debt hold whatever happens to the job: carried in
// the job's captures, it calls `on_lost` once when the last copy of the job is destroyed without
// `answered()` having been called — the job threw (any type), returned early, or was dropped unrun.
// The caller then gets a failure answer and takes its normal retry path instead of waiting forever.

#include <functional>
#include <memory>
#include <utility>

namespace changeflow {

class answer_guard {
 public:
  explicit answer_guard(std::function<void()> on_lost) : on_lost_(std::move(on_lost)) {}
  answer_guard(const answer_guard&) = delete;
  answer_guard& operator=(const answer_guard&) = delete;
  ~answer_guard() {
    if (answered_ || !on_lost_) return;
    try {
      on_lost_();
    } catch (...) {
      // Destructors must not throw; the pool has already logged the job's own failure.
    }
  }

  /// The job sent its answer: nothing to do on destruction.
  void answered() { answered_ = true; }

 private:
  std::function<void()> on_lost_;
  bool answered_ = false;
};

/// Shared, so every copy of a std::function job refers to one guard.
inline std::shared_ptr<answer_guard> make_answer_guard(std::function<void()> on_lost) {
  return std::make_shared<answer_guard>(std::move(on_lost));
}

}  // namespace changeflow
