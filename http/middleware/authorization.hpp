#pragma once
// Authorization: fail closed and reveal nothing on denial.
// - No identity, or the resolver refused the credentials -> 401 UNAUTHENTICATED.
// - Identity present but none of the route's rule codes granted, the permission service failed,
//   or its answer is unusable -> 403 FORBIDDEN with the fixed message "Access denied", so a
//   rejected caller cannot learn which permission is needed. Details go to the log only.

#include "http/identity/resolver.hpp"
#include "http/server/message.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::http::middleware {

inline constexpr std::string_view access_denied_message = "Access denied";
inline constexpr std::string_view authentication_required_message = "Authentication required";
/// Reserved parameter carrying the server-resolved operator on the ops API.
inline constexpr std::string_view authenticated_operator_param = "__authenticatedOperator";

/// Answer of the permission service for one round trip over several rule codes: either the set of
/// rule codes the subject holds, or an error (timeout, transport, unparsable answer...).
struct permission_outcome {
  std::optional<std::set<std::string>> granted;  // nullopt = error
  std::string error;                             // for the log only

  static permission_outcome granted_rules(std::set<std::string> rules) { return {std::move(rules), {}}; }
  static permission_outcome failed(std::string why) { return {std::nullopt, std::move(why)}; }
};

enum class authz_decision { allow, deny_401, deny_403 };

std::string_view to_string(authz_decision d);

/// True when the chain must know who the caller is for this route.
inline bool needs_identity(const std::vector<std::string>& required_rules, bool requires_identity) {
  return requires_identity || !required_rules.empty();
}

/// Pure decision. `required_rules` is any-of; empty means no rule check (identity alone, when
/// `requires_identity`, decides). `permissions` is ignored unless rules are required; nullopt with
/// rules required (the check never ran) is a deny.
authz_decision decide_authorization(const std::vector<std::string>& required_rules, bool requires_identity,
                                    const identity::resolve_result& who,
                                    const std::optional<permission_outcome>& permissions);

/// The client-facing denial: 401 {UNAUTHENTICATED, "Authentication required"} or
/// 403 {FORBIDDEN, "Access denied"}; `log_detail` is logged, never sent. Precondition: not allow
/// (an allow yields a 500 internal error rather than a silent pass).
http_server::response deny_response(authz_decision d, std::string_view log_detail = {});

/// Copies the client's params first, THEN writes the reserved __authenticatedOperator with the
/// resolved identity, so a forged value from the client is always replaced. A non-object input is
/// replaced by an object holding only the operator.
nlohmann::json apply_operator_identity(nlohmann::json params, const identity::identity& who);

/// What the audit log may record: secret-looking keys masked (log::mask_secrets) and every string
/// value truncated to 256 bytes (at a UTF-8 character boundary), recursively.
nlohmann::json audit_params(const nlohmann::json& params);

inline constexpr std::size_t audit_value_max_bytes = 256;

}  // namespace changeflow::http::middleware
