#pragma once
// GitLab's own webhooks in: a Pipeline or Merge Request Hook is made durable (ledger row, kind
// gitlab, deduplicated by the event UUID) before the sender's 2xx, then handed as a typed message
// to the live actor of the MR it names, whose wait then ends at once (the actor reads the MR now;
// the read decides, exactly as a poll would). A Deployment Hook confirms or fails the deploy
// through the deploy callback's intake (take_deploy), its commit mapped to the MR a merge event
// recorded. Polling stays as the fallback for a lost hook. See docs/callbacks.md.

#include "persistence/session.hpp"
#include "runtime/services.hpp"
#include "service/callback_intake.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace changeflow::service {

struct gitlab_delivery {
  enum class kind { pipeline, merge_request, deployment, other };
  kind what = kind::other;
  std::string delivery_id;  // X-Gitlab-Event-UUID (or Idempotency-Key)
  std::string project;      // a configured repository (the caller checked it and the token)
  std::optional<std::int64_t> mr_iid;
  std::int64_t pipeline_id = 0;  // pipeline id, or the deployment id of a Deployment Hook
  std::string sha;               // pipeline: its commit; deployment: the deployed commit
  std::string status;            // pipeline or deployment status
  std::string action;            // merge request: merge, close, ...
  std::string merge_commit_sha;  // merge request: set once merged
  std::string payload;
};

enum class gitlab_intake_status {
  answered,       // recorded and classified: `outcome`
  duplicate,      // a copy of a delivery already handled (or being handled by this process)
  record_failed,  // nothing recorded: `error` (the sender retries)
  apply_failed,   // recorded, not applied: `error`; the row stays PENDING and a retry applies it
};

struct gitlab_intake {
  gitlab_intake_status status = gitlab_intake_status::record_failed;
  std::string outcome;  // DELIVERED | IGNORED, or the deploy intake's outcome for a Deployment Hook
  int delivered = 0;    // live actors told
  deploy_intake deploy;
  persistence::db_error error;
};

/// Tells the batch coordinator that MR `mr_iid` of `project` changed (it ignores MRs it does not drive).
using tell_batch_fn = std::function<void(const std::string& project, std::int64_t mr_iid)>;

/// Records, routes and delivers one hook. Runs on a database worker.
gitlab_intake take_gitlab_event(persistence::session db, runtime::services& svc, delivery_claims& claims,
                                const gitlab_delivery& d, const tell_batch_fn& tell_batch);

}  // namespace changeflow::service
