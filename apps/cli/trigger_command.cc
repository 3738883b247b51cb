#include "trigger_command.h"

#include <memory>

#include "output.h"
#include "ql/core/clock.h"
#include "ql/core/ids.h"

namespace ql::cli {
namespace {

using nlohmann::json;

std::string TriggerPath(const std::string& id) { return "/api/v1/triggers/" + UrlEncode(id); }

// Prints a published trigger answer: "<id> <state> revision <n>" ("(unchanged)" when the
// server changed nothing), or the trigger with --json.
int PrintPublished(const CliResult<HttpResponse>& response, CommandContext& context) {
  if (!response.ok()) return context.Fail(response.error());
  if (response->status < 200 || response->status > 299) {
    return context.Fail(ErrorFromResponse(response->status, response->body));
  }
  const json trigger = json::parse(response->body, nullptr, false);
  if (!trigger.is_object()) {
    return context.Fail(CliError::Failure("invalid_response", "the server's answer is not JSON"));
  }
  if (context.json()) {
    context.out() << JsonOutput(trigger) << "\n";
    return kExitOk;
  }
  context.out() << JsonText(trigger, "id") << " " << JsonText(trigger, "state") << " revision "
                << JsonText(trigger, "revision");
  // The server marks a request that changed nothing (already in that state) as replayed.
  if (response->Header("X-QL-Replayed") == "true") context.out() << " (unchanged)";
  context.out() << "\n";
  return kExitOk;
}

// The next fire time in the trigger's zone when the server gives it, else in UTC.
std::string NextFire(const json& trigger) {
  std::string local = JsonText(trigger, "next_fire_at_local", "");
  if (!local.empty()) return local;
  return JsonText(trigger, "next_fire_at");
}

}  // namespace

int TriggerAdd(const TriggerAddArgs& args, CommandContext& context) {
  json body = {
      {"task_id", args.task_id},
      {"expression", args.expression},
      {"timezone", args.timezone},
      {"enabled", !args.disabled},
      {"mutation_id", args.mutation_id.value_or(NewUuidV7(SystemClock().NowMs(), SecureRandom()))}};
  if (!args.misfire.empty()) body["misfire"] = args.misfire;
  if (!args.overlap.empty()) body["overlap"] = args.overlap;
  if (args.jitter) {
    CliResult<int64_t> ms = DurationFlag("--jitter", *args.jitter);
    if (!ms.ok()) return context.Fail(ms.error());
    body["jitter_ms"] = *ms;
  }
  if (args.name) body["name"] = *args.name;
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> trigger = (*api)->PostJson("/api/v1/triggers", body);
  if (!trigger.ok()) return context.Fail(trigger.error());
  if (context.json()) {
    context.out() << JsonOutput(*trigger) << "\n";
  } else {
    context.out() << JsonText(*trigger, "id", "") << "\n";
  }
  return kExitOk;
}

int TriggerList(const TriggerListArgs& args, CommandContext& context) {
  if (args.limit < 1) {
    return context.Fail(CliError::Usage("invalid_limit", "--limit must be at least 1"));
  }
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<Listing> triggers = ListFrom(
      **api, "/api/v1/triggers", {{"task_id", args.task_id.value_or("")}}, args.limit, args.cursor);
  if (!triggers.ok()) return context.Fail(triggers.error());
  if (context.json()) {
    context.out() << JsonOutput(triggers->ToJson()) << "\n";
    return kExitOk;
  }
  std::vector<std::string> headers = {"NAME",    "TASK",  "CRON",     "TIMEZONE",
                                      "MISFIRE", "STATE", "NEXT FIRE"};
  if (context.wide()) headers.insert(headers.begin(), "ID");
  Table table(headers);
  for (const json& trigger : triggers->items) {
    std::vector<std::string> row = {Ellipsize(JsonText(trigger, "name"), 32),
                                    NameOr(trigger, "task_name", "task_id"),
                                    JsonText(trigger, "expression"),
                                    JsonText(trigger, "timezone"),
                                    JsonText(trigger, "misfire"),
                                    JsonText(trigger, "state"),
                                    NextFire(trigger)};
    if (context.wide()) row.insert(row.begin(), JsonText(trigger, "id"));
    table.AddRow(std::move(row));
  }
  table.Print(context.out());
  return kExitOk;
}

int TriggerShow(const std::string& trigger_id, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> trigger = (*api)->GetJson(TriggerPath(trigger_id));
  if (!trigger.ok()) return context.Fail(trigger.error());
  if (context.json()) {
    context.out() << JsonOutput(*trigger) << "\n";
    return kExitOk;
  }
  Table fields({"FIELD", "VALUE"});
  if (context.wide()) fields.AddRow({"id", JsonText(*trigger, "id")});
  fields.AddRow({"name", JsonText(*trigger, "name")});
  fields.AddRow({"task", NameOr(*trigger, "task_name", "task_id") + " revision " +
                             JsonText(*trigger, "task_revision")});
  fields.AddRow({"revision", JsonText(*trigger, "revision")});
  fields.AddRow({"cron", JsonText(*trigger, "expression")});
  fields.AddRow({"timezone", JsonText(*trigger, "timezone")});
  fields.AddRow({"misfire", JsonText(*trigger, "misfire")});
  fields.AddRow({"overlap", JsonText(*trigger, "overlap", "allow")});
  const int64_t jitter_ms = trigger->value("jitter_ms", int64_t{0});
  fields.AddRow({"jitter", jitter_ms == 0 ? std::string("none")
                                          : "up to " + FormatDurationMs(jitter_ms) +
                                                " after each occurrence"});
  fields.AddRow({"enabled", JsonText(*trigger, "enabled")});
  std::string state = JsonText(*trigger, "state");
  if (state == "pin_stale") state += " (the task was republished: run `ql trigger repin`)";
  if (state == "deleted") state += " at " + JsonText(*trigger, "deleted_at");
  fields.AddRow({"state", state});
  fields.AddRow({"next fire", NextFire(*trigger)});
  fields.AddRow({"last scheduled", JsonText(*trigger, "last_scheduled_at")});
  fields.AddRow({"created", JsonText(*trigger, "created_at")});
  fields.AddRow({"updated", JsonText(*trigger, "updated_at")});
  fields.Print(context.out());
  return kExitOk;
}

int TriggerChange(const std::string& trigger_id, TriggerAction action, CommandContext& context) {
  const char* verb = action == TriggerAction::kEnable    ? "enable"
                     : action == TriggerAction::kDisable ? "disable"
                                                         : "repin";
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  return PrintPublished((*api)->Send("POST", TriggerPath(trigger_id) + "/" + verb, "{}"),
                        context);
}

int TriggerEdit(const TriggerEditArgs& args, CommandContext& context) {
  if (!args.expression && !args.timezone && !args.misfire && !args.overlap && !args.jitter &&
      !args.name) {
    return context.Fail(
        CliError::Usage("nothing_to_edit",
                        "say what to change: --cron, --tz, --misfire, --overlap, --jitter or --name"));
  }
  std::optional<int64_t> jitter_ms;
  if (args.jitter) {
    CliResult<int64_t> ms = DurationFlag("--jitter", *args.jitter);
    if (!ms.ok()) return context.Fail(ms.error());
    jitter_ms = *ms;
  }
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> current = (*api)->GetJson(TriggerPath(args.trigger_id));
  if (!current.ok()) return context.Fail(current.error());
  json body = {{"expected_revision", current->value("revision", int64_t{0})}};
  if (args.expression) body["expression"] = *args.expression;
  if (args.timezone) body["timezone"] = *args.timezone;
  if (args.misfire) body["misfire"] = *args.misfire;
  if (args.overlap) body["overlap"] = *args.overlap;
  if (jitter_ms) body["jitter_ms"] = *jitter_ms;
  if (args.name) body["name"] = *args.name;
  // The id, not the reference: a rename must not make the edit miss its trigger.
  return PrintPublished(
      (*api)->Send("POST", TriggerPath(JsonText(*current, "id")) + "/revisions", body.dump()),
      context);
}

int TriggerRemove(const std::string& trigger_ref, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<HttpResponse> response = (*api)->Send("DELETE", TriggerPath(trigger_ref), "");
  if (!response.ok()) return context.Fail(response.error());
  if (response->status < 200 || response->status > 299) {
    return context.Fail(ErrorFromResponse(response->status, response->body));
  }
  const json trigger = json::parse(response->body, nullptr, false);
  if (context.json()) {
    context.out() << JsonOutput(trigger) << "\n";
    return kExitOk;
  }
  context.out() << JsonText(trigger, "id") << " deleted";
  if (response->Header("X-QL-Replayed") == "true") context.out() << " (already)";
  context.out() << "\n";
  return kExitOk;
}

int TriggerNext(const TriggerNextArgs& args, CommandContext& context) {
  if (args.count < 1 || args.count > 100) {
    return context.Fail(CliError::Usage("invalid_count", "--count must be 1..100"));
  }
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> preview = (*api)->GetJson(
      WithQuery(TriggerPath(args.trigger_id) + "/next", {{"count", std::to_string(args.count)}}));
  if (!preview.ok()) return context.Fail(preview.error());
  if (context.json()) {
    context.out() << JsonOutput(*preview) << "\n";
    return kExitOk;
  }
  const std::string state = JsonText(*preview, "state", "");
  if (!state.empty() && state != "active") {
    context.err() << "note: trigger is " << state
                  << ": the scheduler admits none of these until it is active\n";
  }
  for (const json& time : preview->value("fire_times", json::array())) {
    std::string local = JsonText(time, "local", "");
    context.out() << (local.empty() ? JsonText(time, "at") : local) << "\n";
  }
  return kExitOk;
}

void RegisterTriggerCommands(CLI::App& app) {
  AddGlobalOptions(app);
  CLI::App* trigger =
      app.add_subcommand("trigger", "Schedule tasks: cron expressions in explicit time zones");
  trigger->require_subcommand(1);
  trigger->fallthrough();

  auto add_args = std::make_shared<TriggerAddArgs>();
  CLI::App* add = trigger->add_subcommand(
      "add", "Create a cron trigger on a task's current revision and print its id");
  add->fallthrough();
  add->add_option("task", add_args->task_id, "Task name or id")->required();
  add->add_option_function<std::string>(
      "--name", [add_args](const std::string& v) { add_args->name = v; },
      "Trigger name, unique in the project (default: the task's name and part of the id)");
  add->add_option("--cron", add_args->expression,
                  "Cron expression: 5 fields, or 6 with seconds first; quote it")
      ->required();
  add->add_option("--tz", add_args->timezone, "IANA time zone, e.g. Asia/Shanghai")->required();
  add->add_option("--misfire", add_args->misfire,
                  "After downtime: skip missed occurrences, or fire_once for the oldest "
                  "(default skip)")
      ->check(CLI::IsMember({"skip", "fire_once"}));
  add->add_option("--overlap", add_args->overlap,
                  "While a run of the trigger is unfinished: allow another (default), forbid "
                  "it (the occurrence is recorded as skipped) or replace it (cancel the old run)")
      ->check(CLI::IsMember({"allow", "forbid", "replace"}));
  add->add_option_function<std::string>(
      "--jitter", [add_args](const std::string& v) { add_args->jitter = v; },
      "Spread the runs: each occurrence's run starts up to this long after it (e.g. 30s, at "
      "most 1h), by an offset fixed per trigger and occurrence");
  add->add_flag("--disabled", add_args->disabled, "Create the trigger disabled");
  add->add_option_function<std::string>(
      "--mutation-id", [add_args](const std::string& v) { add_args->mutation_id = v; },
      "Idempotency id of this write (default: a fresh id)");
  add->callback([add, add_args] {
    RunCommand(*add, [&](CommandContext& context) { return TriggerAdd(*add_args, context); });
  });

  auto edit_args = std::make_shared<TriggerEditArgs>();
  CLI::App* edit = trigger->add_subcommand(
      "edit", "Publish a new revision of a trigger with a new expression, zone or policy");
  edit->fallthrough();
  edit->add_option("trigger", edit_args->trigger_id, "Trigger name or id")->required();
  edit->add_option_function<std::string>(
      "--name", [edit_args](const std::string& v) { edit_args->name = v; }, "Rename the trigger");
  edit->add_option_function<std::string>(
      "--cron", [edit_args](const std::string& v) { edit_args->expression = v; },
      "New cron expression (5 fields, or 6 with seconds first)");
  edit->add_option_function<std::string>(
      "--tz", [edit_args](const std::string& v) { edit_args->timezone = v; }, "New IANA zone");
  edit->add_option_function<std::string>(
          "--misfire", [edit_args](const std::string& v) { edit_args->misfire = v; },
          "skip or fire_once")
      ->check(CLI::IsMember({"skip", "fire_once"}));
  edit->add_option_function<std::string>(
          "--overlap", [edit_args](const std::string& v) { edit_args->overlap = v; },
          "allow, forbid or replace")
      ->check(CLI::IsMember({"allow", "forbid", "replace"}));
  edit->add_option_function<std::string>(
      "--jitter", [edit_args](const std::string& v) { edit_args->jitter = v; },
      "New jitter window (0s: none)");
  edit->callback([edit, edit_args] {
    RunCommand(*edit, [&](CommandContext& context) { return TriggerEdit(*edit_args, context); });
  });

  auto list_args = std::make_shared<TriggerListArgs>();
  CLI::App* list = trigger->add_subcommand("list", "List triggers");
  list->fallthrough();
  list->add_option_function<std::string>(
      "--task", [list_args](const std::string& v) { list_args->task_id = v; },
      "Only the triggers of this task (name or id)");
  list->add_option("--limit", list_args->limit, "Show at most N triggers")->capture_default_str();
  list->add_option("--cursor", list_args->cursor,
                   "Continue a listing where a --json listing's next_cursor says");
  list->callback([list, list_args] {
    RunCommand(*list, [&](CommandContext& context) { return TriggerList(*list_args, context); });
  });

  auto show_id = std::make_shared<std::string>();
  CLI::App* show = trigger->add_subcommand("show", "Show a trigger");
  show->fallthrough();
  show->add_option("trigger", *show_id, "Trigger name or id")->required();
  show->callback([show, show_id] {
    RunCommand(*show, [&](CommandContext& context) { return TriggerShow(*show_id, context); });
  });

  auto rm_ref = std::make_shared<std::string>();
  CLI::App* rm = trigger->add_subcommand(
      "rm", "Delete a trigger: it admits no more runs; its runs stay until retention");
  rm->fallthrough();
  rm->add_option("trigger", *rm_ref, "Trigger name or id")->required();
  rm->callback([rm, rm_ref] {
    RunCommand(*rm, [&](CommandContext& context) { return TriggerRemove(*rm_ref, context); });
  });

  const std::pair<const char*, TriggerAction> actions[] = {
      {"enable", TriggerAction::kEnable},
      {"disable", TriggerAction::kDisable},
      {"repin", TriggerAction::kRepin},
  };
  const char* descriptions[] = {
      "Enable a trigger (repin it first if its task was republished)",
      "Disable a trigger: it admits no more runs",
      "Pin a trigger to its task's current revision after the task was republished",
  };
  for (size_t i = 0; i < std::size(actions); ++i) {
    auto id = std::make_shared<std::string>();
    const TriggerAction action = actions[i].second;
    CLI::App* command = trigger->add_subcommand(actions[i].first, descriptions[i]);
    command->fallthrough();
    command->add_option("trigger", *id, "Trigger name or id")->required();
    command->callback([command, id, action] {
      RunCommand(*command,
                 [&](CommandContext& context) { return TriggerChange(*id, action, context); });
    });
  }

  auto next_args = std::make_shared<TriggerNextArgs>();
  CLI::App* next = trigger->add_subcommand(
      "next", "Print the next fire times the scheduler will admit for a trigger");
  next->fallthrough();
  next->add_option("trigger", next_args->trigger_id, "Trigger name or id")->required();
  next->add_option("--count", next_args->count, "How many, 1-100")->capture_default_str();
  next->callback([next, next_args] {
    RunCommand(*next, [&](CommandContext& context) { return TriggerNext(*next_args, context); });
  });
}

}  // namespace ql::cli
