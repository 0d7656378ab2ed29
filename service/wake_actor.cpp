#include "service/wake_actor.hpp"

#include "actors/registry.hpp"
#include "actors/request_actor.hpp"
#include "messages/messages.hpp"
#include "persistence/operation_repo.hpp"

#include <caf/all.hpp>

namespace changeflow::service {

std::string wake_actor(persistence::session db, runtime::services& svc, const std::string& operation_id,
                       std::optional<workflow::step> to, const std::string& cause,
                       std::optional<std::int64_t> written_version, const persistence::operation_row* written_row,
                       std::optional<std::int64_t> found_version) {
  if (written_row && svc.row_written_as) {
    svc.row_written_as(*written_row, found_version.value_or(0));
  } else if (svc.row_written) {
    svc.row_written(operation_id);
  }
  messages::row_changed nudge{cause};
  if (to && written_version) {
    nudge.step = workflow::code_of(*to);
    nudge.version = *written_version;
    nudge.from_version = found_version.value_or(0);
  }
  // Under the registry's lock: an actor about to stop for a passivated wait still reads it.
  if (svc.actors->send_if_present(operation_id, [&nudge](const caf::actor& a) { caf::anon_send(a, nudge); })) {
    return "nudged";
  }
  if (to && !workflow::needs_actor(*to)) return "none_needed";
  auto row = written_row ? persistence::db_result<persistence::operation_row>::success(*written_row)
                         : persistence::load_operation(db, operation_id);
  if (!row.ok()) return "not_started";
  if (!workflow::needs_actor(row.value.step)) return "none_needed";
  auto owner = row.value.owner_instance.value_or("");
  if (!owner.empty() && owner != svc.instance_id) return "owner:" + owner;
  if (actors::passivated_wait(row.value.step, row.value.next_wake_at_ms.value_or(0), svc.now_ms(),
                              svc.config->current()->durability().passivate_beyond_seconds))
    return "passivated";
  return actors::spawn_request_actor(svc, actors::seed_from_row(row.value, svc.now_ms())) ? "spawned" : "not_started";
}

}  // namespace changeflow::service
