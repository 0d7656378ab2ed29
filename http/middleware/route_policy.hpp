#pragma once
// What a route asks of the middleware chain, declared next to the route table:
//   {"/api/v1/changes", POST} -> route_policy{.bucket = "submit", .limit_key = "rate_limit.submit",
//                                              .required_rules = {}, .requires_identity = true,
//                                              .business_metric = "submit", .idempotent_write =
//                                              true}
// A plain struct instead of annotations: the chain reads it before the body is parsed, so a
// malformed body can never pre-empt rate limiting or authorization with a 400.

#include <string>
#include <vector>

namespace changeflow::http::middleware {

struct route_policy {
  /// Rate-limit bucket name ("submit", "callbacks", "ops"); the limiter key is bucket + ":" +
  /// subject.
  std::string bucket;
  /// Config key holding the per-window limit (e.g. "rate_limit.submit"); empty = not rate limited.
  /// Read on every request so hot reloads apply at once; missing, cleared or <= 0 -> no limiting.
  std::string limit_key;
  /// Rule codes of which ANY grants access (one permission-service round trip); empty = no authz.
  std::vector<std::string> required_rules;
  /// Config key (list of strings) read on every request that REPLACES `required_rules` (the ops
  /// API uses "auth.ops_rules"). Cleared or empty list -> nobody is granted (fail closed).
  std::string required_rules_key;
  /// True when the route needs a login identity even without rule codes (401 otherwise).
  bool requires_identity = false;
  /// Optional bool config key read on every request that, when true, also requires an identity
  /// (the user API uses "auth.required"); cleared or not a boolean -> required (fail closed);
  /// an empty key name -> only `requires_identity` counts.
  std::string identity_required_key;
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
};

}  // namespace changeflow::http::middleware
