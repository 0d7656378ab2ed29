#pragma once
// Bearer tokens for tests: HS256 JWTs minted with libjwt, as an identity provider would.

#include <string>

namespace changeflow::testing {

/// `sub` = subject, `exp` = now + ttl_seconds, signed HS256 with `secret`.
std::string mint_hs256(const std::string& secret, const std::string& sub, long ttl_seconds = 600);

}  // namespace changeflow::testing
