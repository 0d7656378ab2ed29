#pragma once
// Who is asking, and what the permission service grants them: shared by the handlers of the user
// API that decide per stored row (changes, subscriptions). Pure ownership rules live in
// middleware/ownership.hpp; this is the effectful part (the chain's identity, the round trip).

#include "http/api.hpp"
#include "http/server/message.hpp"

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::http {

/// Who asks, as the middleware chain resolved it. nullopt only where auth.required is false and no
/// token was sent: the anonymous caller, who is served without per-caller checks. The switch is read
/// again here so a handler never serves an anonymous caller the chain would now refuse.
struct asking {
  std::optional<std::string> account;
  bool refused = false;  // anonymous although an identity is required: answer 401
};
asking who_asks(service_context& ctx, const http_server::request& req);

/// One permission round trip for `rules`; `then` gets the granted codes, or nullopt on any failure
/// (no service, pool full, timeout, error answer, a throw): failures grant nothing.
void ask_permissions(service_context& ctx, const std::string& account, std::vector<std::string> rules,
                     std::function<void(std::optional<std::set<std::string>>)> then);

/// 403 "Access denied" (the detail goes to the log only).
http_server::response access_denied(std::string_view detail);
/// 401 for an anonymous caller once auth.required was switched on under the request.
http_server::response authentication_required();

}  // namespace changeflow::http
