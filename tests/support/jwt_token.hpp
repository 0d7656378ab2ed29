#pragma once
// Bearer tokens for tests: HS256 JWTs minted with libjwt, as an identity provider would.

#include <jwt.h>

#include <string>

namespace changeflow::testing {

/// `sub` = subject, `exp` = now + ttl_seconds, signed HS256 with `secret`.
std::string mint_hs256(const std::string& secret, const std::string& sub, long ttl_seconds = 600);

/// Any token shape a test needs, forged ones included: `exp` = now + exp_offset (negative =
/// expired), `alg` JWT_ALG_NONE ignores the key, an empty `aud` adds no audience claim.
std::string mint_jwt(const std::string& sub, const std::string& key, long exp_offset = 600,
                     jwt_alg_t alg = JWT_ALG_HS256, const std::string& aud = {});

}  // namespace changeflow::testing
