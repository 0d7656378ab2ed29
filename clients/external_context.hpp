#pragma once
// What one thread of the external-call pool owns: an HTTP client (its keep-alive sockets) and the
// clients built on it. Breakers and the check-items cache are shared by all threads through
// `external_shared`. A job refreshes the hot settings from the snapshot it took, then calls:
//
//   pool.try_submit([snap, project, reply](clients::external_context& ctx) {
//     ctx.refresh(*snap);
//     auto repo = ctx.repository(*snap, project);
//     auto mr = repo.gitlab.get_mr(repo.author_token, iid);
//     reply(std::move(mr));
//   });

#include "clients/approval_client.hpp"
#include "clients/approver.hpp"
#include "clients/circuit_breaker.hpp"
#include "clients/gitlab_client.hpp"
#include "clients/permission_client.hpp"

#include <functional>
#include <memory>

namespace changeflow::config {
class snapshot;
}

namespace changeflow::clients {

struct external_shared {
  circuit_breaker gitlab{"gitlab"};
  circuit_breaker approval{"approval"};
  circuit_breaker permission{"permission"};
  check_items_cache check_items;
};

/// Restart-only addresses. The repositories and their tokens are hot: a call reads them from the
/// snapshot it runs with (external_context::repository).
struct external_endpoints {
  url_parts gitlab_api;
  url_parts approval;
  url_parts permission;
  std::string ca_file;  // external.ca_file: trusted for https calls besides the system CAs
};
/// Fails with invalid_argument naming the key when a URL is unparsable, gitlab.project is missing or
/// the approver lists differ in length.
result<external_endpoints> endpoints_from(const config::snapshot& snap);

/// What the GitLab calls of one repository use: a client bound to its project and its tokens.
struct repository_access {
  gitlab_client gitlab;
  std::string author_token;
  std::vector<reviewer> approvers;
  std::string default_branch;  // gitlab.target_branch: for rows that never named a branch

  /// The branch a change or batch merges into: the one it names, else gitlab.target_branch.
  std::string target_branch(const std::string& named) const { return named.empty() ? default_branch : named; }
};

struct external_context {
  external_context(std::shared_ptr<external_shared> shared, external_endpoints endpoints, call_settings settings);
  external_context(const external_context&) = delete;
  external_context& operator=(const external_context&) = delete;

  /// Re-reads the hot settings (timeouts, breaker thresholds).
  void refresh(const config::snapshot& snap);

  /// A GitLab client for `project` (cheap: it refers to this context's HTTP client and settings).
  gitlab_client gitlab_for(const std::string& project);
  /// The repository `project` as `snap` configures it: its own tokens or the global ones. A project
  /// no longer configured (removed while changes were in flight) keeps its changes going with the
  /// global gitlab.* tokens; "" (never written since migration 7) is gitlab.project.
  repository_access repository(const config::snapshot& snap, const std::string& project);

  std::shared_ptr<external_shared> shared;
  external_endpoints endpoints;
  call_settings settings;
  http_client http;
  approval_client approval;
  permission_client permission;
};

/// Factory for worker_pool<external_context>: each thread builds its own context.
std::function<std::unique_ptr<external_context>()> external_context_factory(std::shared_ptr<external_shared> shared,
                                                                            external_endpoints endpoints,
                                                                            call_settings settings);

}  // namespace changeflow::clients
