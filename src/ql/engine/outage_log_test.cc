#include "ql/engine/outage_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ql/testing/fake_clock.h"

namespace ql {
namespace {

TEST(OutageLogTest, OneLineWhenTheStoreGoesAwayAndOneWhenItIsBack) {
  testing::FakeClock clock;
  MemoryLogSink sink;
  EventLog log(clock, sink);
  OutageLog outage("dispatcher", &log, clock);
  outage.Observe(Status::Ok());
  EXPECT_TRUE(sink.lines().empty());
  for (int i = 0; i < 5; ++i) {
    outage.Observe(Unavailable("database_unavailable", "connection refused"));
    clock.Advance(1000);
  }
  EXPECT_TRUE(outage.down());
  outage.Observe(Status::Ok());
  outage.Observe(Status::Ok());
  EXPECT_FALSE(outage.down());
  EXPECT_EQ(sink.lines(),
            (std::vector<std::string>{
                "2026-01-01T00:00:00.000Z error database.unavailable component=dispatcher "
                "code=database_unavailable message=\"connection refused\"",
                "2026-01-01T00:00:05.000Z info database.available component=dispatcher "
                "down_ms=5000 failures=5"}));
}

TEST(OutageLogTest, AnAnswerThatIsAnErrorIsNotAnOutage) {
  testing::FakeClock clock;
  MemoryLogSink sink;
  EventLog log(clock, sink);
  OutageLog outage("scheduler", &log, clock);
  outage.Observe(Conflict("version_conflict", "raced"));
  outage.Observe(NotFound("run_not_found", "gone"));
  EXPECT_TRUE(sink.lines().empty());
  outage.Observe(Busy("database_busy", "locked"));
  outage.Observe(Conflict("version_conflict", "raced"));  // the store answered again
  EXPECT_EQ(sink.lines().size(), 2u);
  EXPECT_FALSE(outage.down());
}

TEST(OutageLogTest, WithoutALogOnlyTheStateIsKept) {
  testing::FakeClock clock;
  OutageLog outage("recovery", nullptr, clock);
  outage.Observe(Internal("disk_io", "I/O error"));
  EXPECT_TRUE(outage.down());
  outage.Observe(Status::Ok());
  EXPECT_FALSE(outage.down());
}

}  // namespace
}  // namespace ql
