#include "governance_command.h"

#include <memory>
#include <optional>
#include <string>

#include "client.h"
#include "output.h"
#include "retention_command.h"
#include "session_command.h"

namespace ql::cli {
namespace {

using nlohmann::json;

// Runs `body` with the API client of `context`; prints its JSON answer with --json.
int WithApi(CommandContext& context, const std::function<int(ApiClient&)>& body) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  return body(**api);
}

// Prints `value` as JSON (with --json) or hands it to `table`.
int Print(CommandContext& context, const json& value,
          const std::function<void(const json&)>& table) {
  if (context.json()) {
    context.out() << JsonOutput(value) << "\n";
  } else {
    table(value);
  }
  return kExitOk;
}

json Items(const json& answer) {
  return answer.is_object() && answer.contains("items") ? answer["items"] : json::array();
}

void PrintPrincipals(CommandContext& context, const json& items) {
  Table table({"NAME", "KIND", "STATUS", "ID"});
  for (const json& p : items) {
    table.AddRow({JsonText(p, "name"), JsonText(p, "kind"), JsonText(p, "status"),
                  JsonText(p, "id")});
  }
  table.Print(context.out());
}

// The scope flags of `role`: the global --project, or --installation.
struct ScopeArgs {
  bool installation = false;
};

std::string ScopePath(CommandContext& context, const ScopeArgs& scope) {
  if (scope.installation) return "/api/v1/installation/bindings";
  const std::string project = context.options().project.value_or("default");
  return "/api/v1/projects/" + UrlEncode(project) + "/bindings";
}

int WriteRole(CommandContext& context, const ScopeArgs& scope, const std::string& principal,
              const std::string& role) {
  return WithApi(context, [&](ApiClient& api) {
    CliResult<json> written =
        api.PostJson(ScopePath(context, scope), json{{"principal", principal}, {"role", role}});
    if (!written.ok()) return context.Fail(written.error());
    return Print(context, *written, [&](const json& b) {
      context.out() << "principal " << principal << " now holds role " << JsonText(b, "role")
                    << " in " << (scope.installation ? "the installation" : "the project")
                    << " (binding version " << JsonText(b, "version") << ")\n";
    });
  });
}

void AddWhoami(CLI::App& app) {
  CLI::App* whoami = app.add_subcommand("whoami", "Show the principal of the token and its roles");
  whoami->fallthrough();
  whoami->callback([whoami] {
    RunCommand(*whoami, [](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> who = api.GetJson("/api/v1/whoami");
        if (!who.ok()) return context.Fail(who.error());
        return Print(context, *who, [&](const json& w) {
          const json principal = w.value("principal", json::object());
          Table table({"FIELD", "VALUE"});
          table.AddRow({"principal", JsonText(principal, "name") + " (" +
                                         JsonText(principal, "kind") + ", " +
                                         JsonText(principal, "status") + ")"});
          table.AddRow({"id", JsonText(principal, "id")});
          // How the caller signed in: a session (ql login, the panel) or an API token.
          const json session = w.value("session", json::object());
          const std::string expires = JsonText(session, "expires_at");
          table.AddRow({"signed in with",
                        (JsonText(session, "kind") == "session"
                             ? "a session (" + JsonText(session, "label") + ")"
                             : std::string("an API token")) +
                            (expires.empty() || expires == "null" ? ", no expiry"
                                                                  : ", until " + expires) +
                            " from " + context.Api().value()->connection().token_source});
          table.AddRow({"installation role", JsonText(w, "installation_role")});
          for (const json& p : w.value("projects", json::array())) {
            table.AddRow({"project " + JsonText(p, "slug"), JsonText(p, "role")});
          }
          table.Print(context.out());
        });
      });
    });
  });
}

CLI::App* AddPrincipal(CLI::App& app) {
  CLI::App* principal = app.add_subcommand("principal", "Add, list, disable principals");
  principal->require_subcommand(1);
  principal->fallthrough();

  struct AddArgs {
    std::string name;
    std::string kind = "user";
  };
  auto add_args = std::make_shared<AddArgs>();
  CLI::App* add = principal->add_subcommand("add", "Add a principal (a person or a service)");
  add->fallthrough();
  add->add_option("name", add_args->name, "Unique name")->required();
  add->add_option("--kind", add_args->kind, "user or service")->capture_default_str();
  add->callback([add, add_args] {
    RunCommand(*add, [&](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> created = api.PostJson(
            "/api/v1/principals", json{{"name", add_args->name}, {"kind", add_args->kind}});
        if (!created.ok()) return context.Fail(created.error());
        return Print(context, *created, [&](const json& p) {
          context.out() << "added " << JsonText(p, "kind") << " " << JsonText(p, "name")
                        << " (id " << JsonText(p, "id") << ")\n";
        });
      });
    });
  });

  CLI::App* list = principal->add_subcommand("list", "List principals");
  list->fallthrough();
  list->callback([list] {
    RunCommand(*list, [](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> listed = api.GetJson("/api/v1/principals");
        if (!listed.ok()) return context.Fail(listed.error());
        return Print(context, *listed, [&](const json& a) { PrintPrincipals(context, Items(a)); });
      });
    });
  });

  for (const char* verb : {"disable", "enable"}) {
    auto name = std::make_shared<std::string>();
    CLI::App* sub = principal->add_subcommand(
        verb, std::string(verb == std::string("disable") ? "Disable" : "Enable") +
                  " a principal: its tokens stop (or start again) working within seconds");
    sub->fallthrough();
    sub->add_option("name", *name, "Principal name or id")->required();
    const std::string action = verb;
    sub->callback([sub, name, action] {
      RunCommand(*sub, [&](CommandContext& context) {
        return WithApi(context, [&](ApiClient& api) {
          CliResult<json> changed =
              api.PostJson("/api/v1/principals/" + UrlEncode(*name) + "/" + action, json::object());
          if (!changed.ok()) return context.Fail(changed.error());
          return Print(context, *changed, [&](const json& p) {
            context.out() << "principal " << JsonText(p, "name") << " is "
                          << JsonText(p, "status") << "\n";
          });
        });
      });
    });
  }
  return principal;
}

void AddToken(CLI::App& app) {
  CLI::App* token = app.add_subcommand("token", "Create, list, revoke API tokens");
  token->require_subcommand(1);
  token->fallthrough();

  struct CreateArgs {
    std::string principal;
    std::string expires;
  };
  auto create_args = std::make_shared<CreateArgs>();
  CLI::App* create = token->add_subcommand("create", "Create a token (shown once)");
  create->fallthrough();
  create->add_option("--principal", create_args->principal,
                     "Principal the token is for (default: yourself)");
  create->add_option("--expires", create_args->expires,
                     "Lifetime such as 30d or 12h (default: no expiry)");
  create->callback([create, create_args] {
    RunCommand(*create, [&](CommandContext& context) {
      json body = json::object();
      if (!create_args->principal.empty()) body["principal"] = create_args->principal;
      if (!create_args->expires.empty()) {
        std::optional<int64_t> ms = ParseDurationMs(create_args->expires);
        if (!ms.has_value() || *ms <= 0) {
          return context.Fail(CliError::Usage(
              "invalid_expiry", "--expires " + ShellQuote(create_args->expires) +
                                    " is not a duration such as 30d, 12h or 90m"));
        }
        body["expires_in_ms"] = *ms;
      }
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> minted = api.PostJson("/api/v1/tokens", body);
        if (!minted.ok()) return context.Fail(minted.error());
        return Print(context, *minted, [&](const json& t) {
          context.out() << "token " << JsonText(t, "id") << " for principal "
                        << JsonText(t, "principal_id")
                        << (t.value("expires_at", json()).is_null()
                                ? std::string(", no expiry")
                                : ", expires " + JsonText(t, "expires_at"))
                        << "; it is shown once and stored only as its SHA-256 digest:\n"
                        << JsonText(t, "token") << "\n";
        });
      });
    });
  });

  CLI::App* list = token->add_subcommand("list", "List tokens (never their secrets)");
  list->fallthrough();
  list->callback([list] {
    RunCommand(*list, [](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> listed = api.GetJson("/api/v1/tokens");
        if (!listed.ok()) return context.Fail(listed.error());
        return Print(context, *listed, [&](const json& a) {
          Table table({"ID", "PRINCIPAL", "CREATED", "EXPIRES", "REVOKED", "LAST USED"});
          for (const json& t : Items(a)) {
            table.AddRow({JsonText(t, "id"), JsonText(t, "principal_id"),
                          JsonText(t, "created_at"), JsonText(t, "expires_at"),
                          JsonText(t, "revoked_at"), JsonText(t, "last_used_at")});
          }
          table.Print(context.out());
        });
      });
    });
  });

  auto revoke_id = std::make_shared<std::string>();
  CLI::App* revoke = token->add_subcommand("revoke", "Revoke a token");
  revoke->fallthrough();
  revoke->add_option("id", *revoke_id, "Token id")->required();
  revoke->callback([revoke, revoke_id] {
    RunCommand(*revoke, [&](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> revoked =
            api.PostJson("/api/v1/tokens/" + UrlEncode(*revoke_id) + "/revoke", json::object());
        if (!revoked.ok()) return context.Fail(revoked.error());
        return Print(context, *revoked, [&](const json& t) {
          context.out() << "token " << JsonText(t, "id") << " revoked at "
                        << JsonText(t, "revoked_at") << "\n";
        });
      });
    });
  });
}

void AddProject(CLI::App& app) {
  CLI::App* project =
      app.add_subcommand("project", "Add, list, archive projects and set their retention");
  project->require_subcommand(1);
  project->fallthrough();

  struct AddArgs {
    std::string slug;
    std::string name;
  };
  auto add_args = std::make_shared<AddArgs>();
  CLI::App* add = project->add_subcommand("add", "Add a project (you become its owner)");
  add->fallthrough();
  add->add_option("name", add_args->slug, "Project name: lowercase letters, digits, '-'")
      ->required();
  add->add_option("--display-name", add_args->name, "Display name (default: the name)");
  add->callback([add, add_args] {
    RunCommand(*add, [&](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        json body{{"slug", add_args->slug}};
        if (!add_args->name.empty()) body["name"] = add_args->name;
        CliResult<json> created = api.PostJson("/api/v1/projects", body);
        if (!created.ok()) return context.Fail(created.error());
        return Print(context, *created, [&](const json& p) {
          context.out() << "added project " << JsonText(p, "slug") << " (id " << JsonText(p, "id")
                        << ")\n";
        });
      });
    });
  });

  CLI::App* list = project->add_subcommand("list", "List the projects you hold a role in");
  list->fallthrough();
  list->callback([list] {
    RunCommand(*list, [](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> listed = api.GetJson("/api/v1/projects");
        if (!listed.ok()) return context.Fail(listed.error());
        return Print(context, *listed, [&](const json& a) {
          Table table({"NAME", "STATUS", "DISPLAY NAME", "ID"});
          for (const json& p : Items(a)) {
            table.AddRow({JsonText(p, "slug"), JsonText(p, "status"), JsonText(p, "name"),
                          JsonText(p, "id")});
          }
          table.Print(context.out());
        });
      });
    });
  });

  auto archive_name = std::make_shared<std::string>();
  CLI::App* archive = project->add_subcommand(
      "archive", "Archive a project: nothing more is admitted, its queued runs are cancelled");
  archive->fallthrough();
  archive->add_option("name", *archive_name, "Project name or id")->required();
  archive->callback([archive, archive_name] {
    RunCommand(*archive, [&](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> archived = api.PostJson(
            "/api/v1/projects/" + UrlEncode(*archive_name) + "/archive", json::object());
        if (!archived.ok()) return context.Fail(archived.error());
        return Print(context, *archived, [&](const json& p) {
          context.out() << "project " << JsonText(p, "slug") << " is " << JsonText(p, "status")
                        << "\n";
        });
      });
    });
  });

  AddRetentionSetCommand(*project, /*task=*/false);
}

void AddRole(CLI::App& app) {
  CLI::App* role = app.add_subcommand("role", "Grant, revoke and list roles");
  role->require_subcommand(1);
  role->fallthrough();

  struct GrantArgs {
    std::string principal;
    std::string role;
    ScopeArgs scope;
  };
  auto grant_args = std::make_shared<GrantArgs>();
  CLI::App* grant = role->add_subcommand(
      "grant", "Give a principal a role (owner, admin, operator, viewer) in the project");
  grant->fallthrough();
  grant->add_option("principal", grant_args->principal, "Principal name or id")->required();
  grant->add_option("role", grant_args->role, "owner, admin, operator or viewer")->required();
  grant->add_flag("--installation", grant_args->scope.installation,
                  "Grant installation-wide (owner or admin) instead of in the project");
  grant->callback([grant, grant_args] {
    RunCommand(*grant, [&](CommandContext& context) {
      return WriteRole(context, grant_args->scope, grant_args->principal, grant_args->role);
    });
  });

  auto revoke_args = std::make_shared<GrantArgs>();
  CLI::App* revoke = role->add_subcommand("revoke", "Take a principal's role away");
  revoke->fallthrough();
  revoke->add_option("principal", revoke_args->principal, "Principal name or id")->required();
  revoke->add_flag("--installation", revoke_args->scope.installation,
                   "Revoke the installation-wide role");
  revoke->callback([revoke, revoke_args] {
    RunCommand(*revoke, [&](CommandContext& context) {
      return WriteRole(context, revoke_args->scope, revoke_args->principal, "none");
    });
  });

  auto list_scope = std::make_shared<ScopeArgs>();
  CLI::App* list = role->add_subcommand("list", "List who holds which role");
  list->fallthrough();
  list->add_flag("--installation", list_scope->installation, "List installation-wide roles");
  list->callback([list, list_scope] {
    RunCommand(*list, [&](CommandContext& context) {
      return WithApi(context, [&](ApiClient& api) {
        CliResult<json> listed = api.GetJson(ScopePath(context, *list_scope));
        if (!listed.ok()) return context.Fail(listed.error());
        return Print(context, *listed, [&](const json& a) {
          Table table({"PRINCIPAL", "ROLE", "VERSION", "CHANGED"});
          for (const json& b : Items(a)) {
            table.AddRow({JsonText(b, "principal"), JsonText(b, "role"), JsonText(b, "version"),
                          JsonText(b, "created_at")});
          }
          table.Print(context.out());
        });
      });
    });
  });
}

void AddAudit(CLI::App& app) {
  CLI::App* audit = app.add_subcommand("audit", "Read the security audit");
  audit->require_subcommand(1);
  audit->fallthrough();
  auto limit = std::make_shared<int64_t>(50);
  CLI::App* list = audit->add_subcommand("list", "List audit facts, newest first");
  list->fallthrough();
  list->add_option("--limit", *limit, "Show at most N facts")->capture_default_str();
  list->callback([list, limit] {
    RunCommand(*list, [&](CommandContext& context) {
      if (*limit < 1) {
        return context.Fail(CliError::Usage("invalid_limit", "--limit must be at least 1"));
      }
      return WithApi(context, [&](ApiClient& api) {
        CliResult<Listing> facts = ListFrom(api, "/api/v1/audit", {}, *limit, "");
        if (!facts.ok()) return context.Fail(facts.error());
        if (context.json()) {
          context.out() << JsonOutput(facts->ToJson()) << "\n";
          return kExitOk;
        }
        Table table({"AT", "ACTOR", "ACTION", "TARGET", "OUTCOME", "CODE"});
        for (const json& f : facts->items) {
          table.AddRow({JsonText(f, "at"), NameOr(f, "actor_name", "actor_id"),
                        JsonText(f, "action"),
                        JsonText(f, "target_kind") + " " + NameOr(f, "target_name", "target_id"),
                        JsonText(f, "outcome"), JsonText(f, "code")});
        }
        table.Print(context.out());
        return kExitOk;
      });
    });
  });
}

}  // namespace

void RegisterGovernanceCommands(CLI::App& app) {
  AddGlobalOptions(app);
  AddWhoami(app);
  CLI::App* principal = AddPrincipal(app);
  RegisterSessionCommands(app, *principal);
  AddToken(app);
  AddProject(app);
  AddRole(app);
  AddAudit(app);
}

}  // namespace ql::cli
