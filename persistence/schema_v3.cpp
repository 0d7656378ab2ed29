// Migration 3: a workflow transition in ONE statement.
//
// `persistence::transition()` used to be a transaction of three prepared statements (guarded UPDATE
// of operation, UPDATE of binding, INSERT of the event): with autocommit toggling, prepare and close
// that was about a dozen client/server round trips per transition, and the benchmark measured it at
// 0.20 of the raw guarded-commit rate. Now the guarded UPDATE carries the event's cause, actor and
// instance in three staging columns, and a BEFORE UPDATE trigger writes the event row (and the
// binding's phase when the phase changes) inside the same statement. An autocommitted single
// statement is atomic in InnoDB: the event exists iff the guarded UPDATE matched, with no explicit
// transaction and one round trip. The trigger clears the staging columns, so they are NULL at rest
// and every other writer of `operation` (which writes its own events) leaves them alone.
// Lock order stays operation row first, then binding row, as in every other path.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v3() {
  return {
      R"sql(
ALTER TABLE operation
  ADD COLUMN IF NOT EXISTS event_cause    VARCHAR(255) NULL COMMENT 'staging for the transition trigger; NULL at rest',
  ADD COLUMN IF NOT EXISTS event_actor    VARCHAR(160) NULL COMMENT 'staging for the transition trigger; NULL at rest',
  ADD COLUMN IF NOT EXISTS event_instance VARCHAR(128) NULL COMMENT 'staging for the transition trigger; NULL at rest')sql",
      R"sql(
CREATE OR REPLACE TRIGGER operation_transition_event BEFORE UPDATE ON operation FOR EACH ROW
BEGIN
  IF NEW.event_actor IS NOT NULL THEN
    INSERT INTO operation_event (operation_id, from_step, to_step, from_phase, to_phase, cause, actor,
                                 instance_id, version, at)
      VALUES (NEW.operation_id, OLD.step, NEW.step, OLD.phase, NEW.phase, COALESCE(NEW.event_cause, ''),
              NEW.event_actor, NEW.event_instance, NEW.version, NOW(3));
    IF NEW.phase <> OLD.phase THEN
      UPDATE binding SET phase = NEW.phase WHERE operation_id = NEW.operation_id;
    END IF;
    SET NEW.event_cause = NULL, NEW.event_actor = NULL, NEW.event_instance = NULL;
  END IF;
END)sql",
  };
}

}  // namespace changeflow::persistence
