#pragma once
// The one path every outbound call takes: circuit breaker -> HTTP with deadlines -> breaker verdict.

#include "clients/circuit_breaker.hpp"
#include "clients/http_client.hpp"

namespace changeflow::config {
class snapshot;
}

namespace changeflow::clients {

/// Hot settings of outbound calls, re-read from the config snapshot by each job.
struct call_settings {
  transport_limits limits;
  breaker_settings breaker;
};
/// external.connect_timeout_ms / request_timeout_ms (<= 0 -> defaults), breaker_failures, breaker_cooldown_ms.
call_settings call_settings_from(const config::snapshot& snap);

/// Prefixes `req.target` with the base path and sends it unless the breaker is open.
/// Breaker verdict: transport failures and 5xx count as failures; every other status, 429 included,
/// proves the system is up (Retry-After paces the caller, the breaker need not).
result<http_response> guarded_call(http_client& http, circuit_breaker& breaker, const call_settings& settings,
                                   const url_parts& base, http_request req);

}  // namespace changeflow::clients
