#include "cron_command.h"

#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "client.h"
#include "ql/core/clock.h"
#include "ql/core/cron.h"
#include "ql/core/rfc3339.h"
#include "ql/core/status.h"

namespace ql::cli {
namespace {

constexpr int kMaxCount = 1000;
// Set from --json before the command runs: errors and output as JSON.
bool json_output = false;

struct CronNextOptions {
  std::string expression;
  std::string zone;
  std::string from;
  int count = 5;
};

[[noreturn]] void Fail(const Status& status, int exit_code = kExitInvalidInput) {
  std::cerr << ErrorLine(status.reason(), status.message(), json_output) << std::endl;
  throw CLI::RuntimeError(exit_code);
}

void RunCronNext(const CronNextOptions& options) {
  if (options.count < 1 || options.count > kMaxCount) {
    Fail(InvalidArgument("count_out_of_range", "--count must be between 1 and " +
                                                   std::to_string(kMaxCount) + ", got " +
                                                   std::to_string(options.count)));
  }
  Result<CronSchedule> schedule = CronSchedule::Create(options.expression, options.zone);
  if (!schedule.ok()) Fail(schedule.status());
  int64_t after = 0;
  if (options.from.empty()) {
    after = SystemClock().NowMs();
  } else {
    Result<int64_t> parsed = ParseRfc3339(options.from);
    if (!parsed.ok()) Fail(parsed.status());
    after = *parsed;
  }
  // With --json, the API's /cron/next answer: each time in UTC and in the zone's offset.
  nlohmann::json fire_times = nlohmann::json::array();
  int printed = 0;
  for (; printed < options.count; ++printed) {
    std::optional<int64_t> next = schedule->NextAfter(after);
    if (!next) break;
    if (json_output) {
      fire_times.push_back(
          {{"at", FormatRfc3339Utc(*next)}, {"local", FormatRfc3339(*next, schedule->zone())}});
    } else {
      std::cout << FormatRfc3339(*next, schedule->zone()) << '\n';
    }
    after = *next;
  }
  if (json_output && printed > 0) {
    std::cout << JsonOutput(nlohmann::json{{"expression", schedule->expression()},
                                           {"timezone", schedule->zone().name()},
                                           {"fire_times", std::move(fire_times)}})
              << '\n';
  }
  std::cout.flush();
  if (printed == 0) {
    Fail(NotFound("cron_no_next_fire", "'" + schedule->expression() + "' in " +
                                           schedule->zone().name() + " has no fire time after " +
                                           FormatRfc3339(after, schedule->zone())),
         1);
  }
}

}  // namespace

void RegisterCronCommands(CLI::App& app) {
  CLI::App* cron = app.add_subcommand("cron", "Cron expressions and time zones");
  cron->require_subcommand(1);
  cron->fallthrough();  // --json after the subcommand

  auto options = std::make_shared<CronNextOptions>();
  CLI::App* next =
      cron->add_subcommand("next", "Print the next fire times of a cron expression in a time zone");
  next->fallthrough();
  next->add_option("expression", options->expression,
                   "5 fields (minute hour day-of-month month day-of-week) or 6 with seconds "
                   "first; quote it")
      ->required();
  next->add_option("--tz", options->zone, "IANA time zone, e.g. Asia/Shanghai (required)");
  next->add_option("--from", options->from,
                   "RFC 3339 instant to start after, e.g. 2026-03-08T00:00:00Z (default: now)");
  next->add_option("--count", options->count, "number of fire times, 1-1000")
      ->capture_default_str();
  next->callback([options, next] {
    json_output = GlobalOptionsOf(*next).json;
    RunCronNext(*options);
  });
}

}  // namespace ql::cli
