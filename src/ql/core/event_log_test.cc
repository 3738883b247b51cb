#include "ql/core/event_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ql {
namespace {

// 2026-12-07T06:31:45.428Z
constexpr int64_t kNow = 1'796'625'105'428;

class FixedClock final : public Clock {
 public:
  int64_t NowMs() const override { return now; }
  int64_t MonotonicMs() const override { return 0; }
  int64_t now = kNow;
};

std::string Text(std::string_view event, std::vector<LogField> fields,
                 LogLevel level = LogLevel::kInfo) {
  return FormatLogLine(LogFormat::kText, kNow, level, event, fields);
}

nlohmann::json Json(std::string_view event, std::vector<LogField> fields,
                    LogLevel level = LogLevel::kInfo) {
  const std::string line = FormatLogLine(LogFormat::kJson, kNow, level, event, fields);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  return nlohmann::json::parse(line);
}

TEST(EventLogTest, TextLineHasTimeLevelEventAndFields) {
  EXPECT_EQ(
      Text("run.failed", {{"run", "r1"}, {"attempt", 2}, {"code", "exit_status"}, {"retry", false}},
           LogLevel::kWarn),
      "2026-12-07T06:31:45.428Z warn run.failed run=r1 attempt=2 code=exit_status "
      "retry=false");
}

TEST(EventLogTest, TextTimestampAlwaysHasMilliseconds) {
  EXPECT_EQ(FormatLogLine(LogFormat::kText, 1'796'625'105'000, LogLevel::kError, "x", {}),
            "2026-12-07T06:31:45.000Z error x");
}

TEST(EventLogTest, TextQuotesAndEscapesOddValues) {
  EXPECT_EQ(Text("e", {{"m", "two words"}}), "2026-12-07T06:31:45.428Z info e m=\"two words\"");
  EXPECT_EQ(Text("e", {{"m", ""}}), "2026-12-07T06:31:45.428Z info e m=\"\"");
  EXPECT_EQ(Text("e", {{"m", "a=b"}}), "2026-12-07T06:31:45.428Z info e m=\"a=b\"");
  EXPECT_EQ(Text("e", {{"m", "say \"hi\"\\"}}),
            "2026-12-07T06:31:45.428Z info e m=\"say \\\"hi\\\"\\\\\"");
  EXPECT_EQ(Text("e", {{"m", std::string("a\x01\x7f"
                                         "b\tc",
                                         6)}}),
            "2026-12-07T06:31:45.428Z info e m=\"a\\u0001\\u007fb\\tc\"");
  EXPECT_EQ(Text("e", {{"m", "日志"}}), "2026-12-07T06:31:45.428Z info e m=日志");
  EXPECT_EQ(Text("e", {{"m", "a\xff"}}), "2026-12-07T06:31:45.428Z info e m=\"a\\xff\"");
}

TEST(EventLogTest, NamesAreReducedToPlainCharacters) {
  EXPECT_EQ(Text("run failed\n", {{"a b=c", 1}, {"", 2}}),
            "2026-12-07T06:31:45.428Z info run_failed_ a_b_c=1 _=2");
}

TEST(EventLogTest, NewlinesNeverSplitALine) {
  const std::string evil = "one\ntwo\r\nthree\x0b\x0c\x85\u2028end";
  for (LogFormat format : {LogFormat::kText, LogFormat::kJson}) {
    const std::vector<LogField> fields = {{"message", evil}, {evil, evil}};
    const std::string line = FormatLogLine(format, kNow, LogLevel::kInfo, evil, fields);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    EXPECT_EQ(line.find('\r'), std::string::npos) << line;
    for (const char c : line) {
      EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << line;
    }
  }
}

TEST(EventLogTest, JsonLineHasTsLevelEventThenFields) {
  const std::string line = FormatLogLine(LogFormat::kJson, kNow, LogLevel::kWarn, "run.failed",
                                         std::vector<LogField>{{"run", "r1"}, {"exit", 1}});
  EXPECT_EQ(line, R"({"ts":"2026-12-07T06:31:45.428Z","level":"warn","event":"run.failed",)"
                  R"("run":"r1","exit":1})");
}

TEST(EventLogTest, JsonEscapesOddCharactersAndKeepsItsOwnKeys) {
  const nlohmann::json line = Json("e", {{"message", std::string("a\"b\\c\nd\x01", 8)},
                                         {"level", "error"},
                                         {"ts", 5},
                                         {"ok", true},
                                         {"bad", std::string("\xff\xfe")}});
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["ts"], "2026-12-07T06:31:45.428Z");
  EXPECT_EQ(line["message"], std::string("a\"b\\c\nd\x01", 8));
  EXPECT_EQ(line["level_"], "error");
  EXPECT_EQ(line["ts_"], 5);
  EXPECT_EQ(line["ok"], true);
  EXPECT_EQ(line["bad"], "\uFFFD\uFFFD");
}

TEST(EventLogTest, LevelsBelowTheMinimumAreDropped) {
  FixedClock clock;
  MemoryLogSink sink;
  EventLog log(clock, sink, LogFormat::kText, LogLevel::kWarn);
  log.Debug("a");
  log.Info("b");
  log.Warn("c");
  log.Error("d", {{"n", 1}});
  EXPECT_FALSE(log.Enabled(LogLevel::kInfo));
  EXPECT_TRUE(log.Enabled(LogLevel::kError));
  EXPECT_EQ(sink.lines(), (std::vector<std::string>{"2026-12-07T06:31:45.428Z warn c",
                                                    "2026-12-07T06:31:45.428Z error d n=1"}));
}

TEST(EventLogTest, ParsesLevelsAndFormats) {
  EXPECT_EQ(ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(ParseLogLevel("WARN"), std::nullopt);
  EXPECT_EQ(ParseLogLevel("warning"), std::nullopt);
  EXPECT_EQ(ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(ParseLogFormat("yaml"), std::nullopt);
}

}  // namespace
}  // namespace ql
