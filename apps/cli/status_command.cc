#include "status_command.h"

#include "output.h"
#include "ql/core/states.h"

namespace ql::cli {

using nlohmann::json;

int Status(CommandContext& context) {
  CliResult<ApiClient*> api_result = context.Api();
  if (!api_result.ok()) return context.Fail(api_result.error());
  ApiClient& api = **api_result;
  const Connection& connection = api.connection();

  CliResult<HttpResponse> ready = api.Send("GET", "/readyz");
  if (!ready.ok()) return context.Fail(ready.error());
  const bool is_ready = ready->status == 200;

  json out = json::object();
  if (is_ready) {
    CliResult<json> status = api.GetJson("/api/v1/status");
    if (!status.ok()) return context.Fail(status.error());
    if (status->is_object()) out = *status;
  } else {
    const CliError why = ErrorFromResponse(ready->status, ready->body);
    out["not_ready"] = {{"code", why.reason()}, {"message", why.message()}};
  }
  out["server"] = connection.server.url;
  out["ready"] = is_ready;

  if (context.json()) {
    context.out() << JsonOutput(out) << "\n";
    return is_ready ? kExitOk : kExitFailure;
  }
  Table fields({"FIELD", "VALUE"});
  fields.AddRow({"server", connection.server.url + " (from " + connection.server_source + ")"});
  if (!is_ready) {
    fields.AddRow({"ready", "no: " + JsonText(out["not_ready"], "code") + ": " +
                                JsonText(out["not_ready"], "message")});
    fields.Print(context.out());
    return kExitFailure;
  }
  fields.AddRow({"ready", "yes"});
  const json project = out.value("project", json::object());
  fields.AddRow({"project", JsonText(project, "name") + " (" + JsonText(project, "slug") + ")"});
  fields.AddRow({"executor", JsonText(out, "executor_type")});
  fields.AddRow({"server time", JsonText(out, "now")});
  fields.AddRow({"enabled triggers", JsonText(out, "enabled_triggers")});
  // Enabled, but pinned to a task revision that is no longer current: they admit nothing.
  const int64_t stale = out.value("stale_triggers", int64_t{0});
  if (stale > 0) {
    fields.AddRow({"stale triggers", std::to_string(stale) +
                                         " (admit nothing until repinned: ql trigger repin NAME)"});
  }
  fields.AddRow({"runs", JsonText(out, "runs_total")});
  if (out.contains("command_isolation") && out["command_isolation"].is_object()) {
    fields.AddRow({"command isolation", JsonText(out["command_isolation"], "level") + ": " +
                                            JsonText(out["command_isolation"], "detail")});
  }
  fields.Print(context.out());

  const json by_status = out.value("runs_by_status", json::object());
  if (by_status.is_object() && !by_status.empty()) {
    context.out() << "\n";
    Table runs({"STATUS", "RUNS"});
    // In state-machine order rather than the alphabetical order of a JSON object.
    for (RunStatus state : kAllRunStatuses) {
      const std::string name(RunStatusName(state));
      if (by_status.contains(name)) runs.AddRow({name, JsonText(by_status, name)});
    }
    for (const auto& [name, count] : by_status.items()) {
      if (!ParseRunStatus(name)) runs.AddRow({name, JsonText(by_status, name)});
    }
    runs.Print(context.out());
  }
  return kExitOk;
}

void RegisterStatusCommand(CLI::App& app) {
  AddGlobalOptions(app);
  CLI::App* status =
      app.add_subcommand("status", "Show whether the server is ready, with run counts");
  status->fallthrough();
  status->callback(
      [status] { RunCommand(*status, [](CommandContext& context) { return Status(context); }); });
}

}  // namespace ql::cli
