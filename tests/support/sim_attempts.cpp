#include "tests/support/sim_attempts.hpp"

#include "tests/support/flow_env.hpp"

namespace changeflow::testing {

using nlohmann::json;

namespace {

std::uint64_t sum(const json& j) {
  if (j.is_number_unsigned() || j.is_number_integer()) return j.get<std::uint64_t>();
  std::uint64_t n = 0;
  if (j.is_object()) {
    for (const auto& [_, v] : j.items()) n += sum(v);
  }
  return n;
}

const json& section(const json& stats, const std::string& kind) {
  static const json empty = json::object();
  if (!stats.is_object() || !stats.contains("attempts") || !stats["attempts"].contains(kind)) return empty;
  return stats["attempts"][kind];
}

}  // namespace

json sim_stats(flow_env& env) {
  auto j = json::parse(env.sim_call("GET", "/_sim/stats").body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

std::string repeated_side_effects(const json& stats) {
  std::string out;
  if (!stats.is_object() || !stats.contains("attempts"))
    return "the sim reported no attempts (is it the current build?)\n";
  for (const auto& [mr, n] : section(stats, "merge_after_merged").items()) {
    out += "merge requested " + std::to_string(sum(n)) + " time(s) after " + mr + " was merged\n";
  }
  for (const auto& [mr, users] : section(stats, "approve_after_approved").items()) {
    for (const auto& [user, n] : users.items()) {
      out += "user " + user + " approved " + mr + " again " + std::to_string(sum(n)) + " time(s)\n";
    }
  }
  for (const auto& [branch, n] : section(stats, "create_mr_while_open").items()) {
    out += "MR created " + std::to_string(sum(n)) + " time(s) for " + branch + " while it had an open MR\n";
  }
  return out;
}

std::uint64_t attempts(const json& stats, const std::string& kind, const std::string& key) {
  const auto& s = section(stats, kind);
  return s.contains(key) ? sum(s[key]) : 0;
}

std::uint64_t total_attempts(const json& stats, const std::string& kind) {
  return sum(section(stats, kind));
}

}  // namespace changeflow::testing
