#include "http/middleware/authorization.hpp"

#include "base/log.hpp"
#include "http/envelope.hpp"

#include <algorithm>

namespace changeflow::http::middleware {

namespace {

std::string truncate_utf8(const std::string& s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  std::size_t cut = max_bytes;
  // Step back over continuation bytes (10xxxxxx) so no character is split.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0u) == 0x80u) --cut;
  return s.substr(0, cut);
}

void truncate_strings(nlohmann::json& j) {
  if (j.is_string()) {
    j = truncate_utf8(j.get_ref<const std::string&>(), audit_value_max_bytes);
  } else if (j.is_structured()) {
    for (auto& child : j) truncate_strings(child);
  }
}

}  // namespace

std::string_view to_string(authz_decision d) {
  switch (d) {
    case authz_decision::allow: return "allow";
    case authz_decision::deny_401: return "deny_401";
    case authz_decision::deny_403: return "deny_403";
  }
  return "deny_403";
}

authz_decision decide_authorization(const std::vector<std::string>& required_rules, bool requires_identity,
                                    const identity::resolve_result& who,
                                    const std::optional<permission_outcome>& permissions) {
  if (!needs_identity(required_rules, requires_identity)) return authz_decision::allow;
  if (!who.id || who.id->account.empty()) return authz_decision::deny_401;
  if (required_rules.empty()) return authz_decision::allow;
  if (!permissions || !permissions->granted) return authz_decision::deny_403;  // service error = no permission
  const auto& granted = *permissions->granted;
  // Any-of, exact match only: empty or unrelated codes in the answer grant nothing.
  bool any = std::any_of(required_rules.begin(), required_rules.end(),
                         [&](const std::string& rule) { return !rule.empty() && granted.count(rule) > 0; });
  return any ? authz_decision::allow : authz_decision::deny_403;
}

http_server::response deny_response(authz_decision d, std::string_view log_detail) {
  switch (d) {
    case authz_decision::deny_401:
      return client_error(401, "UNAUTHENTICATED", authentication_required_message, log_detail);
    case authz_decision::deny_403: return client_error(403, "FORBIDDEN", access_denied_message, log_detail);
    case authz_decision::allow: break;
  }
  return internal_error("deny_response called with allow");
}

nlohmann::json apply_operator_identity(nlohmann::json params, const identity::identity& who) {
  if (!params.is_object()) params = nlohmann::json::object();
  // Order matters: the client's copy is taken first, the server's value is written last.
  params[std::string(authenticated_operator_param)] = who.account;
  return params;
}

nlohmann::json audit_params(const nlohmann::json& params) {
  auto masked = log::mask_secrets(params);
  truncate_strings(masked);
  return masked;
}

}  // namespace changeflow::http::middleware
