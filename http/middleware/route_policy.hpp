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
  /// True when the route needs a login identity even without rule codes (401 otherwise).
  bool requires_identity = false;
  /// Optional bool config key read on every request that, when true, also requires an identity
  /// (the user API uses "auth.required"); empty or cleared -> only `requires_identity` counts.
  std::string identity_required_key;
  /// Business activity name counted for this route only (an allowlist by construction); empty =
  /// none.
  std::string business_metric;
  /// True for write endpoints that carry an idempotency key (operationId); informational for
  /// handlers.
  bool idempotent_write = false;
};

}  // namespace changeflow::http::middleware
