// Migration 10: one writer of the timeline.
//
// Migration 3 made a workflow transition write its own event through the staging columns and the
// BEFORE UPDATE trigger. The creation of an operation, the batch coordinator's bulk moves, a lease
// takeover and the deploy validation still inserted `operation_event` rows themselves, each with
// its own copy of the column list. Now creation sets the same staging columns on its INSERT and
// this BEFORE INSERT trigger writes the first event; every other writer sets them on its UPDATE.
// So an event exists iff the operation row's own write carried one, and the timeline has one shape.
// The notification trigger on the timeline (migration 9) is redefined to read the subject of a
// creation event from the creation trigger, since the operation row is not readable yet.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v10() {
  return {
      R"sql(
CREATE OR REPLACE TRIGGER operation_created_event BEFORE INSERT ON operation FOR EACH ROW
BEGIN
  IF NEW.event_actor IS NOT NULL THEN
    SET @changeflow_created_subject = NEW.subject_id;
    INSERT INTO operation_event (operation_id, from_step, to_step, from_phase, to_phase, cause, actor,
                                 instance_id, version, at)
      VALUES (NEW.operation_id, NULL, NEW.step, NULL, NEW.phase, COALESCE(NEW.event_cause, ''),
              NEW.event_actor, NEW.event_instance, NEW.version, NOW(3));
    SET @changeflow_created_subject = NULL;
    SET NEW.event_cause = NULL, NEW.event_actor = NULL, NEW.event_instance = NULL;
  END IF;
END)sql",
      // The notification trigger (migration 9) read the event's subject from the operation row, which
      // does not exist yet while the creation event is written: same trigger, with the hand-over.
      R"sql(
CREATE OR REPLACE TRIGGER operation_event_notify AFTER INSERT ON operation_event FOR EACH ROW
BEGIN
  DECLARE v_kind VARCHAR(32) DEFAULT notification_kind(NEW.from_phase, NEW.to_phase, NEW.from_step, NEW.to_step);
  DECLARE v_subject VARCHAR(128);
  IF v_kind IS NOT NULL AND EXISTS (SELECT 1 FROM notification_subscription LIMIT 1) THEN
    -- The creation event is written while the operation row is being inserted (not yet readable):
    -- its trigger hands the subject over in @changeflow_created_subject.
    SET v_subject = COALESCE((SELECT subject_id FROM operation WHERE operation_id = NEW.operation_id),
                             @changeflow_created_subject);
    INSERT INTO notification_delivery (delivery_id, subscription_id, operation_id, sequence, event_id, kind,
                                       next_attempt_at, created_at)
      SELECT UUID(), s.id, NEW.operation_id,
             (SELECT COUNT(*) FROM operation_event e
               WHERE e.operation_id = NEW.operation_id AND e.id <= NEW.id
                 AND notification_kind(e.from_phase, e.to_phase, e.from_step, e.to_step) IS NOT NULL),
             NEW.id, v_kind, NOW(3), NOW(3)
        FROM notification_subscription s
       WHERE (s.subject_id = v_subject AND (s.operation_id IS NULL OR s.operation_id = NEW.operation_id))
          OR (s.subject_id IS NULL AND s.operation_id = NEW.operation_id);
  END IF;
END)sql",
  };
}

}  // namespace changeflow::persistence
