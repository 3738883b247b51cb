// Secrets through a real ql-local and the real ql (DESIGN §10): a value set with `ql secret set`
// reaches the command that names it (proved by a digest the command writes), while no byte of
// the database file, no file of the data directory, no API answer, no event and no log holds
// it; the log shows it masked. A missing or deleted secret fails the run with
// secret_not_found, and a key rotation keeps every secret readable.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace ql::itest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A value nobody else writes: any place it turns up, it leaked from this test.
std::string UniqueValue(const std::string& tag) {
  std::random_device device;
  std::ostringstream out;
  out << "qlproof-" << tag << "-" << std::hex << device() << device() << "-" << ::getpid();
  return out.str();
}

std::string Sha256Of(const std::string& value) {
  TempDir tmp;
  const std::string path = tmp.path() + "/v";
  std::ofstream(path, std::ios::binary) << value;
  CommandResult sum = RunCommand({"/bin/sh", "-c", "sha256sum < '" + path + "'"});
  return sum.out.substr(0, 64);
}

class LocalSecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_.path() + "/data";
    out_ = tmp_.path() + "/out";
    MakeExchangeDirectory(out_);
    daemon_ = std::make_unique<LocalDaemon>(data_, "standalone");
    ASSERT_TRUE(daemon_->Start({"--command-writable", out_})) << daemon_->log();
  }
  void TearDown() override {
    if (daemon_ && daemon_->running()) daemon_->Stop();
  }

  // Runs `ql` and keeps its answer: every answer is searched for the value at the end.
  CommandResult Ql(const std::vector<std::string>& args) {
    CommandResult r = daemon_->Ql(args);
    answers_.push_back(r.out + r.err);
    return r;
  }

  // Sets secret `name` by piping `value` into `ql secret set` (the value is in no argv).
  void SetSecret(const std::string& name, const std::string& value) {
    CommandResult set =
        RunCommand({"/bin/sh", "-c",
                    "printf %s \"$QL_TEST_VALUE\" | \"$0\" --data \"$1\" secret set \"$2\"",
                    BinDir() + "/ql", data_, name},
                   {"QL_TEST_VALUE=" + value});
    answers_.push_back(set.out + set.err);
    ASSERT_EQ(set.exit_code, 0) << set.err;
  }

  // Adds a task whose command writes the digest of $TOKEN to out/<name> and prints the value.
  std::string AddTask(const std::string& name, const std::string& secret_env) {
    CommandResult task =
        Ql({"task", "add", name, "--secret-env", secret_env, "--shell",
            "echo \"token=$TOKEN\"; printf %s \"$TOKEN\" | sha256sum | cut -c1-64 > '" + out_ +
                "/" + name + "'"});
    EXPECT_EQ(task.exit_code, 0) << task.err;
    return task.out.substr(0, task.out.find('\n'));
  }

  // Starts a run of `task` and returns it once it is terminal.
  json RunToEnd(const std::string& task) {
    CommandResult started = Ql({"run", "start", task, "--json"});
    EXPECT_EQ(started.exit_code, 0) << started.err;
    const std::string run_id = json::parse(started.out).value("id", "");
    json run;
    EXPECT_TRUE(WaitFor(
        [&] {
          CommandResult shown = Ql({"run", "show", run_id, "--json"});
          if (shown.exit_code != 0) return false;
          run = json::parse(shown.out);
          const std::string status = run.contains("run") ? run["run"].value("status", "")
                                                         : run.value("status", "");
          return status == "succeeded" || status == "failed";
        },
        std::chrono::seconds(20)));
    return run.contains("run") ? run["run"] : run;
  }

  TempDir tmp_;
  std::string data_;
  std::string out_;
  std::unique_ptr<LocalDaemon> daemon_;
  std::vector<std::string> answers_;
};

TEST_F(LocalSecretsTest, TheCommandGetsTheValueAndNoRowAnswerEventOrLogHoldsIt) {
  const std::string value = UniqueValue("api");
  SetSecret("API_KEY", value);
  const std::string task = AddTask("leaky", "TOKEN=API_KEY");
  const json run = RunToEnd(task);
  ASSERT_EQ(run.value("status", ""), "succeeded") << run.dump();
  const std::string run_id = run.value("id", "");

  // The command really received the value.
  EXPECT_EQ(ReadFile(out_ + "/leaky").substr(0, 64), Sha256Of(value));
  // Its log shows the line, masked.
  CommandResult log = Ql({"run", "log", run_id});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  EXPECT_NE(log.out.find("token=***"), std::string::npos) << log.out;

  // Every API answer about it.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"task", "show", task, "--json"},
           {"task", "list", "--json"},
           {"run", "show", run_id, "--json"},
           {"run", "list", "--json"},
           {"secret", "list", "--json"},
           {"audit", "list", "--limit", "100", "--json"},
           {"status", "--json"}}) {
    CommandResult r = Ql(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << " " << args[1] << ": " << r.err;
  }
  ASSERT_EQ(daemon_->Stop(), 0);

  // Every file of the data directory: the database (and any journal), logs, attempt records.
  int files = 0;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(data_)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    EXPECT_EQ(FindLeak(ReadFile(entry.path()), value), "") << entry.path();
  }
  EXPECT_GE(files, 3);
  // Every row of every table, decoded by SQLite (not only the file's bytes).
  const std::string db = data_ + "/db/qinglong.db";
  int rows = 0;
  for (const std::string& table :
       SqliteQuery(db, "SELECT name FROM sqlite_master WHERE type = 'table'")) {
    for (const std::string& row : SqliteQuery(db, "SELECT * FROM \"" + table + "\"")) {
      ++rows;
      EXPECT_EQ(FindLeak(row, value), "") << table << ": " << row;
    }
  }
  EXPECT_GT(rows, 10);
  EXPECT_EQ(SqliteQuery(db, "SELECT count(*) FROM secret_versions WHERE key_id IS NOT NULL"),
            std::vector<std::string>{"1"});
  for (const std::string& answer : answers_) {
    EXPECT_EQ(FindLeak(answer, value), "") << answer;
  }
  EXPECT_EQ(FindLeak(daemon_->log(), value), "");
}

// `--from-file` takes the file's bytes as they are (a trailing newline included), `--secret-env`
// refuses a malformed entry with a usage error, and a file that cannot be read changes nothing.
TEST_F(LocalSecretsTest, AValueFromAFileIsUsedByteForByteAndBadFlagsChangeNothing) {
  const std::string value = UniqueValue("file") + "\n";
  const std::string file = tmp_.path() + "/value.txt";
  {
    std::ofstream f(file, std::ios::binary);
    f << value;
  }
  CommandResult set = Ql({"secret", "set", "FROM_FILE", "--from-file", file});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(FindLeak(set.out + set.err, value.substr(0, value.size() - 1)), "");
  const std::string task = AddTask("from-file", "TOKEN=FROM_FILE");
  const json run = RunToEnd(task);
  ASSERT_EQ(run.value("status", ""), "succeeded") << run.dump();
  EXPECT_EQ(ReadFile(out_ + "/from-file").substr(0, 64), Sha256Of(value));

  CommandResult unreadable = Ql({"secret", "set", "OTHER", "--from-file", tmp_.path() + "/none"});
  EXPECT_EQ(unreadable.exit_code, 2) << unreadable.err;
  EXPECT_NE(unreadable.err.find("secret_file_unreadable"), std::string::npos) << unreadable.err;
  for (const std::string& bad : {"NOEQUALS", "=NAME", "VAR=", "VAR=bad name", "VAR=NAME@0"}) {
    CommandResult r = Ql({"task", "add", "bad", "--secret-env", bad, "--shell", "true"});
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_FALSE(r.err.empty()) << bad;
  }
  CommandResult list = Ql({"secret", "list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out.find("OTHER"), std::string::npos) << list.out;
  CommandResult tasks = Ql({"task", "list", "--json"});
  EXPECT_EQ(tasks.out.find("\"bad\""), std::string::npos) << tasks.out;
}

TEST_F(LocalSecretsTest, AMissingOrDeletedSecretFailsTheRunAndRotationKeepsSecretsReadable) {
  const std::string missing_task = AddTask("missing", "TOKEN=NEVER_SET");
  json failed = RunToEnd(missing_task);
  EXPECT_EQ(failed.value("status", ""), "failed");
  EXPECT_EQ(failed.value("error_code", ""), "secret_not_found") << failed.dump();
  EXPECT_FALSE(fs::exists(out_ + "/missing"));

  const std::string doomed = UniqueValue("doomed");
  SetSecret("DOOMED", doomed);
  const std::string kept = UniqueValue("kept");
  SetSecret("KEPT", kept);
  const std::string doomed_task = AddTask("doomed", "TOKEN=DOOMED");
  const std::string kept_task = AddTask("kept", "TOKEN=KEPT@1");
  ASSERT_EQ(Ql({"secret", "rm", "DOOMED"}).exit_code, 0);
  failed = RunToEnd(doomed_task);
  EXPECT_EQ(failed.value("error_code", ""), "secret_not_found") << failed.dump();
  CommandResult listed = Ql({"secret", "list", "--json"});
  ASSERT_EQ(listed.exit_code, 0);
  const json items = json::parse(listed.out)["items"];
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0]["name"], "DOOMED");
  EXPECT_EQ(items[0]["status"], "deleted");

  // Rotation: the daemon is stopped, every data key re-wrapped, the key files swapped.
  ASSERT_EQ(daemon_->Stop(), 0);
  const std::string db = data_ + "/db/qinglong.db";
  const std::vector<std::string> before =
      SqliteQuery(db, "SELECT key_id, sealed_value FROM secret_versions WHERE name = 'KEPT'");
  CommandResult rotated =
      RunCommand({BinDir() + "/ql-local", "rotate-secret-key", "--data", data_});
  ASSERT_EQ(rotated.exit_code, 0) << rotated.err;
  EXPECT_NE(rotated.out.find("1 data keys re-wrapped"), std::string::npos) << rotated.out;
  const std::vector<std::string> after =
      SqliteQuery(db, "SELECT key_id, sealed_value FROM secret_versions WHERE name = 'KEPT'");
  ASSERT_EQ(before.size(), 1u);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(before[0].substr(0, before[0].find('|')), after[0].substr(0, after[0].find('|')));
  EXPECT_EQ(before[0].substr(before[0].find('|')), after[0].substr(after[0].find('|')));
  EXPECT_TRUE(fs::exists(data_ + "/secret.key.old"));
  // The deleted secret's version has no key to re-wrap: it stays unreadable.
  EXPECT_EQ(SqliteQuery(db, "SELECT count(*) FROM secret_versions WHERE name = 'DOOMED' AND "
                            "key_id IS NULL AND wrapped_key IS NULL"),
            std::vector<std::string>{"1"});

  ASSERT_TRUE(daemon_->Start({"--command-writable", out_})) << daemon_->log();
  const json ok = RunToEnd(kept_task);
  EXPECT_EQ(ok.value("status", ""), "succeeded") << ok.dump();
  EXPECT_EQ(ReadFile(out_ + "/kept").substr(0, 64), Sha256Of(kept));
}

}  // namespace
}  // namespace ql::itest
