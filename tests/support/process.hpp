#pragma once
// Child processes for end-to-end tests: changeflowd, changeflow-sim, a private mariadbd.
// Every child is stopped by its pid when the handle is destroyed.

#include <nlohmann/json.hpp>

#include <sys/types.h>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::testing {

class child_process {
 public:
  child_process() = default;
  /// Starts `argv[0]` with the given arguments; stdout and stderr go to `log_path`.
  child_process(std::vector<std::string> argv, std::string log_path,
                std::vector<std::pair<std::string, std::string>> extra_env = {});
  ~child_process();
  child_process(child_process&& o) noexcept;
  child_process& operator=(child_process&& o) noexcept;

  pid_t pid() const { return pid_; }
  bool running();
  /// Sends `sig`, then waits up to `timeout` for the exit; returns the exit status (or -1).
  int stop(int sig, std::chrono::milliseconds timeout);
  /// Waits up to `timeout` for the child to exit on its own; its exit status (128 + signal when
  /// killed), or nullopt while it still runs.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  /// SIGKILL and reap.
  void kill_now();
  const std::string& log_path() const { return log_path_; }
  std::string log_contents() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

/// Path of a built executable (CHANGEFLOW_BINARY_DIR/app/...).
std::string binary_path(const std::string& name);
/// The source tree (CHANGEFLOW_SOURCE_DIR, which ctest sets; "." without it), for its scripts and files.
std::string source_dir();
/// A fresh directory under /tmp for one test's files.
std::string make_temp_dir(const std::string& prefix);
/// Polls `predicate` every `every` (10 ms) until it holds or `timeout` passes; returns its last value.
bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout,
                std::chrono::milliseconds every = std::chrono::milliseconds(10));

/// Deep-merges `over` into `base` (objects merge key by key; everything else replaces).
void merge_json(nlohmann::json& base, const nlohmann::json& over);

/// A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range (so no
/// outgoing connection takes it before the server binds it).
unsigned short free_port();
/// Whether `port` on 127.0.0.1 can be bound right now.
bool port_free(int port);
/// The first port of the kernel's ephemeral range (ip_local_port_range; 32768 when unreadable).
int ephemeral_port_low();

/// What changeflowd has no default for, set for tests: the simulator's own callback secrets and
/// GitLab tokens (sim/simulator.hpp) and a test-only HS256 secret. Merge test configs over it.
nlohmann::json test_secrets();
inline constexpr const char* test_jwt_secret = "test-jwt-secret";
inline constexpr const char* sim_approval_secret = "demo-approval-secret";
inline constexpr const char* sim_deploy_secret = "demo-deploy-secret";

/// changeflow-sim as a child process.
class sim_process {
 public:
  sim_process(const std::string& dir, std::vector<std::string> extra_args = {});
  unsigned short port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  child_process& process() { return proc_; }

 private:
  child_process proc_;
  unsigned short port_ = 0;
};

/// changeflowd with a config file written from `config` (merged over test defaults).
class service_process {
 public:
  service_process(const nlohmann::json& config, const std::string& dir, const std::string& name = "changeflowd");
  unsigned short port() const { return port_; }
  child_process& process() { return proc_; }
  const std::string& config_path() const { return config_path_; }
  /// Rewrites the config file (for hot-reload tests).
  void rewrite_config(const nlohmann::json& config);

 private:
  child_process proc_;
  std::string config_path_;
  unsigned short port_ = 0;
};

}  // namespace changeflow::testing
