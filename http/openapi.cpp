#include "http/openapi.hpp"

#include "base/log.hpp"
#include "http/route_table.hpp"

#include <algorithm>
#include <cctype>

namespace changeflow::http {

namespace {

// The document. Envelope, error codes and the idempotency contract are described once in
// components and referenced by every operation. docs/api.md is the prose companion.
constexpr const char* document_text = R"json({
  "openapi": "3.0.3",
  "info": {
    "title": "changeflow API",
    "version": "1.0.0",
    "description": "Configuration-as-code change requests carried through approval, a GitLab MR, its pipeline, bot approval and merge, and a deploy callback. Every JSON response uses the envelope {code, message, data}. See docs/api.md."
  },
  "components": {
    "securitySchemes": {
      "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT (HS256, exp required)"},
      "approvalSignature": {"type": "apiKey", "in": "header", "name": "X-Signature", "description": "sha256=<hex HMAC-SHA256(body, callbacks.approval_secret)>"},
      "deployToken": {"type": "apiKey", "in": "header", "name": "X-Gitlab-Token"},
      "gitlabToken": {"type": "apiKey", "in": "header", "name": "X-Gitlab-Token", "description": "the webhook_secret of the repository named by project.path_with_namespace"}
    },
    "parameters": {
      "IdempotencyKey": {"name": "Idempotency-Key", "in": "header", "required": false, "schema": {"type": "string", "maxLength": 200}, "description": "Key of this write; defaults to the body's operationId. A retry with the same key and body replays the original response byte for byte; the same key with another body is 422; while the first request runs, 409 REQUEST_IN_FLIGHT."},
      "OperationId": {"name": "id", "in": "path", "required": true, "schema": {"type": "string", "format": "uuid"}}
    },
    "schemas": {
      "Envelope": {
        "type": "object",
        "required": ["code", "message", "data"],
        "properties": {
          "code": {"type": "string", "description": "Machine-readable outcome: OK, CREATED, ACCEPTED, DUPLICATE_SUBMIT, BAD_REQUEST, UNAUTHENTICATED, FORBIDDEN, ACCESS_CLOSED, NOT_FOUND, METHOD_NOT_ALLOWED, IN_PROGRESS, REQUEST_IN_FLIGHT, IDEMPOTENCY_KEY_REUSED, RATE_LIMITED, INTERNAL_ERROR, UNAVAILABLE, OVERLOADED"},
          "message": {"type": "string"},
          "data": {"nullable": true}
        }
      },
      "ErrorData": {"type": "object", "properties": {"errorId": {"type": "string", "description": "5xx only: quote it to the maintainers; it is in the server log line."}}},
      "SubmitRequest": {
        "type": "object",
        "required": ["subject", "target", "title", "files"],
        "properties": {
          "operationId": {"type": "string", "format": "uuid"},
          "subject": {"type": "string"},
          "target": {"type": "string"},
          "repository": {"type": "string", "description": "GitLab project path (group/project), one of the configured repositories; may be omitted when exactly one is configured"},
          "targetBranch": {"type": "string", "description": "branch the change merges into, one of the repository's configured branches; may be omitted when the repository has exactly one"},
          "title": {"type": "string"},
          "files": {"type": "array", "items": {"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}, "content": {"type": "string", "description": "required unless action is delete"}, "action": {"type": "string", "enum": ["create", "update", "delete", "upsert"], "default": "upsert", "description": "upsert: make the file look like this (create or update, picked from the target branch when the change is committed)"}, "lastCommitId": {"type": "string", "pattern": "^[0-9a-fA-F]{40}([0-9a-fA-F]{24})?$", "description": "The file's last commit the change is based on (update, delete, upsert). A newer version on the target ends the change CONTENT_CONFLICT instead of overwriting it. Absent: the target's version when the change first reaches GitLab."}}}}
        }
      },
      "SubscriptionRequest": {
        "type": "object",
        "required": ["url"],
        "description": "At least one of subject and operationId; no other fields.",
        "properties": {
          "subject": {"type": "string", "maxLength": 128},
          "operationId": {"type": "string", "format": "uuid"},
          "url": {"type": "string", "maxLength": 1024, "description": "absolute http:// URL events are POSTed to"},
          "secret": {"type": "string", "minLength": 16, "maxLength": 255, "description": "HMAC key of X-Changeflow-Signature; generated when absent"}
        }
      }
    },
    "responses": {
      "Unauthenticated": {"description": "401 UNAUTHENTICATED: no valid identity", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}}},
      "Forbidden": {"description": "403 FORBIDDEN, message always \"Access denied\"", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}}},
      "RateLimited": {"description": "429 RATE_LIMITED with Retry-After and RateLimit-* headers", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}}},
      "ServerError": {"description": "500 INTERNAL_ERROR / 503 UNAVAILABLE or OVERLOADED: generic message and data.errorId", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}}}
    }
  },
  "paths": {
    "/api/v1/changes": {
      "post": {
        "description": "Rate limited (rate_limit.submit per identity, else per client address); identity required unless auth.required is false; the requester is the verified identity (a body field requester/actor/applicant is a 400); the subject needs its rule code (auth.subject_rule) or an operator code (auth.ops_rules) at the permission service, else 403 FORBIDDEN; refused with 403 ACCESS_CLOSED when access.mode/access.window closes user writes. Rate limiting runs before the idempotency check.",
        "security": [{}, {"bearer": []}],
        "parameters": [{"$ref": "#/components/parameters/IdempotencyKey"}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubmitRequest"}}}},
        "responses": {
          "202": {"description": "ACCEPTED (new) or DUPLICATE_SUBMIT (this operation exists already: keep the form locked); data {operationId, statusUrl, phase?, step?}"},
          "400": {"description": "BAD_REQUEST: the message says what to fix (an unknown or missing repository or targetBranch names the configured ones); nothing is stored"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"description": "FORBIDDEN (\"Access denied\": not permitted for this subject, or the permission service failed) or ACCESS_CLOSED (user writes are switched off now)"},
          "409": {"description": "IN_PROGRESS (another change for this subject and target in this repository is running) or REQUEST_IN_FLIGHT (the first request with this idempotency key is still running; retry after Retry-After)"},
          "422": {"description": "IDEMPOTENCY_KEY_REUSED: the key was used for a different body"},
          "429": {"$ref": "#/components/responses/RateLimited"},
          "500": {"$ref": "#/components/responses/ServerError"},
          "503": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "get": {
        "parameters": [
          {"name": "subject", "in": "query", "required": false, "schema": {"type": "string"}},
          {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}}
        ],
        "responses": {"200": {"description": "OK; data {items: [...]}"}, "400": {"description": "BAD_REQUEST"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/changes/preview": {
      "post": {
        "description": "The submit body, validated, and each file diffed (unified diff) against the target branch's current content read with GitLab's repository files API. Writes nothing. Same authorization as a submit (identity, the subject's rule code or an operator code; rate_limit.submit); not closed by the access switch. A failed GitLab read (or a busy service) answers 200 with data {reason} and no files: a preview never keeps anyone from submitting.",
        "security": [{}, {"bearer": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubmitRequest"}}}},
        "responses": {
          "200": {"description": "OK; data {valid, files: [{path, action (upsert resolved), exists, lastCommitId (the base to submit with, null for a missing file), diff, problem (why the commit would be refused, or null)}]}; a failed read: {reason} only"},
          "400": {"description": "BAD_REQUEST: the body a submit would refuse (the message says what to fix)"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "429": {"$ref": "#/components/responses/RateLimited"}
        }
      }
    },
    "/api/v1/changes/{id}": {
      "get": {
        "description": "The change's status: one primary-key read (none for a change that ended CANCELLED, CLOSED or REJECTED: answered from memory). The timeline only with include=timeline. A plain read of a change in flight may be answered from the row this instance read less than http.status_cache_ms ago; every write through this instance drops it at once, a write through another instance is seen within that bound; Cache-Control: no-cache always reads the database. With wait, a blocking read (long-poll): answered as soon as the change's version passes since (default: the version it has when the wait begins), or it has ended (VALIDATED, REJECTED, CLOSED, CANCELLED, or a failure awaiting an operator), or after wait milliseconds with the unchanged state. A write of the instance holding the wait answers it at once; a write made through another instance within http.status_wait_recheck_ms. A wait is cut at http.handler_timeout_ms minus one second.",
        "parameters": [{"$ref": "#/components/parameters/OperationId"},
          {"name": "include", "in": "query", "required": false, "schema": {"type": "string", "enum": ["timeline"]}, "description": "timeline: add the timeline (one more query)"},
          {"name": "wait", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0, "maximum": 25000}, "description": "milliseconds to wait for the change to move (0: answer at once)"},
          {"name": "since", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0}, "description": "with wait: the version the caller has seen; a newer one answers at once"}],
        "responses": {"200": {"description": "OK; data is the operation with its live flag (and its timeline with include=timeline)"}, "400": {"description": "BAD_REQUEST: include other than timeline, wait not a number from 0 to 25000, since without wait or not a version"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "404": {"description": "NOT_FOUND: no such operation, or one the caller may not see (its requester, callers holding its subject's code and operators may); answered at once, also to a wait"}, "503": {"description": "OVERLOADED (the read pool is full, or http.status_wait_max waits are held) or a database failure"}}
      }
    },
    "/api/v1/changes/{id}/cancel": {
      "post": {
        "parameters": [{"$ref": "#/components/parameters/OperationId"}],
        "responses": {"200": {"description": "OK; data {phase: CANCELLED, withdrawn: [...]} or {alreadyCancelled: true}"}, "400": {"description": "BAD_REQUEST"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "404": {"description": "NOT_FOUND"}, "409": {"description": "ALREADY_MERGED (merged wins) or CONFLICT (cannot be cancelled at this step)"}, "429": {"$ref": "#/components/responses/RateLimited"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/changes/{id}/revert": {
      "post": {
        "description": "Reverts a VALIDATED change with a NEW change: same subject, target, repository and targetBranch, title \"Revert: <title>\", its own approval, MR and lifecycle. Each file goes back to its content at the change's base (its MR's diff_refs.base_sha); a file the change created is deleted. Updates and deletes carry the file's current last commit on the target as lastCommitId, so a later edit by someone else ends the revert CONTENT_CONFLICT instead of being overwritten. The new change's status has revertOf, the original's revertedBy, and each timeline an event naming the other. Authorization as a submit for the change's subject (its rule code or an operator code; a caller who may only see the change gets 403, anyone else 404); rate limited and closed by the access switch like a submit. Idempotent like a submit: Idempotency-Key header, else the body's operationId (the key is scoped to the change being reverted).",
        "security": [{}, {"bearer": []}],
        "parameters": [{"$ref": "#/components/parameters/OperationId"}, {"$ref": "#/components/parameters/IdempotencyKey"}],
        "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object", "additionalProperties": false, "properties": {"operationId": {"type": "string", "format": "uuid", "description": "the revert's id"}}}}}},
        "responses": {
          "202": {"description": "ACCEPTED; data {operationId (the revert), revertOf, statusUrl, phase, step}; or DUPLICATE_SUBMIT (this revert exists already)"},
          "400": {"description": "BAD_REQUEST: a body field other than operationId, a malformed operationId or Idempotency-Key"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"description": "FORBIDDEN (\"Access denied\": not permitted to submit for the change's subject) or ACCESS_CLOSED"},
          "404": {"description": "NOT_FOUND: no such change, or one the caller may not see"},
          "409": {"description": "CONFLICT (the change is not VALIDATED, the target already holds its files as they were, or its repository or target branch is no longer configured: the message says which), ALREADY_REVERTED (data {revertOperationId, statusUrl}: its revert is in flight or took effect; a revert that ended without taking effect allows another), IN_PROGRESS (another change holds the target) or REQUEST_IN_FLIGHT"},
          "422": {"description": "IDEMPOTENCY_KEY_REUSED: the key was used for a different request"},
          "429": {"$ref": "#/components/responses/RateLimited"},
          "500": {"$ref": "#/components/responses/ServerError"},
          "503": {"description": "UNAVAILABLE with Retry-After: GitLab could not be read for the previous contents, nothing was written; or OVERLOADED"}
        }
      }
    },
    "/api/v1/subscriptions": {
      "post": {
        "description": "Subscribe a URL to the phase changes of a subject's changes (subject) or of one change (operationId), see docs/notifications.md. Rate limited like a submit; identity required unless auth.required is false; never closed by the access switch. A change needs the right to see it (else 404 as for reads), a subject its rule code or an operator code (else 403). The secret (the client's, or 64 generated hex characters) is answered only here.",
        "security": [{}, {"bearer": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubscriptionRequest"}}}},
        "responses": {
          "201": {"description": "CREATED; data {subscriptionId, subject, operationId, url, owner, secret}"},
          "400": {"description": "BAD_REQUEST: malformed body, a URL that is not absolute http or https with a host, a secret outside 16-255 printable characters, or a subject that is not the change's own"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"description": "NOT_FOUND: no such change, or one the caller may not see"},
          "429": {"$ref": "#/components/responses/RateLimited"},
          "503": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "get": {
        "security": [{}, {"bearer": []}],
        "parameters": [{"name": "all", "in": "query", "required": false, "schema": {"type": "boolean"}, "description": "true: everybody's subscriptions (operators only)"}, {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 500}}],
        "responses": {"200": {"description": "OK; data {items: [{subscriptionId, subject, operationId, url, owner, createdAtMs, deliveries {PENDING, DELIVERED, FAILED}}]} (never the secret)"}, "400": {"description": "BAD_REQUEST"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/subscriptions/{id}": {
      "delete": {
        "security": [{}, {"bearer": []}],
        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string", "format": "uuid"}}],
        "responses": {"200": {"description": "OK; data {subscriptionId, givenUp: undelivered events marked FAILED}"}, "400": {"description": "BAD_REQUEST: a body was sent (DELETE takes none)"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "404": {"description": "NOT_FOUND: no such subscription, or not the caller's (operators may delete any)"}, "429": {"$ref": "#/components/responses/RateLimited"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/callbacks/approval": {
      "post": {
        "security": [{"approvalSignature": []}],
        "responses": {"200": {"description": "OK (applied, or ignored as stale/duplicate)"}, "400": {"description": "BAD_REQUEST"}, "401": {"description": "UNAUTHENTICATED: signature missing or invalid"}, "429": {"$ref": "#/components/responses/RateLimited"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/callbacks/deploy": {
      "post": {
        "security": [{"deployToken": []}],
        "responses": {"200": {"description": "OK"}, "400": {"description": "BAD_REQUEST"}, "401": {"description": "UNAUTHENTICATED: token missing or invalid"}, "429": {"$ref": "#/components/responses/RateLimited"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/webhooks/gitlab": {
      "post": {
        "security": [{"gitlabToken": []}],
        "responses": {"200": {"description": "OK; data.outcome DELIVERED | IGNORED | DUPLICATE, or for a Deployment Hook the deploy callback's outcome (APPLIED | DEPLOY_FAILED | IGNORED_STALE | OUT_OF_ORDER)"}, "400": {"description": "BAD_REQUEST: not a JSON object, or a hook without the fields it needs"}, "401": {"description": "UNAUTHENTICATED: X-Gitlab-Token missing or not the project's webhook_secret"}, "429": {"$ref": "#/components/responses/RateLimited"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/ops/whoami": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK; data {operator, params}"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/overview": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/attention": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK; data {nowMs, pollMs, counts {FAILED, OUTCOME_UNKNOWN, LATE_WAIT, OVERDUE_APPROVAL, STUCK_ACTOR, CALLBACK_UNAPPLIED}, truncated, items: [{reason, waitsFor, operationId, title, step {code, name}, phase, sinceMs, ageMs, dueMs, dueLabel, lastError, lastErrorStatus, lastErrorAtMs, deliveryId, callbackKind, callbackOutcome}]} (oldest first)"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "429": {"$ref": "#/components/responses/RateLimited"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/ops/actors": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/operations": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/operations/{id}": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/operations/{id}/retrigger": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/operations/{id}/fail": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/operations/{id}/close": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/operations/{id}/confirm": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/operations/{id}/resend-approval": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/bulk/{action}": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/audit": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/config": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/instances": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/callbacks": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/notifications": {
      "get": {
        "security": [{"bearer": []}],
        "parameters": [{"name": "state", "in": "query", "required": false, "schema": {"type": "string", "enum": ["PENDING", "DELIVERED", "FAILED"]}}, {"name": "operationId", "in": "query", "required": false, "schema": {"type": "string", "format": "uuid"}}, {"name": "subscriptionId", "in": "query", "required": false, "schema": {"type": "string", "format": "uuid"}}, {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 500}}, {"name": "after", "in": "query", "required": false, "schema": {"type": "integer"}, "description": "nextAfter of the previous page"}],
        "responses": {"200": {"description": "OK; data {counts {PENDING, DELIVERED, FAILED}, items: [{deliveryId, subscriptionId, url, operationId, sequence, kind, state, attempts, lastStatus, lastError, nextAttemptAtMs, claimedBy, createdAtMs, deliveredAtMs}], nextAfter}"}, "400": {"description": "BAD_REQUEST: a filter is malformed"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "429": {"$ref": "#/components/responses/RateLimited"}, "503": {"$ref": "#/components/responses/ServerError"}}
      }
    },
    "/api/v1/ops/reconcile": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/batches": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/batches/{id}": {
      "get": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/batches/{id}/settle": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/batches/{id}/unblock": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/api/v1/ops/batch/round": {
      "post": {
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "OK"}, "401": {"$ref": "#/components/responses/Unauthenticated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "409": {"description": "Refused in the current state"}, "429": {"$ref": "#/components/responses/RateLimited"}}
      }
    },
    "/console": {"get": {"responses": {"200": {"description": "HTML or asset"}, "404": {"description": "Missing asset (JSON, no-store)"}}}},
    "/console/{s1}": {"get": {"responses": {"200": {"description": "HTML or asset"}, "404": {"description": "Missing asset (JSON, no-store)"}}}},
    "/console/{s1}/{s2}": {"get": {"responses": {"200": {"description": "HTML or asset"}, "404": {"description": "Missing asset (JSON, no-store)"}}}},
    "/console/{s1}/{s2}/{s3}": {"get": {"responses": {"200": {"description": "HTML or asset"}, "404": {"description": "Missing asset (JSON, no-store)"}}}},
    "/console/{s1}/{s2}/{s3}/{s4}": {"get": {"responses": {"200": {"description": "HTML or asset"}, "404": {"description": "Missing asset (JSON, no-store)"}}}},
    "/console/{s1}/{s2}/{s3}/{s4}/{s5}": {"get": {"responses": {"200": {"description": "HTML or asset"}, "404": {"description": "Missing asset (JSON, no-store)"}}}},
    "/console/{s1}/{s2}/{s3}/{s4}/{s5}/{s6}": {"get": {"responses": {"200": {"description": "HTML or asset"}, "404": {"description": "Missing asset (JSON, no-store)"}}}},
    "/healthz": {"get": {"responses": {"200": {"description": "OK"}}}},
    "/readyz": {"get": {"responses": {"200": {"description": "OK"}, "503": {"description": "NOT_READY with data.reason"}}}},
    "/metrics": {"get": {"responses": {"200": {"description": "text/plain; version=0.0.4"}}}},
    "/api/openapi.json": {"get": {"responses": {"200": {"description": "OpenAPI 3 document (not enveloped)"}}}}
  }
})json";

}  // namespace

const nlohmann::json& openapi_document() {
  static const nlohmann::json doc = [] {
    auto parsed = nlohmann::json::parse(document_text, nullptr, false);
    if (parsed.is_discarded()) {
      log::error("openapi.invalid_document", {});
      return nlohmann::json::object();
    }
    // Paths and summaries come from the route table; the text above adds parameters, bodies and
    // answers. A route the text does not describe still appears, with its summary.
    for (const route_spec* spec : all_routes) {
      std::string method(spec->method);
      std::transform(method.begin(), method.end(), method.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      auto& op = parsed["paths"][std::string(spec->pattern)][method];
      if (!op.contains("responses")) {
        log::error("openapi.route_without_answers", {{"method", spec->method}, {"pattern", spec->pattern}});
      }
      op["summary"] = spec->summary;
    }
    return parsed;
  }();
  return doc;
}

std::set<std::pair<std::string, std::string>> documented_operations(const nlohmann::json& doc) {
  std::set<std::pair<std::string, std::string>> out;
  if (!doc.contains("paths") || !doc["paths"].is_object()) return out;
  static const std::set<std::string> methods = {"get", "put", "post", "delete", "patch", "head", "options"};
  for (const auto& [path, item] : doc["paths"].items()) {
    if (!item.is_object()) continue;
    for (const auto& [method, op] : item.items()) {
      if (!methods.count(method)) continue;
      std::string upper = method;
      std::transform(upper.begin(), upper.end(), upper.begin(),
                     [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
      out.emplace(upper, path);
    }
  }
  return out;
}

void add_openapi_route(router& r) {
  r.add({routes::openapi, [](http_server::request&, const path_params&, http_server::responder reply) {
           http_server::response res;
           res.body = log::safe_dump(openapi_document());
           reply(std::move(res));
         }});
}

}  // namespace changeflow::http
