#pragma once

// The rows pg_upgrade_test.cc writes with plain SQL right after the migration that introduced
// their kind, over that migration's schema. `${NAME}` stands for a value of
// ql::testing::UpgradeData (ids, digests, plans, keys) or of the test (sealed secrets).

namespace ql::pg::testing {

// Runs admitted and finished before any worker existed (cron, manual, api; finished, queued,
// waiting for a retry), with their attempts, events and retry policies.
inline constexpr char kRunsSql[] = R"sql(
INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, execution_revision_id,
                      trigger_id, trigger_revision, scheduled_for_ms, trigger_type, status, version,
                      event_sequence, priority, idempotency_key, retry_of_run_id, created_at_ms,
                      queued_at_ms, started_at_ms, finished_at_ms, retry_at_ms,
                      cancel_requested_at_ms, cancel_reason, error_code, error_summary, exit_code)
VALUES
  ('${R1}', '${P}', '${T1}', 2, '${DT1r2}', '${XT1r2}', '${G1}', 1, 1779989700000, 'cron',
   'succeeded', 7, 6, 0, '${KEYC0}', NULL, 1779989700000, 1779989700000, 1779989700100,
   1779989760000, NULL, NULL, NULL, NULL, NULL, 0),
  ('${R2}', '${P}', '${T1}', 1, '${DT1r1}', '${XT1r1}', NULL, NULL, NULL, 'manual', 'failed', 5,
   4, 5, 'deploy-1', NULL, 1779905000000, 1779905000000, 1779905000100, 1779905001000, NULL,
   NULL, NULL, 'exit_status', 'command exited with status 1', 1),
  ('${R3}', '${P}', '${T1}', 2, '${DT1r2}', '${XT1r2}', NULL, NULL, NULL, 'api', 'queued', 1, 2,
   0, NULL, '${R2}', 1779989800000, 1779989800000, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL),
  ('${R4}', '${P}', '${T1}', 2, '${DT1r2}', '${XT1r2}', '${G2}', 1, 1779984000000, 'cron',
   'retry_wait', 5, 4, 0, '${KEYG2}', NULL, 1779984000000, 1779984000000, 1779984000100, NULL,
   1779999000000, NULL, NULL, 'exit_status', 'command exited with status 2', 2);
INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, callback_sequence,
                              created_at_ms, started_at_ms, finished_at_ms, exit_code, error_code,
                              error_summary)
VALUES
  ('${A1}', '${R1}', 1, 'failed', 'remote_worker', 2, 1779989700000, 1779989700100,
   1779989710000, 1, 'exit_status', 'command exited with status 1'),
  ('${A2}', '${R1}', 2, 'succeeded', 'remote_worker', 2, 1779989711000, 1779989711100,
   1779989760000, 0, NULL, NULL),
  ('${A3}', '${R2}', 1, 'failed', 'remote_worker', 2, 1779905000000, 1779905000100,
   1779905001000, 1, 'exit_status', 'command exited with status 1'),
  ('${A4}', '${R3}', 1, 'claimed', 'remote_worker', 0, 1779989800000, NULL, NULL, NULL, NULL,
   NULL),
  ('${A5}', '${R4}', 1, 'failed', 'remote_worker', 2, 1779984000000, 1779984000100,
   1779984010000, 2, 'exit_status', 'command exited with status 2');
INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, dedupe_key,
                            payload_json, created_at_ms)
VALUES
  ('${R1}', 1, 'run.created', 'scheduler', NULL, NULL, '{}', 1779989700000),
  ('${R1}', 2, 'run.queued', 'scheduler', '${A1}', NULL, '{}', 1779989700000),
  ('${R1}', 3, 'run.running', 'worker', '${A1}', NULL, '{}', 1779989700100),
  ('${R1}', 4, 'run.retry_wait', 'worker', '${A1}', '${A1}:exit', '{"exit_code":1}',
   1779989710000),
  ('${R1}', 5, 'run.running', 'worker', '${A2}', NULL, '{}', 1779989711100),
  ('${R1}', 6, 'run.succeeded', 'worker', '${A2}', '${A2}:exit', '{"exit_code":0}',
   1779989760000),
  ('${R2}', 1, 'run.created', 'user', NULL, NULL, '{}', 1779905000000),
  ('${R2}', 2, 'run.queued', 'user', '${A3}', NULL, '{}', 1779905000000),
  ('${R2}', 3, 'run.running', 'worker', '${A3}', NULL, '{}', 1779905000100),
  ('${R2}', 4, 'run.failed', 'worker', '${A3}', NULL, '{"exit_code":1}', 1779905001000),
  ('${R3}', 1, 'run.created', 'user', NULL, NULL, '{"retry_of":"${R2}"}', 1779989800000),
  ('${R3}', 2, 'run.queued', 'user', '${A4}', NULL, '{}', 1779989800000),
  ('${R4}', 1, 'run.created', 'scheduler', NULL, NULL, '{}', 1779984000000),
  ('${R4}', 2, 'run.queued', 'scheduler', '${A5}', NULL, '{}', 1779984000000),
  ('${R4}', 3, 'run.running', 'worker', '${A5}', NULL, '{}', 1779984000100),
  ('${R4}', 4, 'run.retry_wait', 'worker', '${A5}', NULL, '{"retry_at_ms":1779999000000}',
   1779984010000);
INSERT INTO ql3.run_retry_policies (run_id, max_attempts, retry_on_lost, safety, backoff_base_ms,
                                    backoff_max_ms)
VALUES ('${R1}', 3, false, 'unknown', 1000, 60000), ('${R2}', 1, false, 'unknown', 1000, 60000),
       ('${R3}', 3, false, 'unknown', 1000, 60000), ('${R4}', 4, true, 'idempotent', 500, 5000);
)sql";

// A worker credential with its session, and a run it holds under a granted lease.
inline constexpr char kWorkersSql[] = R"sql(
INSERT INTO ql3.worker_credentials (id, name, token_digest, created_at_ms, revoked_at_ms)
VALUES ('${W1}', 'host-7', '${W1D}', 1779900000000, NULL);
INSERT INTO ql3.worker_sessions (id, credential_id, generation, status, capabilities_json,
                                 max_concurrent_runs, available_slots, version, heartbeat_at_ms,
                                 expires_at_ms, created_at_ms, updated_at_ms)
VALUES ('${WS1}', '${W1}', 1, 'active', '{}', 4, 3, 5, 1779995000000, 1779995030000,
        1779990000000, 1779995000000);
INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, execution_revision_id,
                      trigger_type, status, version, event_sequence, priority, created_at_ms,
                      queued_at_ms, started_at_ms)
VALUES ('${R6}', '${P}', '${T1}', 2, '${DT1r2}', '${XT1r2}', 'api', 'running', 4, 4, 0,
        1779994000000, 1779994000000, 1779994000500);
INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, callback_sequence,
                              worker_id, worker_session_id, session_generation,
                              lease_expires_at_ms, offer_id, created_at_ms, started_at_ms)
VALUES ('${A6}', '${R6}', 1, 'running', 'remote_worker', 2, '${W1}', '${WS1}', 1, 1779995030000,
        '${OF1}', 1779994000000, 1779994000500);
INSERT INTO ql3.run_dispatch_leases (attempt_id, run_id, worker_session_id, session_generation,
                                     offer_id, token_digest, lease_version, status,
                                     granted_at_ms, renewed_at_ms, expires_at_ms, released_at_ms)
VALUES ('${A6}', '${R6}', '${WS1}', 1, '${OF1}', '${OF1D}', 3, 'granted', 1779994000100,
        1779995000000, 1779995030000, NULL);
INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, payload_json,
                            created_at_ms)
VALUES ('${R6}', 1, 'run.created', 'user', NULL, '{}', 1779994000000),
       ('${R6}', 2, 'run.queued', 'user', '${A6}', '{}', 1779994000000),
       ('${R6}', 3, 'run.dispatching', 'dispatcher', '${A6}', '{}', 1779994000100),
       ('${R6}', 4, 'run.running', 'worker', '${A6}', '{}', 1779994000500);
INSERT INTO ql3.run_retry_policies (run_id, max_attempts, retry_on_lost, safety, backoff_base_ms,
                                    backoff_max_ms)
VALUES ('${R6}', 1, false, 'unknown', 1000, 60000);
)sql";

inline constexpr char kApiCredentialsSql[] = R"sql(
INSERT INTO ql3.api_credentials (id, name, token_digest, created_at_ms, revoked_at_ms)
VALUES ('${C1}', 'ops-token', '${C1D}', 1779900000000, NULL),
       ('${C2}', 'old-token', '${C2D}', 1779900000000, 1779950000000);
)sql";

inline constexpr char kLogsSql[] = R"sql(
INSERT INTO ql3.run_log_chunks (attempt_id, byte_offset, run_id, data, created_at_ms)
VALUES ('${A1}', 0, '${R1}', convert_to('hello ', 'UTF8'), 1779989705000),
       ('${A1}', 6, '${R1}', convert_to('world' || chr(10), 'UTF8'), 1779989709000),
       ('${A2}', 0, '${R1}', convert_to('done' || chr(10), 'UTF8'), 1779989759000);
)sql";

inline constexpr char kGovernanceSql[] = R"sql(
INSERT INTO ql3.principals (id, kind, name, status, version, created_at_ms, updated_at_ms)
VALUES ('${U1}', 'user', 'ops', 'active', 1, 1779900000000, 1779900000000),
       ('${U2}', 'service', 'ci', 'active', 1, 1779900000000, 1779900000000);
INSERT INTO ql3.api_tokens (id, principal_id, token_digest, created_at_ms, expires_at_ms,
                            revoked_at_ms)
VALUES ('${K1}', '${U1}', '${K1D}', 1779900000000, NULL, NULL),
       ('${K2}', '${U2}', '${K2D}', 1779900000000, NULL, 1779950000000);
INSERT INTO ql3.api_token_usage (token_id, last_used_at_ms) VALUES ('${K1}', 1779990000000);
INSERT INTO ql3.role_bindings (scope, subject_id, version, role, mutation_id, changed_by,
                               created_at_ms)
VALUES ('installation', '${U1}', 1, 'owner', 'bootstrap', '${U1}', 1779900000000),
       ('${P}', '${U2}', 1, 'operator', 'grant-ci', '${U1}', 1779900000000),
       ('${P}', '${U2}', 2, 'viewer', 'lower-ci', '${U1}', 1779950000000);
INSERT INTO ql3.security_audit (id, at_ms, actor_id, action, target_kind, target_id, project_id,
                                outcome, code, request_id)
VALUES ('${AU1}', 1779950000000, '${U1}', 'binding.write', 'binding', '${U2}', '${P}', 'ok',
        'ok', 'req-1');
)sql";

// A pending request, and an approved one whose run was lost after it started and was resolved
// by hand as failed.
inline constexpr char kApprovalsSql[] = R"sql(
INSERT INTO ql3.approval_requests (id, project_id, action, task_id, task_revision, task_digest,
                                   execution_revision_id, priority, idempotency_key,
                                   payload_json, payload_digest, requester_id,
                                   requester_binding_version, approver_role, status,
                                   created_at_ms, expires_at_ms, decided_at_ms)
VALUES ('${AR1}', '${P}', 'run.create', '${T3}', 1, '${DT3}', '${XT3}', 0, NULL, '${AR1P}',
        '${AR1PD}', '${U2}', 2, 'admin', 'pending', 1779990000000, 1900000000000, NULL),
       ('${AR2}', '${P}', 'run.create', '${T3}', 1, '${DT3}', '${XT3}', 0, NULL, '${AR2P}',
        '${AR2PD}', '${U2}', 2, 'admin', 'approved', 1779921000000, 1780007400000,
        1779921500000);
INSERT INTO ql3.approval_decisions (id, request_id, decision, decided_by,
                                    decider_binding_version, reason, decided_at_ms)
VALUES ('${AD2}', '${AR2}', 'approved', '${U1}', 1, 'release 1.2', 1779921500000);
INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, execution_revision_id,
                      trigger_type, status, version, event_sequence, priority, created_at_ms,
                      queued_at_ms, started_at_ms, finished_at_ms, error_code, error_summary)
VALUES ('${R5}', '${P}', '${T3}', 1, '${DT3}', '${XT3}', 'approved', 'failed', 6, 5, 0,
        1779921500000, 1779921500000, 1779921500100, 1779922000000, 'resolved_failed',
        'checked by hand');
INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, callback_sequence,
                              created_at_ms, started_at_ms, finished_at_ms, error_code,
                              error_summary)
VALUES ('${A7}', '${R5}', 1, 'lost', 'remote_worker', 1, 1779921500000, 1779921500100,
        1779921900000, 'attempt_lost', 'the lease expired');
INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, payload_json,
                            created_at_ms)
VALUES ('${R5}', 1, 'run.created', 'user', NULL, '{}', 1779921500000),
       ('${R5}', 2, 'run.queued', 'user', '${A7}', '{}', 1779921500000),
       ('${R5}', 3, 'run.running', 'worker', '${A7}', '{}', 1779921500100),
       ('${R5}', 4, 'run.recovery_required', 'recovery', '${A7}', '{}', 1779921900000),
       ('${R5}', 5, 'run.failed', 'user', NULL, '{"resolution":"failed"}', 1779922000000);
INSERT INTO ql3.run_retry_policies (run_id, max_attempts, retry_on_lost, safety, backoff_base_ms,
                                    backoff_max_ms)
VALUES ('${R5}', 1, false, 'unknown', 1000, 60000);
INSERT INTO ql3.approved_actions (id, request_id, decision_id, action, payload_digest, status,
                                  run_id, consumed_at_ms)
VALUES ('${AA2}', '${AR2}', '${AD2}', 'run.create', '${AR2PD}', 'consumed', '${R5}',
        1779921500000);
INSERT INTO ql3.approval_receipts (id, request_id, decision_id, action_id, run_id, created_at_ms)
VALUES ('${RC2}', '${AR2}', '${AD2}', '${AA2}', '${R5}', 1779921500000);
INSERT INTO ql3.run_resolutions (run_id, resolution, reason, resolved_by, retry_run_id,
                                 created_at_ms)
VALUES ('${R5}', 'failed', 'checked by hand', '${U1}', NULL, 1779922000000);
)sql";

inline constexpr char kRetentionSql[] = R"sql(
INSERT INTO ql3.project_retention (project_id, keep_days, keep_runs, version, updated_at_ms)
VALUES ('${P}', 7, NULL, 1, 1779930000000);
INSERT INTO ql3.task_retention (task_id, project_id, keep_days, keep_runs, version,
                                updated_at_ms)
VALUES ('${T1}', '${P}', NULL, 20, 2, 1779930000000);
)sql";

inline constexpr char kSecretsSql[] = R"sql(
INSERT INTO ql3.secrets (project_id, name, current_version, status, created_at_ms,
                         updated_at_ms, deleted_at_ms)
VALUES ('${P}', 'db-password', 2, 'active', 1779931000000, 1779932000000, NULL),
       ('${P}', 'old-token', 1, 'deleted', 1779931000000, 1779933000000, 1779933000000);
INSERT INTO ql3.secret_versions (project_id, name, version, key_id, wrapped_key, sealed_value,
                                 created_by, created_at_ms, shredded_at_ms)
VALUES ('${P}', 'db-password', 1, '${S1K}', '${S1W}', '${S1V}', '${U1}', 1779931000000, NULL),
       ('${P}', 'db-password', 2, '${S2K}', '${S2W}', '${S2V}', '${U1}', 1779932000000, NULL),
       ('${P}', 'old-token', 1, NULL, NULL, '${S3V}', '${U1}', 1779931000000, 1779933000000);
)sql";

// A request that retries R5, and an approved run resolved by its attempt's own late report.
inline constexpr char kEvidenceSql[] = R"sql(
INSERT INTO ql3.approval_requests (id, project_id, action, task_id, task_revision, task_digest,
                                   execution_revision_id, priority, payload_json,
                                   payload_digest, requester_id, requester_binding_version,
                                   approver_role, status, created_at_ms, expires_at_ms,
                                   decided_at_ms, retry_of_run_id)
VALUES ('${AR3}', '${P}', 'run.create', '${T3}', 1, '${DT3}', '${XT3}', 0, '${AR3P}',
        '${AR3PD}', '${U2}', 2, 'admin', 'pending', 1779990000000, 1900000000000, NULL,
        '${R5}'),
       ('${AR4}', '${P}', 'run.create', '${T3}', 1, '${DT3}', '${XT3}', 0, '${AR4P}',
        '${AR4PD}', '${U2}', 2, 'admin', 'approved', 1779923000000, 1780009400000,
        1779923500000, NULL);
INSERT INTO ql3.approval_decisions (id, request_id, decision, decided_by,
                                    decider_binding_version, reason, decided_at_ms)
VALUES ('${AD4}', '${AR4}', 'approved', '${U1}', 1, NULL, 1779923500000);
INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, execution_revision_id,
                      trigger_type, status, version, event_sequence, priority, created_at_ms,
                      queued_at_ms, started_at_ms, finished_at_ms, exit_code)
VALUES ('${R7}', '${P}', '${T3}', 1, '${DT3}', '${XT3}', 'approved', 'succeeded', 6, 5, 0,
        1779923500000, 1779923500000, 1779923500100, 1779924000000, 0);
INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, callback_sequence,
                              created_at_ms, started_at_ms, finished_at_ms, error_code)
VALUES ('${A8}', '${R7}', 1, 'lost', 'remote_worker', 1, 1779923500000, 1779923500100,
        1779923900000, 'attempt_lost');
INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, payload_json,
                            created_at_ms)
VALUES ('${R7}', 1, 'run.created', 'user', NULL, '{}', 1779923500000),
       ('${R7}', 2, 'run.queued', 'user', '${A8}', '{}', 1779923500000),
       ('${R7}', 3, 'run.running', 'worker', '${A8}', '{}', 1779923500100),
       ('${R7}', 4, 'run.recovery_required', 'recovery', '${A8}', '{}', 1779923900000),
       ('${R7}', 5, 'run.succeeded', 'worker', '${A8}', '{"evidence":"exit 0"}', 1779924000000);
INSERT INTO ql3.run_retry_policies (run_id, max_attempts, retry_on_lost, safety, backoff_base_ms,
                                    backoff_max_ms)
VALUES ('${R7}', 1, false, 'unknown', 1000, 60000);
INSERT INTO ql3.approved_actions (id, request_id, decision_id, action, payload_digest, status,
                                  run_id, consumed_at_ms)
VALUES ('${AA4}', '${AR4}', '${AD4}', 'run.create', '${AR4PD}', 'consumed', '${R7}',
        1779923500000);
INSERT INTO ql3.approval_receipts (id, request_id, decision_id, action_id, run_id, created_at_ms)
VALUES ('${RC4}', '${AR4}', '${AD4}', '${AA4}', '${R7}', 1779923500000);
INSERT INTO ql3.run_resolutions (run_id, resolution, reason, resolved_by, retry_run_id,
                                 created_at_ms)
VALUES ('${R7}', 'succeeded', 'the attempt reported exit 0', NULL, NULL, 1779924000000);
)sql";

// An occurrence of G3 refused by its overlap policy, kept as a skipped run.
inline constexpr char kSkippedSql[] = R"sql(
INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, execution_revision_id,
                      trigger_id, trigger_revision, scheduled_for_ms, trigger_type, status,
                      version, event_sequence, priority, idempotency_key, created_at_ms,
                      finished_at_ms, error_code, error_summary)
VALUES ('${R8}', '${P}', '${T4}', 1, '${DT4}', '${XT4}', '${G3}', 1, 1779935400000, 'cron',
        'skipped', 1, 2, 0, '${KEYG3}', 1779935400000, 1779935400000, 'overlap',
        'an earlier run of the trigger is unfinished');
INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, payload_json, created_at_ms)
VALUES ('${R8}', 1, 'run.created', 'scheduler', '{}', 1779935400000),
       ('${R8}', 2, 'run.skipped', 'scheduler', '{"reason":"overlap"}', 1779935400000);
INSERT INTO ql3.run_retry_policies (run_id, max_attempts, retry_on_lost, safety, backoff_base_ms,
                                    backoff_max_ms)
VALUES ('${R8}', 1, false, 'unknown', 1000, 60000);
)sql";

// A run of the compact shape: its retry policy in its own row.
inline constexpr char kCompactRunSql[] = R"sql(
INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, execution_revision_id,
                      trigger_type, status, version, event_sequence, priority, idempotency_key,
                      created_at_ms, queued_at_ms, finished_at_ms, cancel_requested_at_ms,
                      cancel_reason, error_code, retry_max_attempts, retry_backoff_base_ms,
                      retry_backoff_max_ms, retry_on_lost, retry_safety)
VALUES ('${R10}', '${P}', '${T1}', 2, '${DT1r2}', '${XT1r2}', 'manual', 'cancelled', 3, 3, 0,
        'nightly-42', 1779960000000, 1779960000000, 1779960001000, 1779960000500, 'not today',
        'cancelled', 2, 500, 8000, true, 'idempotent');
INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, callback_sequence,
                              created_at_ms, finished_at_ms, error_code)
VALUES ('${A10}', '${R10}', 1, 'cancelled', 'remote_worker', 0, 1779960000000, 1779960001000,
        'cancelled');
INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, payload_json,
                            created_at_ms)
VALUES ('${R10}', 1, 'run.created', 'user', NULL, '{}', 1779960000000),
       ('${R10}', 2, 'run.queued', 'user', '${A10}', '{}', 1779960000000),
       ('${R10}', 3, 'run.cancelled', 'user', '${A10}', '{"reason":"not today"}',
        1779960001000);
)sql";

inline constexpr char kSignInSql[] = R"sql(
INSERT INTO ql3.api_tokens (id, principal_id, token_digest, created_at_ms, expires_at_ms,
                            revoked_at_ms, kind, idle_timeout_ms, label)
VALUES ('${K3}', '${U1}', '${K3D}', 1779990000000, NULL, NULL, 'session', 315360000000,
        'panel from 10.0.0.7');
INSERT INTO ql3.api_token_usage (token_id, last_used_at_ms) VALUES ('${K3}', 1779999000000);
INSERT INTO ql3.principal_passwords (principal_id, hash, must_change, set_at_ms,
                                     failed_attempts, locked_until_ms, totp_secret, totp_enabled,
                                     totp_last_step, recovery_digests)
VALUES ('${U1}', '$argon2id$v=19$m=65536,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaA',
        false, 1779940000000, 1, NULL, 'JBSWY3DPEHPK3PXP', true, 59333000, '${RECOVERYD}');
)sql";

inline constexpr char kSignInPoliciesSql[] = R"sql(
INSERT INTO ql3.principals (id, kind, name, status, version, created_at_ms, updated_at_ms)
VALUES ('${U3}', 'user', 'alice', 'active', 1, 1779990000000, 1779990000000);
INSERT INTO ql3.api_tokens (id, principal_id, token_digest, created_at_ms, expires_at_ms,
                            revoked_at_ms, kind, idle_timeout_ms, label, restriction)
VALUES ('${K4}', '${U3}', '${K4D}', 1779990000000, NULL, NULL, 'session', 315360000000,
        'panel from 10.0.0.8', 'password_change');
UPDATE ql3.installation SET require_second_factor = 'admins', setup_code_digest = '${SETUPD}',
                            setup_code_expires_at_ms = 1900000000000;
INSERT INTO ql3.oidc_logins (state_digest, nonce, code_verifier, client, cli_port, cli_key,
                             created_at_ms, expires_at_ms)
VALUES ('${STATED}', 'nonce-0123456789abcdef', 'verifier-0123456789abcdefghijklmnopqrstuvwxyz012',
        'cli', 45678, 'cli-key-0123456789abcdefghijklmnopqrstuvwxy', 1779999900000,
        1900000000000);
)sql";

inline constexpr char kNotificationsSql[] = R"sql(
INSERT INTO ql3.notification_channels (id, project_id, name, type, config_json, created_by,
                                       created_at_ms, deleted_at_ms)
VALUES ('${N1}', '${P}', 'ops', 'webhook', '{"url":"https://hooks.example.com/ql"}', '${U1}',
        1779960000000, NULL);
INSERT INTO ql3.notification_rules (id, project_id, channel_id, event, task_id, mode,
                                    min_interval_ms, threshold_ms, created_by, created_at_ms)
VALUES ('${NR1}', '${P}', '${N1}', 'failed', '${T1}', 'change', 60000, NULL, '${U1}',
        1779960000000);
INSERT INTO ql3.notification_rule_states (rule_id, task_id, failing, suppressed,
                                          last_sent_at_ms, updated_at_ms)
VALUES ('${NR1}', '${T1}', true, 0, 1779961000000, 1779961000000);
INSERT INTO ql3.notification_channel_states (channel_id, project_id, window_started_at_ms,
                                             sent_in_window)
VALUES ('${N1}', '${P}', 1779961000000, 1);
INSERT INTO ql3.notification_outbox (id, project_id, channel_id, rule_id, event, task_id, run_id,
                                     payload_json, status, attempts, next_attempt_at_ms,
                                     deadline_at_ms, lease_owner, lease_until_ms,
                                     last_status_code, last_error, last_latency_ms,
                                     created_at_ms, delivered_at_ms)
VALUES ('${O1}', '${P}', '${N1}', '${NR1}', 'failed', '${T1}', '${R2}', '{"run":"${R2}"}',
        'delivered', 1, 1779961000000, 1780047400000, NULL, NULL, 200, NULL, 42, 1779961000000,
        1779961000100);
)sql";

inline constexpr char kRetryOnTimeoutSql[] = R"sql(
INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, execution_revision_id,
                      trigger_type, status, version, event_sequence, priority, created_at_ms,
                      queued_at_ms, started_at_ms, finished_at_ms, error_code, error_summary,
                      retry_max_attempts, retry_backoff_base_ms, retry_backoff_max_ms,
                      retry_on_lost, retry_safety, retry_on_timeout)
VALUES ('${R9}', '${P}', '${T1}', 2, '${DT1r2}', '${XT1r2}', 'manual', 'timed_out', 5, 4, 0,
        1779970000000, 1779970000000, 1779970000100, 1779970600100, 'timeout',
        'ran past its timeout', 1, 1000, 60000, false, 'unknown', true);
INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, callback_sequence,
                              created_at_ms, started_at_ms, finished_at_ms, error_code)
VALUES ('${A9}', '${R9}', 1, 'timed_out', 'remote_worker', 2, 1779970000000, 1779970000100,
        1779970600100, 'timeout');
INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, payload_json,
                            created_at_ms)
VALUES ('${R9}', 1, 'run.created', 'user', NULL, '{}', 1779970000000),
       ('${R9}', 2, 'run.queued', 'user', '${A9}', '{}', 1779970000000),
       ('${R9}', 3, 'run.running', 'worker', '${A9}', '{}', 1779970000100),
       ('${R9}', 4, 'run.timed_out', 'recovery', '${A9}', '{}', 1779970600100);
)sql";

// Artifacts: three uploaded blobs (F3 cut into two chunks), the file script `hello` at version 2
// and the tree script `tools` (deleted) whose manifest M names F1 and F2.
// Placement (pg-0028): a pool granted to the project with limits, a drained worker, and a worker
// whose newest session is in pool gpu (pg-0029 binds its credential there).
inline constexpr char kPlacementSql[] = R"sql(
INSERT INTO ql3.worker_pools (name, serves_all_projects, max_running, version, created_at_ms,
                              updated_at_ms)
VALUES ('gpu', false, 8, 2, 1779980000000, 1779981000000);
INSERT INTO ql3.worker_credentials (id, name, token_digest, created_at_ms, revoked_at_ms)
VALUES ('${W2}', 'gpu-host', '${W2D}', 1779980000000, NULL);
INSERT INTO ql3.worker_sessions (id, credential_id, generation, status, capabilities_json,
                                 max_concurrent_runs, available_slots, version, heartbeat_at_ms,
                                 expires_at_ms, created_at_ms, updated_at_ms, pool, labels,
                                 agent_version)
VALUES ('${WS2}', '${W2}', 1, 'offline', '{}', 2, 0, 3, 1779981000000, 1779981030000,
        1779980500000, 1779981000000, 'gpu', '{"cuda": "12"}', 'ql-worker 0.1.0');
INSERT INTO ql3.worker_pool_grants (pool, project_id, max_running, weight, created_by,
                                    created_at_ms, updated_at_ms)
VALUES ('gpu', '${P}', 3, 2, '${U1}', 1779980000000, 1779980000000);
INSERT INTO ql3.worker_drains (credential_id, requested_by, requested_at_ms)
VALUES ('${W1}', '${U1}', 1779982000000);
)sql";

// Worker credential pools (pg-0029): a credential bound to pool batch that never registered.
inline constexpr char kCredentialPoolsSql[] = R"sql(
INSERT INTO ql3.worker_credentials (id, name, token_digest, created_at_ms, revoked_at_ms, pool)
VALUES ('${W3}', 'batch-host', '${W3D}', 1779985000000, NULL, 'batch');
)sql";

inline constexpr char kArtifactsSql[] = R"sql(
INSERT INTO ql3.artifact_chunks (digest, size, bytes, touched_at_ms)
VALUES ('${ARTF1}', ${ARTF1N}, decode('${ARTF1X}', 'hex'), 1779975000000),
       ('${ARTF2}', ${ARTF2N}, decode('${ARTF2X}', 'hex'), 1779975000000),
       ('${ARTF3C1}', ${ARTF3C1N}, decode('${ARTF3C1X}', 'hex'), 1779976000000),
       ('${ARTF3C2}', ${ARTF3C2N}, decode('${ARTF3C2X}', 'hex'), 1779976000000),
       ('${ARTM}', ${ARTMN}, decode('${ARTMX}', 'hex'), 1779975000000);
INSERT INTO ql3.artifact_blobs (digest, size, chunk_count, touched_at_ms)
VALUES ('${ARTF1}', ${ARTF1N}, 1, 1779975000000), ('${ARTF2}', ${ARTF2N}, 1, 1779975000000),
       ('${ARTF3}', ${ARTF3N}, 2, 1779976000000), ('${ARTM}', ${ARTMN}, 1, 1779975000000);
INSERT INTO ql3.artifact_blob_chunks (blob_digest, seq, chunk_digest)
VALUES ('${ARTF1}', 0, '${ARTF1}'), ('${ARTF2}', 0, '${ARTF2}'), ('${ARTF3}', 0, '${ARTF3C1}'),
       ('${ARTF3}', 1, '${ARTF3C2}'), ('${ARTM}', 0, '${ARTM}');
INSERT INTO ql3.artifact_uploads (project_id, digest, touched_at_ms)
VALUES ('${P}', '${ARTF1}', 1779975000000), ('${P}', '${ARTF2}', 1779975000000),
       ('${P}', '${ARTF3}', 1779976000000);
INSERT INTO ql3.scripts (project_id, name, latest_version, status, created_at_ms, updated_at_ms,
                         deleted_at_ms)
VALUES ('${P}', 'hello', 2, 'active', 1779975000000, 1779976000000, NULL),
       ('${P}', 'tools', 1, 'deleted', 1779975000000, 1779977000000, 1779977000000);
INSERT INTO ql3.script_versions (project_id, name, version, kind, digest, size, entry, created_by,
                                 created_at_ms)
VALUES ('${P}', 'hello', 1, 'file', '${ARTF1}', ${ARTF1N}, 'hello.sh', '${U1}', 1779975000000),
       ('${P}', 'hello', 2, 'file', '${ARTF3}', ${ARTF3N}, 'hello.sh', '${U1}', 1779976000000),
       ('${P}', 'tools', 1, 'tree', '${ARTM}', ${ARTTN}, 'run.sh', '${U1}', 1779975000000);
INSERT INTO ql3.script_version_files (project_id, name, version, path, digest, size, executable)
VALUES ('${P}', 'hello', 1, 'hello.sh', '${ARTF1}', ${ARTF1N}, false),
       ('${P}', 'hello', 2, 'hello.sh', '${ARTF3}', ${ARTF3N}, false),
       ('${P}', 'tools', 1, 'lib/util.sh', '${ARTF2}', ${ARTF2N}, false),
       ('${P}', 'tools', 1, 'run.sh', '${ARTF1}', ${ARTF1N}, true);
)sql";

}  // namespace ql::pg::testing
