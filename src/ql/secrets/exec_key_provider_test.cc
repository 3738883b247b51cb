#include "ql/secrets/exec_key_provider.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "ql/core/canonical_json.h"
#include "ql/secrets/envelope.h"
#include "ql/secrets/file_key_provider.h"

namespace ql::secrets {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kHelper[] = QL_SECRETS_TESTDATA "/key_helper.sh";
constexpr char kProject[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a5";

class ExecKeyProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(InitializeSecrets().ok());
    char tmpl[] = "/tmp/ql-secrets-exec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ExecKeyProvider> Provider(std::vector<std::string> args,
                                            int64_t timeout_ms = 10'000,
                                            std::string key_id = "kms:test-key/1") {
    std::vector<std::string> command = {kHelper};
    command.insert(command.end(), args.begin(), args.end());
    Result<std::unique_ptr<ExecKeyProvider>> provider =
        ExecKeyProvider::Create({command, std::move(key_id), timeout_ms}, SystemClock());
    EXPECT_TRUE(provider.ok()) << provider.status().ToString();
    return provider.ok() ? std::move(provider).value() : nullptr;
  }

  std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Returns a key wrapped by the helper in `ok` mode.
  WrappedKey WrappedByHelper() {
    Result<WrappedKey> wrapped = Provider({"ok"})->Wrap(SecretBytes::Random(kDataKeyBytes));
    EXPECT_TRUE(wrapped.ok()) << wrapped.status().ToString();
    return wrapped.ok() ? *wrapped : WrappedKey{};
  }

  std::string dir_;
};

TEST_F(ExecKeyProviderTest, WrapsAndUnwrapsThroughTheHelper) {
  const std::string record = dir_ + "/request.json";
  std::unique_ptr<ExecKeyProvider> provider = Provider({"record", record});
  SecretBytes data_key = SecretBytes::Random(kDataKeyBytes);
  Result<WrappedKey> wrapped = provider->Wrap(data_key);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
  EXPECT_EQ(wrapped->key_id, "kms:test-key/1");
  EXPECT_EQ(wrapped->ciphertext, "wrapped-by:kms:test-key/1:" + std::string(data_key.view()));

  // The request is the documented one: one JSON object, then end of input.
  Result<nlohmann::json> request = ParseJsonStrict(ReadFile(record));
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ((*request)["protocol"], "qinglong-key-provider/v1");
  EXPECT_EQ((*request)["op"], "wrap");
  EXPECT_EQ((*request)["key_id"], "kms:test-key/1");
  EXPECT_TRUE((*request)["plaintext_b64"].is_string());
  EXPECT_EQ(request->size(), 4u);

  Result<SecretBytes> unwrapped = provider->Unwrap(*wrapped);
  ASSERT_TRUE(unwrapped.ok()) << unwrapped.status().ToString();
  EXPECT_TRUE(*unwrapped == data_key);
  request = ParseJsonStrict(ReadFile(record));
  ASSERT_TRUE(request.ok());
  EXPECT_EQ((*request)["op"], "unwrap");
  EXPECT_EQ((*request)["key_id"], "kms:test-key/1");
  EXPECT_TRUE((*request)["ciphertext_b64"].is_string());
}

TEST_F(ExecKeyProviderTest, SealsAndUnsealsSecrets) {
  std::unique_ptr<ExecKeyProvider> provider = Provider({"ok"});
  SecretRef version{kProject, "API_KEY", 1};
  Result<SealedSecret> sealed = SealSecret(*provider, version, "hunter2-value");
  ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
  Result<SecretBytes> value = UnsealSecret(*provider, version, *sealed);
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(value->view(), "hunter2-value");
}

TEST_F(ExecKeyProviderTest, UnwrapAsksForTheStoredKeyId) {
  WrappedKey wrapped = WrappedByHelper();
  // A provider now configured with a newer key still unwraps under the key that wrapped.
  Result<SecretBytes> unwrapped = Provider({"ok"}, 10'000, "kms:test-key/2")->Unwrap(wrapped);
  ASSERT_TRUE(unwrapped.ok()) << unwrapped.status().ToString();
  wrapped.key_id = "kms:test-key/9";
  Status s = Provider({"ok"})->Unwrap(wrapped).status();
  EXPECT_EQ(s.reason(), "key_provider_failed");
  EXPECT_THAT(s.message(), HasSubstr("unknown key kms:test-key/9"));
}

TEST_F(ExecKeyProviderTest, AFailingHelperReportsItsStatusAndStderr) {
  Status s = Provider({"fail"})->Wrap(SecretBytes::Random(kDataKeyBytes)).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.reason(), "key_provider_failed");
  EXPECT_THAT(s.message(), HasSubstr("key_helper.sh"));
  EXPECT_THAT(s.message(), HasSubstr("(wrap)"));
  EXPECT_THAT(s.message(), HasSubstr("exited with status 3"));
  EXPECT_THAT(s.message(), HasSubstr("kms: access denied for kms:test-key/1"));

  s = Provider({"fail"})->Unwrap(WrappedByHelper()).status();
  EXPECT_EQ(s.reason(), "key_provider_failed");
  EXPECT_THAT(s.message(), HasSubstr("(unwrap)"));

  s = Provider({"signal"})->Wrap(SecretBytes::Random(kDataKeyBytes)).status();
  EXPECT_EQ(s.reason(), "key_provider_failed");
  EXPECT_THAT(s.message(), HasSubstr("killed by signal 9"));

  Result<std::unique_ptr<ExecKeyProvider>> missing =
      ExecKeyProvider::Create({{dir_ + "/no-such-helper"}, "kms:test-key/1", 1000}, SystemClock());
  ASSERT_TRUE(missing.ok());
  s = (*missing)->Wrap(SecretBytes::Random(kDataKeyBytes)).status();
  EXPECT_EQ(s.reason(), "key_provider_failed");
  EXPECT_THAT(s.message(), HasSubstr("cannot start it"));
}

TEST_F(ExecKeyProviderTest, AHangingHelperTimesOutAndItsGroupIsKilled) {
  const std::string pid_file = dir_ + "/helper.pid";
  const auto start = std::chrono::steady_clock::now();
  Status s = Provider({"hang", pid_file}, 500)->Wrap(SecretBytes::Random(kDataKeyBytes)).status();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.reason(), "key_provider_timeout");
  EXPECT_THAT(s.message(), HasSubstr("within 500 ms"));
  EXPECT_GE(elapsed, std::chrono::milliseconds(500));
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  // The helper's `sleep` ran in the helper's process group, which is gone once the killed
  // `sleep` (orphaned, so reaped by init) has been reaped.
  const pid_t group = std::atoi(ReadFile(pid_file).c_str());
  ASSERT_GT(group, 0);
  const auto reap_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int rc = 0;
  while ((rc = kill(-group, 0)) == 0 && std::chrono::steady_clock::now() < reap_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(rc, -1) << "process group " << group << " still exists";

  // Closing its output without exiting is no way around the timeout.
  s = Provider({"hang-closed"}, 300)->Unwrap(WrappedByHelper()).status();
  EXPECT_EQ(s.reason(), "key_provider_timeout");
}

TEST_F(ExecKeyProviderTest, ProtocolViolationsAreReported) {
  Status s = Provider({"garbage"})->Wrap(SecretBytes::Random(kDataKeyBytes)).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.reason(), "key_provider_protocol");
  EXPECT_THAT(s.message(), HasSubstr("JSON object"));
  EXPECT_THAT(s.message(), Not(HasSubstr("this is not JSON")));  // stdout is never quoted

  s = Provider({"short-key"})->Unwrap(WrappedByHelper()).status();
  EXPECT_EQ(s.reason(), "key_provider_protocol");
  EXPECT_THAT(s.message(), HasSubstr("32-byte data key"));
}

TEST_F(ExecKeyProviderTest, AWrongKeyFromTheHelperIsCorruptNeverGarbage) {
  SecretRef version{kProject, "API_KEY", 1};
  Result<SealedSecret> sealed = SealSecret(*Provider({"ok"}), version, "hunter2-value");
  ASSERT_TRUE(sealed.ok());
  Status s = UnsealSecret(*Provider({"other-key"}), version, *sealed).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.reason(), "secret_corrupt");
}

TEST_F(ExecKeyProviderTest, RotatesBetweenFileAndExecProviders) {
  SecretRef version{kProject, "API_KEY", 4};
  std::unique_ptr<FileKeyProvider> file =
      std::move(FileKeyProvider::FromKey(SecretBytes::Random(32))).value();
  std::unique_ptr<ExecKeyProvider> exec = Provider({"ok"});
  Result<SealedSecret> sealed = SealSecret(*file, version, "rotate-me");
  ASSERT_TRUE(sealed.ok());
  Result<WrappedKey> to_exec = RewrapDataKey(*file, *exec, sealed->key);
  ASSERT_TRUE(to_exec.ok()) << to_exec.status().ToString();
  EXPECT_EQ(to_exec->key_id, "kms:test-key/1");
  EXPECT_EQ(UnsealSecret(*exec, version, {*to_exec, sealed->value})->view(), "rotate-me");
  Result<WrappedKey> back = RewrapDataKey(*exec, *file, *to_exec);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(UnsealSecret(*file, version, {*back, sealed->value})->view(), "rotate-me");
  // A rotation whose new provider fails changes nothing and says why.
  EXPECT_EQ(RewrapDataKey(*file, *Provider({"fail"}), sealed->key).status().reason(),
            "key_provider_failed");
}

TEST_F(ExecKeyProviderTest, RefusesBadConfiguration) {
  auto reason = [](ExecKeyProviderOptions options) {
    return ExecKeyProvider::Create(std::move(options), SystemClock()).status().reason();
  };
  EXPECT_EQ(reason({{}, "k", 1000}), "key_provider_bad_config");
  EXPECT_EQ(reason({{""}, "k", 1000}), "key_provider_bad_config");
  EXPECT_EQ(reason({{kHelper, std::string("a\0b", 3)}, "k", 1000}), "key_provider_bad_config");
  EXPECT_EQ(reason({{kHelper}, "k", 0}), "key_provider_bad_config");
  EXPECT_EQ(reason({{kHelper}, "k", 600'001}), "key_provider_bad_config");
  EXPECT_EQ(reason({{kHelper}, "", 1000}), "key_id_invalid");
  EXPECT_EQ(reason({{kHelper}, "two words", 1000}), "key_id_invalid");
  EXPECT_EQ(reason({{kHelper}, std::string(257, 'k'), 1000}), "key_id_invalid");
  EXPECT_TRUE(
      ExecKeyProvider::Create({{kHelper}, std::string(256, 'k'), 1000}, SystemClock()).ok());
}

}  // namespace
}  // namespace ql::secrets
