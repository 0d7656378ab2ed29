#pragma once
// Callback intake: an approval decision or a deploy result from outside, made durable and applied
// before the sender gets its 2xx, then the live actor told. The HTTP layer authenticates and parses
// the delivery and renders the result; webhooks of other shapes feed the same intake.

#include "persistence/callback_repo.hpp"
#include "persistence/reconcile_repo.hpp"
#include "persistence/session.hpp"
#include "runtime/services.hpp"

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace changeflow::service {

/// changeflow_callbacks_total{kind, outcome}: every delivery, refused ones included.
void count_callback(metrics::registry& m, std::string_view kind, std::string_view outcome);

// -- approval

struct approval_delivery {
  std::string delivery_id;
  std::string operation_id;
  persistence::approval_result decision = persistence::approval_result::APPROVED;
  std::string result;   // the decision as sent, for the log
  std::string payload;  // the body as received, kept in the ledger
};

struct approval_intake {
  bool ok = false;  // false: `error` (nothing applied; the sender retries)
  persistence::callback_outcome outcome = persistence::callback_outcome::IGNORED_STALE;
  persistence::db_error error;
};

class delivery_claims;

/// Deduplicates, validates and applies the decision in one transaction, counts it, and wakes the
/// actor (also for a duplicate: the first copy's 2xx may have been lost with a crash right after the
/// commit, so make sure an actor drives the applied row). Runs on a database worker.
/// With `claims`, a copy of a delivery this process applied (for the same operation) is answered
/// DUPLICATE from memory and wakes nobody: the first copy told the actor, and no crash came between.
approval_intake take_approval(persistence::session db, runtime::services& svc, const approval_delivery& d,
                              delivery_claims* claims = nullptr);

/// take_approval through the group committer (runtime::services::transitions): the delivery's
/// record and flip commit with the transitions ready at the same moment. `done` runs once with the
/// intake, on a database worker; a copy of a delivery this process settled is answered DUPLICATE
/// at once, on the caller's thread (no job anywhere). False when there is no committer or it
/// refused (a full queue), or a copy of this delivery is being applied by this process right now:
/// nothing was done and the caller runs take_approval itself.
bool take_approval_grouped(runtime::services& svc, const approval_delivery& d, std::shared_ptr<delivery_claims> claims,
                           std::function<void(approval_intake)> done);

// -- deploy

/// Deliveries this process is applying right now, and the last ones it settled. A copy that arrives
/// meanwhile (senders do deliver twice, at once) is a plain DUPLICATE; so is a copy of a delivery this
/// process recorded and classified (its ledger row is committed and final, so that is the answer the
/// database would give), without a read. A copy of a delivery recorded but left PENDING by a process
/// that died is applied by the copy. Across instances both may apply: harmless (guarded writes,
/// flip-once validation), only the ledger's label is then the first one's.
class delivery_claims {
 public:
  /// False when a copy holds the id, or the id was settled here.
  bool claim(const std::string& id);
  void release(const std::string& id);
  /// The delivery's unit committed its classification: later copies are answered from memory (the
  /// last `remembered` ids; older ones read the ledger as before).
  void settled(const std::string& id);
  bool is_settled(const std::string& id);
  static constexpr std::size_t remembered = 8192;

  /// A claim released when it goes out of scope; `held()` is false when another copy holds the id.
  class scoped {
   public:
    scoped(delivery_claims& claims, std::string id) : claims_(claims), id_(std::move(id)), held_(claims.claim(id_)) {}
    ~scoped() {
      if (held_) claims_.release(id_);
    }
    scoped(const scoped&) = delete;
    scoped& operator=(const scoped&) = delete;
    bool held() const { return held_; }

   private:
    delivery_claims& claims_;
    std::string id_;
    bool held_;
  };

 private:
  std::mutex mutex_;
  std::set<std::string> ids_;
  std::unordered_set<std::string> settled_;
  std::deque<std::string> settled_order_;  // oldest first, to forget beyond `remembered`
};

struct deploy_delivery {
  persistence::deploy_callback_in cb;
  std::vector<std::string> operation_ids;  // named by the sender; empty: matched by (project, MR iid)
  std::string payload;
};

enum class deploy_intake_status {
  applied,        // recorded and classified: `outcome` and the counts
  duplicate,      // a copy of a delivery already applied (or being applied by this process)
  record_failed,  // nothing recorded: `error` (the sender retries)
  apply_failed,   // recorded but not applied: `error`; the ledger row stays PENDING and a retry applies it
};

struct deploy_intake {
  deploy_intake_status status = deploy_intake_status::record_failed;
  persistence::deploy_outcome outcome = persistence::deploy_outcome::IGNORED_STALE;
  int matched = 0;
  int validated = 0;
  int failed = 0;                          // moved to DEPLOY_FAILED by this delivery
  std::vector<std::string> operation_ids;  // the operations it was matched to (named, or by MR number)
  bool settled = false;                    // the ledger outcome was recorded with the validation
  persistence::db_error error;
};

/// Records the delivery (the MR number and the ledger row commit together), then applies it: a
/// success validates the named (or matched) operations, a failure moves them to DEPLOY_FAILED.
/// `our_project` is the callback's project when it is a configured repository, else "". Runs on a database worker.
deploy_intake take_deploy(persistence::session db, runtime::services& svc, delivery_claims& claims,
                          const deploy_delivery& d, const std::string& our_project);

/// take_deploy through the group committer for a success that names one operation (every
/// single-change MR): its record, flip and classification commit with the transitions ready at the
/// same moment. `done` runs once with the intake, on a database worker. False when the delivery is
/// of another kind, or there is no committer or it refused: nothing was done and the caller runs
/// take_deploy itself.
bool take_deploy_grouped(runtime::services& svc, std::shared_ptr<delivery_claims> claims, const deploy_delivery& d,
                         const std::string& our_project, std::function<void(deploy_intake)> done);

}  // namespace changeflow::service
