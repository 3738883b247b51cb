#include "retention_command.h"

#include <charconv>
#include <memory>

#include "output.h"

namespace ql::cli {
namespace {

using nlohmann::json;

CliResult<json> Value(const std::string& flag, const std::string& text) {
  if (text == "inherit") return json(nullptr);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1) {
    return CliError::Usage("invalid_arguments",
                           flag + " takes a positive number or `inherit`, got '" + text + "'");
  }
  return json(value);
}

// "7 days (set here)" or "30 days (inherited)".
std::string Describe(const json& answer, const char* field, const char* unit) {
  const json& stored = answer.value(field, json(nullptr));
  return JsonText(answer["effective"], field) + unit +
         (stored.is_null() ? " (inherited)" : " (set here)");
}

}  // namespace

CliResult<json> BuildRetentionBody(const RetentionArgs& args) {
  json body = json::object();
  if (args.keep_days.has_value()) {
    CliResult<json> value = Value("--keep-days", *args.keep_days);
    if (!value.ok()) return value.error();
    body["keep_days"] = *value;
  }
  if (args.keep_runs.has_value()) {
    CliResult<json> value = Value("--keep-runs", *args.keep_runs);
    if (!value.ok()) return value.error();
    body["keep_runs"] = *value;
  }
  return body;
}

int RetentionSet(const RetentionArgs& args, bool task, CommandContext& context) {
  CliResult<json> body = BuildRetentionBody(args);
  if (!body.ok()) return context.Fail(body.error());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  const std::string path = std::string(task ? "/api/v1/tasks/" : "/api/v1/projects/") +
                           UrlEncode(args.target) + "/retention";
  CliResult<json> answer = body->empty() ? (*api)->GetJson(path) : (*api)->PostJson(path, *body);
  if (!answer.ok()) return context.Fail(answer.error());
  if (context.json()) {
    context.out() << JsonOutput(*answer) << "\n";
    return kExitOk;
  }
  context.out() << (task ? "task " : "project ") << args.target << ": keep finished runs "
                << Describe(*answer, "keep_days", " days") << ", at most "
                << Describe(*answer, "keep_runs", " runs per task") << "\n";
  return kExitOk;
}

void AddRetentionSetCommand(CLI::App& parent, bool task) {
  auto args = std::make_shared<RetentionArgs>();
  CLI::App* set = parent.add_subcommand(
      "set", task ? "Show or change how many finished runs of a task are kept"
                  : "Show or change how long finished runs of a project are kept");
  set->fallthrough();
  set->add_option("target", args->target, task ? "Task id" : "Project name or id")->required();
  set->add_option_function<std::string>(
      "--keep-days", [args](const std::string& v) { args->keep_days = v; },
      "Keep finished runs N days (default 30), or `inherit`");
  set->add_option_function<std::string>(
      "--keep-runs", [args](const std::string& v) { args->keep_runs = v; },
      "Keep at most K runs per task (default 1000), or `inherit`");
  set->callback([set, args, task] {
    RunCommand(*set, [&](CommandContext& context) { return RetentionSet(*args, task, context); });
  });
}

}  // namespace ql::cli
