#include "worker_command.h"

#include <memory>
#include <vector>

#include "output.h"
#include "ql/core/clock.h"

namespace ql::cli {
namespace {

using nlohmann::json;

std::string WorkerPath(const std::string& worker) { return "/api/v1/workers/" + UrlEncode(worker); }

std::string LabelsText(const json& worker) {
  const std::string labels = KeyValueList(worker.value("labels", json::object()));
  return labels.empty() ? "-" : labels;
}

// "running/slots": the runs it has against the runs it takes at once.
std::string SlotsText(const json& worker) {
  return JsonText(worker, "running", "0") + "/" + JsonText(worker, "slots", "0");
}

std::string YesNo(const json& object, const char* key) {
  return object.value(key, false) ? "yes" : "no";
}

}  // namespace

int WorkerList(CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> listed = (*api)->GetJson("/api/v1/workers");
  if (!listed.ok()) return context.Fail(listed.error());
  if (context.json()) {
    context.out() << JsonOutput(*listed) << "\n";
    return kExitOk;
  }
  const int64_t now = SystemClock().NowMs();
  std::vector<std::string> headers = {"NAME",  "STATE",   "POOL",     "LABELS",
                                      "SLOTS", "VERSION", "LAST SEEN"};
  if (context.wide()) headers.insert(headers.begin(), "ID");
  Table table(headers);
  for (const json& worker : listed->value("items", json::array())) {
    std::vector<std::string> row = {JsonText(worker, "name"),
                                    JsonText(worker, "state"),
                                    JsonText(worker, "pool"),
                                    Ellipsize(LabelsText(worker), 48),
                                    SlotsText(worker),
                                    JsonText(worker, "version"),
                                    RelativeTime(JsonText(worker, "last_seen", ""), now, "never")};
    if (context.wide()) row.insert(row.begin(), JsonText(worker, "id"));
    table.AddRow(std::move(row));
  }
  table.Print(context.out());
  return kExitOk;
}

int WorkerShow(const std::string& worker_ref, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> worker = (*api)->GetJson(WorkerPath(worker_ref));
  if (!worker.ok()) return context.Fail(worker.error());
  if (context.json()) {
    context.out() << JsonOutput(*worker) << "\n";
    return kExitOk;
  }
  const json& w = *worker;
  const int64_t now = SystemClock().NowMs();
  std::string runs;
  for (const json& run : w.value("running_runs", json::array())) {
    if (!runs.empty()) runs += ", ";
    runs += run.is_string() ? run.get<std::string>() : run.dump();
  }
  const std::string last_seen = JsonText(w, "last_seen", "");
  Table fields({"FIELD", "VALUE"});
  fields.AddRow({"id", JsonText(w, "id")});
  fields.AddRow({"name", JsonText(w, "name")});
  fields.AddRow({"state", JsonText(w, "state")});
  fields.AddRow({"pool", JsonText(w, "pool")});
  fields.AddRow({"labels", LabelsText(w)});
  fields.AddRow({"version", JsonText(w, "version")});
  fields.AddRow({"slots", JsonText(w, "slots", "0") + " (" + JsonText(w, "available_slots", "0") +
                              " available)"});
  fields.AddRow({"running", JsonText(w, "running", "0")});
  fields.AddRow({"running runs", runs.empty() ? "-" : runs});
  fields.AddRow({"last seen", last_seen.empty()
                                  ? "never"
                                  : last_seen + " (" + RelativeTime(last_seen, now) + ")"});
  fields.AddRow({"live", YesNo(w, "live")});
  fields.AddRow({"drained", w.value("drained", false) ? "yes, at " + JsonText(w, "drained_at")
                                                      : std::string("no")});
  fields.AddRow({"revoked", YesNo(w, "revoked")});
  fields.AddRow({"session", JsonText(w, "session_id")});
  fields.AddRow({"generation", JsonText(w, "generation")});
  fields.AddRow({"created", JsonText(w, "created_at")});
  fields.Print(context.out());
  return kExitOk;
}

int WorkerDrain(const std::string& worker_ref, bool drain, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> worker =
      (*api)->PostJson(WorkerPath(worker_ref) + (drain ? "/drain" : "/resume"), json::object());
  if (!worker.ok()) return context.Fail(worker.error());
  if (context.json()) {
    context.out() << JsonOutput(*worker) << "\n";
    return kExitOk;
  }
  context.out() << "worker " << JsonText(*worker, "name") << " "
                << (drain ? "drained: it takes no new runs" : "resumed: it takes runs again")
                << " (state " << JsonText(*worker, "state") << ", "
                << JsonText(*worker, "running", "0") << " running)\n";
  return kExitOk;
}

void RegisterWorkerCommands(CLI::App& app) {
  AddGlobalOptions(app);
  CLI::App* worker = app.add_subcommand(
      "worker", "Remote workers: list, inspect, drain and resume them (installation admin)");
  worker->require_subcommand(1);
  worker->fallthrough();

  CLI::App* list = worker->add_subcommand(
      "list", "List the workers: state, pool, labels, slots in use, last heartbeat");
  list->fallthrough();
  list->callback(
      [list] { RunCommand(*list, [](CommandContext& context) { return WorkerList(context); }); });

  auto show_ref = std::make_shared<std::string>();
  CLI::App* show =
      worker->add_subcommand("show", "Show a worker, with the ids of the runs it is running");
  show->fallthrough();
  show->add_option("worker", *show_ref, "Worker name or id")->required();
  show->callback([show, show_ref] {
    RunCommand(*show, [&](CommandContext& context) { return WorkerShow(*show_ref, context); });
  });

  for (const bool drain : {true, false}) {
    auto ref = std::make_shared<std::string>();
    CLI::App* command = worker->add_subcommand(
        drain ? "drain" : "resume",
        drain ? "Drain a worker: it takes no new runs; the runs it has finish"
              : "Resume a drained worker: it takes runs again");
    command->fallthrough();
    command->add_option("worker", *ref, "Worker name or id")->required();
    command->callback([command, ref, drain] {
      RunCommand(*command,
                 [&](CommandContext& context) { return WorkerDrain(*ref, drain, context); });
    });
  }
}

}  // namespace ql::cli
