// Migration 2 statements (kept apart from migrations.cpp so the runner stays readable).
// Each invariant of the batch/database write-up is enforced here by a constraint:
//   I1 merge_batch.active_slot (generated, UNIQUE: many NULLs, at most one 1)
//   I2/I4 merge_batch_request.operation_id UNIQUE, batch_id claimed by guarded UPDATE
//   I5 binding UNIQUE (subject_id, target_key) and UNIQUE operation_id
//   I6 operation.version, bumped by every write and part of every guarded UPDATE

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v2() {
  return {
      R"sql(
CREATE TABLE IF NOT EXISTS operation (
  operation_id   CHAR(36)      NOT NULL,
  subject_id     VARCHAR(128)  NOT NULL,
  target_key     VARCHAR(255)  NOT NULL,
  flow           VARCHAR(32)   NOT NULL,
  step           INT           NOT NULL,
  phase          VARCHAR(32)   NOT NULL,
  version        BIGINT        NOT NULL DEFAULT 1,
  title          VARCHAR(512)  NOT NULL DEFAULT '',
  payload        JSON          NULL,
  mr_iid         BIGINT        NULL,
  mr_url         VARCHAR(1024) NULL,
  approval_id    VARCHAR(128)  NULL,
  batch_id       BIGINT        NULL,
  attempts       INT           NOT NULL DEFAULT 0,
  next_wake_at   DATETIME(3)   NULL,
  owner_instance VARCHAR(128)  NULL,
  lease_epoch    BIGINT        NOT NULL DEFAULT 0,
  last_error     VARCHAR(1024) NULL,
  created_at     DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at     DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (operation_id),
  KEY idx_operation_phase_updated (phase, updated_at),
  KEY idx_operation_owner_phase (owner_instance, phase),
  KEY idx_operation_wake (next_wake_at),
  KEY idx_operation_mr (mr_iid),
  KEY idx_operation_subject (subject_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS binding (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  subject_id    VARCHAR(128) NOT NULL,
  target_key    VARCHAR(255) NOT NULL,
  operation_id  CHAR(36)     NOT NULL,
  phase         VARCHAR(32)  NOT NULL,
  created_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_binding_relationship (subject_id, target_key),
  UNIQUE KEY uk_binding_operation (operation_id),
  KEY idx_binding_phase_updated (phase, updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS binding_history (
  id                    BIGINT       NOT NULL AUTO_INCREMENT,
  subject_id            VARCHAR(128) NOT NULL,
  target_key            VARCHAR(255) NOT NULL,
  operation_id          CHAR(36)     NOT NULL,
  replaced_operation_id CHAR(36)     NULL,
  replaced_phase        VARCHAR(32)  NULL,
  applied_at            DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY idx_binding_history_relationship (subject_id, target_key, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS operation_event (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  operation_id CHAR(36)     NOT NULL,
  from_step    INT          NULL,
  to_step      INT          NOT NULL,
  from_phase   VARCHAR(32)  NULL,
  to_phase     VARCHAR(32)  NOT NULL,
  cause        VARCHAR(255) NOT NULL DEFAULT '',
  actor        VARCHAR(160) NOT NULL,
  instance_id  VARCHAR(128) NULL,
  version      BIGINT       NOT NULL,
  at           DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY idx_event_operation (operation_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS callback_ledger (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  delivery_id  VARCHAR(191) NOT NULL,
  kind         VARCHAR(16)  NOT NULL,
  operation_id CHAR(36)     NULL,
  payload      JSON         NULL,
  outcome      VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
  received_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  applied_at   DATETIME(3)  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_callback_delivery (delivery_id),
  KEY idx_callback_operation (operation_id),
  KEY idx_callback_outcome (outcome, received_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS deploy_callback (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  delivery_id   VARCHAR(191) NOT NULL,
  project       VARCHAR(255) NOT NULL,
  mr_iid        BIGINT       NOT NULL,
  pipeline_id   BIGINT       NULL,
  status        VARCHAR(32)  NOT NULL,
  operation_ids JSON         NULL,
  received_at   DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_deploy_delivery (delivery_id),
  KEY idx_deploy_mr (mr_iid),
  KEY idx_deploy_status_mr (status, mr_iid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS merge_batch (
  id              BIGINT        NOT NULL AUTO_INCREMENT,
  status          TINYINT       NOT NULL DEFAULT 1 COMMENT '1=RUNNING 2=SUCCEEDED 3=FAILED 4=BLOCKED',
  active_slot     TINYINT GENERATED ALWAYS AS (CASE WHEN status IN (1, 4) THEN 1 ELSE NULL END) STORED,
  mr_iid          BIGINT        NULL,
  branch          VARCHAR(255)  NULL,
  split_depth     INT           NOT NULL DEFAULT 0,
  parent_batch_id BIGINT        NULL,
  failure_reason  VARCHAR(1024) NULL,
  created_at      DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at      DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_active_slot (active_slot),
  KEY idx_status_created (status, created_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS merge_batch_request (
  id           BIGINT      NOT NULL AUTO_INCREMENT,
  operation_id CHAR(36)    NOT NULL,
  batch_id     BIGINT      NULL COMMENT 'NULL means still waiting',
  split_group  INT         NOT NULL DEFAULT 0,
  created_at   DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_operation_id (operation_id),
  KEY idx_batch_created (batch_id, created_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS merge_batch_history (
  id           BIGINT      NOT NULL AUTO_INCREMENT,
  batch_id     BIGINT      NOT NULL,
  operation_id CHAR(36)    NOT NULL,
  request_id   BIGINT      NOT NULL,
  event        VARCHAR(16) NOT NULL COMMENT 'CLAIMED | REQUEUED | REMOVED',
  split_group  INT         NOT NULL DEFAULT 0,
  at           DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY idx_batch_history_batch (batch_id, id),
  KEY idx_batch_history_operation (operation_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS idempotency_record (
  idem_key      VARCHAR(255) NOT NULL,
  fingerprint   CHAR(64)     NOT NULL,
  state         VARCHAR(16)  NOT NULL DEFAULT 'IN_FLIGHT',
  status_code   INT          NULL,
  response_body MEDIUMTEXT   NULL,
  created_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  expires_at    DATETIME(3)  NOT NULL,
  PRIMARY KEY (idem_key),
  KEY idx_idempotency_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
      R"sql(
CREATE TABLE IF NOT EXISTS audit_log (
  id        BIGINT       NOT NULL AUTO_INCREMENT,
  at        DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  operator  VARCHAR(128) NOT NULL,
  action    VARCHAR(64)  NOT NULL,
  target    VARCHAR(255) NOT NULL DEFAULT '',
  params    JSON         NULL,
  outcome   VARCHAR(64)  NOT NULL DEFAULT '',
  dedup_key VARCHAR(191) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_audit_dedup (dedup_key),
  KEY idx_audit_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql",
  };
}

}  // namespace changeflow::persistence
