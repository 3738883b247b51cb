#include "ql/storage/postgres/pg_client.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>
#include <utility>

namespace ql::pg {
namespace {

constexpr unsigned kBoolOid = 16;
constexpr unsigned kByteaOid = 17;
constexpr unsigned kCharOid = 18;
constexpr unsigned kNameOid = 19;
constexpr unsigned kInt8Oid = 20;
constexpr unsigned kInt2Oid = 21;
constexpr unsigned kInt4Oid = 23;
constexpr unsigned kTextOid = 25;
constexpr unsigned kOidOid = 26;
constexpr unsigned kVarcharOid = 1043;
constexpr unsigned kUuidOid = 2950;

std::string Str(std::string_view s) { return std::string(s); }

// One line of libpq's error text without the trailing newline; server errors carry no
// parameters, and libpq connection errors name host and port but never the password.
std::string FirstLine(const char* text) {
  if (text == nullptr) return "";
  std::string s(text);
  size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

std::mutex& NoticeMutex() {
  static auto* const mu = new std::mutex();
  return *mu;
}

NoticeSink& NoticeSinkSlot() {
  static auto* const sink = new NoticeSink();
  return *sink;
}

// libpq's notice receiver: one diagnostic line per notice, never libpq's own stderr output.
void ReceiveNotice(void* /*arg*/, const PGresult* notice) {
  const auto field = [&](int code) {
    const char* value = PQresultErrorField(notice, code);
    return value == nullptr ? std::string() : FirstLine(value);
  };
  std::string severity = field(PG_DIAG_SEVERITY_NONLOCALIZED);
  if (severity.empty()) severity = field(PG_DIAG_SEVERITY);
  std::string line = "postgres: " + (severity.empty() ? std::string("NOTICE") : severity);
  if (std::string state = field(PG_DIAG_SQLSTATE); !state.empty()) line += " " + state;
  std::string message = field(PG_DIAG_MESSAGE_PRIMARY);
  if (message.empty()) message = FirstLine(PQresultErrorMessage(notice));
  line += ": " + message;
  NoticeSink sink;
  {
    std::lock_guard<std::mutex> lock(NoticeMutex());
    sink = NoticeSinkSlot();
  }
  if (sink) {
    sink(line);
  } else {
    std::cerr << line << std::endl;
  }
}

// What violating one named constraint means to a caller. Every unique, foreign-key and CHECK
// constraint of schema_contract.txt has exactly one rule (a test parses the contract); a
// violation of a constraint without one is Corrupt `unknown_constraint`.
struct ConstraintRule {
  std::string_view constraint;
  StatusCode code;
  std::string_view reason;
};

// Every unique constraint (primary keys included) and what losing it means to a caller.
constexpr ConstraintRule kUniqueRules[] = {
    {"runs_idempotency_key_key", StatusCode::kDuplicate, "idempotency_key_duplicate"},
    {"runs_cron_occurrence_key", StatusCode::kDuplicate, "idempotency_key_duplicate"},
    {"run_events_dedupe_key_key", StatusCode::kDuplicate, "dedupe_key_duplicate"},
    {"projects_slug_key", StatusCode::kDuplicate, "slug_duplicate"},
    {"task_revisions_mutation_id_key", StatusCode::kConflict, "mutation_id_reused"},
    {"trigger_revisions_mutation_id_key", StatusCode::kConflict, "mutation_id_reused"},
    {"task_revisions_pkey", StatusCode::kConflict, "revision_conflict"},
    {"trigger_revisions_pkey", StatusCode::kConflict, "revision_conflict"},
    {"run_events_pkey", StatusCode::kConflict, "fence_conflict"},
    {"run_attempts_run_attempt_key", StatusCode::kConflict, "fence_conflict"},
    {"trigger_schedules_pkey", StatusCode::kConflict, "fence_conflict"},
    {"worker_sessions_generation_key", StatusCode::kConflict, "fence_conflict"},
    {"run_dispatch_leases_pkey", StatusCode::kConflict, "fence_conflict"},
    {"run_dispatch_leases_offer_key", StatusCode::kDuplicate, "duplicate_id"},
    {"projects_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"oidc_logins_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"task_heads_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"trigger_heads_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"task_heads_live_name", StatusCode::kDuplicate, "name_duplicate"},
    {"trigger_heads_live_name", StatusCode::kDuplicate, "name_duplicate"},
    {"execution_revisions_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"execution_revisions_task_executor_key", StatusCode::kDuplicate, "duplicate_id"},
    {"runs_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"run_attempts_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"worker_credentials_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"worker_credentials_name_key", StatusCode::kDuplicate, "name_duplicate"},
    {"worker_credentials_id_pool_key", StatusCode::kDuplicate, "duplicate_id"},
    {"worker_credentials_token_digest_key", StatusCode::kDuplicate, "duplicate_id"},
    {"worker_sessions_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"worker_pools_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"worker_pool_grants_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"worker_drains_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"run_log_chunks_pkey", StatusCode::kConflict, "log_offset_mismatch"},
    {"schema_migrations_pkey", StatusCode::kConflict, "migration_conflict"},
    {"schema_capabilities_pkey", StatusCode::kConflict, "migration_conflict"},
    {"schema_migration_markers_pkey", StatusCode::kConflict, "migration_conflict"},
    {"installation_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"principals_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"principals_name_key", StatusCode::kDuplicate, "principal_name_duplicate"},
    {"api_tokens_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"principal_passwords_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"api_tokens_token_digest_key", StatusCode::kDuplicate, "duplicate_id"},
    {"api_token_usage_pkey", StatusCode::kConflict, "fence_conflict"},
    {"role_bindings_pkey", StatusCode::kConflict, "binding_version_conflict"},
    {"role_bindings_mutation_id_key", StatusCode::kConflict, "mutation_id_reused"},
    {"security_audit_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"approval_requests_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"approval_requests_idempotency_key_key", StatusCode::kDuplicate, "idempotency_key_duplicate"},
    {"approval_decisions_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"approval_decisions_request_key", StatusCode::kConflict, "approval_decided"},
    {"approved_actions_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"approved_actions_request_key", StatusCode::kConflict, "approval_decided"},
    {"approved_actions_decision_key", StatusCode::kConflict, "approval_decided"},
    {"approved_actions_run_key", StatusCode::kConflict, "approval_decided"},
    {"approval_receipts_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"approval_receipts_request_key", StatusCode::kConflict, "approval_decided"},
    {"approval_receipts_decision_key", StatusCode::kConflict, "approval_decided"},
    {"approval_receipts_action_key", StatusCode::kConflict, "approval_decided"},
    {"approval_receipts_run_key", StatusCode::kConflict, "approval_decided"},
    {"run_resolutions_pkey", StatusCode::kConflict, "run_already_resolved"},
    {"run_resolutions_retry_run_key", StatusCode::kConflict, "run_already_resolved"},
    {"project_retention_pkey", StatusCode::kConflict, "retention_conflict"},
    {"task_retention_pkey", StatusCode::kConflict, "retention_conflict"},
    {"secrets_pkey", StatusCode::kConflict, "secret_version_conflict"},
    {"secret_versions_pkey", StatusCode::kConflict, "secret_version_conflict"},
    {"notification_channels_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"notification_channels_live_name", StatusCode::kDuplicate, "channel_name_duplicate"},
    {"notification_rules_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"notification_rule_states_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"notification_channel_states_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"notification_outbox_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"artifact_chunks_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"artifact_blobs_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"artifact_blob_chunks_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"artifact_uploads_pkey", StatusCode::kDuplicate, "duplicate_id"},
    {"scripts_pkey", StatusCode::kConflict, "script_version_conflict"},
    {"script_versions_pkey", StatusCode::kConflict, "script_version_conflict"},
    {"script_version_files_pkey", StatusCode::kDuplicate, "duplicate_id"},
};

// Every foreign key of the schema: a write that names a row that does not exist.
constexpr ConstraintRule kForeignKeyRules[] = {
    {"api_token_usage_token_fkey", StatusCode::kNotFound, "token_not_found"},
    {"api_tokens_principal_fkey", StatusCode::kNotFound, "principal_not_found"},
    {"principal_passwords_principal_fkey", StatusCode::kNotFound, "principal_not_found"},
    {"role_bindings_subject_fkey", StatusCode::kNotFound, "principal_not_found"},
    {"execution_revisions_project_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"execution_revisions_task_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_attempts_run_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_dispatch_leases_attempt_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_dispatch_leases_run_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_dispatch_leases_session_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_events_attempt_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_events_run_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_log_chunks_attempt_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_log_chunks_run_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"runs_execution_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"runs_project_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"runs_retry_of_run_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"runs_task_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"runs_trigger_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"project_retention_project_fkey", StatusCode::kNotFound, "project_not_found"},
    {"task_retention_project_fkey", StatusCode::kNotFound, "project_not_found"},
    {"task_retention_task_fkey", StatusCode::kNotFound, "task_not_found"},
    {"schema_capabilities_migration_fkey", StatusCode::kCorrupt, "capability_invalid"},
    {"task_heads_current_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"task_heads_project_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"task_revisions_head_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"task_revisions_project_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_heads_current_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_heads_project_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_heads_task_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_revisions_head_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_revisions_project_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_revisions_task_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_schedules_head_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_schedules_project_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"trigger_schedules_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"worker_sessions_credential_fkey", StatusCode::kNotFound, "reference_not_found"},
    // A session in another pool than its credential's (RegisterSession refuses it first).
    {"worker_sessions_credential_pool_fkey", StatusCode::kPermissionDenied, "pool_not_allowed"},
    {"worker_pool_grants_pool_fkey", StatusCode::kNotFound, "pool_not_found"},
    {"worker_pool_grants_project_fkey", StatusCode::kNotFound, "project_not_found"},
    {"worker_drains_credential_fkey", StatusCode::kNotFound, "worker_not_found"},
    {"approval_requests_project_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"approval_requests_task_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"approval_requests_execution_revision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"approval_requests_requester_fkey", StatusCode::kNotFound, "principal_not_found"},
    {"approval_decisions_request_fkey", StatusCode::kNotFound, "approval_not_found"},
    {"approval_decisions_decider_fkey", StatusCode::kNotFound, "principal_not_found"},
    {"approved_actions_request_fkey", StatusCode::kNotFound, "approval_not_found"},
    {"approved_actions_decision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"approved_actions_run_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"approval_receipts_request_fkey", StatusCode::kNotFound, "approval_not_found"},
    {"approval_receipts_decision_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"approval_receipts_action_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"approval_receipts_run_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"run_resolutions_run_fkey", StatusCode::kNotFound, "run_not_found"},
    {"run_resolutions_resolver_fkey", StatusCode::kNotFound, "principal_not_found"},
    {"run_resolutions_retry_run_fkey", StatusCode::kNotFound, "reference_not_found"},
    {"secrets_project_fkey", StatusCode::kNotFound, "project_not_found"},
    {"secret_versions_secret_fkey", StatusCode::kNotFound, "secret_not_found"},
    {"notification_channels_project_fkey", StatusCode::kNotFound, "project_not_found"},
    {"notification_rules_project_fkey", StatusCode::kNotFound, "project_not_found"},
    {"notification_rules_channel_fkey", StatusCode::kNotFound, "channel_not_found"},
    {"artifact_blob_chunks_blob_fkey", StatusCode::kNotFound, "artifact_not_found"},
    // A chunk purged while its blob was being committed: the upload is to be tried again.
    {"artifact_blob_chunks_chunk_fkey", StatusCode::kUnavailable, "artifact_chunk_missing"},
    {"artifact_uploads_project_fkey", StatusCode::kNotFound, "project_not_found"},
    {"artifact_uploads_blob_fkey", StatusCode::kNotFound, "artifact_not_found"},
    {"scripts_project_fkey", StatusCode::kNotFound, "project_not_found"},
    {"script_versions_script_fkey", StatusCode::kNotFound, "script_not_found"},
    {"script_versions_blob_fkey", StatusCode::kNotFound, "artifact_not_found"},
    {"script_version_files_version_fkey", StatusCode::kNotFound, "script_version_not_found"},
    {"script_version_files_blob_fkey", StatusCode::kNotFound, "artifact_not_found"},
};

// Every CHECK constraint of the schema: a value the schema refuses.
constexpr ConstraintRule kCheckRules[] = {
    {"task_heads_name_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_heads_name_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"api_tokens_token_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"api_tokens_kind_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"api_tokens_idle_timeout_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"api_tokens_label_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"principal_passwords_hash_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"principal_passwords_failed_attempts_check", StatusCode::kInvalidArgument,
     "constraint_violated"},
    {"api_tokens_restriction_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"installation_id_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"installation_require_second_factor_check", StatusCode::kInvalidArgument, "invalid_setting"},
    {"installation_setup_code_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"oidc_logins_state_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"oidc_logins_nonce_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"oidc_logins_code_verifier_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"oidc_logins_client_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"oidc_logins_cli_port_check", StatusCode::kInvalidArgument, "invalid_cli_port"},
    {"oidc_logins_cli_key_check", StatusCode::kInvalidArgument, "invalid_public_key"},
    {"oidc_logins_expiry_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"installation_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"principals_kind_check", StatusCode::kInvalidArgument, "invalid_principal_kind"},
    {"principals_name_check", StatusCode::kInvalidArgument, "invalid_principal_name"},
    {"principals_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"principals_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"role_bindings_mutation_id_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"role_bindings_role_check", StatusCode::kInvalidArgument, "invalid_role"},
    {"role_bindings_scope_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"role_bindings_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"security_audit_action_check", StatusCode::kInvalidArgument, "invalid_audit_fact"},
    {"security_audit_outcome_check", StatusCode::kInvalidArgument, "invalid_audit_fact"},
    {"execution_revisions_executor_type_check", StatusCode::kInvalidArgument,
     "constraint_violated"},
    {"execution_revisions_plan_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"execution_revisions_task_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"projects_slug_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"projects_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"projects_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_attempts_attempt_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_attempts_callback_sequence_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_attempts_executor_type_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_attempts_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_dispatch_leases_expiry_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_dispatch_leases_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_dispatch_leases_token_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_dispatch_leases_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_events_actor_type_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_events_dedupe_key_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_events_payload_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_events_sequence_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_events_type_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_log_chunks_data_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_log_chunks_offset_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_cron_occurrence_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_retry_backoff_base_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_retry_backoff_max_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_retry_max_attempts_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_retry_safety_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_cron_key_check", StatusCode::kInvalidArgument, "cron_key_stored"},
    {"runs_event_sequence_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_idempotency_key_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_task_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_trigger_type_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"runs_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"project_retention_keep_days_check", StatusCode::kInvalidArgument, "invalid_keep_days"},
    {"project_retention_keep_runs_check", StatusCode::kInvalidArgument, "invalid_keep_runs"},
    {"project_retention_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"task_retention_keep_days_check", StatusCode::kInvalidArgument, "invalid_keep_days"},
    {"task_retention_keep_runs_check", StatusCode::kInvalidArgument, "invalid_keep_runs"},
    {"task_retention_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"schema_capabilities_name_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"schema_capabilities_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"schema_migrations_checksum_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"schema_migrations_dialect_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"schema_migrations_stream_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"schema_migration_markers_id_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"schema_migration_markers_checksum_check", StatusCode::kInvalidArgument,
     "constraint_violated"},
    {"schema_migration_markers_statements_check", StatusCode::kInvalidArgument,
     "constraint_violated"},
    {"task_heads_current_revision_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"task_revisions_concurrency_check", StatusCode::kInvalidArgument, "invalid_concurrency"},
    {"task_revisions_content_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"task_revisions_kind_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"task_revisions_mutation_id_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"task_revisions_published_by_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"task_revisions_revision_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_heads_current_revision_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_revisions_content_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_revisions_expression_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_revisions_misfire_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_revisions_jitter_ms_check", StatusCode::kInvalidArgument, "invalid_jitter"},
    {"trigger_revisions_mutation_id_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_revisions_overlap_check", StatusCode::kInvalidArgument, "invalid_overlap_policy"},
    {"trigger_revisions_revision_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_revisions_task_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_revisions_timezone_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_schedules_claim_complete_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_schedules_claim_expiry_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_schedules_claim_owner_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_schedules_claim_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"trigger_schedules_state_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"worker_credentials_name_check", StatusCode::kInvalidArgument, "invalid_credential_name"},
    {"worker_credentials_pool_check", StatusCode::kInvalidArgument, "invalid_pool"},
    {"worker_credentials_token_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"worker_sessions_capabilities_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"worker_sessions_generation_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"worker_sessions_pool_check", StatusCode::kInvalidArgument, "invalid_pool"},
    {"worker_sessions_labels_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"worker_sessions_agent_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"execution_revisions_pool_check", StatusCode::kInvalidArgument, "invalid_pool"},
    {"execution_revisions_required_labels_check", StatusCode::kInvalidArgument,
     "constraint_violated"},
    {"worker_pools_name_check", StatusCode::kInvalidArgument, "invalid_pool"},
    {"worker_pools_max_running_check", StatusCode::kInvalidArgument, "invalid_max_running"},
    {"worker_pools_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"worker_pool_grants_max_running_check", StatusCode::kInvalidArgument, "invalid_max_running"},
    {"worker_pool_grants_weight_check", StatusCode::kInvalidArgument, "invalid_weight"},
    {"worker_sessions_slots_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"worker_sessions_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"worker_sessions_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"approval_requests_action_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"approval_requests_task_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"approval_requests_payload_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"approval_requests_idempotency_key_check", StatusCode::kInvalidArgument,
     "constraint_violated"},
    {"approval_requests_binding_version_check", StatusCode::kInvalidArgument,
     "constraint_violated"},
    {"approval_requests_approver_role_check", StatusCode::kInvalidArgument,
     "approval_invalid_role"},
    {"approval_requests_status_check", StatusCode::kInvalidArgument, "invalid_status"},
    {"approval_decisions_decision_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"approval_decisions_decider_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"approved_actions_action_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"approved_actions_payload_digest_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"approved_actions_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_resolutions_resolution_check", StatusCode::kInvalidArgument, "invalid_resolution"},
    {"run_resolutions_reason_check", StatusCode::kInvalidArgument, "invalid_reason"},
    {"run_resolutions_retry_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"run_resolutions_resolver_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"secrets_name_check", StatusCode::kInvalidArgument, "secret_name_invalid"},
    {"secrets_current_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"secrets_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"secrets_deleted_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"secret_versions_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"secret_versions_key_id_check", StatusCode::kInvalidArgument, "secret_sealed_invalid"},
    {"secret_versions_wrapped_key_check", StatusCode::kInvalidArgument, "secret_sealed_invalid"},
    {"secret_versions_sealed_value_check", StatusCode::kInvalidArgument, "secret_sealed_invalid"},
    {"secret_versions_shredded_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"notification_channels_id_check", StatusCode::kInvalidArgument, "invalid_id"},
    {"notification_channels_name_check", StatusCode::kInvalidArgument, "channel_name_invalid"},
    {"notification_channels_type_check", StatusCode::kInvalidArgument, "channel_type_invalid"},
    {"notification_channels_config_json_check", StatusCode::kInvalidArgument,
     "channel_config_invalid"},
    {"notification_rules_id_check", StatusCode::kInvalidArgument, "invalid_id"},
    {"notification_rules_event_check", StatusCode::kInvalidArgument, "notify_event_invalid"},
    {"notification_rules_mode_check", StatusCode::kInvalidArgument, "notify_mode_invalid"},
    {"notification_rules_min_interval_check", StatusCode::kInvalidArgument,
     "notify_interval_invalid"},
    {"notification_rules_threshold_check", StatusCode::kInvalidArgument,
     "notify_threshold_invalid"},
    {"notification_rule_states_suppressed_check", StatusCode::kInvalidArgument,
     "constraint_violated"},
    {"notification_channel_states_sent_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"notification_outbox_id_check", StatusCode::kInvalidArgument, "invalid_id"},
    {"notification_outbox_payload_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"notification_outbox_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"notification_outbox_attempts_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"notification_outbox_lease_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"notification_outbox_delivered_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"artifact_chunks_digest_check", StatusCode::kInvalidArgument, "artifact_digest_invalid"},
    {"artifact_chunks_size_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"artifact_chunks_bytes_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"artifact_blobs_digest_check", StatusCode::kInvalidArgument, "artifact_digest_invalid"},
    {"artifact_blobs_size_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"artifact_blobs_chunk_count_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"artifact_blob_chunks_seq_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"scripts_name_check", StatusCode::kInvalidArgument, "script_name_invalid"},
    {"scripts_latest_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"scripts_status_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"scripts_deleted_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"script_versions_version_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"script_versions_kind_check", StatusCode::kInvalidArgument, "script_kind_invalid"},
    {"script_versions_size_check", StatusCode::kInvalidArgument, "constraint_violated"},
    {"script_versions_entry_check", StatusCode::kInvalidArgument, "script_entry_invalid"},
    {"script_version_files_path_check", StatusCode::kInvalidArgument, "artifact_path_invalid"},
    {"script_version_files_size_check", StatusCode::kInvalidArgument, "constraint_violated"},
};

// The rule of `constraint` in `rules`, or nullptr.
template <size_t N>
const ConstraintRule* FindRule(const ConstraintRule (&rules)[N], std::string_view constraint) {
  for (const ConstraintRule& rule : rules) {
    if (rule.constraint == constraint) return &rule;
  }
  return nullptr;
}

// The Status of violating `constraint` under `rules`, naming the constraint.
template <size_t N>
Status ConstraintStatus(const ConstraintRule (&rules)[N], std::string_view constraint,
                        const std::string& op) {
  const ConstraintRule* rule = FindRule(rules, constraint);
  if (rule == nullptr) {
    return Corrupt("unknown_constraint",
                   op + ": constraint '" + Str(constraint) + "' is one the code does not know");
  }
  return Status(rule->code, Str(rule->reason),
                op + ": " + Str(rule->reason) + " (" + Str(constraint) + ")");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// URLs

bool InsecureAllowedByEnvironment() {
  const char* value = std::getenv(kAllowInsecureEnv);
  return value != nullptr && std::string_view(value) == "true";
}

Result<std::string> CheckDatabaseUrl(const std::string& url, bool allow_insecure) {
  if (url.empty()) {
    return InvalidArgument("invalid_database_url", "the database URL is empty");
  }
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    if (error != nullptr) PQfreemem(error);
    return InvalidArgument("invalid_database_url",
                           "the database URL is not a valid PostgreSQL connection string");
  }
  std::string sslmode;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (std::strcmp(o->keyword, "sslmode") == 0 && o->val != nullptr) sslmode = o->val;
  }
  PQconninfoFree(options);
  if (sslmode.empty()) {
    bool is_uri = url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
    if (is_uri) {
      return url + (url.find('?') == std::string::npos ? "?" : "&") + "sslmode=verify-full";
    }
    return url + " sslmode=verify-full";
  }
  if (sslmode == "verify-full" || sslmode == "verify-ca") return url;
  if (sslmode != "disable" && sslmode != "allow" && sslmode != "prefer" && sslmode != "require") {
    return InvalidArgument("invalid_database_url", "sslmode '" + sslmode + "' is not known");
  }
  if (!allow_insecure) {
    return InvalidArgument("insecure_database_url",
                           "sslmode=" + sslmode +
                               " does not verify the server; use verify-full, or set " +
                               kAllowInsecureEnv + "=true for loopback tests and trusted networks");
  }
  return url;
}

std::string DatabaseUrlUser(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    if (error != nullptr) PQfreemem(error);
    return "";
  }
  std::string user;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (std::strcmp(o->keyword, "user") == 0 && o->val != nullptr) user = o->val;
  }
  PQconninfoFree(options);
  return user;
}

// ---------------------------------------------------------------------------------------------
// Errors

Status StatusFromPg(std::string_view sqlstate, std::string_view constraint, bool connection_lost,
                    std::string_view operation, PgPhase phase) {
  std::string op = Str(operation);
  if (connection_lost || sqlstate.substr(0, 2) == "08" || sqlstate == "57P01" ||
      sqlstate == "57P02" || sqlstate == "57P03") {
    if (phase == PgPhase::kCommit) {
      return OutcomeUnknown("commit_outcome_unknown",
                            op + ": the connection was lost after COMMIT was sent; the outcome "
                                 "is unknown");
    }
    return Unavailable("database_unavailable", op + ": the database connection was lost");
  }
  if (sqlstate == "40001") {
    return Busy("serialization_failure", op + ": serialization failure");
  }
  if (sqlstate == "40P01") return Busy("deadlock_detected", op + ": deadlock detected");
  if (sqlstate == "55P03")
    return Busy("lock_timeout", op + ": a row lock was not acquired in time");
  if (sqlstate == "57014") {
    return Busy("statement_timeout", op + ": the statement was cancelled (timeout)");
  }
  if (sqlstate == "25006") {
    return Unavailable("database_read_only", op + ": the database is read-only (not a primary)");
  }
  if (sqlstate == "23505") return ConstraintStatus(kUniqueRules, constraint, op);
  if (sqlstate == "23503") return ConstraintStatus(kForeignKeyRules, constraint, op);
  if (sqlstate == "23514") return ConstraintStatus(kCheckRules, constraint, op);
  if (sqlstate == "23502") {
    return InvalidArgument("constraint_violated", op + ": a required value is missing");
  }
  if (sqlstate.substr(0, 2) == "22") {
    return InvalidArgument("value_too_large", op + ": a value does not fit its column");
  }
  if (sqlstate == "QL001") return Conflict("row_immutable", op + ": the row is immutable");
  if (sqlstate == "QL002") {
    return Conflict("run_not_finished", op + ": only a finished run and what it owns are purged");
  }
  if (sqlstate == "42501") {
    return Internal("insufficient_privilege",
                    op + ": the database role lacks a privilege this operation needs");
  }
  return Internal("database_error", op + ": database error SQLSTATE " + Str(sqlstate));
}

// ---------------------------------------------------------------------------------------------
// Diagnostics

void SetNoticeSink(NoticeSink sink) {
  std::lock_guard<std::mutex> lock(NoticeMutex());
  NoticeSinkSlot() = std::move(sink);
}

// ---------------------------------------------------------------------------------------------
// Parameters and rows

Param P(int64_t value) { return Param{std::to_string(value)}; }
Param P(bool value) { return Param{std::string(value ? "t" : "f")}; }
Param P(std::string_view value) { return Param{std::string(value)}; }
Param PBytes(std::string_view bytes) { return Param{std::string(bytes), /*binary=*/true}; }

Param PArray(const std::vector<std::optional<std::string>>& elements) {
  std::string out = "{";
  for (size_t i = 0; i < elements.size(); ++i) {
    if (i > 0) out += ',';
    if (!elements[i].has_value()) {
      out += "NULL";
      continue;
    }
    out += '"';
    for (char c : *elements[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return Param{std::move(out)};
}

Rows::Rows(pg_result* result, std::string operation)
    : result_(result), operation_(std::move(operation)) {}
Rows::Rows(Rows&& other) noexcept
    : result_(std::exchange(other.result_, nullptr)),
      operation_(std::move(other.operation_)),
      status_(std::move(other.status_)) {}
Rows& Rows::operator=(Rows&& other) noexcept {
  if (this != &other) {
    if (result_ != nullptr) PQclear(result_);
    result_ = std::exchange(other.result_, nullptr);
    operation_ = std::move(other.operation_);
    status_ = std::move(other.status_);
  }
  return *this;
}
Rows::~Rows() {
  if (result_ != nullptr) PQclear(result_);
}

int Rows::size() const { return result_ == nullptr ? 0 : PQntuples(result_); }

int64_t Rows::affected() const {
  if (result_ == nullptr) return 0;
  const char* n = PQcmdTuples(result_);
  return (n == nullptr || *n == '\0') ? 0 : std::strtoll(n, nullptr, 10);
}

void Rows::Fail(std::string reason, std::string message) const {
  if (status_.ok()) status_ = Corrupt(std::move(reason), operation_ + ": " + message);
}

bool Rows::CheckCell(int row, int column, std::initializer_list<unsigned> oids, bool nullable,
                     bool binary_ok) const {
  if (result_ == nullptr || row < 0 || row >= PQntuples(result_) || column < 0 ||
      column >= PQnfields(result_)) {
    Fail("decode_drift",
         "column " + std::to_string(column) + " of row " + std::to_string(row) + " is missing");
    return false;
  }
  unsigned oid = PQftype(result_, column);
  if (std::find(oids.begin(), oids.end(), oid) == oids.end()) {
    Fail("decode_drift", "column " + std::string(PQfname(result_, column)) +
                             " has an unexpected type (oid " + std::to_string(oid) + ")");
    return false;
  }
  if (PQfformat(result_, column) != 0 && !binary_ok) {
    Fail("decode_drift", "column " + std::string(PQfname(result_, column)) +
                             " came back in binary format, which only a bytea getter reads");
    return false;
  }
  if (PQgetisnull(result_, row, column)) {
    if (!nullable) {
      Fail("decode_drift", "column " + std::string(PQfname(result_, column)) + " is NULL");
    }
    return false;
  }
  return true;
}

bool Rows::IsNull(int row, int column) const {
  return result_ == nullptr || PQgetisnull(result_, row, column);
}

int64_t Rows::Int(int row, int column) const {
  std::optional<int64_t> value = OptInt(row, column);
  if (!value && status_.ok()) {
    Fail("decode_drift", "column " + std::to_string(column) + " is NULL");
  }
  return value.value_or(0);
}

std::optional<int64_t> Rows::OptInt(int row, int column) const {
  if (!CheckCell(row, column, {kInt2Oid, kInt4Oid, kInt8Oid, kOidOid}, true)) return std::nullopt;
  const char* text = PQgetvalue(result_, row, column);
  int len = PQgetlength(result_, row, column);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text, text + len, value);
  if (ec != std::errc() || end != text + len) {
    Fail("decode_drift", std::string("column ") + PQfname(result_, column) + " is not an integer");
    return std::nullopt;
  }
  if (value > kMaxSafeInteger || value < -kMaxSafeInteger) {
    Fail("integer_out_of_range", std::string("column ") + PQfname(result_, column) +
                                     " holds an integer outside the safe range");
    return std::nullopt;
  }
  return value;
}

bool Rows::Bool(int row, int column) const {
  if (!CheckCell(row, column, {kBoolOid}, false)) return false;
  std::string_view v(PQgetvalue(result_, row, column));
  if (v == "t") return true;
  if (v != "f") Fail("decode_drift", "a boolean column holds neither t nor f");
  return false;
}

std::string Rows::Text(int row, int column) const {
  std::optional<std::string> value = OptText(row, column);
  if (!value && status_.ok()) {
    Fail("decode_drift", "column " + std::to_string(column) + " is NULL");
  }
  return value.value_or("");
}

std::optional<std::string> Rows::OptText(int row, int column) const {
  if (!CheckCell(row, column, {kTextOid, kVarcharOid, kNameOid, kUuidOid, kCharOid}, true)) {
    return std::nullopt;
  }
  return std::string(PQgetvalue(result_, row, column),
                     static_cast<size_t>(PQgetlength(result_, row, column)));
}

std::string Rows::Bytes(int row, int column) const {
  if (!CheckCell(row, column, {kByteaOid}, false, /*binary_ok=*/true)) return "";
  if (PQfformat(result_, column) != 0) {
    return std::string(PQgetvalue(result_, row, column),
                       static_cast<size_t>(PQgetlength(result_, row, column)));
  }
  size_t length = 0;
  unsigned char* raw = PQunescapeBytea(
      reinterpret_cast<const unsigned char*>(PQgetvalue(result_, row, column)), &length);
  if (raw == nullptr) {
    Fail("decode_drift", "a bytea column cannot be decoded");
    return "";
  }
  std::string out(reinterpret_cast<const char*>(raw), length);
  PQfreemem(raw);
  return out;
}

Status Rows::ExpectRows(int n) const {
  if (size() != n) {
    return Corrupt("row_count_drift", operation_ + ": expected " + std::to_string(n) +
                                          " row(s), got " + std::to_string(size()));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Connections

Connection::Connection(pg_conn* conn) : conn_(conn) {
  last_used = std::chrono::steady_clock::now();
}

Connection::~Connection() {
  if (conn_ != nullptr) PQfinish(conn_);
}

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& url,
                                                     const SessionOptions& options) {
  std::string timeout = std::to_string(options.connect_timeout_s);
  // UTC, an explicit search_path and the application name for every session; later keywords
  // override what the URL says.
  const char* keys[] = {"dbname",  "application_name", "connect_timeout",
                        "options", "client_encoding",  nullptr};
  const char* values[] = {url.c_str(),     options.application_name.c_str(),
                          timeout.c_str(), "-c TimeZone=UTC -c search_path=ql3",
                          "UTF8",          nullptr};
  pg_conn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr) {
    return Unavailable("database_unavailable", "cannot allocate a database connection");
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string why = FirstLine(PQerrorMessage(conn));
    PQfinish(conn);
    return Unavailable("database_unavailable", "cannot connect to the database: " + why);
  }
  PQsetNoticeReceiver(conn, &ReceiveNotice, nullptr);
  return std::unique_ptr<Connection>(new Connection(conn));
}

Status Connection::ErrorStatus(pg_result* result, std::string_view operation, PgPhase phase) const {
  const char* state = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const char* constraint =
      result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_CONSTRAINT_NAME);
  bool lost = PQstatus(conn_) != CONNECTION_OK || state == nullptr;
  return StatusFromPg(state == nullptr ? "" : state, constraint == nullptr ? "" : constraint, lost,
                      operation, phase);
}

namespace {

// The identity of a statement with its parameters and result format: the text, then each
// parameter as a NULL mark or its format, length and bytes, then the result format.
std::string PrefetchKey(std::string_view sql, const std::vector<Param>& params,
                        ResultFormat results) {
  std::string key(sql);
  key.push_back('\0');
  key.push_back(results == ResultFormat::kBinary ? 'B' : 'T');
  for (const Param& p : params) {
    key.push_back('\0');
    if (!p.text) {
      key.push_back('N');
      continue;
    }
    if (p.binary) key.push_back('B');
    key += std::to_string(p.text->size());
    key.push_back(':');
    key += *p.text;
  }
  return key;
}

// What libpq takes for `params`: their values, lengths (read for binary ones only) and formats
// (none when every parameter is text).
struct ParamArrays {
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  bool any_binary = false;

  int count() const { return static_cast<int>(values.size()); }
  const int* length_data() const { return any_binary ? lengths.data() : nullptr; }
  const int* format_data() const { return any_binary ? formats.data() : nullptr; }
};

ParamArrays ParamValues(const std::vector<Param>& params) {
  ParamArrays out;
  out.values.reserve(params.size());
  out.lengths.reserve(params.size());
  out.formats.reserve(params.size());
  for (const Param& p : params) {
    out.values.push_back(p.text ? p.text->data() : nullptr);
    out.lengths.push_back(p.text ? static_cast<int>(p.text->size()) : 0);
    out.formats.push_back(p.binary ? 1 : 0);
    out.any_binary |= p.binary;
  }
  return out;
}

int ResultFormatCode(ResultFormat results) { return results == ResultFormat::kBinary ? 1 : 0; }

}  // namespace

Result<std::string> Connection::PreparedName(const std::string& sql, size_t params,
                                             std::string_view operation, PgPhase phase) {
  auto it = prepared_.find(sql);
  if (it != prepared_.end()) return it->second;
  std::string name = "ql" + std::to_string(prepared_.size() + 1);
  pg_result* prep = PQprepare(conn_, name.c_str(), sql.c_str(), static_cast<int>(params), nullptr);
  if (prep == nullptr || PQresultStatus(prep) != PGRES_COMMAND_OK) {
    Status status = ErrorStatus(prep, operation, phase);
    if (prep != nullptr) PQclear(prep);
    return status;
  }
  PQclear(prep);
  prepared_.emplace(sql, name);
  return name;
}

Status Connection::FlushPendingBegin(std::string_view operation) {
  if (pending_begin_.empty()) return Status::Ok();
  std::string begin;
  for (const std::string& s : pending_begin_) begin += s + ";";
  pending_begin_.clear();
  pg_result* result = PQexec(conn_, begin.c_str());
  const ExecStatusType st = result == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(result);
  Status status;
  if (st != PGRES_COMMAND_OK) status = ErrorStatus(result, operation, PgPhase::kStatement);
  if (result != nullptr) PQclear(result);
  return status;
}

void Connection::BeginWithNextStatement(std::vector<std::string> statements) {
  prefetched_.clear();
  pending_begin_ = std::move(statements);
}

void Connection::Prefetch(const std::vector<Statement>& statements, std::string_view operation) {
  last_used = std::chrono::steady_clock::now();
  prefetched_.clear();
  // Every statement is prepared before the pipeline starts (a no-op once per connection), so
  // the pipeline holds executions only.
  std::vector<std::string> names;
  for (const Statement& s : statements) {
    Result<std::string> name = PreparedName(s.sql, s.params.size(), operation,
                                            PgPhase::kStatement);
    if (!name.ok()) {
      prefetched_.push_back({PrefetchKey(s.sql, s.params, s.results), name.status()});
      return;
    }
    names.push_back(std::move(name).value());
  }
  if (PQenterPipelineMode(conn_) != 1) {
    // The Exec calls then run them one by one, after the pending BEGIN.
    if (Status begun = FlushPendingBegin(operation); !begun.ok() && !statements.empty()) {
      prefetched_.push_back(
          {PrefetchKey(statements[0].sql, statements[0].params, statements[0].results), begun});
    }
    return;
  }
  // A pending BEGIN goes first; if it fails, nothing after it ran and its failure is the answer.
  const std::vector<std::string> begin = std::move(pending_begin_);
  pending_begin_.clear();
  size_t begun = 0;
  for (; begun < begin.size(); ++begun) {
    if (PQsendQueryParams(conn_, begin[begun].c_str(), 0, nullptr, nullptr, nullptr, nullptr,
                          0) != 1) {
      break;
    }
  }
  size_t sent = 0;
  for (; begun == begin.size() && sent < statements.size(); ++sent) {
    const ParamArrays p = ParamValues(statements[sent].params);
    if (PQsendQueryPrepared(conn_, names[sent].c_str(), p.count(), p.values.data(), p.length_data(),
                            p.format_data(), ResultFormatCode(statements[sent].results)) != 1) {
      break;
    }
  }
  const bool synced = PQpipelineSync(conn_) == 1;
  std::optional<Status> begin_failed;
  if (begun < begin.size()) {
    begin_failed = ErrorStatus(nullptr, operation, PgPhase::kStatement);
  }
  for (size_t i = 0; i < begun; ++i) {
    pg_result* result = synced ? PQgetResult(conn_) : nullptr;
    const ExecStatusType st = result == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(result);
    if (st != PGRES_COMMAND_OK && !begin_failed) {
      begin_failed = ErrorStatus(st == PGRES_PIPELINE_ABORTED ? nullptr : result, operation,
                                 PgPhase::kStatement);
    }
    if (result != nullptr) PQclear(result);
    if (synced) {
      while (pg_result* extra = PQgetResult(conn_)) PQclear(extra);
    }
    if (PQstatus(conn_) != CONNECTION_OK) break;
  }
  for (size_t i = 0; i < sent; ++i) {
    pg_result* result = synced ? PQgetResult(conn_) : nullptr;
    const ExecStatusType st = result == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(result);
    Result<Rows> rows = [&]() -> Result<Rows> {
      if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        return Rows(std::exchange(result, nullptr), std::string(operation));
      }
      if (st == PGRES_PIPELINE_ABORTED) {
        return Internal("statement_aborted",
                        Str(operation) + ": not run, an earlier statement of its pipeline failed");
      }
      return ErrorStatus(result, operation, PgPhase::kStatement);
    }();
    if (result != nullptr) PQclear(result);
    // Each statement's results end with a NULL.
    if (synced) {
      while (pg_result* extra = PQgetResult(conn_)) PQclear(extra);
    }
    if (begin_failed) rows = *begin_failed;
    prefetched_.push_back(
        {PrefetchKey(statements[i].sql, statements[i].params, statements[i].results),
         std::move(rows)});
    if (PQstatus(conn_) != CONNECTION_OK) break;
  }
  if (begin_failed && sent == 0 && !statements.empty()) {
    prefetched_.push_back(
        {PrefetchKey(statements[0].sql, statements[0].params, statements[0].results),
         *begin_failed});
  }
  if (synced && PQstatus(conn_) == CONNECTION_OK) {
    // The sync point's own result.
    if (pg_result* sync = PQgetResult(conn_)) PQclear(sync);
  }
  if (PQexitPipelineMode(conn_) != 1) {
    // Results are still pending (a broken connection): nothing kept is to be trusted.
    prefetched_.clear();
  }
}

Result<Rows> Connection::Exec(std::string_view sql, const std::vector<Param>& params,
                              std::string_view operation, PgPhase phase, ResultFormat results) {
  last_used = std::chrono::steady_clock::now();
  // A pending BEGIN travels with this statement.
  if (!pending_begin_.empty()) Prefetch({{std::string(sql), params, results}}, operation);
  if (!prefetched_.empty()) {
    if (prefetched_.front().key == PrefetchKey(sql, params, results)) {
      Result<Rows> rows = std::move(prefetched_.front().rows);
      prefetched_.pop_front();
      return rows;
    }
    // Asked for something else: a statement kept here that failed has aborted the transaction.
    for (Prefetched& p : prefetched_) {
      if (!p.rows.ok()) {
        Status failed = p.rows.status();
        prefetched_.clear();
        return failed;
      }
    }
    prefetched_.clear();
  }
  QL_ASSIGN_OR_RETURN(std::string name,
                      PreparedName(std::string(sql), params.size(), operation, phase));
  const ParamArrays p = ParamValues(params);
  pg_result* result = PQexecPrepared(conn_, name.c_str(), p.count(), p.values.data(),
                                     p.length_data(), p.format_data(), ResultFormatCode(results));
  ExecStatusType st = result == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(result);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    Status status = ErrorStatus(result, operation, phase);
    if (result != nullptr) PQclear(result);
    return status;
  }
  return Rows(result, std::string(operation));
}

Status Connection::ExecScript(std::string_view sql, std::string_view operation, PgPhase phase) {
  last_used = std::chrono::steady_clock::now();
  prefetched_.clear();  // transaction control: nothing kept outlives its transaction
  QL_RETURN_IF_ERROR(FlushPendingBegin(operation));
  std::string text(sql);
  pg_result* result = PQexec(conn_, text.c_str());
  ExecStatusType st = result == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(result);
  Status status;
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK && st != PGRES_EMPTY_QUERY) {
    status = ErrorStatus(result, operation, phase);
  }
  if (result != nullptr) PQclear(result);
  return status;
}

bool Connection::Reusable() const {
  return PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) == PQTRANS_IDLE;
}

bool Connection::StillOpen() {
  // Something that arrived while the connection was idle is read: a notice keeps it; the
  // server's goodbye (a FATAL notice, then the end of the stream) does not. A few rounds at
  // most: each reads what is there without waiting.
  for (int round = 0; round < 4; ++round) {
    if (PQstatus(conn_) != CONNECTION_OK) return false;
    pollfd p{};
    p.fd = PQsocket(conn_);
    p.events = POLLIN;
    if (p.fd < 0) return false;
    const int ready = ::poll(&p, 1, 0);
    if (ready == 0) return true;  // nothing (more) arrived
    if (ready < 0) return errno == EINTR;
    if ((p.revents & (POLLERR | POLLNVAL)) != 0) return false;
    if (PQconsumeInput(conn_) == 0) return false;
  }
  return PQstatus(conn_) == CONNECTION_OK;
}

bool Connection::InTransaction() const {
  PGTransactionStatusType t = PQtransactionStatus(conn_);
  return t == PQTRANS_INTRANS || t == PQTRANS_INERROR;
}

int Connection::BackendPid() const { return PQbackendPID(conn_); }

// ---------------------------------------------------------------------------------------------
// Transactions

Result<Rows> Tx::Exec(std::string_view sql, const std::vector<Param>& params,
                      ResultFormat results) {
  return conn_.Exec(sql, params, operation_, PgPhase::kStatement, results);
}

Pool::Pool(PoolOptions options) : options_(std::move(options)) {}

Pool::~Pool() { Close(0); }

Result<std::unique_ptr<Pool>> Pool::Create(const PoolOptions& options) {
  const SessionOptions& s = options.session;
  if (options.min_connections < 0 || options.max_connections < 1 || options.max_connections > 256 ||
      options.min_connections > options.max_connections || options.acquire_timeout_ms < 1 ||
      options.idle_lifetime_ms < 1 || options.max_tx_attempts < 1 ||
      options.max_tx_attempts > 100 || options.max_tx_retry_ms < 0 || s.connect_timeout_s < 1 ||
      s.statement_timeout_ms < 1 || s.lock_timeout_ms < 1 || s.idle_in_transaction_timeout_ms < 1 ||
      s.application_name.empty() || s.application_name.size() > 63) {
    return InvalidArgument("invalid_pool_options",
                           "pool bounds must satisfy 0 <= min <= max <= 256, timeouts > 0, "
                           "1..100 transaction attempts and an application name of 1..63 bytes");
  }
  std::unique_ptr<Pool> pool(new Pool(options));
  for (int i = 0; i < options.min_connections; ++i) {
    QL_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                        Connection::Open(options.url, options.session));
    std::lock_guard<std::mutex> lock(pool->mu_);
    pool->idle_.push_back(std::move(conn));
    ++pool->open_;
  }
  return pool;
}

Result<std::unique_ptr<Connection>> Pool::Acquire(std::string_view operation) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.acquire_timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (closed_) return Unavailable("pool_closed", Str(operation) + ": the pool is closed");
    auto now = std::chrono::steady_clock::now();
    // Drop idle connections past their lifetime (keeping min_connections).
    while (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      bool expired = now - conn->last_used > std::chrono::milliseconds(options_.idle_lifetime_ms) &&
                     open_ > options_.min_connections;
      if (!expired && conn->Reusable()) {
        if (conn->StillOpen()) return conn;
        ++ended_idle_;
      }
      --open_;
    }
    if (open_ < options_.max_connections) {
      ++open_;
      lock.unlock();
      Result<std::unique_ptr<Connection>> conn = Connection::Open(options_.url, options_.session);
      if (conn.ok()) {
        // The pool's bounds hold for the whole session, so no transaction has to set them.
        const SessionOptions& s = options_.session;
        Status bounded = (*conn)->ExecScript(
            "SET statement_timeout = " + std::to_string(s.statement_timeout_ms) +
                "; SET lock_timeout = " + std::to_string(s.lock_timeout_ms) +
                "; SET idle_in_transaction_session_timeout = " +
                std::to_string(s.idle_in_transaction_timeout_ms),
            operation);
        if (!bounded.ok()) conn = bounded;
      }
      if (!conn.ok()) {
        lock.lock();
        --open_;
        cv_.notify_one();
      }
      return conn;
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() &&
        open_ >= options_.max_connections) {
      return Unavailable("pool_acquire_timeout",
                         Str(operation) + ": no database connection became free within " +
                             std::to_string(options_.acquire_timeout_ms) + " ms");
    }
  }
}

void Pool::Release(std::unique_ptr<Connection> conn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || !conn->Reusable()) {
    --open_;
  } else {
    conn->last_used = std::chrono::steady_clock::now();
    idle_.push_back(std::move(conn));
  }
  cv_.notify_one();
}

Status Pool::RunOnce(Connection& conn, const TxOptions& options, std::string_view operation,
                     const std::function<Status(Tx&)>& body) {
  const char* level = options.isolation == Isolation::kSerializable     ? "SERIALIZABLE"
                      : options.isolation == Isolation::kRepeatableRead ? "REPEATABLE READ"
                                                                        : "READ COMMITTED";
  // The statement, lock and idle bounds are the session's (set when the pool opened it). BEGIN
  // and its SET LOCALs travel with the body's first statement.
  std::vector<std::string> begin = {std::string("BEGIN ISOLATION LEVEL ") + level +
                                    (options.read_only ? " READ ONLY" : " READ WRITE")};
  if (!options.durable_commit) begin.push_back("SET LOCAL synchronous_commit = off");
  if (options.generic_plans) begin.push_back("SET LOCAL plan_cache_mode = force_generic_plan");
  if (options.keyed_access) begin.push_back("SET LOCAL enable_seqscan = off");
  conn.BeginWithNextStatement(std::move(begin));
  Tx tx(conn, operation);
  Status status = body(tx);
  if (!status.ok() || tx.rollback_only()) {
    conn.ForgetPendingBegin();
    if (conn.InTransaction()) (void)conn.ExecScript("ROLLBACK", operation);
    return status;
  }
  // A body that ran no statement opened nothing on the server: there is nothing to commit.
  const bool opened = !conn.BeginPending();
  conn.ForgetPendingBegin();
  status = opened ? conn.ExecScript("COMMIT", operation, PgPhase::kCommit) : Status::Ok();
  if (!status.ok()) {
    if (conn.InTransaction()) (void)conn.ExecScript("ROLLBACK", operation);
    return status;
  }
  CommitFault fault;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fault = commit_fault_;
  }
  if (fault) return fault(operation);
  return Status::Ok();
}

Status Pool::Transact(const TxOptions& options, std::string_view operation,
                      const std::function<Status(Tx&)>& body) {
  auto start = std::chrono::steady_clock::now();
  for (int attempt = 1;; ++attempt) {
    QL_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Acquire(operation));
    Status status = RunOnce(*conn, options, operation, body);
    Release(std::move(conn));
    // A READ ONLY transaction wrote nothing, so a lost COMMIT reply leaves nothing unknown.
    const bool lost_read_only_commit =
        options.read_only && status.code() == StatusCode::kOutcomeUnknown;
    bool retryable =
        lost_read_only_commit ||
        (status.code() == StatusCode::kBusy &&
         (status.reason() == "serialization_failure" || status.reason() == "deadlock_detected"));
    if (!retryable) return status;
    auto elapsed = std::chrono::steady_clock::now() - start;
    if (attempt >= options_.max_tx_attempts ||
        elapsed >= std::chrono::milliseconds(options_.max_tx_retry_ms)) {
      if (lost_read_only_commit) {
        return Unavailable("database_unavailable",
                           Str(operation) + ": the connection was lost after COMMIT of a "
                                            "read-only transaction, " +
                               std::to_string(attempt) + " time(s)");
      }
      return Unavailable("retry_exhausted", Str(operation) + ": " + status.reason() +
                                                " persisted after " + std::to_string(attempt) +
                                                " attempt(s)");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++retries_;
    }
    // A short, growing pause so the competing transaction can finish.
    std::this_thread::sleep_for(std::chrono::microseconds(200 * attempt * attempt));
  }
}

Status Pool::WithConnection(std::string_view operation,
                            const std::function<Status(Connection&)>& body) {
  QL_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Acquire(operation));
  Status status = body(*conn);
  if (conn->InTransaction()) (void)conn->ExecScript("ROLLBACK", operation);
  Release(std::move(conn));
  return status;
}

void Pool::Close(int wait_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  open_ -= static_cast<int>(idle_.size());
  idle_.clear();
  cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return open_ <= 0; });
}

int64_t Pool::retries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retries_;
}

int64_t Pool::ended_idle_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_idle_;
}

int Pool::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

void Pool::SetCommitFaultForTesting(CommitFault fault) {
  std::lock_guard<std::mutex> lock(mu_);
  commit_fault_ = std::move(fault);
}

}  // namespace ql::pg
