#pragma once
// The one response envelope of the API: {"code": "...", "message": "...", "data": {...}}.
// Client errors carry an actionable message; server errors carry a generic message and an error id
// that also appears in the log line with the details. Exception text never reaches a client.

#include "http/server/message.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace changeflow::http {

http_server::response envelope(unsigned status, std::string_view code, std::string_view message,
                               const nlohmann::json& data = nullptr);
http_server::response ok(const nlohmann::json& data, unsigned status = 200, std::string_view code = "OK");
/// 4xx with an actionable message; `log_detail` goes to the log only.
http_server::response client_error(unsigned status, std::string_view code, std::string_view message,
                                   std::string_view log_detail = {});
/// 5xx with a generic message and a fresh error id; `log_detail` goes to the log with that id.
http_server::response internal_error(std::string_view log_detail, unsigned status = 500);

}  // namespace changeflow::http
