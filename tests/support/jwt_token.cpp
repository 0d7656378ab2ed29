#include "tests/support/jwt_token.hpp"

#include <jwt.h>

#include <cstdlib>
#include <ctime>
#include <memory>

namespace changeflow::testing {

std::string mint_hs256(const std::string& secret, const std::string& sub, long ttl_seconds) {
  return mint_jwt(sub, secret, ttl_seconds);
}

std::string mint_jwt(const std::string& sub, const std::string& key, long exp_offset, jwt_alg_t alg,
                     const std::string& aud) {
  jwt_t* raw = nullptr;
  if (jwt_new(&raw) != 0) return {};
  std::unique_ptr<jwt_t, void (*)(jwt_t*)> j(raw, jwt_free);
  jwt_add_grant(j.get(), "sub", sub.c_str());
  if (!aud.empty()) jwt_add_grant(j.get(), "aud", aud.c_str());
  jwt_add_grant_int(j.get(), "exp", static_cast<long>(std::time(nullptr)) + exp_offset);
  if (alg == JWT_ALG_NONE) {
    jwt_set_alg(j.get(), JWT_ALG_NONE, nullptr, 0);
  } else {
    jwt_set_alg(j.get(), alg, reinterpret_cast<const unsigned char*>(key.data()), static_cast<int>(key.size()));
  }
  char* text = jwt_encode_str(j.get());
  std::string out = text ? text : "";
  std::free(text);
  return out;
}

}  // namespace changeflow::testing
