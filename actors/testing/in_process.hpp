#pragma once
// Actors in process, on CAF's deterministic test coordinator: nothing runs unless the test runs it.
// Actor messages run when the test runs the scheduler; blocking jobs wait in pools without threads
// until the test runs (or drops) them; timers fire when the test fires them. The database is a real
// MariaDB (a private schema); what the external systems are is up to the test.

#include "actors/registry.hpp"
#include "runtime/services.hpp"
#include "tests/support/test_db.hpp"

#include <gtest/gtest.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>

namespace changeflow::actors::testing {

inline caf::actor_system_config& testing_config(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  return cfg;
}

/// `overrides` merged over the simulator's credentials.
inline std::shared_ptr<const config::snapshot> snapshot_of(const nlohmann::json& overrides) {
  nlohmann::json doc = {
      {"gitlab", {{"author_token", "author-token"}, {"approver_tokens", {"approver-1-token", "approver-2-token"}}}}};
  doc.merge_patch(overrides);
  auto r = config::load_from_json(doc, [](const std::string&) { return std::optional<std::string>(); });
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors.front());
  return r.snap;
}

class in_process_actors : public ::testing::Test {
 protected:
  explicit in_process_actors(const nlohmann::json& config)
      : system_(testing_config(cfg_)),
        sched_(dynamic_cast<caf::scheduler::test_coordinator&>(system_.scheduler())),
        config_(snapshot_of(config)),
        db_pool_("db", 0, 64, nullptr),
        external_pool_("external", 0, 64, nullptr),
        db_ctx_(db_.settings()),
        setup_db_(db_.settings()) {
    auto endpoints = clients::endpoints_from(*config_.current());
    EXPECT_TRUE(endpoints.ok());
    ext_ctx_ =
        std::make_unique<clients::external_context>(std::make_shared<clients::external_shared>(),
                                                    endpoints.ok() ? endpoints.value() : clients::external_endpoints{},
                                                    clients::call_settings_from(*config_.current()));
    now_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
    svc_.system = &system_;
    svc_.config = &config_;
    svc_.db = &db_pool_;
    svc_.external = &external_pool_;
    svc_.metrics = &metrics_;
    svc_.actors = &registry_;
    svc_.instance_id = "test-instance";  // the owner persistence::test::new_op writes
    svc_.now_ms = [this] { return now_ms_; };
  }

  ~in_process_actors() override {
    // Nothing queued may answer after the actor system is gone: dropped jobs answer now, and the
    // actors are told to stop.
    while (external_pool_.drop_oldest() || db_pool_.drop_oldest()) {
    }
    for (const auto& a : spawned_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched_.run();
  }

  /// Runs every message the actors have, without running any blocking job.
  void run_messages() { sched_.run(); }
  std::size_t queued_db() const { return db_pool_.stats().queued; }
  std::size_t queued_external() const { return external_pool_.stats().queued; }
  /// Runs the queued database jobs, then the messages their answers caused.
  void run_db() {
    db_pool_.run_queued(db_ctx_);
    run_messages();
  }
  /// Runs the queued external calls, then the messages their answers caused.
  void run_external() {
    external_pool_.run_queued(*ext_ctx_);
    run_messages();
  }
  /// Runs messages, database jobs and external calls until nothing is left (timers do not fire).
  void settle() {
    for (int i = 0; i < 200; ++i) {
      run_messages();
      if (db_pool_.run_queued(db_ctx_) + external_pool_.run_queued(*ext_ctx_) == 0 && !sched_.has_job()) return;
    }
    FAIL() << "the actors did not settle";
  }
  /// Fires the earliest pending timer (as if its time had come) and runs the messages it caused.
  bool fire_next_timer() {
    bool fired = sched_.trigger_timeout();
    run_messages();
    return fired;
  }
  /// Actors to stop when the test ends.
  void track(caf::actor a) { spawned_.push_back(std::move(a)); }

  changeflow::testing::test_database db_;
  caf::actor_system_config cfg_;
  caf::actor_system system_;
  caf::scheduler::test_coordinator& sched_;
  config::store config_;
  persistence::db_pool db_pool_;
  runtime::external_pool external_pool_;
  persistence::db_context db_ctx_;  // the actors' database jobs run on this one
  std::unique_ptr<clients::external_context> ext_ctx_;
  metrics::registry metrics_;
  registry registry_;
  runtime::services svc_;
  std::int64_t now_ms_ = 0;
  persistence::db_context setup_db_;  // the test's own reads and writes (setup, checks)
  std::vector<caf::actor> spawned_;
};

}  // namespace changeflow::actors::testing
