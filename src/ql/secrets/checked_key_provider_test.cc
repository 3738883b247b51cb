#include "ql/secrets/checked_key_provider.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "ql/testing/fake_clock.h"

namespace ql::secrets {
namespace {

namespace fs = std::filesystem;

constexpr char kHelper[] = QL_SECRETS_TESTDATA "/key_helper.sh";

class CheckedKeyProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(InitializeSecrets().ok());
    char tmpl[] = "/tmp/ql-secrets-checked-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void WriteFile(const std::string& path, const std::string& content, mode_t mode) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  }

  std::unique_ptr<CheckedKeyProvider> Provider(KeyProviderConfig config) {
    Result<std::unique_ptr<CheckedKeyProvider>> provider =
        CheckedKeyProvider::Create(std::move(config), clock_);
    EXPECT_TRUE(provider.ok()) << provider.status().ToString();
    return provider.ok() ? std::move(provider).value() : nullptr;
  }

  // An exec provider whose helper behaves as the mode in `<dir>/mode` says (key_helper.sh).
  KeyProviderConfig SwitchableHelper(const std::string& mode) {
    SetMode(mode);
    const std::string script = dir_ + "/helper.sh";
    WriteFile(script,
              "#!/bin/sh\nexec '" + std::string(kHelper) + "' \"$(cat '" + dir_ + "/mode')\"\n",
              0700);
    KeyProviderConfig config;
    config.exec = script;
    config.exec_key_id = "kms:test-key/1";
    return config;
  }
  void SetMode(const std::string& mode) { WriteFile(dir_ + "/mode", mode, 0600); }

  std::string dir_;
  ::ql::testing::FakeClock clock_;
};

TEST_F(CheckedKeyProviderTest, WithoutAProviderItIsNeverReadyAndSealsNothing) {
  std::unique_ptr<CheckedKeyProvider> provider = Provider({});
  ASSERT_NE(provider, nullptr);
  EXPECT_EQ(provider->Check().reason(), "secret_key_provider_missing");
  clock_.Advance(10 * CheckedKeyProvider::kDefaultRecheckMs);
  EXPECT_EQ(provider->Check().reason(), "secret_key_provider_missing");
  Result<WrappedKey> wrapped = provider->Wrap(SecretBytes::Random(kDataKeyBytes));
  EXPECT_EQ(wrapped.status().reason(), "secret_key_provider_missing");
  EXPECT_EQ(provider->key_id(), "");
}

TEST_F(CheckedKeyProviderTest, AKeyFileThatCannotBeOpenedIsReportedAndPickedUpOnceItCan) {
  KeyProviderConfig config;
  config.key_file = dir_ + "/secret.key";
  std::unique_ptr<CheckedKeyProvider> provider = Provider(config);
  ASSERT_NE(provider, nullptr);
  EXPECT_EQ(provider->Check().reason(), "secret_key_file_missing");
  EXPECT_EQ(provider->Wrap(SecretBytes::Random(kDataKeyBytes)).status().reason(),
            "secret_key_file_missing");
  WriteFile(config.key_file, std::string(32, 'k'), 0644);
  EXPECT_EQ(provider->Check().reason(), "secret_key_file_mode");
  ASSERT_EQ(::chmod(config.key_file.c_str(), 0600), 0);
  ASSERT_TRUE(provider->Check().ok());  // no restart, no time passed: a failure is rechecked
  EXPECT_EQ(provider->key_id().rfind("file:", 0), 0u) << provider->key_id();
  const SecretBytes data_key = SecretBytes::Random(kDataKeyBytes);
  Result<WrappedKey> wrapped = provider->Wrap(data_key);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
  Result<SecretBytes> unwrapped = provider->Unwrap(*wrapped);
  ASSERT_TRUE(unwrapped.ok()) << unwrapped.status().ToString();
  EXPECT_TRUE(*unwrapped == data_key);
}

TEST_F(CheckedKeyProviderTest, AHelperIsProbedWithARoundTripAtMostOncePerRecheckWhileItWorks) {
  std::unique_ptr<CheckedKeyProvider> provider = Provider(SwitchableHelper("ok"));
  ASSERT_NE(provider, nullptr);
  ASSERT_TRUE(provider->Check().ok());
  EXPECT_EQ(provider->key_id(), "kms:test-key/1");
  SetMode("fail");
  EXPECT_TRUE(provider->Check().ok()) << "a passing verdict is kept until the recheck";
  clock_.Advance(CheckedKeyProvider::kDefaultRecheckMs);
  EXPECT_EQ(provider->Check().reason(), "key_provider_failed");
  SetMode("garbage");
  EXPECT_EQ(provider->Check().reason(), "key_provider_protocol");
  SetMode("other-key");  // unwraps to 32 bytes that are not the data key
  Status mismatch = provider->Check();
  EXPECT_EQ(mismatch.reason(), "key_provider_protocol");
  EXPECT_EQ(mismatch.code(), StatusCode::kCorrupt);
  SetMode("ok");
  EXPECT_TRUE(provider->Check().ok()) << "a failing verdict is rechecked at once";
}

TEST_F(CheckedKeyProviderTest, AMalformedConfigurationIsAUsageErrorBeforeAnythingIsRead) {
  KeyProviderConfig both;
  both.key_file = dir_ + "/secret.key";
  both.exec = kHelper;
  both.exec_key_id = "kms:test-key/1";
  EXPECT_EQ(CheckedKeyProvider::Create(both, clock_).status().reason(), "key_provider_conflict");
  KeyProviderConfig no_id;
  no_id.exec = kHelper;
  EXPECT_EQ(CheckedKeyProvider::Create(no_id, clock_).status().reason(),
            "key_provider_bad_config");
  KeyProviderConfig bad_id = no_id;
  bad_id.exec_key_id = "has space";
  EXPECT_EQ(CheckedKeyProvider::Create(bad_id, clock_).status().reason(), "key_id_invalid");
  KeyProviderConfig bad_timeout = no_id;
  bad_timeout.exec_key_id = "kms:test-key/1";
  bad_timeout.exec_timeout_ms = 0;
  EXPECT_EQ(CheckedKeyProvider::Create(bad_timeout, clock_).status().reason(),
            "key_provider_bad_config");
  // A key file is only read by Check: one that is missing is not a usage error.
  KeyProviderConfig missing_file;
  missing_file.key_file = dir_ + "/nowhere.key";
  EXPECT_TRUE(CheckedKeyProvider::Create(missing_file, clock_).ok());
}

}  // namespace
}  // namespace ql::secrets
