#include "http/handlers/health.hpp"

#include "http/envelope.hpp"
#include "persistence/migrations.hpp"

namespace changeflow::http {

void add_health_routes(router& r, service_context& ctx) {
  r.add({routes::healthz, [](http_server::request&, const path_params&, http_server::responder reply) {
           reply(ok({{"status", "alive"}}));
         }});

  r.add({routes::readyz, [&ctx](http_server::request&, const path_params&, http_server::responder reply) {
           if (ctx.not_ready_reason) {
             if (auto reason = ctx.not_ready_reason()) {
               return reply(envelope(503, "NOT_READY", *reason, {{"reason", *reason}}));
             }
           }
           int expected = ctx.expected_schema_version;
           bool queued = ctx.db.try_submit([reply, expected](persistence::db_context& db) {
             auto version = persistence::current_schema_version(db);
             if (!version.ok()) {
               return reply(envelope(503, "NOT_READY", "database unreachable",
                                     {{"reason", "database unreachable"}, {"dbError", version.error.code}}));
             }
             if (version.value < expected) {
               std::string reason = "migrations pending (schema " + std::to_string(version.value) + " of " +
                                    std::to_string(expected) + ")";
               return reply(envelope(503, "NOT_READY", reason, {{"reason", reason}}));
             }
             reply(ok({{"status", "ready"}, {"schemaVersion", version.value}}));
           });
           if (!queued) reply(envelope(503, "NOT_READY", "database queue full", {{"reason", "database queue full"}}));
         }});

  r.add({routes::metrics, [&ctx](http_server::request&, const path_params&, http_server::responder reply) {
           http_server::response res;
           res.content_type = "text/plain; version=0.0.4";
           res.body = ctx.metrics.serialize();
           reply(std::move(res));
         }});
}

}  // namespace changeflow::http
