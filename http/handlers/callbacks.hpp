#pragma once
#include "http/api.hpp"

namespace changeflow::http {
/// POST /api/v1/callbacks/approval and /api/v1/callbacks/deploy.
void add_callback_routes(router& r, service_context& ctx);

/// True when the approval callback carries a valid signature for `body`: `X-Signature: sha256=<hex
/// HMAC-SHA256(body, secret)>`, compared in constant time. A missing secret refuses everything.
bool approval_signature_valid(const http_server::request& req, const std::optional<std::string>& secret);
}  // namespace changeflow::http
