#include "http/handlers/whoami.hpp"

#include "http/envelope.hpp"
#include "http/middleware/authorization.hpp"
#include "http/middleware/error_mapping.hpp"

namespace changeflow::http {

nlohmann::json query_params_json(std::string_view query) {
  nlohmann::json out = nlohmann::json::object();
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    auto name = http_server::percent_decode(pair.substr(0, eq), true);
    auto value = eq == std::string_view::npos ? std::string() : http_server::percent_decode(pair.substr(eq + 1), true);
    if (!name.empty()) out[name] = value;
  }
  return out;
}

void add_whoami_route(router& r, service_context&) {
  r.add({routes::ops_whoami, [](http_server::request& req, const path_params&, http_server::responder reply) {
           auto op = authenticated_operator(req);
           // The policy demands an identity, so this is a wiring error, not a client error.
           if (!op) return reply(internal_error("whoami reached without a resolved operator"));
           auto params = middleware::apply_operator_identity(query_params_json(req.query), identity::identity{*op, ""});
           reply(middleware::outcome_response(
               middleware::api_outcome::ok, {},
               {{"operator", params[std::string(middleware::authenticated_operator_param)]},
                {"params", middleware::audit_params(params)}}));
         }});
}

}  // namespace changeflow::http
