// Scripts through a real ql-local and the real ql (DESIGN §14): a script is pushed once and read
// back byte for byte, its versions listed and compared; a task runs the version it was
// published with (by digest) until it is repinned; the command sees its script read-only and no
// other; a damaged cache entry is fetched again and never run; bad references are refused with
// their codes and change nothing.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness.h"

namespace ql::itest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Sha256OfFile(const std::string& path) {
  CommandResult sum = RunCommand({"/bin/sh", "-c", "sha256sum < '" + path + "'"});
  return sum.out.substr(0, 64);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class LocalScriptsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_.path() + "/data";
    src_ = tmp_.path() + "/src";
    fs::create_directories(src_);
    daemon_ = std::make_unique<LocalDaemon>(data_, "standalone");
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  }
  void TearDown() override {
    if (daemon_ && daemon_->running()) daemon_->Stop();
  }

  CommandResult Ql(const std::vector<std::string>& args) { return daemon_->Ql(args); }

  // Starts a run of `task`, waits for its end and returns its log.
  std::string RunAndLog(const std::string& task, std::string* run_id = nullptr) {
    CommandResult started = Ql({"run", "start", task, "--wait"});
    EXPECT_EQ(started.exit_code, 0) << started.out << started.err;
    const std::string id = Trim(started.out.substr(0, started.out.find('\n')));
    if (run_id != nullptr) *run_id = id;
    CommandResult log = Ql({"run", "log", id});
    EXPECT_EQ(log.exit_code, 0) << log.err;
    return log.out;
  }

  TempDir tmp_;
  std::string data_;
  std::string src_;
  std::unique_ptr<LocalDaemon> daemon_;
};

TEST_F(LocalScriptsTest, ScriptsArePushedReadAndComparedThroughTheCli) {
  const std::string file = src_ + "/hello.sh";
  WriteFile(file, "echo one\necho two\n");
  CommandResult first = Ql({"script", "push", "hello", file});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("version 1 pushed"), std::string::npos) << first.out;
  CommandResult again = Ql({"script", "push", "hello", file});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("unchanged"), std::string::npos) << again.out;
  const std::string v1_digest = Sha256OfFile(file);
  WriteFile(file, "echo one\necho three\n");
  ASSERT_EQ(Ql({"script", "push", "hello", file}).exit_code, 0);

  CommandResult cat = Ql({"script", "cat", "hello@1"});
  ASSERT_EQ(cat.exit_code, 0) << cat.err;
  EXPECT_EQ(cat.out, "echo one\necho two\n");
  CommandResult shown = Ql({"--json", "script", "show", "hello@1"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(json::parse(shown.out)["version"]["digest"], v1_digest);
  CommandResult history = Ql({"--json", "script", "history", "hello"});
  ASSERT_EQ(history.exit_code, 0) << history.err;
  const json versions = json::parse(history.out)["items"];
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0]["version"], 2);
  EXPECT_EQ(versions[1]["version"], 1);
  CommandResult diff = Ql({"script", "diff", "hello"});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_NE(diff.out.find("-echo two"), std::string::npos) << diff.out;
  EXPECT_NE(diff.out.find("+echo three"), std::string::npos) << diff.out;
  EXPECT_NE(diff.out.find("hello@1/hello.sh"), std::string::npos) << diff.out;

  // A directory: its files (links left out), the entry named; a larger binary file round trips
  // through pieces of one chunk.
  WriteFile(src_ + "/pkg/main.sh", ". \"$(dirname \"$0\")/lib/util.sh\"; util\n");
  WriteFile(src_ + "/pkg/lib/util.sh", "util() { echo from-util; }\n");
  fs::create_symlink("/etc/passwd", src_ + "/pkg/passwd");
  CommandResult tree = Ql({"--json", "script", "push", "pkg", src_ + "/pkg", "--entry", "main.sh"});
  ASSERT_EQ(tree.exit_code, 0) << tree.err;
  const json pushed = json::parse(tree.out);
  EXPECT_EQ(pushed["kind"], "tree");
  ASSERT_EQ(pushed["files"].size(), 2u) << pushed.dump();
  CommandResult util = Ql({"script", "cat", "pkg", "--path", "lib/util.sh"});
  EXPECT_EQ(util.out, "util() { echo from-util; }\n");
  const std::string big = src_ + "/big.bin";
  CommandResult made =
      RunCommand({"/bin/sh", "-c", "head -c 2621440 /dev/urandom > '" + big + "'"});
  ASSERT_EQ(made.exit_code, 0);
  ASSERT_EQ(Ql({"script", "push", "big", big}).exit_code, 0);
  const std::string copy = src_ + "/big.copy";
  CommandResult fetched =
      RunCommand({"/bin/sh", "-c", "\"$0\" --data \"$1\" script cat big > \"$2\"", BinDir() + "/ql",
                  data_, copy});
  ASSERT_EQ(fetched.exit_code, 0) << fetched.err;
  EXPECT_EQ(Sha256OfFile(copy), Sha256OfFile(big));

  // Deleted: the latest is gone, a named version still reads.
  ASSERT_EQ(Ql({"script", "rm", "hello"}).exit_code, 0);
  CommandResult gone = Ql({"script", "show", "hello"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("script_not_found"), std::string::npos) << gone.err;
  EXPECT_EQ(Ql({"script", "cat", "hello@1"}).out, "echo one\necho two\n");
}

TEST_F(LocalScriptsTest, ATaskRunsThePinnedVersionUntilRepinnedAndTheRunNamesItsDigest) {
  const std::string file = src_ + "/greet.sh";
  WriteFile(file, "echo \"v1 $*\"\n");
  ASSERT_EQ(Ql({"script", "push", "greet", file}).exit_code, 0);
  const std::string v1 = Sha256OfFile(file);
  CommandResult added = Ql({"task", "add", "greeter", "--script", "greet", "--", "a", "b"});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  std::string run_id;
  EXPECT_EQ(Trim(RunAndLog("greeter", &run_id)), "v1 a b");
  CommandResult show = Ql({"--json", "run", "show", run_id});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json artifacts = json::parse(show.out)["artifacts"];
  ASSERT_EQ(artifacts.size(), 1u) << show.out;
  EXPECT_EQ(artifacts[0]["digest"], v1);
  EXPECT_EQ(artifacts[0]["version"], 1);

  // A new version changes nothing until the task is repinned.
  WriteFile(file, "echo \"v2 $*\"\n");
  ASSERT_EQ(Ql({"script", "push", "greet", file}).exit_code, 0);
  EXPECT_EQ(Trim(RunAndLog("greeter")), "v1 a b");
  CommandResult repinned = Ql({"task", "repin", "greeter"});
  ASSERT_EQ(repinned.exit_code, 0) << repinned.err;
  EXPECT_EQ(Trim(RunAndLog("greeter")), "v2 a b");
}

TEST_F(LocalScriptsTest, TheCommandSeesItsScriptReadOnlyAndNoOtherScript) {
  WriteFile(src_ + "/other.sh", "echo other\n");
  ASSERT_EQ(Ql({"script", "push", "other", src_ + "/other.sh"}).exit_code, 0);
  ASSERT_EQ(Ql({"task", "add", "other", "--script", "other"}).exit_code, 0);
  (void)RunAndLog("other");  // its version is in the cache now
  WriteFile(src_ + "/probe.sh",
            "chmod u+w \"$0\" 2>/dev/null; if echo x >> \"$0\" 2>/dev/null; then echo wrote; "
            "else echo refused; fi\nls \"$(dirname \"$(dirname \"$0\")\")\" | wc -l\n");
  ASSERT_EQ(Ql({"script", "push", "probe", src_ + "/probe.sh"}).exit_code, 0);
  ASSERT_EQ(Ql({"task", "add", "probe", "--script", "probe"}).exit_code, 0);
  const std::string log = RunAndLog("probe");
  EXPECT_NE(log.find("refused"), std::string::npos) << log;
  // Two versions are cached on the host; the command sees its own directory only.
  const std::string trimmed = Trim(log);
  EXPECT_EQ(trimmed.substr(trimmed.rfind('\n') + 1), "1") << log;
  EXPECT_EQ(Trim(Ql({"script", "cat", "probe"}).out), Trim(ReadFile(src_ + "/probe.sh")));
}

TEST_F(LocalScriptsTest, ADamagedCacheEntryIsFetchedAgainNeverRun) {
  const std::string file = src_ + "/job.sh";
  WriteFile(file, "echo genuine\n");
  ASSERT_EQ(Ql({"script", "push", "job", file}).exit_code, 0);
  ASSERT_EQ(Ql({"task", "add", "job", "--script", "job"}).exit_code, 0);
  EXPECT_EQ(Trim(RunAndLog("job")), "genuine");
  const std::string entry = data_ + "/scripts/" + Sha256OfFile(file);
  ASSERT_TRUE(fs::is_directory(entry)) << entry;
  ::chmod(entry.c_str(), 0755);
  ::chmod((entry + "/job.sh").c_str(), 0644);
  WriteFile(entry + "/job.sh", "echo tampered\n");
  EXPECT_EQ(Trim(RunAndLog("job")), "genuine");
  EXPECT_EQ(ReadFile(entry + "/job.sh"), "echo genuine\n");
}

// The daemon's limits (--script-max-file-mib, --script-project-quota-mib): a file over the
// first is refused artifact_too_large, bytes past the second artifact_project_quota, and the
// library keeps what it had. A file and the pieces it was sent in count once; the pieces of a
// refused file count until retention removes them.
TEST_F(LocalScriptsTest, TheDaemonsLimitsRefuseALargeFileAndBytesPastTheProjectsQuota) {
  daemon_->Stop();
  ASSERT_TRUE(daemon_->Start({"--script-max-file-mib", "2", "--script-project-quota-mib", "5"}))
      << daemon_->log();
  const std::string file = src_ + "/file.bin";
  // Just over 2.5 MiB: pieces of 1 MiB, 1 MiB (the same bytes, stored once) and 0.5 MiB + 1.
  WriteFile(file, std::string((int64_t{5} << 19) + 1, 'b'));
  CommandResult refused = Ql({"script", "push", "big", file});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("artifact_too_large"), std::string::npos) << refused.err;
  // 1.5 MiB + 1 held so far; each 1.5 MiB file adds 1.5 MiB, not 3.
  for (const char* name : {"first", "second"}) {
    WriteFile(file, std::string(int64_t{3} << 19, name[0]));
    CommandResult pushed = Ql({"script", "push", name, file});
    ASSERT_EQ(pushed.exit_code, 0) << name << pushed.out << pushed.err;
  }
  WriteFile(file, std::string(int64_t{3} << 19, 'u'));
  CommandResult over = Ql({"script", "push", "third", file});
  EXPECT_NE(over.exit_code, 0);
  EXPECT_NE(over.err.find("artifact_project_quota"), std::string::npos) << over.err;
  CommandResult listed = Ql({"script", "list"});
  EXPECT_NE(listed.out.find("second"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find("third"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find("big"), std::string::npos) << listed.out;
  // A limit out of range is a usage error naming the flag.
  CommandResult bad = RunCommand({BinDir() + "/ql-local", "serve", "--data-dir",
                                  tmp_.path() + "/other", "--script-max-file-mib", "0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--script-max-file-mib"), std::string::npos) << bad.err;
}

TEST_F(LocalScriptsTest, BadScriptReferencesAreRefusedWithTheirCodes) {
  WriteFile(src_ + "/notes.txt", "not a program\n");
  ASSERT_EQ(Ql({"script", "push", "notes", src_ + "/notes.txt"}).exit_code, 0);
  struct Case {
    std::vector<std::string> args;
    std::string code;
  };
  const Case cases[] = {
      {{"task", "add", "t1", "--script", "nosuch"}, "script_not_found"},
      {{"task", "add", "t2", "--script", "notes@9"}, "script_version_not_found"},
      {{"task", "add", "t3", "--script", "notes"}, "script_interpreter_required"},
      {{"task", "add", "t4", "--script", "notes", "--interpreter", "perl"}, "spec_invalid_script"},
      {{"task", "add", "t5", "--script", "bad name"}, "script_name_invalid"},
      {{"script", "push", "x@1", src_ + "/notes.txt"}, "script_name_invalid"},
      {{"script", "push", "x", src_ + "/missing"}, "script_path_unreadable"},
  };
  for (const Case& c : cases) {
    CommandResult r = Ql(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args[3];
    EXPECT_NE(r.err.find(c.code), std::string::npos) << c.args[3] << ": " << r.err;
  }
  CommandResult listed = Ql({"--json", "task", "list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(json::parse(listed.out)["items"].size(), 0u) << listed.out;
  // With an interpreter given, the same script is a task.
  EXPECT_EQ(Ql({"task", "add", "t6", "--script", "notes", "--interpreter", "sh"}).exit_code, 0);
}

}  // namespace
}  // namespace ql::itest
