#pragma once
// Pure parsing and validation of the callback bodies (http/handlers/callbacks.cpp): no I/O, never
// throws. Kept apart from the handlers so the fuzz targets (fuzz/fuzz_callbacks) exercise exactly
// the code the handlers run without compiling the CAF/database translation unit.

#include "base/ids.hpp"
#include "persistence/callback_repo.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace changeflow::http {

/// A 400 message for the sender.
struct callback_body_error {
  std::string message;
};

/// POST /api/v1/callbacks/approval: {"callbackId": 1-128 chars, "operationId": UUID,
/// "result": APPROVED|REJECTED|WITHDRAWN}.
struct approval_callback_body {
  std::string callback_id;
  std::string operation_id;
  std::string result;  // as sent, for the log
  persistence::approval_result decision = persistence::approval_result::APPROVED;
};

inline std::variant<approval_callback_body, callback_body_error> parse_approval_callback_body(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return callback_body_error{"Body must be a JSON object"};
  auto text = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  approval_callback_body out;
  out.callback_id = text("callbackId");
  out.operation_id = text("operationId");
  out.result = text("result");
  if (out.callback_id.empty() || out.callback_id.size() > 128) {
    return callback_body_error{"'callbackId' is required (1-128 characters)"};
  }
  if (!ids::is_uuid(out.operation_id)) return callback_body_error{"'operationId' must be a UUID"};
  if (out.result == "APPROVED") {
    out.decision = persistence::approval_result::APPROVED;
  } else if (out.result == "REJECTED") {
    out.decision = persistence::approval_result::REJECTED;
  } else if (out.result == "WITHDRAWN") {
    out.decision = persistence::approval_result::WITHDRAWN;
  } else {
    return callback_body_error{"'result' must be APPROVED, REJECTED or WITHDRAWN"};
  }
  return out;
}

/// POST /api/v1/callbacks/deploy: {"deliveryId" (or the Idempotency-Key header), "mrIid" > 0,
/// "project"?, "pipelineId"?, "status", "operationIds"?: [UUID...]}.
struct deploy_callback_body {
  persistence::deploy_callback_in cb;
  std::vector<std::string> operation_ids;
  std::string payload;  // the body re-serialized for the ledger (always valid UTF-8)
};

inline std::variant<deploy_callback_body, callback_body_error> parse_deploy_callback_body(
    const std::string& body, std::optional<std::string_view> idempotency_key) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return callback_body_error{"Body must be a JSON object"};
  deploy_callback_body out;
  auto& cb = out.cb;
  auto find = [&](const char* k) -> const nlohmann::json* {
    auto it = j.find(k);
    return it == j.end() ? nullptr : &*it;
  };
  auto text = [&](const char* k) {
    auto* v = find(k);
    return v && v->is_string() ? v->get<std::string>() : std::string();
  };
  cb.delivery_id = text("deliveryId");
  if (cb.delivery_id.empty() && idempotency_key) {
    // A header carries raw bytes (Beast accepts obs-text): only printable ASCII may become the
    // ledger key, or the utf8mb4 insert fails and the sender retries a 500 forever (found by
    // fuzz_callbacks, regression-deploy-idempotency-key-invalid-utf8).
    for (unsigned char c : *idempotency_key) {
      if (c <= 0x20 || c >= 0x7f) return callback_body_error{"'Idempotency-Key' must be printable ASCII"};
    }
    cb.delivery_id = std::string(*idempotency_key);
  }
  if (cb.delivery_id.empty() || cb.delivery_id.size() > 128) {
    return callback_body_error{"'deliveryId' is required (1-128 characters)"};
  }
  auto* mr = find("mrIid");
  if (!mr || !mr->is_number_integer() || mr->get<std::int64_t>() <= 0) {
    return callback_body_error{"'mrIid' must be a positive integer"};
  }
  cb.mr_iid = mr->get<std::int64_t>();
  cb.project = text("project");
  if (cb.project.size() > 255) return callback_body_error{"'project' is too long"};
  if (auto* p = find("pipelineId"); p && p->is_number_integer()) cb.pipeline_id = p->get<std::int64_t>();
  cb.status = text("status");
  if (cb.status.empty() || cb.status.size() > 32) return callback_body_error{"'status' is required (1-32 characters)"};
  if (auto* list = find("operationIds"); list && list->is_array()) {
    for (const auto& id : *list) {
      if (!id.is_string() || !ids::is_uuid(id.get<std::string>())) {
        return callback_body_error{"'operationIds' must be an array of UUIDs"};
      }
      out.operation_ids.push_back(id.get<std::string>());
    }
    cb.operation_ids_json = list->dump();
  }
  out.payload = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return out;
}

}  // namespace changeflow::http
