// Migration 13: failed attempts and the last external error of every step, durable.
//
// A retryable failure of an external call (a 503 on MR creation, a reset connection) used to leave
// no trace in the database: the actor kept its poll counter and error in memory and armed a timer.
// After a restart, or for an operator looking at the change, the retries had never happened. Now a
// retry is a guarded write of the row in the same step (attempts + 1, the error with its HTTP status
// and the database time, the next try as next_wake_at), and a failure transition records the error
// that ended the step the same way; both add one to errors_recorded (a counter, not the time: two
// writes may share a millisecond). This AFTER UPDATE trigger copies each such error into the
// per-step summary `operation_step_attempt` in the same statement, so the count survives the step:
// a change that met two 503s while creating its MR still says so once it has merged. No event is
// written for a retry (the timeline stays one row per step change), and `updated_at` is left alone
// by the retry write, so "unchanged since" keeps meaning "since the last step change".
// The error belongs to the step the call was made in: OLD.step (equal to NEW.step for a retry).
// `callback_operation` links a deploy delivery's ledger row to the operations it was matched to.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v13() {
  return {
      R"sql(
ALTER TABLE operation
  ADD COLUMN IF NOT EXISTS last_error_status INT         NULL COMMENT 'HTTP status of the last external error (0/NULL: none or no answer)',
  ADD COLUMN IF NOT EXISTS last_error_at     DATETIME(3) NULL COMMENT 'database time of the last external error',
  ADD COLUMN IF NOT EXISTS errors_recorded   INT         NOT NULL DEFAULT 0 COMMENT 'failed attempts over the change''s life; each +1 is counted for its step by the trigger')sql",
      R"sql(
CREATE TABLE IF NOT EXISTS operation_step_attempt (
  operation_id      CHAR(36)      NOT NULL,
  step              INT           NOT NULL,
  failed_attempts   INT           NOT NULL DEFAULT 0,
  last_error        VARCHAR(1024) NULL,
  last_error_status INT           NULL,
  first_error_at    DATETIME(3)   NOT NULL,
  last_error_at     DATETIME(3)   NOT NULL,
  PRIMARY KEY (operation_id, step)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE OR REPLACE TRIGGER operation_step_attempt_record AFTER UPDATE ON operation FOR EACH ROW
BEGIN
  IF NEW.errors_recorded <> OLD.errors_recorded THEN
    INSERT INTO operation_step_attempt (operation_id, step, failed_attempts, last_error, last_error_status,
                                        first_error_at, last_error_at)
      VALUES (NEW.operation_id, OLD.step, 1, NEW.last_error, NEW.last_error_status, NEW.last_error_at,
              NEW.last_error_at)
      ON DUPLICATE KEY UPDATE failed_attempts = failed_attempts + 1, last_error = VALUES(last_error),
                              last_error_status = VALUES(last_error_status), last_error_at = VALUES(last_error_at);
  END IF;
END)sql",
      // A deploy delivery names an MR (a batch MR carries several changes), so its ledger row has no
      // single operation: this table says which operations it was matched to, for each change's page.
      R"sql(
CREATE TABLE IF NOT EXISTS callback_operation (
  ledger_id    BIGINT   NOT NULL,
  operation_id CHAR(36) NOT NULL,
  PRIMARY KEY (operation_id, ledger_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
  };
}

}  // namespace changeflow::persistence
