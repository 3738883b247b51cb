// Governance through a real ql-local and the real ql (DESIGN §9): a viewer is refused, granted
// admin is allowed, revoked is refused again, and the audit shows all of it.

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness.h"

namespace ql::itest {
namespace {

using nlohmann::json;

std::string TrimBothEnds(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.erase(s.begin());
  return s;
}

class LocalGovernanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_.path() + "/data";
    daemon_ = std::make_unique<LocalDaemon>(data_, "standalone");
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  }
  void TearDown() override {
    if (daemon_ && daemon_->running()) daemon_->Stop();
  }

  // Runs ql with `token` instead of the owner's.
  CommandResult As(const std::string& token, std::vector<std::string> args) {
    args.insert(args.begin(), {"--token", token});
    return daemon_->Ql(args);
  }

  TempDir tmp_;
  std::string data_;
  std::unique_ptr<LocalDaemon> daemon_;
};

TEST_F(LocalGovernanceTest, AViewerIsRefusedAnAdminAllowedAndARevokedAdminRefusedAgain) {
  CommandResult who = daemon_->Ql({"whoami", "--json"});
  ASSERT_EQ(who.exit_code, 0) << who.err;
  json me = json::parse(who.out);
  EXPECT_EQ(me["principal"]["name"], "owner");
  EXPECT_EQ(me["installation_role"], "owner");

  ASSERT_EQ(daemon_->Ql({"principal", "add", "carol"}).exit_code, 0);
  CommandResult minted = daemon_->Ql({"token", "create", "--principal", "carol"});
  ASSERT_EQ(minted.exit_code, 0) << minted.err;
  const std::string token =
      TrimBothEnds(minted.out.substr(minted.out.rfind('\n', minted.out.size() - 2)));
  ASSERT_FALSE(token.empty());
  ASSERT_EQ(daemon_->Ql({"role", "grant", "carol", "viewer"}).exit_code, 0);

  const std::vector<std::string> add = {"task", "add", "backup", "--shell", "true"};
  CommandResult denied = As(token, add);
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.err.find("permission_denied"), std::string::npos) << denied.err;
  EXPECT_NE(denied.err.find("admin"), std::string::npos) << denied.err;
  EXPECT_EQ(As(token, {"task", "list"}).exit_code, 0);  // a viewer reads

  ASSERT_EQ(daemon_->Ql({"role", "grant", "carol", "admin"}).exit_code, 0);
  CommandResult allowed = As(token, add);
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;

  ASSERT_EQ(daemon_->Ql({"role", "revoke", "carol"}).exit_code, 0);
  CommandResult again = As(token, add);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("permission_denied"), std::string::npos) << again.err;

  // The last owner cannot give up the installation.
  CommandResult last = daemon_->Ql({"role", "revoke", "owner", "--installation"});
  EXPECT_EQ(last.exit_code, 1);
  EXPECT_NE(last.err.find("last_owner"), std::string::npos) << last.err;

  CommandResult audit = daemon_->Ql({"audit", "list", "--limit", "100", "--json"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  int denials = 0;
  int grants = 0;
  int revokes = 0;
  const json facts = json::parse(audit.out);
  for (const json& fact : facts["items"]) {
    if (fact["action"] == "permission.denied") ++denials;
    if (fact["action"] == "binding.grant") ++grants;
    if (fact["action"] == "binding.revoke") ++revokes;
    EXPECT_EQ(fact.dump().find(token), std::string::npos) << "a token in the audit";
  }
  EXPECT_EQ(denials, 2) << audit.out;
  EXPECT_EQ(grants, 3);  // the owner's bootstrap, viewer, admin
  EXPECT_EQ(revokes, 1);

  // A disabled principal's token stops working.
  ASSERT_EQ(daemon_->Ql({"principal", "disable", "carol"}).exit_code, 0);
  CommandResult disabled = As(token, {"task", "list"});
  EXPECT_EQ(disabled.exit_code, 1);
  // Refused at once (the principal's status is read per request); within the 2 s
  // authentication bound its token stops authenticating at all.
  EXPECT_TRUE(disabled.err.find("principal_disabled") != std::string::npos ||
              disabled.err.find("unauthorized") != std::string::npos)
      << disabled.err;
  EXPECT_TRUE(WaitFor(
      [&] {
        disabled = As(token, {"task", "list"});
        return disabled.err.find("unauthorized") != std::string::npos;
      },
      std::chrono::milliseconds(5000)))
      << disabled.err;
}

TEST_F(LocalGovernanceTest, ProjectsSeparateWorkAndAnArchivedProjectTakesNoRuns) {
  ASSERT_EQ(daemon_->Ql({"project", "add", "payments"}).exit_code, 0);
  CommandResult task = daemon_->Ql({"--project", "payments", "task", "add", "settle", "--shell",
                                    "sleep 30"});
  ASSERT_EQ(task.exit_code, 0) << task.err;
  CommandResult listed = daemon_->Ql({"task", "list", "--json"});
  ASSERT_EQ(listed.exit_code, 0);
  EXPECT_EQ(listed.out.find("settle"), std::string::npos) << "the default project shows it";
  CommandResult in_payments = daemon_->Ql({"--project", "payments", "task", "list", "--json"});
  EXPECT_NE(in_payments.out.find("settle"), std::string::npos) << in_payments.out;

  ASSERT_EQ(daemon_->Ql({"project", "archive", "payments"}).exit_code, 0);
  CommandResult start =
      daemon_->Ql({"--project", "payments", "run", "start", TrimBothEnds(task.out)});
  EXPECT_EQ(start.exit_code, 1);
  EXPECT_NE(start.err.find("project_archived"), std::string::npos) << start.err;
  CommandResult projects = daemon_->Ql({"project", "list", "--json"});
  EXPECT_NE(projects.out.find("archived"), std::string::npos) << projects.out;
}

}  // namespace
}  // namespace ql::itest
