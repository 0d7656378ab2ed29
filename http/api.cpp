#include "http/api.hpp"

#include "base/log.hpp"
#include "http/envelope.hpp"

#include <chrono>

namespace changeflow::http {

http_server::handler make_api(service_context& ctx, std::shared_ptr<const router> routes) {
  return [&ctx, routes](http_server::request&& req, http_server::responder reply) {
    auto m = routes->match(req.method, req.path);
    if (m.kind == router::match_kind::not_found) {
      return reply(client_error(404, "NOT_FOUND", "No such endpoint"));
    }
    if (m.kind == router::match_kind::method_not_allowed) {
      auto r = client_error(405, "METHOD_NOT_ALLOWED", "Method not allowed on this endpoint");
      std::string allow;
      for (auto& a : m.allowed_methods) allow += (allow.empty() ? "" : ", ") + a;
      r.set_header("Allow", allow);
      return reply(std::move(r));
    }
    // API metrics: latency and status per route template, recorded when the reply is sent.
    auto started = std::chrono::steady_clock::now();
    std::string pattern = m.matched->pattern;
    std::string method = req.method;
    http_server::responder timed([&ctx, reply, started, pattern, method](http_server::response r) {
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      ctx.metrics.observe("changeflow_http_request_duration_seconds", "HTTP request latency by route and status",
                          {{"route", pattern}, {"method", method}, {"status", std::to_string(r.status)}}, seconds);
      reply(std::move(r));
    });
    try {
      m.matched->handler(req, m.params, timed);
    } catch (const std::exception& e) {
      timed(internal_error(std::string("handler threw: ") + e.what()));
    } catch (...) {
      timed(internal_error("handler threw a non-exception"));
    }
  };
}

}  // namespace changeflow::http
