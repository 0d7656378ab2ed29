#pragma once
// A complete environment for end-to-end tests: a fresh database, changeflow-sim, and changeflowd
// wired to each other over loopback, plus helpers to submit changes and wait for their outcome.

#include "tests/support/http_client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace changeflow::testing {

class flow_env {
 public:
  /// `sim_args` follow the defaults (a repeated option wins); "{service}" in one is replaced by
  /// changeflowd's base URL. `config` is merged over the test defaults: fast polls, sim URLs, test_secrets(), user writes
  /// open (access.mode OPEN) and anonymous use allowed (auth.required false).
  explicit flow_env(const nlohmann::json& config = nlohmann::json::object(), std::vector<std::string> sim_args = {});

  test_database& db() { return db_; }
  sim_process& sim() { return *sim_; }
  service_process& service() { return *service_; }
  unsigned short port() const { return port_; }
  const std::string& dir() const { return dir_; }

  /// Restarts changeflowd on the same port and database (after a crash or a config change).
  void restart_service(const nlohmann::json& extra_config = nlohmann::json::object());
  void kill_service();

  /// POST /api/v1/changes; returns the parsed response body (throws on transport errors).
  http_result submit(const std::string& title, const std::string& subject, const std::string& target,
                     const std::string& operation_id = {});
  /// GET /api/v1/changes/{id}?include=timeline: the change with its timeline (the tests judge it);
  /// an empty object when not 200.
  nlohmann::json get_change(const std::string& operation_id);
  /// Waits until the operation's phase is `phase`; returns the last body seen.
  nlohmann::json wait_for_phase(const std::string& operation_id, const std::string& phase,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60));
  /// Waits until the step name is `step`.
  nlohmann::json wait_for_step(const std::string& operation_id, const std::string& step,
                               std::chrono::milliseconds timeout = std::chrono::seconds(60));

  /// POST /_sim/faults with one rule.
  void add_fault(const nlohmann::json& rule);
  http_result sim_call(const std::string& method, const std::string& target, const std::string& body = {},
                       const std::vector<std::pair<std::string, std::string>>& headers = {});
  nlohmann::json config() const { return config_; }
  /// Sum of every sample of metric `name` (all label sets) on GET /metrics; -1 when unreadable.
  double metric_sum(const std::string& name);

 private:
  test_database db_;
  std::string dir_;
  unsigned short port_ = 0;
  std::unique_ptr<sim_process> sim_;
  std::unique_ptr<service_process> service_;
  nlohmann::json config_;
};

/// The test defaults of a changeflowd wired to a sim (everything but `db`): fast polls, the sim's
/// URLs, test_secrets(), user writes open and anonymous use allowed. flow_env merges its test
/// database and the suite's config over it.
nlohmann::json flow_config(const std::string& sim_base_url, unsigned short service_port);

/// Sum of every sample of metric `name` (all label sets) on GET /metrics of the service on `port`;
/// -1 when unreadable.
double metric_sum(unsigned short port, const std::string& name);

/// Step names of an operation's timeline, oldest first.
std::vector<std::string> timeline_steps(const nlohmann::json& change);
/// True when `needle` appears in `hay` in order (not necessarily adjacent).
bool is_subsequence(const std::vector<std::string>& needle, const std::vector<std::string>& hay);

}  // namespace changeflow::testing
