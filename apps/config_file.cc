#include "config_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>

namespace ql {
namespace {

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const size_t end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

bool IsSettingName(const std::string& key) {
  if (key.empty() || key.front() == '-') return false;
  for (char c : key) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

std::optional<bool> ParseBool(const std::string& value) {
  static const std::set<std::string> kTrue = {"true", "yes", "on", "1"};
  static const std::set<std::string> kFalse = {"false", "no", "off", "0"};
  if (kTrue.count(value) != 0) return true;
  if (kFalse.count(value) != 0) return false;
  return std::nullopt;
}

// A quoted value: `"..."` with \" and \\, then nothing but a comment. Empty on error.
std::optional<std::string> Unquote(const std::string& text) {
  std::string out;
  size_t i = 1;
  for (; i < text.size() && text[i] != '"'; ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\')) {
      ++i;
    }
    out += text[i];
  }
  if (i >= text.size()) return std::nullopt;
  const std::string rest = Trim(text.substr(i + 1));
  if (!rest.empty() && rest.front() != '#') return std::nullopt;
  return out;
}

std::string Where(const std::string& path, int line) {
  return path + ":" + std::to_string(line) + ": ";
}

Status Invalid(const std::string& path, int line, const std::string& what) {
  return InvalidArgument("config_file_invalid", Where(path, line) + what);
}

// The flag names (without --) the command line gives from `first_arg` on.
std::set<std::string> GivenFlags(const std::vector<std::string>& args, size_t first_arg) {
  std::set<std::string> given;
  for (size_t i = first_arg; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      const size_t eq = arg.find('=');
      given.insert(arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
    }
  }
  return given;
}

bool EnvironmentSet(const ConfigTarget& target, const std::string& key) {
  auto it = target.environment.find(key);
  if (it == target.environment.end()) return false;
  const char* value = std::getenv(it->second.c_str());
  return value != nullptr && *value != '\0';
}

// True when the command line or the environment gives `key` or another flag of its group.
bool Overridden(const ConfigTarget& target, const std::set<std::string>& given,
                const std::string& key) {
  std::vector<std::string> names = {key};
  for (const auto& group : target.groups) {
    if (std::find(group.begin(), group.end(), key) != group.end()) {
      names.insert(names.end(), group.begin(), group.end());
    }
  }
  for (const std::string& name : names) {
    if (given.count(name) != 0 || EnvironmentSet(target, name)) return true;
  }
  return false;
}

// What ParseWithConfigFile applied in this process, for WithConfigLine.
std::string& AppliedPath() {
  static std::string path;
  return path;
}
std::vector<ConfigSetting>& AppliedSettings() {
  static std::vector<ConfigSetting> settings;
  return settings;
}

bool TakesSeveral(const CLI::Option& option) {
  const CLI::MultiOptionPolicy policy = option.get_multi_option_policy();
  return policy == CLI::MultiOptionPolicy::TakeAll || policy == CLI::MultiOptionPolicy::Join ||
         option.get_items_expected_max() > 1;
}

}  // namespace

Result<std::vector<ConfigSetting>> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return InvalidArgument("config_file_unreadable",
                           "cannot read configuration file " + path + ": " + std::strerror(errno));
  }
  std::vector<ConfigSetting> settings;
  std::string text;
  int line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    const std::string trimmed = Trim(text);
    if (trimmed.empty() || trimmed.front() == '#') continue;
    const size_t eq = trimmed.find('=');
    if (eq == std::string::npos) {
      return Invalid(path, line, "expected `key = value`, got '" + trimmed + "'");
    }
    ConfigSetting setting;
    setting.key = Trim(trimmed.substr(0, eq));
    setting.line = line;
    if (setting.key.compare(0, 2, "--") == 0 && IsSettingName(setting.key.substr(2))) {
      return Invalid(path, line,
                     "write the setting as '" + setting.key.substr(2) + "', without --");
    }
    if (!IsSettingName(setting.key)) {
      return Invalid(path, line,
                     "'" + setting.key +
                         "' is not a setting name (a long flag without --, "
                         "lower case, e.g. listen)");
    }
    std::string value = Trim(trimmed.substr(eq + 1));
    if (!value.empty() && value.front() == '"') {
      std::optional<std::string> unquoted = Unquote(value);
      if (!unquoted) {
        return Invalid(path, line,
                       "the quoted value of '" + setting.key +
                           "' does not end with a quote (or has text after it)");
      }
      value = *unquoted;
    } else {
      // A comment may follow an unquoted value after white space.
      for (size_t i = 1; i < value.size(); ++i) {
        if (value[i] == '#' && (value[i - 1] == ' ' || value[i - 1] == '\t')) {
          value = Trim(value.substr(0, i));
          break;
        }
      }
      if (value.empty()) {
        return Invalid(path, line,
                       "'" + setting.key + "' has no value (remove the line for the default)");
      }
    }
    setting.value = value;
    settings.push_back(std::move(setting));
  }
  if (in.bad()) {
    return InvalidArgument("config_file_unreadable", "cannot read configuration file " + path);
  }
  return settings;
}

std::string ConfigPathArgument(const std::vector<std::string>& args, size_t first_arg) {
  for (size_t i = first_arg; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (args[i] == "--config" && i + 1 < args.size()) return args[i + 1];
    if (args[i].compare(0, 9, "--config=") == 0) return args[i].substr(9);
  }
  return "";
}

Result<MergedCommandLine> ApplyConfigFile(const std::string& path,
                                          const std::vector<std::string>& args,
                                          const ConfigTarget& target) {
  QL_ASSIGN_OR_RETURN(std::vector<ConfigSetting> settings, ReadConfigFile(path));
  const std::set<std::string> given = GivenFlags(args, target.first_arg);
  std::map<std::string, int> first_line;
  MergedCommandLine merged;
  std::vector<std::string> inserted;
  for (const ConfigSetting& setting : settings) {
    if (setting.key == "config" || setting.key == "help" || setting.key == "version") {
      return Invalid(path, setting.line, "'" + setting.key + "' cannot be set in a file");
    }
    const CLI::Option* option = target.command->get_option_no_throw("--" + setting.key);
    if (option == nullptr) {
      if (target.also_known != nullptr &&
          target.also_known->get_option_no_throw("--" + setting.key) != nullptr) {
        continue;
      }
      return Invalid(path, setting.line,
                     "unknown setting '" + setting.key + "' (the settings are the long flags of `" +
                         target.usage + " --help`, without --)");
    }
    auto [seen, first] = first_line.emplace(setting.key, setting.line);
    if (!first && !TakesSeveral(*option)) {
      return Invalid(path, setting.line,
                     "'" + setting.key + "' is set again (first on line " +
                         std::to_string(seen->second) + ")");
    }
    std::string token = "--" + setting.key;
    if (option->get_expected_max() == 0) {  // a flag
      std::optional<bool> on = ParseBool(setting.value);
      if (!on) {
        return Invalid(path, setting.line,
                       "'" + setting.key + "' takes true or false, got '" + setting.value + "'");
      }
      if (!*on) continue;
    } else {
      token += "=" + setting.value;
    }
    if (Overridden(target, given, setting.key)) continue;
    inserted.push_back(std::move(token));
    merged.applied.push_back(setting);
  }
  merged.args.assign(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(
                                                      std::min(target.first_arg, args.size())));
  merged.args.insert(merged.args.end(), inserted.begin(), inserted.end());
  if (target.first_arg < args.size()) {
    merged.args.insert(merged.args.end(),
                       args.begin() + static_cast<std::ptrdiff_t>(target.first_arg), args.end());
  }
  return merged;
}

std::string ExplainParseError(const std::string& message, const std::string& path,
                              const std::vector<ConfigSetting>& applied) {
  std::string text = message;
  const std::string convert = "Could not convert: ";
  if (text.compare(0, convert.size(), convert) == 0) text = text.substr(convert.size());
  for (const ConfigSetting& setting : applied) {
    const std::string flag = "--" + setting.key;
    if (text.compare(0, flag.size(), flag) != 0) continue;
    if (text.size() > flag.size() && text[flag.size()] != ':' && text[flag.size()] != ' ') {
      continue;
    }
    return Where(path, setting.line) + setting.key + ": " + message;
  }
  return message;
}

std::string WithConfigLine(const std::string& message) {
  for (const ConfigSetting& setting : AppliedSettings()) {
    const std::string flag = "--" + setting.key;
    for (size_t at = message.find(flag); at != std::string::npos; at = message.find(flag, at + 1)) {
      const size_t end = at + flag.size();
      const bool whole =
          end == message.size() ||
          !(std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '-');
      if (whole) return Where(AppliedPath(), setting.line) + message;
    }
  }
  return message;
}

void AddConfigFlag(CLI::App& command, std::string& path) {
  command.add_option("--config", path,
                     "Read settings from this file: `key = value` lines, a key being a long "
                     "flag without -- (README \"Configuration file\"); flags given here and "
                     "the environment override it");
}

int ParseWithConfigFile(CLI::App& app, int argc, char** argv, const ConfigTarget& target,
                        int usage_exit) {
  const std::vector<std::string> args(argv, argv + argc);
  MergedCommandLine merged{args, {}};
  std::string path;
  if (target.command != nullptr) {
    path = ConfigPathArgument(args, target.first_arg);
    if (!path.empty()) {
      Result<MergedCommandLine> applied = ApplyConfigFile(path, args, target);
      if (!applied.ok()) {
        std::cerr << "error: " << applied.status().reason() << ": " << applied.status().message()
                  << "\n";
        return usage_exit;
      }
      merged = std::move(*applied);
      AppliedPath() = path;
      AppliedSettings() = merged.applied;
    }
  }
  std::vector<const char*> pointers;
  pointers.reserve(merged.args.size());
  for (const std::string& arg : merged.args) pointers.push_back(arg.c_str());
  try {
    app.parse(static_cast<int>(pointers.size()), pointers.data());
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: invalid_arguments: " << ExplainParseError(e.what(), path, merged.applied)
              << "\n";
    return usage_exit;
  }
  return -1;
}

}  // namespace ql
