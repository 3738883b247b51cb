// Upgrades from every earlier schema version. For each migration k of sqlite-main, a fresh file
// is migrated one migration at a time up to k, and right after each migration the data of every
// kind it introduced is written with plain SQL of that schema (definitions, schedules, runs with
// attempts, events and logs, principals and tokens, approvals, retention, sealed secrets,
// overlap, names and tombstones, jitter, sessions and passwords, sign-in policies,
// notifications, retry on timeout, artifacts and scripts). SqliteStore::Open then upgrades the file
// to the current schema, and the test checks that every row kept the values it had, that the schema
// is exactly a fresh database's, and, through the store's ports, what users care about: tasks and
// plans whose digests verify, triggers and their cursors, the scheduler resuming them under their
// misfire policy, runs with their attempts, events and relative log paths, tokens that still
// authenticate, secrets that still open, scripts whose blobs still read back verified, and the
// rest of each kind.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/approval.h"
#include "ql/core/artifact.h"
#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/task_spec.h"
#include "ql/engine/local_scheduler.h"
#include "ql/engine/metrics.h"
#include "ql/secrets/file_key_provider.h"
#include "ql/secrets/store_sealer.h"
#include "ql/storage/sqlite/sqlite_migrations.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/storage/sqlite/sqlite_test_support.h"
#include "ql/storage/sqlite/sqlite_upgrade_test_data.h"
#include "ql/testing/contract_assertions.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/upgrade_fixtures.h"

namespace ql {
namespace {

using ::ql::testing::FillSql;
using ::ql::testing::PublishedRevision;
using ::ql::testing::SqlBooleans;
using ::ql::testing::SqlText;
using sqlite::testing::kApprovalsSql;
using sqlite::testing::kArtifactsSql;
using sqlite::testing::kEvidenceSql;
using sqlite::testing::kGovernanceSql;
using sqlite::testing::kNotificationsSql;
using sqlite::testing::kRetentionSql;
using sqlite::testing::kRetryOnTimeoutSql;
using sqlite::testing::kRunsSql;
using sqlite::testing::kSecretsSql;
using sqlite::testing::kSignInPoliciesSql;
using sqlite::testing::kSignInSql;
using sqlite::testing::kSkippedSql;
using sqlite::testing::MigrateUpTo;
using sqlite::testing::Split;

constexpr char kLocal[] = "local_process";

// The upgrade runs at kNow (the fixture's clock). Cron cursors lie hours before it, so the
// scheduler finds them late: G1 (fire_once, every 5 minutes) admits its oldest missed occurrence
// kC1 once, G2 (skip, hourly) admits nothing; both move past kNow.
constexpr int64_t kNow = 1'780'000'000'000;
constexpr int64_t kC0 = ::ql::testing::kUpgradeC0;
constexpr int64_t kC1 = ::ql::testing::kUpgradeC1;
constexpr int64_t kC2 = ::ql::testing::kUpgradeC2;
constexpr int64_t kC4 = 1'780'023'600'000;  // G4's cursor, not due at kNow

std::string N(int64_t value) { return std::to_string(value); }

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

std::string TaskSql(const PublishedRevision& p, bool head, const std::optional<std::string>& name,
                    std::optional<int64_t> deleted_at_ms = std::nullopt) {
  return ::ql::testing::InsertTaskSql(p, head, name, deleted_at_ms, SqlBooleans::kIntegers);
}

// The schedule row of trigger `t` with cursor `next` (NULL when empty).
std::string ScheduleSql(const TriggerRevisionRecord& t, std::optional<int64_t> next) {
  return "INSERT INTO trigger_schedules (trigger_id, project_id, trigger_revision, "
         "next_fire_at_ms, last_scheduled_at_ms, state_version, published_at_ms, exhausted, "
         "updated_at_ms) VALUES (" +
         SqlText(t.trigger_id) + ", " + SqlText(t.project_id) + ", " + N(t.revision) + ", " +
         (next ? N(*next) : "NULL") + ", NULL, 1, " + N(t.created_at_ms) + ", 0, " +
         N(t.created_at_ms) + ");\n";
}

// A trigger head with its revision, and its schedule row when `schedule` (cursor `next`).
std::string TriggerSql(const TriggerRevisionRecord& t, const std::optional<std::string>& name,
                       bool schedule, std::optional<int64_t> next = std::nullopt) {
  return ::ql::testing::InsertTriggerSql(t, name, SqlBooleans::kIntegers) +
         (schedule ? ScheduleSql(t, next) : "");
}

// Everything the writers write and the checks expect, computed once: the shared upgrade data
// with local plans, and secrets sealed with a file key as ql-local seals them.
struct Data : ::ql::testing::UpgradeData {
  std::unique_ptr<secrets::FileKeyProvider> provider;
  std::unique_ptr<secrets::EnvelopeSealer> sealer;
};

Result<std::unique_ptr<Data>> MakeData() {
  auto d = std::make_unique<Data>();
  QL_ASSIGN_OR_RETURN(*static_cast<::ql::testing::UpgradeData*>(d.get()),
                      ::ql::testing::MakeUpgradeData(kLocal));
  const std::string p = d->id("P");
  // Secrets sealed with a file key, as ql-local seals them.
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
                        d->sealer->Seal(SecretRef{p, s.name, s.version}, s.value));
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
    d->v[key + "N"] = N(static_cast<int64_t>(bytes.size()));
    d->v[key + "X"] = Hex(bytes);
  }
  d->v["ARTTN"] = N(static_cast<int64_t>(sizeof(kHelloV1) - 1 + sizeof(kUtil) - 1));
  return d;
}

const Data& TheData() {
  static const std::unique_ptr<Data> data = [] {
    Result<std::unique_ptr<Data>> made = MakeData();
    if (!made.ok()) {
      ADD_FAILURE() << made.status().ToString();
      return std::unique_ptr<Data>();
    }
    return std::move(made).value();
  }();
  return *data;
}

// The data of one kind: written right after `migration` (with that schema), checked through the
// store's ports after the upgrade of every database that holds it.
struct Kind {
  std::string_view migration;
  std::function<std::string(const Data&)> sql;
  std::function<void(SqliteStore&, const Data&)> check;
};

const std::vector<Kind>& Kinds() {
  static const std::vector<Kind> kinds = {
      {"0002-projects-and-definitions",
       [](const Data& d) {
         return FillSql(
                    "INSERT INTO projects (id, slug, name, status, version, created_at_ms, "
                    "updated_at_ms) VALUES ('${P}', 'default', 'Default', 'active', 1, "
                    "1779900000000, 1779900000000);\n",
                    d.v) +
                TaskSql(d.tasks.at("T1r1"), true, std::nullopt) +
                TaskSql(d.tasks.at("T1r2"), false, std::nullopt) +
                FillSql(
                    "UPDATE task_heads SET current_revision = 2, updated_at_ms = "
                    "1779910000000 WHERE task_id = '${T1}';\n",
                    d.v) +
                TriggerSql(d.triggers.at("G1"), std::nullopt, false) +
                TriggerSql(d.triggers.at("G2"), std::nullopt, false);
       },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto project, store.projects().GetProject(d.id("P")));
         EXPECT_EQ(project.slug, "default");
         QL_ASSERT_OK_AND_ASSIGN(auto head, store.definitions().GetTaskHead(d.id("T1")));
         EXPECT_EQ(head.current_revision, 2);
         EXPECT_EQ(head.name, "backup");  // named after its current revision by 0011
         QL_ASSERT_OK_AND_ASSIGN(auto revision, store.definitions().GetTaskRevision(d.id("T1"), 2));
         EXPECT_EQ(revision.content_digest, d.v.at("DT1r2"));
         EXPECT_EQ(revision.spec_json, d.tasks.at("T1r2").revision.spec_json);
         EXPECT_FALSE(revision.approval_json.has_value());
         EXPECT_FALSE(revision.published_by.has_value());
         // The plan still parses and its digest verifies: runs can still be started from it.
         QL_ASSERT_OK_AND_ASSIGN(auto execution,
                                 store.definitions().FindExecutionRevision(d.id("T1"), 2, kLocal));
         EXPECT_EQ(execution.id, d.v.at("XT1r2"));
         Result<nlohmann::json> json = ParseJsonStrict(execution.plan_json);
         ASSERT_TRUE(json.ok());
         QL_ASSERT_OK_AND_ASSIGN(auto plan, PlanFromJson(*json));
         EXPECT_TRUE(VerifyPlanDigest(plan, execution.plan_digest).ok());
         EXPECT_EQ(plan.retry_policy.max_attempts, 3);
         for (const char* g : {"G1", "G2"}) {
           SCOPED_TRACE(g);
           QL_ASSERT_OK_AND_ASSIGN(auto trigger,
                                   store.definitions().GetTriggerRevision(d.id(g), 1));
           EXPECT_EQ(trigger.content_digest, TriggerContentDigest(trigger));
           EXPECT_EQ(trigger.overlap, "allow");
           EXPECT_EQ(trigger.jitter_ms, 0);
           QL_ASSERT_OK_AND_ASSIGN(auto head, store.definitions().GetTriggerHead(d.id(g)));
           // 0011 names a trigger after its task and the end of its id.
           EXPECT_EQ(head.name, "backup-" + d.id(g).substr(24));
         }
       }},
      {"0003-schedules",
       [](const Data& d) {
         return ScheduleSql(d.triggers.at("G1"), kC1) + ScheduleSql(d.triggers.at("G2"), kC2);
       },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto g1, store.definitions().GetSchedule(d.id("G1")));
         EXPECT_EQ(g1.next_fire_at_ms, kC1);
         QL_ASSERT_OK_AND_ASSIGN(auto g2, store.definitions().GetSchedule(d.id("G2")));
         EXPECT_EQ(g2.next_fire_at_ms, kC2);
       }},
      {"0004-runs", [](const Data& d) { return FillSql(kRunsSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto r1, store.runs().GetRun(d.id("R1")));
         EXPECT_EQ(r1.status, "succeeded");
         EXPECT_EQ(r1.scheduled_for_ms, kC0);
         EXPECT_EQ(r1.retry_policy.max_attempts, 3);
         EXPECT_FALSE(r1.retry_policy.retry_on_timeout);
         QL_ASSERT_OK_AND_ASSIGN(auto found,
                                 store.runs().FindRunByIdempotencyKey(d.id("P"), d.v.at("KEYC0")));
         EXPECT_EQ(found.id, d.id("R1"));
         // Log paths are relative to the log root since 0018, in both layouts.
         QL_ASSERT_OK_AND_ASSIGN(auto attempts, store.runs().ListAttempts(d.id("R1")));
         ASSERT_EQ(attempts.size(), 2u);
         EXPECT_EQ(attempts[0].log_path, d.id("T1") + "/" + d.id("R1") + "/1.log");
         EXPECT_EQ(attempts[1].log_path, d.id("T1") + "/" + d.id("R1") + "/2.log");
         QL_ASSERT_OK_AND_ASSIGN(auto r2_attempts, store.runs().ListAttempts(d.id("R2")));
         ASSERT_EQ(r2_attempts.size(), 1u);
         EXPECT_EQ(r2_attempts[0].log_path, d.id("T1") + "/" + d.id("R2") + ".log");
         QL_ASSERT_OK_AND_ASSIGN(auto events, store.runs().ListEvents(d.id("R1"), 0, 100));
         ASSERT_EQ(events.size(), 6u);
         EXPECT_EQ(events.back().type, "run.succeeded");
         QL_ASSERT_OK_AND_ASSIGN(auto r3, store.runs().GetRun(d.id("R3")));
         EXPECT_EQ(r3.retry_of_run_id, d.id("R2"));
         // The queued run is still dispatched, the waiting one still retried.
         QL_ASSERT_OK_AND_ASSIGN(auto dispatchable,
                                 store.runs().ListDispatchable(kLocal, 16, kNow));
         ASSERT_EQ(dispatchable.size(), 1u);
         EXPECT_EQ(dispatchable[0].id, d.id("R3"));
         QL_ASSERT_OK_AND_ASSIGN(auto retry_due, store.runs().ListRetryDue(kNow, 16));
         ASSERT_EQ(retry_due.size(), 1u);
         EXPECT_EQ(retry_due[0].id, d.id("R4"));
         EXPECT_TRUE(retry_due[0].retry_policy.retry_on_lost);
       }},
      {"0005-governance", [](const Data& d) { return FillSql(kGovernanceSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto owner, store.governance().Authenticate(d.v.at("K1D"), kNow));
         EXPECT_EQ(owner.principal.id, d.id("U1"));
         EXPECT_EQ(owner.token.kind, "api");
         EXPECT_EQ(store.governance().Authenticate(d.v.at("K2D"), kNow).status().reason(),
                   "token_revoked");
         QL_ASSERT_OK_AND_ASSIGN(auto owner_roles, store.governance().RolesOf(d.id("U1")));
         EXPECT_EQ(owner_roles.installation, Role::kOwner);
         QL_ASSERT_OK_AND_ASSIGN(auto ci_roles, store.governance().RolesOf(d.id("U2")));
         ASSERT_EQ(ci_roles.projects.size(), 1u);
         EXPECT_EQ(ci_roles.projects[0], std::make_pair(d.id("P"), Role::kViewer));
         QL_ASSERT_OK_AND_ASSIGN(auto audit, store.governance().ListAudit(PageRequest{}));
         bool found = false;
         for (const AuditRecord& fact : audit.items) found |= fact.id == d.id("AU1");
         EXPECT_TRUE(found);
       }},
      {"0006-approvals",
       [](const Data& d) {
         return TaskSql(d.tasks.at("T3"), true, std::nullopt) + FillSql(kApprovalsSql, d.v);
       },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto t3, store.definitions().GetTaskRevision(d.id("T3"), 1));
         QL_ASSERT_OK_AND_ASSIGN(auto policy, RequiredApproval(t3));
         ASSERT_TRUE(policy.has_value());
         EXPECT_EQ(policy->approver_role, Role::kAdmin);
         QL_ASSERT_OK_AND_ASSIGN(auto pending, store.approvals().GetApproval(d.id("AR1")));
         EXPECT_EQ(pending.request.status, "pending");
         EXPECT_EQ(ApprovalPayloadDigest(ApprovalPayloadCanonical(pending.request)),
                   pending.request.payload_digest);
         QL_ASSERT_OK_AND_ASSIGN(auto approved, store.approvals().GetApproval(d.id("AR2")));
         ASSERT_TRUE(approved.decision && approved.action && approved.receipt);
         EXPECT_EQ(approved.receipt->run_id, d.id("R5"));
         QL_ASSERT_OK_AND_ASSIGN(auto resolution, store.approvals().GetResolution(d.id("R5")));
         EXPECT_EQ(resolution.resolution, "failed");
         EXPECT_EQ(resolution.resolved_by, d.id("U1"));
         QL_ASSERT_OK_AND_ASSIGN(auto r5, store.runs().GetRun(d.id("R5")));
         EXPECT_EQ(r5.trigger_type, "approved");
       }},
      {"0007-retention", [](const Data& d) { return FillSql(kRetentionSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto project, store.retention().GetRetention(d.id("P"), ""));
         EXPECT_EQ(project.settings.keep_days, 7);
         EXPECT_FALSE(project.settings.keep_runs.has_value());
         QL_ASSERT_OK_AND_ASSIGN(auto task, store.retention().GetRetention(d.id("P"), d.id("T1")));
         EXPECT_EQ(task.settings.keep_runs, 20);
         EXPECT_EQ(task.version, 2);
       }},
      {"0008-secrets", [](const Data& d) { return FillSql(kSecretsSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         // The sealed versions still open with the key they were sealed under.
         for (const auto& [version, value] :
              std::vector<std::pair<std::optional<int64_t>, std::string>>{
                  {std::nullopt, "correct horse battery staple"}, {1, "hunter2"}}) {
           SecretRef ref{d.id("P"), "db-password", version};
           QL_ASSERT_OK_AND_ASSIGN(auto stored, store.secrets().ResolveSecret(ref));
           QL_ASSERT_OK_AND_ASSIGN(
               auto opened,
               d.sealer->Open(SecretRef{d.id("P"), "db-password", stored.version}, stored.sealed));
           EXPECT_EQ(opened, value);
         }
         EXPECT_EQ(
             store.secrets().ResolveSecret(SecretRef{d.id("P"), "old-token", {}}).status().reason(),
             "secret_not_found");
       }},
      {"0009-approval-evidence-and-retries",
       [](const Data& d) { return FillSql(kEvidenceSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto retry, store.approvals().GetApproval(d.id("AR3")));
         EXPECT_EQ(retry.request.retry_of_run_id, d.id("R5"));
         QL_ASSERT_OK_AND_ASSIGN(auto evidence, store.approvals().GetResolution(d.id("R7")));
         EXPECT_EQ(evidence.resolution, "succeeded");
         EXPECT_FALSE(evidence.resolved_by.has_value());
       }},
      {"0010-overlap",
       [](const Data& d) {
         return TaskSql(d.tasks.at("T4"), true, std::nullopt) +
                TriggerSql(d.triggers.at("G3"), std::nullopt, true) + FillSql(kSkippedSql, d.v);
       },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto t4, store.definitions().GetTaskRevision(d.id("T4"), 1));
         EXPECT_EQ(t4.concurrency, 2);
         QL_ASSERT_OK_AND_ASSIGN(auto g3, store.definitions().GetTriggerRevision(d.id("G3"), 1));
         EXPECT_EQ(g3.overlap, "forbid");
         EXPECT_EQ(g3.content_digest, TriggerContentDigest(g3));
         QL_ASSERT_OK_AND_ASSIGN(auto r8, store.runs().GetRun(d.id("R8")));
         EXPECT_EQ(r8.status, "skipped");
         EXPECT_EQ(r8.error_code, "overlap");
       }},
      {"0011-names-and-tombstones",
       [](const Data& d) {
         return TaskSql(d.tasks.at("T6"), true, std::string("old-job"), 1'779'960'000'000);
       },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto t6, store.definitions().GetTaskHead(d.id("T6")));
         EXPECT_EQ(t6.deleted_at_ms, 1'779'960'000'000);
         QL_ASSERT_OK_AND_ASSIGN(auto by_name,
                                 store.definitions().FindTaskByName(d.id("P"), "old-job"));
         EXPECT_FALSE(by_name.has_value());  // a tombstone frees its name
         QL_ASSERT_OK_AND_ASSIGN(auto backup,
                                 store.definitions().FindTaskByName(d.id("P"), "backup"));
         ASSERT_TRUE(backup.has_value());
         EXPECT_EQ(backup->task_id, d.id("T1"));
       }},
      {"0012-trigger-jitter",
       [](const Data& d) { return TriggerSql(d.triggers.at("G4"), "report-jitter", true, kC4); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto g4,
                                 store.definitions().FindTriggerByName(d.id("P"), "report-jitter"));
         ASSERT_TRUE(g4.has_value());
         QL_ASSERT_OK_AND_ASSIGN(auto revision,
                                 store.definitions().GetTriggerRevision(d.id("G4"), 1));
         EXPECT_EQ(revision.jitter_ms, 60'000);
         EXPECT_EQ(revision.content_digest, TriggerContentDigest(revision));
       }},
      {"0013-sign-in", [](const Data& d) { return FillSql(kSignInSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto session,
                                 store.governance().Authenticate(d.v.at("K3D"), kNow));
         EXPECT_EQ(session.token.kind, "session");
         EXPECT_EQ(session.token.label, "panel from 10.0.0.7");
         EXPECT_EQ(session.token.idle_timeout_ms, 3'600'000);
         QL_ASSERT_OK_AND_ASSIGN(auto password, store.governance().GetPassword(d.id("U1")));
         ASSERT_TRUE(password.has_value());
         EXPECT_TRUE(password->hash.starts_with("$argon2id$"));
         EXPECT_TRUE(password->totp_enabled);
         EXPECT_EQ(password->recovery_digests, d.v.at("RECOVERYD"));
       }},
      {"0014-published-by",
       [](const Data& d) { return TaskSql(d.tasks.at("T5"), true, std::string("cleanup")); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto t5, store.definitions().GetTaskRevision(d.id("T5"), 1));
         EXPECT_EQ(t5.published_by, d.id("U1"));
       }},
      {"0015-sign-in-policies", [](const Data& d) { return FillSql(kSignInPoliciesSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto restricted,
                                 store.governance().Authenticate(d.v.at("K4D"), kNow));
         EXPECT_EQ(restricted.token.restriction, "password_change");
         QL_ASSERT_OK_AND_ASSIGN(auto settings, store.governance().GetInstallationSettings());
         EXPECT_EQ(settings.require_second_factor, "admins");
         EXPECT_EQ(settings.setup_code_digest, d.v.at("SETUPD"));
         QL_ASSERT_OK_AND_ASSIGN(auto login,
                                 store.governance().TakeOidcLogin(d.v.at("STATED"), kNow));
         EXPECT_EQ(login.cli_port, 45678);
       }},
      {"0016-notifications", [](const Data& d) { return FillSql(kNotificationsSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto channels, store.notifications().ListChannels(d.id("P")));
         ASSERT_EQ(channels.size(), 1u);
         EXPECT_EQ(channels[0].name, "ops");
         QL_ASSERT_OK_AND_ASSIGN(auto rules, store.notifications().ListRules(d.id("P")));
         ASSERT_EQ(rules.size(), 1u);
         EXPECT_EQ(rules[0].task_id, d.id("T1"));
         QL_ASSERT_OK_AND_ASSIGN(auto delivery,
                                 store.notifications().GetDelivery(d.id("P"), d.id("O1")));
         EXPECT_EQ(delivery.status, "delivered");
         EXPECT_EQ(delivery.run_id, d.id("R2"));
       }},
      {"0017-retry-on-timeout", [](const Data& d) { return FillSql(kRetryOnTimeoutSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         QL_ASSERT_OK_AND_ASSIGN(auto r9, store.runs().GetRun(d.id("R9")));
         EXPECT_TRUE(r9.retry_policy.retry_on_timeout);
         QL_ASSERT_OK_AND_ASSIGN(auto attempts, store.runs().ListAttempts(d.id("R9")));
         ASSERT_EQ(attempts.size(), 1u);
         EXPECT_EQ(attempts[0].log_path, d.id("T1") + "/" + d.id("R9") + "/1.log");
       }},
      {"0019-artifacts", [](const Data& d) { return FillSql(kArtifactsSql, d.v); },
       [](SqliteStore& store, const Data& d) {
         const std::string p = d.id("P");
         auto read = [&](const std::string& digest) -> Result<std::string> {
           std::string out;
           QL_RETURN_IF_ERROR(store.artifacts().ReadBlob(p, digest, [&](std::string_view bytes) {
             out.append(bytes);
             return Status::Ok();
           }));
           return out;
         };
         QL_ASSERT_OK_AND_ASSIGN(auto hello, store.artifacts().GetScript(p, "hello"));
         EXPECT_EQ(hello.latest_version, 2);
         EXPECT_EQ(hello.status, kScriptActive);
         QL_ASSERT_OK_AND_ASSIGN(auto latest,
                                 store.artifacts().GetScriptVersion(p, "hello", std::nullopt));
         EXPECT_EQ(latest.version, 2);
         EXPECT_EQ(latest.entry, "hello.sh");
         EXPECT_EQ(latest.created_by, d.id("U1"));
         ASSERT_EQ(latest.files.size(), 1u);
         EXPECT_EQ(latest.files[0].digest, d.v.at("ARTF3"));
         // The two-chunk blob still reads back whole and verified.
         QL_ASSERT_OK_AND_ASSIGN(auto v2, read(latest.digest));
         EXPECT_EQ(v2, std::string(kHelloV2Head) + kHelloV2Tail);
         QL_ASSERT_OK_AND_ASSIGN(auto v1, store.artifacts().GetScriptVersion(p, "hello", 1));
         QL_ASSERT_OK_AND_ASSIGN(auto v1_bytes, read(v1.digest));
         EXPECT_EQ(v1_bytes, kHelloV1);
         // The deleted tree: not by name, but by its version, with its files and manifest.
         EXPECT_EQ(store.artifacts().GetScriptVersion(p, "tools", std::nullopt).status().reason(),
                   "script_not_found");
         QL_ASSERT_OK_AND_ASSIGN(auto tools, store.artifacts().GetScriptVersion(p, "tools", 1));
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
         QL_ASSERT_OK_AND_ASSIGN(auto held, store.artifacts().ProjectBytes(p));
         EXPECT_EQ(held, std::stoll(d.v.at("ARTF1N")) + std::stoll(d.v.at("ARTF2N")) +
                             std::stoll(d.v.at("ARTF3N")) + std::stoll(d.v.at("ARTMN")));
       }},
  };
  return kinds;
}

// Columns a later migration rewrites on purpose: (migration, table, column).
struct Rewrite {
  std::string_view migration;
  std::string_view table;
  std::string_view column;
};
constexpr Rewrite kRewrites[] = {{"0018-relative-log-paths", "run_attempts", "log_path"}};

// Tables that hold no data of their own (the history and capability rows the migrations write).
bool HoldsNoData(const std::string& table) { return table.starts_with("schema_"); }

// Fails naming each row of `table` that the upgrade lost or changed, and each it added.
void ExpectSameRows(const std::string& table, const std::string& before, const std::string& after) {
  if (before == after) return;
  const std::vector<std::string> old_rows = Split(before, '\n');
  const std::vector<std::string> new_rows = Split(after, '\n');
  const std::set<std::string> olds(old_rows.begin(), old_rows.end());
  const std::set<std::string> news(new_rows.begin(), new_rows.end());
  for (const std::string& row : olds) {
    EXPECT_TRUE(news.count(row) == 1) << "table " << table << " lost or changed: " << row;
  }
  for (const std::string& row : news) {
    EXPECT_TRUE(olds.count(row) == 1) << "table " << table << " has after the upgrade: " << row;
  }
}

std::vector<std::string> MigrationIds() {
  std::vector<std::string> ids;
  for (const sqlite::EmbeddedSql& file : sqlite::EmbeddedMigrationFiles()) {
    ids.emplace_back(file.id);
  }
  return ids;
}

class SqliteEveryVersionUpgradeTest : public sqlite::testing::SqliteUpgradeFixture,
                                      public ::testing::WithParamInterface<std::string> {
 protected:
  // The schema of a database the store created at the latest version.
  static const std::set<std::string>& FreshSchema() {
    static const std::set<std::string> schema = [] {
      std::set<std::string> out;
      const std::string dir = ::testing::TempDir() + "/ql-fresh-" + std::to_string(::getpid());
      std::filesystem::create_directories(dir);
      ::ql::testing::FakeClock clock;
      SqliteOptions options;
      options.path = dir + "/fresh.db";
      {
        Result<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(options, clock);
        EXPECT_TRUE(store.ok()) << store.status().ToString();
      }
      Result<std::unique_ptr<sqlite::Db>> db = sqlite::Db::Open(options.path, 5000, 0);
      EXPECT_TRUE(db.ok());
      if (db.ok())
        (void)(*db)->WithConnection([&]() -> Status {
          QL_ASSIGN_OR_RETURN(std::string text, (*db)->QueryText(kSchemaSql, "schema"));
          for (const std::string& line : Split(text, '\n')) out.insert(line);
          return Status::Ok();
        });
      std::filesystem::remove_all(dir);
      return out;
    }();
    return schema;
  }

  std::set<std::string> Schema() {
    std::set<std::string> out;
    for (const std::string& line : Split(Query(kSchemaSql), '\n')) out.insert(line);
    return out;
  }

  static constexpr char kSchemaSql[] =
      "SELECT group_concat(line, char(10)) FROM (SELECT type || ' ' || name || ' on ' || "
      "tbl_name || ': ' || coalesce(sql, '(automatic)') AS line FROM sqlite_master ORDER BY line)";
};

TEST_P(SqliteEveryVersionUpgradeTest, ADatabaseOfThisVersionWithDataOfEveryKindUpgrades) {
  const std::string version = GetParam();
  ASSERT_TRUE(TheData().sealer != nullptr);
  const Data& d = TheData();
  clock_.SetNowMs(kNow);

  // The database of `version`: migrated one migration at a time, the data of each kind written
  // right after the migration that introduced it.
  Connect();
  std::string previous;
  std::vector<const Kind*> written;
  for (const sqlite::EmbeddedSql& file : sqlite::EmbeddedMigrationFiles()) {
    if (file.id > version) break;
    Status migrated = MigrateUpTo(*db_, file.id, previous);
    ASSERT_TRUE(migrated.ok()) << file.id << ": " << migrated.ToString();
    previous = std::string(file.id);
    for (const Kind& kind : Kinds()) {
      if (kind.migration != file.id) continue;
      const std::string sql = kind.sql(d);
      ASSERT_EQ(::ql::testing::UnfilledName(sql), std::nullopt) << file.id;
      Status filled = Fill(sql);
      ASSERT_TRUE(filled.ok()) << "data of " << file.id << ": " << filled.ToString();
      written.push_back(&kind);
    }
  }
  ASSERT_EQ(Query("SELECT max(id) FROM schema_migrations"), version);
  ASSERT_EQ(Query("PRAGMA foreign_key_check"), "");

  // Every table of this version holds rows (a migration that adds a table needs a writer in
  // Kinds()), and each row's values are kept, over the table's columns of this version but those
  // a later migration rewrites on purpose.
  struct Snapshot {
    std::string table, columns, rows;
  };
  std::vector<Snapshot> before;
  for (const std::string& table : Tables()) {
    if (HoldsNoData(table)) continue;
    EXPECT_NE(Query("SELECT count(*) FROM " + table), "0")
        << "table " << table << " exists at " << version
        << " but no data of its kind is written (add it to Kinds())";
    std::string columns;
    for (const std::string& column : Split(Columns(table), ',')) {
      bool rewritten = false;
      for (const Rewrite& r : kRewrites) {
        rewritten |= r.table == table && r.column == column && version < r.migration;
      }
      if (!rewritten) columns += (columns.empty() ? "" : ",") + column;
    }
    before.push_back({table, columns, Rows(table, columns)});
  }

  std::unique_ptr<SqliteStore> store = UpgradeByTheStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Query("SELECT max(id) FROM schema_migrations"),
            sqlite::SqliteMainStream().migrations.back().id);
  EXPECT_EQ(Query("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(Query("PRAGMA foreign_key_check"), "");
  for (const Snapshot& table : before) {
    ExpectSameRows(table.table, table.rows, Rows(table.table, table.columns));
  }
  // The schema is exactly what a fresh database of the current version has.
  const std::set<std::string> schema = Schema();
  for (const std::string& object : FreshSchema()) {
    EXPECT_TRUE(schema.count(object) == 1) << "missing after the upgrade: " << object;
  }
  for (const std::string& object : schema) {
    EXPECT_TRUE(FreshSchema().count(object) == 1) << "extra after the upgrade: " << object;
  }

  // What users care about, through the store's ports.
  for (const Kind* kind : written) {
    SCOPED_TRACE("data of " + std::string(kind->migration));
    kind->check(*store, d);
  }

  // The scheduler resumes: every trigger decides without an error; G1 (fire_once) admits its
  // oldest missed occurrence once, G2 (skip) admits nothing; both cursors move past now.
  if (version >= "0003-schedules") {
    Metrics metrics;
    ::ql::testing::SeededRandom random(7);
    LocalSchedulerOptions options;
    LocalScheduler scheduler(store->schedules(), store->definitions(), clock_, random, metrics,
                             options);
    QL_ASSERT_OK_AND_ASSIGN(auto round, scheduler.RunRound());
    EXPECT_EQ(round.errors, 0) << round.first_error.ToString();
    EXPECT_EQ(round.admitted, 1);
    QL_ASSERT_OK_AND_ASSIGN(auto admitted, store->runs().FindRunByIdempotencyKey(
                                               d.id("P"), CronIdempotencyKey(d.id("G1"), 1, kC1)));
    EXPECT_EQ(admitted.status, "queued");
    EXPECT_EQ(admitted.execution_revision_id, d.v.at("XT1r2"));
    QL_ASSERT_OK_AND_ASSIGN(auto g1, store->definitions().GetSchedule(d.id("G1")));
    EXPECT_EQ(g1.next_fire_at_ms, 1'780'000'200'000);
    QL_ASSERT_OK_AND_ASSIGN(auto g2, store->definitions().GetSchedule(d.id("G2")));
    EXPECT_EQ(g2.next_fire_at_ms, 1'780'002'000'000);
    EXPECT_EQ(Query("SELECT count(*) FROM runs WHERE trigger_id = '" + d.id("G2") +
                    "' AND scheduled_for_ms > " + std::to_string(kC2 - 3'600'000)),
              "0");
    if (version >= "0004-runs") {
      // An occurrence admitted before the upgrade is never admitted again: with G1's cursor put
      // back on it, the round moves the cursor past it and adds no run.
      ASSERT_TRUE(Exec("UPDATE trigger_schedules SET next_fire_at_ms = " + std::to_string(kC0) +
                       " WHERE trigger_id = '" + d.id("G1") + "'")
                      .ok());
      QL_ASSERT_OK_AND_ASSIGN(auto again, scheduler.RunRound());
      EXPECT_EQ(again.admitted, 0);
      EXPECT_EQ(again.already_admitted, 1);
      EXPECT_EQ(Query("SELECT count(*) FROM runs WHERE trigger_id = '" + d.id("G1") +
                      "' AND scheduled_for_ms = " + std::to_string(kC0)),
                "1");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FromEveryVersion, SqliteEveryVersionUpgradeTest,
                         ::testing::ValuesIn(MigrationIds()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::MigrationTestName(info.param);
                         });

}  // namespace
}  // namespace ql
