#pragma once
// Pure parsing of GitLab's own webhook payloads (http/handlers/gitlab_webhook.cpp): no I/O, never
// throws. The fields are GitLab's, as its webhook events documentation names them:
//
//   Pipeline Hook       {object_kind: "pipeline", project{path_with_namespace},
//                        object_attributes{id, sha, status, ...}, merge_request{iid, ...} | null}
//   Merge Request Hook  {object_kind: "merge_request", project{path_with_namespace},
//                        object_attributes{iid, action, state, merge_commit_sha, last_commit{id}}}
//   Deployment Hook     {object_kind: "deployment", project{path_with_namespace}, status,
//                        deployment_id, short_sha, commit_url, ...}
//
// The delivery id is the X-Gitlab-Event-UUID header (or Idempotency-Key, which GitLab keeps the
// same across retries of one event). Any other object_kind is parsed as `other` (answered IGNORED).

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace changeflow::http {

enum class gitlab_hook { pipeline, merge_request, deployment, other };

struct gitlab_hook_body {
  gitlab_hook kind = gitlab_hook::other;
  std::string object_kind;  // as sent
  std::string project;      // project.path_with_namespace; "" when absent (the parse then failed)
  std::string delivery_id;
  std::string error;  // non-empty: a 400 for the sender (after authentication)
  // pipeline
  std::int64_t pipeline_id = 0;
  std::string sha;                     // pipeline: object_attributes.sha; deployment: the deployed commit
  std::string status;                  // pipeline: object_attributes.status; deployment: status
  std::optional<std::int64_t> mr_iid;  // pipeline: merge_request.iid; merge request: object_attributes.iid
  // merge request
  std::string action;  // object_attributes.action: open, update, merge, close, ...
  std::string state;   // object_attributes.state: opened, merged, closed, ...
  std::string merge_commit_sha;
  std::string head_sha;  // object_attributes.last_commit.id
  // deployment
  std::int64_t deployment_id = 0;
  std::string payload;  // the body re-serialized for the ledger (always valid UTF-8)
};

namespace detail {
inline bool is_hex(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  }
  return true;
}
/// A delivery id header: printable ASCII only (it becomes a utf8mb4 ledger key), 1-128 characters.
inline bool printable_id(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (unsigned char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}
}  // namespace detail

inline gitlab_hook_body parse_gitlab_hook_body(const std::string& body, std::optional<std::string_view> event_uuid,
                                               std::optional<std::string_view> idempotency_key) {
  gitlab_hook_body out;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    out.error = "Body must be a JSON object";
    return out;
  }
  auto at = [](const nlohmann::json& o, const char* k) -> const nlohmann::json* {
    if (!o.is_object()) return nullptr;
    auto it = o.find(k);
    return it == o.end() ? nullptr : &*it;
  };
  auto text = [&](const nlohmann::json& o, const char* k) {
    auto* v = at(o, k);
    return v && v->is_string() ? v->get<std::string>() : std::string();
  };
  auto integer = [&](const nlohmann::json& o, const char* k) -> std::optional<std::int64_t> {
    auto* v = at(o, k);
    if (!v || !v->is_number_integer()) return std::nullopt;
    return v->get<std::int64_t>();
  };
  static const nlohmann::json none = nlohmann::json::object();
  const auto* project = at(j, "project");
  out.project = text(project ? *project : none, "path_with_namespace");
  if (out.project.empty() || out.project.size() > 255) {
    out.project.clear();
    out.error = "'project.path_with_namespace' is required (1-255 characters)";
    return out;
  }
  if (event_uuid && detail::printable_id(*event_uuid)) {
    out.delivery_id = std::string(*event_uuid);
  } else if (idempotency_key && detail::printable_id(*idempotency_key)) {
    out.delivery_id = std::string(*idempotency_key);
  } else {
    out.error = "'X-Gitlab-Event-UUID' (or 'Idempotency-Key') is required: 1-128 printable ASCII characters";
    return out;
  }
  out.object_kind = text(j, "object_kind");
  out.payload = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const auto* attrs_ptr = at(j, "object_attributes");
  const auto& attrs = attrs_ptr && attrs_ptr->is_object() ? *attrs_ptr : none;
  if (out.object_kind == "pipeline") {
    out.kind = gitlab_hook::pipeline;
    auto id = integer(attrs, "id");
    out.sha = text(attrs, "sha");
    out.status = text(attrs, "status");
    if (!id || *id <= 0) {
      out.error = "'object_attributes.id' must be a positive integer";
    } else if (!detail::is_hex(out.sha) || out.sha.size() > 64) {
      out.error = "'object_attributes.sha' must be a commit sha";
    } else if (out.status.empty() || out.status.size() > 32) {
      out.error = "'object_attributes.status' is required (1-32 characters)";
    } else {
      out.pipeline_id = *id;
      // merge_request is null for a branch pipeline: routed by its sha instead.
      if (const auto* mr = at(j, "merge_request"); mr && mr->is_object()) {
        auto iid = integer(*mr, "iid");
        if (!iid || *iid <= 0) {
          out.error = "'merge_request.iid' must be a positive integer";
        } else {
          out.mr_iid = iid;
        }
      }
    }
  } else if (out.object_kind == "merge_request") {
    out.kind = gitlab_hook::merge_request;
    auto iid = integer(attrs, "iid");
    out.action = text(attrs, "action");
    out.state = text(attrs, "state");
    out.merge_commit_sha = text(attrs, "merge_commit_sha");
    const auto* last = at(attrs, "last_commit");
    out.head_sha = text(last ? *last : none, "id");
    if (!iid || *iid <= 0) {
      out.error = "'object_attributes.iid' must be a positive integer";
    } else if (out.action.size() > 32 || out.state.size() > 32) {
      out.error = "'object_attributes.action' and 'state' must be at most 32 characters";
    } else if (!out.merge_commit_sha.empty() &&
               (!detail::is_hex(out.merge_commit_sha) || out.merge_commit_sha.size() > 64)) {
      out.error = "'object_attributes.merge_commit_sha' must be a commit sha";
    } else {
      out.mr_iid = iid;
    }
  } else if (out.object_kind == "deployment") {
    out.kind = gitlab_hook::deployment;
    out.status = text(j, "status");
    auto id = integer(j, "deployment_id");
    // The full sha is the last segment of commit_url (.../-/commit/<sha>); short_sha otherwise.
    auto url = text(j, "commit_url");
    auto slash = url.rfind('/');
    std::string from_url = slash == std::string::npos ? std::string() : url.substr(slash + 1);
    out.sha = detail::is_hex(from_url) && from_url.size() <= 64 ? from_url : text(j, "short_sha");
    if (out.status.empty() || out.status.size() > 32) {
      out.error = "'status' is required (1-32 characters)";
    } else if (!id || *id <= 0) {
      out.error = "'deployment_id' must be a positive integer";
    } else if (!detail::is_hex(out.sha) || out.sha.size() < 7 || out.sha.size() > 64) {
      out.error = "'commit_url' or 'short_sha' must name the deployed commit";
    } else {
      out.deployment_id = *id;
    }
  }
  return out;
}

}  // namespace changeflow::http
