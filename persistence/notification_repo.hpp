#pragma once
// Notification subscriptions and the delivery outbox (migration 9).
//
// Deliveries are written by the database itself: the trigger on operation_event inserts one row per
// matching subscription in the same statement (or transaction) as the timeline event, so a phase
// change and its deliveries commit together or not at all. This repository only reads and moves
// them:
//
//   PENDING --claim (lease)--> POST --2xx--> DELIVERED
//      ^                          |
//      +---- next try (backoff) --+ non-2xx, transport error; past notifications.max_age_seconds -> FAILED
//
// Ordering: a delivery is due only while no earlier delivery of the same (subscription, change) is
// still PENDING, so event n+1 is never sent before n was delivered (or given up on). Several
// instances may claim at once: a claim is a guarded UPDATE that only takes rows whose lease is free,
// tagged with the claimer's token, and the claimer sees exactly the rows carrying its token.

#include "persistence/operation_repo.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::persistence {

// -- subscriptions

struct new_subscription {
  std::string subscription_id;  // UUID, the public id
  std::optional<std::string> subject_id;
  std::optional<std::string> operation_id;
  std::string url;
  std::string secret;
  std::string owner;  // verified identity of the creator
};

struct subscription_row {
  std::string subscription_id;
  std::optional<std::string> subject_id;
  std::optional<std::string> operation_id;
  std::string url;
  std::string owner;
  std::int64_t created_at_ms = 0;
  /// Deliveries of this subscription by state (PENDING, DELIVERED, FAILED), for the listing.
  std::map<std::string, std::int64_t> deliveries;
};

db_result<done> create_subscription(session s, const new_subscription& sub);
db_result<subscription_row> find_subscription(session s, const std::string& subscription_id);
/// Newest first. `owner` empty = everybody's (operators).
db_result<std::vector<subscription_row>> list_subscriptions(session s, const std::string& owner, int limit);
/// Deletes the subscription; its deliveries still PENDING become FAILED ("subscription deleted") in
/// the same transaction, so nothing is sent for it afterwards. Value: how many were given up.
/// not_found when it does not exist.
db_result<std::int64_t> delete_subscription(session s, const std::string& subscription_id);

// -- the dispatcher's side of the outbox

struct claim_request {
  std::string instance_id;  // shown to operators as claimed_by
  std::string token;        // UUID of this claim round; the claimer's rows carry it
  int limit = 50;
  std::int64_t lease_ms = 30000;  // a claim not finished by then may be taken by another claimer
};

struct claimed_delivery {
  std::int64_t id = 0;
  std::string delivery_id;
  std::string subscription_id;  // public id
  std::string url;
  std::string secret;
  std::string operation_id;
  int sequence = 0;
  std::string kind;
  int attempts = 0;  // attempts before this one
  operation_event_row event;
};

/// Claims up to `limit` due deliveries, each the oldest PENDING one of its (subscription, change).
db_result<std::vector<claimed_delivery>> claim_due_deliveries(session s, const claim_request& req);

/// The POST was answered 2xx. Counts even when the claim had expired and another claimer holds it
/// now: the subscriber has the event. Value: whether this call moved it (false: already final).
db_result<bool> mark_delivered(session s, std::int64_t id, int http_status);

struct failed_attempt {
  std::int64_t id = 0;
  std::string token;    // the claim this attempt ran under
  int http_status = 0;  // 0 = no HTTP answer (refused, timeout, reset)
  std::string error;    // one line for operators
  std::int64_t retry_in_ms = 0;
  std::int64_t max_age_s = 0;  // a delivery older than this becomes FAILED instead of retried
};
/// Records a failed attempt under the caller's claim: the next try is scheduled, or the delivery
/// is FAILED when it is older than max_age_s. Value: the new state ("PENDING" / "FAILED"), or ""
/// when the claim was no longer the caller's (someone else is trying it now; nothing written).
db_result<std::string> record_failed_attempt(session s, const failed_attempt& a);

/// Gives a claimed delivery back without counting an attempt (the POST was never started).
db_result<bool> release_claim(session s, std::int64_t id, const std::string& token);

// -- what operators see

struct delivery_row {
  std::string delivery_id;
  std::string subscription_id;
  std::string url;
  std::string operation_id;
  int sequence = 0;
  std::string kind;
  std::string state;
  int attempts = 0;
  std::optional<int> last_status;
  std::optional<std::string> last_error;
  std::optional<std::int64_t> next_attempt_at_ms;  // PENDING only
  std::optional<std::string> claimed_by;           // while a claim is live
  std::int64_t created_at_ms = 0;
  std::optional<std::int64_t> delivered_at_ms;
  std::int64_t cursor = 0;  // keyset position for the next page
};

struct delivery_filter {
  std::string state;  // PENDING | DELIVERED | FAILED; "" = all
  std::string operation_id;
  std::string subscription_id;
  int limit = 50;          // clamped to 1..500
  std::int64_t after = 0;  // cursor of the previous page's last row; 0 = newest first from the top
};

/// Newest first, keyset paged.
db_result<std::vector<delivery_row>> list_deliveries(session s, const delivery_filter& f);
/// Deliveries by state, every subscription.
db_result<std::map<std::string, std::int64_t>> delivery_counts(session s);

}  // namespace changeflow::persistence
