#include "service/subscriptions.hpp"

#include "base/ids.hpp"
#include "base/log.hpp"

namespace changeflow::service {

namespace {
constexpr std::size_t generated_secret_bytes = 32;
}

subscribe_result subscribe(persistence::session db, const subscribe_request& r) {
  subscribe_result out;
  // The outbound client speaks http and https (verified TLS). The request DTO already refuses other
  // schemes; this guard keeps a caller that skips it from queueing events that can never be sent.
  if (r.url.rfind("http://", 0) != 0 && r.url.rfind("https://", 0) != 0) {
    out.status = subscribe_status::unsupported_url;
    out.message = "only http:// and https:// subscriber addresses can be delivered to";
    return out;
  }
  persistence::new_subscription sub;
  sub.subscription_id = ids::new_uuid();
  sub.subject_id = r.subject;
  sub.operation_id = r.operation_id;
  sub.url = r.url;
  sub.secret = r.secret.value_or(ids::random_hex(generated_secret_bytes));
  sub.owner = r.owner;
  auto created = persistence::create_subscription(db, sub);
  if (!created.ok()) {
    out.error = created.error;
    return out;
  }
  log::info("notify.subscribed", {{"subscription_id", sub.subscription_id},
                                  {"subject", sub.subject_id.value_or("")},
                                  {"operation_id", sub.operation_id.value_or("")},
                                  {"owner", sub.owner}});
  out.status = subscribe_status::created;
  out.secret = sub.secret;
  out.subscription.subscription_id = sub.subscription_id;
  out.subscription.subject_id = sub.subject_id;
  out.subscription.operation_id = sub.operation_id;
  out.subscription.url = sub.url;
  out.subscription.owner = sub.owner;
  return out;
}

persistence::db_result<std::int64_t> unsubscribe(persistence::session db, const std::string& subscription_id) {
  auto r = persistence::delete_subscription(db, subscription_id);
  if (r.ok()) log::info("notify.unsubscribed", {{"subscription_id", subscription_id}, {"given_up", r.value}});
  return r;
}

}  // namespace changeflow::service
