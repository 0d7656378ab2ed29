#pragma once
// "Write the row, then tell the actor": after a transition written outside the operation's actor
// (an operator action, a cancel), the live actor reloads its row; when none lives here and the new
// step needs one, and this instance owns the row, one is started from the row.

#include "persistence/operation_repo.hpp"
#include "persistence/session.hpp"
#include "runtime/services.hpp"
#include "workflow/status.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace changeflow::service {

/// `to` is the step just written, or nullopt when the caller does not know it (the row is read).
/// Returns what happened, for answers and logs: nudged | none_needed | spawned | passivated (a wait
/// that needs no actor: actors::passivated_wait) | not_started |
/// owner:<instance>.
/// With `written_version` (and `to`), the writer moved only the step, to `to` at that version, from
/// `found_version` (unset: the version before): a live actor that holds the version found takes it
/// without reading the row.
/// With `written_row`, the row as the writer read it right after its commit: an actor is started
/// from it without reading the row again.
std::string wake_actor(persistence::session db, runtime::services& svc, const std::string& operation_id,
                       std::optional<workflow::step> to, const std::string& cause,
                       std::optional<std::int64_t> written_version = std::nullopt,
                       const persistence::operation_row* written_row = nullptr,
                       std::optional<std::int64_t> found_version = std::nullopt);

}  // namespace changeflow::service
