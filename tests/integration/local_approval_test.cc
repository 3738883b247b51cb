// Approvals through a real ql-local and the real ql (DESIGN §9.1, issue 15): an operator asks
// for a run of a guarded task, its own approval is refused, an admin approves, exactly one run
// executes and succeeds, and the receipt and the audit show every step.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace ql::itest {
namespace {

using nlohmann::json;

// Returns the last non-empty line of `text`.
std::string LastLine(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  std::string last;
  while (std::getline(lines, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

class LocalApprovalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeExchangeDirectory(tmp_.path() + "/exchange");
    daemon_ = std::make_unique<LocalDaemon>(tmp_.path() + "/data", "standalone");
    ASSERT_TRUE(daemon_->Start({"--command-writable", tmp_.path() + "/exchange"}))
        << daemon_->log();
  }
  void TearDown() override {
    if (daemon_ && daemon_->running()) daemon_->Stop();
  }

  // Adds principal `name` with `role` in the default project; returns its new token.
  std::string Member(const std::string& name, const std::string& role) {
    EXPECT_EQ(daemon_->Ql({"principal", "add", name}).exit_code, 0);
    CommandResult minted = daemon_->Ql({"token", "create", "--principal", name});
    EXPECT_EQ(minted.exit_code, 0) << minted.err;
    EXPECT_EQ(daemon_->Ql({"role", "grant", name, role}).exit_code, 0);
    return LastLine(minted.out);
  }
  std::string IdOf(const std::string& name) {
    CommandResult shown = daemon_->Ql({"principal", "list", "--json"});
    EXPECT_EQ(shown.exit_code, 0) << shown.err;
    const json listed = json::parse(shown.out);
    for (const json& p : listed.is_array() ? listed : listed["items"]) {
      if (p["name"] == name) return p["id"];
    }
    return "";
  }
  CommandResult As(const std::string& token, std::vector<std::string> args) {
    args.insert(args.begin(), {"--token", token});
    return daemon_->Ql(args);
  }
  int Executions() {
    std::ifstream in(marker_);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) ++n;
    return n;
  }

  TempDir tmp_;
  std::string marker_ = tmp_.path() + "/exchange/executions";
  std::unique_ptr<LocalDaemon> daemon_;
};

TEST_F(LocalApprovalTest, AnOperatorAsksAnAdminApprovesAndExactlyOneRunSucceeds) {
  const std::string ops = Member("ops", "operator");
  const std::string amy = Member("amy", "admin");
  CommandResult task = daemon_->Ql(
      {"task", "add", "deploy", "--shell", "echo deployed >> " + marker_, "--require-approval"});
  ASSERT_EQ(task.exit_code, 0) << task.err;
  const std::string task_id = LastLine(task.out);

  // No run yet: exit 13, nothing on stdout, the request on stderr.
  CommandResult start = As(ops, {"run", "start", task_id});
  ASSERT_EQ(start.exit_code, 13) << start.err;
  EXPECT_EQ(start.out, "");
  const std::string prefix = "approval required: request ";
  const size_t at = start.err.find(prefix);
  ASSERT_NE(at, std::string::npos) << start.err;
  const std::string approval_id = start.err.substr(at + prefix.size(), 36);
  ASSERT_EQ(approval_id.size(), 36u) << start.err;

  CommandResult own = As(ops, {"approval", "approve", approval_id});
  EXPECT_EQ(own.exit_code, 1);
  EXPECT_NE(own.err.find("approval_self"), std::string::npos) << own.err;
  EXPECT_EQ(Executions(), 0);

  CommandResult approved = As(amy, {"approval", "approve", approval_id, "--json"});
  ASSERT_EQ(approved.exit_code, 0) << approved.err;
  const json receipt = json::parse(approved.out)["receipt"];
  const std::string run_id = receipt["run_id"];
  // Approving again answers the same receipt and starts nothing more.
  CommandResult again = As(amy, {"approval", "approve", approval_id, "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(json::parse(again.out)["receipt"]["id"], receipt["id"]);

  json run;
  ASSERT_TRUE(WaitFor(
      [&] {
        CommandResult shown = daemon_->Ql({"run", "show", run_id, "--json"});
        if (shown.exit_code != 0) return false;
        run = json::parse(shown.out);
        return run["status"] == "succeeded";
      },
      std::chrono::milliseconds(20'000)))
      << run.dump();
  EXPECT_EQ(run["trigger_type"], "approved");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(Executions(), 1);
  CommandResult runs = daemon_->Ql({"run", "list", "--task", task_id, "--json"});
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  EXPECT_EQ(json::parse(runs.out)["items"].size(), 1u) << runs.out;
  std::vector<std::string> events;
  for (const json& e : run["events"]) events.push_back(e["type"]);
  for (const char* want : {"run.created", "run.queued", "run.running", "run.succeeded"}) {
    EXPECT_NE(std::find(events.begin(), events.end(), want), events.end()) << want;
  }

  CommandResult shown = daemon_->Ql({"approval", "show", approval_id});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("status     approved"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("receipt    " + receipt["id"].get<std::string>()), std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find("  run      " + run_id), std::string::npos) << shown.out;
  // People by name, the task by name, the action by what it is.
  EXPECT_NE(shown.out.find("decision   approved by amy at "), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("requester  ops "), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("action     run.create of task deploy revision 1"), std::string::npos)
      << shown.out;

  CommandResult audit = daemon_->Ql({"audit", "list", "--limit", "200", "--json"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  bool requested = false;
  bool approve = false;
  const json facts = json::parse(audit.out);
  for (const json& fact : facts["items"]) {
    if (fact["target_id"] != approval_id) continue;
    if (fact["action"] == "approval.request") requested = fact["actor_id"] == IdOf("ops");
    if (fact["action"] == "approval.approve") approve = fact["actor_id"] == IdOf("amy");
  }
  EXPECT_TRUE(requested) << audit.out;
  EXPECT_TRUE(approve) << audit.out;
}

}  // namespace
}  // namespace ql::itest
