#include "tests/support/flow_env.hpp"

#include <stdexcept>
#include <string_view>

namespace changeflow::testing {

flow_env::flow_env(const nlohmann::json& config, std::vector<std::string> sim_args) : db_(false) {
  dir_ = make_temp_dir("cf-flow");
  port_ = free_port();
  std::string base = "http://127.0.0.1:" + std::to_string(port_);
  std::vector<std::string> args = {"--deploy-callback-url",  base + "/api/v1/callbacks/deploy",
                                   "--callback-delay-ms",    "30",
                                   "--pipeline-duration-ms", "60",
                                   "--rebase-duration-ms",   "30"};
  // "{service}" in a sim argument is this service's base URL (webhook and callback URLs).
  for (auto& a : sim_args) {
    for (auto pos = a.find("{service}"); pos != std::string::npos; pos = a.find("{service}")) a.replace(pos, 9, base);
  }
  args.insert(args.end(), sim_args.begin(), sim_args.end());
  sim_ = std::make_unique<sim_process>(dir_, args);
  const auto& s = db_.settings();
  config_ = flow_config(sim_->base_url(), port_);
  merge_json(
      config_,
      {{"db", {{"host", s.host}, {"port", s.port}, {"user", s.user}, {"password", s.password}, {"name", s.database}}}});
  merge_json(config_, config);
  service_ = std::make_unique<service_process>(config_, dir_);
}

void flow_env::restart_service(const nlohmann::json& extra_config) {
  service_.reset();
  merge_json(config_, extra_config);
  service_ = std::make_unique<service_process>(config_, dir_);
}

void flow_env::kill_service() {
  service_->process().kill_now();
}

http_result flow_env::submit(const std::string& title, const std::string& subject, const std::string& target,
                             const std::string& operation_id) {
  nlohmann::json body = {{"subject", subject},
                         {"target", target},
                         {"title", title},
                         {"files", {{{"path", "config/" + target + ".yaml"}, {"content", "value: " + title + "\n"}}}}};
  if (!operation_id.empty()) body["operationId"] = operation_id;
  return http_call("127.0.0.1", port_, "POST", "/api/v1/changes", body.dump());
}

nlohmann::json flow_env::get_change(const std::string& operation_id) {
  auto r = http_call("127.0.0.1", port_, "GET", "/api/v1/changes/" + operation_id + "?include=timeline");
  if (r.status != 200) return nlohmann::json::object();
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j["data"];
}

nlohmann::json flow_env::wait_for_phase(const std::string& operation_id, const std::string& phase,
                                        std::chrono::milliseconds timeout) {
  nlohmann::json last;
  wait_until(
      [&] {
        last = get_change(operation_id);
        return last.contains("phase") && last["phase"] == phase;
      },
      timeout);
  return last;
}

nlohmann::json flow_env::wait_for_step(const std::string& operation_id, const std::string& step,
                                       std::chrono::milliseconds timeout) {
  nlohmann::json last;
  wait_until(
      [&] {
        last = get_change(operation_id);
        return last.contains("step") && last["step"]["name"] == step;
      },
      timeout);
  return last;
}

void flow_env::add_fault(const nlohmann::json& rule) {
  auto r = sim_call("POST", "/_sim/faults", rule.dump());
  if (r.status != 200) throw std::runtime_error("sim refused fault: " + r.body);
}

http_result flow_env::sim_call(const std::string& method, const std::string& target, const std::string& body,
                               const std::vector<std::pair<std::string, std::string>>& headers) {
  return http_call("127.0.0.1", sim_->port(), method, target, body, headers);
}

nlohmann::json flow_config(const std::string& sim_base_url, unsigned short service_port) {
  const std::string base = "http://127.0.0.1:" + std::to_string(service_port);
  // The suites built on flow_env exercise the workflow, not who may use it: they submit and read
  // without a token (auth.required false, requester "anonymous") with user writes open. Suites
  // about identity and access (identity_test, http_policy_test) set these back explicitly.
  auto config = test_secrets();
  merge_json(
      config,
      {
          {"auth", {{"required", false}}},
          {"access", {{"mode", "OPEN"}}},
          {"http", {{"port", service_port}}},
          {"gitlab", {{"base_url", sim_base_url + "/api/v4"}}},
          {"approval",
           {{"base_url", sim_base_url},
            {"callback_url", base + "/api/v1/callbacks/approval"},
            {"backoff_base_ms", 10}}},
          {"permission", {{"base_url", sim_base_url}}},
          {"poll",
           {{"short_interval_ms", 40}, {"short_attempts", 20}, {"long_interval_ms", 200}, {"timeout_ms", 20000}}},
          {"external", {{"request_timeout_ms", 3000}}},
      });
  return config;
}

double flow_env::metric_sum(const std::string& name) {
  return changeflow::testing::metric_sum(port_, name);
}

double metric_sum(unsigned short port, const std::string& name) {
  auto r = http_call("127.0.0.1", port, "GET", "/metrics");
  if (r.status != 200) return -1;
  double sum = 0;
  std::size_t start = 0;
  while (start < r.body.size()) {
    auto end = r.body.find('\n', start);
    if (end == std::string::npos) end = r.body.size();
    std::string_view line(r.body.data() + start, end - start);
    start = end + 1;
    if (line.substr(0, name.size()) != name) continue;
    if (line.size() <= name.size() || (line[name.size()] != '{' && line[name.size()] != ' ')) continue;
    sum += std::stod(std::string(line.substr(line.rfind(' ') + 1)));
  }
  return sum;
}

std::vector<std::string> timeline_steps(const nlohmann::json& change) {
  std::vector<std::string> out;
  if (!change.contains("timeline")) return out;
  for (const auto& e : change["timeline"]) out.push_back(e["to"].get<std::string>());
  return out;
}

bool is_subsequence(const std::vector<std::string>& needle, const std::vector<std::string>& hay) {
  size_t i = 0;
  for (const auto& h : hay) {
    if (i < needle.size() && h == needle[i]) ++i;
  }
  return i == needle.size();
}

}  // namespace changeflow::testing
