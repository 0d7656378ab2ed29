#pragma once
// The notification dispatcher: sends the outbox (persistence/notification_repo.hpp) to subscribers.
//
// A periodic job in the reconciler's idiom: a CAF timer actor that queues one pass on the database
// pool and arms the next tick only when the pass reported back, so passes never overlap on one
// instance. A pass claims due deliveries (a lease per row, so several instances share the work
// without sending a row twice while its lease lasts), builds each body on the database worker
// (the change's status document as GET /api/v1/changes/{id} answers it), and POSTs each on the
// external pool with notifications.timeout_ms. The answer is recorded on the database pool: 2xx ->
// DELIVERED; anything else -> next try after a capped exponential backoff, or FAILED once the
// delivery is older than notifications.max_age_seconds.
//
// Order per (subscription, change) comes from the claim (only the oldest PENDING delivery of a
// stream is due), so a pass sends at most one delivery per stream. A pass that delivered something
// is followed by the next one at once instead of after the interval: the next event of each stream
// became due with that delivery.
//
// At least once: a delivery whose 2xx was lost (or whose result could not be recorded) is sent
// again once its lease expires, with the same delivery id; subscribers deduplicate on it.

#include "actors/periodic_job.hpp"
#include "persistence/notification_repo.hpp"
#include "persistence/operation_repo.hpp"
#include "runtime/services.hpp"

#include <caf/actor.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::actors {

/// Wire shapes of the user API that a notification carries, built by http/dto so the event body has
/// exactly the shape of GET /api/v1/changes/{id} (actors/ does not depend on http/).
struct notification_documents {
  std::function<nlohmann::json(const persistence::operation_row&, const std::vector<persistence::operation_event_row>&,
                               bool live)>
      change;
  std::function<nlohmann::json(const persistence::operation_event_row&)> event;
};

struct notification_settings {
  std::int64_t interval_ms = 1000;  // <= 0: paused
  int batch = 50;
  std::int64_t timeout_ms = 5000;
  std::int64_t retry_base_ms = 1000;
  std::int64_t retry_cap_ms = 300000;
  std::int64_t max_age_s = 259200;
  /// Lease of a claim: the POST's deadline plus room to record its answer.
  std::int64_t lease_ms() const { return timeout_ms * 2 + 5000; }
};
notification_settings notification_settings_from(const config::snapshot& snap);

/// Wait before the next try after `failed_attempts` failures (>= 1): base, 2 x base, 4 x base ...,
/// never more than cap.
std::int64_t retry_delay_ms(int failed_attempts, std::int64_t base_ms, std::int64_t cap_ms);

/// "sha256=" + hex HMAC-SHA256(secret, timestamp + body): what X-Changeflow-Signature carries.
std::string notification_signature(std::string_view secret, std::string_view timestamp, std::string_view body);

/// The JSON body of one delivery.
nlohmann::json notification_body(const persistence::claimed_delivery& d, nlohmann::json event, nlohmann::json change);

/// What one pass did (for tests and the log line).
struct dispatch_report {
  int claimed = 0;
  int delivered = 0;
  int retrying = 0;
  int failed = 0;
  int not_sent = 0;  // the external pool was full: given back without an attempt
};

/// Runs one pass: claims on `db` (a database worker's session), POSTs on the external pool, records
/// answers on the database pool; `done` runs once every claimed delivery has been recorded (on
/// whichever worker recorded the last one).
void run_dispatch_pass(persistence::session db, runtime::services& svc, const notification_documents& docs,
                       std::function<void(dispatch_report)> done);

/// The periodic job: a pass every notifications.dispatch_interval_ms (hot; <= 0 pauses), the next one
/// at once when a pass delivered something (actors/periodic_job.hpp).
void start_notification_dispatcher(runtime::services& svc, notification_documents docs, periodic_job& job);

}  // namespace changeflow::actors
