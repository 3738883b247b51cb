#include "ql/exec/supervision_runner.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

namespace ql::exec {
namespace {

namespace fs = std::filesystem;

TEST(SupervisionRunnerTest, TaskIdThatIsNotOnePathComponentNamesNoWorkingDirectory) {
  std::string tmpl = (fs::temp_directory_path() / "ql-runner-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  SupervisionRunner runner({"/bin/false"}, (dir / "run").string(), (dir / "work").string());
  for (const std::string& task_id :
       std::vector<std::string>{"", "..", "../escape", "a/b", std::string(129, 'a')}) {
    AttemptLaunch launch;
    launch.attempt_id = "attempt-1";
    launch.task_id = task_id;
    launch.argv = {"/bin/true"};
    auto launched = runner.Launch(launch);
    ASSERT_FALSE(launched.ok()) << task_id;
    EXPECT_EQ(launched.status().reason(), "invalid_task_id") << task_id;
  }
  // Nothing was created for them, and no supervisor was started.
  EXPECT_FALSE(fs::exists(dir / "work"));
  EXPECT_FALSE(fs::exists(dir / "escape"));
  EXPECT_FALSE(fs::exists(dir / "run"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ql::exec
