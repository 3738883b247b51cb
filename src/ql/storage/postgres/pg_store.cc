#include "ql/storage/postgres/pg_store.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "ql/core/governance_store.h"
#include "ql/core/ids.h"
#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_approvals.h"
#include "ql/storage/postgres/pg_artifacts.h"
#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_notifications.h"
#include "ql/storage/postgres/pg_placement.h"
#include "ql/storage/postgres/pg_retention.h"
#include "ql/storage/postgres/pg_secrets.h"
#include "ql/storage/postgres/pg_store_rows.h"

namespace ql {

using pg::kProjectColumns;
using pg::LoadProject;
using pg::LoadProjectBySlug;
using pg::P;
using pg::QueryAll;
using pg::ReadProject;
using pg::Rows;
using pg::Tx;

namespace {

const pg::TxOptions kReadOnly{pg::Isolation::kReadCommitted, /*read_only=*/true};
const pg::TxOptions kReadWrite{pg::Isolation::kReadCommitted, /*read_only=*/false};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Opening

PostgresStore::PostgresStore(std::unique_ptr<pg::Pool> runtime, std::unique_ptr<pg::Pool> admin)
    : runtime_(std::move(runtime)),
      admin_(std::move(admin)),
      governance_runner_(std::make_unique<pg::PgGovernanceRunner>(*runtime_, admin_.get())),
      governance_(std::make_unique<GovernanceStore>(*governance_runner_, SecureRandom())),
      approvals_runner_(std::make_unique<pg::PgApprovalRunner>(*runtime_)),
      approvals_(std::make_unique<ApprovalStore>(*approvals_runner_, SecureRandom())),
      retention_(pg::NewPgRetention(*runtime_, admin_.get())),
      secret_runner_(std::make_unique<pg::PgSecretRunner>(*runtime_, admin_.get())),
      secrets_(std::make_unique<SecretStore>(*secret_runner_, SecureRandom())),
      notification_runner_(std::make_unique<pg::PgNotificationRunner>(*runtime_, admin_.get())),
      notifications_(std::make_unique<NotificationStore>(*notification_runner_, SecureRandom())),
      artifact_runner_(std::make_unique<pg::PgArtifactRunner>(*runtime_, admin_.get())),
      artifacts_(std::make_unique<ArtifactStore>(*artifact_runner_, SecureRandom())),
      placement_(std::make_unique<pg::PostgresPlacement>(*runtime_, admin_.get(), SecureRandom())) {
}

Status PostgresStore::Fence(pg::Tx& tx, const std::optional<PolicyFence>& fence,
                            const std::string& project_id) {
  if (!fence.has_value()) return Status();
  std::unique_ptr<GovernanceTx> governance = pg::NewGovernanceTx(tx);
  return CheckPolicyFence(*governance, *fence, project_id);
}

PostgresStore::~PostgresStore() {
  if (admin_ != nullptr) admin_->Close();
  runtime_->Close();
}

Result<std::unique_ptr<PostgresStore>> PostgresStore::Open(const PostgresStoreOptions& options) {
  const bool allow_insecure = pg::InsecureAllowedByEnvironment();
  pg::PoolOptions runtime = options.runtime;
  QL_ASSIGN_OR_RETURN(runtime.url, pg::CheckDatabaseUrl(options.runtime.url, allow_insecure));
  std::optional<pg::PoolOptions> admin = options.admin;
  if (admin.has_value()) {
    QL_ASSIGN_OR_RETURN(admin->url, pg::CheckDatabaseUrl(options.admin->url, allow_insecure));
  }
  QL_ASSIGN_OR_RETURN(std::unique_ptr<pg::Pool> runtime_pool, pg::Pool::Create(runtime));
  std::unique_ptr<pg::Pool> admin_pool;
  if (admin.has_value()) {
    QL_ASSIGN_OR_RETURN(admin_pool, pg::Pool::Create(*admin));
  }
  return std::unique_ptr<PostgresStore>(
      new PostgresStore(std::move(runtime_pool), std::move(admin_pool)));
}

Status PostgresStore::Read(std::string_view operation, const std::function<Status(pg::Tx&)>& body) {
  return runtime_->Transact(kReadOnly, operation, body);
}

Status PostgresStore::Write(std::string_view operation,
                            const std::function<Status(pg::Tx&)>& body) {
  return runtime_->Transact(kReadWrite, operation, body);
}

Status PostgresStore::AdminWrite(std::string_view operation,
                                 const std::function<Status(pg::Tx&)>& body) {
  if (admin_ == nullptr) {
    return Unavailable("admin_pool_missing",
                       Cat({operation, " needs the admin database URL (--admin-database-url)"}));
  }
  return admin_->Transact(kReadWrite, operation, body);
}

// ---------------------------------------------------------------------------------------------
// Projects

Result<ProjectRecord> PostgresStore::EnsureProject(const std::string& id_if_new,
                                                   const std::string& slug, const std::string& name,
                                                   int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireText("project slug", slug));
  // The common case (the project exists) needs no admin role.
  std::optional<ProjectRecord> existing;
  QL_RETURN_IF_ERROR(Read("ensuring a project", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(existing, LoadProjectBySlug(tx, slug));
    return Status();
  }));
  if (existing.has_value()) return std::move(*existing);
  QL_RETURN_IF_ERROR(ValidateId("project id", id_if_new));

  ProjectRecord out;
  QL_RETURN_IF_ERROR(AdminWrite("ensuring a project", [&](Tx& tx) -> Status {
    out = ProjectRecord{id_if_new, slug, name, std::string(kProjectActive), 1, now_ms, now_ms};
    // A concurrent creator of the same slug makes this insert wait for its outcome; once it
    // has committed, its project is the answer.
    QL_ASSIGN_OR_RETURN(Rows inserted,
                        tx.Exec("INSERT INTO projects (id, slug, name, status, version, "
                                "created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                                "ON CONFLICT (slug) DO NOTHING",
                                {P(out.id), P(out.slug), P(out.name), P(out.status), P(out.version),
                                 P(out.created_at_ms), P(out.updated_at_ms)}));
    if (inserted.affected() == 1) return Status();
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> winner, LoadProjectBySlug(tx, slug));
    if (!winner.has_value()) {
      return Internal("project_vanished",
                      Cat({"project ", Quote(slug), " conflicted on insert but cannot be read"}));
    }
    out = std::move(*winner);
    return Status();
  }));
  return out;
}

Result<ProjectRecord> PostgresStore::GetProject(const std::string& project_id) {
  std::optional<ProjectRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a project", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadProject(tx, project_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<ProjectRecord> PostgresStore::GetProjectBySlug(const std::string& slug) {
  std::optional<ProjectRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a project", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadProjectBySlug(tx, slug));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("project_not_found", Cat({"no project has slug ", Quote(slug)}));
  }
  return std::move(*out);
}

Result<std::vector<ProjectRecord>> PostgresStore::ListProjects() {
  std::vector<ProjectRecord> out;
  QL_RETURN_IF_ERROR(Read("listing projects", [&](Tx& tx) -> Status {
    // Byte order, as SQLite sorts, whatever the database's collation.
    static const std::string kSql =
        Cat({"SELECT ", kProjectColumns, " FROM projects p ORDER BY p.slug COLLATE \"C\""});
    QL_ASSIGN_OR_RETURN(out, QueryAll<ProjectRecord>(tx, kSql, {}, ReadProject));
    return Status();
  }));
  return out;
}

}  // namespace ql
