#include "ql/secrets/file_key_provider.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ql::secrets {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class FileKeyProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(InitializeSecrets().ok());
    char tmpl[] = "/tmp/ql-secrets-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/secret.key";
  }
  void TearDown() override { fs::remove_all(dir_); }

  void WriteFile(const std::string& path, const std::string& content, mode_t mode) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
  }

  std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
  std::string path_;
};

TEST_F(FileKeyProviderTest, CreatesAKeyFileOnFirstStartAndReusesIt) {
  bool created = false;
  Result<std::unique_ptr<FileKeyProvider>> first = FileKeyProvider::OpenOrCreate(path_, &created);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(created);
  struct stat st;
  ASSERT_EQ(lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  EXPECT_THAT((*first)->key_id(), MatchesRegex("file:[0-9a-f]{16}"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1)
      << "no temporary file is left behind";

  const std::string key = ReadFile(path_);
  Result<std::unique_ptr<FileKeyProvider>> second = FileKeyProvider::OpenOrCreate(path_, &created);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(created);
  EXPECT_EQ(ReadFile(path_), key);
  EXPECT_EQ((*second)->key_id(), (*first)->key_id());

  SecretBytes data_key = SecretBytes::Random(kDataKeyBytes);
  Result<WrappedKey> wrapped = (*first)->Wrap(data_key);
  ASSERT_TRUE(wrapped.ok());
  EXPECT_EQ(wrapped->ciphertext.size(), 72u);
  Result<SecretBytes> unwrapped = (*second)->Unwrap(*wrapped);
  ASSERT_TRUE(unwrapped.ok()) << unwrapped.status().ToString();
  EXPECT_TRUE(*unwrapped == data_key);
}

TEST_F(FileKeyProviderTest, KeyIdIsDerivedFromTheKeyAlone) {
  // Wrapped keys in every store carry this id: the derivation is fixed.
  std::string bytes;
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<char>(i));
  WriteFile(path_, bytes, 0600);
  Result<std::unique_ptr<FileKeyProvider>> provider = FileKeyProvider::Open(path_);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  EXPECT_EQ((*provider)->key_id(), "file:d8ffa75c1b8d1c1d");
  EXPECT_EQ((*FileKeyProvider::FromKey(SecretBytes::CopyOf(bytes)))->key_id(),
            (*provider)->key_id());
  bytes[31] ^= 1;
  EXPECT_NE((*FileKeyProvider::FromKey(SecretBytes::CopyOf(bytes)))->key_id(),
            (*provider)->key_id());
}

TEST_F(FileKeyProviderTest, RefusesAMissingFile) {
  Status s = FileKeyProvider::Open(path_).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.reason(), "secret_key_file_missing");
  EXPECT_THAT(s.message(), HasSubstr(path_));
}

TEST_F(FileKeyProviderTest, RefusesAFileOthersCanRead) {
  for (mode_t mode : {0644, 0640, 0604, 0660, 0602, 0610}) {
    WriteFile(path_, std::string(32, 'k'), mode);
    for (bool create : {false, true}) {
      Status s = create ? FileKeyProvider::OpenOrCreate(path_).status()
                        : FileKeyProvider::Open(path_).status();
      EXPECT_EQ(s.reason(), "secret_key_file_mode") << std::oct << mode;
      EXPECT_THAT(s.message(), HasSubstr(path_));
      EXPECT_THAT(s.message(), HasSubstr("chmod 600"));
    }
  }
  WriteFile(path_, std::string(32, 'k'), 0644);
  EXPECT_THAT(FileKeyProvider::Open(path_).status().message(), HasSubstr("mode 0644"));
  WriteFile(path_, std::string(32, 'k'), 0400);
  EXPECT_TRUE(FileKeyProvider::Open(path_).ok()) << "owner-only read is enough";
}

TEST_F(FileKeyProviderTest, RefusesAFileOfTheWrongSizeAndNeverReplacesIt) {
  for (size_t size : {0, 16, 31, 33, 64}) {
    WriteFile(path_, std::string(size, 'k'), 0600);
    for (bool create : {false, true}) {
      Status s = create ? FileKeyProvider::OpenOrCreate(path_).status()
                        : FileKeyProvider::Open(path_).status();
      EXPECT_EQ(s.reason(), "secret_key_file_size") << size;
      EXPECT_THAT(s.message(), HasSubstr(std::to_string(size) + " bytes"));
      EXPECT_THAT(s.message(), HasSubstr("exactly 32"));
    }
    EXPECT_EQ(ReadFile(path_), std::string(size, 'k'));
  }
}

TEST_F(FileKeyProviderTest, RefusesWhatIsNotARegularFile) {
  const std::string target = dir_ + "/real.key";
  WriteFile(target, std::string(32, 'k'), 0600);
  ASSERT_EQ(symlink(target.c_str(), path_.c_str()), 0);
  EXPECT_EQ(FileKeyProvider::Open(path_).status().reason(), "secret_key_file_type");
  EXPECT_EQ(FileKeyProvider::OpenOrCreate(path_).status().reason(), "secret_key_file_type");
  fs::remove(path_);
  fs::create_directory(path_);
  chmod(path_.c_str(), 0700);
  EXPECT_EQ(FileKeyProvider::Open(path_).status().reason(), "secret_key_file_type");
}

TEST_F(FileKeyProviderTest, UnwrapRefusesKeysItDidNotWrap) {
  std::unique_ptr<FileKeyProvider> a = std::move(FileKeyProvider::OpenOrCreate(path_)).value();
  std::unique_ptr<FileKeyProvider> b =
      std::move(FileKeyProvider::FromKey(SecretBytes::Random(32))).value();
  WrappedKey wrapped = *a->Wrap(SecretBytes::Random(kDataKeyBytes));
  Status s = b->Unwrap(wrapped).status();
  EXPECT_EQ(s.reason(), "secret_key_unknown");
  EXPECT_THAT(s.message(), HasSubstr(a->key_id()));
  // The same key id over another key's wrapping (a forged or mixed-up row) fails to verify.
  WrappedKey forged = *b->Wrap(SecretBytes::Random(kDataKeyBytes));
  forged.key_id = a->key_id();
  s = a->Unwrap(forged).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.reason(), "secret_corrupt");
  WrappedKey cut = wrapped;
  cut.ciphertext.pop_back();
  EXPECT_EQ(a->Unwrap(cut).status().reason(), "secret_corrupt");
  EXPECT_EQ(a->Wrap(SecretBytes::Random(16)).status().reason(), "secret_bad_key");
  EXPECT_EQ(FileKeyProvider::FromKey(SecretBytes::Random(31)).status().reason(), "secret_bad_key");
}

}  // namespace
}  // namespace ql::secrets
