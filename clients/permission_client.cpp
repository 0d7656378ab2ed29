#include "clients/permission_client.hpp"

#include <nlohmann/json.hpp>

namespace changeflow::clients {

using json = nlohmann::json;

permission_client::permission_client(http_client& http, circuit_breaker& breaker, const call_settings& settings,
                                     url_parts base)
    : http_(http), breaker_(breaker), settings_(settings), base_(std::move(base)) {}

permission_answer permission_client::check(const std::string& subject, const std::vector<std::string>& rules) {
  permission_answer answer;
  http_request req;
  req.method = "POST";
  req.target = "/api/permissions/check";
  req.body = json{{"subject", subject}, {"rules", rules}}.dump(-1, ' ', false, json::error_handler_t::replace);
  auto r = guarded_call(http_, breaker_, settings_, base_, std::move(req));
  if (!r) {
    answer.error = r.error();
    return answer;
  }
  if (r->status != 200) {
    answer.error = status_error(r.value());
    return answer;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("granted") || !j["granted"].is_array()) {
    call_error e;
    e.what = call_error::kind::protocol;
    e.status = r->status;
    e.message = "permission answer without a granted list";
    answer.error = e;
    return answer;
  }
  std::set<std::string> asked(rules.begin(), rules.end());
  for (const auto& g : j["granted"]) {
    if (g.is_string() && asked.count(g.get<std::string>())) answer.granted.insert(g.get<std::string>());
  }
  return answer;
}

}  // namespace changeflow::clients
