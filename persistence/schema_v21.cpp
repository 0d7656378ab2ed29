// Migration 21: a submission's creation as a stored procedure.
//
// A submission joins a group commit as a unit of about 2.5 KB of SQL: the binding read and locked,
// the operation and binding inserted (a duplicate key caught), a re-apply's take-over and the
// binding's history. The group's compound statement is parsed and compiled whole, every time, and
// this text was the largest part of it. As a procedure the body is compiled once per connection and
// the unit is one CALL with the change's values; replayed on the bench's schema it cost MariaDB
// about half the CPU per creation (docs/performance.md, "A submission as one CALL").
//
// The string parameters are declared `CHARACTER SET utf8mb4`, which gives them the collation the
// tables' columns have (the character set's default), so every comparison below is the one the
// written-out text made: without it a parameter takes the database's default collation, and a
// comparison with a column of another collation changes meaning. The re-appliable phases come as a
// comma-separated list from the service (workflow::is_reappliable), so the procedure holds no
// workflow rule of its own. The session variables it sets are the ones the unit's text reads after
// it (@changeflow_bound and the two it read the binding into). It runs with its caller's privileges
// (SQL SECURITY INVOKER), so it keeps working when the account that ran the migration is gone.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v21() {
  return {R"sql(
CREATE PROCEDURE IF NOT EXISTS changeflow_create_operation(
  p_operation_id  CHAR(36)     CHARACTER SET utf8mb4,
  p_subject_id    VARCHAR(128) CHARACTER SET utf8mb4,
  p_target_key    VARCHAR(255) CHARACTER SET utf8mb4,
  p_flow          VARCHAR(32)  CHARACTER SET utf8mb4,
  p_step          INT,
  p_phase         VARCHAR(32)  CHARACTER SET utf8mb4,
  p_title         VARCHAR(512) CHARACTER SET utf8mb4,
  p_payload       LONGTEXT     CHARACTER SET utf8mb4,
  p_owner         VARCHAR(128) CHARACTER SET utf8mb4,
  p_lease_epoch   BIGINT,
  p_requester     VARCHAR(160) CHARACTER SET utf8mb4,
  p_repository    VARCHAR(255) CHARACTER SET utf8mb4,
  p_branch        VARCHAR(255) CHARACTER SET utf8mb4,
  p_actor         VARCHAR(160) CHARACTER SET utf8mb4,
  p_revert_of     CHAR(36)     CHARACTER SET utf8mb4,
  p_reappliable   VARCHAR(255) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
  SET @changeflow_bound_op = NULL, @changeflow_bound_phase = NULL;
  SELECT operation_id, phase INTO @changeflow_bound_op, @changeflow_bound_phase FROM binding
   WHERE subject_id = p_subject_id AND repository = p_repository AND target_key = p_target_key FOR UPDATE;
  SET @changeflow_dup = 0;
  BEGIN
    DECLARE EXIT HANDLER FOR 1062 SET @changeflow_dup = 1;
    INSERT INTO operation (operation_id, subject_id, target_key, flow, step, phase, version, title, payload,
                           owner_instance, lease_epoch, requester, repository, target_branch, event_cause,
                           event_actor, event_instance, revert_of)
    SELECT p_operation_id, p_subject_id, p_target_key, p_flow, p_step, p_phase, 1, p_title, p_payload, p_owner,
           p_lease_epoch, p_requester, p_repository, p_branch,
           CONCAT(IF(@changeflow_bound_op IS NULL, 'created', 're-applied'),
                  IF(p_revert_of IS NULL, '', CONCAT('; revert of ', p_revert_of))),
           p_actor, p_owner, p_revert_of FROM DUAL
     WHERE @changeflow_bound_op IS NULL OR FIND_IN_SET(@changeflow_bound_phase, p_reappliable) > 0
        OR EXISTS (SELECT 1 FROM operation WHERE operation_id = p_operation_id);
    INSERT INTO binding (subject_id, repository, target_key, operation_id, phase)
    SELECT p_subject_id, p_repository, p_target_key, p_operation_id, p_phase FROM DUAL WHERE @changeflow_bound_op IS NULL;
  END;
  IF @changeflow_dup = 0 THEN
    IF @changeflow_bound_op IS NULL THEN
      SET @changeflow_bound = 1;
    ELSE
      UPDATE binding FORCE INDEX (uk_binding_relationship) SET operation_id = p_operation_id, phase = p_phase
       WHERE subject_id = p_subject_id AND repository = p_repository AND target_key = p_target_key
         AND operation_id = @changeflow_bound_op AND phase = @changeflow_bound_phase
         AND FIND_IN_SET(phase, p_reappliable) > 0;
      SET @changeflow_bound = (SELECT COUNT(*) FROM binding WHERE subject_id = p_subject_id
                                  AND repository = p_repository AND target_key = p_target_key
                                  AND operation_id = p_operation_id);
    END IF;
    INSERT INTO binding_history (subject_id, repository, target_key, operation_id, replaced_operation_id,
                                 replaced_phase, applied_at)
    SELECT p_subject_id, p_repository, p_target_key, p_operation_id, @changeflow_bound_op, @changeflow_bound_phase,
           NOW(3) FROM DUAL WHERE @changeflow_bound = 1;
  ELSE
    SET @changeflow_bound = 0;
  END IF;
END)sql"};
}

}  // namespace changeflow::persistence
