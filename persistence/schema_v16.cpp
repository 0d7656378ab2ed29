// Migration 16: notifications written by the operation's own triggers, not by a trigger on the timeline.
//
// Migration 9 put the notification outbox behind an AFTER INSERT trigger on operation_event. Every
// transition therefore ran a second, nested trigger, which evaluated notification_kind() and probed
// notification_subscription even when nobody subscribes: measured on the guarded-commit loop
// (bench `limit`, 4 connections), a sixth to a third of the database's CPU per transition (298 us
// with it against 198 us without in one session, 469 against 355-442 us in a busier one). Since
// migration 10 the timeline has
// one writer: the two operation triggers below are the only statements that insert events. So they
// now notify themselves, right after their event insert, and only when a subscription exists; the
// rule stays in one place (notification_kind, and the procedure notify_event that writes the
// deliveries). The subject is the operation row's own (NEW.subject_id), so the creation event no
// longer needs @changeflow_created_subject.
//
// The transition trigger probes notification_subscription only for an event notification_kind can
// name (a phase change, or any step change inside a terminal phase: a superset of its rule, which
// still decides); the half of transitions that stay inside a live phase skip the probe.
//
// The two AFTER UPDATE triggers of `operation` (the failed-attempt record of migration 13 and the
// group acknowledgement of migration 14) become one: every UPDATE of a row paid two trigger
// invocations for two IF tests (about 40 us of the database's CPU per transition for the second).
// The record trigger is replaced by the combined one first, then the acknowledgement trigger is
// dropped: in between an id may be acknowledged twice, which the group's reading of the list
// tolerates; a failed attempt is counted once throughout.
//
// Order: the operation triggers are replaced first, then the timeline trigger is dropped. In between
// an event may be notified by both; the procedure's insert leaves an existing delivery of the same
// (subscription, operation, sequence) as it is, so nothing is doubled and nothing is missed while
// other instances keep writing during the migration.

#include "persistence/sql_util.hpp"

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v16() {
  return {
      R"sql(
CREATE OR REPLACE PROCEDURE notify_event(p_event_id BIGINT, p_operation_id CHAR(36), p_subject VARCHAR(128),
                                         p_from_phase VARCHAR(32), p_to_phase VARCHAR(32), p_from_step INT,
                                         p_to_step INT)
BEGIN
  DECLARE v_kind VARCHAR(32) DEFAULT notification_kind(p_from_phase, p_to_phase, p_from_step, p_to_step);
  IF v_kind IS NOT NULL THEN
    INSERT INTO notification_delivery (delivery_id, subscription_id, operation_id, sequence, event_id, kind,
                                       next_attempt_at, created_at)
      SELECT UUID(), s.id, p_operation_id,
             (SELECT COUNT(*) FROM operation_event e
               WHERE e.operation_id = p_operation_id AND e.id <= p_event_id
                 AND notification_kind(e.from_phase, e.to_phase, e.from_step, e.to_step) IS NOT NULL),
             p_event_id, v_kind, NOW(3), NOW(3)
        FROM notification_subscription s
       WHERE (s.subject_id = p_subject AND (s.operation_id IS NULL OR s.operation_id = p_operation_id))
          OR (s.subject_id IS NULL AND s.operation_id = p_operation_id)
      ON DUPLICATE KEY UPDATE notification_delivery.id = notification_delivery.id;
  END IF;
END)sql",
      R"sql(
CREATE OR REPLACE TRIGGER operation_created_event BEFORE INSERT ON operation FOR EACH ROW
BEGIN
  IF NEW.event_actor IS NOT NULL THEN
    INSERT INTO operation_event (operation_id, from_step, to_step, from_phase, to_phase, cause, actor,
                                 instance_id, version, at)
      VALUES (NEW.operation_id, NULL, NEW.step, NULL, NEW.phase, COALESCE(NEW.event_cause, ''),
              NEW.event_actor, NEW.event_instance, NEW.version, NOW(3));
    IF EXISTS (SELECT 1 FROM notification_subscription LIMIT 1) THEN
      CALL notify_event(LAST_INSERT_ID(), NEW.operation_id, NEW.subject_id, NULL, NEW.phase, NULL, NEW.step);
    END IF;
    SET NEW.event_cause = NULL, NEW.event_actor = NULL, NEW.event_instance = NULL;
  END IF;
END)sql",
      R"sql(
CREATE OR REPLACE TRIGGER operation_transition_event BEFORE UPDATE ON operation FOR EACH ROW
BEGIN
  IF NEW.event_actor IS NOT NULL THEN
    INSERT INTO operation_event (operation_id, from_step, to_step, from_phase, to_phase, cause, actor,
                                 instance_id, version, at)
      VALUES (NEW.operation_id, OLD.step, NEW.step, OLD.phase, NEW.phase, COALESCE(NEW.event_cause, ''),
              NEW.event_actor, NEW.event_instance, NEW.version, NOW(3));
    IF (NEW.phase <> OLD.phase OR (NEW.step <> OLD.step AND NEW.phase IN ()sql" +
          detail::terminal_phase_list() + R"sql())) AND
       EXISTS (SELECT 1 FROM notification_subscription LIMIT 1) THEN
      CALL notify_event(LAST_INSERT_ID(), NEW.operation_id, NEW.subject_id, OLD.phase, NEW.phase, OLD.step,
                        NEW.step);
    END IF;
    IF NEW.phase <> OLD.phase THEN
      UPDATE binding SET phase = NEW.phase WHERE operation_id = NEW.operation_id;
    END IF;
    SET NEW.event_cause = NULL, NEW.event_actor = NULL, NEW.event_instance = NULL;
  END IF;
END)sql",
      "DROP TRIGGER IF EXISTS operation_event_notify",
      R"sql(
CREATE OR REPLACE TRIGGER operation_step_attempt_record AFTER UPDATE ON operation FOR EACH ROW
BEGIN
  IF @changeflow_ack IS NOT NULL THEN
    SET @changeflow_ack = CONCAT(@changeflow_ack, NEW.operation_id, ',');
  END IF;
  IF NEW.errors_recorded <> OLD.errors_recorded THEN
    INSERT INTO operation_step_attempt (operation_id, step, failed_attempts, last_error, last_error_status,
                                        first_error_at, last_error_at)
      VALUES (NEW.operation_id, OLD.step, 1, NEW.last_error, NEW.last_error_status, NEW.last_error_at,
              NEW.last_error_at)
      ON DUPLICATE KEY UPDATE failed_attempts = failed_attempts + 1, last_error = VALUES(last_error),
                              last_error_status = VALUES(last_error_status), last_error_at = VALUES(last_error_at);
  END IF;
END)sql",
      "DROP TRIGGER IF EXISTS operation_group_ack",
  };
}

}  // namespace changeflow::persistence
