#include "sim/faults.hpp"

#include <set>

namespace changeflow::sim {

using json = nlohmann::json;

std::optional<fault> parse_fault(const json& j, std::string& error) {
  static const std::set<std::string> kinds = {"status",
                                              "slow",
                                              "garbage",
                                              "lose_response",
                                              "approve_not_allowed",
                                              "check_items_change",
                                              "merge_needs_rebase",
                                              "merged_before_close",
                                              "rebase_conflict",
                                              "target_conflict",
                                              "pipeline_fail",
                                              "pipeline_hang",
                                              "head_moves",
                                              "approval_callback",
                                              "deploy_callback",
                                              "gitlab_webhook"};
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string()) {
    error = "a fault needs a string 'kind'";
    return std::nullopt;
  }
  fault f;
  f.kind = j["kind"].get<std::string>();
  if (!kinds.count(f.kind)) {
    error = "unknown fault kind '" + f.kind + "'";
    return std::nullopt;
  }
  try {
    f.endpoint = j.value("endpoint", "");
    f.match = j.value("match", "");
    f.remaining = j.value("count", -1);
    f.status = j.value("status", 503);
    if (j.contains("retry_after")) f.retry_after = j["retry_after"].get<int>();
    f.body = j.value("body", "");
    f.delay_ms = j.value("delay_ms", 0);
    f.user_id = j.value("user_id", std::int64_t{0});
    f.mode = j.value("mode", "");
    f.operation_id = j.value("operation_id", "");
    f.copies = j.value("copies", 2);
    f.concurrent = j.value("concurrent", false);
    f.gap_ms = j.value("gap_ms", 0);
  } catch (const std::exception& e) {
    error = std::string("bad fault field: ") + e.what();
    return std::nullopt;
  }
  if (f.remaining == 0) {
    error = "count 0 would never fire";
    return std::nullopt;
  }
  static const std::set<std::string> approval_modes = {"duplicate", "delay", "reorder", "old_operation", "drop"};
  static const std::set<std::string> deploy_modes = {"drop", "no_operation_ids", "failed", "duplicate"};
  static const std::set<std::string> webhook_modes = {"drop", "duplicate", "reorder", "unknown_project", "forged"};
  if ((f.kind == "approval_callback" && !approval_modes.count(f.mode)) ||
      (f.kind == "deploy_callback" && !deploy_modes.count(f.mode)) ||
      (f.kind == "gitlab_webhook" && !webhook_modes.count(f.mode))) {
    error = "unknown mode '" + f.mode + "' for " + f.kind;
    return std::nullopt;
  }
  if (f.copies < 2 || f.copies > 64 || f.gap_ms < 0) {
    error = "copies must be 2..64 and gap_ms >= 0";
    return std::nullopt;
  }
  return f;
}

json to_json(const fault& f) {
  json j = {{"kind", f.kind}, {"endpoint", f.endpoint}, {"match", f.match}, {"count", f.remaining}};
  if (f.kind == "status") j["status"] = f.status;
  if (f.retry_after) j["retry_after"] = *f.retry_after;
  if (f.delay_ms) j["delay_ms"] = f.delay_ms;
  if (f.user_id) j["user_id"] = f.user_id;
  if (!f.mode.empty()) j["mode"] = f.mode;
  if (f.mode == "duplicate") {
    j["copies"] = f.copies;
    j["concurrent"] = f.concurrent;
    if (f.gap_ms) j["gap_ms"] = f.gap_ms;
  }
  return j;
}

std::optional<fault> fault_set::take(const std::string& kind, const std::string& endpoint, const std::string& subject,
                                     std::int64_t user_id) {
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    if (it->kind != kind) continue;
    if (!it->endpoint.empty() && it->endpoint != endpoint) continue;
    if (!it->match.empty() && subject.find(it->match) == std::string::npos) continue;
    if (it->user_id != 0 && it->user_id != user_id) continue;
    fault copy = *it;
    if (it->remaining > 0 && --it->remaining == 0) rules_.erase(it);
    ++fired_[kind];
    return copy;
  }
  return std::nullopt;
}

json fault_set::describe() const {
  json out = json::array();
  for (const auto& f : rules_) out.push_back(to_json(f));
  return out;
}

}  // namespace changeflow::sim
