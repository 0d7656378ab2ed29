#pragma once
// The link between a validated change and its revert (migration 11). The revert is created like
// any change (create_operation's statements), and in the SAME transaction the original's row is
// locked, checked (workflow::may_revert) and pointed at it, with a "reverted by" event on the
// original's timeline: a revert never exists without its link, and two concurrent reverts of one
// change cannot both be created.

#include "persistence/operation_repo.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"
#include "workflow/revert_rule.hpp"

#include <optional>
#include <string>

namespace changeflow::persistence {

/// A change's current revert, as it is now.
struct revert_link {
  std::string revert_id;
  workflow::phase phase = workflow::phase::APPROVAL_SENDING;
  bool reached_merged = false;  // its timeline entered MERGED at some point
  workflow::earlier_revert state() const { return workflow::classify_earlier_revert(phase, reached_merged); }
};

/// The current revert of `original` (its reverted_by), or nullopt when it has none.
db_result<std::optional<revert_link>> find_revert(session s, const operation_row& original);

struct revert_created {
  workflow::revert_verdict verdict = workflow::revert_verdict::allowed;
  create_outcome created = create_outcome::created;            // what the creation answered (verdict allowed)
  workflow::step original_step = workflow::step::CALLED_BACK;  // verdict not_validated
  std::string current_revert;                                  // verdict already_reverted
};

/// Creates `revert` (revert.revert_of names the original) and links the original to it, in one
/// transaction; `actor` labels the original's "reverted by" event. Nothing is written unless the
/// verdict is allowed and the creation answered created. The revert's own id already being the
/// original's revert answers duplicate_operation (a retry of a revert that was created).
/// not_found when the original does not exist.
db_result<revert_created> create_revert(session s, const new_operation& revert, const std::string& actor);

}  // namespace changeflow::persistence
