#include "tests/support/process.hpp"

#include "tests/support/http_client.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace changeflow::testing {

child_process::child_process(std::vector<std::string> argv, std::string log_path,
                             std::vector<std::pair<std::string, std::string>> extra_env)
    : log_path_(std::move(log_path)) {
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // Die with the test process so nothing outlives a crashed or timed-out test: the kernel sends
    // SIGKILL when the forking thread ends (children are started from the test's main thread). The
    // parent may have died between fork and prctl: then exit now.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    for (auto& [k, v] : extra_env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
}

child_process::~child_process() {
  if (pid_ > 0) stop(SIGTERM, std::chrono::milliseconds(5000));
}

child_process::child_process(child_process&& o) noexcept : pid_(o.pid_), log_path_(std::move(o.log_path_)) {
  o.pid_ = -1;
}

child_process& child_process::operator=(child_process&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0) stop(SIGTERM, std::chrono::milliseconds(5000));
    pid_ = o.pid_;
    log_path_ = std::move(o.log_path_);
    o.pid_ = -1;
  }
  return *this;
}

bool child_process::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int child_process::stop(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  if (auto code = wait_exit(timeout)) return *code;
  kill_now();
  return -1;
}

std::optional<int> child_process::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  std::optional<int> exit_status;
  auto reaped = [&] {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  };
  // The child's exit itself is waited for: a pidfd becomes readable when the process ends.
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  if (fd < 0) {
    wait_until(reaped, timeout);  // a kernel without pidfd_open: the exit is polled for
    return exit_status;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reaped()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left));  // readable at exit; EINTR or a timeout: check again
  }
  ::close(fd);
  return exit_status;
}

nlohmann::json test_secrets() {
  return {
      {"auth", {{"jwt_secret", test_jwt_secret}}},
      {"callbacks", {{"approval_secret", sim_approval_secret}, {"deploy_secret", sim_deploy_secret}}},
      {"gitlab", {{"author_token", "author-token"}, {"approver_tokens", {"approver-1-token", "approver-2-token"}}}}};
}

void child_process::kill_now() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string child_process::log_contents() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string binary_path(const std::string& name) {
  const char* dir = std::getenv("CHANGEFLOW_BINARY_DIR");
  if (!dir) throw std::runtime_error("CHANGEFLOW_BINARY_DIR not set (run through ctest)");
  return std::string(dir) + "/app/" + name;
}

std::string source_dir() {
  const char* dir = std::getenv("CHANGEFLOW_SOURCE_DIR");
  return dir ? dir : ".";
}

std::string make_temp_dir(const std::string& prefix) {
  // TMPDIR lets scripts/test give one run its own directory (the sanitizer run scans it for reports
  // of child processes afterwards).
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout,
                std::chrono::milliseconds every) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (predicate()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return predicate();
    std::this_thread::sleep_for(every);
  }
}

int ephemeral_port_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low && low > 0 ? low : 32768;
}

bool port_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

unsigned short free_port() {
  // Drawn below the kernel's ephemeral range: between this probe and the server's bind, any
  // outgoing connection on the machine may take an ephemeral port (seen: a changeflowd that could
  // not listen on its port while the cluster test opened connections). 10000-19999 is the cluster
  // test's range for its nodes.
  static std::mutex mutex;
  static std::mt19937 rng(std::random_device{}());
  const int low = 20000, high = std::max(low + 1000, ephemeral_port_low());
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int port = 0;
    {
      std::lock_guard lock(mutex);
      port = low + static_cast<int>(rng() % static_cast<unsigned>(high - low));
    }
    if (port_free(port)) return static_cast<unsigned short>(port);
  }
  throw std::runtime_error("no free port below the ephemeral range");
}

namespace {
bool read_port_file(const std::string& path, unsigned short& port) {
  std::ifstream in(path);
  int p = 0;
  if (in >> p && p > 0) {
    port = static_cast<unsigned short>(p);
    return true;
  }
  return false;
}
}  // namespace

sim_process::sim_process(const std::string& dir, std::vector<std::string> extra_args) {
  std::string port_file = dir + "/sim.port";
  std::filesystem::remove(port_file);
  std::vector<std::string> argv = {binary_path("changeflow-sim"), "--port", "0", "--port-file", port_file};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  proc_ = child_process(argv, dir + "/sim.log");
  if (!wait_until([&] { return read_port_file(port_file, port_); }, std::chrono::seconds(20))) {
    throw std::runtime_error("changeflow-sim did not start; log: " + proc_.log_contents());
  }
}

void merge_json(nlohmann::json& base, const nlohmann::json& over) {
  for (auto it = over.begin(); it != over.end(); ++it) {
    if (it.value().is_object() && base.contains(it.key()) && base[it.key()].is_object()) {
      merge_json(base[it.key()], it.value());
    } else {
      base[it.key()] = it.value();
    }
  }
}

service_process::service_process(const nlohmann::json& config, const std::string& dir, const std::string& name) {
  config_path_ = dir + "/" + name + ".json";
  rewrite_config(config);
  std::string port_file = dir + "/" + name + ".port";
  std::filesystem::remove(port_file);
  proc_ = child_process({binary_path("changeflowd"), "--config", config_path_, "--port-file", port_file},
                        dir + "/" + name + ".log");
  bool up = wait_until([&] { return read_port_file(port_file, port_); }, std::chrono::seconds(30));
  if (!up) throw std::runtime_error(name + " did not start; log: " + proc_.log_contents());
}

void service_process::rewrite_config(const nlohmann::json& config) {
  nlohmann::json full = {{"http", {{"port", 0}}}};
  merge_json(full, config);
  std::string tmp = config_path_ + ".tmp";
  std::ofstream(tmp) << full.dump(2);
  std::filesystem::rename(tmp, config_path_);
}

}  // namespace changeflow::testing
