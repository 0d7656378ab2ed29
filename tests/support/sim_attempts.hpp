#pragma once
// What the service attempted against changeflow-sim: the "attempts" of GET /_sim/stats count every
// mutating request the sim received, refused ones included. The sim refuses a repeated side effect
// (a second approve is a 401, a merge of a merged MR a 405), so its outcome counters ("merges",
// "approvals") can never exceed one whatever the service does; only the attempts can show a repeat.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace changeflow::testing {

class flow_env;

/// GET /_sim/stats, parsed; an empty object when the sim does not answer with JSON.
nlohmann::json sim_stats(flow_env& env);

/// The side effects the service repeated, one line each ("" when none):
///   - a merge request for an MR that was already merged,
///   - an approve by a user who had already approved that MR,
///   - an MR create for a source branch that already had an open MR.
std::string repeated_side_effects(const nlohmann::json& stats);

/// Requests of `kind` ("merge", "close", "create_mr", "approve", ...) counted under `key`
/// ("project!iid", "project:branch", requestId); "approve" is summed over users.
std::uint64_t attempts(const nlohmann::json& stats, const std::string& kind, const std::string& key);

/// Requests of `kind` under every key.
std::uint64_t total_attempts(const nlohmann::json& stats, const std::string& kind);

}  // namespace changeflow::testing
