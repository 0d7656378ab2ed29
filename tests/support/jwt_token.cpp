#include "tests/support/jwt_token.hpp"

#include <jwt.h>

#include <cstdlib>
#include <ctime>
#include <memory>

namespace changeflow::testing {

std::string mint_hs256(const std::string& secret, const std::string& sub, long ttl_seconds) {
  jwt_t* raw = nullptr;
  if (jwt_new(&raw) != 0) return {};
  std::unique_ptr<jwt_t, void (*)(jwt_t*)> j(raw, jwt_free);
  jwt_add_grant(j.get(), "sub", sub.c_str());
  jwt_add_grant_int(j.get(), "exp", static_cast<long>(std::time(nullptr)) + ttl_seconds);
  jwt_set_alg(j.get(), JWT_ALG_HS256, reinterpret_cast<const unsigned char*>(secret.data()),
              static_cast<int>(secret.size()));
  char* text = jwt_encode_str(j.get());
  std::string out = text ? text : "";
  std::free(text);
  return out;
}

}  // namespace changeflow::testing
