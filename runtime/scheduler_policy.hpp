#pragma once
// The actor scheduler's policy: one shared queue of ready actors, idle workers blocked on a
// condition variable (no polling, no CPU when idle), as CAF's work sharing, with two differences
// that matter when most messages come from threads outside the scheduler (database and HTTP
// threads answering the actors):
//
// - A sleeping worker is woken AFTER the queue's lock is released, and only when a worker sleeps.
//   CAF's work sharing notifies while holding the lock, so the worker it wakes runs straight into
//   the held mutex and sleeps again on it: two wake-ups (and two context switches) per message
//   instead of one. Waking after the unlock cannot lose a wake-up: a worker counts itself as
//   sleeping under the lock before it waits, and the enqueuer reads that count under the same lock.
// - The queue is a deque of pointers: no list node allocated and freed per message.
//
// Installed with `caf::actor_system_config::load<quiet_sharing_scheduler>()` (CAF then uses it
// instead of the policy named by `scheduler.policy`).

#include <caf/policy/unprofiled.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/coordinator.hpp>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

namespace changeflow::runtime {

class quiet_sharing : public caf::policy::unprofiled {
 public:
  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*) {}
    std::mutex lock;
    std::condition_variable cv;
    std::deque<caf::resumable*> queue;
    std::size_t sleeping = 0;  // workers waiting on cv; read and written under lock
  };

  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator*) {}
  };

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    enqueue(d(self), job);
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& data = d(self->parent());
    std::unique_lock<std::mutex> guard(data.lock);
    while (data.queue.empty()) {
      ++data.sleeping;
      data.cv.wait(guard);
      --data.sleeping;
    }
    caf::resumable* job = data.queue.front();
    data.queue.pop_front();
    return job;
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker*, UnaryFunction) {}

  template <class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator* self, UnaryFunction f) {
    auto& data = d(self);
    std::unique_lock<std::mutex> guard(data.lock);
    while (!data.queue.empty()) {
      caf::resumable* job = data.queue.front();
      data.queue.pop_front();
      f(job);
    }
  }

 private:
  static void enqueue(coordinator_data& data, caf::resumable* job) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> guard(data.lock);
      data.queue.push_back(job);
      wake = data.sleeping > 0;
    }
    if (wake) data.cv.notify_one();
  }
};

/// The coordinator to load: `cfg.load<quiet_sharing_scheduler>()`.
using quiet_sharing_scheduler = caf::scheduler::coordinator<quiet_sharing>;

}  // namespace changeflow::runtime
