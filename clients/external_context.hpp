#pragma once
// What one thread of the external-call pool owns: an HTTP client (its keep-alive sockets) and the
// clients built on it. Breakers and the check-items cache are shared by all threads through
// `external_shared`. A job refreshes the hot settings from the snapshot it took, then calls:
//
//   pool.try_submit([snap, reply](clients::external_context& ctx) {
//     ctx.refresh(*snap);
//     auto mr = ctx.gitlab.get_mr(ctx.endpoints.author_token, iid);
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

/// Restart-only addresses and credentials.
struct external_endpoints {
  url_parts gitlab_api;
  std::string project;
  std::string author_token;
  std::vector<reviewer> approvers;  // gitlab.approver_tokens paired with gitlab.approver_user_ids
  url_parts approval;
  url_parts permission;
};
/// Fails with invalid_argument naming the key when a URL is unparsable or the approver lists differ in length.
result<external_endpoints> endpoints_from(const config::snapshot& snap);

struct external_context {
  external_context(std::shared_ptr<external_shared> shared, external_endpoints endpoints, call_settings settings);
  external_context(const external_context&) = delete;
  external_context& operator=(const external_context&) = delete;

  /// Re-reads the hot settings (timeouts, breaker thresholds).
  void refresh(const config::snapshot& snap);

  std::shared_ptr<external_shared> shared;
  external_endpoints endpoints;
  call_settings settings;
  http_client http;
  gitlab_client gitlab;
  approval_client approval;
  permission_client permission;
};

/// Factory for worker_pool<external_context>: each thread builds its own context.
std::function<std::unique_ptr<external_context>()> external_context_factory(std::shared_ptr<external_shared> shared,
                                                                            external_endpoints endpoints,
                                                                            call_settings settings);

}  // namespace changeflow::clients
