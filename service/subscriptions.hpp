#pragma once
// Notification subscriptions: creating one (id and secret) and deleting one (its undelivered events
// are given up in the same transaction). Who may do either is the HTTP layer's decision
// (http/handlers/subscriptions.cpp, with middleware/ownership.hpp): it needs the caller's grants.

#include "persistence/notification_repo.hpp"
#include "persistence/session.hpp"

#include <optional>
#include <string>

namespace changeflow::service {

struct subscribe_request {
  std::optional<std::string> subject;
  std::optional<std::string> operation_id;
  std::string url;  // already syntax-checked (dto::url_problem)
  std::optional<std::string> secret;
  std::string owner;
};

enum class subscribe_status {
  created,
  unsupported_url,  // a URL this service cannot send to (a scheme other than http and https)
  failed,           // the database write failed (`error`)
};

struct subscribe_result {
  subscribe_status status = subscribe_status::failed;
  persistence::subscription_row subscription;
  /// The secret in force: the client's, or the generated one. Answered once, never listed.
  std::string secret;
  std::string message;  // for unsupported_url
  persistence::db_error error;
};

subscribe_result subscribe(persistence::session db, const subscribe_request& r);

/// Deletes the subscription; value: how many undelivered events were given up (not_found when it
/// does not exist).
persistence::db_result<std::int64_t> unsubscribe(persistence::session db, const std::string& subscription_id);

}  // namespace changeflow::service
