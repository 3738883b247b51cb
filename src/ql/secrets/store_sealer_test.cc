#include "ql/secrets/store_sealer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "ql/secrets/file_key_provider.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"

namespace ql::secrets {
namespace {

constexpr char kProject[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a5";
constexpr char kValue[] = "sk_live_ROTATE_ME_4242";

std::unique_ptr<FileKeyProvider> NewProvider() {
  return std::move(FileKeyProvider::FromKey(SecretBytes::Random(32))).value();
}

// A migrated SQLite store in a temporary directory, with one project.
class StoreSealerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(InitializeSecrets().ok());
    char tmpl[] = "/tmp/ql-store-sealer-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    SqliteOptions options;
    options.path = dir_ + "/qinglong.db";
    Result<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(options, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    ASSERT_TRUE(store_->EnsureProject(kProject, "default", "Default", clock_.NowMs()).ok());
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Seals `value` as the next version of `name` with `sealer` and stores it (as the system).
  SecretVersionRecord Put(SecretSealer& sealer, const std::string& name, int64_t version,
                          const std::string& value) {
    Result<SealedSecretValue> sealed = sealer.Seal(SecretRef{kProject, name, version}, value);
    EXPECT_TRUE(sealed.ok()) << sealed.status().ToString();
    if (!sealed.ok()) return {};
    PutSecretCommand cmd;
    cmd.project_id = kProject;
    cmd.name = name;
    cmd.version = version;
    cmd.sealed = *sealed;
    cmd.now_ms = clock_.NowMs();
    Result<SecretVersionRecord> stored = store_->secrets().PutSecret(cmd);
    EXPECT_TRUE(stored.ok()) << stored.status().ToString();
    return stored.ok() ? *stored : SecretVersionRecord{};
  }

  Result<std::string> OpenCurrent(SecretSealer& sealer, const std::string& name) {
    QL_ASSIGN_OR_RETURN(SecretVersionRecord v,
                        store_->secrets().ResolveSecret(SecretRef{kProject, name, {}}));
    return sealer.Open(SecretRef{kProject, name, v.version}, v.sealed);
  }

  testing::FakeClock clock_;
  std::string dir_;
  std::unique_ptr<SqliteStore> store_;
};

TEST_F(StoreSealerTest, SealedVersionsOpenOnlyAsTheVersionTheyWereSealedFor) {
  auto provider = NewProvider();
  EnvelopeSealer sealer(*provider);
  const SecretVersionRecord v1 = Put(sealer, "API_KEY", 1, kValue);
  EXPECT_EQ(v1.sealed.key_id, provider->key_id());
  EXPECT_EQ(v1.sealed.sealed_value.find("ROTATE_ME"), std::string::npos);
  Result<std::string> opened = OpenCurrent(sealer, "API_KEY");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(*opened, kValue);
  // Version 1's material presented as version 2 does not open.
  Result<std::string> moved = sealer.Open(SecretRef{kProject, "API_KEY", 2}, v1.sealed);
  EXPECT_EQ(moved.status().reason(), "secret_corrupt");
}

TEST_F(StoreSealerTest, RotationRewrapsKeysWithoutTouchingCiphertextAndIsRerunnable) {
  auto old_key = NewProvider();
  auto new_key = NewProvider();
  EnvelopeSealer old_sealer(*old_key);
  EnvelopeSealer new_sealer(*new_key);
  const SecretVersionRecord a = Put(old_sealer, "A", 1, kValue);
  Put(old_sealer, "A", 2, "second value of A");
  Put(old_sealer, "B", 1, "value of B");

  Result<RotationReport> rotated =
      RotateSecretKeys(store_->secrets(), *old_key, *new_key, clock_);
  ASSERT_TRUE(rotated.ok()) << rotated.status().ToString();
  EXPECT_EQ(rotated->rewrapped, 3);
  EXPECT_EQ(rotated->skipped, 0);

  Result<SecretVersionRecord> after =
      store_->secrets().ResolveSecret(SecretRef{kProject, "A", 1});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->sealed.key_id, new_key->key_id());
  EXPECT_NE(after->sealed.wrapped_key, a.sealed.wrapped_key);
  EXPECT_EQ(after->sealed.sealed_value, a.sealed.sealed_value);
  Result<std::string> opened = new_sealer.Open(SecretRef{kProject, "A", 1}, after->sealed);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(*opened, kValue);
  Result<std::string> b = OpenCurrent(new_sealer, "B");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, "value of B");
  EXPECT_EQ(OpenCurrent(old_sealer, "B").status().reason(), "secret_key_unknown");

  // Run again: everything is under the new key already.
  Result<RotationReport> again = RotateSecretKeys(store_->secrets(), *old_key, *new_key, clock_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->rewrapped, 0);
  EXPECT_EQ(again->skipped, 3);
}

TEST_F(StoreSealerTest, ADeletedSecretsCiphertextCanNoLongerBeOpened) {
  auto provider = NewProvider();
  EnvelopeSealer sealer(*provider);
  const SecretVersionRecord v1 = Put(sealer, "GONE", 1, kValue);
  DeleteSecretCommand rm;
  rm.project_id = kProject;
  rm.name = "GONE";
  rm.now_ms = clock_.NowMs();
  ASSERT_TRUE(store_->secrets().DeleteSecret(rm).ok());
  EXPECT_EQ(OpenCurrent(sealer, "GONE").status().reason(), "secret_not_found");
  EXPECT_EQ(store_->secrets().ResolveSecret(SecretRef{kProject, "GONE", 1}).status().reason(),
            "secret_not_found");
  // What is left of the version is its ciphertext alone, which no key opens.
  Result<std::string> orphan =
      sealer.Open(SecretRef{kProject, "GONE", 1}, SealedSecretValue{"", "", v1.sealed.sealed_value});
  EXPECT_EQ(orphan.status().reason(), "secret_not_found");
  Result<std::vector<SecretVersionRecord>> live =
      store_->secrets().ListLiveVersions(std::nullopt, 10);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
}

}  // namespace
}  // namespace ql::secrets
