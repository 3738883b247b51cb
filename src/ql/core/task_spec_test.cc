#include "ql/core/task_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"

namespace ql {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Parse(std::string_view text) {
  Result<json> r = ParseJsonStrict(text);
  EXPECT_TRUE(r.ok()) << r.status().ToString() << " in " << text;
  return r.ok() ? *r : json();
}

Result<CommandSpec> SpecFromText(std::string_view text) { return ParseCommandSpec(Parse(text)); }

void ExpectSpecError(const json& spec, std::string_view reason,
                     std::initializer_list<std::string_view> message_parts) {
  Result<CommandSpec> r = ParseCommandSpec(spec);
  ASSERT_FALSE(r.ok()) << "accepted: " << spec.dump();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().reason(), reason) << r.status().message();
  for (std::string_view part : message_parts) {
    EXPECT_THAT(r.status().message(), HasSubstr(std::string(part)));
  }
}

void ExpectTextError(std::string_view text, std::string_view reason,
                     std::initializer_list<std::string_view> message_parts) {
  ExpectSpecError(Parse(text), reason, message_parts);
}

json ShellSpec(std::string command) {
  return json{{"command", {{"kind", "shell"}, {"command", std::move(command)}}}};
}

json ArgvSpec(std::string file, json args = json::array()) {
  return json{
      {"command", {{"kind", "argv"}, {"file", std::move(file)}, {"args", std::move(args)}}}};
}

json WithEnv(json env) {
  json spec = ShellSpec("true");
  spec["environment"] = std::move(env);
  return spec;
}

// --- ParseCommandSpec: accepted forms and normalisation ---

TEST(ParseCommandSpecTest, ArgvWithDefaults) {
  Result<CommandSpec> r = SpecFromText(R"({"command":{"kind":"argv","file":"/bin/echo"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& argv = std::get<ArgvCommand>(r->command);
  EXPECT_EQ(argv.file, "/bin/echo");
  EXPECT_TRUE(argv.args.empty());
  EXPECT_TRUE(r->environment.empty());
  EXPECT_FALSE(r->working_directory.has_value());
  EXPECT_EQ(r->timeout_ms, 86'400'000);
  EXPECT_EQ(*CanonicalJson(CommandSpecToJson(*r)),
            R"({"command":{"args":[],"file":"/bin/echo","kind":"argv"},"environment":{},)"
            R"("timeoutMs":86400000})");
}

TEST(ParseCommandSpecTest, ShellDefaultsToBinSh) {
  Result<CommandSpec> r = SpecFromText(R"({"command":{"kind":"shell","command":"echo hi"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::get<ShellCommand>(r->command).shell, "/bin/sh");
  EXPECT_EQ(std::get<ShellCommand>(r->command).command, "echo hi");
  EXPECT_EQ(*CanonicalJson(CommandSpecToJson(*r)),
            R"({"command":{"command":"echo hi","kind":"shell","shell":"/bin/sh"},)"
            R"("environment":{},"timeoutMs":86400000})");
  r = SpecFromText(R"({"command":{"kind":"shell","command":"echo $0","shell":"/bin/bash"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::get<ShellCommand>(r->command).shell, "/bin/bash");
}

TEST(ParseCommandSpecTest, KeepsEverythingAndSortsEnvironment) {
  Result<CommandSpec> r = SpecFromText(R"({
    "workingDirectory": "/srv/jobs", "timeoutMs": 30000,
    "environment": {"TZ": "Asia/Shanghai", "A_B": "1", "LANG": "zh_CN.UTF-8", "EMPTY": ""},
    "command": {"kind": "argv", "file": "/usr/bin/env", "args": ["", "héllo 世界", "a b", ""]}
  })");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& argv = std::get<ArgvCommand>(r->command);
  EXPECT_EQ(argv.args, (std::vector<std::string>{"", "héllo 世界", "a b", ""}));
  EXPECT_EQ(r->environment,
            (std::vector<std::pair<std::string, std::string>>{
                {"A_B", "1"}, {"EMPTY", ""}, {"LANG", "zh_CN.UTF-8"}, {"TZ", "Asia/Shanghai"}}));
  EXPECT_EQ(r->working_directory, "/srv/jobs");
  EXPECT_EQ(r->timeout_ms, 30000);
}

TEST(ParseCommandSpecTest, PinsTheCanonicalEncodingOfTheSampleSpec) {
  // The same document as CanonicalJsonTest.PinsTheEncodingOfASampleSpec: nothing to normalise.
  Result<CommandSpec> r = SpecFromText(R"({
    "workingDirectory": "/srv/jobs", "timeoutMs": 30000,
    "environment": {"TZ": "Asia/Shanghai", "A_B": "1", "LANG": "zh_CN.UTF-8"},
    "command": {"kind": "argv", "file": "/usr/bin/env",
                "args": ["echo", "h\u00e9llo 世界", "a\"b\\c\n\t\u0001"]}
  })");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string canonical = *CanonicalJson(CommandSpecToJson(*r));
  EXPECT_EQ(Sha256Hex(canonical),
            "94d428c36acc3b68403b638f5423ea9171d5f3f389922e9010e71e92769e90ab");
}

TEST(ParseCommandSpecTest, NormalisedFormRoundTrips) {
  for (std::string_view text : {
           R"({"command":{"kind":"argv","file":"/bin/echo","args":["a",""]},"timeoutMs":1})",
           R"({"command":{"kind":"shell","command":"x","shell":"/bin/bash"},)"
           R"("environment":{"B":"2","A":"1"},"workingDirectory":"/"})",
       }) {
    Result<CommandSpec> first = SpecFromText(text);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    Result<CommandSpec> second = ParseCommandSpec(CommandSpecToJson(*first));
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_EQ(*second, *first);
    EXPECT_EQ(*CanonicalJson(CommandSpecToJson(*second)),
              *CanonicalJson(CommandSpecToJson(*first)));
  }
}

TEST(ParseCommandSpecTest, ExplicitDefaultsNormaliseLikeOmittedOnes) {
  Result<CommandSpec> implicit = SpecFromText(R"({"command":{"kind":"shell","command":"x"}})");
  Result<CommandSpec> explicit_defaults =
      SpecFromText(R"({"timeoutMs":86400000,"environment":{},)"
                   R"("command":{"shell":"/bin/sh","command":"x","kind":"shell"}})");
  ASSERT_TRUE(implicit.ok() && explicit_defaults.ok());
  EXPECT_EQ(*implicit, *explicit_defaults);
}

TEST(ParseCommandSpecTest, LimitsAndNetworkParseAndNormalise) {
  Result<CommandSpec> r = SpecFromText(
      R"({"command":{"kind":"shell","command":"x"},)"
      R"("limits":{"memoryMib":256,"pids":64,"cpuSeconds":60,"openFiles":1024},"network":"none"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->limits.memory_mib, 256);
  EXPECT_EQ(r->limits.pids, 64);
  EXPECT_EQ(r->limits.cpu_seconds, 60);
  EXPECT_EQ(r->limits.open_files, 1024);
  EXPECT_FALSE(r->network);
  const json normal = CommandSpecToJson(*r);
  EXPECT_EQ(normal["network"], "none");
  EXPECT_EQ(normal["limits"]["pids"], 64);
  EXPECT_EQ(*ParseCommandSpec(normal), *r);
  // "host" and empty limits are the defaults: written out nowhere, so digests of specs that
  // never named them stay as they were.
  Result<CommandSpec> plain = SpecFromText(R"({"command":{"kind":"shell","command":"x"}})");
  Result<CommandSpec> explicit_defaults =
      SpecFromText(R"({"command":{"kind":"shell","command":"x"},"limits":{},"network":"host"})");
  ASSERT_TRUE(plain.ok() && explicit_defaults.ok());
  EXPECT_EQ(*plain, *explicit_defaults);
  EXPECT_FALSE(CommandSpecToJson(*plain).contains("limits"));
  EXPECT_FALSE(CommandSpecToJson(*plain).contains("network"));
}

TEST(ParseCommandSpecTest, RejectsLimitsOutOfRangeAndUnknownNetworks) {
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"limits":{"memoryMib":3}})",
                  "spec_invalid_limit", {"spec.limits.memoryMib", "4 .. 1048576"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"limits":{"pids":0}})",
                  "spec_invalid_limit", {"spec.limits.pids"});
  ExpectTextError(
      R"({"command":{"kind":"shell","command":"x"},"limits":{"openFiles":9223372036854775807}})",
      "spec_invalid_limit", {"spec.limits.openFiles"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"limits":{"pids":"5"}})",
                  "spec_invalid_type", {"spec.limits.pids"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"limits":{"swap":1}})",
                  "spec_unknown_field", {"spec.limits.swap"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"limits":[]})", "spec_invalid_type",
                  {"spec.limits"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"network":"bridge"})",
                  "spec_invalid_network", {"spec.network", "bridge"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"isolation":"root"})",
                  "spec_invalid_isolation", {"spec.isolation", "root"});
  ExpectTextError(
      R"({"command":{"kind":"shell","command":"x"},"isolation":"none","network":"none"})",
      "spec_invalid_isolation", {"spec.isolation", "needs namespaces"});
}

TEST(ParseCommandSpecTest, IsolationNoneIsWrittenOnlyWhenAsked) {
  Result<CommandSpec> r =
      SpecFromText(R"({"command":{"kind":"shell","command":"x"},"isolation":"none"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->unconfined);
  EXPECT_EQ(CommandSpecToJson(*r)["isolation"], "none");
  Result<CommandSpec> confined =
      SpecFromText(R"({"command":{"kind":"shell","command":"x"},"isolation":"confined"})");
  ASSERT_TRUE(confined.ok());
  EXPECT_FALSE(CommandSpecToJson(*confined).contains("isolation"));
}

// --- ParseCommandSpec: every rule ---

TEST(ParseCommandSpecTest, RejectsUnknownFieldsNamingThePath) {
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"retries":3})", "spec_unknown_field",
                  {"spec.retries", "unknown field"});
  ExpectTextError(R"({"command":{"kind":"argv","file":"/bin/x","foo":1}})", "spec_unknown_field",
                  {"spec.command.foo", "argv command", "kind, file, args"});
  ExpectTextError(R"({"command":{"kind":"argv","file":"/bin/x","shell":"/bin/sh"}})",
                  "spec_unknown_field", {"spec.command.shell"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x","args":[]}})", "spec_unknown_field",
                  {"spec.command.args", "shell command"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"working dir":"/"})",
                  "spec_unknown_field", {"spec[\"working dir\"]"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"WorkingDirectory":"/"})",
                  "spec_unknown_field", {"spec.WorkingDirectory"});
}

TEST(ParseCommandSpecTest, RejectsMissingRequiredFields) {
  ExpectTextError(R"({})", "spec_missing_field", {"spec.command"});
  ExpectTextError(R"({"command":{}})", "spec_missing_field", {"spec.command.kind"});
  ExpectTextError(R"({"command":{"kind":"argv"}})", "spec_missing_field", {"spec.command.file"});
  ExpectTextError(R"({"command":{"kind":"shell"}})", "spec_missing_field",
                  {"spec.command.command"});
}

TEST(ParseCommandSpecTest, RejectsWrongTypesNamingPathAndValue) {
  ExpectTextError(R"([])", "spec_invalid_type", {"spec: expected an object, got array"});
  ExpectTextError(R"("echo hi")", "spec_invalid_type", {"spec:", "string \"echo hi\""});
  ExpectTextError(R"({"command":"echo hi"})", "spec_invalid_type",
                  {"spec.command: expected an object", "string \"echo hi\""});
  ExpectTextError(R"({"command":{"kind":1}})", "spec_invalid_type",
                  {"spec.command.kind", "integer 1"});
  ExpectTextError(R"({"command":{"kind":"argv","file":7}})", "spec_invalid_type",
                  {"spec.command.file", "integer 7"});
  ExpectTextError(R"({"command":{"kind":"argv","file":"/x","args":"a b"}})", "spec_invalid_type",
                  {"spec.command.args: expected an array", "string \"a b\""});
  ExpectTextError(R"({"command":{"kind":"argv","file":"/x","args":["a",2]}})", "spec_invalid_type",
                  {"spec.command.args[1]", "integer 2"});
  ExpectTextError(R"({"command":{"kind":"shell","command":true}})", "spec_invalid_type",
                  {"spec.command.command", "boolean true"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x","shell":null}})", "spec_invalid_type",
                  {"spec.command.shell", "null"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"environment":["A=1"]})",
                  "spec_invalid_type", {"spec.environment: expected an object", "array"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"environment":{"PORT":8080}})",
                  "spec_invalid_type", {"spec.environment.PORT", "integer 8080"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"workingDirectory":null})",
                  "spec_invalid_type", {"spec.workingDirectory", "null"});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"timeoutMs":"30s"})",
                  "spec_invalid_type", {"spec.timeoutMs", "string \"30s\""});
  ExpectTextError(R"({"command":{"kind":"shell","command":"x"},"timeoutMs":true})",
                  "spec_invalid_type", {"spec.timeoutMs", "boolean true"});
  json fractional = ShellSpec("x");
  fractional["timeoutMs"] = 1000.5;  // only reachable when a caller skipped ParseJsonStrict
  ExpectSpecError(fractional, "spec_invalid_type", {"spec.timeoutMs", "number 1000.5"});
}

TEST(ParseCommandSpecTest, RejectsUnknownCommandKinds) {
  ExpectTextError(R"({"command":{"kind":"exec","file":"/x"}})", "spec_invalid_command_kind",
                  {"spec.command.kind", "\"exec\"", "\"argv\", \"shell\" or \"script\""});
  ExpectTextError(R"({"command":{"kind":"ARGV","file":"/x"}})", "spec_invalid_command_kind",
                  {"\"ARGV\""});
}

TEST(ParseCommandSpecTest, AScriptCommandNamesAScriptAndIsPinnedWhenPublished) {
  // As a request names it: the script and its arguments; publishing fills in the pin.
  Result<CommandSpec> named =
      SpecFromText(R"({"command":{"kind":"script","script":"hello","args":["a"]}})");
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  const auto& script = std::get<ScriptCommand>(named->command);
  EXPECT_EQ(script.script, "hello");
  EXPECT_EQ(script.args, std::vector<std::string>{"a"});
  EXPECT_FALSE(script.pinned());
  EXPECT_EQ(ValidateCommandSpec(*named).reason(), "spec_script_unpinned");
  // Pinned, it round-trips through its normalised JSON.
  const std::string digest(64, 'c');
  Result<CommandSpec> pinned = SpecFromText(
      R"({"command":{"kind":"script","script":"hello","version":3,"digest":")" + digest +
      R"(","scriptKind":"file","entry":"hello.py","interpreter":"python3"}})");
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_TRUE(ValidateCommandSpec(*pinned).ok());
  EXPECT_EQ(ParseCommandSpec(CommandSpecToJson(*pinned)).value(), *pinned);
  // Each field keeps its rule, named by its path.
  ExpectTextError(R"({"command":{"kind":"script"}})", "spec_missing_field",
                  {"spec.command.script"});
  ExpectTextError(R"({"command":{"kind":"script","script":"a@1"}})", "spec_invalid_script",
                  {"spec.command.script"});
  ExpectTextError(R"({"command":{"kind":"script","script":"a","version":0}})",
                  "spec_invalid_script", {"spec.command.version"});
  ExpectTextError(R"({"command":{"kind":"script","script":"a","digest":"ABC"}})",
                  "spec_invalid_script", {"spec.command.digest"});
  ExpectTextError(R"({"command":{"kind":"script","script":"a","scriptKind":"zip"}})",
                  "spec_invalid_script", {"spec.command.scriptKind"});
  ExpectTextError(R"({"command":{"kind":"script","script":"a","entry":"../x.py"}})",
                  "spec_invalid_script", {"spec.command.entry"});
  ExpectTextError(R"({"command":{"kind":"script","script":"a","interpreter":"/bin/sh"}})",
                  "spec_invalid_script", {"spec.command.interpreter", "node, python3, sh or bash"});
  ExpectTextError(R"({"command":{"kind":"script","script":"a","file":"/x"}})", "spec_unknown_field",
                  {"spec.command.file"});
  ExpectTextError(R"({"command":{"kind":"script","script":"a","args":[1]}})", "spec_invalid_type",
                  {"spec.command.args[0]"});
}

TEST(ParseCommandSpecTest, RequiresAbsoluteFileWithoutNul) {
  ExpectSpecError(ArgvSpec("bin/echo"), "spec_invalid_path",
                  {"spec.command.file", "\"bin/echo\"", "absolute"});
  ExpectSpecError(ArgvSpec(""), "spec_invalid_path", {"spec.command.file", "\"\""});
  ExpectSpecError(ArgvSpec(std::string("/bin/e\0cho", 10)), "spec_invalid_path",
                  {"spec.command.file", "NUL"});
  EXPECT_TRUE(ParseCommandSpec(ArgvSpec("/" + std::string(kMaxPathBytes - 1, 'a'))).ok());
  ExpectSpecError(ArgvSpec("/" + std::string(kMaxPathBytes, 'a')), "spec_invalid_path",
                  {"spec.command.file", "4096 bytes", "longer than 4095"});
}

TEST(ParseCommandSpecTest, LimitsArguments) {
  json args = json::array();
  for (int i = 0; i < 256; ++i) args.push_back("a" + std::to_string(i));
  Result<CommandSpec> ok = ParseCommandSpec(ArgvSpec("/bin/echo", args));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(std::get<ArgvCommand>(ok->command).args.size(), 256u);
  args.push_back("one too many");
  ExpectSpecError(ArgvSpec("/bin/echo", args), "spec_too_many_args",
                  {"spec.command.args", "257 arguments", "at most 256"});
  ExpectSpecError(ArgvSpec("/bin/echo", {"a", "b", std::string("c\0d", 3)}), "spec_invalid_arg",
                  {"spec.command.args[2]", "NUL"});
}

TEST(ParseCommandSpecTest, ValidatesShellCommands) {
  ExpectSpecError(ShellSpec(""), "spec_invalid_command", {"spec.command.command", "empty"});
  ExpectSpecError(ShellSpec(std::string("echo\0x", 6)), "spec_invalid_command",
                  {"spec.command.command", "NUL"});
  EXPECT_TRUE(ParseCommandSpec(ShellSpec("line 1\nline 2")).ok());
  for (std::string_view shell : {"/bin/zsh", "sh", "/bin/sh ", "/usr/bin/bash", "", "/BIN/SH"}) {
    json spec = ShellSpec("x");
    spec["command"]["shell"] = shell;
    ExpectSpecError(spec, "spec_invalid_shell",
                    {"spec.command.shell", QuoteForMessage(shell), "\"/bin/sh\" or \"/bin/bash\""});
  }
}

TEST(ParseCommandSpecTest, LimitsEnvironmentSize) {
  json env = json::object();
  for (int i = 0; i < 256; ++i) env["V" + std::to_string(i)] = "x";
  EXPECT_TRUE(ParseCommandSpec(WithEnv(env)).ok());
  env["V256"] = "x";
  ExpectSpecError(WithEnv(env), "spec_too_many_env",
                  {"spec.environment", "257 variables", "at most 256"});
}

TEST(ParseCommandSpecTest, ValidatesEnvironmentNames) {
  for (std::string_view name : {"1ABC", "A-B", "", "A B", "名字", "A=B", "PATH\n"}) {
    ExpectSpecError(WithEnv({{name, "v"}}), "spec_invalid_env_name",
                    {"spec.environment", QuoteForMessage(name), "[A-Za-z_][A-Za-z0-9_]*"});
  }
  ExpectSpecError(WithEnv({{"QL3_TOKEN", "v"}}), "spec_invalid_env_name",
                  {"\"QL3_TOKEN\"", "reserved prefix QL3_"});
  ExpectSpecError(WithEnv({{"QL3_", "v"}}), "spec_invalid_env_name", {"\"QL3_\""});
  ExpectSpecError(WithEnv({{"QL_RUN_ID", "v"}}), "spec_invalid_env_name",
                  {"\"QL_RUN_ID\"", "executor sets it"});
  ExpectSpecError(WithEnv({{"QL_ATTEMPT_ID", "v"}}), "spec_invalid_env_name",
                  {"\"QL_ATTEMPT_ID\""});
  Result<CommandSpec> ok = ParseCommandSpec(
      WithEnv({{"_X", ""}, {"ql3_lower", "v"}, {"QL_OTHER", "v"}, {"a1", "v"}, {"QL3", "v"}}));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->environment.size(), 5u);
}

TEST(ParseCommandSpecTest, RejectsNulInEnvironmentValues) {
  ExpectSpecError(WithEnv({{"A", std::string("x\0y", 3)}}), "spec_invalid_env_value",
                  {"spec.environment.A", "NUL"});
}

TEST(ParseCommandSpecTest, EnvironmentValuesThatLookLikeSecretRefsMustBeCanonicalRefs) {
  const SecretRef ref{"0190a5b2-7c3e-7a1b-8c4d-5e6f708192a5", "API_KEY", 2};
  Result<std::string> text = EncodeSecretRef(ref);
  ASSERT_TRUE(text.ok());
  Result<CommandSpec> spec = ParseCommandSpec(WithEnv({{"KEY", *text}, {"PLAIN", "public"}}));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  Result<std::vector<std::pair<std::string, SecretRef>>> refs =
      SecretEnvironment(spec->environment);
  ASSERT_TRUE(refs.ok()) << refs.status().ToString();
  ASSERT_EQ(refs->size(), 1u);
  EXPECT_EQ(refs->front().first, "KEY");
  EXPECT_EQ(refs->front().second, ref);
  ExpectSpecError(WithEnv({{"KEY", "qlsecret:v1:not-a-ref"}}), "spec_invalid_secret_ref",
                  {"spec.environment.KEY"});
}

TEST(ParseCommandSpecTest, DuplicateEnvironmentNamesAreCaughtByTheStrictParser) {
  Result<json> r = ParseJsonStrict(
      R"({"command":{"kind":"shell","command":"x"},"environment":{"A":"1","A":"2"}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "json_duplicate_key");
  EXPECT_THAT(r.status().message(), HasSubstr("$.environment"));
}

TEST(ParseCommandSpecTest, RequiresAbsoluteWorkingDirectory) {
  json spec = ShellSpec("x");
  spec["workingDirectory"] = "srv";
  ExpectSpecError(spec, "spec_invalid_path", {"spec.workingDirectory", "\"srv\"", "absolute"});
  spec["workingDirectory"] = "";
  ExpectSpecError(spec, "spec_invalid_path", {"spec.workingDirectory"});
  spec["workingDirectory"] = std::string("/srv\0x", 6);
  ExpectSpecError(spec, "spec_invalid_path", {"spec.workingDirectory", "NUL"});
  spec["workingDirectory"] = "/";
  EXPECT_TRUE(ParseCommandSpec(spec).ok());
}

TEST(ParseCommandSpecTest, BoundsTimeout) {
  for (int64_t ok : {int64_t{1}, int64_t{30000}, kMaxTimeoutMs}) {
    json spec = ShellSpec("x");
    spec["timeoutMs"] = ok;
    Result<CommandSpec> r = ParseCommandSpec(spec);
    ASSERT_TRUE(r.ok()) << ok;
    EXPECT_EQ(r->timeout_ms, ok);
  }
  EXPECT_EQ(kMaxTimeoutMs, 31'536'000'000);
  for (int64_t bad : {int64_t{0}, int64_t{-1}, kMaxTimeoutMs + 1, INT64_MIN, INT64_MAX}) {
    json spec = ShellSpec("x");
    spec["timeoutMs"] = bad;
    ExpectSpecError(spec, "spec_timeout_out_of_range",
                    {"spec.timeoutMs", "integer " + std::to_string(bad), "365 days"});
  }
  json spec = ShellSpec("x");
  spec["timeoutMs"] = UINT64_MAX;
  ExpectSpecError(spec, "spec_timeout_out_of_range", {"spec.timeoutMs"});
}

TEST(ParseCommandSpecTest, LimitsCanonicalSizeTo64KiB) {
  // Canonical bytes of a shell spec besides its one-character command.
  const size_t overhead =
      CanonicalJson(CommandSpecToJson(*ParseCommandSpec(ShellSpec("x"))))->size() - 1;
  EXPECT_TRUE(ParseCommandSpec(ShellSpec(std::string(65536 - overhead, 'x'))).ok());
  ExpectSpecError(ShellSpec(std::string(65537 - overhead, 'x')), "spec_too_large",
                  {"spec:", "65537 bytes", "at most 65536"});
  // Escaping counts: 10,000 newlines take 20,000 canonical bytes.
  json args = json::array();
  for (int i = 0; i < 4; ++i) args.push_back(std::string(10000, '\n'));
  ExpectSpecError(ArgvSpec("/bin/echo", args), "spec_too_large", {"spec:"});
}

TEST(ParseCommandSpecTest, RejectsInvalidUtf8FromHandBuiltJson) {
  ExpectSpecError(ShellSpec("echo \xff"), "spec_invalid_utf8", {"spec.command.command"});
  ExpectSpecError(WithEnv({{"A", "\xc0\x80"}}), "spec_invalid_utf8", {"spec.environment.A"});
  ExpectSpecError(WithEnv({{"A\xff", "v"}}), "spec_invalid_utf8", {"spec.environment"});
}

TEST(ParseCommandSpecTest, TruncatesLongValuesInMessages) {
  json spec = ShellSpec("x");
  spec["command"]["shell"] = "/bin/" + std::string(5000, 'z');
  Result<CommandSpec> r = ParseCommandSpec(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "spec_invalid_shell");
  EXPECT_LT(r.status().message().size(), 200u);
  EXPECT_THAT(r.status().message(), HasSubstr("zzz\"..."));
}

// --- ValidateCommandSpec / IsAllowedEnvName ---

TEST(ValidateCommandSpecTest, AcceptsParsedSpecsAndRejectsBrokenOnes) {
  CommandSpec spec;
  spec.command = ArgvCommand{"/bin/echo", {"hi"}};
  spec.environment = {{"A", "1"}, {"B", "2"}};
  EXPECT_TRUE(ValidateCommandSpec(spec).ok());

  CommandSpec unsorted = spec;
  unsorted.environment = {{"B", "2"}, {"A", "1"}};
  EXPECT_EQ(ValidateCommandSpec(unsorted).reason(), "spec_not_normalized");
  CommandSpec duplicate = spec;
  duplicate.environment = {{"A", "1"}, {"A", "2"}};
  EXPECT_EQ(ValidateCommandSpec(duplicate).reason(), "spec_not_normalized");
  CommandSpec reserved = spec;
  reserved.environment = {{"QL3_X", "1"}};
  EXPECT_EQ(ValidateCommandSpec(reserved).reason(), "spec_invalid_env_name");
  CommandSpec relative = spec;
  relative.command = ArgvCommand{"echo", {}};
  EXPECT_EQ(ValidateCommandSpec(relative).reason(), "spec_invalid_path");
  CommandSpec zero_timeout = spec;
  zero_timeout.timeout_ms = 0;
  EXPECT_EQ(ValidateCommandSpec(zero_timeout).reason(), "spec_timeout_out_of_range");
  CommandSpec bad_shell;
  bad_shell.command = ShellCommand{"x", "/bin/zsh"};
  EXPECT_EQ(ValidateCommandSpec(bad_shell).reason(), "spec_invalid_shell");
}

TEST(IsAllowedEnvNameTest, MatchesTheSpecRules) {
  EXPECT_TRUE(IsAllowedEnvName("PATH"));
  EXPECT_TRUE(IsAllowedEnvName("_"));
  EXPECT_TRUE(IsAllowedEnvName("QL_RUN"));
  EXPECT_FALSE(IsAllowedEnvName(""));
  EXPECT_FALSE(IsAllowedEnvName("9A"));
  EXPECT_FALSE(IsAllowedEnvName("QL3_A"));
  EXPECT_FALSE(IsAllowedEnvName("QL_RUN_ID"));
  EXPECT_FALSE(IsAllowedEnvName("QL_ATTEMPT_ID"));
}

// --- ParseTaskContent ---

constexpr std::string_view kSampleBody = R"({
  "labels": {"team": "ops", "env/prod": "1"},
  "spec": {"environment": {"TZ": "Asia/Shanghai"},
           "command": {"kind": "shell", "command": "tar czf /backup/nas.tgz /data"}},
  "name": "备份 NAS"
})";

Result<TaskContent> TaskFromText(std::string_view text) { return ParseTaskContent(Parse(text)); }

void ExpectTaskError(const json& body, std::string_view reason,
                     std::initializer_list<std::string_view> message_parts) {
  Result<TaskContent> r = ParseTaskContent(body);
  ASSERT_FALSE(r.ok()) << "accepted: " << body.dump();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().reason(), reason) << r.status().message();
  for (std::string_view part : message_parts) {
    EXPECT_THAT(r.status().message(), HasSubstr(std::string(part)));
  }
}

json MinimalBody() { return json{{"name", "job"}, {"spec", ShellSpec("true")}}; }

TEST(ParseTaskContentTest, AppliesDefaults) {
  Result<TaskContent> r = ParseTaskContent(MinimalBody());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->name, "job");
  EXPECT_EQ(r->kind, "qinglong/command@v1");
  EXPECT_TRUE(r->enabled);
  EXPECT_TRUE(r->labels.empty());
  EXPECT_EQ(std::get<ShellCommand>(r->spec.command).command, "true");
}

TEST(ParseTaskContentTest, ReadsEveryField) {
  json body = MinimalBody();
  body["kind"] = "qinglong/command@v1";
  body["labels"] = {{"team", "ops"}, {"a/b.c_d-e", ""}};
  body["enabled"] = false;
  Result<TaskContent> r = ParseTaskContent(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->enabled);
  EXPECT_EQ(r->labels, (std::map<std::string, std::string>{{"a/b.c_d-e", ""}, {"team", "ops"}}));
  Result<TaskContent> again = ParseTaskContent(TaskContentToJson(*r));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *r);
}

TEST(ParseTaskContentTest, RejectsBodyShapeErrors) {
  ExpectTaskError(json::array(), "task_invalid_type", {"body: expected an object"});
  json body = MinimalBody();
  body["mutationId"] = "m1";
  ExpectTaskError(body, "task_unknown_field", {"mutationId", "unknown field"});
  ExpectTaskError(json{{"spec", ShellSpec("x")}}, "task_missing_field", {"name"});
  ExpectTaskError(json{{"name", "job"}}, "task_missing_field", {"spec"});
  body = MinimalBody();
  body["enabled"] = "yes";
  ExpectTaskError(body, "task_invalid_type", {"enabled", "string \"yes\""});
  body = MinimalBody();
  body["enabled"] = 1;
  ExpectTaskError(body, "task_invalid_type", {"enabled", "integer 1"});
}

TEST(ParseTaskContentTest, AcceptsOnlyTheCommandKind) {
  json body = MinimalBody();
  body["kind"] = "qinglong/script@v1";
  ExpectTaskError(body, "task_kind_unsupported",
                  {"kind", "\"qinglong/script@v1\"", "qinglong/command@v1"});
  body["kind"] = "qinglong/command@v2";
  ExpectTaskError(body, "task_kind_unsupported", {"\"qinglong/command@v2\""});
  body["kind"] = 1;
  ExpectTaskError(body, "task_invalid_type", {"kind", "integer 1"});
  // The kind is judged before a spec written for another kind.
  ExpectTaskError(json{{"name", "x"}, {"kind", "qinglong/workflow@v1"}, {"spec", {{"steps", 1}}}},
                  "task_kind_unsupported", {"qinglong/workflow@v1"});
}

TEST(ParseTaskContentTest, ValidatesName) {
  json body = MinimalBody();
  body["name"] = "";
  ExpectTaskError(body, "task_invalid_name", {"name", "empty"});
  std::string chinese;
  for (int i = 0; i < 128; ++i) chinese += "任";
  body["name"] = chinese;  // 128 characters, 384 bytes
  EXPECT_TRUE(ParseTaskContent(body).ok());
  body["name"] = chinese + "务";
  ExpectTaskError(body, "task_invalid_name", {"name", "129 characters", "at most 128"});
  body["name"] = std::string(129, 'n');
  ExpectTaskError(body, "task_invalid_name", {"129 characters"});
  body["name"] = 42;
  ExpectTaskError(body, "task_invalid_name", {"name: expected a string", "integer 42"});
  body["name"] = "line\nbreak";
  ExpectTaskError(body, "task_invalid_name", {"control character U+000A"});
  body["name"] = "tab\there";
  ExpectTaskError(body, "task_invalid_name", {"U+0009"});
  body["name"] = "del\x7f";
  ExpectTaskError(body, "task_invalid_name", {"U+007F"});
  body["name"] = "c1\xc2\x85";
  ExpectTaskError(body, "task_invalid_name", {"U+0085"});
  body["name"] = "bad\xff";
  ExpectTaskError(body, "task_invalid_name", {"UTF-8"});
  body["name"] = " spaced name (ok) ";
  EXPECT_TRUE(ParseTaskContent(body).ok());
}

TEST(ParseTaskContentTest, ValidatesLabels) {
  json body = MinimalBody();
  body["labels"] = json::array();
  ExpectTaskError(body, "task_invalid_label", {"labels: expected an object", "array"});
  json labels = json::object();
  for (int i = 0; i < 32; ++i) labels["k" + std::to_string(i)] = "v";
  body["labels"] = labels;
  EXPECT_TRUE(ParseTaskContent(body).ok());
  labels["k32"] = "v";
  body["labels"] = labels;
  ExpectTaskError(body, "task_invalid_label", {"33 labels", "at most 32"});
  for (std::string_view key : {"Team", "-x", ".x", "", "a b", "a:b", "标签"}) {
    body["labels"] = {{key, "v"}};
    ExpectTaskError(body, "task_invalid_label",
                    {"label key " + QuoteForMessage(key), "[a-z0-9][a-z0-9._/-]{0,62}"});
  }
  body["labels"] = {{std::string(63, 'k'), "v"}, {"0", "v"}, {"x-._/9", "v"}};
  EXPECT_TRUE(ParseTaskContent(body).ok());
  body["labels"] = {{std::string(64, 'k'), "v"}};
  ExpectTaskError(body, "task_invalid_label", {"label key"});
  body["labels"] = {{"team", 1}};
  ExpectTaskError(body, "task_invalid_label", {"labels.team: expected a string", "integer 1"});
  std::string value;
  for (int i = 0; i < 256; ++i) value += "值";
  body["labels"] = {{"team", value}};
  EXPECT_TRUE(ParseTaskContent(body).ok());
  body["labels"] = {{"team", value + "x"}};
  ExpectTaskError(body, "task_invalid_label", {"labels.team", "257 characters", "at most 256"});
  body["labels"] = {{"team", "\xff"}};
  ExpectTaskError(body, "task_invalid_label", {"labels.team", "UTF-8"});
}

TEST(ParseTaskContentTest, ReportsSpecErrorsWithSpecPaths) {
  json body = MinimalBody();
  body["spec"]["command"]["file"] = "/bin/x";
  ExpectTaskError(body, "spec_unknown_field", {"spec.command.file"});
  body = MinimalBody();
  body["spec"]["environment"] = {{"QL3_SECRET", "x"}};
  ExpectTaskError(body, "spec_invalid_env_name", {"QL3_SECRET"});
}

// --- Canonical encoding and digest ---

TEST(TaskContentDigestTest, PinsCanonicalEncodingAndDigest) {
  Result<TaskContent> r = TaskFromText(kSampleBody);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(TaskContentCanonical(*r),
            R"({"enabled":true,"kind":"qinglong/command@v1","labels":{"env/prod":"1",)"
            R"("team":"ops"},"name":"备份 NAS","retry":{"backoff_base_ms":1000,)"
            R"("backoff_max_ms":60000,"max_attempts":1,"retry_on_lost":false,)"
            R"("safety":"unknown"},"spec":{"command":{"command":)"
            R"("tar czf /backup/nas.tgz /data","kind":"shell","shell":"/bin/sh"},)"
            R"("environment":{"TZ":"Asia/Shanghai"},"timeoutMs":86400000}})");
  // Computed independently with sha256sum over "qinglong/command@v1\0" + canonical.
  EXPECT_EQ(TaskContentDigest(*r),
            "9fb7f1baa54c6895f5212ac3c89eac45c6667a4d85e6a3cd900c40529fb11bc0");
  EXPECT_EQ(TaskContentDigest(*r), DomainDigest("qinglong/command@v1", TaskContentCanonical(*r)));
}

TEST(TaskContentDigestTest, IgnoresSpellingButNotContent) {
  const std::string base = TaskContentDigest(*TaskFromText(kSampleBody));
  Result<TaskContent> spelled_out = TaskFromText(R"({"enabled":true,
    "kind":"qinglong/command@v1", "name":"备份 NAS", "labels":{"env/prod":"1","team":"ops"},
    "spec":{"timeoutMs":86400000,"environment":{"TZ":"Asia/Shanghai"},
            "command":{"shell":"/bin/sh","command":"tar czf /backup/nas.tgz /data","kind":"shell"}}
  })");
  ASSERT_TRUE(spelled_out.ok()) << spelled_out.status().ToString();
  EXPECT_EQ(TaskContentDigest(*spelled_out), base);

  TaskContent changed = *spelled_out;
  changed.enabled = false;
  EXPECT_NE(TaskContentDigest(changed), base);
  changed = *spelled_out;
  changed.name = "备份 NAS ";
  EXPECT_NE(TaskContentDigest(changed), base);
  changed = *spelled_out;
  changed.labels["team"] = "dev";
  EXPECT_NE(TaskContentDigest(changed), base);
  changed = *spelled_out;
  changed.spec.environment[0].second = "UTC";
  EXPECT_NE(TaskContentDigest(changed), base);
  changed = *spelled_out;
  changed.spec.timeout_ms += 1;
  EXPECT_NE(TaskContentDigest(changed), base);
  changed = *spelled_out;
  std::get<ShellCommand>(changed.spec.command).shell = "/bin/bash";
  EXPECT_NE(TaskContentDigest(changed), base);
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

json BodyWithRetry(json retry) {
  json body = json::parse(kSampleBody);
  body["retry"] = std::move(retry);
  return body;
}

TEST(TaskRetryPolicyTest, ParsesAndNormalisesIntoTheDigestedContent) {
  Result<TaskContent> r = ParseTaskContent(
      BodyWithRetry({{"max_attempts", 3}, {"backoff_base_ms", 500}, {"backoff_max_ms", 4000}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->retry.max_attempts, 3);
  EXPECT_EQ(r->retry.backoff_base_ms, 500);
  EXPECT_EQ(r->retry.safety, "unknown");
  EXPECT_EQ(TaskContentToJson(*r)["retry"]["max_attempts"], 3);
  // A different policy is different content.
  EXPECT_NE(TaskContentDigest(*r), TaskContentDigest(*TaskFromText(kSampleBody)));
  // Round trip.
  EXPECT_EQ(*ParseTaskContent(TaskContentToJson(*r)), *r);
}

// Retrying timeouts is opt-in; a policy that leaves it out (or says false) has the canonical
// form and digest it had before the field existed.
TEST(TaskRetryPolicyTest, RetryOnTimeoutIsOptInAndChangesTheDigestOnlyWhenSet) {
  const std::string base = TaskContentDigest(*TaskFromText(kSampleBody));
  Result<TaskContent> off = ParseTaskContent(BodyWithRetry({{"retry_on_timeout", false}}));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->retry.retry_on_timeout);
  EXPECT_EQ(TaskContentDigest(*off), base);
  EXPECT_FALSE(TaskContentToJson(*off)["retry"].contains("retry_on_timeout"));

  Result<TaskContent> on =
      ParseTaskContent(BodyWithRetry({{"max_attempts", 2}, {"retry_on_timeout", true}}));
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->retry.retry_on_timeout);
  EXPECT_EQ(TaskContentToJson(*on)["retry"]["retry_on_timeout"], true);
  EXPECT_NE(TaskContentDigest(*on),
            TaskContentDigest(*ParseTaskContent(BodyWithRetry({{"max_attempts", 2}}))));
  EXPECT_EQ(*ParseTaskContent(TaskContentToJson(*on)), *on);
  ExpectTaskError(BodyWithRetry({{"retry_on_timeout", "yes"}}), "retry_invalid_type",
                  {"retry.retry_on_timeout"});
}

TEST(TaskRetryPolicyTest, RejectsEveryInvalidField) {
  ExpectTaskError(BodyWithRetry({{"max_attempts", 0}}), "retry_out_of_range",
                  {"retry.max_attempts", "1..16"});
  ExpectTaskError(BodyWithRetry({{"max_attempts", 17}}), "retry_out_of_range", {"17"});
  ExpectTaskError(BodyWithRetry({{"max_attempts", "3"}}), "retry_invalid_type",
                  {"retry.max_attempts"});
  ExpectTaskError(BodyWithRetry({{"backoff_base_ms", 86'400'001}}), "retry_out_of_range",
                  {"retry.backoff_base_ms"});
  ExpectTaskError(BodyWithRetry({{"backoff_base_ms", 5000}, {"backoff_max_ms", 1000}}),
                  "retry_out_of_range", {"backoff_max_ms"});
  ExpectTaskError(BodyWithRetry({{"safety", "maybe"}}), "retry_invalid_safety", {"maybe"});
  ExpectTaskError(BodyWithRetry({{"retry_on_lost", true}}), "retry_lost_requires_safety",
                  {"retry_on_lost"});
  ExpectTaskError(BodyWithRetry({{"attempts", 2}}), "retry_unknown_field", {"retry.attempts"});
  ExpectTaskError(BodyWithRetry(json::array()), "retry_invalid_type", {"retry"});
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

TEST(TaskConcurrencyTest, ParsesIntoTheDigestedContentAndStaysOutOfItWhenAbsent) {
  json body = json::parse(kSampleBody);
  body["concurrency"] = 2;
  Result<TaskContent> r = ParseTaskContent(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->concurrency, 2);
  EXPECT_EQ(TaskContentToJson(*r)["concurrency"], 2);
  EXPECT_NE(TaskContentDigest(*r), TaskContentDigest(*TaskFromText(kSampleBody)));
  EXPECT_EQ(*ParseTaskContent(TaskContentToJson(*r)), *r);
  // Without a limit the canonical content has no such field (digests of older revisions hold).
  EXPECT_FALSE(TaskContentToJson(*TaskFromText(kSampleBody)).contains("concurrency"));
}

TEST(TaskConcurrencyTest, RejectsAnythingButAnIntegerInRange) {
  for (json bad : {json(0), json(-1), json(10'001), json("2"), json(1.5), json(nullptr)}) {
    json body = json::parse(kSampleBody);
    body["concurrency"] = bad;
    Result<TaskContent> r = ParseTaskContent(body);
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_EQ(r.status().reason(), "invalid_concurrency") << bad.dump();
  }
}

TEST(TriggerContentDigestTest, CoversTheOverlapPolicyOnlyWhenItIsNotAllow) {
  TriggerRevisionRecord r;
  r.task_id = "0190d5d0-0000-7000-8000-000000000001";
  r.task_revision = 3;
  r.task_digest = std::string(64, 'a');
  r.expression = "*/5 * * * *";
  r.timezone = "UTC";
  r.misfire = "skip";
  // The digest every revision written before the policy existed carries.
  const std::string legacy = DomainDigest(
      kCronTriggerKind,
      ::ql::internal::CanonicalJsonLossy(json{{"enabled", true},
                                              {"expression", r.expression},
                                              {"misfire", r.misfire},
                                              {"task_digest", r.task_digest},
                                              {"task_id", r.task_id},
                                              {"task_revision", r.task_revision},
                                              {"timezone", r.timezone}}));
  EXPECT_EQ(TriggerContentDigest(r), legacy);
  r.overlap = "forbid";
  const std::string forbid = TriggerContentDigest(r);
  EXPECT_NE(forbid, legacy);
  r.overlap = "replace";
  EXPECT_NE(TriggerContentDigest(r), forbid);
  EXPECT_NE(TriggerContentDigest(r), legacy);
}

}  // namespace
}  // namespace ql
