// Migration 9: notifications of phase changes, from a transactional outbox.
//
// `notification_subscription` says who wants to hear about which changes (a subject, one change, or
// both) and where to POST. `notification_delivery` is the outbox: one row per (subscription, event),
// written by the trigger below in the same statement as the timeline event, so a delivery exists iff
// its event committed. The dispatcher (actors/notification_dispatcher) claims due rows with a lease
// (claim_token, claim_until) and marks them delivered or schedules the next try.
//
// Why a trigger on operation_event and not a second branch in the transition trigger of migration 3:
// every writer of a phase writes exactly one timeline event per operation it moves (the transition
// trigger, create_operation, the batch coordinator's member moves, mark_validated), so the event
// insert is the one place they all pass through. The transition trigger's INSERT fires this one
// inside the same statement; the other writers' event INSERTs fire it inside their transactions.
// Migration 3's trigger is left exactly as it was.
//
// What is notified (the function notification_kind, the one statement of the rule): the first event
// (change.created), every event that changes the phase (change.phase_changed, or change.terminal
// when the new phase is terminal), and a step change inside a terminal phase (change.terminal: an
// operator forcing HANDLE_ERROR -> FORCED_FAILED, say). Lease takeovers and steps inside a
// non-terminal phase are not. The terminal phases are workflow::is_terminal's; a repository test
// walks every phase against it. With no subscription the trigger costs one index probe per event.
//
// `sequence` is the change's own count of notified events up to this one, the same for every
// subscriber (1, 2, 3, ... for a subscription that existed before the change). Rows of one operation
// are written under its row lock (every writer locks or updates the operation row first), so the
// count cannot race; the UNIQUE stream key would refuse a duplicate rather than hide it.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v9() {
  return {
      R"sql(
CREATE TABLE IF NOT EXISTS notification_subscription (
  id              BIGINT        NOT NULL AUTO_INCREMENT,
  subscription_id CHAR(36)      NOT NULL,
  subject_id      VARCHAR(128)  NULL,
  operation_id    CHAR(36)      NULL,
  url             VARCHAR(1024) NOT NULL,
  secret          VARCHAR(255)  NOT NULL COMMENT 'HMAC key of the signatures; kept readable because signing needs it',
  owner           VARCHAR(160)  NOT NULL COMMENT 'verified identity that created it',
  created_at      DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_subscription_public (subscription_id),
  KEY idx_subscription_subject (subject_id, operation_id),
  KEY idx_subscription_operation (operation_id),
  KEY idx_subscription_owner (owner, id),
  CONSTRAINT ck_subscription_scope CHECK (subject_id IS NOT NULL OR operation_id IS NOT NULL)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS notification_delivery (
  id              BIGINT        NOT NULL AUTO_INCREMENT,
  delivery_id     CHAR(36)      NOT NULL,
  subscription_id BIGINT        NOT NULL,
  operation_id    CHAR(36)      NOT NULL,
  sequence        INT           NOT NULL COMMENT 'the change''s count of notified events up to this one',
  event_id        BIGINT        NOT NULL COMMENT 'operation_event.id',
  kind            VARCHAR(32)   NOT NULL,
  state           VARCHAR(16)   NOT NULL DEFAULT 'PENDING' COMMENT 'PENDING | DELIVERED | FAILED',
  attempts        INT           NOT NULL DEFAULT 0,
  next_attempt_at DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  claimed_by      VARCHAR(128)  NULL,
  claim_token     CHAR(36)      NULL,
  claim_until     DATETIME(3)   NULL,
  last_status     INT           NULL,
  last_error      VARCHAR(1024) NULL,
  created_at      DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  delivered_at    DATETIME(3)   NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_delivery_public (delivery_id),
  UNIQUE KEY uk_delivery_stream (subscription_id, operation_id, sequence),
  KEY idx_delivery_due (state, next_attempt_at),
  KEY idx_delivery_operation (operation_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE OR REPLACE FUNCTION notification_kind(from_phase VARCHAR(32), to_phase VARCHAR(32), from_step INT,
                                             to_step INT) RETURNS VARCHAR(32) DETERMINISTIC
  RETURN CASE
    WHEN from_phase IS NULL THEN 'change.created'
    WHEN to_phase IN ('VALIDATED', 'CREATE_FAILED', 'HANDLE_FAILED', 'REJECTED', 'CLOSED', 'CANCELLED')
         AND (from_phase <> to_phase OR from_step <> to_step) THEN 'change.terminal'
    WHEN from_phase <> to_phase THEN 'change.phase_changed'
    ELSE NULL END)sql",
      R"sql(
CREATE OR REPLACE TRIGGER operation_event_notify AFTER INSERT ON operation_event FOR EACH ROW
BEGIN
  DECLARE v_kind VARCHAR(32) DEFAULT notification_kind(NEW.from_phase, NEW.to_phase, NEW.from_step, NEW.to_step);
  DECLARE v_subject VARCHAR(128);
  IF v_kind IS NOT NULL AND EXISTS (SELECT 1 FROM notification_subscription LIMIT 1) THEN
    SELECT subject_id INTO v_subject FROM operation WHERE operation_id = NEW.operation_id;
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
