#include "output.h"

#include <gtest/gtest.h>

#include <sstream>

namespace ql::cli {
namespace {

TEST(ParseDurationMsTest, ReadsEveryUnitAndPlainMilliseconds) {
  EXPECT_EQ(ParseDurationMs("500ms"), 500);
  EXPECT_EQ(ParseDurationMs("30s"), 30'000);
  EXPECT_EQ(ParseDurationMs("5m"), 300'000);
  EXPECT_EQ(ParseDurationMs("2h"), 7'200'000);
  EXPECT_EQ(ParseDurationMs("1d"), 86'400'000);
  EXPECT_EQ(ParseDurationMs("1500"), 1'500);
  EXPECT_EQ(ParseDurationMs("0"), 0);
  EXPECT_EQ(ParseDurationMs("400d"), int64_t{400} * 86'400'000);
}

TEST(ParseDurationMsTest, ReadsCompoundDurationsInDecreasingUnits) {
  EXPECT_EQ(ParseDurationMs("1h30m"), 5'400'000);
  EXPECT_EQ(ParseDurationMs("2m30s"), 150'000);
  EXPECT_EQ(ParseDurationMs("1d2h3m4s5ms"), 86'400'000 + 7'200'000 + 180'000 + 4'000 + 5);
  EXPECT_EQ(ParseDurationMs("1m500ms"), 60'500);
}

TEST(ParseDurationMsTest, RejectsMalformedText) {
  for (const char* bad :
       {"",     "s",  "ms",   "-5s",  "+5s",   "1.5s",   "5 s", " 5s", "5s ",  "5x",
        "5sec", "5S", "1m1h", "1s1s", "5ms5s", "1h 30m", "1hh", "h1",  "0x10", "5m-1s"}) {
    EXPECT_EQ(ParseDurationMs(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(ParseDurationMsTest, RejectsValuesThatOverflow) {
  EXPECT_EQ(ParseDurationMs("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(ParseDurationMs("9223372036854775808"), std::nullopt);
  EXPECT_EQ(ParseDurationMs("106751991167301d"), std::nullopt);
  EXPECT_EQ(ParseDurationMs("106751991167d23h59m59s999ms"), std::nullopt);
}

TEST(SecondsFlagTest, ReadsPlainSecondsAndDurationsInWholeSeconds) {
  EXPECT_EQ(*SecondsFlag("--after", "90"), 90);
  EXPECT_EQ(*SecondsFlag("--after", "0"), 0);
  EXPECT_EQ(*SecondsFlag("--after", "90s"), 90);
  EXPECT_EQ(*SecondsFlag("--after", "10m"), 600);
  EXPECT_EQ(*SecondsFlag("--after", "2h"), 7'200);
  EXPECT_EQ(*SecondsFlag("--after", "1d"), 86'400);
  EXPECT_EQ(*SecondsFlag("--after", "1h30m"), 5'400);
  EXPECT_EQ(*SecondsFlag("--after", "2000ms"), 2);
}

TEST(SecondsFlagTest, RefusesOtherTextNamingTheFlag) {
  for (const char* bad : {"", "500ms", "1s500ms", "1.5m", "-5", "+5", "5 m", "10 minutes", "m",
                          "99999999999999999999"}) {
    CliResult<int64_t> seconds = SecondsFlag("--min-interval", bad);
    ASSERT_FALSE(seconds.ok()) << "'" << bad << "'";
    EXPECT_EQ(seconds.error().exit_code(), kExitUsage);
    EXPECT_EQ(seconds.error().reason(), "invalid_duration");
    EXPECT_EQ(seconds.error().message().rfind("--min-interval '" + std::string(bad) + "'", 0), 0u);
  }
}

TEST(FormatDurationMsTest, WritesExactPartsThatParseBack) {
  EXPECT_EQ(FormatDurationMs(0), "0ms");
  EXPECT_EQ(FormatDurationMs(500), "500ms");
  EXPECT_EQ(FormatDurationMs(30'000), "30s");
  EXPECT_EQ(FormatDurationMs(1'500), "1s500ms");
  EXPECT_EQ(FormatDurationMs(5'400'000), "1h30m");
  EXPECT_EQ(FormatDurationMs(86'400'000), "1d");
  for (int64_t ms : {int64_t{1}, int64_t{999}, int64_t{61'001}, int64_t{90'061'001},
                     int64_t{365} * 86'400'000}) {
    EXPECT_EQ(ParseDurationMs(FormatDurationMs(ms)), ms) << ms;
  }
}

TEST(FormatElapsedMsTest, RoundsToAReadableUnit) {
  EXPECT_EQ(FormatElapsedMs(850), "850ms");
  EXPECT_EQ(FormatElapsedMs(4'250), "4.2s");
  EXPECT_EQ(FormatElapsedMs(187'000), "3m07s");
  EXPECT_EQ(FormatElapsedMs(7'500'000), "2h05m");
  EXPECT_EQ(FormatElapsedMs(3 * 86'400'000 + 4 * 3'600'000 + 1), "3d04h");
  EXPECT_EQ(FormatElapsedMs(-5), "0ms");
}

std::string Render(const Table& table) {
  std::ostringstream out;
  table.Print(out);
  return out.str();
}

TEST(TableTest, AlignsColumnsToTheWidestCellWithoutTrailingSpaces) {
  Table table({"ID", "STATUS", "EXIT"});
  table.AddRow({"a", "succeeded", "0"});
  table.AddRow({"bbbb", "failed", ""});
  EXPECT_EQ(Render(table),
            "ID    STATUS     EXIT\n"
            "a     succeeded  0\n"
            "bbbb  failed\n");
}

TEST(TableTest, CountsWideCharactersAsTwoColumns) {
  Table table({"NAME", "ID"});
  table.AddRow({"备份数据库", "1"});
  table.AddRow({"backup", "2"});
  // "备份数据库" is five wide characters: ten columns.
  EXPECT_EQ(Render(table),
            "NAME        ID\n"
            "备份数据库  1\n"
            "backup      2\n");
}

TEST(TableTest, EscapesControlCharactersSoRowsStayOnOneLine) {
  Table table({"COMMAND", "X"});
  table.AddRow({"echo a\necho b\t\x1b[31mred", "1"});
  const std::string out = Render(table);
  EXPECT_EQ(out, "COMMAND" + std::string(22, ' ') + "X\n" + "echo a\\necho b\\t\\x1b[31mred  1\n");
}

TEST(TableTest, PadsMissingCellsAndDropsExtraOnes) {
  Table table({"A", "B"});
  table.AddRow({"1"});
  table.AddRow({"2", "3", "4"});
  EXPECT_EQ(Render(table), "A  B\n1\n2  3\n");
}

TEST(PrintableCellTest, KeepsValidTextAndEscapesInvalidBytesAndBidiOverrides) {
  EXPECT_EQ(PrintableCell("héllo 世界"), "héllo 世界");
  EXPECT_EQ(PrintableCell(std::string("a\xff"
                                      "b")),
            "a\\xffb");
  EXPECT_EQ(PrintableCell("abc\u202Edef"), "abc\\u202edef");
  EXPECT_EQ(PrintableCell(std::string("\xc3")), "\\xc3");  // truncated sequence
}

TEST(DisplayWidthTest, CountsColumnsNotBytes) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("é"), 1u);
  EXPECT_EQ(DisplayWidth("e\u0301"), 1u);  // combining acute accent
  EXPECT_EQ(DisplayWidth("世界"), 4u);
  EXPECT_EQ(DisplayWidth("ＡＢ"), 4u);  // fullwidth forms
}

TEST(EllipsizeTest, CutsToTheColumnBudgetAndMarksTheCut) {
  EXPECT_EQ(Ellipsize("short", 10), "short");
  EXPECT_EQ(Ellipsize("exactly10!", 10), "exactly10!");
  EXPECT_EQ(Ellipsize("echo hello world", 10), "echo hell…");
  EXPECT_EQ(Ellipsize("世界你好", 5), "世界…");
  EXPECT_EQ(DisplayWidth(Ellipsize("世界你好", 4)), 3u);
}

TEST(JsonTextTest, RendersEachJsonTypeAndFallsBackOnNullOrAbsent) {
  const nlohmann::json run = {
      {"id", "r1"}, {"exit_code", 7}, {"enabled", false}, {"trigger_id", nullptr}};
  EXPECT_EQ(JsonText(run, "id"), "r1");
  EXPECT_EQ(JsonText(run, "exit_code"), "7");
  EXPECT_EQ(JsonText(run, "enabled"), "false");
  EXPECT_EQ(JsonText(run, "trigger_id"), "-");
  EXPECT_EQ(JsonText(run, "missing", ""), "");
  EXPECT_EQ(JsonText(nlohmann::json::array(), "id"), "-");
}

TEST(JsonElapsedTest, SubtractsTwoRfc3339Fields) {
  const nlohmann::json run = {{"started_at", "2026-03-08T07:00:00Z"},
                              {"finished_at", "2026-03-08T07:03:07.500Z"},
                              {"queued_at", "bogus"}};
  EXPECT_EQ(JsonElapsed(run, "started_at", "finished_at"), "3m07s");
  EXPECT_EQ(JsonElapsed(run, "queued_at", "finished_at"), "-");
  EXPECT_EQ(JsonElapsed(run, "started_at", "missing", "running"), "running");
}

TEST(ShortIdsTest, OneLengthThatTellsTheRunsApartAndCoversWhatTheServerFoundUnique) {
  const std::vector<std::string> ids = {"019ca86a-3a60-78bc-be53-37cf59c55371",
                                        "019ca86a-3a61-7000-8000-000000000000",
                                        "019ca86b-0000-7000-8000-000000000000"};
  EXPECT_EQ(ShortIds({ids[2]}), std::vector<std::string>{"019ca86b"});
  EXPECT_EQ(ShortIds(ids),
            (std::vector<std::string>{"019ca86a-3a60", "019ca86a-3a61", "019ca86b-0000"}));
  // The listed runs differ in 8 characters, but a run of another task shares 10 with the first:
  // the server's prefix for it sets the length (and never on a dash).
  EXPECT_EQ(ShortIds({ids[0], ids[2]}, {"019ca86a-3a", ""}),
            (std::vector<std::string>{"019ca86a-3a", "019ca86b-00"}));
  EXPECT_EQ(ShortIds({ids[0], ids[2]}, {"019ca86a", "019ca86b"}),
            (std::vector<std::string>{"019ca86a", "019ca86b"}));
}

}  // namespace
}  // namespace ql::cli
