#include "actors/notification_dispatcher.hpp"

#include "actors/registry.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "clients/http_client.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

namespace changeflow::actors {

namespace {

constexpr std::int64_t max_connect_timeout_ms = 2000;
}  // namespace

notification_settings notification_settings_from(const config::snapshot& snap) {
  notification_settings s;
  const auto& n = snap.notifications();
  s.interval_ms = n.dispatch_interval_ms;
  s.batch = static_cast<int>(n.batch);
  s.timeout_ms = n.timeout_ms;
  s.retry_base_ms = n.retry_base_ms;
  s.retry_cap_ms = n.retry_cap_ms;
  s.max_age_s = n.max_age_seconds;
  return s;
}

std::int64_t retry_delay_ms(int failed_attempts, std::int64_t base_ms, std::int64_t cap_ms) {
  if (failed_attempts < 1) failed_attempts = 1;
  std::int64_t delay = std::max<std::int64_t>(1, base_ms);
  // Doubling stops at the cap, so a long outage never overflows the shift.
  for (int i = 1; i < failed_attempts && delay < cap_ms; ++i) delay *= 2;
  return std::min(delay, std::max<std::int64_t>(1, cap_ms));
}

std::string notification_signature(std::string_view secret, std::string_view timestamp, std::string_view body) {
  std::string signed_text;
  signed_text.reserve(timestamp.size() + body.size());
  signed_text.append(timestamp);
  signed_text.append(body);
  return "sha256=" + ids::hmac_sha256_hex(secret, signed_text);
}

nlohmann::json notification_body(const persistence::claimed_delivery& d, nlohmann::json event, nlohmann::json change) {
  return {{"deliveryId", d.delivery_id},
          {"subscriptionId", d.subscription_id},
          {"kind", d.kind},
          {"operationId", d.operation_id},
          {"sequence", d.sequence},
          {"event", std::move(event)},
          {"change", std::move(change)}};
}

namespace {

/// One pass's deliveries in flight; the last one recorded reports the pass.
struct pass_state {
  std::mutex mutex;
  dispatch_report report;
  std::atomic<int> outstanding{0};
  std::function<void(dispatch_report)> done;

  enum class result { delivered, retrying, failed, not_sent };
  void finish_one(result r) {
    {
      std::lock_guard lock(mutex);
      switch (r) {
        case result::delivered: ++report.delivered; break;
        case result::retrying: ++report.retrying; break;
        case result::failed: ++report.failed; break;
        case result::not_sent: ++report.not_sent; break;
      }
    }
    if (outstanding.fetch_sub(1) == 1) {
      dispatch_report copy;
      {
        std::lock_guard lock(mutex);
        copy = report;
      }
      if (done) done(copy);
    }
  }
};

struct outgoing {
  persistence::claimed_delivery delivery;
  clients::url_parts url;
  std::string body;
  std::string timestamp;
};

void count(metrics::registry& metrics, const char* outcome) {
  metrics.inc("changeflow_notifications_total", "Notification delivery attempts by outcome", {{"outcome", outcome}});
}

/// Records the answer of one POST on a database worker.
void record_answer(persistence::session db, runtime::services& svc, const notification_settings& settings,
                   const std::string& token, const outgoing& out, const clients::result<clients::http_response>& answer,
                   pass_state& pass) {
  const auto& d = out.delivery;
  const bool delivered = answer.ok() && answer.value().status >= 200 && answer.value().status < 300;
  if (delivered) {
    auto r = persistence::mark_delivered(db, d.id, answer.value().status);
    if (!r.ok()) log::warn("notify.record_failed", {{"delivery_id", d.delivery_id}, {"error", r.error.message}});
    count(*svc.metrics, "delivered");
    return pass.finish_one(pass_state::result::delivered);
  }
  persistence::failed_attempt a;
  a.id = d.id;
  a.token = token;
  if (answer.ok()) {
    a.http_status = answer.value().status;
    a.error = "HTTP " + std::to_string(a.http_status) + ": " + clients::remote_message(answer.value().body);
  } else {
    a.error = clients::describe(answer.error());
  }
  a.retry_in_ms = retry_delay_ms(d.attempts + 1, settings.retry_base_ms, settings.retry_cap_ms);
  a.max_age_s = settings.max_age_s;
  auto r = persistence::record_failed_attempt(db, a);
  if (!r.ok()) {
    log::warn("notify.record_failed", {{"delivery_id", d.delivery_id}, {"error", r.error.message}});
    return pass.finish_one(pass_state::result::retrying);
  }
  const bool gave_up = r.value == "FAILED";
  log::info(gave_up ? "notify.failed" : "notify.retry", {{"delivery_id", d.delivery_id},
                                                         {"operation_id", d.operation_id},
                                                         {"sequence", d.sequence},
                                                         {"attempts", d.attempts + 1},
                                                         {"retry_in_ms", a.retry_in_ms},
                                                         {"error", a.error}});
  count(*svc.metrics, gave_up ? "failed" : "retry");
  pass.finish_one(gave_up ? pass_state::result::failed : pass_state::result::retrying);
}

/// Builds the body of a claimed delivery on the database worker; nullopt when it cannot be built
/// now (the claim is given back, the next pass tries again).
std::optional<outgoing> prepare_delivery(persistence::session db, runtime::services& svc,
                                         const notification_documents& docs, const persistence::claimed_delivery& d,
                                         std::string& why) {
  auto url = clients::parse_url(d.url);
  if (!url) {
    why = "the subscription's URL cannot be sent to by this client: " + d.url;
    return std::nullopt;
  }
  auto row = persistence::load_operation(db, d.operation_id);
  if (!row.ok()) {
    why = row.error.message;
    return std::nullopt;
  }
  auto events = persistence::list_events(db, d.operation_id);
  if (!events.ok()) {
    why = events.error.message;
    return std::nullopt;
  }
  const bool live = svc.actors && svc.actors->find(d.operation_id).has_value();
  outgoing out;
  out.delivery = d;
  out.url = *url;
  out.body = notification_body(d, docs.event(d.event), docs.change(row.value, events.value, live))
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out.timestamp = std::to_string(svc.now_ms() / 1000);
  return out;
}

}  // namespace

void run_dispatch_pass(persistence::session db, runtime::services& svc, const notification_documents& docs,
                       std::function<void(dispatch_report)> done) {
  const auto settings = notification_settings_from(*svc.config->current());
  const std::string token = ids::new_uuid();
  auto claimed = persistence::claim_due_deliveries(db, {svc.instance_id, token, settings.batch, settings.lease_ms()});
  if (!claimed.ok()) {
    log::warn("notify.claim_failed", {{"error", claimed.error.message}});
    if (done) done({});
    return;
  }
  if (claimed.value.empty()) {
    if (done) done({});
    return;
  }
  auto pass = std::make_shared<pass_state>();
  pass->done = std::move(done);
  pass->report.claimed = static_cast<int>(claimed.value.size());
  pass->outstanding = static_cast<int>(claimed.value.size());
  auto* svcp = &svc;
  for (const auto& d : claimed.value) {
    std::string why;
    std::optional<outgoing> out;
    try {
      out = prepare_delivery(db, svc, docs, d, why);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!out) {
      // An unusable URL fails like an unreachable subscriber (backoff, then FAILED past the max
      // age), so operators see it in the delivery list; a database error just gives the claim back.
      if (!clients::parse_url(d.url)) {
        clients::call_error e;
        e.what = clients::call_error::kind::invalid_argument;
        e.message = why;
        outgoing bad;
        bad.delivery = d;
        record_answer(db, svc, settings, token, bad, clients::result<clients::http_response>(e), *pass);
      } else {
        log::warn("notify.prepare_failed", {{"delivery_id", d.delivery_id}, {"error", why}});
        persistence::release_claim(db, d.id, token);
        pass->finish_one(pass_state::result::not_sent);
      }
      continue;
    }
    auto shared_out = std::make_shared<outgoing>(std::move(*out));
    bool queued = svc.external->try_submit([svcp, settings, token, shared_out, pass](clients::external_context& ctx) {
      clients::http_request req;
      req.method = "POST";
      req.target = shared_out->url.base_path.empty() ? "/" : shared_out->url.base_path;
      req.body = shared_out->body;
      const auto& d = shared_out->delivery;
      req.headers = {
          {"X-Changeflow-Delivery", d.delivery_id},
          {"X-Changeflow-Event", d.kind},
          {"X-Changeflow-Timestamp", shared_out->timestamp},
          {"X-Changeflow-Signature", notification_signature(d.secret, shared_out->timestamp, shared_out->body)}};
      clients::transport_limits limits;
      limits.request_timeout = std::chrono::milliseconds(settings.timeout_ms);
      limits.connect_timeout = std::chrono::milliseconds(std::min(settings.timeout_ms, max_connect_timeout_ms));
      limits.max_response_bytes = 64 * 1024;  // the answer's body only feeds last_error
      auto answer = ctx.http.call(shared_out->url, req, limits);
      bool recorded = svcp->db->try_submit([svcp, settings, token, shared_out, pass,
                                            answer](persistence::db_context& db) {
        try {
          record_answer(db, *svcp, settings, token, *shared_out, answer, *pass);
        } catch (const std::exception& e) {
          log::warn("notify.record_failed", {{"delivery_id", shared_out->delivery.delivery_id}, {"error", e.what()}});
          pass->finish_one(pass_state::result::retrying);
        }
      });
      // The database pool is full: the lease runs out and the delivery is sent again (at least once).
      if (!recorded) pass->finish_one(pass_state::result::retrying);
    });
    if (!queued) {
      persistence::release_claim(db, d.id, token);
      pass->finish_one(pass_state::result::not_sent);
    }
  }
}

void start_notification_dispatcher(runtime::services& svc, notification_documents docs, periodic_job& job) {
  auto shared_docs = std::make_shared<notification_documents>(std::move(docs));
  periodic_spec spec;
  spec.name = "notify";
  spec.interval_ms = [&svc] { return svc.config->current()->notifications().dispatch_interval_ms; };
  spec.first_at_once = false;
  spec.start_pass = [&svc, shared_docs, stopped = job.stop_flag()](pass_done done) {
    return svc.db->try_submit([&svc, shared_docs, stopped, done](persistence::db_context& db) {
      if (*stopped) return done(false);
      try {
        run_dispatch_pass(db, svc, *shared_docs, [done](dispatch_report r) {
          if (r.claimed > 0) {
            log::info("notify.pass", {{"claimed", r.claimed},
                                      {"delivered", r.delivered},
                                      {"retrying", r.retrying},
                                      {"failed", r.failed},
                                      {"not_sent", r.not_sent}});
          }
          // A delivery made the next event of its stream due: go on at once while there is progress.
          done(r.delivered > 0);
        });
      } catch (const std::exception& e) {
        log::warn("notify.pass_failed", {{"error", e.what()}});
        done(false);
      }
    });
  };
  job.start(*svc.system, std::move(spec));
}

}  // namespace changeflow::actors
