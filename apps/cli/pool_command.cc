#include "pool_command.h"

#include <map>
#include <memory>
#include <vector>

#include "output.h"

namespace ql::cli {
namespace {

using nlohmann::json;

std::string PoolPath(const std::string& pool) { return "/api/v1/pools/" + UrlEncode(pool); }

std::string MaxRunningText(const json& object) {
  return JsonText(object, "max_running", "unlimited");
}

std::string YesNo(const json& object, const char* key) {
  return object.value(key, false) ? "yes" : "no";
}

// "serves every project" or "granted projects only", and the pool-wide limit.
std::string PoolSummary(const json& pool) {
  return std::string(pool.value("serves_all_projects", false) ? "serves every project"
                                                              : "granted projects only") +
         ", max running " + MaxRunningText(pool);
}

// Returns project slugs by id, to name grants by; empty when the projects cannot be listed (the
// grants are then shown by id).
std::map<std::string, std::string> ProjectSlugs(ApiClient& api) {
  std::map<std::string, std::string> slugs;
  CliResult<json> listed = api.GetJson("/api/v1/projects");
  if (!listed.ok() || !listed->is_object()) return slugs;
  for (const json& project : listed->value("items", json::array())) {
    const std::string id = JsonText(project, "id", "");
    const std::string slug = JsonText(project, "slug", "");
    if (!id.empty() && !slug.empty()) slugs[id] = slug;
  }
  return slugs;
}

bool AnyGrants(const json& pools) {
  for (const json& pool : pools) {
    if (!pool.value("grants", json::array()).empty()) return true;
  }
  return false;
}

std::string ProjectName(const std::map<std::string, std::string>& slugs, const std::string& id) {
  const auto it = slugs.find(id);
  return it == slugs.end() ? id : it->second;
}

// The project a grant or a revoke is for: the subcommand's --project, else the global one.
CliResult<std::string> GrantProject(const std::optional<std::string>& project,
                                    CommandContext& context, const char* verb) {
  if (project && !project->empty()) return *project;
  if (context.options().project && !context.options().project->empty()) {
    return *context.options().project;
  }
  return CliError::Usage("project_required", std::string("name the project to ") + verb +
                                                 ": --project P (a project name or id)");
}

}  // namespace

CliResult<json> BuildPoolSetBody(const PoolSetArgs& args) {
  if (args.open && args.granted_only) {
    return CliError::Usage("flag_conflict", "give either --open or --granted-only, not both");
  }
  if (args.max_running && args.no_max_running) {
    return CliError::Usage("flag_conflict",
                           "give either --max-running or --no-max-running, not both");
  }
  json body = json::object();
  if (args.open) body["serves_all_projects"] = true;
  if (args.granted_only) body["serves_all_projects"] = false;
  if (args.max_running) body["max_running"] = *args.max_running;
  if (args.no_max_running) body["max_running"] = nullptr;
  if (body.empty()) {
    return CliError::Usage("flag_required",
                           "nothing to set: give --open or --granted-only, and/or --max-running N "
                           "or --no-max-running (ql pool show " +
                               args.pool + " shows the pool)");
  }
  return body;
}

int PoolList(CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> listed = (*api)->GetJson("/api/v1/pools");
  if (!listed.ok()) return context.Fail(listed.error());
  if (context.json()) {
    context.out() << JsonOutput(*listed) << "\n";
    return kExitOk;
  }
  const json pools = listed->value("items", json::array());
  const std::map<std::string, std::string> slugs =
      AnyGrants(pools) ? ProjectSlugs(**api) : std::map<std::string, std::string>();
  Table table({"POOL", "OPEN", "MAX RUNNING", "GRANTS", "WORKERS", "RUNNING"});
  for (const json& pool : pools) {
    std::string grants;
    for (const json& grant : pool.value("grants", json::array())) {
      if (!grants.empty()) grants += ",";
      grants += ProjectName(slugs, JsonText(grant, "project_id"));
    }
    table.AddRow({JsonText(pool, "name"), YesNo(pool, "serves_all_projects"), MaxRunningText(pool),
                  grants.empty() ? "-" : Ellipsize(grants, 48), JsonText(pool, "live_workers", "0"),
                  JsonText(pool, "running", "0")});
  }
  table.Print(context.out());
  return kExitOk;
}

int PoolShow(const std::string& pool_name, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> pool = (*api)->GetJson(PoolPath(pool_name));
  if (!pool.ok()) return context.Fail(pool.error());
  if (context.json()) {
    context.out() << JsonOutput(*pool) << "\n";
    return kExitOk;
  }
  const json grants = pool->value("grants", json::array());
  Table fields({"FIELD", "VALUE"});
  fields.AddRow({"name", JsonText(*pool, "name")});
  fields.AddRow({"configured", pool->value("configured", false)
                                   ? "yes"
                                   : "no: only workers name it; it serves no project"});
  fields.AddRow({"open", pool->value("serves_all_projects", false) ? "yes: serves every project"
                                                                   : "no: granted projects only"});
  fields.AddRow({"max running", MaxRunningText(*pool)});
  fields.AddRow({"live workers", JsonText(*pool, "live_workers", "0")});
  fields.AddRow({"running", JsonText(*pool, "running", "0")});
  fields.Print(context.out());
  context.out() << "\n";
  if (grants.empty()) {
    context.out() << "no grants\n";
    return kExitOk;
  }
  const std::map<std::string, std::string> slugs = ProjectSlugs(**api);
  std::vector<std::string> headers = {"PROJECT",    "MAX RUNNING", "WEIGHT",
                                      "GRANTED BY", "GRANTED",     "UPDATED"};
  if (context.wide()) headers.insert(headers.begin() + 1, "PROJECT ID");
  Table table(headers);
  for (const json& grant : grants) {
    const std::string id = JsonText(grant, "project_id");
    std::vector<std::string> row = {ProjectName(slugs, id),        MaxRunningText(grant),
                                    JsonText(grant, "weight"),     JsonText(grant, "created_by"),
                                    JsonText(grant, "created_at"), JsonText(grant, "updated_at")};
    if (context.wide()) row.insert(row.begin() + 1, id);
    table.AddRow(std::move(row));
  }
  table.Print(context.out());
  return kExitOk;
}

int PoolGrant(const PoolGrantArgs& args, CommandContext& context) {
  CliResult<std::string> project = GrantProject(args.project, context, "grant the pool to");
  if (!project.ok()) return context.Fail(project.error());
  json body = {{"project", *project}};
  if (args.max_running) body["max_running"] = *args.max_running;
  if (args.weight) body["weight"] = *args.weight;
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> grant = (*api)->PostJson(PoolPath(args.pool) + "/grants", body);
  if (!grant.ok()) return context.Fail(grant.error());
  if (context.json()) {
    context.out() << JsonOutput(*grant) << "\n";
    return kExitOk;
  }
  const std::string id = JsonText(*grant, "project_id");
  context.out() << "pool " << JsonText(*grant, "pool") << " granted to project " << *project
                << (id == *project ? std::string() : " (" + id + ")") << ": max running "
                << MaxRunningText(*grant) << ", weight " << JsonText(*grant, "weight") << "\n";
  return kExitOk;
}

int PoolRevoke(const PoolRevokeArgs& args, CommandContext& context) {
  CliResult<std::string> project = GrantProject(args.project, context, "revoke the grant of");
  if (!project.ok()) return context.Fail(project.error());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> pool =
      (*api)->PostJson(PoolPath(args.pool) + "/revoke", json{{"project", *project}});
  if (!pool.ok()) return context.Fail(pool.error());
  if (context.json()) {
    context.out() << JsonOutput(*pool) << "\n";
    return kExitOk;
  }
  context.out() << "pool " << JsonText(*pool, "name") << " no longer granted to project "
                << *project << " (" << PoolSummary(*pool) << ")\n";
  return kExitOk;
}

int PoolSet(const PoolSetArgs& args, CommandContext& context) {
  CliResult<json> body = BuildPoolSetBody(args);
  if (!body.ok()) return context.Fail(body.error());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> pool = (*api)->PostJson(PoolPath(args.pool), *body);
  if (!pool.ok()) return context.Fail(pool.error());
  if (context.json()) {
    context.out() << JsonOutput(*pool) << "\n";
    return kExitOk;
  }
  context.out() << "pool " << JsonText(*pool, "name") << ": " << PoolSummary(*pool) << "\n";
  return kExitOk;
}

void RegisterPoolCommands(CLI::App& app) {
  AddGlobalOptions(app);
  CLI::App* pool = app.add_subcommand(
      "pool", "Worker pools: which projects may run on them and how much (installation admin)");
  pool->require_subcommand(1);
  pool->fallthrough();

  CLI::App* list = pool->add_subcommand("list", "List the pools: grants, limits, live workers");
  list->fallthrough();
  list->callback(
      [list] { RunCommand(*list, [](CommandContext& context) { return PoolList(context); }); });

  auto show_name = std::make_shared<std::string>();
  CLI::App* show = pool->add_subcommand("show", "Show a pool and its grants");
  show->fallthrough();
  show->add_option("pool", *show_name, "Pool name")->required();
  show->callback([show, show_name] {
    RunCommand(*show, [&](CommandContext& context) { return PoolShow(*show_name, context); });
  });

  auto grant_args = std::make_shared<PoolGrantArgs>();
  CLI::App* grant = pool->add_subcommand(
      "grant", "Let a project run on a pool (again: change the grant's limit or weight)");
  grant->fallthrough();
  grant->add_option("pool", grant_args->pool, "Pool name")->required();
  grant
      ->add_option_function<std::string>(
          "--project", [grant_args](const std::string& v) { grant_args->project = v; },
          "The project granted the pool, by name or id")
      ->type_name("P");
  grant
      ->add_option_function<int64_t>(
          "--max-running", [grant_args](const int64_t& v) { grant_args->max_running = v; },
          "At most N of the project's runs on the pool at once (default: no limit of its own)")
      ->type_name("N");
  grant
      ->add_option_function<int64_t>(
          "--weight", [grant_args](const int64_t& v) { grant_args->weight = v; },
          "The project's share when projects wait for the pool, 1-100 (default 1)")
      ->type_name("W");
  grant->callback([grant, grant_args] {
    RunCommand(*grant, [&](CommandContext& context) { return PoolGrant(*grant_args, context); });
  });

  auto revoke_args = std::make_shared<PoolRevokeArgs>();
  CLI::App* revoke = pool->add_subcommand(
      "revoke", "Take a pool's grant from a project: its queued runs there wait");
  revoke->fallthrough();
  revoke->add_option("pool", revoke_args->pool, "Pool name")->required();
  revoke
      ->add_option_function<std::string>(
          "--project", [revoke_args](const std::string& v) { revoke_args->project = v; },
          "The project whose grant is revoked, by name or id")
      ->type_name("P");
  revoke->callback([revoke, revoke_args] {
    RunCommand(*revoke, [&](CommandContext& context) { return PoolRevoke(*revoke_args, context); });
  });

  auto set_args = std::make_shared<PoolSetArgs>();
  CLI::App* set = pool->add_subcommand(
      "set", "Change a pool: open to every project or granted ones only, its running limit");
  set->fallthrough();
  set->add_option("pool", set_args->pool, "Pool name")->required();
  set->add_flag("--open", set_args->open, "Serve every project, granted or not");
  set->add_flag("--granted-only", set_args->granted_only, "Serve only projects granted the pool");
  set->add_option_function<int64_t>(
         "--max-running", [set_args](const int64_t& v) { set_args->max_running = v; },
         "At most N runs on the pool at once, all projects together")
      ->type_name("N");
  set->add_flag("--no-max-running", set_args->no_max_running, "No pool-wide running limit");
  set->callback([set, set_args] {
    RunCommand(*set, [&](CommandContext& context) { return PoolSet(*set_args, context); });
  });
}

}  // namespace ql::cli
