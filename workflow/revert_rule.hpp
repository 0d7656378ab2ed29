#pragma once
// When a change may be reverted. A revert is an ordinary change whose files restore what a
// VALIDATED change replaced; one revert of a change at a time. Pure: the repository applies it
// inside the transaction that creates the revert, the use case before it reads GitLab.

#include "workflow/status.hpp"

#include <optional>
#include <string_view>

namespace changeflow::workflow {

/// What the change's current revert became.
enum class earlier_revert {
  in_flight,       // not ended yet (failures awaiting an operator included): it may still take effect
  in_effect,       // it merged (validated, or closed after its merge): the original is reverted
  without_effect,  // rejected, cancelled, or closed before merging: the files were never restored
};
std::string_view to_string(earlier_revert e);

/// `phase` is the earlier revert's phase now; `reached_merged` whether its timeline ever entered
/// MERGED (an operator may close a merged change whose deploy failed: its files are restored).
earlier_revert classify_earlier_revert(phase p, bool reached_merged);

enum class revert_verdict {
  allowed,
  not_validated,     // only a VALIDATED change is in effect; anything else has nothing to undo yet
  already_reverted,  // its current revert is in flight or took effect
};

/// May a change at `original` be reverted, given what its current revert (if any) became?
revert_verdict may_revert(phase original, std::optional<earlier_revert> current_revert);

}  // namespace changeflow::workflow
