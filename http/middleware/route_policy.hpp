#pragma once
// What a route asks of the middleware chain, declared next to the route table:
//   {"/api/v1/changes", POST} -> route_policy{.bucket = "submit", .limit = &rate_limit_settings::submit,
//                                              .required_rules = {}, .requires_identity = true,
//                                              .business_metric = "submit", .idempotent_write =
//                                              true}
// A plain struct instead of annotations: the chain reads it before the body is parsed, so a
// malformed body can never pre-empt rate limiting or authorization with a 400.

#include "config/settings.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::http::middleware {

class route_meters;

/// One of the rate_limit.* limits (config::rate_limit_settings).
using limit_setting = std::optional<std::int64_t> config::rate_limit_settings::*;

struct route_policy {
  /// Rate-limit bucket name ("submit", "callbacks", "ops"); the limiter key is bucket + ":" +
  /// subject.
  std::string bucket;
  /// The setting holding the per-window limit (e.g. rate_limit.submit); null = not rate limited.
  /// Read on every request so hot reloads apply at once; missing, cleared or <= 0 -> no limiting.
  limit_setting limit = nullptr;
  /// Rule codes of which ANY grants access (one permission-service round trip); empty = no authz.
  std::vector<std::string> required_rules;
  /// True: auth.ops_rules, read on every request, REPLACES `required_rules` (the ops API).
  /// Cleared or empty list -> nobody is granted (fail closed).
  bool rules_from_config = false;
  /// True when the route needs a login identity even without rule codes (401 otherwise).
  bool requires_identity = false;
  /// True: auth.required, read on every request, also requires an identity when it is on (the user
  /// API); cleared or not a boolean -> required (fail closed). False -> only `requires_identity`
  /// counts.
  bool identity_required_by_config = false;
  /// Business activity name counted for this route only (an allowlist by construction); empty =
  /// none.
  std::string business_metric;
  /// True for write endpoints that carry an idempotency key (operationId); informational for
  /// handlers.
  bool idempotent_write = false;
  /// True for user WRITE routes governed by access.mode / access.window: when access is closed the
  /// chain answers 403 ACCESS_CLOSED after authorization (so 401/403 keep their meaning) and before
  /// any metric or handler.
  bool access_controlled = false;
  /// The route's request metrics, resolved once per label set (set by the API's route table; empty:
  /// the registry's general path).
  std::shared_ptr<route_meters> meters;
};

}  // namespace changeflow::http::middleware
