// Daily use of ql-local through the real ql, as a person or a script uses it: the cron list,
// names instead of ids, edits that change one variable, run ids by prefix, commands that wait
// and exit with their run's outcome, and what a command is told about its run.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace ql::itest {
namespace {

using nlohmann::json;
using std::chrono::seconds;

const std::regex kUuid("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");

class DailyUseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_.path() + "/data";
    daemon_ = std::make_unique<LocalDaemon>(data_);
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  }
  void TearDown() override {
    if (daemon_ && daemon_->running()) daemon_->Stop();
    RunCommand({"/usr/bin/pkill", "-KILL", "-f", tmp_.path()});
  }

  CommandResult Ql(const std::vector<std::string>& args) { return daemon_->Ql(args); }

  std::string AddTask(const std::string& name, const std::string& shell,
                      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"task", "add", name, "--shell", shell};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult r = Ql(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Trim(r.out);
  }

  json Task(const std::string& name) {
    CommandResult r = Ql({"task", "show", name, "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }

  json Runs(const std::vector<std::string>& filter = {}) {
    std::vector<std::string> args = {"run", "list", "--json"};
    args.insert(args.end(), filter.begin(), filter.end());
    CommandResult r = Ql(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    return j.is_object() ? j["items"] : json::array();
  }

  std::string Log(const std::string& run) {
    CommandResult r = Ql({"run", "log", run});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  TempDir tmp_;
  std::string data_;
  std::unique_ptr<LocalDaemon> daemon_;
};

// The exit status of `ql run start --wait` and `ql run log -f` follows the run's outcome; a
// task that needs approval exits 13 with nothing on stdout.
TEST_F(DailyUseTest, WaitingCommandsExitWithTheRunsOutcome) {
  AddTask("ok", "echo fine");
  AddTask("broken", "echo broken >&2; exit 7");
  AddTask("slow", "sleep 30", {"--timeout", "1s"});
  AddTask("long", "sleep 60");
  AddTask("guarded", "true", {"--require-approval"});

  CommandResult ok = Ql({"run", "start", "ok", "--wait"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(std::regex_match(Trim(ok.out), kUuid)) << "stdout is the run id: " << ok.out;
  EXPECT_NE(ok.err.find("succeeded"), std::string::npos) << ok.err;

  CommandResult broken = Ql({"run", "start", "broken", "--wait"});
  EXPECT_EQ(broken.exit_code, 10) << broken.err;
  EXPECT_NE(broken.err.find("command exit code 7"), std::string::npos) << broken.err;
  // The same outcome from following its log.
  CommandResult followed = Ql({"run", "log", "-f", Trim(broken.out)});
  EXPECT_EQ(followed.exit_code, 10) << followed.err;
  EXPECT_EQ(followed.out, "broken\n");
  // A plain read of the log is not a verdict on the run.
  EXPECT_EQ(Ql({"run", "log", Trim(broken.out)}).exit_code, 0);

  CommandResult follow = Ql({"run", "start", "broken", "--follow"});
  EXPECT_EQ(follow.exit_code, 10) << follow.err;
  EXPECT_EQ(follow.out, "broken\n") << "stdout is the log alone";

  CommandResult slow = Ql({"run", "start", "slow", "--wait"});
  EXPECT_EQ(slow.exit_code, 11) << slow.err;

  CommandResult started = Ql({"run", "start", "long"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const std::string long_run = Trim(started.out);
  std::thread cancel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    Ql({"run", "cancel", long_run});
  });
  CommandResult cancelled = Ql({"run", "log", "-f", long_run});
  cancel.join();
  EXPECT_EQ(cancelled.exit_code, 12) << cancelled.err;

  CommandResult guarded = Ql({"run", "start", "guarded", "--wait"});
  EXPECT_EQ(guarded.exit_code, 13) << guarded.err;
  EXPECT_EQ(guarded.out, "") << "no run id where there is no run";
  EXPECT_NE(guarded.err.find("approval required"), std::string::npos) << guarded.err;
}

// `ql task list` is the cron list: names, schedules in words and as expressions, the last run
// and the next fire, and no UUID anywhere; nor do the other tables print one where a name
// exists (a run has no name: its table shows the shortest prefix that tells runs apart).
TEST_F(DailyUseTest, TablesNameThingsAndTheCronListShowsLastAndNextRuns) {
  AddTask("backup", "echo saved");
  AddTask("report", "exit 3", {"--label", "team=ops"});
  AddTask("manual-only", "true");
  ASSERT_EQ(
      Ql({"trigger", "add", "backup", "--cron", "*/5 * * * *", "--tz", "Asia/Shanghai"}).exit_code,
      0);
  ASSERT_EQ(Ql({"trigger", "add", "report", "--cron", "30 8 * * 1-5", "--tz", "UTC"}).exit_code, 0);
  ASSERT_EQ(Ql({"run", "start", "backup", "--wait"}).exit_code, 0);
  ASSERT_EQ(Ql({"run", "start", "report", "--wait"}).exit_code, 10);

  CommandResult list = Ql({"task", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_FALSE(std::regex_search(list.out, kUuid)) << list.out;
  const std::string header = list.out.substr(0, list.out.find('\n'));
  for (const char* column : {"NAME", "SCHEDULE", "LAST RUN", "NEXT FIRE"}) {
    EXPECT_NE(header.find(column), std::string::npos) << header;
  }
  auto line_of = [&](const std::string& name) {
    const size_t at = list.out.find("\n" + name + " ");
    return at == std::string::npos ? std::string()
                                   : list.out.substr(at + 1, list.out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(line_of("backup").find("every 5 minutes (*/5 * * * *) Asia/Shanghai"),
            std::string::npos)
      << list.out;
  EXPECT_NE(line_of("backup").find("succeeded"), std::string::npos) << list.out;
  EXPECT_NE(line_of("backup").find(" in "), std::string::npos) << "next fire: " << list.out;
  EXPECT_NE(line_of("report").find("at 08:30 on Mon-Fri"), std::string::npos) << list.out;
  EXPECT_NE(line_of("report").find("failed"), std::string::npos) << list.out;
  EXPECT_NE(line_of("manual-only").find("manual"), std::string::npos) << list.out;
  EXPECT_NE(line_of("manual-only").find("never"), std::string::npos) << list.out;

  // Filters: last run status, label, text.
  CommandResult failed = Ql({"task", "list", "--last-status", "failed"});
  EXPECT_NE(failed.out.find("report"), std::string::npos);
  EXPECT_EQ(failed.out.find("backup"), std::string::npos) << failed.out;
  CommandResult never = Ql({"task", "list", "--last-status", "none"});
  EXPECT_NE(never.out.find("manual-only"), std::string::npos);
  EXPECT_EQ(never.out.find("report"), std::string::npos) << never.out;
  CommandResult labelled = Ql({"task", "list", "--label", "team=ops"});
  EXPECT_NE(labelled.out.find("report"), std::string::npos);
  EXPECT_EQ(labelled.out.find("backup"), std::string::npos) << labelled.out;
  CommandResult text = Ql({"task", "list", "--search", "BACK"});
  EXPECT_NE(text.out.find("backup"), std::string::npos);
  EXPECT_EQ(text.out.find("report"), std::string::npos) << text.out;
  CommandResult bad = Ql({"task", "list", "--last-status", "exploded"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("invalid_status"), std::string::npos) << bad.err;

  // The other tables: names where names exist.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"run", "list"}, {"trigger", "list"}, {"task", "show", "backup"}}) {
    CommandResult r = Ql(args);
    ASSERT_EQ(r.exit_code, 0) << args.front() << ": " << r.err;
    EXPECT_FALSE(std::regex_search(r.out, kUuid)) << args.front() << ":\n" << r.out;
  }
  // The audit names its actors and the tasks, triggers and principals it is about (approval
  // requests and tokens have ids only).
  CommandResult audit = Ql({"audit", "list"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  EXPECT_NE(audit.out.find("task backup"), std::string::npos) << audit.out;
  EXPECT_FALSE(std::regex_search(
      audit.out, std::regex("(task|trigger|principal) [0-9a-f]{8}-[0-9a-f]{4}-|Z  [0-9a-f]{8}-")))
      << audit.out;
  CommandResult runs = Ql({"run", "list"});
  EXPECT_NE(runs.out.find("backup"), std::string::npos) << runs.out;
  // --wide puts the ids back.
  EXPECT_TRUE(std::regex_search(Ql({"task", "list", "--wide"}).out, kUuid));

  // enable / disable: a disabled task has no next fire and refuses manual runs.
  CommandResult off = Ql({"task", "disable", "backup"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(Task("backup")["next_fire_at"], nullptr);
  EXPECT_EQ(Task("backup")["enabled"], false);
  EXPECT_NE(Ql({"run", "start", "backup"}).exit_code, 0);
  ASSERT_EQ(Ql({"task", "enable", "backup"}).exit_code, 0);
  const json back = Task("backup");
  EXPECT_EQ(back["enabled"], true);
  EXPECT_TRUE(back["next_fire_at"].is_string()) << back.dump();
  EXPECT_EQ(back["schedules"][0]["state"], "active") << "enabling repins the trigger";
}

// `--env K=V` sets one variable and keeps the others; `--unset-env` removes one; replacing the
// whole environment is `--clear-env`; the edit says what changed. The same for labels.
TEST_F(DailyUseTest, EditsChangeOnlyWhatTheyName) {
  AddTask("greet", "echo $GREETING", {"--env", "GREETING=hi", "--label", "team=ops"});
  CommandResult edit = Ql({"task", "edit", "greet", "--env", "EXTRA=1"});
  ASSERT_EQ(edit.exit_code, 0) << edit.err;
  EXPECT_NE(edit.err.find("+env EXTRA=1"), std::string::npos) << edit.err;
  EXPECT_EQ(Task("greet")["spec"]["environment"], json::parse(R"({"GREETING":"hi","EXTRA":"1"})"));

  edit = Ql({"task", "edit", "greet", "--env", "GREETING=hello", "--unset-env", "EXTRA", "--label",
             "tier=1", "--unset-label", "team"});
  ASSERT_EQ(edit.exit_code, 0) << edit.err;
  EXPECT_NE(edit.err.find("env GREETING=hi -> GREETING=hello"), std::string::npos) << edit.err;
  EXPECT_NE(edit.err.find("-env EXTRA"), std::string::npos) << edit.err;
  EXPECT_NE(edit.err.find("-label team"), std::string::npos) << edit.err;
  json task = Task("greet");
  EXPECT_EQ(task["spec"]["environment"], json::parse(R"({"GREETING":"hello"})"));
  EXPECT_EQ(task["labels"], json::parse(R"({"tier":"1"})"));

  edit = Ql({"task", "edit", "greet", "--clear-env", "--env", "ONLY=1"});
  ASSERT_EQ(edit.exit_code, 0) << edit.err;
  EXPECT_EQ(Task("greet")["spec"]["environment"], json::parse(R"({"ONLY":"1"})"));

  const int64_t revision = Task("greet")["revision"];
  CommandResult unknown = Ql({"task", "edit", "greet", "--unset-env", "NOPE"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("unknown_env"), std::string::npos) << unknown.err;
  EXPECT_EQ(Task("greet")["revision"], revision) << "a refused edit publishes nothing";

  // A secret variable reads as the secret's name.
  CommandResult set =
      RunCommand({"/bin/sh", "-c", "printf s3cr3t | \"$0\" --data \"$1\" secret set API_KEY",
                  BinDir() + "/ql", data_});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  ASSERT_EQ(Ql({"task", "edit", "greet", "--secret-env", "TOKEN=API_KEY"}).exit_code, 0);
  CommandResult show = Ql({"task", "show", "greet"});
  EXPECT_NE(show.out.find("TOKEN \u2190 secret API_KEY (latest)"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("ONLY=1"), std::string::npos) << "the plain variable stays: " << show.out;
  EXPECT_EQ(show.out.find("qlsecret:"), std::string::npos) << show.out;
}

// A run is addressed by any unique prefix of its id of 8 characters or more; a prefix several
// runs share is refused naming them; runs are listed by creation time.
TEST_F(DailyUseTest, RunsByIdPrefixAndByTime) {
  AddTask("one", "echo one");
  CommandResult first = Ql({"run", "start", "one", "--wait"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string id = Trim(first.out);

  CommandResult shown = Ql({"run", "show", id.substr(0, 8), "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(json::parse(shown.out)["id"], id);
  EXPECT_EQ(json::parse(shown.out)["task_name"], "one");
  EXPECT_EQ(Ql({"run", "log", id.substr(0, 13)}).out, "one\n");

  CommandResult short_prefix = Ql({"run", "show", id.substr(0, 7)});
  EXPECT_EQ(short_prefix.exit_code, 1);
  EXPECT_NE(short_prefix.err.find("invalid_id"), std::string::npos) << short_prefix.err;
  CommandResult unknown = Ql({"run", "show", "ffffffff"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("run_not_found"), std::string::npos) << unknown.err;

  // A second run within the same minute shares the first 8 characters (UUIDv7: creation time).
  CommandResult second = Ql({"run", "start", "one", "--wait"});
  ASSERT_EQ(second.exit_code, 0);
  const std::string other = Trim(second.out);
  if (other.substr(0, 8) == id.substr(0, 8)) {
    CommandResult ambiguous = Ql({"run", "show", id.substr(0, 8)});
    EXPECT_EQ(ambiguous.exit_code, 1);
    EXPECT_NE(ambiguous.err.find("run_ref_ambiguous"), std::string::npos) << ambiguous.err;
    EXPECT_NE(ambiguous.err.find(other), std::string::npos) << ambiguous.err;
  }
  // The prefix run list shows addresses its run.
  CommandResult table = Ql({"run", "list"});
  std::smatch shown_prefix;
  const std::string out = table.out;
  ASSERT_TRUE(std::regex_search(out, shown_prefix, std::regex("\n([0-9a-f-]{8,}) "))) << out;
  EXPECT_EQ(Ql({"run", "show", shown_prefix[1].str()}).exit_code, 0) << out;

  EXPECT_EQ(Runs({"--since", "1h"}).size(), 2u);
  EXPECT_EQ(Runs({"--until", "1h"}).size(), 0u);
  EXPECT_EQ(Runs({"--since", "2020-01-01T00:00:00Z", "--until", "2999-01-01T00:00:00Z"}).size(),
            2u);
  CommandResult bad = Ql({"run", "list", "--since", "yesterday"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("invalid_time"), std::string::npos) << bad.err;
}

// Runs created within the same ~65 s share their first 8 characters (UUIDv7): such a prefix is
// refused naming the runs with their task and creation time; a longer prefix that only one run
// has works for every command that takes a run; tables show prefixes no other run of the project
// has, a run of another task included.
TEST_F(DailyUseTest, RunsSharingAPrefixAreToldApartByALongerOne) {
  AddTask("one", "true");
  AddTask("two", "true");
  // Two runs of different tasks in the same window (again, should they straddle two).
  std::string a, b;
  for (int i = 0; i < 3 && (a.empty() || a.substr(0, 8) != b.substr(0, 8)); ++i) {
    a = Trim(Ql({"run", "start", "one", "--wait"}).out);
    b = Trim(Ql({"run", "start", "two", "--wait"}).out);
  }
  ASSERT_TRUE(std::regex_match(a, kUuid) && std::regex_match(b, kUuid)) << a << " " << b;
  ASSERT_EQ(a.substr(0, 8), b.substr(0, 8));

  CommandResult ambiguous = Ql({"run", "show", a.substr(0, 8)});
  EXPECT_EQ(ambiguous.exit_code, 1);
  for (const std::string& part : {std::string("run_ref_ambiguous"), a, b,
                                  std::string("task \"one\""), std::string("task \"two\""),
                                  std::string("created 20"), std::string("give more characters")}) {
    EXPECT_NE(ambiguous.err.find(part), std::string::npos) << part << " in " << ambiguous.err;
  }

  // One character past what the two share tells them apart (they differ where neither has a
  // dash); the commands resolve it, and the ones that refuse this run say why, not which run.
  size_t shared = 0;
  while (a[shared] == b[shared]) ++shared;
  const std::string prefix = a.substr(0, shared + 1);
  CommandResult shown = Ql({"run", "show", prefix, "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(json::parse(shown.out)["id"], a);
  EXPECT_EQ(Ql({"run", "log", prefix}).exit_code, 0);
  for (const std::vector<std::string>& refused :
       {std::vector<std::string>{"run", "cancel", prefix},
        std::vector<std::string>{"run", "resolve", prefix, "--as", "failed", "--reason", "x"}}) {
    CommandResult r = Ql(refused);
    EXPECT_EQ(r.exit_code, 1) << refused[1] << ": " << r.err;
    for (const char* code : {"run_ref_ambiguous", "run_not_found", "invalid_id"}) {
      EXPECT_EQ(r.err.find(code), std::string::npos) << refused[1] << ": " << r.err;
    }
  }

  // task show lists only runs of "one", but the prefix it shows is one no run of "two" has.
  CommandResult task = Ql({"task", "show", "one"});
  ASSERT_EQ(task.exit_code, 0) << task.err;
  std::smatch row;
  ASSERT_TRUE(std::regex_search(task.out, row, std::regex("\n(" + a.substr(0, 8) + "[0-9a-f-]*) ")))
      << task.out;
  EXPECT_TRUE(a.starts_with(row[1].str())) << task.out;
  CommandResult by_row = Ql({"run", "show", row[1].str(), "--json"});
  ASSERT_EQ(by_row.exit_code, 0) << by_row.err << task.out;
  EXPECT_EQ(json::parse(by_row.out)["id"], a);

  CommandResult retried = Ql({"run", "retry", prefix});
  EXPECT_EQ(retried.exit_code, 0) << retried.err;
  EXPECT_TRUE(std::regex_match(Trim(retried.out), kUuid)) << retried.out;
}

// A timed-out attempt ends the run unless the task retries timeouts (--retry-on-timeout): then it
// is retried as a failed one is, up to --max-attempts.
TEST_F(DailyUseTest, TimeoutsAreRetriedOnlyWhenTheTaskSaysSo) {
  AddTask("slow", "sleep 30", {"--timeout", "300ms", "--max-attempts", "2", "--backoff", "0"});
  EXPECT_NE(Ql({"task", "show", "slow"}).out.find("timeouts not retried"), std::string::npos);
  EXPECT_EQ(Task("slow")["retry"]["retry_on_timeout"], false);
  CommandResult once = Ql({"run", "start", "slow", "--wait"});
  EXPECT_EQ(once.exit_code, 11) << once.err;
  json run = json::parse(Ql({"run", "show", Trim(once.out), "--json"}).out, nullptr, false);
  ASSERT_TRUE(run.is_object()) << once.out;
  EXPECT_EQ(run["attempts"].size(), 1u);
  EXPECT_EQ(run["retry_policy"]["retry_on_timeout"], false);

  CommandResult on = Ql({"task", "edit", "slow", "--retry-on-timeout"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_NE(on.err.find("retry: "), std::string::npos) << on.err;
  EXPECT_EQ(Task("slow")["retry"]["retry_on_timeout"], true);
  EXPECT_NE(Ql({"task", "show", "slow"}).out.find("retries timeouts"), std::string::npos);
  CommandResult twice = Ql({"run", "start", "slow", "--wait"});
  EXPECT_EQ(twice.exit_code, 11) << twice.err;
  run = json::parse(Ql({"run", "show", Trim(twice.out), "--json"}).out, nullptr, false);
  ASSERT_TRUE(run.is_object()) << twice.out;
  ASSERT_EQ(run["attempts"].size(), 2u);
  EXPECT_EQ(run["attempts"][0]["status"], "timed_out");
  EXPECT_EQ(run["attempts"][1]["status"], "timed_out");
  EXPECT_EQ(run["retry_policy"]["retry_on_timeout"], true);

  ASSERT_EQ(Ql({"task", "edit", "slow", "--no-retry-on-timeout"}).exit_code, 0);
  EXPECT_EQ(Task("slow")["retry"]["retry_on_timeout"], false);
  CommandResult both = Ql({"task", "edit", "slow", "--retry-on-timeout", "--no-retry-on-timeout"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("flag_conflict"), std::string::npos) << both.err;
}

// A command is told its zone, language, task, project and scheduled time.
TEST_F(DailyUseTest, TheCommandSeesItsRunsContext) {
  AddTask("context",
          "echo \"TZ=$TZ LANG=$LANG TASK=$QL_TASK_NAME PROJECT=$QL_PROJECT "
          "AT=$QL_SCHEDULED_FOR\"");
  CommandResult manual = Ql({"run", "start", "context", "--wait"});
  ASSERT_EQ(manual.exit_code, 0) << manual.err;
  const std::string by_hand = Log(Trim(manual.out));
  EXPECT_NE(by_hand.find("TZ=UTC LANG=C.UTF-8 TASK=context PROJECT=default AT=20"),
            std::string::npos)
      << by_hand;
  EXPECT_NE(by_hand.find("+00:00"), std::string::npos) << by_hand;

  ASSERT_EQ(
      Ql({"trigger", "add", "context", "--cron", "* * * * * *", "--tz", "Asia/Shanghai"}).exit_code,
      0);
  std::string cron_run;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& run : Runs()) {
          if (run["trigger_type"] == "cron" && run["status"] == "succeeded") {
            cron_run = run["id"];
            return true;
          }
        }
        return false;
      },
      seconds(15)));
  const std::string scheduled = Log(cron_run);
  EXPECT_NE(scheduled.find("TZ=Asia/Shanghai LANG=C.UTF-8 TASK=context"), std::string::npos)
      << scheduled;
  EXPECT_NE(scheduled.find("+08:00"), std::string::npos) << scheduled;

  // The task's own value wins.
  ASSERT_EQ(Ql({"task", "edit", "context", "--env", "LANG=zh_CN.UTF-8"}).exit_code, 0);
  CommandResult own = Ql({"run", "start", "context", "--wait"});
  EXPECT_NE(Log(Trim(own.out)).find("LANG=zh_CN.UTF-8"), std::string::npos);
}

}  // namespace
}  // namespace ql::itest
