#pragma once
// changeflow-sim: one process serving the external systems changeflow talks to, in memory:
//   GitLab REST v4 subset      /api/v4/projects/:id/...   (status codes and bodies per gitlab-api.md)
//   approval system            /api/approvals             (+ signed result callbacks)
//   permission service         /api/permissions/check
//   CI + deploy pipeline       pipelines finish after pipeline_duration; a merge triggers the deploy callback
//   admin (loopback only)      /_sim/faults, /_sim/stats, /_sim/requests, /_sim/reset, /_sim/check_items,
//                              /_sim/permissions
// The contract is written down in docs/external-contracts.md. State lives under one mutex; timed
// behaviour (pipelines, rebases) is evaluated lazily on read, callbacks run on a scheduler thread.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace changeflow::sim {

struct sim_options {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  // 0 = any free port
  int threads = 2;
  std::uint64_t seed = 1;  // ids and shas derive from it: same seed + same requests = same answers
  std::string approval_secret = "demo-approval-secret";
  std::string deploy_secret = "demo-deploy-secret";
  std::string deploy_callback_url;                   // empty: no deploy callbacks
  std::chrono::milliseconds callback_delay{200};     // approval decision after submit
  std::chrono::milliseconds pipeline_duration{300};  // MR pipelines and the deploy pipeline
  std::chrono::milliseconds rebase_duration{100};
  std::chrono::milliseconds callback_timeout{2000};  // per delivery attempt
  int callback_attempts = 4;                         // deliveries per callback before giving up
  /// Every approval and deploy callback sent `callback_copies` times with the same id (a sender's
  /// redelivery), copy k `callback_copy_gap` * k after the first. Fault rules override it.
  int callback_copies = 1;
  std::chrono::milliseconds callback_copy_gap{0};
  /// Non-empty ("http://host:port"): every copy after the first goes to the same path on this base,
  /// as a load balancer would spread one sender's redeliveries over two instances.
  std::string callback_copy_base;
  /// Threads that send callbacks (each with its own connections; the copies of one delivery share
  /// one, in order). 0: the scheduler thread sends them itself, one at a time.
  int callback_lanes = 0;
  /// Reads of a new pipeline (GET MR, GET pipeline, MR pipelines) that still answer "running" even
  /// when its duration has passed: a pipeline seen running before it succeeds, at any speed.
  int pipeline_running_reads = 0;
  /// Every project's first MR number. A GitLab project never reuses one; a simulator started again
  /// against a database that holds an earlier simulator's MRs starts past them, as the same project
  /// would (the service finds a merge's changes and its deploy reports by the MR's number).
  std::int64_t first_mr_iid = 1;
  std::map<std::string, std::int64_t> tokens = {
      {"author-token", 1}, {"approver-1-token", 101}, {"approver-2-token", 102}};
  /// The GitLab projects and their branches. Empty: any project path exists, created with a `main`
  /// branch on first use. Set: only these exist (others answer 404 Project Not Found), each with
  /// its own branches, MRs and MR numbers.
  std::map<std::string, std::vector<std::string>> projects;
  /// GitLab's own webhooks: where to POST them, and each project's secret (X-Gitlab-Token). Only
  /// the projects listed here send Pipeline, Merge Request and Deployment Hooks.
  std::string webhook_url;
  std::map<std::string, std::string> webhook_secrets;
};

class simulator {
 public:
  explicit simulator(sim_options options);
  ~simulator();
  simulator(const simulator&) = delete;
  simulator& operator=(const simulator&) = delete;

  /// Binds and serves; throws std::runtime_error when the address cannot be bound.
  void start();
  void stop();
  std::uint16_t port() const;
  /// http://127.0.0.1:<port>
  std::string base_url() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Parses "author-token=1,approver-1-token=101"; empty map when malformed.
std::map<std::string, std::int64_t> parse_token_map(const std::string& spec);
/// Parses "config/changes=secret-a;team/payments=secret-b"; empty map when malformed.
std::map<std::string, std::string> parse_secret_map(const std::string& spec);
/// Parses "config/changes=main;team/payments=main,release"; empty map when malformed.
std::map<std::string, std::vector<std::string>> parse_project_map(const std::string& spec);

}  // namespace changeflow::sim
