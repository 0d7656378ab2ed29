#pragma once
// Pure parsing of the ops API's request bodies and filters (http/handlers/ops.cpp): no I/O, no
// actors, never throws. Kept apart from ops.cpp so the fuzz targets (fuzz/) exercise exactly the
// code the handlers run without compiling the CAF-heavy handler translation unit.

#include "persistence/ops_repo.hpp"
#include "workflow/status.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace changeflow::http {

/// At most `max_bytes` bytes of `s`, cut on a UTF-8 character boundary: a cut inside a multi-byte
/// character would store invalid UTF-8 (the database refuses it, json::dump throws on it). The
/// handlers used substr(0, 200) until fuzz_ops_actions found it (regression-reason-cut-inside-utf8).
inline std::string truncate_utf8(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  std::size_t end = max_bytes;
  // Step back over continuation bytes (10xxxxxx) to the start of the character being cut.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return std::string(s.substr(0, end));
}

/// A step given by name ("MERGE_PENDING") or numeric code.
inline std::optional<workflow::step> parse_step_param(const std::string& v) {
  if (auto s = workflow::parse_step(v)) return s;
  try {
    std::size_t used = 0;
    int code = std::stoi(v, &used);
    if (used == v.size()) return workflow::step_from_code(code);
  } catch (...) {
  }
  return std::nullopt;
}

/// Filter from query parameters (or from a bulk body's "filter" object, passed as a request whose
/// query was built from it). Error text when a value is invalid.
inline std::optional<persistence::ops_operation_filter> parse_ops_filter(const nlohmann::json& q, std::string& error) {
  persistence::ops_operation_filter f;
  if (!q.is_object()) {
    error = "'filter' must be an object";
    return std::nullopt;
  }
  auto text = [&](const char* name) -> std::string {
    auto it = q.find(name);
    if (it == q.end()) return {};
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_integer()) return std::to_string(it->get<long long>());
    return {};
  };
  if (auto v = text("phase"); !v.empty()) {
    f.phase = workflow::parse_phase(v);
    if (!f.phase) {
      error = "unknown phase '" + v + "'";
      return std::nullopt;
    }
  }
  if (auto v = text("step"); !v.empty()) {
    f.step = parse_step_param(v);
    if (!f.step) {
      error = "unknown step '" + v + "' (use a step name or code)";
      return std::nullopt;
    }
  }
  f.flow = text("flow");
  f.owner = text("owner");
  f.subject = text("subject");
  f.target = text("target");
  f.search = text("q");
  f.after = text("after");
  try {
    if (auto v = text("older_than_s"); !v.empty()) f.older_than_s = std::max(0, std::stoi(v));
    if (auto v = text("limit"); !v.empty()) f.limit = std::clamp(std::stoi(v), 1, 500);
  } catch (...) {
    error = "'older_than_s' and 'limit' must be numbers";
    return std::nullopt;
  }
  if (auto v = text("active"); v == "true" || v == "1") f.only_nonterminal = true;
  return f;
}

/// Longest stored operator reason, in bytes.
inline constexpr std::size_t max_ops_reason_bytes = 200;

/// Body of POST /api/v1/ops/operations/{id}/{action}: {"reason"?, "expectedVersion"?, ...}. An
/// empty body is an empty object. `body` is the parsed object (the handler keeps it as audit params).
struct ops_action_body {
  nlohmann::json body = nlohmann::json::object();
  std::string reason;  // at most max_ops_reason_bytes, valid UTF-8
  std::optional<std::int64_t> expected_version;
};
/// The error is the client's message (a 400).
inline std::variant<ops_action_body, std::string> parse_ops_action_body(const std::string& text, bool reason_required) {
  ops_action_body out;
  if (!text.empty()) {
    out.body = nlohmann::json::parse(text, nullptr, false);
    if (out.body.is_discarded() || !out.body.is_object()) return std::string("The body must be a JSON object");
  }
  const auto& body = out.body;
  if (auto it = body.find("reason"); it != body.end()) {
    if (!it->is_string()) return std::string("'reason' must be a string");
    out.reason = truncate_utf8(it->get_ref<const std::string&>(), max_ops_reason_bytes);
  }
  if (reason_required && out.reason.empty()) return std::string("A 'reason' is required to force a failure");
  if (auto it = body.find("expectedVersion"); it != body.end()) {
    if (!it->is_number_integer()) return std::string("'expectedVersion' must be an integer");
    out.expected_version = it->get<std::int64_t>();
  }
  return out;
}

/// Body of POST /api/v1/ops/bulk/{action}: {"filter": {...non-empty...}, "dryRun"?, "reason"?}.
struct ops_bulk_body {
  nlohmann::json body = nlohmann::json::object();
  persistence::ops_operation_filter filter;
  bool dry_run = true;  // only an explicit JSON false acts
  std::string reason;   // at most max_ops_reason_bytes, valid UTF-8
};
inline std::variant<ops_bulk_body, std::string> parse_ops_bulk_body(const std::string& text, bool reason_required) {
  ops_bulk_body out;
  out.body = nlohmann::json::parse(text.empty() ? std::string("{}") : text, nullptr, false);
  if (out.body.is_discarded() || !out.body.is_object()) return std::string("The body must be a JSON object");
  const auto& body = out.body;
  nlohmann::json filter_json = nlohmann::json::object();
  if (auto it = body.find("filter"); it != body.end()) filter_json = *it;
  if (!filter_json.is_object()) return std::string("'filter' must be an object");
  // A bulk action without any narrowing filter would act on everything: refuse it.
  if (filter_json.empty()) return std::string("A bulk action needs a non-empty 'filter'");
  std::string error;
  auto f = parse_ops_filter(filter_json, error);
  if (!f) return error;
  out.filter = std::move(*f);
  auto dry = body.find("dryRun");
  out.dry_run = !(dry != body.end() && dry->is_boolean() && !dry->get<bool>());
  if (auto it = body.find("reason"); it != body.end() && it->is_string()) {
    out.reason = truncate_utf8(it->get_ref<const std::string&>(), max_ops_reason_bytes);
  }
  if (reason_required && out.reason.empty() && !out.dry_run)
    return std::string("A 'reason' is required to force failures");
  return out;
}

}  // namespace changeflow::http
