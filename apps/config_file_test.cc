#include "config_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ql {
namespace {

namespace fs = std::filesystem;

// A daemon's command line in miniature: `prog serve` with the kinds of flags the daemons have.
class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ql-config-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    serve_ = app_.add_subcommand("serve", "serve");
    serve_->add_option("--listen", listen_, "address");
    serve_->add_option("--session-idle", session_idle_, "seconds")
        ->check(CLI::Range(int64_t{10}, int64_t{600}));
    serve_->add_option("--pool-max", pool_max_, "connections");
    serve_->add_option("--database-url", url_, "url");
    serve_->add_option("--database-url-file", url_file_, "url file");
    serve_->add_option("--profile", profile_, "profile");
    serve_->add_option("--command-writable", writable_, "dirs")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    serve_->add_flag("--allow-insecure-http", insecure_, "flag");
    AddConfigFlag(*serve_, config_);
    audit_ = app_.add_subcommand("audit", "audit");
    audit_->add_option("--database-url", audit_url_, "url");
    AddConfigFlag(*audit_, audit_config_);
    target_.command = serve_;
    target_.first_arg = 2;
    target_.usage = "prog serve";
    target_.groups = {{"database-url", "database-url-file"}};
    target_.environment = {{"profile", "QL_TEST_CONFIG_PROFILE"}};
  }
  void TearDown() override {
    ::unsetenv("QL_TEST_CONFIG_PROFILE");
    fs::remove_all(dir_);
  }

  std::string Write(const std::string& text) {
    const std::string path = (dir_ / "ql.conf").string();
    std::ofstream(path) << text;
    return path;
  }

  // Parses `args` (after "prog") as a daemon would; the exit code, -1 to go on.
  int Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    ::testing::internal::CaptureStderr();
    const int exit =
        ParseWithConfigFile(app_, static_cast<int>(argv.size()), argv.data(),
                            args.size() > 1 && args[1] == "audit" ? audit_target_ : target_, 2);
    stderr_ = ::testing::internal::GetCapturedStderr();
    return exit;
  }

  fs::path dir_;
  CLI::App app_{"prog"};
  CLI::App* serve_ = nullptr;
  CLI::App* audit_ = nullptr;
  std::string listen_ = "default", url_, url_file_, profile_, config_, audit_url_, audit_config_;
  int64_t session_idle_ = 30;
  int pool_max_ = 8;
  std::vector<std::string> writable_;
  bool insecure_ = false;
  ConfigTarget target_, audit_target_;
  std::string stderr_;
};

TEST_F(ConfigFileTest, ReadsKeysValuesCommentsAndQuotes) {
  const std::string path = Write(
      "# a comment\n"
      "\n"
      "  listen = 127.0.0.1:5700   # where\r\n"
      "oidc-config = \"/etc/qinglong/sign in.json\" # quoted\n"
      "note = \"say \\\"hi\\\" \\\\ there\"\n"
      "url = postgresql://h/db#frag\n");
  Result<std::vector<ConfigSetting>> settings = ReadConfigFile(path);
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  ASSERT_EQ(settings->size(), 4u);
  EXPECT_EQ((*settings)[0].key, "listen");
  EXPECT_EQ((*settings)[0].value, "127.0.0.1:5700");
  EXPECT_EQ((*settings)[0].line, 3);
  EXPECT_EQ((*settings)[1].value, "/etc/qinglong/sign in.json");
  EXPECT_EQ((*settings)[2].value, "say \"hi\" \\ there");
  EXPECT_EQ((*settings)[3].value, "postgresql://h/db#frag");
}

TEST_F(ConfigFileTest, ABadLineIsRefusedNamingTheFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"listen 127.0.0.1:1\n", "expected `key = value`"},
      {"Listen = x\n", "not a setting name"},
      {"--listen = x\n", "without --"},
      {"listen =\n", "has no value"},
      {"listen = \"x\n", "does not end with a quote"},
      {"listen = \"x\" y\n", "does not end with a quote"},
  };
  for (const auto& [text, why] : cases) {
    const std::string path = Write("# first\n" + text);
    Result<std::vector<ConfigSetting>> settings = ReadConfigFile(path);
    ASSERT_FALSE(settings.ok()) << text;
    EXPECT_EQ(settings.status().reason(), "config_file_invalid") << text;
    EXPECT_NE(settings.status().message().find(path + ":2: "), std::string::npos)
        << settings.status().message();
    EXPECT_NE(settings.status().message().find(why), std::string::npos)
        << settings.status().message();
  }
  Result<std::vector<ConfigSetting>> missing = ReadConfigFile((dir_ / "absent.conf").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().reason(), "config_file_unreadable");
  EXPECT_NE(missing.status().message().find("absent.conf"), std::string::npos);
}

TEST_F(ConfigFileTest, TheFileSetsFlagsAndTheCommandLineOverridesIt) {
  const std::string path = Write(
      "listen = 0.0.0.0:1\n"
      "session-idle = 120\n"
      "command-writable = /srv/a\n"
      "command-writable = /srv/b\n"
      "allow-insecure-http = yes\n");
  EXPECT_EQ(Parse({"serve", "--config", path, "--listen", "127.0.0.1:2"}), -1) << stderr_;
  EXPECT_EQ(listen_, "127.0.0.1:2");
  EXPECT_EQ(session_idle_, 120);
  EXPECT_EQ(writable_, (std::vector<std::string>{"/srv/a", "/srv/b"}));
  EXPECT_TRUE(insecure_);
  EXPECT_EQ(config_, path);
  // A start-up check after parsing that names a flag the file set names the file's line too.
  EXPECT_EQ(WithConfigLine("--session-idle must be shorter than --session-lifetime"),
            path + ":2: --session-idle must be shorter than --session-lifetime");
  EXPECT_EQ(WithConfigLine("--listen 127.0.0.1:2 is in use"), "--listen 127.0.0.1:2 is in use")
      << "the command line's --listen overrode the file's";
  EXPECT_EQ(WithConfigLine("--session-idle-x is unknown"), "--session-idle-x is unknown");
}

TEST_F(ConfigFileTest, TheCommandLineOverridesInItsEqualsFormToo) {
  const std::string path = Write("listen = 0.0.0.0:1\nallow-insecure-http = false\n");
  EXPECT_EQ(Parse({"serve", "--listen=127.0.0.1:3", "--config=" + path}), -1) << stderr_;
  EXPECT_EQ(listen_, "127.0.0.1:3");
  EXPECT_FALSE(insecure_);
}

TEST_F(ConfigFileTest, TheEnvironmentOverridesTheFile) {
  const std::string path = Write("profile = edge\n");
  ::setenv("QL_TEST_CONFIG_PROFILE", "standalone", 1);
  EXPECT_EQ(Parse({"serve", "--config", path}), -1) << stderr_;
  EXPECT_EQ(profile_, "") << "the environment's value is read by the daemon itself";
  ::unsetenv("QL_TEST_CONFIG_PROFILE");
  EXPECT_EQ(Parse({"serve", "--config", path}), -1) << stderr_;
  EXPECT_EQ(profile_, "edge");
}

TEST_F(ConfigFileTest, AFlagOfTheSameGroupOnTheCommandLineLeavesTheFilesOut) {
  const std::string path = Write("database-url-file = /etc/qinglong/url\n");
  EXPECT_EQ(Parse({"serve", "--config", path, "--database-url", "postgresql://x/y"}), -1)
      << stderr_;
  EXPECT_EQ(url_, "postgresql://x/y");
  EXPECT_EQ(url_file_, "");
}

TEST_F(ConfigFileTest, UnknownRepeatedAndBadFlagValuesAreRefusedWithTheirLine) {
  struct Case {
    std::string text;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"listen = a\nlisen = b\n",
       ":2: unknown setting 'lisen' (the settings are the long flags of `prog serve --help`"},
      {"listen = a\n\nlisten = b\n", ":3: 'listen' is set again (first on line 1)"},
      {"allow-insecure-http = maybe\n", ":1: 'allow-insecure-http' takes true or false"},
      {"config = /x\n", ":1: 'config' cannot be set in a file"},
      {"listen = a\nsession-idle = 5\n", ":2: session-idle: --session-idle: Value 5 not in"},
      {"pool-max = many\n", ":1: pool-max: Could not convert: --pool-max = many"},
      {"session-idle = soon\n", ":1: session-idle: --session-idle: Value soon not in"},
  };
  for (const Case& c : cases) {
    const std::string path = Write(c.text);
    EXPECT_EQ(Parse({"serve", "--config", path}), 2) << c.text;
    EXPECT_NE(stderr_.find(path + c.says), std::string::npos) << stderr_;
  }
  // A bad value on the command line names no line of the file.
  const std::string path = Write("listen = a\n");
  EXPECT_EQ(Parse({"serve", "--config", path, "--session-idle", "5"}), 2);
  EXPECT_EQ(stderr_.find(path), std::string::npos) << stderr_;
  EXPECT_NE(stderr_.find("--session-idle: Value 5 not in"), std::string::npos) << stderr_;
}

TEST_F(ConfigFileTest, AnotherCommandSkipsTheSettingsItDoesNotTake) {
  audit_target_.command = audit_;
  audit_target_.also_known = serve_;
  audit_target_.first_arg = 2;
  const std::string path = Write("listen = 0.0.0.0:1\ndatabase-url = postgresql://a/b\n");
  EXPECT_EQ(Parse({"audit", "--config", path}), -1) << stderr_;
  EXPECT_EQ(audit_url_, "postgresql://a/b");
  EXPECT_EQ(listen_, "default");
  const std::string bad = Write("nonsense = 1\n");
  EXPECT_EQ(Parse({"audit", "--config", bad}), 2);
  EXPECT_NE(stderr_.find(":1: unknown setting 'nonsense'"), std::string::npos) << stderr_;
}

TEST_F(ConfigFileTest, AnUnreadableFileIsAUsageError) {
  EXPECT_EQ(Parse({"serve", "--config", (dir_ / "absent.conf").string()}), 2);
  EXPECT_NE(stderr_.find("error: config_file_unreadable: cannot read configuration file"),
            std::string::npos)
      << stderr_;
}

}  // namespace
}  // namespace ql
