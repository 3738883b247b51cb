#include "secret_command.h"

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>

#include "output.h"

namespace ql::cli {
namespace {

using nlohmann::json;

std::string SecretPath(const std::string& name) { return "/api/v1/secrets/" + UrlEncode(name); }

std::string TimeOrDash(const json& secret, const char* key) {
  return secret.contains(key) && secret[key].is_string() ? secret[key].get<std::string>() : "-";
}

int SecretSet(const std::string& name, const std::optional<std::string>& from_file,
              CommandContext& context) {
  CliResult<std::string> value = CliError::Usage("secret_value_empty", "no value was read");
  if (from_file) {
    std::ifstream file(*from_file, std::ios::binary);
    if (!file) {
      return context.Fail(
          CliError::Usage("secret_file_unreadable", "cannot read --from-file " + *from_file));
    }
    value = ReadSecretValue(file, /*strip_newline=*/false);
  } else {
    if (::isatty(STDIN_FILENO)) context.err() << "reading the value from stdin (end with Ctrl-D)\n";
    value = ReadSecretValue(std::cin, /*strip_newline=*/true);
  }
  if (!value.ok()) return context.Fail(value.error());
  std::string body = json{{"value", *value}}.dump();
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> stored = (*api)->PutJson(SecretPath(name), body);
  if (!stored.ok()) return context.Fail(stored.error());
  if (context.json()) {
    context.out() << JsonOutput(*stored) << "\n";
  } else {
    context.out() << "secret " << JsonText(*stored, "name") << " set (version "
                  << JsonText(*stored, "current_version") << ")\n";
  }
  return kExitOk;
}

int SecretList(CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> listed = (*api)->GetJson("/api/v1/secrets");
  if (!listed.ok()) return context.Fail(listed.error());
  if (context.json()) {
    context.out() << JsonOutput(*listed) << "\n";
    return kExitOk;
  }
  Table table({"NAME", "VERSION", "STATUS", "UPDATED", "DELETED"});
  for (const json& s : listed->value("items", json::array())) {
    table.AddRow({JsonText(s, "name"), JsonText(s, "current_version"), JsonText(s, "status"),
                  TimeOrDash(s, "updated_at"), TimeOrDash(s, "deleted_at")});
  }
  table.Print(context.out());
  return kExitOk;
}

int SecretRemove(const std::string& name, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> deleted = (*api)->DeleteJson(SecretPath(name));
  if (!deleted.ok()) return context.Fail(deleted.error());
  if (context.json()) {
    context.out() << JsonOutput(*deleted) << "\n";
  } else {
    context.out() << "secret " << JsonText(*deleted, "name")
                  << " deleted: the keys of its versions are destroyed\n";
  }
  return kExitOk;
}

}  // namespace

CliResult<std::string> ReadSecretValue(std::istream& in, bool strip_newline) {
  std::string value((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (strip_newline && value.ends_with('\n')) {
    value.pop_back();
    if (value.ends_with('\r')) value.pop_back();
  }
  if (value.empty()) {
    return CliError::Usage("secret_value_empty", "the secret value is empty");
  }
  try {
    (void)json(value).dump();
  } catch (const json::exception&) {
    return CliError::Usage("secret_value_invalid", "the secret value is not valid UTF-8 text");
  }
  return value;
}

void RegisterSecretCommands(CLI::App& app) {
  CLI::App* secret = app.add_subcommand("secret", "Set, list and delete secrets of a project");
  secret->require_subcommand(1);
  secret->fallthrough();

  struct SetArgs {
    std::string name;
    std::optional<std::string> from_file;
  };
  auto set_args = std::make_shared<SetArgs>();
  CLI::App* set = secret->add_subcommand(
      "set", "Set a secret's value (a new version) from stdin or --from-file");
  set->fallthrough();
  set->add_option("name", set_args->name, "Secret name")->required();
  set->add_option_function<std::string>(
      "--from-file", [set_args](const std::string& v) { set_args->from_file = v; },
      "Read the value from this file, byte for byte");
  set->callback([set, set_args] {
    RunCommand(*set, [&](CommandContext& context) {
      return SecretSet(set_args->name, set_args->from_file, context);
    });
  });

  CLI::App* list = secret->add_subcommand("list", "List secrets: names, versions, times");
  list->fallthrough();
  list->callback([list] { RunCommand(*list, [](CommandContext& context) {
                    return SecretList(context);
                  }); });

  auto rm_name = std::make_shared<std::string>();
  CLI::App* rm = secret->add_subcommand("rm", "Delete a secret (destroys every version's key)");
  rm->fallthrough();
  rm->add_option("name", *rm_name, "Secret name")->required();
  rm->callback([rm, rm_name] {
    RunCommand(*rm, [&](CommandContext& context) { return SecretRemove(*rm_name, context); });
  });
}

}  // namespace ql::cli
