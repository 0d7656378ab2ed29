#pragma once
// When a GitLab webhook ends a wait. Pure: the request actor asks this for every gitlab_event it
// receives, the intake asks `worth_delivering` before it looks for an actor at all.
//
// A webhook never decides an outcome by itself: it only makes the actor read the MR now instead of
// at its next poll, and the read decides as a poll would. So a forged order of events cannot move
// anything; what the rule filters out (a pipeline still running, a pipeline on an old sha, an MR
// edit) would merely cost a read.

#include "messages/messages.hpp"
#include "workflow/status.hpp"

#include <string_view>

namespace changeflow::workflow {

/// GitLab's completed pipeline statuses: success, failed, canceled, skipped.
bool is_final_pipeline_status(std::string_view status);

/// The event can end some wait: a pipeline that finished, or an MR merged or closed.
bool worth_delivering(const messages::gitlab_event& e);

/// Whether the event ends the wait of an operation in `current` whose MR head is `head_sha` (""
/// when not known yet): a finished pipeline on the head (or any, while the head is unknown) ends
/// the pipeline waits; a merge or close ends every wait on the MR (decide() then finds it merged
/// elsewhere, or closed).
bool ends_wait(step current, std::string_view head_sha, const messages::gitlab_event& e);

/// Whether the event says the MR is no longer as `read` saw it, so the approve and merge steps must
/// not act on that read: a merge or close of the MR, or a pipeline that is not a success on the
/// read's head (a new head, or the head's pipeline run again). A success on the read's head keeps it.
bool outdates(const messages::mr_read& read, const messages::gitlab_event& e);

}  // namespace changeflow::workflow
