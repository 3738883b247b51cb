// Retention through a real ql-local (DESIGN §11): with a short retention, purged runs leave no
// row, log file or attempt directory behind, the newest run stays intact, and the purge is
// counted and audited.

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness.h"

namespace ql::itest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;

TEST(LocalRetentionTest, PurgedRunsTakeTheirRowsLogsAndAttemptDirectoriesWithThem) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  LocalDaemon daemon(data, "standalone");
  ASSERT_TRUE(daemon.Start({"--retention-interval", "1"})) << daemon.log();
  const std::string db = data + "/db/qinglong.db";

  CommandResult added = daemon.Ql({"task", "add", "chatty", "--shell", "echo out-$QL_RUN_ID"});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  const std::string task = Trim(added.out);
  std::vector<std::string> runs;
  for (int i = 0; i < 3; ++i) {
    CommandResult start = daemon.Ql({"run", "start", task});
    ASSERT_EQ(start.exit_code, 0) << start.err;
    runs.push_back(Trim(start.out));
    ASSERT_TRUE(WaitFor(
        [&] {
          return SqliteQuery(db, "SELECT status FROM runs WHERE id = '" + runs.back() + "'") ==
                 std::vector<std::string>{"succeeded"};
        },
        seconds(20)));
  }
  std::vector<std::string> attempts;
  for (const std::string& run : runs) {
    attempts.push_back(SqliteQuery(db, "SELECT id FROM run_attempts WHERE run_id = '" + run + "'")
                           .at(0));
    ASSERT_TRUE(fs::exists(data + "/run/" + attempts.back()));
    ASSERT_TRUE(fs::exists(data + "/log/" + task + "/" + run + "/1.log"));
  }

  CommandResult set = daemon.Ql({"task", "set", task, "--keep-runs", "1"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_NE(set.out.find("at most 1 runs per task (set here)"), std::string::npos) << set.out;
  ASSERT_TRUE(WaitFor(
      [&] { return SqliteQuery(db, "SELECT count(*) FROM runs") == std::vector<std::string>{"1"}; },
      seconds(20)))
      << daemon.log();
  // The files go right after the rows' transaction.
  ASSERT_TRUE(WaitFor([&] { return !fs::exists(data + "/run/" + attempts[1]); }, seconds(5)));

  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(SqliteQuery(db, "SELECT 1 FROM run_events WHERE run_id = '" + runs[i] + "'")
                    .empty());
    EXPECT_TRUE(SqliteQuery(db, "SELECT 1 FROM run_attempts WHERE run_id = '" + runs[i] + "'")
                    .empty());
    EXPECT_FALSE(fs::exists(data + "/run/" + attempts[i]));
    EXPECT_FALSE(fs::exists(data + "/log/" + task + "/" + runs[i]));  // the run's log directory
  }
  // The newest run is intact: row, events, log and attempt directory.
  EXPECT_EQ(SqliteQuery(db, "SELECT status FROM runs"), std::vector<std::string>{"succeeded"});
  EXPECT_FALSE(SqliteQuery(db, "SELECT 1 FROM run_events WHERE run_id = '" + runs[2] + "'")
                   .empty());
  EXPECT_TRUE(fs::exists(data + "/run/" + attempts[2]));
  CommandResult log = daemon.Ql({"run", "log", runs[2]});
  EXPECT_EQ(log.out, "out-" + runs[2] + "\n");

  CommandResult audit = daemon.Ql({"audit", "list", "--json"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  int purges = 0;
  const json facts = json::parse(audit.out);
  for (const json& fact : facts["items"]) {
    if (fact["action"] == "runs.purge" && fact["target_id"] == task) ++purges;
  }
  EXPECT_GE(purges, 1) << audit.out;
  CommandResult metrics = RunCommand({"/usr/bin/curl", "-s", daemon.server() + "/metrics"});
  EXPECT_NE(metrics.out.find("ql_retention_purged_runs_total 2"), std::string::npos)
      << metrics.out;
  daemon.Stop();
}

}  // namespace
}  // namespace ql::itest
