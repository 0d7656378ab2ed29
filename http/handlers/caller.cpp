#include "http/handlers/caller.hpp"

#include "base/log.hpp"
#include "http/middleware/authorization.hpp"

#include <atomic>
#include <memory>

namespace changeflow::http {

asking who_asks(service_context& ctx, const http_server::request& req) {
  asking a;
  a.account = authenticated_operator(req);
  if (!a.account && ctx.config.current()->auth().required) a.refused = true;
  return a;
}

void ask_permissions(service_context& ctx, const std::string& account, std::vector<std::string> rules,
                     std::function<void(std::optional<std::set<std::string>>)> then) {
  if (!ctx.check_permissions || rules.empty()) return then(std::nullopt);
  auto once = std::make_shared<std::atomic<bool>>(false);
  auto answer = [then, once](middleware::permission_outcome o) {
    if (once->exchange(true)) return;
    if (!o.granted) log::info("http.permission_check_failed", {{"error", o.error}});
    then(std::move(o.granted));
  };
  try {
    ctx.check_permissions(account, std::move(rules), answer);
  } catch (const std::exception& e) {
    answer(middleware::permission_outcome::failed(std::string("permission check threw: ") + e.what()));
  }
}

http_server::response access_denied(std::string_view detail) {
  return middleware::deny_response(middleware::authz_decision::deny_403, detail);
}

http_server::response authentication_required() {
  return middleware::deny_response(middleware::authz_decision::deny_401, "auth.required changed under the request");
}

}  // namespace changeflow::http
