#include "clients/guarded_call.hpp"

#include "config/snapshot.hpp"

namespace changeflow::clients {

call_settings call_settings_from(const config::snapshot& snap) {
  call_settings s;
  const auto& external = snap.external();
  s.limits.connect_timeout = std::chrono::milliseconds(external.connect_timeout_ms);
  s.limits.request_timeout = std::chrono::milliseconds(external.request_timeout_ms);
  s.breaker.failure_threshold = static_cast<int>(external.breaker_failures);
  s.breaker.cooldown = std::chrono::milliseconds(external.breaker_cooldown_ms);
  return s;
}

result<http_response> guarded_call(http_client& http, circuit_breaker& breaker, const call_settings& settings,
                                   const url_parts& base, http_request req) {
  if (!breaker.allow(settings.breaker)) {
    call_error e;
    e.what = call_error::kind::breaker_open;
    e.message = breaker.system() + " circuit breaker is open";
    e.retryable = true;
    return e;
  }
  req.target = base.base_path + req.target;
  auto r = http.call(base, req, settings.limits);
  if (!r) {
    if (r.error().what == call_error::kind::invalid_argument) {
      breaker.record_success();  // our mistake, not the remote system's; also ends a half-open trial
    } else {
      breaker.record_failure(settings.breaker);
    }
    return r;
  }
  if (r->status >= 500) {
    breaker.record_failure(settings.breaker);
  } else {
    breaker.record_success();
  }
  return r;
}

}  // namespace changeflow::clients
