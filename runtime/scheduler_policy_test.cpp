// The actor scheduler's policy on a real actor system (two workers, threads of its own): messages
// from many threads outside the scheduler and between actors all run, and a single message sent
// while every worker sleeps still wakes one (a lost wake-up would leave it queued forever).

#include "runtime/scheduler_policy.hpp"

#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace changeflow::runtime {
namespace {

caf::actor_system_config& quiet_config(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", static_cast<size_t>(2));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.load<quiet_sharing_scheduler>();
  return cfg;
}

/// Adds what it receives to `total`; a message > 1 is also passed on to `next` as that many ones.
caf::behavior counter(caf::event_based_actor* self, std::atomic<long>* total, caf::actor next) {
  return {[=](int n) {
    if (n > 1 && next) {
      for (int i = 0; i < n; ++i) self->send(next, 1);
      return;
    }
    total->fetch_add(n);
  }};
}

TEST(QuietSharingScheduler, RunsEveryMessageFromOutsideThreadsAndBetweenActors) {
  caf::actor_system_config cfg;
  caf::actor_system system{quiet_config(cfg)};
  ASSERT_NE(dynamic_cast<quiet_sharing_scheduler*>(&system.scheduler()), nullptr);
  std::atomic<long> total{0};
  auto sink = system.spawn(counter, &total, caf::actor{});
  auto relay = system.spawn(counter, &total, sink);
  constexpr int threads = 8, per_thread = 5000;
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        // Every fourth message goes through the relay, which sends on from a worker.
        if (i % 4 == 0)
          caf::anon_send(relay, 3);
        else
          caf::anon_send(t % 2 ? sink : relay, 1);
      }
    });
  }
  for (auto& s : senders) s.join();
  const long expected = long(threads) * (per_thread / 4 * 3 + (per_thread - per_thread / 4));
  EXPECT_TRUE(changeflow::testing::wait_until([&] { return total.load() == expected; }, std::chrono::seconds(30)))
      << total.load() << " of " << expected;
  caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

TEST(QuietSharingScheduler, AMessageSentWhileEveryWorkerSleepsRuns) {
  caf::actor_system_config cfg;
  caf::actor_system system{quiet_config(cfg)};
  std::atomic<long> total{0};
  auto sink = system.spawn(counter, &total, caf::actor{});
  for (long i = 1; i <= 200; ++i) {
    // The previous message ran and the workers went idle: exactly one message now.
    caf::anon_send(sink, 1);
    ASSERT_TRUE(changeflow::testing::wait_until([&] { return total.load() == i; }, std::chrono::seconds(10)))
        << "message " << i << " never ran";
  }
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace changeflow::runtime
