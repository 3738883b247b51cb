// `ql pool` and `ql worker` against a scripted server: the requests they send, what they print
// and how they exit.

#include <gtest/gtest.h>
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <sstream>

#include "fake_api_server.h"
#include "pool_command.h"
#include "worker_command.h"

namespace ql::cli {
namespace {

using nlohmann::json;

class PlacementCommandTest : public ::testing::Test {
 protected:
  CommandContext Context(bool json = false) {
    GlobalOptions options;
    options.server = server_.url();
    options.token = "test-token";
    options.json = json;
    return CommandContext(
        options, [](const std::string&) { return std::nullopt; }, out_, err_);
  }
  static void Json(httplib::Response& res, const json& body, int status = 200) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }
  // Parses `args` as ql would and returns the exit status; stdout is captured into out_.
  int Ql(std::vector<std::string> args) {
    CLI::App app{"ql"};
    app.require_subcommand(1);
    RegisterPoolCommands(app);
    RegisterWorkerCommands(app);
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    std::streambuf* saved = std::cout.rdbuf(out_.rdbuf());
    int status = 0;
    try {
      app.parse(reversed);
    } catch (const CLI::RuntimeError& e) {
      status = e.get_exit_code();
    } catch (const CLI::ParseError& e) {
      err_ << e.what();
      status = kExitUsage;
    }
    std::cout.rdbuf(saved);
    return status;
  }
  void AcceptGrants() {
    server_.http().Post("/api/v1/pools/gpu/grants",
                        [&](const httplib::Request& req, httplib::Response& res) {
                          server_.Record(req);
                          const json body = json::parse(req.body);
                          Json(res, {{"pool", "gpu"},
                                     {"project_id", "p-7"},
                                     {"max_running", body.value("max_running", json())},
                                     {"weight", body.value("weight", 1)},
                                     {"created_by", "u-1"},
                                     {"created_at", "2025-01-01T00:00:00Z"},
                                     {"updated_at", "2025-01-01T00:00:00Z"}});
                        });
  }

  FakeServer server_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(PlacementCommandTest, PoolGrantSendsTheProjectAndLimitsAndPrintsTheGrant) {
  AcceptGrants();
  PoolGrantArgs args;
  args.pool = "gpu";
  args.project = "team-a";
  args.max_running = 4;
  args.weight = 3;
  CommandContext context = Context();
  EXPECT_EQ(PoolGrant(args, context), kExitOk) << err_.str();
  ASSERT_EQ(server_.requests().size(), 1u);
  // The granted project is in the body, not the project the request works in.
  EXPECT_EQ(server_.requests()[0], "POST /api/v1/pools/gpu/grants");
  EXPECT_EQ(json::parse(server_.bodies()[0]),
            json::parse(R"({"project":"team-a","max_running":4,"weight":3})"));
  EXPECT_EQ(out_.str(), "pool gpu granted to project team-a (p-7): max running 4, weight 3\n");

  // Without limits only the project is sent, and no limit is printed as unlimited.
  out_.str("");
  PoolGrantArgs plain;
  plain.pool = "gpu";
  plain.project = "team-a";
  EXPECT_EQ(PoolGrant(plain, context), kExitOk) << err_.str();
  EXPECT_EQ(json::parse(server_.bodies()[1]), json::parse(R"({"project":"team-a"})"));
  EXPECT_EQ(out_.str(),
            "pool gpu granted to project team-a (p-7): max running unlimited, weight 1\n");

  // --json prints the grant as the server answered it.
  out_.str("");
  CommandContext json_context = Context(/*json=*/true);
  EXPECT_EQ(PoolGrant(args, json_context), kExitOk);
  EXPECT_EQ(json::parse(out_.str())["project_id"], "p-7");
}

TEST_F(PlacementCommandTest, PoolGrantTakesItsOwnProjectOrTheGlobalOneAndNeedsOne) {
  AcceptGrants();
  EXPECT_EQ(Ql({"pool", "grant", "gpu", "--project", "team-a", "--weight", "5", "--server",
                server_.url(), "--token", "t"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(Ql({"--project", "team-b", "pool", "grant", "gpu", "--server", server_.url(), "--token",
                "t"}),
            kExitOk)
      << err_.str();
  const std::vector<std::string> bodies = server_.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(json::parse(bodies[0]), json::parse(R"({"project":"team-a","weight":5})"));
  EXPECT_EQ(server_.requests()[0], "POST /api/v1/pools/gpu/grants");
  EXPECT_EQ(json::parse(bodies[1]), json::parse(R"({"project":"team-b"})"));

  PoolGrantArgs none;
  none.pool = "gpu";
  CommandContext context = Context();
  EXPECT_EQ(PoolGrant(none, context), kExitUsage);
  EXPECT_NE(err_.str().find("error: project_required: "), std::string::npos) << err_.str();
  EXPECT_EQ(server_.requests().size(), 2u);
}

TEST_F(PlacementCommandTest, PoolSetWithoutAFlagOrWithBothOfAPairIsAUsageError) {
  PoolSetArgs args;
  args.pool = "gpu";
  CommandContext context = Context();
  EXPECT_EQ(PoolSet(args, context), kExitUsage);
  EXPECT_EQ(
      err_.str().rfind("error: flag_required: nothing to set: give --open or --granted-only", 0),
      0u)
      << err_.str();

  err_.str("");
  args.open = true;
  args.granted_only = true;
  EXPECT_EQ(PoolSet(args, context), kExitUsage);
  EXPECT_NE(err_.str().find("error: flag_conflict: "), std::string::npos) << err_.str();

  err_.str("");
  args.granted_only = false;
  args.max_running = 3;
  args.no_max_running = true;
  EXPECT_EQ(PoolSet(args, context), kExitUsage);
  EXPECT_NE(err_.str().find("--no-max-running"), std::string::npos) << err_.str();

  // As `ql` parses it: exit 2 and nothing sent.
  EXPECT_EQ(Ql({"pool", "set", "gpu", "--server", server_.url(), "--token", "t"}), kExitUsage);
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(PlacementCommandTest, PoolSetSendsOnlyWhatIsGiven) {
  server_.http().Post("/api/v1/pools/gpu",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        Json(res, {{"name", "gpu"},
                                   {"configured", true},
                                   {"serves_all_projects", false},
                                   {"max_running", nullptr},
                                   {"grants", json::array()},
                                   {"live_workers", 0},
                                   {"running", 0}});
                      });
  EXPECT_EQ(Ql({"pool", "set", "gpu", "--granted-only", "--no-max-running", "--server",
                server_.url(), "--token", "t"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(json::parse(server_.bodies().at(0)),
            json::parse(R"({"serves_all_projects":false,"max_running":null})"));
  EXPECT_EQ(out_.str(), "pool gpu: granted projects only, max running unlimited\n");
}

TEST_F(PlacementCommandTest, PoolListNamesGrantsByProjectSlug) {
  server_.http().Get("/api/v1/pools", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, {{"items", json::parse(R"([
      {"name": "default", "configured": true, "serves_all_projects": true, "max_running": null,
       "grants": [], "live_workers": 2, "running": 1},
      {"name": "gpu", "configured": true, "serves_all_projects": false, "max_running": 8,
       "grants": [{"pool": "gpu", "project_id": "p-1", "weight": 1},
                  {"pool": "gpu", "project_id": "p-2", "weight": 1}],
       "live_workers": 1, "running": 0}])")}});
  });
  server_.http().Get("/api/v1/projects", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, {{"items", json::parse(R"([{"id": "p-1", "slug": "ml"}])")}});
  });
  CommandContext context = Context();
  EXPECT_EQ(PoolList(context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "POOL     OPEN  MAX RUNNING  GRANTS  WORKERS  RUNNING\n"
            "default  yes   unlimited    -       2        1\n"
            "gpu      no    8            ml,p-2  1        0\n");
}

TEST_F(PlacementCommandTest, WorkerListShowsPoolLabelsAndSlots) {
  server_.http().Get("/api/v1/workers", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, {{"items", json::parse(R"([
      {"id": "w-1", "name": "gpu-1", "state": "active", "pool": "gpu",
       "labels": {"arch": "arm64", "cuda": "12"}, "version": "1.4.0", "slots": 4,
       "available_slots": 2, "running": 2, "running_runs": ["r-1", "r-2"], "last_seen": null},
      {"id": "w-2", "name": "spare", "state": "never_connected", "pool": "default", "labels": {},
       "version": null, "slots": 0, "available_slots": 0, "running": 0, "running_runs": [],
       "last_seen": null}])")}});
  });
  CommandContext context = Context();
  EXPECT_EQ(WorkerList(context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "NAME   STATE            POOL     LABELS              SLOTS  VERSION  LAST SEEN\n"
            "gpu-1  active           gpu      arch=arm64,cuda=12  2/4    1.4.0    never\n"
            "spare  never_connected  default  -                   0/0    -        never\n");
}

TEST_F(PlacementCommandTest, WorkerShowListsRunningRunsAndDrainPostsNoFields) {
  const json worker = json::parse(R"({"id": "w-1", "name": "gpu-1", "state": "draining",
      "pool": "gpu", "labels": {"arch": "arm64"}, "version": "1.4.0", "slots": 4,
      "available_slots": 2, "running": 2, "running_runs": ["r-1", "r-2"],
      "last_seen": null, "drained": true, "drained_at": "2025-01-01T00:00:00Z", "live": true,
      "revoked": false, "session_id": "s-1", "generation": 3,
      "created_at": "2024-12-01T00:00:00Z"})");
  server_.http().Get("/api/v1/workers/gpu-1",
                     [&](const httplib::Request&, httplib::Response& res) { Json(res, worker); });
  server_.http().Post("/api/v1/workers/gpu-1/drain",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        Json(res, worker);
                      });
  server_.http().Post(
      "/api/v1/workers/missing/resume", [&](const httplib::Request&, httplib::Response& res) {
        Json(res, {{"code", "worker_not_found"}, {"message", "no such worker"}}, 404);
      });
  CommandContext context = Context();
  EXPECT_EQ(WorkerShow("gpu-1", context), kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("running runs  r-1, r-2\n"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("labels        arch=arm64\n"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("drained       yes, at 2025-01-01T00:00:00Z\n"), std::string::npos)
      << out_.str();

  out_.str("");
  EXPECT_EQ(WorkerDrain("gpu-1", /*drain=*/true, context), kExitOk) << err_.str();
  EXPECT_EQ(server_.requests().at(0), "POST /api/v1/workers/gpu-1/drain");
  EXPECT_EQ(json::parse(server_.bodies().at(0)), json::object());
  EXPECT_EQ(out_.str(), "worker gpu-1 drained: it takes no new runs (state draining, 2 running)\n");

  EXPECT_EQ(WorkerDrain("missing", /*drain=*/false, context), kExitFailure);
  EXPECT_EQ(err_.str(), "error: worker_not_found: no such worker\n");
}

}  // namespace
}  // namespace ql::cli
