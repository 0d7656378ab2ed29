#pragma once
// Wire shapes of notification subscriptions and of the ops view of deliveries, with their JSON
// conversion. The URL check is pure and table-tested (subscription_dto_test.cpp).

#include "http/dto/change_dto.hpp"
#include "persistence/notification_repo.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace changeflow::http::dto {

/// POST /api/v1/subscriptions: {subject?, operationId?, url, secret?}; at least one of subject and
/// operationId.
struct subscription_request {
  std::optional<std::string> subject;
  std::optional<std::string> operation_id;
  std::string url;
  std::optional<std::string> secret;  // absent: the server generates one and answers it once
};
std::variant<subscription_request, parse_error> parse_subscription(const std::string& body);

/// Why `url` cannot be a subscription's address, or nullopt when it can: absolute http or https,
/// a host (name, IPv4 or [IPv6]) and an optional port 1-65535, no credentials, no fragment, no
/// whitespace or control characters, at most 1024 characters.
std::optional<std::string> url_problem(std::string_view url);

/// Secrets a client chooses: 16-255 printable ASCII characters without spaces.
bool valid_secret(std::string_view secret);

nlohmann::json to_json(const persistence::subscription_row& s);
nlohmann::json to_json(const persistence::delivery_row& d);

}  // namespace changeflow::http::dto
