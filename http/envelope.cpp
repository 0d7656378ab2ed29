#include "http/envelope.hpp"

#include "base/ids.hpp"
#include "base/log.hpp"

namespace changeflow::http {

http_server::response envelope(unsigned status, std::string_view code, std::string_view message,
                               const nlohmann::json& data) {
  http_server::response r;
  r.status = status;
  nlohmann::json body = {{"code", code}, {"message", message}, {"data", data}};
  r.body = log::safe_dump(body);
  return r;
}

http_server::response ok(const nlohmann::json& data, unsigned status, std::string_view code) {
  return envelope(status, code, "OK", data);
}

http_server::response client_error(unsigned status, std::string_view code, std::string_view message,
                                   std::string_view log_detail) {
  if (!log_detail.empty()) {
    log::warn("http.rejected", {{"code", code}, {"status", status}, {"detail", std::string(log_detail)}});
  }
  return envelope(status, code, message);
}

http_server::response internal_error(std::string_view log_detail, unsigned status) {
  auto id = ids::new_error_id();
  log::error("http.internal_error", {{"error_id", id}, {"detail", std::string(log_detail)}});
  return envelope(status, status == 503 ? "UNAVAILABLE" : "INTERNAL_ERROR",
                  status == 503 ? "Service temporarily unavailable, retry later" : "Internal error", {{"errorId", id}});
}

}  // namespace changeflow::http
