#pragma once
// The effectful shell of the workflow's external calls: maps one call_request onto the clients and
// reduces the result to a call_reply the pure core understands. Runs on a thread of the external
// worker pool (blocking I/O with timeouts), never on an actor thread.

#include "clients/external_context.hpp"
#include "config/snapshot.hpp"
#include "messages/external_call.hpp"

#include <optional>
#include <string>
#include <vector>

namespace changeflow::effects {

/// What a call needs to know about its operation besides the request itself.
struct call_context {
  std::string operation_id;
  std::string subject_id;
  std::string title;
  std::string payload_json;  // {"files":[{"path","content","action"?}], ...}
  bool legacy_order = false;
  std::optional<std::int64_t> mr_iid;
  std::string applicant;      // who the approval system is told asked for the change
  std::string repository;     // GitLab project every GitLab call of the change goes to
  std::string target_branch;  // branch its MR merges into
  // What the change's commit was applied to, when this process made it (call_reply::own_commit; in
  // the actor's memory only, none after a restart).
  messages::commit_base own_commit;
};

messages::call_reply run_call(clients::external_context& ctx, const config::snapshot& snap,
                              const messages::call_request& req, const call_context& op);

/// Source branch of an operation's MR.
std::string branch_for(const std::string& operation_id);
/// Line in the MR description that names an operation (the deploy pipeline reports it back).
std::string operation_marker(const std::string& operation_id);

}  // namespace changeflow::effects
