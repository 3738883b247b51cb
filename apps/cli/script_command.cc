#include "script_command.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "output.h"
#include "ql/core/artifact.h"
#include "ql/core/digest.h"

extern char** environ;

namespace ql::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Pieces are one chunk of the server's store each (the request body limit is 1 MiB too).
constexpr size_t kPieceBytes = kArtifactChunkBytes;

bool SameHeader(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string ScriptPath(const std::string& name) { return "/api/v1/scripts/" + UrlEncode(name); }

CliResult<ScriptRef> RefOf(const std::string& text) {
  Result<ScriptRef> ref = ParseScriptRef(text);
  if (!ref.ok()) return CliError::Usage(ref.status().reason(), ref.status().message());
  return *ref;
}

std::string WithVersion(std::string path, const ScriptRef& ref,
                        std::vector<std::pair<std::string, std::string>> params = {}) {
  if (ref.version) params.emplace_back("version", std::to_string(*ref.version));
  return WithQuery(std::move(path), params);
}

// Uploads one file in pieces and returns its blob ({"digest","size"}).
CliResult<json> UploadFile(ApiClient& api, const std::string& disk_path) {
  std::ifstream in(disk_path, std::ios::binary);
  if (!in) {
    return CliError::Usage("script_path_unreadable", "cannot read " + disk_path);
  }
  std::vector<std::string> pieces;
  std::string buffer(kPieceBytes, '\0');
  json last;
  while (true) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const size_t n = static_cast<size_t>(in.gcount());
    if (n == 0 && !pieces.empty()) break;
    if (in.bad()) return CliError::Usage("script_path_unreadable", "cannot read " + disk_path);
    CliResult<json> piece = api.PostBytes("/api/v1/blobs", buffer.substr(0, n));
    if (!piece.ok()) return piece.error();
    pieces.push_back(JsonText(*piece, "digest"));
    last = *piece;
    if (n < kPieceBytes) break;
  }
  if (pieces.size() == 1) return last;
  return api.PostJson("/api/v1/blobs/compose", json{{"pieces", pieces}});
}

bool IsExecutable(const fs::path& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IXUSR) != 0;
}

// The entry of a tree pushed without --entry: the only top-level file with an interpreter.
CliResult<std::string> GuessEntry(const std::vector<LocalScriptFile>& files) {
  std::vector<std::string> candidates;
  for (const LocalScriptFile& f : files) {
    if (f.path.find('/') == std::string::npos && InterpreterForPath(f.path)) {
      candidates.push_back(f.path);
    }
  }
  if (candidates.size() == 1) return candidates[0];
  std::string listed;
  for (const std::string& c : candidates) listed += (listed.empty() ? "" : ", ") + c;
  return CliError::Usage("script_entry_required",
                         "name the file to run with --entry (top-level scripts found: " +
                             (listed.empty() ? std::string("none") : listed) + ")");
}

int ScriptPush(const std::string& name, const std::string& path,
               const std::optional<std::string>& entry, CommandContext& context) {
  Status valid = ValidateScriptName(name);
  if (!valid.ok()) return context.Fail(CliError::Usage(valid.reason(), valid.message()));
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    return context.Fail(CliError::Usage("script_path_unreadable", "no file or directory " + path));
  }
  std::vector<LocalScriptFile> files;
  json body;
  if (fs::is_directory(st)) {
    CliResult<std::vector<LocalScriptFile>> listed = ListScriptTree(path);
    if (!listed.ok()) return context.Fail(listed.error());
    files = std::move(*listed);
    if (files.empty()) {
      return context.Fail(CliError::Usage("script_path_empty", path + " holds no regular file"));
    }
    std::string chosen;
    if (entry) {
      chosen = *entry;
    } else {
      CliResult<std::string> guessed = GuessEntry(files);
      if (!guessed.ok()) return context.Fail(guessed.error());
      chosen = *guessed;
    }
    body = json{{"kind", "tree"}, {"entry", chosen}};
  } else if (fs::is_regular_file(st)) {
    files.push_back(LocalScriptFile{fs::path(path).filename().string(), path, IsExecutable(path)});
    body = json{{"kind", "file"}};
    if (entry && *entry != files[0].path) {
      return context.Fail(
          CliError::Usage("script_entry_invalid",
                          "the entry of a single file is the file itself (" + files[0].path + ")"));
    }
  } else {
    return context.Fail(
        CliError::Usage("script_path_unreadable", path + " is neither a file nor a directory"));
  }
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  json listed = json::array();
  for (const LocalScriptFile& f : files) {
    CliResult<json> blob = UploadFile(**api, f.disk_path);
    if (!blob.ok()) return context.Fail(blob.error());
    listed.push_back(json{{"path", f.path},
                          {"digest", JsonText(*blob, "digest")},
                          {"size", (*blob)["size"]},
                          {"executable", f.executable}});
  }
  body["files"] = std::move(listed);
  CliResult<json> pushed = (*api)->PostJson(ScriptPath(name) + "/versions", body);
  if (!pushed.ok()) return context.Fail(pushed.error());
  if (context.json()) {
    context.out() << JsonOutput(*pushed) << "\n";
  } else if (pushed->value("unchanged", false)) {
    context.out() << "script " << name << " unchanged: version " << JsonText(*pushed, "version")
                  << " has this content (" << JsonText(*pushed, "digest") << ")\n";
  } else {
    context.out() << "script " << name << " version " << JsonText(*pushed, "version") << " pushed ("
                  << JsonText(*pushed, "kind") << ", " << (*pushed)["files"].size() << " file"
                  << ((*pushed)["files"].size() == 1 ? "" : "s") << ", "
                  << JsonText(*pushed, "size") << " bytes, sha256 " << JsonText(*pushed, "digest")
                  << ")\n";
  }
  return kExitOk;
}

std::string TimeOrDash(const json& object, const char* key) {
  return object.contains(key) && object[key].is_string() ? object[key].get<std::string>() : "-";
}

int ScriptList(CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> listed = (*api)->GetJson("/api/v1/scripts");
  if (!listed.ok()) return context.Fail(listed.error());
  if (context.json()) {
    context.out() << JsonOutput(*listed) << "\n";
    return kExitOk;
  }
  Table table({"NAME", "LATEST", "STATUS", "UPDATED"});
  for (const json& s : listed->value("items", json::array())) {
    table.AddRow({JsonText(s, "name"), JsonText(s, "latest_version"), JsonText(s, "status"),
                  TimeOrDash(s, "updated_at")});
  }
  table.Print(context.out());
  return kExitOk;
}

CliResult<json> GetVersion(ApiClient& api, const ScriptRef& ref) {
  return api.GetJson(WithVersion(ScriptPath(ref.name), ref));
}

int ScriptShow(const std::string& ref_text, CommandContext& context) {
  CliResult<ScriptRef> ref = RefOf(ref_text);
  if (!ref.ok()) return context.Fail(ref.error());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> shown = GetVersion(**api, *ref);
  if (!shown.ok()) return context.Fail(shown.error());
  if (context.json()) {
    context.out() << JsonOutput(*shown) << "\n";
    return kExitOk;
  }
  const json& v = (*shown)["version"];
  std::ostream& out = context.out();
  out << "script:   " << JsonText(*shown, "name") << " (" << JsonText(*shown, "status")
      << ", latest version " << JsonText(*shown, "latest_version") << ")\n";
  out << "version:  " << JsonText(v, "version") << " (" << JsonText(v, "kind") << ")\n";
  out << "digest:   sha256:" << JsonText(v, "digest") << "\n";
  out << "entry:    " << JsonText(v, "entry") << "\n";
  out << "size:     " << JsonText(v, "size") << " bytes\n";
  out << "pushed:   " << TimeOrDash(v, "created_at") << "\n";
  Table table({"PATH", "SIZE", "EXEC", "DIGEST"});
  for (const json& f : v.value("files", json::array())) {
    table.AddRow({JsonText(f, "path"), JsonText(f, "size"),
                  f.value("executable", false) ? "yes" : "no", JsonText(f, "digest")});
  }
  table.Print(out);
  return kExitOk;
}

// Streams one file of a version to `sink`, checking its size and digest; returns an error when
// the bytes that arrived are not the file's.
CliResult<int> FetchFile(ApiClient& api, const ScriptRef& ref, const std::string& path,
                         const std::function<void(const char*, size_t)>& sink) {
  std::vector<std::pair<std::string, std::string>> params;
  if (!path.empty()) params.emplace_back("path", path);
  std::string want_digest;
  std::string want_size;
  Sha256Hasher hasher;
  int64_t got = 0;
  CliResult<int> status = api.GetStream(
      WithVersion(ScriptPath(ref.name) + "/content", ref, params),
      [&](const std::vector<std::pair<std::string, std::string>>& headers) {
        for (const auto& [key, value] : headers) {
          if (SameHeader(key, "X-QL-Digest")) want_digest = value;
          if (SameHeader(key, "X-QL-Size")) want_size = value;
        }
      },
      [&](const char* data, size_t size) {
        hasher.Update(std::string_view(data, size));
        got += static_cast<int64_t>(size);
        sink(data, size);
        return true;
      },
      60);
  if (!status.ok()) return status.error();
  if (hasher.FinishHex() != want_digest || std::to_string(got) != want_size) {
    return CliError::Failure("artifact_corrupt", "the bytes received (" + std::to_string(got) +
                                                     ") are not the file the server named (" +
                                                     want_size + " bytes, sha256 " + want_digest +
                                                     ")");
  }
  return *status;
}

int ScriptCat(const std::string& ref_text, const std::string& path, CommandContext& context) {
  CliResult<ScriptRef> ref = RefOf(ref_text);
  if (!ref.ok()) return context.Fail(ref.error());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<int> fetched = FetchFile(**api, *ref, path, [&](const char* data, size_t size) {
    context.out().write(data, static_cast<std::streamsize>(size));
  });
  context.out().flush();
  if (!fetched.ok()) return context.Fail(fetched.error());
  return kExitOk;
}

int ScriptHistory(const std::string& name, CommandContext& context) {
  Status valid = ValidateScriptName(name);
  if (!valid.ok()) return context.Fail(CliError::Usage(valid.reason(), valid.message()));
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> listed = (*api)->GetJson(ScriptPath(name) + "/versions");
  if (!listed.ok()) return context.Fail(listed.error());
  if (context.json()) {
    context.out() << JsonOutput(*listed) << "\n";
    return kExitOk;
  }
  Table table({"VERSION", "KIND", "ENTRY", "SIZE", "PUSHED", "DIGEST"});
  for (const json& v : listed->value("items", json::array())) {
    table.AddRow({JsonText(v, "version"), JsonText(v, "kind"), JsonText(v, "entry"),
                  JsonText(v, "size"), TimeOrDash(v, "created_at"), JsonText(v, "digest")});
  }
  table.Print(context.out());
  return kExitOk;
}

// A file downloaded for diff, removed with this object.
class TempFile {
 public:
  TempFile() {
    char name[] = "/tmp/ql-script-diff-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd >= 0) {
      ::close(fd);
      path_ = name;
    }
  }
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

CliResult<int> Download(ApiClient& api, const ScriptRef& ref, const std::string& path,
                        const std::string& to) {
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  if (!out) return CliError::Failure("internal", "cannot write " + to);
  return FetchFile(api, ref, path, [&](const char* data, size_t size) {
    out.write(data, static_cast<std::streamsize>(size));
  });
}

// Runs `diff -u` with the two labels; its output goes to stdout.
int RunDiff(const std::string& label_a, const std::string& a, const std::string& label_b,
            const std::string& b, std::ostream& out) {
  out.flush();
  std::fflush(stdout);
  std::vector<std::string> args = {"diff", "-u", "--label", label_a, "--label", label_b, a, b};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, "diff", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int ScriptDiff(const std::string& ref_text, const std::optional<std::string>& other,
               CommandContext& context) {
  CliResult<ScriptRef> ref = RefOf(ref_text);
  if (!ref.ok()) return context.Fail(ref.error());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  // B: the version named (latest by default); A: the one given second, else the one before B.
  CliResult<json> b = GetVersion(**api, *ref);
  if (!b.ok()) return context.Fail(b.error());
  const int64_t b_version = (*b)["version"].value("version", int64_t{0});
  ScriptRef a_ref{ref->name, std::nullopt};
  if (other) {
    CliResult<ScriptRef> parsed = RefOf(ref->name + "@" + *other);
    if (!parsed.ok()) return context.Fail(parsed.error());
    a_ref = *parsed;
  } else {
    if (b_version <= 1) {
      return context.Fail(CliError::Usage(
          "script_diff_nothing", "version " + std::to_string(b_version) +
                                     " is the first; name another version to compare with"));
    }
    a_ref.version = b_version - 1;
  }
  CliResult<json> a = GetVersion(**api, a_ref);
  if (!a.ok()) return context.Fail(a.error());
  const std::string a_name = ref->name + "@" + std::to_string(*a_ref.version);
  const std::string b_name = ref->name + "@" + std::to_string(b_version);
  ScriptRef b_ref{ref->name, b_version};
  std::map<std::string, std::pair<json, json>> files;  // path -> (in a, in b)
  for (const json& f : (*a)["version"].value("files", json::array())) {
    files[JsonText(f, "path")].first = f;
  }
  for (const json& f : (*b)["version"].value("files", json::array())) {
    files[JsonText(f, "path")].second = f;
  }
  std::ostream& out = context.out();
  int changed = 0;
  for (const auto& [path, pair] : files) {
    const json& fa = pair.first;
    const json& fb = pair.second;
    if (!fa.is_null() && !fb.is_null() && JsonText(fa, "digest") == JsonText(fb, "digest")) {
      continue;
    }
    ++changed;
    TempFile ta;
    TempFile tb;
    if (ta.path().empty() || tb.path().empty()) {
      return context.Fail(CliError::Failure("internal", "cannot make a temporary file"));
    }
    if (!fa.is_null()) {
      CliResult<int> got = Download(**api, a_ref, path, ta.path());
      if (!got.ok()) return context.Fail(got.error());
    }
    if (!fb.is_null()) {
      CliResult<int> got = Download(**api, b_ref, path, tb.path());
      if (!got.ok()) return context.Fail(got.error());
    }
    const std::string label_a = fa.is_null() ? "/dev/null" : a_name + "/" + path;
    const std::string label_b = fb.is_null() ? "/dev/null" : b_name + "/" + path;
    if (RunDiff(label_a, ta.path(), label_b, tb.path(), out) < 0) {
      return context.Fail(CliError::Failure(
          "diff_unavailable", "cannot run diff (install diffutils) to compare " + path));
    }
  }
  if (changed == 0) out << a_name << " and " << b_name << " hold the same files\n";
  return kExitOk;
}

int ScriptRemove(const std::string& name, CommandContext& context) {
  Status valid = ValidateScriptName(name);
  if (!valid.ok()) return context.Fail(CliError::Usage(valid.reason(), valid.message()));
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> deleted = (*api)->DeleteJson(ScriptPath(name));
  if (!deleted.ok()) return context.Fail(deleted.error());
  if (context.json()) {
    context.out() << JsonOutput(*deleted) << "\n";
  } else {
    context.out() << "script " << name
                  << " deleted: versions tasks still pin stay until retention removes them\n";
  }
  return kExitOk;
}

}  // namespace

CliResult<std::vector<LocalScriptFile>> ListScriptTree(const std::string& dir) {
  std::vector<LocalScriptFile> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return CliError::Usage("script_path_unreadable", "cannot read " + dir);
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return CliError::Usage("script_path_unreadable", "cannot read below " + dir);
    const fs::directory_entry& entry = *it;
    if (entry.path().filename() == ".git" && entry.is_directory()) {
      it.disable_recursion_pending();
      continue;
    }
    if (entry.is_symlink() || !entry.is_regular_file()) continue;
    std::string rel = fs::relative(entry.path(), dir).generic_string();
    out.push_back(LocalScriptFile{rel, entry.path().string(), IsExecutable(entry.path())});
  }
  std::sort(out.begin(), out.end(),
            [](const LocalScriptFile& a, const LocalScriptFile& b) { return a.path < b.path; });
  return out;
}

void RegisterScriptCommands(CLI::App& app) {
  CLI::App* script =
      app.add_subcommand("script", "Push, read and compare the scripts of a project");
  script->require_subcommand(1);
  script->fallthrough();

  struct PushArgs {
    std::string name;
    std::string path;
    std::optional<std::string> entry;
  };
  auto push_args = std::make_shared<PushArgs>();
  CLI::App* push =
      script->add_subcommand("push", "Push a file or a directory as the script's next version");
  push->fallthrough();
  push->add_option("name", push_args->name, "Script name")->required();
  push->add_option("path", push_args->path, "File or directory")->required();
  push->add_option_function<std::string>(
      "--entry", [push_args](const std::string& v) { push_args->entry = v; },
      "The file of a directory that runs (default: its only top-level .js/.py/.sh/.bash file)");
  push->callback([push, push_args] {
    RunCommand(*push, [&](CommandContext& context) {
      return ScriptPush(push_args->name, push_args->path, push_args->entry, context);
    });
  });

  CLI::App* list = script->add_subcommand("list", "List scripts: names, latest versions");
  list->fallthrough();
  list->callback(
      [list] { RunCommand(*list, [](CommandContext& context) { return ScriptList(context); }); });

  auto show_ref = std::make_shared<std::string>();
  CLI::App* show = script->add_subcommand("show", "Show a version: digest, entry and files");
  show->fallthrough();
  show->add_option("script", *show_ref, "NAME or NAME@VERSION")->required();
  show->callback([show, show_ref] {
    RunCommand(*show, [&](CommandContext& context) { return ScriptShow(*show_ref, context); });
  });

  struct CatArgs {
    std::string ref;
    std::string path;
  };
  auto cat_args = std::make_shared<CatArgs>();
  CLI::App* cat = script->add_subcommand("cat", "Print a file of a version (its entry by default)");
  cat->fallthrough();
  cat->add_option("script", cat_args->ref, "NAME or NAME@VERSION")->required();
  cat->add_option("--path", cat_args->path, "The file of a directory script to print");
  cat->callback([cat, cat_args] {
    RunCommand(*cat, [&](CommandContext& context) {
      return ScriptCat(cat_args->ref, cat_args->path, context);
    });
  });

  auto history_name = std::make_shared<std::string>();
  CLI::App* history = script->add_subcommand("history", "List a script's versions, newest first");
  history->fallthrough();
  history->add_option("name", *history_name, "Script name")->required();
  history->callback([history, history_name] {
    RunCommand(*history,
               [&](CommandContext& context) { return ScriptHistory(*history_name, context); });
  });

  struct DiffArgs {
    std::string ref;
    std::optional<std::string> other;
  };
  auto diff_args = std::make_shared<DiffArgs>();
  CLI::App* diff = script->add_subcommand(
      "diff", "Compare two versions (unified diff): NAME[@B] [A], A defaults to B's predecessor");
  diff->fallthrough();
  diff->add_option("script", diff_args->ref, "NAME or NAME@VERSION (default: the latest)")
      ->required();
  diff->add_option_function<std::string>(
      "other", [diff_args](const std::string& v) { diff_args->other = v; },
      "The version to compare with");
  diff->callback([diff, diff_args] {
    RunCommand(*diff, [&](CommandContext& context) {
      return ScriptDiff(diff_args->ref, diff_args->other, context);
    });
  });

  auto rm_name = std::make_shared<std::string>();
  CLI::App* rm = script->add_subcommand("rm", "Delete a script (pinned versions stay)");
  rm->fallthrough();
  rm->add_option("name", *rm_name, "Script name")->required();
  rm->callback([rm, rm_name] {
    RunCommand(*rm, [&](CommandContext& context) { return ScriptRemove(*rm_name, context); });
  });
}

}  // namespace ql::cli
