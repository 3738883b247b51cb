// Upgrades from every earlier schema version. For each migration k of postgresql-main (a prepare
// migration is never a version a release stops at), a fresh database is migrated one migration
// at a time up to k as the migration role, and right after each migration the data of every kind
// it introduced is written with plain SQL of that schema: definitions, runs with attempts,
// events and retry policies, schedules, worker credentials, sessions and leases, API credentials
// (which pg-0010 turns into principals), log chunks, principals, tokens and bindings, approvals,
// retention, sealed secrets, evidence resolutions, overlap, names and tombstones, jitter,
// compacted runs, sessions and passwords, published-by, sign-in policies, notifications, retry on
// timeout, artifacts and scripts. Migrate (what `ql-cluster migrate` runs) then upgrades the
// database, and the test checks that every row kept the values it had, that the readiness audit
// passes (exact catalog and privileges), and, through the store's ports, what users care about:
// tasks and plans whose digests verify, triggers and their cursors, the cluster scheduler
// resuming them under their misfire policy without admitting an occurrence twice, runs with
// attempts, events and logs, tokens and worker credentials that still authenticate, leases,
// secrets that still open, scripts whose blobs still read back verified.

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/approval.h"
#include "ql/core/artifact.h"
#include "ql/core/artifact_store.h"
#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/migration_stream.h"
#include "ql/core/task_spec.h"
#include "ql/engine/cluster_scheduler.h"
#include "ql/engine/metrics.h"
#include "ql/secrets/file_key_provider.h"
#include "ql/secrets/store_sealer.h"
#include "ql/storage/postgres/pg_audit.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_cluster_schedules.h"
#include "ql/storage/postgres/pg_log_source.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/storage/postgres/pg_upgrade_test_data.h"
#include "ql/storage/postgres/pg_worker.h"
#include "ql/testing/contract_assertions.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/upgrade_fixtures.h"

namespace ql {
namespace {

using pg::testing::kApiCredentialsSql;
using pg::testing::kApprovalsSql;
using pg::testing::kArtifactsSql;
using pg::testing::kCompactRunSql;
using pg::testing::kCredentialPoolsSql;
using pg::testing::kEvidenceSql;
using pg::testing::kGovernanceSql;
using pg::testing::kLogsSql;
using pg::testing::kNotificationsSql;
using pg::testing::kPlacementSql;
using pg::testing::kRetentionSql;
using pg::testing::kRetryOnTimeoutSql;
using pg::testing::kRunsSql;
using pg::testing::kSecretsSql;
using pg::testing::kSignInPoliciesSql;
using pg::testing::kSignInSql;
using pg::testing::kSkippedSql;
using pg::testing::kWorkersSql;
using ::ql::pg::testing::PgTestCluster;
using ::ql::testing::FillSql;
using ::ql::testing::SqlBooleans;

constexpr char kRemote[] = "remote_worker";
constexpr int64_t kC0 = ::ql::testing::kUpgradeC0;
constexpr int64_t kC1 = ::ql::testing::kUpgradeC1;
constexpr int64_t kC2 = ::ql::testing::kUpgradeC2;
constexpr int64_t kC4 = 1'900'033'200'000;  // G4's cursor: far ahead, not due

std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, separator);) out.push_back(item);
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    out += kDigits[u >> 4];
    out += kDigits[u & 15];
  }
  return out;
}

// The artifacts of kArtifactsSql: file contents and the tree's manifest.
constexpr char kHelloV1[] = "#!/bin/sh\necho hello from before the upgrade\n";
constexpr char kHelloV2Head[] = "#!/bin/sh\n";
constexpr char kHelloV2Tail[] = "echo the second version, cut in two chunks\n";
constexpr char kUtil[] = "util() { :; }\n";

Result<std::string> ToolsManifest() {
  return EncodeTreeManifest({TreeEntry{"run.sh", true, sizeof(kHelloV1) - 1, Sha256Hex(kHelloV1)},
                             TreeEntry{"lib/util.sh", false, sizeof(kUtil) - 1, Sha256Hex(kUtil)}});
}

// The shared upgrade data with remote plans, and secrets sealed with a file key.
struct Data : ::ql::testing::UpgradeData {
  std::unique_ptr<secrets::FileKeyProvider> provider;
  std::unique_ptr<secrets::EnvelopeSealer> sealer;
};

Result<std::unique_ptr<Data>> MakeData() {
  auto d = std::make_unique<Data>();
  QL_ASSIGN_OR_RETURN(*static_cast<::ql::testing::UpgradeData*>(d.get()),
                      ::ql::testing::MakeUpgradeData(kRemote));
  QL_ASSIGN_OR_RETURN(d->provider, secrets::FileKeyProvider::FromKey(secrets::SecretBytes::CopyOf(
                                       "upgrade-test-key-of-32-bytes-000")));
  d->sealer = std::make_unique<secrets::EnvelopeSealer>(*d->provider);
  struct Sealed {
    const char* key;
    const char* name;
    int64_t version;
    const char* value;
  };
  for (const Sealed& s : {Sealed{"S1", "db-password", 1, "hunter2"},
                          Sealed{"S2", "db-password", 2, "correct horse battery staple"},
                          Sealed{"S3", "old-token", 1, "gone"}}) {
    QL_ASSIGN_OR_RETURN(SealedSecretValue sealed,
                        d->sealer->Seal(SecretRef{d->id("P"), s.name, s.version}, s.value));
    d->v[std::string(s.key) + "K"] = sealed.key_id;
    d->v[std::string(s.key) + "W"] = sealed.wrapped_key;
    d->v[std::string(s.key) + "V"] = sealed.sealed_value;
  }
  // Artifacts: each one-chunk blob is its own chunk.
  QL_ASSIGN_OR_RETURN(const std::string manifest, ToolsManifest());
  const std::string hello_v2 = std::string(kHelloV2Head) + kHelloV2Tail;
  for (const auto& [key, bytes] :
       std::vector<std::pair<std::string, std::string>>{{"ARTF1", kHelloV1},
                                                        {"ARTF2", kUtil},
                                                        {"ARTF3", hello_v2},
                                                        {"ARTF3C1", kHelloV2Head},
                                                        {"ARTF3C2", kHelloV2Tail},
                                                        {"ARTM", manifest}}) {
    d->v[key] = Sha256Hex(bytes);
    d->v[key + "N"] = std::to_string(bytes.size());
    d->v[key + "X"] = Hex(bytes);
  }
  d->v["ARTTN"] = std::to_string(sizeof(kHelloV1) - 1 + sizeof(kUtil) - 1);
  return d;
}

const Data* TheData() {
  static const std::unique_ptr<Data> data = [] {
    Result<std::unique_ptr<Data>> made = MakeData();
    if (!made.ok()) {
      ADD_FAILURE() << made.status().ToString();
      return std::unique_ptr<Data>();
    }
    return std::move(made).value();
  }();
  return data.get();
}

std::string TaskSql(const ::ql::testing::PublishedRevision& p, bool head,
                    const std::optional<std::string>& name = std::nullopt,
                    std::optional<int64_t> deleted_at_ms = std::nullopt) {
  return ::ql::testing::InsertTaskSql(p, head, name, deleted_at_ms, SqlBooleans::kWords);
}

std::string ScheduleSql(const TriggerRevisionRecord& t, std::optional<int64_t> next) {
  return "INSERT INTO ql3.trigger_schedules (trigger_id, project_id, trigger_revision, enabled, "
         "next_fire_at_ms, last_scheduled_at_ms, state_version, published_at_ms, exhausted, "
         "claim_owner, claim_token, claim_version, claim_expires_at_ms, updated_at_ms) VALUES (" +
         ::ql::testing::SqlText(t.trigger_id) + ", " + ::ql::testing::SqlText(t.project_id) + ", " +
         std::to_string(t.revision) + ", true, " + (next ? std::to_string(*next) : "NULL") +
         ", NULL, 1, " + std::to_string(t.created_at_ms) + ", false, NULL, NULL, 0, NULL, " +
         std::to_string(t.created_at_ms) + ");\n";
}

std::string TriggerSql(const TriggerRevisionRecord& t, const std::optional<std::string>& name,
                       bool schedule, std::optional<int64_t> next = std::nullopt) {
  return ::ql::testing::InsertTriggerSql(t, name, SqlBooleans::kWords) +
         (schedule ? ScheduleSql(t, next) : "");
}

// What the checks of a kind get: the upgraded store, the worker-ingress pool, and the database
// clock's reading when the checks began.
struct Upgraded {
  PostgresStore& store;
  pg::Pool& ingress;
  int64_t now_ms;
};

struct Kind {
  std::string_view migration;
  std::function<std::string(const Data&)> sql;
  std::function<void(Upgraded&, const Data&)> check;
};

std::string Sql(const char* sql, const Data& d) { return FillSql(sql, d.v); }

const std::vector<Kind>& Kinds() {
  static const std::vector<Kind> kinds = {
      {"pg-0002-projects-and-definitions",
       [](const Data& d) {
         return Sql("INSERT INTO ql3.projects (id, slug, name, status, version, created_at_ms, "
                    "updated_at_ms) VALUES ('${P}', 'default', 'Default', 'active', 1, "
                    "1779900000000, 1779900000000);\n",
                    d) +
                TaskSql(d.tasks.at("T1r1"), true) + TaskSql(d.tasks.at("T1r2"), false) +
                Sql("UPDATE ql3.task_heads SET current_revision = 2, updated_at_ms = "
                    "1779910000000 WHERE task_id = '${T1}';\n",
                    d) +
                TriggerSql(d.triggers.at("G1"), std::nullopt, false) +
                TriggerSql(d.triggers.at("G2"), std::nullopt, false);
       },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto project, u.store.GetProject(d.id("P")));
         EXPECT_EQ(project.slug, "default");
         QL_ASSERT_OK_AND_ASSIGN(auto head, u.store.GetTaskHead(d.id("T1")));
         EXPECT_EQ(head.current_revision, 2);
         EXPECT_EQ(head.name, "backup");  // named after its current revision by pg-0017
         QL_ASSERT_OK_AND_ASSIGN(auto revision, u.store.GetTaskRevision(d.id("T1"), 2));
         EXPECT_EQ(revision.content_digest, d.v.at("DT1r2"));
         EXPECT_EQ(revision.spec_json, d.tasks.at("T1r2").revision.spec_json);
         QL_ASSERT_OK_AND_ASSIGN(auto execution,
                                 u.store.FindExecutionRevision(d.id("T1"), 2, kRemote));
         EXPECT_EQ(execution.id, d.v.at("XT1r2"));
         Result<nlohmann::json> json = ParseJsonStrict(execution.plan_json);
         ASSERT_TRUE(json.ok());
         QL_ASSERT_OK_AND_ASSIGN(auto plan, PlanFromJson(*json));
         EXPECT_TRUE(VerifyPlanDigest(plan, execution.plan_digest).ok());
         for (const char* g : {"G1", "G2"}) {
           SCOPED_TRACE(g);
           QL_ASSERT_OK_AND_ASSIGN(auto trigger, u.store.GetTriggerRevision(d.id(g), 1));
           EXPECT_EQ(trigger.content_digest, TriggerContentDigest(trigger));
           QL_ASSERT_OK_AND_ASSIGN(auto trigger_head, u.store.GetTriggerHead(d.id(g)));
           EXPECT_EQ(trigger_head.name, "backup-" + d.id(g).substr(24));
         }
       }},
      {"pg-0003-run-core", [](const Data& d) { return Sql(kRunsSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto r1, u.store.GetRun(d.id("R1")));
         EXPECT_EQ(r1.status, "succeeded");
         EXPECT_EQ(r1.scheduled_for_ms, kC0);
         // pg-0019 moved the policy into the run.
         EXPECT_EQ(r1.retry_policy.max_attempts, 3);
         EXPECT_FALSE(r1.retry_policy.retry_on_timeout);
         QL_ASSERT_OK_AND_ASSIGN(auto found,
                                 u.store.FindRunByIdempotencyKey(d.id("P"), "deploy-1"));
         EXPECT_EQ(found.id, d.id("R2"));
         QL_ASSERT_OK_AND_ASSIGN(auto attempts, u.store.ListAttempts(d.id("R1")));
         EXPECT_EQ(attempts.size(), 2u);
         QL_ASSERT_OK_AND_ASSIGN(auto events, u.store.ListEvents(d.id("R1"), 0, 100));
         ASSERT_EQ(events.size(), 6u);
         EXPECT_EQ(events.back().type, "run.succeeded");
         QL_ASSERT_OK_AND_ASSIGN(auto dispatchable,
                                 u.store.ListDispatchable(kRemote, 16, u.now_ms));
         ASSERT_EQ(dispatchable.size(), 1u);
         EXPECT_EQ(dispatchable[0].id, d.id("R3"));
         QL_ASSERT_OK_AND_ASSIGN(auto retry_due, u.store.ListRetryDue(u.now_ms, 16));
         ASSERT_EQ(retry_due.size(), 1u);
         EXPECT_EQ(retry_due[0].id, d.id("R4"));
         EXPECT_TRUE(retry_due[0].retry_policy.retry_on_lost);
         EXPECT_EQ(retry_due[0].retry_policy.safety, "idempotent");
       }},
      {"pg-0004-trigger-schedules",
       [](const Data& d) {
         return ScheduleSql(d.triggers.at("G1"), kC1) + ScheduleSql(d.triggers.at("G2"), kC2);
       },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto g1, u.store.GetSchedule(d.id("G1")));
         EXPECT_EQ(g1.next_fire_at_ms, kC1);
         QL_ASSERT_OK_AND_ASSIGN(auto g2, u.store.GetSchedule(d.id("G2")));
         EXPECT_EQ(g2.next_fire_at_ms, kC2);
       }},
      {"pg-0005-worker-dispatch", [](const Data& d) { return Sql(kWorkersSql, d); },
       [](Upgraded& u, const Data& d) {
         pg::PostgresWorkerSessions sessions(u.ingress);
         QL_ASSERT_OK_AND_ASSIGN(auto worker, sessions.AuthenticateWorker(d.v.at("W1D")));
         EXPECT_EQ(worker, d.id("W1"));
         pg::PostgresRunLeases leases(u.store.runtime_pool());
         QL_ASSERT_OK_AND_ASSIGN(auto lease, leases.GetLeaseState(d.id("OF1")));
         EXPECT_EQ(lease.lease_status, "granted");
         EXPECT_EQ(lease.run_id, d.id("R6"));
         EXPECT_EQ(lease.session_id, d.id("WS1"));
         EXPECT_EQ(lease.token_digest, d.v.at("OF1D"));
         EXPECT_EQ(lease.run_status, "running");
       }},
      {"pg-0006-api-credentials", [](const Data& d) { return Sql(kApiCredentialsSql, d); },
       [](Upgraded& u, const Data& d) {
         // pg-0010 made each credential a service principal with its token, installation owner
         // unless revoked.
         QL_ASSERT_OK_AND_ASSIGN(auto ops,
                                 u.store.governance().Authenticate(d.v.at("C1D"), u.now_ms));
         EXPECT_EQ(ops.principal.id, d.id("C1"));
         EXPECT_EQ(ops.principal.name, "ops-token");
         EXPECT_EQ(ops.principal.kind, "service");
         QL_ASSERT_OK_AND_ASSIGN(auto roles, u.store.governance().RolesOf(d.id("C1")));
         EXPECT_EQ(roles.installation, Role::kOwner);
         EXPECT_EQ(u.store.governance().Authenticate(d.v.at("C2D"), u.now_ms).status().reason(),
                   "token_revoked");
       }},
      {"pg-0007-run-logs", [](const Data& d) { return Sql(kLogsSql, d); },
       [](Upgraded& u, const Data& d) {
         PostgresLogSource logs(u.store.runtime_pool());
         QL_ASSERT_OK_AND_ASSIGN(auto attempts, u.store.ListAttempts(d.id("R1")));
         ASSERT_EQ(attempts.size(), 2u);
         QL_ASSERT_OK_AND_ASSIGN(auto first, logs.ReadLog(attempts[0], 0, 1 << 20));
         EXPECT_EQ(first.data, "hello world\n");
         EXPECT_TRUE(first.eof);
         QL_ASSERT_OK_AND_ASSIGN(auto size, logs.LogSize(attempts[1]));
         EXPECT_EQ(size, 5);
       }},
      {"pg-0010-governance", [](const Data& d) { return Sql(kGovernanceSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto owner,
                                 u.store.governance().Authenticate(d.v.at("K1D"), u.now_ms));
         EXPECT_EQ(owner.principal.id, d.id("U1"));
         EXPECT_EQ(owner.token.kind, "api");
         EXPECT_EQ(u.store.governance().Authenticate(d.v.at("K2D"), u.now_ms).status().reason(),
                   "token_revoked");
         QL_ASSERT_OK_AND_ASSIGN(auto owner_roles, u.store.governance().RolesOf(d.id("U1")));
         EXPECT_EQ(owner_roles.installation, Role::kOwner);
         QL_ASSERT_OK_AND_ASSIGN(auto ci_roles, u.store.governance().RolesOf(d.id("U2")));
         ASSERT_EQ(ci_roles.projects.size(), 1u);
         EXPECT_EQ(ci_roles.projects[0], std::make_pair(d.id("P"), Role::kViewer));
         QL_ASSERT_OK_AND_ASSIGN(auto audit, u.store.governance().ListAudit(PageRequest{}));
         bool found = false;
         for (const AuditRecord& fact : audit.items) found |= fact.id == d.id("AU1");
         EXPECT_TRUE(found);
       }},
      {"pg-0012-approvals",
       [](const Data& d) { return TaskSql(d.tasks.at("T3"), true) + Sql(kApprovalsSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto t3, u.store.GetTaskRevision(d.id("T3"), 1));
         QL_ASSERT_OK_AND_ASSIGN(auto policy, RequiredApproval(t3));
         ASSERT_TRUE(policy.has_value());
         QL_ASSERT_OK_AND_ASSIGN(auto pending, u.store.approvals().GetApproval(d.id("AR1")));
         EXPECT_EQ(pending.request.status, "pending");
         EXPECT_EQ(ApprovalPayloadDigest(ApprovalPayloadCanonical(pending.request)),
                   pending.request.payload_digest);
         QL_ASSERT_OK_AND_ASSIGN(auto approved, u.store.approvals().GetApproval(d.id("AR2")));
         ASSERT_TRUE(approved.decision && approved.action && approved.receipt);
         EXPECT_EQ(approved.receipt->run_id, d.id("R5"));
         QL_ASSERT_OK_AND_ASSIGN(auto resolution, u.store.approvals().GetResolution(d.id("R5")));
         EXPECT_EQ(resolution.resolved_by, d.id("U1"));
       }},
      {"pg-0013-retention", [](const Data& d) { return Sql(kRetentionSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto project, u.store.retention().GetRetention(d.id("P"), ""));
         EXPECT_EQ(project.settings.keep_days, 7);
         QL_ASSERT_OK_AND_ASSIGN(auto task,
                                 u.store.retention().GetRetention(d.id("P"), d.id("T1")));
         EXPECT_EQ(task.settings.keep_runs, 20);
       }},
      {"pg-0014-secrets", [](const Data& d) { return Sql(kSecretsSql, d); },
       [](Upgraded& u, const Data& d) {
         for (const auto& [version, value] :
              std::vector<std::pair<std::optional<int64_t>, std::string>>{
                  {std::nullopt, "correct horse battery staple"}, {1, "hunter2"}}) {
           QL_ASSERT_OK_AND_ASSIGN(auto stored, u.store.secrets().ResolveSecret(
                                                    SecretRef{d.id("P"), "db-password", version}));
           QL_ASSERT_OK_AND_ASSIGN(
               auto opened,
               d.sealer->Open(SecretRef{d.id("P"), "db-password", stored.version}, stored.sealed));
           EXPECT_EQ(opened, value);
         }
         EXPECT_EQ(u.store.secrets()
                       .ResolveSecret(SecretRef{d.id("P"), "old-token", {}})
                       .status()
                       .reason(),
                   "secret_not_found");
       }},
      {"pg-0015-approval-evidence-and-retries", [](const Data& d) { return Sql(kEvidenceSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto retry, u.store.approvals().GetApproval(d.id("AR3")));
         EXPECT_EQ(retry.request.retry_of_run_id, d.id("R5"));
         EXPECT_EQ(ApprovalPayloadDigest(ApprovalPayloadCanonical(retry.request)),
                   retry.request.payload_digest);
         QL_ASSERT_OK_AND_ASSIGN(auto evidence, u.store.approvals().GetResolution(d.id("R7")));
         EXPECT_FALSE(evidence.resolved_by.has_value());
       }},
      {"pg-0016-overlap",
       [](const Data& d) {
         return TaskSql(d.tasks.at("T4"), true) +
                TriggerSql(d.triggers.at("G3"), std::nullopt, true) + Sql(kSkippedSql, d);
       },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto t4, u.store.GetTaskRevision(d.id("T4"), 1));
         EXPECT_EQ(t4.concurrency, 2);
         QL_ASSERT_OK_AND_ASSIGN(auto g3, u.store.GetTriggerRevision(d.id("G3"), 1));
         EXPECT_EQ(g3.overlap, "forbid");
         EXPECT_EQ(g3.content_digest, TriggerContentDigest(g3));
         QL_ASSERT_OK_AND_ASSIGN(auto r8, u.store.GetRun(d.id("R8")));
         EXPECT_EQ(r8.status, "skipped");
       }},
      {"pg-0017-names-and-tombstones",
       [](const Data& d) {
         return TaskSql(d.tasks.at("T6"), true, std::string("old-job"), 1'779'960'000'000);
       },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto t6, u.store.GetTaskHead(d.id("T6")));
         EXPECT_EQ(t6.deleted_at_ms, 1'779'960'000'000);
         QL_ASSERT_OK_AND_ASSIGN(auto by_name, u.store.FindTaskByName(d.id("P"), "old-job"));
         EXPECT_FALSE(by_name.has_value());
       }},
      {"pg-0018-trigger-jitter",
       [](const Data& d) { return TriggerSql(d.triggers.at("G4"), "report-jitter", true, kC4); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto g4, u.store.FindTriggerByName(d.id("P"), "report-jitter"));
         ASSERT_TRUE(g4.has_value());
         QL_ASSERT_OK_AND_ASSIGN(auto revision, u.store.GetTriggerRevision(d.id("G4"), 1));
         EXPECT_EQ(revision.jitter_ms, 60'000);
         EXPECT_EQ(revision.content_digest, TriggerContentDigest(revision));
       }},
      {"pg-0019-compact-runs", [](const Data& d) { return Sql(kCompactRunSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto r10, u.store.GetRun(d.id("R10")));
         EXPECT_EQ(r10.status, "cancelled");
         EXPECT_EQ(r10.retry_policy.max_attempts, 2);
         EXPECT_EQ(r10.retry_policy.backoff_max_ms, 8000);
         EXPECT_EQ(r10.idempotency_key, "nightly-42");
       }},
      {"pg-0020-sign-in", [](const Data& d) { return Sql(kSignInSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto session,
                                 u.store.governance().Authenticate(d.v.at("K3D"), u.now_ms));
         EXPECT_EQ(session.token.kind, "session");
         EXPECT_EQ(session.token.label, "panel from 10.0.0.7");
         QL_ASSERT_OK_AND_ASSIGN(auto password, u.store.governance().GetPassword(d.id("U1")));
         ASSERT_TRUE(password.has_value());
         EXPECT_TRUE(password->totp_enabled);
         EXPECT_EQ(password->recovery_digests, d.v.at("RECOVERYD"));
       }},
      {"pg-0021-published-by",
       [](const Data& d) { return TaskSql(d.tasks.at("T5"), true, std::string("cleanup")); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto t5, u.store.GetTaskRevision(d.id("T5"), 1));
         EXPECT_EQ(t5.published_by, d.id("U1"));
       }},
      {"pg-0022-sign-in-policies", [](const Data& d) { return Sql(kSignInPoliciesSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto restricted,
                                 u.store.governance().Authenticate(d.v.at("K4D"), u.now_ms));
         EXPECT_EQ(restricted.token.restriction, "password_change");
         QL_ASSERT_OK_AND_ASSIGN(auto settings, u.store.governance().GetInstallationSettings());
         EXPECT_EQ(settings.require_second_factor, "admins");
         QL_ASSERT_OK_AND_ASSIGN(auto login,
                                 u.store.governance().TakeOidcLogin(d.v.at("STATED"), u.now_ms));
         EXPECT_EQ(login.cli_port, 45678);
       }},
      {"pg-0023-notifications", [](const Data& d) { return Sql(kNotificationsSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto channels, u.store.notifications().ListChannels(d.id("P")));
         ASSERT_EQ(channels.size(), 1u);
         EXPECT_EQ(channels[0].name, "ops");
         QL_ASSERT_OK_AND_ASSIGN(auto rules, u.store.notifications().ListRules(d.id("P")));
         ASSERT_EQ(rules.size(), 1u);
         QL_ASSERT_OK_AND_ASSIGN(auto delivery,
                                 u.store.notifications().GetDelivery(d.id("P"), d.id("O1")));
         EXPECT_EQ(delivery.status, "delivered");
       }},
      {"pg-0024-retry-on-timeout", [](const Data& d) { return Sql(kRetryOnTimeoutSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto r9, u.store.GetRun(d.id("R9")));
         EXPECT_TRUE(r9.retry_policy.retry_on_timeout);
       }},
      {"pg-0027-artifacts", [](const Data& d) { return Sql(kArtifactsSql, d); },
       [](Upgraded& u, const Data& d) {
         ArtifactRepository& artifacts = u.store.artifacts();
         const std::string p = d.id("P");
         auto read = [&](const std::string& digest) -> Result<std::string> {
           std::string out;
           QL_RETURN_IF_ERROR(artifacts.ReadBlob(p, digest, [&](std::string_view bytes) {
             out.append(bytes);
             return Status::Ok();
           }));
           return out;
         };
         QL_ASSERT_OK_AND_ASSIGN(auto hello, artifacts.GetScript(p, "hello"));
         EXPECT_EQ(hello.latest_version, 2);
         EXPECT_EQ(hello.status, kScriptActive);
         QL_ASSERT_OK_AND_ASSIGN(auto latest, artifacts.GetScriptVersion(p, "hello", std::nullopt));
         EXPECT_EQ(latest.version, 2);
         EXPECT_EQ(latest.entry, "hello.sh");
         EXPECT_EQ(latest.created_by, d.id("U1"));
         ASSERT_EQ(latest.files.size(), 1u);
         EXPECT_EQ(latest.files[0].digest, d.v.at("ARTF3"));
         // The two-chunk blob still reads back whole and verified.
         QL_ASSERT_OK_AND_ASSIGN(auto v2, read(latest.digest));
         EXPECT_EQ(v2, std::string(kHelloV2Head) + kHelloV2Tail);
         QL_ASSERT_OK_AND_ASSIGN(auto v1, artifacts.GetScriptVersion(p, "hello", 1));
         QL_ASSERT_OK_AND_ASSIGN(auto v1_bytes, read(v1.digest));
         EXPECT_EQ(v1_bytes, kHelloV1);
         // The deleted tree: not by name, but by its version, with its files and manifest.
         EXPECT_EQ(artifacts.GetScriptVersion(p, "tools", std::nullopt).status().reason(),
                   "script_not_found");
         QL_ASSERT_OK_AND_ASSIGN(auto tools, artifacts.GetScriptVersion(p, "tools", 1));
         EXPECT_EQ(tools.kind, kScriptKindTree);
         EXPECT_EQ(tools.entry, "run.sh");
         EXPECT_EQ(tools.files,
                   (std::vector<ScriptFile>{
                       {"lib/util.sh", d.v.at("ARTF2"), std::stoll(d.v.at("ARTF2N")), false},
                       {"run.sh", d.v.at("ARTF1"), std::stoll(d.v.at("ARTF1N")), true}}));
         QL_ASSERT_OK_AND_ASSIGN(auto manifest, read(tools.digest));
         QL_ASSERT_OK_AND_ASSIGN(auto entries, DecodeTreeManifest(manifest));
         ASSERT_EQ(entries.size(), 2u);
         EXPECT_EQ(entries[1].path, "run.sh");
         EXPECT_TRUE(entries[1].executable);
         QL_ASSERT_OK_AND_ASSIGN(auto held, artifacts.ProjectBytes(p));
         EXPECT_EQ(held, std::stoll(d.v.at("ARTF1N")) + std::stoll(d.v.at("ARTF2N")) +
                             std::stoll(d.v.at("ARTF3N")) + std::stoll(d.v.at("ARTMN")));
       }},
      {"pg-0028-worker-placement", [](const Data& d) { return Sql(kPlacementSql, d); },
       [](Upgraded& u, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto gpu, u.store.placement().GetPool("gpu"));
         EXPECT_FALSE(gpu.serves_all_projects);
         EXPECT_EQ(gpu.max_running, 8);
         ASSERT_EQ(gpu.grants.size(), 1u);
         EXPECT_EQ(gpu.grants[0].project_id, d.id("P"));
         EXPECT_EQ(gpu.grants[0].max_running, 3);
         EXPECT_EQ(gpu.grants[0].weight, 2);
         QL_ASSERT_OK_AND_ASSIGN(auto open, u.store.placement().GetPool("default"));
         EXPECT_TRUE(open.serves_all_projects);
         QL_ASSERT_OK_AND_ASSIGN(auto worker, u.store.placement().GetWorker("host-7"));
         EXPECT_TRUE(worker.drained_at_ms.has_value());
         ASSERT_TRUE(worker.session.has_value());
         // Sessions from before placement are in the default pool, without labels, and so is
         // their credential.
         EXPECT_EQ(worker.session->placement.pool, "default");
         EXPECT_EQ(worker.pool, "default");
         // A credential keeps the pool of its newest session.
         QL_ASSERT_OK_AND_ASSIGN(auto gpu_host, u.store.placement().GetWorker("gpu-host"));
         EXPECT_EQ(gpu_host.pool, "gpu");
         ASSERT_TRUE(gpu_host.session.has_value());
         EXPECT_EQ(gpu_host.session->placement.labels,
                   (std::map<std::string, std::string>{{"cuda", "12"}}));
       }},
      {"pg-0029-worker-credential-pools", [](const Data& d) { return Sql(kCredentialPoolsSql, d); },
       [](Upgraded& u, const Data&) {
         QL_ASSERT_OK_AND_ASSIGN(auto batch, u.store.placement().GetWorker("batch-host"));
         EXPECT_EQ(batch.pool, "batch");
         EXPECT_FALSE(batch.session.has_value());
       }},
  };
  return kinds;
}

// Columns a later migration rewrites on purpose, and tables it drops: (migration, table, column;
// empty for the whole table).
struct Rewrite {
  std::string_view migration;
  std::string_view table;
  std::string_view column;
};
constexpr Rewrite kRewrites[] = {
    {"pg-0010-governance", "api_credentials", ""},        // became principals, tokens and bindings
    {"pg-0019-compact-runs", "run_retry_policies", ""},   // moved into runs
    {"pg-0019-compact-runs", "runs", "idempotency_key"},  // cron runs are keyed by occurrence
};

bool Rewritten(const std::string& version, const std::string& table, const std::string& column) {
  for (const Rewrite& r : kRewrites) {
    if (r.table == table && r.column == column && version < r.migration) return true;
  }
  return false;
}

// Tables that hold no data of their own (history, capability, migration markers).
bool HoldsNoData(const std::string& table) { return table.starts_with("schema_"); }

// The versions a database can be at: every migration but the prepare half of a pair.
std::vector<std::string> Versions() {
  std::vector<std::string> ids;
  for (const Migration& m : pg::PostgresMainStream().migrations) {
    if (!IsPrepareMigration(m.id)) ids.push_back(m.id);
  }
  return ids;
}

// Applies one migration the way the migrator does: in one transaction with its history row and
// capability step; the statements of a prepare migration one by one outside a transaction.
Status MigrateOne(pg::Connection& conn, const Migration& m) {
  if (IsPrepareMigration(m.id)) {
    std::string statement;
    for (const std::string& line : Split(m.sql, '\n')) {
      if (line.starts_with("--") || line.find_first_not_of(' ') == std::string::npos) continue;
      statement += line + "\n";
      if (line.ends_with(";")) {
        QL_RETURN_IF_ERROR(conn.ExecScript(statement, "migration " + m.id));
        statement.clear();
      }
    }
  }
  QL_RETURN_IF_ERROR(conn.ExecScript("BEGIN", "begin"));
  if (!IsPrepareMigration(m.id)) QL_RETURN_IF_ERROR(conn.ExecScript(m.sql, "migration " + m.id));
  QL_RETURN_IF_ERROR(conn.Exec("INSERT INTO ql3.schema_migrations (id, stream, dialect, "
                               "checksum, applied_at_ms) VALUES ($1, $2, $3, $4, 1000)",
                               {pg::P(m.id), pg::P(kPostgresqlMainStream),
                                pg::P(kPostgresqlDialect), pg::P(m.checksum)},
                               "history")
                         .status());
  for (const pg::SchemaCapability& step : pg::CapabilitySteps()) {
    if (step.migration_id != m.id) continue;
    QL_RETURN_IF_ERROR(
        conn.Exec(step.version == 1
                      ? "INSERT INTO ql3.schema_capabilities (name, version, capability_map, "
                        "migration_id) VALUES ($1, $2, $3, $4)"
                      : "UPDATE ql3.schema_capabilities SET version = $2, capability_map = $3, "
                        "migration_id = $4 WHERE name = $1",
                  {pg::P(step.name), pg::P(step.version), pg::P(step.capability_map),
                   pg::P(step.migration_id)},
                  "capability")
            .status());
  }
  return conn.ExecScript("COMMIT", "commit", pg::PgPhase::kCommit);
}

class PostgresEveryVersionUpgradeTest : public ::testing::TestWithParam<std::string> {
 protected:
  PgTestCluster& cluster() { return PgTestCluster::Get(); }

  // The first column of the first row of `sql` as text ("" without a row).
  std::string Text(pg::Connection& conn, const std::string& sql) {
    Result<pg::Rows> rows = conn.Exec("SELECT (" + sql + ")::text", {}, "read");
    EXPECT_TRUE(rows.ok()) << sql << ": " << rows.status().ToString();
    if (!rows.ok() || rows->empty()) return "";
    return rows->OptText(0, 0).value_or("");
  }

  std::vector<std::string> Tables(pg::Connection& conn) {
    return Split(Text(conn,
                      "SELECT string_agg(table_name::text, ',' ORDER BY table_name) FROM "
                      "information_schema.tables WHERE table_schema = 'ql3' AND table_type = "
                      "'BASE TABLE'"),
                 ',');
  }

  std::vector<std::string> Columns(pg::Connection& conn, const std::string& table) {
    return Split(Text(conn,
                      "SELECT string_agg(column_name::text, ',' ORDER BY ordinal_position) FROM "
                      "information_schema.columns WHERE table_schema = 'ql3' AND table_name = '" +
                          table + "'"),
                 ',');
  }

  // Every row of `table` over `columns`, one quoted line per row, sorted.
  std::string Rows(pg::Connection& conn, const std::string& table,
                   const std::vector<std::string>& columns) {
    std::string line;
    for (const std::string& column : columns) {
      line += (line.empty() ? "" : ", ") + std::string("quote_nullable(\"") + column + "\")";
    }
    return Text(conn,
                "SELECT coalesce(string_agg(line, E'\\n' ORDER BY line), '') FROM (SELECT "
                "concat_ws('|', " +
                    line + ") AS line FROM ql3.\"" + table + "\") s");
  }
};

TEST_P(PostgresEveryVersionUpgradeTest, ADatabaseOfThisVersionWithDataOfEveryKindUpgrades) {
  const std::string version = GetParam();
  const Data* d = TheData();
  ASSERT_NE(d, nullptr);
  const std::string db = cluster().NewEmptyDatabase();
  const std::string url = cluster().Url(pg::kMigrationRole, db);
  QL_ASSERT_OK_AND_ASSIGN(auto conn, pg::Connection::Open(url, {}));

  // The database of `version`: migrated one migration at a time, the data of each kind written
  // right after the migration that introduced it.
  std::vector<const Kind*> written;
  for (const Migration& m : pg::PostgresMainStream().migrations) {
    if (m.id > version) break;
    Status migrated = MigrateOne(*conn, m);
    ASSERT_TRUE(migrated.ok()) << m.id << ": " << migrated.ToString();
    for (const Kind& kind : Kinds()) {
      if (kind.migration != m.id) continue;
      const std::string sql = kind.sql(*d);
      ASSERT_EQ(::ql::testing::UnfilledName(sql), std::nullopt) << m.id;
      Status filled = conn->ExecScript("BEGIN;\n" + sql + "COMMIT;", "data of " + m.id);
      ASSERT_TRUE(filled.ok()) << "data of " << m.id << ": " << filled.ToString();
      written.push_back(&kind);
    }
  }
  ASSERT_EQ(Text(*conn, "SELECT max(id) FROM ql3.schema_migrations"), version);

  // Every table of this version holds rows (a migration that adds a table needs a writer in
  // Kinds()), and each row's values are kept, over the table's columns of this version but those
  // a later migration rewrites on purpose.
  struct Snapshot {
    std::string table;
    std::vector<std::string> columns;
    std::string rows;
  };
  std::vector<Snapshot> before;
  for (const std::string& table : Tables(*conn)) {
    if (HoldsNoData(table)) continue;
    EXPECT_NE(Text(*conn, "SELECT count(*) FROM ql3.\"" + table + "\""), "0")
        << "table " << table << " exists at " << version
        << " but no data of its kind is written (add it to Kinds())";
    if (Rewritten(version, table, "")) continue;
    std::vector<std::string> columns;
    for (const std::string& column : Columns(*conn, table)) {
      if (!Rewritten(version, table, column)) columns.push_back(column);
    }
    before.push_back({table, columns, Rows(*conn, table, columns)});
  }
  conn.reset();

  // What `ql-cluster migrate` runs.
  ::ql::testing::FakeClock clock;
  Result<pg::MigrateReport> upgraded = pg::Migrate(url, clock);
  ASSERT_TRUE(upgraded.ok()) << upgraded.status().ToString();
  QL_ASSERT_OK_AND_ASSIGN(auto reader, pg::Connection::Open(url, {}));
  EXPECT_EQ(Text(*reader, "SELECT max(id) FROM ql3.schema_migrations"),
            pg::PostgresMainStream().migrations.back().id);
  for (const Snapshot& table : before) {
    const std::string after = Rows(*reader, table.table, table.columns);
    if (after == table.rows) continue;
    const std::vector<std::string> old_rows = Split(table.rows, '\n');
    const std::vector<std::string> new_rows = Split(after, '\n');
    const std::set<std::string> olds(old_rows.begin(), old_rows.end());
    const std::set<std::string> news(new_rows.begin(), new_rows.end());
    for (const std::string& row : olds) {
      EXPECT_TRUE(news.count(row) == 1) << "table " << table.table << " lost or changed: " << row;
    }
    for (const std::string& row : news) {
      EXPECT_TRUE(olds.count(row) == 1) << "table " << table.table << " has: " << row;
    }
  }
  // The replicas' readiness audit passes: exact history, capability, catalog and privileges.
  QL_ASSERT_OK_AND_ASSIGN(auto runtime,
                          pg::Connection::Open(cluster().Url(pg::kRuntimeRole, db), {}));
  Status audit = pg::AuditReadiness(*runtime);
  EXPECT_TRUE(audit.ok()) << audit.ToString();

  // What users care about, through the store's ports.
  PostgresStoreOptions options;
  options.runtime.url = cluster().Url(pg::kRuntimeRole, db);
  options.runtime.max_connections = 2;
  pg::PoolOptions admin;
  admin.url = cluster().Url(pg::kAdminRole, db);
  admin.max_connections = 1;
  options.admin = admin;
  QL_ASSERT_OK_AND_ASSIGN(auto store, PostgresStore::Open(options));
  pg::PoolOptions ingress_options;
  ingress_options.url = cluster().Url(pg::kWorkerIngressRole, db);
  ingress_options.max_connections = 1;
  QL_ASSERT_OK_AND_ASSIGN(auto ingress, pg::Pool::Create(ingress_options));
  const int64_t now_ms =
      std::stoll(Text(*reader, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"));
  Upgraded u{*store, *ingress, now_ms};
  for (const Kind* kind : written) {
    SCOPED_TRACE("data of " + std::string(kind->migration));
    kind->check(u, *d);
  }

  // The cluster scheduler resumes: every trigger decides without an error; G1 (fire_once)
  // admits its oldest missed occurrence once, G2 (skip) admits nothing; both cursors move past
  // now. An occurrence admitted before the upgrade is not admitted again.
  if (version >= "pg-0004-trigger-schedules") {
    Metrics metrics;
    ::ql::testing::SeededRandom random(7);
    ClusterSchedulerOptions scheduler_options;
    scheduler_options.owner = "upgrade-test";
    PostgresClusterSchedules schedules(store->runtime_pool());
    ClusterScheduler scheduler(schedules, store->definitions(), random, metrics, scheduler_options);
    QL_ASSERT_OK_AND_ASSIGN(auto round, scheduler.RunRound());
    EXPECT_EQ(round.errors, 0) << round.first_error.ToString();
    EXPECT_EQ(round.admitted, 1);
    const std::string g1_runs = "SELECT count(*) FROM ql3.runs WHERE trigger_id = '" + d->id("G1") +
                                "' AND scheduled_for_ms = ";
    EXPECT_EQ(Text(*reader, g1_runs + std::to_string(kC1)), "1");
    EXPECT_EQ(Text(*reader, "SELECT count(*) FROM ql3.runs WHERE trigger_id = '" + d->id("G2") +
                                "' AND scheduled_for_ms > " + std::to_string(kC2 - 3'600'000)),
              "0");
    QL_ASSERT_OK_AND_ASSIGN(auto g1, store->GetSchedule(d->id("G1")));
    EXPECT_GT(g1.next_fire_at_ms.value_or(0), now_ms);
    QL_ASSERT_OK_AND_ASSIGN(auto g2, store->GetSchedule(d->id("G2")));
    EXPECT_GT(g2.next_fire_at_ms.value_or(0), now_ms);
    ASSERT_TRUE(reader
                    ->ExecScript("UPDATE ql3.trigger_schedules SET next_fire_at_ms = " +
                                     std::to_string(kC0) + " WHERE trigger_id = '" + d->id("G1") +
                                     "'",
                                 "rewind")
                    .ok());
    QL_ASSERT_OK_AND_ASSIGN(auto again, scheduler.RunRound());
    EXPECT_EQ(again.admitted, 0);
    EXPECT_EQ(again.already_admitted, 1)
        << "rows " << again.rows << " skipped " << again.skipped << " raced " << again.raced
        << " errors " << again.errors << " " << again.first_error.ToString();
    EXPECT_EQ(Text(*reader, g1_runs + std::to_string(kC0)), "1");
    EXPECT_EQ(Text(*reader,
                   "SELECT count(*) FROM (SELECT 1 FROM ql3.runs WHERE trigger_type = "
                   "'cron' GROUP BY trigger_id, trigger_revision, scheduled_for_ms "
                   "HAVING count(*) > 1) d"),
              "0");
  }
}

INSTANTIATE_TEST_SUITE_P(FromEveryVersion, PostgresEveryVersionUpgradeTest,
                         ::testing::ValuesIn(Versions()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::MigrationTestName(info.param);
                         });

}  // namespace
}  // namespace ql
