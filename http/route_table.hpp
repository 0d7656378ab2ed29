#pragma once
// THE route table: every (method, pattern) the service serves, with who may call it and what it does.
// The router (handlers are bound to these entries: http/api.cpp refuses to start with an entry
// unbound or a handler outside the table), the policy check (route_access -> middleware policy in
// http/api.cpp), the OpenAPI document (paths and summaries come from here) and the request fuzzer
// all read this one list. Dependency-free on purpose: the fuzz build compiles it without the
// service's libraries.

#include <array>
#include <string_view>

namespace changeflow::http {

/// Who may call a route; http/api.cpp maps each to its middleware policy.
enum class route_access {
  open,          // probes, metrics, the document, the console's static files
  user_read,     // identity when auth.required; ownership checked by the handler
  user_submit,   // user write: rate limited, idempotent, closed by the access switch
  user_cancel,   // like a submit, but never closed by the access switch
  user_preview,  // a read with a submit's body: rate limited and identified like a submit, writes nothing
  user_manage,   // user write that is not a change (subscriptions): rate limited, never access-switched
  callback,      // authenticates itself (HMAC / token); rate limited per sender if configured
  ops,           // identity and an operator rule code required
};

struct route_spec {
  std::string_view method;
  std::string_view pattern;
  route_access access;
  std::string_view summary;
};

namespace routes {
inline constexpr route_spec submit_change{"POST", "/api/v1/changes", route_access::user_submit,
                                          "Submit a change request"};
inline constexpr route_spec preview_change{
    "POST", "/api/v1/changes/preview", route_access::user_preview,
    "Validate a submit body and diff each file against the target branch, writing nothing (a failed read answers "
    "200 with an empty preview and the reason)"};
inline constexpr route_spec get_change{
    "GET", "/api/v1/changes/{id}", route_access::user_read,
    "Status of one operation with its requester, timeline and hint (KEEP_WAITING, CONTACT_MAINTAINERS, ...)"};
inline constexpr route_spec cancel_change{"POST", "/api/v1/changes/{id}/cancel", route_access::user_cancel,
                                          "Cancel a change that has not merged: withdraws the pending approval, closes "
                                          "the open MR, ends in CANCELLED (repeat: 200 alreadyCancelled)"};
inline constexpr route_spec revert_change{
    "POST", "/api/v1/changes/{id}/revert", route_access::user_submit,
    "Revert a VALIDATED change: a new change (own approval and lifecycle) restoring each file's content at the "
    "change's base, linked both ways (revertOf / revertedBy)"};
inline constexpr route_spec list_changes{
    "GET", "/api/v1/changes", route_access::user_read,
    "The caller's own operations, or with subject that subject's (its rule code or an operator code needed)"};
inline constexpr route_spec subscribe{
    "POST", "/api/v1/subscriptions", route_access::user_manage,
    "Subscribe a URL to the phase changes of a subject's changes or of one change; the secret is answered once"};
inline constexpr route_spec list_subscriptions{
    "GET", "/api/v1/subscriptions", route_access::user_read,
    "The caller's subscriptions with delivery counts (all=true: everybody's, operators only)"};
inline constexpr route_spec unsubscribe{
    "DELETE", "/api/v1/subscriptions/{id}", route_access::user_manage,
    "Delete a subscription (its owner or an operator); its undelivered events are given up"};
inline constexpr route_spec approval_callback{
    "POST", "/api/v1/callbacks/approval", route_access::callback,
    "Approval system callback {callbackId, operationId, result: APPROVED|REJECTED|WITHDRAWN}"};
inline constexpr route_spec deploy_callback{
    "POST", "/api/v1/callbacks/deploy", route_access::callback,
    "Deploy pipeline callback {deliveryId, mrIid, project?, pipelineId?, status, operationIds?}"};
inline constexpr route_spec gitlab_webhook{
    "POST", "/api/v1/webhooks/gitlab", route_access::callback,
    "GitLab's own Pipeline, Merge Request and Deployment Hooks (X-Gitlab-Token = the project's webhook_secret)"};
inline constexpr route_spec ops_whoami{
    "GET", "/api/v1/ops/whoami", route_access::ops,
    "The operator as resolved by the server (a client-sent __authenticatedOperator is overwritten)"};
inline constexpr route_spec ops_overview{
    "GET", "/api/v1/ops/overview", route_access::ops,
    "Counts by phase, stuck-looking operations first, callback outcomes, batch status"};
inline constexpr route_spec ops_attention{
    "GET", "/api/v1/ops/attention", route_access::ops,
    "Everything that needs a human or is late: failures, unknown outcomes, late waits, overdue approvals, stuck "
    "actors, unapplied callbacks; each with what it waits for, since when, due time and last error; oldest first"};
inline constexpr route_spec ops_actors{"GET", "/api/v1/ops/actors", route_access::ops,
                                       "Live request actors on this instance with their summaries"};
inline constexpr route_spec ops_operations{"GET", "/api/v1/ops/operations", route_access::ops,
                                           "Operations across all instances; filters phase, step, flow, owner, "
                                           "subject, target, older_than_s; paged by limit/after"};
inline constexpr route_spec ops_operation{
    "GET", "/api/v1/ops/operations/{id}", route_access::ops,
    "One operation in depth: timeline, callback ledger, owner, next wake, last error, allowed actions"};
inline constexpr route_spec ops_retrigger{"POST", "/api/v1/ops/operations/{id}/retrigger", route_access::ops,
                                          "Re-trigger the current step (operator edge of the transition table)"};
inline constexpr route_spec ops_fail{"POST", "/api/v1/ops/operations/{id}/fail", route_access::ops,
                                     "Force a terminal failure with a reason"};
inline constexpr route_spec ops_close{
    "POST", "/api/v1/ops/operations/{id}/close", route_access::ops,
    "Close the change (any failure included): withdraws the pending approval, closes the MR if open (a merged MR is "
    "recorded as merged); a failed or unconfirmed deploy is closed without touching the merged MR"};
inline constexpr route_spec ops_resend_approval{"POST", "/api/v1/ops/operations/{id}/resend-approval",
                                                route_access::ops, "Submit the approval request again"};
inline constexpr route_spec ops_confirm{
    "POST", "/api/v1/ops/operations/{id}/confirm", route_access::ops,
    "Confirm a merged change whose deploy failed or was never confirmed (-> CALLED_BACK, VALIDATED)"};
inline constexpr route_spec ops_bulk{"POST", "/api/v1/ops/bulk/{action}", route_access::ops,
                                     "Bulk retrigger or fail for a filtered set; dryRun returns the count"};
inline constexpr route_spec ops_audit{"GET", "/api/v1/ops/audit", route_access::ops,
                                      "Audit log of operator actions (masked, truncated parameters)"};
inline constexpr route_spec ops_config{"GET", "/api/v1/ops/config", route_access::ops,
                                       "Effective configuration with the source of each value"};
inline constexpr route_spec ops_instances{"GET", "/api/v1/ops/instances", route_access::ops,
                                          "Instances, their leases and the operations each owns"};
inline constexpr route_spec ops_callbacks{"GET", "/api/v1/ops/callbacks", route_access::ops,
                                          "Callback outcome counts and recent stale/duplicate/out-of-order deliveries"};
inline constexpr route_spec ops_notifications{
    "GET", "/api/v1/ops/notifications", route_access::ops,
    "Notification deliveries, newest first (pending, delivered, failed; attempts, last error, next try); "
    "filters state, operationId, subscriptionId; paged by limit/after"};
inline constexpr route_spec ops_reconcile{"POST", "/api/v1/ops/reconcile", route_access::ops,
                                          "Run reconciliation of lost deploy callbacks now"};
inline constexpr route_spec ops_batches{"GET", "/api/v1/ops/batches", route_access::ops, "Batches, newest first"};
inline constexpr route_spec ops_batch{"GET", "/api/v1/ops/batches/{id}", route_access::ops,
                                      "One batch with its members and the waiting set"};
inline constexpr route_spec ops_batch_settle{"POST", "/api/v1/ops/batches/{id}/settle", route_access::ops,
                                             "Settle a batch (close, re-read, merged wins)"};
inline constexpr route_spec ops_batch_unblock{"POST", "/api/v1/ops/batches/{id}/unblock", route_access::ops,
                                              "Release a BLOCKED batch's slot"};
inline constexpr route_spec ops_batch_round{"POST", "/api/v1/ops/batch/round", route_access::ops,
                                            "Run a batch admission round now"};
inline constexpr route_spec console_0{"GET", "/console", route_access::open,
                                      "Ops console (single-page app and its hashed assets)"};
inline constexpr route_spec console_1{"GET", "/console/{s1}", route_access::open,
                                      "Ops console (single-page app and its hashed assets)"};
inline constexpr route_spec console_2{"GET", "/console/{s1}/{s2}", route_access::open,
                                      "Ops console (single-page app and its hashed assets)"};
inline constexpr route_spec console_3{"GET", "/console/{s1}/{s2}/{s3}", route_access::open,
                                      "Ops console (single-page app and its hashed assets)"};
inline constexpr route_spec console_4{"GET", "/console/{s1}/{s2}/{s3}/{s4}", route_access::open,
                                      "Ops console (single-page app and its hashed assets)"};
inline constexpr route_spec console_5{"GET", "/console/{s1}/{s2}/{s3}/{s4}/{s5}", route_access::open,
                                      "Ops console (single-page app and its hashed assets)"};
inline constexpr route_spec console_6{"GET", "/console/{s1}/{s2}/{s3}/{s4}/{s5}/{s6}", route_access::open,
                                      "Ops console (single-page app and its hashed assets)"};
inline constexpr route_spec healthz{"GET", "/healthz", route_access::open, "Process alive"};
inline constexpr route_spec readyz{"GET", "/readyz", route_access::open,
                                   "Ready: database reachable, schema current, service ready"};
inline constexpr route_spec metrics{"GET", "/metrics", route_access::open, "Prometheus text exposition"};
inline constexpr route_spec openapi{"GET", "/api/openapi.json", route_access::open, "This document"};
/// The console's single-page app: the router matches whole segments, so one pattern per depth.
inline constexpr std::array console = {&console_0, &console_1, &console_2, &console_3,
                                       &console_4, &console_5, &console_6};
}  // namespace routes

/// Every route, in the order the policy table always listed them.
inline constexpr std::array all_routes = {&routes::submit_change,
                                          &routes::preview_change,
                                          &routes::get_change,
                                          &routes::cancel_change,
                                          &routes::list_changes,
                                          &routes::subscribe,
                                          &routes::list_subscriptions,
                                          &routes::unsubscribe,
                                          &routes::approval_callback,
                                          &routes::deploy_callback,
                                          &routes::gitlab_webhook,
                                          &routes::ops_whoami,
                                          &routes::ops_overview,
                                          &routes::ops_attention,
                                          &routes::ops_actors,
                                          &routes::ops_operations,
                                          &routes::ops_operation,
                                          &routes::ops_retrigger,
                                          &routes::ops_fail,
                                          &routes::ops_close,
                                          &routes::ops_resend_approval,
                                          &routes::ops_confirm,
                                          &routes::ops_bulk,
                                          &routes::ops_audit,
                                          &routes::ops_config,
                                          &routes::ops_instances,
                                          &routes::ops_callbacks,
                                          &routes::ops_notifications,
                                          &routes::ops_reconcile,
                                          &routes::ops_batches,
                                          &routes::ops_batch,
                                          &routes::ops_batch_settle,
                                          &routes::ops_batch_unblock,
                                          &routes::ops_batch_round,
                                          &routes::console_0,
                                          &routes::console_1,
                                          &routes::console_2,
                                          &routes::console_3,
                                          &routes::console_4,
                                          &routes::console_5,
                                          &routes::console_6,
                                          &routes::healthz,
                                          &routes::readyz,
                                          &routes::metrics,
                                          &routes::openapi,
                                          &routes::revert_change};

}  // namespace changeflow::http
