// Backup and restore of a real ql-local: a backup taken while the daemon runs, restored into a
// new directory somewhere else after the old one is gone, starts a daemon whose old logs read
// back byte for byte through the API, whose tasks and triggers are there and fire, and whose
// secrets open (with the key in the backup, or copied in by hand). A restore refuses a
// directory that is not empty, a name that could write outside it, a damaged chunk and a file
// that is no backup, and leaves nothing behind when it does.

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace ql::itest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::perms Mode(const fs::path& path) { return fs::status(path).permissions() & fs::perms::all; }

// Runs `sql` on the SQLite file at `path`; returns false on an error.
bool ExecSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  bool ok = sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
            sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_close(db);
  return ok;
}

CommandResult QlLocal(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinDir() + "/ql-local"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, {}, 60'000);
}

// Every entry of `dir`, recursively, relative to it.
std::vector<std::string> Entries(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(it->path().lexically_relative(dir).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class LocalBackupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_.path() + "/old/data";
    fs::create_directories(tmp_.path() + "/old");
    daemon_ = std::make_unique<LocalDaemon>(data_, "standalone");
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  }
  void TearDown() override {
    for (auto* d : {daemon_.get(), restored_.get()}) {
      if (d != nullptr && d->running()) d->Stop();
    }
  }

  // Sets secret `name` by piping `value` into `ql secret set`.
  void SetSecret(const std::string& name, const std::string& value) {
    CommandResult set = RunCommand(
        {"/bin/sh", "-c", "printf %s \"$QL_TEST_VALUE\" | \"$0\" --data \"$1\" secret set \"$2\"",
         BinDir() + "/ql", data_, name},
        {"QL_TEST_VALUE=" + value});
    ASSERT_EQ(set.exit_code, 0) << set.err;
  }

  std::string AddTask(const LocalDaemon& d, const std::vector<std::string>& args) {
    std::vector<std::string> all = {"task", "add"};
    all.insert(all.end(), args.begin(), args.end());
    CommandResult r = d.Ql(all);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Trim(r.out);
  }

  // Starts a run of `task` on `d` and returns it once it has ended.
  json RunToEnd(const LocalDaemon& d, const std::string& task) {
    CommandResult started = d.Ql({"run", "start", task, "--json"});
    EXPECT_EQ(started.exit_code, 0) << started.err;
    const std::string run_id = json::parse(started.out, nullptr, false).value("id", "");
    json run;
    EXPECT_TRUE(WaitFor(
        [&] {
          CommandResult shown = d.Ql({"run", "show", run_id, "--json"});
          if (shown.exit_code != 0) return false;
          run = json::parse(shown.out, nullptr, false);
          if (run.contains("run")) run = run["run"];
          const std::string status = run.value("status", "");
          return status == "succeeded" || status == "failed" || status == "timed_out";
        },
        std::chrono::seconds(30)));
    return run;
  }

  // A daemon with a task that has run and written a log, a secret, and a backup of it in
  // `backup` (taken while the daemon runs).
  std::string MakeBackup(const std::vector<std::string>& extra) {
    CommandResult r = QlLocal([&] {
      std::vector<std::string> args = {"backup", "--data", data_, "--to", backup_};
      args.insert(args.end(), extra.begin(), extra.end());
      return args;
    }());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return r.out + r.err;
  }

  TempDir tmp_;
  std::string data_;
  std::string backup_ = "";
  std::unique_ptr<LocalDaemon> daemon_;
  std::unique_ptr<LocalDaemon> restored_;
};

TEST_F(LocalBackupTest, ARestoredCopyElsewhereReadsOldLogsFiresTriggersAndOpensSecrets) {
  SetSecret("API_KEY", "opens-only-with-the-old-key");
  AddTask(*daemon_, {"hello", "--shell", "printf 'first line\\n\\tsecond\\n'; seq 1 3000"});
  AddTask(*daemon_, {"sealed", "--secret-env", "TOKEN=API_KEY", "--shell",
                     "test \"$TOKEN\" = opens-only-with-the-old-key && echo opened"});
  const std::string tick = AddTask(*daemon_, {"tick", "--shell", "echo tick"});
  CommandResult trigger =
      daemon_->Ql({"trigger", "add", "tick", "--cron", "* * * * * *", "--tz", "UTC"});
  ASSERT_EQ(trigger.exit_code, 0) << trigger.err;
  const json run = RunToEnd(*daemon_, "hello");
  ASSERT_EQ(run.value("status", ""), "succeeded") << run.dump();
  const std::string run_id = run.value("id", "");
  CommandResult old_log = daemon_->Ql({"run", "log", run_id});
  ASSERT_EQ(old_log.exit_code, 0) << old_log.err;
  ASSERT_NE(old_log.out.find("first line\n\tsecond\n1\n2\n"), std::string::npos) << old_log.out;
  ASSERT_NE(old_log.out.find("\n3000\n"), std::string::npos);
  // Stored relative to the log root.
  const std::vector<std::string> paths =
      SqliteQuery(data_ + "/db/qinglong.db",
                  "SELECT log_path FROM run_attempts WHERE run_id = '" + run_id + "'");
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_EQ(paths[0].rfind("/", 0), std::string::npos) << paths[0];

  // Taken while the daemon runs (and its trigger fires every second).
  backup_ = tmp_.path() + "/with-key.qlbackup";
  const std::string said = MakeBackup({"--include-key"});
  EXPECT_NE(said.find("warning:"), std::string::npos) << said;
  EXPECT_NE(said.find("opens every secret"), std::string::npos) << said;
  EXPECT_EQ(Mode(backup_), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_FALSE(fs::exists(backup_ + ".tmp"));
  const std::string without_key = tmp_.path() + "/without-key.qlbackup";
  CommandResult no_key = QlLocal({"backup", "--data", data_, "--to", without_key});
  ASSERT_EQ(no_key.exit_code, 0) << no_key.err;
  EXPECT_NE(no_key.err.find("does not hold secret.key"), std::string::npos) << no_key.err;
  ASSERT_EQ(daemon_->Stop(), 0);

  // The old directory is gone: nothing of the restored one may still point there.
  const std::string old_key = tmp_.path() + "/secret.key.copy";
  fs::copy_file(data_ + "/secret.key", old_key);
  fs::remove_all(tmp_.path() + "/old");
  const std::string restored = tmp_.path() + "/elsewhere/deeper/data";
  fs::create_directories(tmp_.path() + "/elsewhere/deeper");
  CommandResult restore = QlLocal({"restore", "--from", backup_, "--data", restored});
  ASSERT_EQ(restore.exit_code, 0) << restore.out << restore.err;
  EXPECT_NE(restore.out.find("restored"), std::string::npos) << restore.out;
  EXPECT_NE(restore.out.find("secret.key restored"), std::string::npos) << restore.out;
  // The layout and modes of a first start; nothing of the old daemon's runtime files.
  EXPECT_EQ(Mode(restored), fs::perms::owner_all);
  EXPECT_EQ(Mode(restored + "/secret.key"), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_TRUE(fs::is_directory(restored + "/run"));
  EXPECT_TRUE(fs::is_regular_file(restored + "/db/qinglong.db"));
  EXPECT_FALSE(fs::exists(restored + "/owner.token"));
  EXPECT_FALSE(fs::exists(restored + "/server.json"));
  std::vector<std::string> beside;
  for (const auto& entry : fs::directory_iterator(tmp_.path() + "/elsewhere/deeper")) {
    beside.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(beside, std::vector<std::string>{"data"}) << "nothing beside the restored directory";

  restored_ = std::make_unique<LocalDaemon>(restored, "standalone");
  ASSERT_TRUE(restored_->Start()) << restored_->log();
  // The old log, byte for byte, through GET /api/v1/runs/{id}/log.
  CommandResult new_log = restored_->Ql({"run", "log", run_id});
  ASSERT_EQ(new_log.exit_code, 0) << new_log.err;
  EXPECT_EQ(new_log.out, old_log.out);
  CommandResult task = restored_->Ql({"task", "show", "hello", "--json"});
  EXPECT_EQ(task.exit_code, 0) << task.err;
  // The secret opens with the restored key.
  const json sealed = RunToEnd(*restored_, "sealed");
  EXPECT_EQ(sealed.value("status", ""), "succeeded") << sealed.dump();
  // The trigger fires on the restored daemon.
  auto cron_runs = [&] {
    CommandResult runs =
        restored_->Ql({"run", "list", "--task", tick, "--status", "succeeded", "--json"});
    json j = json::parse(runs.out, nullptr, false);
    size_t n = 0;
    if (j.is_object() && j["items"].is_array()) {
      for (const json& r : j["items"]) n += r.value("trigger_type", "") == "cron";
    }
    return n;
  };
  const size_t cron_before = cron_runs();
  EXPECT_TRUE(WaitFor([&] { return cron_runs() > cron_before; }, std::chrono::seconds(15)));
  ASSERT_EQ(restored_->Stop(), 0);

  // Without the key in the backup, the key copied in by hand opens the secrets.
  const std::string second = tmp_.path() + "/second/data";
  fs::create_directories(tmp_.path() + "/second");
  CommandResult restore2 = QlLocal({"restore", "--from", without_key, "--data", second});
  ASSERT_EQ(restore2.exit_code, 0) << restore2.err;
  EXPECT_NE(restore2.out.find("not in the backup"), std::string::npos) << restore2.out;
  EXPECT_FALSE(fs::exists(second + "/secret.key"));
  fs::copy_file(old_key, second + "/secret.key");
  fs::permissions(second + "/secret.key", fs::perms::owner_read | fs::perms::owner_write);
  restored_ = std::make_unique<LocalDaemon>(second, "standalone");
  ASSERT_TRUE(restored_->Start()) << restored_->log();
  EXPECT_EQ(restored_->Ql({"run", "log", run_id}).out, old_log.out);
  const json sealed2 = RunToEnd(*restored_, "sealed");
  EXPECT_EQ(sealed2.value("status", ""), "succeeded") << sealed2.dump();
}

TEST_F(LocalBackupTest, RestoreRefusesBadInputAndLeavesNothingBehind) {
  AddTask(*daemon_, {"hello", "--shell", "echo hello"});
  ASSERT_EQ(RunToEnd(*daemon_, "hello").value("status", ""), "succeeded");
  backup_ = tmp_.path() + "/good.qlbackup";
  MakeBackup({});
  const fs::path place = tmp_.path() + "/place";
  fs::create_directories(place);

  auto expect_refused = [&](const std::string& from, const std::string& target,
                            const std::string& code) {
    SCOPED_TRACE(code + " " + from);
    const std::vector<std::string> before = Entries(place);
    CommandResult r = QlLocal({"restore", "--from", from, "--data", target});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("error: " + code + ": "), std::string::npos) << r.err;
    EXPECT_EQ(Entries(place), before) << "a refused restore changes nothing";
  };
  auto variant = [&](const std::string& name, const std::string& sql) {
    const std::string path = tmp_.path() + "/" + name + ".qlbackup";
    fs::copy_file(backup_, path);
    EXPECT_TRUE(ExecSql(path, sql)) << sql;
    return path;
  };

  // A directory that holds something.
  fs::create_directories(place / "busy");
  std::ofstream(place / "busy" / "keep") << "mine";
  expect_refused(backup_, (place / "busy").string(), "restore_target_not_empty");
  EXPECT_EQ(ReadFile(place / "busy" / "keep"), "mine");
  // A symbolic link in place of the directory.
  fs::create_directories(place / "real");
  fs::create_directory_symlink(place / "real", place / "link");
  expect_refused(backup_, (place / "link").string(), "restore_target_not_empty");
  // Names that lead out of the directory, however they are spelled.
  const std::string one_log = "(SELECT min(id) FROM files WHERE path LIKE 'log/%')";
  for (const std::string& name : {std::string("../escaped"), std::string("log/../../escaped"),
                                  tmp_.path() + "/escaped", std::string("owner.token")}) {
    const std::string hostile =
        variant("hostile", "UPDATE files SET path = '" + name + "' WHERE id = " + one_log);
    expect_refused(hostile, (place / "new").string(), "backup_path_invalid");
    EXPECT_FALSE(fs::exists(tmp_.path() + "/escaped"));
    fs::remove(hostile);
  }
  // A symbolic link's mode.
  const std::string link = variant("link", "UPDATE files SET mode = 41471 WHERE id = " + one_log);
  expect_refused(link, (place / "new").string(), "backup_path_invalid");
  fs::remove(link);
  // A damaged chunk of the database, found before anything is final.
  const std::string damaged = variant(
      "damaged",
      "UPDATE chunks SET data = zeroblob(length(data)) WHERE seq = 0 AND file_id = (SELECT id "
      "FROM files WHERE path = 'db/qinglong.db')");
  expect_refused(damaged, (place / "new").string(), "backup_corrupt");
  fs::remove(damaged);
  // No backup at all, or not one.
  expect_refused(tmp_.path() + "/none.qlbackup", (place / "new").string(), "backup_file_missing");
  std::ofstream(tmp_.path() + "/text.qlbackup") << "hello\n";
  expect_refused(tmp_.path() + "/text.qlbackup", (place / "new").string(), "backup_invalid");
  expect_refused(data_ + "/db/qinglong.db", (place / "new").string(), "backup_invalid");
  // A destination whose parent is missing.
  expect_refused(backup_, (place / "missing" / "data").string(), "restore_target_unwritable");

  // A backup to where nothing can be written, or of what is no data directory, changes nothing.
  CommandResult unwritable =
      QlLocal({"backup", "--data", data_, "--to", tmp_.path() + "/missing/b.qlbackup"});
  EXPECT_EQ(unwritable.exit_code, 1);
  EXPECT_NE(unwritable.err.find("error: backup_file_unwritable: "), std::string::npos)
      << unwritable.err;
  CommandResult not_data =
      QlLocal({"backup", "--data", place.string(), "--to", tmp_.path() + "/b.qlbackup"});
  EXPECT_EQ(not_data.exit_code, 1);
  EXPECT_NE(not_data.err.find("error: data_dir_invalid: "), std::string::npos) << not_data.err;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/b.qlbackup"));

  // The good backup still restores into an empty directory.
  fs::create_directories(place / "empty");
  CommandResult ok = QlLocal({"restore", "--from", backup_, "--data", (place / "empty").string()});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(fs::is_regular_file(place / "empty" / "db" / "qinglong.db"));
}

}  // namespace
}  // namespace ql::itest
