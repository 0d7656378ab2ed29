#pragma once
// Client of the permission service: one round trip checks several rule codes.
//   POST /api/permissions/check {subject, rules:[...]} -> 200 {granted:[rule,...]}
// ANY failure (transport, breaker, non-200, unreadable body) means "no permission": the answer is an
// empty set plus the error, which the caller logs. Denying is the less harmful direction here.

#include "clients/guarded_call.hpp"
#include "clients/result.hpp"

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace changeflow::clients {

struct permission_answer {
  std::set<std::string> granted;    // only rules that were asked for
  std::optional<call_error> error;  // set when the check failed (granted is then empty)
  bool allows(const std::string& rule) const { return granted.count(rule) != 0; }
};

class permission_client {
 public:
  permission_client(http_client& http, circuit_breaker& breaker, const call_settings& settings, url_parts base);
  permission_answer check(const std::string& subject, const std::vector<std::string>& rules);

 private:
  http_client& http_;
  circuit_breaker& breaker_;
  const call_settings& settings_;
  url_parts base_;
};

}  // namespace changeflow::clients
