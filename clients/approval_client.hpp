#pragma once
// Client of our approval system (contract: docs/external-contracts.md).
//   submit:   POST /api/approvals -> 201 {approvalId} new, 200 {approvalId} same requestId again
//   withdraw: POST /api/approvals/{approvalId}/withdraw -> 200

#include "clients/guarded_call.hpp"
#include "clients/result.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace changeflow::clients {

struct approval_submission {
  std::string request_id;  // = operation_id; the approval system deduplicates on it
  std::string title;
  std::string applicant;
  std::string callback_url;
  nlohmann::json form = nlohmann::json::object();
  std::optional<std::int64_t> mr_id;  // legacy order: the MR exists before approval (ext.mrId)
};

struct submitted_approval {
  std::string approval_id;
  bool created = false;  // false: a repeat of an earlier submission (200), equally a success
};

class approval_client {
 public:
  approval_client(http_client& http, circuit_breaker& breaker, const call_settings& settings, url_parts base);

  result<submitted_approval> submit(const approval_submission& s);
  result<done> withdraw(const std::string& approval_id);

 private:
  http_client& http_;
  circuit_breaker& breaker_;
  const call_settings& settings_;
  url_parts base_;
};

/// The submit body, exposed so the simulator's tests and the contract doc agree with the client.
nlohmann::json to_json(const approval_submission& s);

}  // namespace changeflow::clients
