// The cluster's backup and restore drill, as docs/operations.md describes it: while a replica
// admits two every-second triggers (misfire fire_once and skip), the database is dumped with
// `pg_dump -Fc` as ql3_migration; the replica stops; the dump is restored with `pg_restore` into a
// new database; after a gap longer than the misfire grace, `ql-cluster audit` says ready, and a
// replica on the restored database resumes: no occurrence is admitted twice, the gap is handled
// per misfire policy (fire_once: one run, for the oldest missed occurrence; skip: none), and the
// occurrences after it are admitted again.

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cluster_harness.h"
#include "harness.h"
#include "ql/testing/postgres_server.h"

namespace ql::itest {
namespace {

using nlohmann::json;
using ::ql::testing::PostgresServer;

constexpr char kRestored[] = "qinglong_restored";
// Short, so that the gap between the dump and the restored replica's first round is late.
constexpr char kGraceMs[] = "2000";

class ClusterBackupDrillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartMigratedPostgres();
    ASSERT_NE(server_, nullptr);
    token_ = MintCredential(*server_, "token", "drill");
    ASSERT_FALSE(token_.empty());
  }

  std::vector<std::string> ReplicaArgs(const std::string& database) const {
    return {"--database-url",       server_->Url("ql3_runtime", database),
            "--admin-database-url", server_->Url("ql3_admin", database),
            "--grace-ms",           kGraceMs};
  }

  json Post(const Replica& r, const std::string& path, const json& body) {
    httplib::Client client("127.0.0.1", r.port());
    client.set_bearer_token_auth(token_.c_str());
    client.set_keep_alive(false);
    client.set_read_timeout(30, 0);
    auto res = client.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res && res->status < 300) << path << " " << (res ? res->body : "no response");
    return res ? json::parse(res->body, nullptr, false) : json();
  }

  // One integer from `database` (superuser).
  int64_t Count(const std::string& database, const std::string& sql) {
    Result<std::string> out = server_->Psql(database, sql);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() && !out->empty() ? std::stoll(*out) : -1;
  }

  int64_t DbNowMs() {
    return Count("postgres", "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
  }

  // The runs of `trigger` in `database` (the restored one unless told) scheduled in
  // [from_ms, to_ms].
  int64_t Runs(const std::string& trigger, int64_t from_ms, int64_t to_ms,
               const std::string& database = kRestored) {
    return Count(database, "SELECT count(*) FROM ql3.runs WHERE trigger_id = '" + trigger +
                               "' AND scheduled_for_ms BETWEEN " + std::to_string(from_ms) +
                               " AND " + std::to_string(to_ms));
  }

  std::string Log(const std::string& name) const { return dir_.path() + "/" + name + ".log"; }

  TempDir dir_;
  std::unique_ptr<PostgresServer> server_;
  std::string token_;
};

TEST_F(ClusterBackupDrillTest, ARestoredDatabaseResumesWithoutDuplicatesUnderTheMisfirePolicy) {
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(ReplicaArgs("qinglong")));
  json task =
      Post(a, "/api/v1/tasks",
           {{"name", "tick"}, {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}});
  ASSERT_TRUE(task.contains("id")) << task.dump();
  std::map<std::string, std::string> triggers;  // misfire policy -> trigger id
  for (const char* misfire : {"fire_once", "skip"}) {
    json trigger = Post(a, "/api/v1/triggers",
                        {{"task_id", task["id"]},
                         {"expression", "* * * * * *"},
                         {"timezone", "UTC"},
                         {"misfire", misfire}});
    ASSERT_TRUE(trigger.contains("id")) << trigger.dump();
    triggers[misfire] = trigger["id"].get<std::string>();
  }
  const std::string& fire_once = triggers["fire_once"];
  const std::string& skip = triggers["skip"];
  // Some occurrences of both are admitted before the backup.
  ASSERT_TRUE(WaitFor(
      [&] {
        return Count("qinglong",
                     "SELECT count(*) FROM ql3.runs WHERE trigger_id = '" + skip + "'") >= 2;
      },
      std::chrono::seconds(30)));

  // The backup, taken while the replica admits.
  const std::string dump = dir_.path() + "/qinglong.dump";
  CommandResult dumped = RunCommand({server_->bin_dir() + "/pg_dump", "-Fc", "-f", dump, "-d",
                                     server_->Url("ql3_migration", "qinglong")},
                                    {}, 120'000);
  ASSERT_EQ(dumped.exit_code, 0) << dumped.err;
  EXPECT_EQ(a.Stop(), 0);

  // Restored into a new database: created as roles.sql creates one (the roles are cluster-wide
  // and already there), then pg_restore as its owner.
  ASSERT_TRUE(server_
                  ->Psql("postgres", std::string("CREATE DATABASE ") + kRestored +
                                         " OWNER ql3_migration ENCODING 'UTF8' TEMPLATE "
                                         "template0;\nREVOKE ALL ON DATABASE " +
                                         kRestored + " FROM PUBLIC;\nGRANT CONNECT ON DATABASE " +
                                         kRestored +
                                         " TO ql3_runtime, ql3_admin, ql3_worker_ingress;\n")
                  .ok());
  CommandResult restored =
      RunCommand({server_->bin_dir() + "/pg_restore", "--exit-on-error", "--single-transaction",
                  "-d", server_->Url("ql3_migration", kRestored), dump},
                 {}, 120'000);
  ASSERT_EQ(restored.exit_code, 0) << restored.err;

  // What the dump holds: occurrences before each trigger's cursor, none at or after it.
  const int64_t fire_once_cursor =
      Count(kRestored, "SELECT next_fire_at_ms FROM ql3.trigger_schedules WHERE trigger_id = '" +
                           fire_once + "'");
  const int64_t skip_cursor =
      Count(kRestored,
            "SELECT next_fire_at_ms FROM ql3.trigger_schedules WHERE trigger_id = '" + skip + "'");
  const int64_t fire_once_before = Runs(fire_once, 0, fire_once_cursor - 1);
  const int64_t skip_before = Runs(skip, 0, skip_cursor - 1);
  EXPECT_GE(skip_before, 2);
  // A cursor and the run of the occurrence it passed commit together, so the dump holds every
  // run the old database has before the cursors.
  EXPECT_EQ(fire_once_before, Runs(fire_once, 0, fire_once_cursor - 1, "qinglong"));
  EXPECT_EQ(skip_before, Runs(skip, 0, skip_cursor - 1, "qinglong"));
  EXPECT_EQ(Runs(fire_once, fire_once_cursor, INT64_MAX), 0);
  EXPECT_EQ(Runs(skip, skip_cursor, INT64_MAX), 0);

  // The gap: longer than the grace, so the resumed replica finds both cursors late.
  std::this_thread::sleep_for(std::chrono::seconds(4));

  // As docs/operations.md says: migrate (the grants, and what a dump of an older version
  // lacks; nothing here), then audit.
  CommandResult migrated = RunCommand({BinDir() + "/ql-cluster", "migrate", "--database-url",
                                       server_->Url("ql3_migration", kRestored)},
                                      {"QL3_POSTGRES_ALLOW_INSECURE=true"}, 60'000);
  EXPECT_EQ(migrated.exit_code, 0) << migrated.out << migrated.err;
  EXPECT_NE(migrated.out.find("schema already current"), std::string::npos) << migrated.out;
  CommandResult audit = RunCommand(
      {BinDir() + "/ql-cluster", "audit", "--database-url", server_->Url("ql3_runtime", kRestored)},
      {"QL3_POSTGRES_ALLOW_INSECURE=true"}, 60'000);
  EXPECT_EQ(audit.exit_code, 0) << audit.out << audit.err;
  EXPECT_EQ(audit.out.rfind("ready", 0), 0u) << audit.out;

  const int64_t resumed_at = DbNowMs();
  ASSERT_GT(resumed_at - fire_once_cursor, std::stoll(kGraceMs));
  Replica b("replica-b", Log("b"));
  ASSERT_TRUE(b.Start(ReplicaArgs(kRestored)));
  // The scheduler resumes: a few occurrences after the gap are admitted.
  EXPECT_TRUE(
      WaitFor([&] { return Runs(skip, resumed_at, INT64_MAX) >= 3; }, std::chrono::seconds(30)));
  EXPECT_EQ(b.Stop(), 0);

  // No occurrence was admitted twice, and what the dump held is still there.
  EXPECT_EQ(Count(kRestored,
                  "SELECT count(*) FROM (SELECT 1 FROM ql3.runs WHERE trigger_type = 'cron' "
                  "GROUP BY trigger_id, trigger_revision, scheduled_for_ms HAVING count(*) > 1) d"),
            0);
  EXPECT_EQ(Runs(fire_once, 0, fire_once_cursor - 1), fire_once_before);
  EXPECT_EQ(Runs(skip, 0, skip_cursor - 1), skip_before);
  // The gap per misfire policy: fire_once admitted the oldest missed occurrence, once; skip
  // admitted none of the missed ones.
  EXPECT_EQ(Runs(fire_once, fire_once_cursor, resumed_at), 1);
  EXPECT_EQ(Runs(fire_once, fire_once_cursor, fire_once_cursor), 1);
  EXPECT_EQ(Runs(skip, skip_cursor, resumed_at), 0);
  // Then each trigger goes on admitting occurrences after the gap.
  EXPECT_GE(Runs(fire_once, resumed_at + 1, INT64_MAX), 2);
  EXPECT_GE(Runs(skip, resumed_at + 1, INT64_MAX), 3);
}

}  // namespace
}  // namespace ql::itest
