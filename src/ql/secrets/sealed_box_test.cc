#include "ql/secrets/sealed_box.h"

#include <gtest/gtest.h>

namespace ql::secrets {
namespace {

TEST(SealedBoxTest, OnlyTheKeyPairsOwnerOpensWhatIsSealedToIt) {
  Result<BoxKeyPair> mine = NewBoxKeyPair();
  Result<BoxKeyPair> theirs = NewBoxKeyPair();
  ASSERT_TRUE(mine.ok() && theirs.ok());
  EXPECT_EQ(mine->public_key.size(), 43u);
  Result<std::string> sealed = SealToPublicKey(mine->public_key, "qls_session-token");
  ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
  EXPECT_EQ(sealed->find("qls_"), std::string::npos);
  Result<std::string> opened = OpenSealedBox(*mine, *sealed);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(*opened, "qls_session-token");
  EXPECT_EQ(OpenSealedBox(*theirs, *sealed).status().reason(), "sealed_box_invalid");
  std::string damaged = *sealed;
  damaged[10] = damaged[10] == 'A' ? 'B' : 'A';
  EXPECT_EQ(OpenSealedBox(*mine, damaged).status().reason(), "sealed_box_invalid");
  EXPECT_EQ(OpenSealedBox(*mine, "%%%").status().reason(), "sealed_box_invalid");
  EXPECT_EQ(SealToPublicKey("short", "x").status().reason(), "invalid_public_key");
}

}  // namespace
}  // namespace ql::secrets
