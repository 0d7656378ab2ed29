// Migration 10: one writer of the timeline.
//
// Migration 3 made a workflow transition write its own event through the staging columns and the
// BEFORE UPDATE trigger. The creation of an operation, the batch coordinator's bulk moves, a lease
// takeover and the deploy validation still inserted `operation_event` rows themselves, each with
// its own copy of the column list. Now creation sets the same staging columns on its INSERT and
// this BEFORE INSERT trigger writes the first event; every other writer sets them on its UPDATE.
// So an event exists iff the operation row's own write carried one, and the timeline has one shape.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v10() {
  return {
      R"sql(
CREATE OR REPLACE TRIGGER operation_created_event BEFORE INSERT ON operation FOR EACH ROW
BEGIN
  IF NEW.event_actor IS NOT NULL THEN
    INSERT INTO operation_event (operation_id, from_step, to_step, from_phase, to_phase, cause, actor,
                                 instance_id, version, at)
      VALUES (NEW.operation_id, NULL, NEW.step, NULL, NEW.phase, COALESCE(NEW.event_cause, ''),
              NEW.event_actor, NEW.event_instance, NEW.version, NOW(3));
    SET NEW.event_cause = NULL, NEW.event_actor = NULL, NEW.event_instance = NULL;
  END IF;
END)sql",
  };
}

}  // namespace changeflow::persistence
