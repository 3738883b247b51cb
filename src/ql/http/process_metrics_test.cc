#include "ql/http/process_metrics.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

namespace ql {
namespace {

using ::testing::HasSubstr;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
const double kLoadedAt = NowSeconds();

TEST(ProcessMetricsTest, ASampleFollowsWhatTheProcessDoes) {
  Result<ProcessSample> before = ReadProcessSample();
  ASSERT_TRUE(before.ok()) << before.status().reason() << " " << before.status().message();

  // Three more descriptors, 32 MiB more resident memory, and some CPU time.
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  constexpr size_t kBytes = size_t{32} << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);
  const std::clock_t spin_until = std::clock() + CLOCKS_PER_SEC / 8;  // 125 ms of CPU
  volatile uint64_t spins = 0;
  while (std::clock() < spin_until) spins = spins + 1;

  Result<ProcessSample> after = ReadProcessSample();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->open_fds, before->open_fds + 3);
  EXPECT_GE(after->resident_bytes, before->resident_bytes + int64_t{30} * 1024 * 1024);
  EXPECT_GE(after->cpu_seconds, before->cpu_seconds + 0.05);
  EXPECT_EQ(after->start_time_seconds, before->start_time_seconds);
  // The process started just before this file's static initialisation (the boot time has
  // whole-second resolution).
  EXPECT_LE(after->start_time_seconds, kLoadedAt + 1.5);
  EXPECT_GE(after->start_time_seconds, kLoadedAt - 10);
  for (int fd : fds) ::close(fd);
}

TEST(ProcessMetricsTest, RecordsTheSampleUnderPrometheusNamesAndTheBuildInfo) {
  Metrics metrics;
  DescribeProcessMetrics(metrics, "1.2.3");
  ASSERT_TRUE(RecordProcessMetrics(metrics).ok());
  const std::string text = metrics.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("# TYPE ql_build_info gauge\nql_build_info{version=\"1.2.3\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_resident_memory_bytes gauge\n"
                              "process_resident_memory_bytes "));
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"
                              "process_cpu_seconds_total "));
  EXPECT_THAT(text, HasSubstr("# TYPE process_open_fds gauge\nprocess_open_fds "));
  EXPECT_THAT(text, HasSubstr("# TYPE process_start_time_seconds gauge\n"
                              "process_start_time_seconds "));
  EXPECT_THAT(text, HasSubstr("ql_metrics_rejected_samples_total 0\n"));
}

}  // namespace
}  // namespace ql
