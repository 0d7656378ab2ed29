#pragma once
// Wire shapes of the user API, with their JSON conversion beside them. These are not actor messages:
// the HTTP shape and the actor protocol change independently.

#include "persistence/operation_repo.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace changeflow::http::dto {

struct file_change {
  std::string path;
  std::string content;
  // create | update | delete | upsert ("make the file look like this": create or update, picked
  // from the branch when the change is committed). Absent means upsert.
  std::string action = "upsert";
  // The commit the user based an update, delete or upsert on (the file's last commit then): the
  // change fails CONTENT_CONFLICT instead of overwriting a newer version. Absent: captured when
  // the change first reaches GitLab.
  std::optional<std::string> last_commit_id;
};

struct submit_request {
  std::optional<std::string> operation_id;  // client-supplied UUID, used as the idempotency key
  std::string subject;
  std::string target;
  std::string title;
  std::vector<file_change> files;
  /// Where the change goes; validated against the configured repositories by the handler
  /// (config::resolve_target). Absent: the one configured repository and branch, if there is one.
  std::optional<std::string> repository;
  std::optional<std::string> target_branch;
};

/// Parses and validates; on failure returns the actionable message for the client.
struct parse_error {
  std::string message;
};
std::variant<submit_request, parse_error> parse_submit(const std::string& body);

/// POST /api/v1/changes/{id}/cancel: an empty body, or {"reason": "..."} (at most 500 characters).
struct cancel_request {
  std::string reason;
};
std::variant<cancel_request, parse_error> parse_cancel(const std::string& body);

/// POST /api/v1/changes/{id}/revert: an empty body, or {"operationId": "<uuid>"} (the revert's id,
/// also its idempotency key when no Idempotency-Key header is sent). Anything else is refused: the
/// revert's subject, target, title and files come from the change it reverts.
struct revert_request {
  std::optional<std::string> operation_id;
};
std::variant<revert_request, parse_error> parse_revert(const std::string& body);

/// GET /api/v1/changes/{id}: `include=timeline` adds the timeline; `wait=<ms>` (0-25000) answers
/// once the change moved past `since=<version>` (default: the version it has when the wait begins)
/// or ended, or the wait ran out. Each argument as the query string gave it (nullopt: absent).
struct status_params {
  bool timeline = false;
  std::int64_t wait_ms = 0;
  std::optional<std::int64_t> since;
};
std::variant<status_params, parse_error> parse_status_params(const std::optional<std::string>& include,
                                                             const std::optional<std::string>& wait,
                                                             const std::optional<std::string>& since,
                                                             std::int64_t max_wait_ms);

/// The stored payload of an operation (what the MR will carry).
std::string payload_json(const submit_request& r);

nlohmann::json to_json(const persistence::operation_row& row);
nlohmann::json to_json(const persistence::operation_event_row& e);
/// The status document of one change: what GET /api/v1/changes/{id} answers (the row and whether an
/// actor drives it here)...
nlohmann::json status_document(const persistence::operation_row& row, bool live);
/// ...with its timeline: what GET /api/v1/changes/{id}?include=timeline answers and what every
/// notification carries as "change".
nlohmann::json status_document(const persistence::operation_row& row,
                               const std::vector<persistence::operation_event_row>& events, bool live);

/// The whole body of a plain status read's answer (200 OK): byte for byte what the envelope
/// (`{"code":"OK","data":status_document(row, live),"message":"OK"}`) dumps, written straight into
/// one string. A status read is the most frequent request (clients poll), and building the JSON tree
/// of the document, copying it into the envelope's tree and dumping that cost more than the rest of
/// the read.
std::string status_body(const persistence::operation_row& row, bool live);

/// Milliseconds since the epoch as the API writes times: "2026-12-05T14:03:07.042Z" (UTC).
std::string ms_to_iso(std::int64_t ms);

}  // namespace changeflow::http::dto
