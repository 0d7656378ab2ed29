#pragma once
// The ONE identity resolver of the service (several diverging copies would give one person
// two metric tag values). Rate limiting, authorization, audit and metrics all use its answer.
//
// Sources, in order:
//  1. Trusted-gateway header (auth.gateway_header), honoured ONLY when the TCP peer is listed in
//     auth.trusted_proxies; from anyone else the header is ignored.
//  2. Authorization: Bearer <HS256 JWT> signed with auth.jwt_secret. alg=none or any other alg, a
//  bad
//     signature, exp in the past (or absent), nbf in the future, or a wrong aud (when
//     auth.jwt_audience is set) -> no identity, with a reason for the log.
// The subject may be an email-style account ("Alice@corp.example" -> "alice") or an employee id
// ("E12345" / "12345") mapped through auth.aliases to the same account; an unmapped employee id
// stays "emp:12345" (not guessed).

#include "config/snapshot.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace changeflow::http::identity {

/// Same shape as http_server::request::headers: lower-case names.
using header_map = std::map<std::string, std::string, std::less<>>;

struct identity {
  std::string account;  // normalized: lower case, no domain; or "emp:<digits>" when unmapped
  std::string source;   // "jwt" | "gateway"
};

enum class resolve_reason {
  ok,
  none_presented,        // no Authorization header, no trusted gateway header
  bad_token,             // malformed, bad signature, not a Bearer scheme
  wrong_algorithm,       // alg other than HS256, including "none"
  expired,               // exp <= now
  missing_expiry,        // no numeric exp: tokens that never expire are refused
  not_yet_valid,         // nbf > now
  wrong_audience,        // auth.jwt_audience set and aud does not contain it
  bad_subject,           // sub missing or not an account / employee id
  no_secret_configured,  // auth.jwt_secret cleared: nobody can be authenticated (fail closed)
  untrusted_header,      // gateway header from a peer not in auth.trusted_proxies (and no token)
};

std::string_view to_string(resolve_reason r);

struct resolve_result {
  std::optional<identity> id;
  resolve_reason reason = resolve_reason::none_presented;
  /// True when the caller presented credentials that failed (as opposed to presenting none).
  bool presented_but_rejected() const { return !id && reason != resolve_reason::none_presented; }
};

/// Resolves the caller. Never throws; `now` is an input so expiry is testable.
resolve_result resolve_identity(const header_map& headers, std::string_view peer_address, const config::snapshot& snap,
                                std::chrono::system_clock::time_point now);

/// Normalizes a subject: email-style -> local part, lower-cased, trimmed; employee id ("E123" or
/// "123") -> aliases[id] normalized, else "emp:<digits>"; other plain names lower-cased.
/// nullopt when empty or containing whitespace/control characters.
std::optional<std::string> normalize_subject(std::string_view subject, const nlohmann::json& aliases);

/// True when the account came from an alias-less employee id ("emp:..."): metrics treat such an
/// identity as not trustworthy enough for a per-user label.
bool is_unmapped_employee(const identity& id);

}  // namespace changeflow::http::identity
