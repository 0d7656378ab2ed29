#pragma once
// Deploy callbacks and reconciliation of lost ones.
//
// A deploy callback names an MR; the MR -> operation mapping is ours (operation.mr_iid), so a
// callback without operation ids is still matched exactly by its MR number. Every deploy delivery
// is recorded twice in one transaction: in `deploy_callback` (its MR number feeds the watermark)
// and in `callback_ledger` (kind 'deploy', the classified outcome). The watermark is the largest MR
// number of the project with a successful deploy callback; reconciliation compares each MERGED
// operation's MR number with it (see actors/reconciler.hpp for the inference and its condition).

#include "persistence/callback_repo.hpp"
#include "persistence/operation_repo.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"
#include "workflow/status.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::persistence {

/// An operation that carries an MR number, with where its binding stands (nullopt when a re-apply
/// gave the binding to another operation).
struct mr_operation {
  std::string operation_id;
  workflow::step step = workflow::step::APPROVAL_SENDING;
  std::optional<workflow::phase> binding_phase;
};
/// Every operation of `repository` whose mr_iid is `mr_iid` (a batch MR carries several), one
/// query. MR numbers are per project: the same number in another repository is another MR.
db_result<std::vector<mr_operation>> operations_for_mr(session s, const std::string& repository, std::int64_t mr_iid);

/// Closed set of deploy-callback outcomes, as recorded in the ledger and counted.
enum class deploy_outcome {
  APPLIED,        // at least one operation flipped MERGED -> VALIDATED by this delivery
  DUPLICATE,      // this delivery id was seen before: nothing written
  IGNORED_STALE,  // nothing to flip (already validated, replaced, unknown MR or other project)
  OUT_OF_ORDER,   // a matched operation is not MERGED yet: the callback overtook our own write
  DEPLOY_FAILED,  // the deploy pipeline reported a failure: recorded, nothing validated
};
std::string_view to_string(deploy_outcome o);

/// The ledger key of a deploy delivery ("deploy:" + delivery id), so a deploy and an approval
/// sender can never collide on the ledger's UNIQUE delivery id.
std::string deploy_ledger_key(const std::string& delivery_id);

/// One transaction: INSERT deploy_callback + INSERT callback_ledger (kind deploy, PENDING). A
/// repeated delivery id answers `duplicate` and writes nothing.
db_result<record_outcome> record_deploy_delivery(session s, const deploy_callback_in& cb,
                                                 const std::string& payload_json);

/// A successful deploy delivery that names exactly one operation, recorded and applied in ONE
/// round trip and one commit: the operation row is locked first, the delivery recorded in
/// `deploy_callback` and the ledger, the operation flipped MERGED -> VALIDATED when it is MERGED
/// (guarded by its phase and step; the transition trigger writes the event and moves the binding),
/// and the ledger row classified and linked to the operation, all in one transaction sent as one
/// text. A copy already recorded is answered by one read, as with record_deploy_delivery.
struct deploy_settlement {
  record_outcome recorded = record_outcome::inserted;
  /// The ledger's classification, set in the same transaction; nullopt when the row could not be
  /// classified there (the operation is missing, or MERGED but not at a step the flip may leave):
  /// the ledger row is then PENDING and the caller applies the delivery the general way.
  std::optional<deploy_outcome> outcome;
  bool validated = false;  // this delivery flipped the operation (exactly one caller sees it)
  /// With `validated`: the row as the flip left it (or newer), read in the same round trip.
  std::optional<operation_row> row;
};
db_result<deploy_settlement> record_and_settle_deploy(session s, const deploy_callback_in& cb,
                                                      const std::string& payload_json, const std::string& operation_id);

/// record_and_settle_deploy as a unit that joins a transition group (transition_committer::
/// submit_unit): in the group it flips the operation MERGED -> VALIDATED and records the delivery,
/// its ledger row (APPLIED) and the row's link to the operation, in the group's one commit. A copy,
/// an operation that is not MERGED and a group that failed are answered by record_and_settle_deploy,
/// run alone right after the group. `done` gets what record_and_settle_deploy would answer.
std::shared_ptr<group_unit> deploy_settle_unit(
    const deploy_callback_in& cb, const std::string& payload_json, const std::string& operation_id,
    std::function<void(db_context&, const db_result<deploy_settlement>&)> done);

/// The classified outcome on the ledger row of a deploy delivery, and the operations it was matched
/// to (callback_operation, migration 13), in one transaction; only the first classification counts.
db_result<done> set_deploy_outcome(session s, const std::string& delivery_id, deploy_outcome outcome,
                                   const std::vector<std::string>& operation_ids = {});

/// The reconciliation watermark of one project: the largest MR number with a successful deploy
/// callback; nullopt when there is none. MR numbers only increase within a project, so the
/// watermark is per project.
db_result<std::optional<std::int64_t>> deploy_watermark(session s, const std::string& project);

/// True when a successful deploy callback for this MR of this project is recorded for this
/// operation (one indexed read). For the path that writes MERGED: a callback that overtook that
/// write is applied at once. A callback that names operation ids counts only for those; only one
/// that names none is matched by (project, MR iid) and only when it arrived after the operation was
/// created, since MR iids repeat when a project is recreated.
db_result<bool> deploy_succeeded(session s, const std::string& project, std::int64_t mr_iid,
                                 const std::string& operation_id);
/// For the writer of MERGED, which knows the version it committed: in ONE round trip, the flip
/// MERGED -> VALIDATED of that version when a successful deploy of the MR is recorded for the
/// operation (same matching as deploy_succeeded), and otherwise the pipeline id of a failed one.
/// Race with record_and_settle_deploy: that unit holds the operation row's lock from before its
/// INSERT to its COMMIT, so the MERGED write and this check come wholly before it (it then sees
/// MERGED and flips) or wholly after it (this check then sees its committed delivery).
struct deploy_check {
  bool validated = false;
  std::optional<std::int64_t> failed_pipeline;  // when not validated: a failed deploy recorded (0: no id)
};
db_result<deploy_check> validate_if_deployed(session s, const std::string& operation_id, std::int64_t version,
                                             const std::string& project, std::int64_t mr_iid);

/// When a failed deploy callback for this MR of this project is recorded for this operation (same
/// matching): its pipeline id (0 when the sender gave none); nullopt when there is none.
db_result<std::optional<std::int64_t>> deploy_failed_pipeline(session s, const std::string& project,
                                                              std::int64_t mr_iid, const std::string& operation_id);

}  // namespace changeflow::persistence
